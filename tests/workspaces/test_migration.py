"""Tenancy moved from the console app to workspaces: a database at the schema before the move keeps its rows.

Migrates a real PostgreSQL database back to the last schema with `console.Workspace` (and the other apps at
their migrations of that time), writes rows through the historical models, migrates forward and reads them
through today's models; then back again, since a release can be rolled back.
"""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE_THE_MOVE = [
    ("console", "0003_identifiers_and_archive"),
    ("evaluation", "0005_fewer_indexes"),
    ("evolution", "0002_live_diagnoses_and_round_baseline"),
    ("harness", "0003_identifiers_and_archive"),
    ("serving", "0010_fewer_indexes"),
    ("training", "0001_jobs_checkpoints_matrix"),
    ("workspaces", None),
]


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    executor.loader.build_graph()
    return executor.loader.project_state([t for t in targets if t[1] is not None]).apps


def latest():
    executor = MigrationExecutor(connection)
    return executor.loader.graph.leaf_nodes()


def tables():
    with connection.cursor() as cursor:
        return set(connection.introspection.table_names(cursor))


@pytest.mark.django_db(transaction=True)
def test_rows_written_before_the_move_are_read_after_it():
    old = migrate(BEFORE_THE_MOVE)
    assert {"console_workspace", "console_membership", "console_auditevent"} <= tables()
    User = old.get_model("auth", "User")
    Workspace = old.get_model("console", "Workspace")
    Membership = old.get_model("console", "Membership")
    AuditEvent = old.get_model("console", "AuditEvent")
    Harness = old.get_model("harness", "Harness")
    ApiKey = old.get_model("serving", "ApiKey")
    user = User.objects.create(username="merchant")
    shop = Workspace.objects.create(slug="old-shop", name="Old Shop", tool_hosts=["api.shop.example"])
    Membership.objects.create(workspace=shop, user=user, role="approver")
    AuditEvent.objects.create(workspace=shop, actor_kind="user", actor_label="merchant", action="workspace.create",
                              target_type="workspace", target_id=str(shop.pk), after={"slug": "old-shop"})
    Harness.objects.create(workspace=shop, name="avatar")
    ApiKey.objects.create(workspace=shop, name="platform", prefix="hk_old", secret_hash="0" * 64,
                          created_by="merchant")

    migrate(latest())

    from harness.models import Harness as HarnessNow
    from serving.models import ApiKey as ApiKeyNow
    from workspaces.models import AuditEvent as AuditNow
    from workspaces.models import Membership as MembershipNow
    from workspaces.models import Workspace as WorkspaceNow

    assert {"workspaces_workspace", "workspaces_membership", "workspaces_auditevent"} <= tables()
    assert not {"console_workspace", "console_membership", "console_auditevent"} & tables()
    moved = WorkspaceNow.objects.get(slug="old-shop")
    assert (moved.pk, moved.name, moved.tool_hosts) == (shop.pk, "Old Shop", ["api.shop.example"])
    assert MembershipNow.objects.get(workspace=moved).role == "approver"
    assert AuditNow.objects.get(workspace=moved).after == {"slug": "old-shop"}
    assert HarnessNow.objects.get(workspace=moved).name == "avatar"
    assert ApiKeyNow.objects.get(prefix="hk_old").workspace_id == moved.pk
    # The foreign keys still hold on disk: a row naming no workspace is refused, and deleting the workspace
    # cascades to the rows that name it.
    from django.contrib.contenttypes.models import ContentType

    assert ContentType.objects.get_for_model(WorkspaceNow).app_label == "workspaces"
    assert not ContentType.objects.filter(app_label="console", model="workspace").exists()
    moved.delete()
    assert not HarnessNow.objects.exists() and not ApiKeyNow.objects.exists() and not AuditNow.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_the_move_rolls_back_with_its_rows():
    migrate(latest())
    from workspaces.models import Workspace as WorkspaceNow

    kept = WorkspaceNow.objects.create(slug="kept", name="Kept")
    old = migrate(BEFORE_THE_MOVE)
    assert old.get_model("console", "Workspace").objects.get(slug="kept").pk == kept.pk
    migrate(latest())
    assert WorkspaceNow.objects.get(slug="kept").name == "Kept"
