"""Room on each exposure page for the next version of its rows.

Every ingested item-page view updates its viewer's exposure row (the `ipv` count). With PostgreSQL's default
fillfactor of 100 the pages are full, so each update writes the new row version to another page and a new
entry into each of the table's four indexes; with room left on the page the update is a HOT update (same page,
no index writes), which halved the rollup fold of a 1,000-event batch (benchmarks/ingest.py).
"""

from django.db import migrations


def _set_fillfactor(value: int):
    def apply(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(f"ALTER TABLE serving_exposure SET (fillfactor = {value})")
    return apply


class Migration(migrations.Migration):

    dependencies = [
        ("serving", "0006_trace_judge_reasons"),
    ]

    operations = [
        migrations.RunPython(_set_fillfactor(50), _set_fillfactor(100), elidable=False),
    ]
