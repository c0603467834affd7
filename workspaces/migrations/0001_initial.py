# Workspaces, memberships and the audit log move here from the console app. Their tables stay as they are
# (state only: no row is copied); 0002 then renames the tables to this app's names.

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

import workspaces.identifiers

MOVED = ("workspace", "membership", "auditevent")


def content_types_moved(apps, schema_editor, *, source="console", target="workspaces"):
    """Permissions and admin history point at content types: they follow the models."""
    ContentType = apps.get_model("contenttypes", "ContentType")
    db = schema_editor.connection.alias
    ContentType.objects.using(db).filter(app_label=target, model__in=MOVED).delete()
    ContentType.objects.using(db).filter(app_label=source, model__in=MOVED).update(app_label=target)


def content_types_moved_back(apps, schema_editor):
    content_types_moved(apps, schema_editor, source="workspaces", target="console")


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("contenttypes", "0002_remove_content_type_name"),
        ("console", "0003_identifiers_and_archive"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="Workspace",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("slug", models.SlugField(max_length=64, unique=True, validators=[workspaces.identifiers.validate_identifier])),
                        ("name", models.CharField(max_length=200)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("tool_hosts", models.JSONField(blank=True, default=list, help_text="HTTP tool bindings may call only these hosts (names or IP networks); empty: any public host. Private, loopback and link-local addresses are refused unless listed here.")),
                    ],
                    options={"db_table": "console_workspace"},
                ),
                migrations.CreateModel(
                    name="Membership",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("role", models.CharField(choices=[("viewer", "Viewer (read)"), ("operator", "Operator (edit drafts, run jobs)"), ("approver", "Approver (protected labels, approvals)"), ("admin", "Admin (members, keys)")], max_length=16)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("user", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="memberships", to=settings.AUTH_USER_MODEL)),
                        ("workspace", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="memberships", to="workspaces.workspace")),
                    ],
                    options={
                        "db_table": "console_membership",
                        "constraints": [models.UniqueConstraint(fields=("workspace", "user"), name="one_membership_per_user")],
                    },
                ),
                migrations.CreateModel(
                    name="AuditEvent",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("at", models.DateTimeField(auto_now_add=True, db_index=True)),
                        ("actor_kind", models.CharField(choices=[("user", "User"), ("api_key", "Api Key"), ("system", "System")], max_length=16)),
                        ("actor_label", models.CharField(max_length=200)),
                        ("actor_api_key_id", models.BigIntegerField(blank=True, null=True)),
                        ("action", models.CharField(db_index=True, max_length=64)),
                        ("target_type", models.CharField(max_length=64)),
                        ("target_id", models.CharField(blank=True, max_length=64)),
                        ("target_label", models.CharField(blank=True, max_length=300)),
                        ("before", models.JSONField(blank=True, null=True)),
                        ("after", models.JSONField(blank=True, null=True)),
                        ("actor_user", models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name="+", to=settings.AUTH_USER_MODEL)),
                        ("workspace", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="audit_events", to="workspaces.workspace")),
                    ],
                    options={
                        "db_table": "console_auditevent",
                        "ordering": ["-at", "-id"],
                        "indexes": [models.Index(fields=["workspace", "-at"], name="console_aud_workspa_35bcfe_idx")],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(content_types_moved, content_types_moved_back),
    ]
