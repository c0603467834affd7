"""Indexes every insert wrote and no query needs (docs/performance.md).

A trace had 14 indexes, each written by every reply: its workspace's own (three composite indexes begin with
it), single-column ones on room, outcome and time with LIKE twins, which nothing asks for alone, and the LIKE
twin of its unique trace id (PostgreSQL's varchar_pattern_ops, for `LIKE 'prefix%'`: a trace id is only ever
looked up whole, by the unique index). The console asks for a workspace's traces of an outcome, newest first:
one composite index serves that. With 606,000 traces stored, their indexes took 204 MB instead of 259 MB, and
a new trace wrote 3.5-5.6 KiB of WAL instead of 4.0-6.6 (benchmarks/trace_writes.py, four runs each; its
PostgreSQL CPU, 0.37-0.48 ms against 0.41-0.48, moved less than the host's noise). An event,
a prompt part, an exposure and a rollup lose their foreign key's own index, which repeats the first column of
their unique constraint.

Only the indexes go: Django's AlterField would also drop and re-add each foreign key's constraint, checking
every stored row again (minutes under a lock for a table of millions of events). The names are those Django
gave the indexes when it made them, the same on PostgreSQL and SQLite.
"""

import django.db.models.deletion
from django.db import migrations, models

# (table, column, the index's name, which go): "index" (the column's own), "like" (its LIKE twin on PostgreSQL,
# varchar_pattern_ops) or both. The trace id keeps its unique index (the field stays unique=True); only the
# twin goes, whose absence Django tolerates (it drops a LIKE index with IF EXISTS when a field is altered).
_DROPPED = [
    ("serving_trace", "workspace_id", "serving_trace_workspace_id_31bcd868", {"index"}),
    ("serving_trace", "room_id", "serving_trace_room_id_7823318a", {"index", "like"}),
    ("serving_trace", "outcome", "serving_trace_outcome_13003366", {"index", "like"}),
    ("serving_trace", "created_at", "serving_trace_created_at_81439c51", {"index"}),
    ("serving_trace", "trace_id", "serving_trace_trace_id_66092f98", {"like"}),
    ("serving_event", "workspace_id", "serving_event_workspace_id_c73d69ae", {"index"}),
    ("serving_promptpart", "workspace_id", "serving_promptpart_workspace_id_9d21a0ec", {"index"}),
    ("serving_exposure", "experiment_id", "serving_exposure_experiment_id_17212d17", {"index"}),
    ("serving_rollup", "experiment_id", "serving_rollup_experiment_id_b488d79c", {"index"}),
]


def drop(apps, schema_editor):
    for _table, _column, name, which in _DROPPED:
        if "index" in which:
            schema_editor.execute(f'DROP INDEX IF EXISTS "{name}"')
        if "like" in which:
            schema_editor.execute(f'DROP INDEX IF EXISTS "{name}_like"')


def create(apps, schema_editor):
    postgresql = schema_editor.connection.vendor == "postgresql"
    for table, column, name, which in _DROPPED:
        if "index" in which:
            schema_editor.execute(f'CREATE INDEX IF NOT EXISTS "{name}" ON "{table}" ("{column}")')
        if "like" in which and postgresql:
            schema_editor.execute(f'CREATE INDEX IF NOT EXISTS "{name}_like" ON "{table}" ("{column}" varchar_pattern_ops)')


class Migration(migrations.Migration):

    dependencies = [
        ("console", "0003_identifiers_and_archive"),
        ("harness", "0003_identifiers_and_archive"),
        ("serving", "0009_prompt_part"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(drop, create, elidable=False)],
            state_operations=[
                migrations.AlterField(
                    model_name="event", name="workspace",
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE,
                                            related_name="+", to="console.workspace")),
                migrations.AlterField(
                    model_name="exposure", name="experiment",
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE,
                                            related_name="exposures", to="serving.experiment")),
                migrations.AlterField(
                    model_name="promptpart", name="workspace",
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE,
                                            related_name="+", to="console.workspace")),
                migrations.AlterField(
                    model_name="rollup", name="experiment",
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE,
                                            related_name="rollups", to="serving.experiment")),
                migrations.AlterField(model_name="trace", name="created_at", field=models.DateTimeField()),
                migrations.AlterField(model_name="trace", name="outcome", field=models.CharField(max_length=16)),
                migrations.AlterField(model_name="trace", name="room_id", field=models.CharField(max_length=100)),
                migrations.AlterField(
                    model_name="trace", name="workspace",
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE,
                                            related_name="traces", to="console.workspace")),
            ],
        ),
        migrations.AddIndex(
            model_name="trace",
            index=models.Index(fields=["workspace", "outcome", "-created_at"], name="serving_tra_workspa_c53b82_idx"),
        ),
    ]
