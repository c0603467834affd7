"""A result's run had an index of its own, which repeats the first column of the unique (run, case) constraint
and was written by every result. Only the index goes (as in serving's 0010: Django's AlterField would also drop
and re-add the foreign key's constraint, checking every stored row again)."""

import django.db.models.deletion
from django.db import migrations, models

_INDEX = "evaluation_evalresult_run_id_76cf2d94"


class Migration(migrations.Migration):

    dependencies = [
        ("evaluation", "0004_identifiers_and_archive"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunSQL(
                f'DROP INDEX IF EXISTS "{_INDEX}"',
                f'CREATE INDEX IF NOT EXISTS "{_INDEX}" ON "evaluation_evalresult" ("run_id")', elidable=False)],
            state_operations=[migrations.AlterField(
                model_name="evalresult", name="run",
                field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE,
                                        related_name="results", to="evaluation.evalrun"))],
        ),
    ]
