"""Traces compressed with LZ4 instead of PostgreSQL's default pglz.

A reply's trace is ≈ 19 KB of JSON (the request's tools and messages most of it), over PostgreSQL's 2 KB TOAST
threshold, so every insert compresses it: with pglz that cost PostgreSQL ≈ 430 µs of CPU a trace, with LZ4 ≈ 200
µs, for ≈ 5 % more bytes stored (docs/performance.md). Only rows written from now on are compressed with LZ4;
older ones stay as they are and read the same. A server built without LZ4 keeps pglz.
"""

from django.db import migrations


def _compression(method: str):
    def apply(apps, schema_editor):
        if schema_editor.connection.vendor != "postgresql":
            return
        with schema_editor.connection.cursor() as cursor:
            cursor.execute("SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'")
            supported = cursor.fetchone()
        if supported and supported[0]:
            schema_editor.execute(f"ALTER TABLE serving_trace ALTER COLUMN data SET COMPRESSION {method}")
    return apply


class Migration(migrations.Migration):

    dependencies = [
        ("serving", "0007_exposure_fillfactor"),
    ]

    operations = [
        migrations.RunPython(_compression("lz4"), _compression("default"), elidable=False),
    ]
