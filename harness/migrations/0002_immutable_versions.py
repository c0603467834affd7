"""On PostgreSQL, refuse UPDATE and DELETE of harness versions at the database, not only in the ORM."""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION harness_version_immutable() RETURNS trigger AS $$
BEGIN
  RAISE EXCEPTION 'harness versions are immutable (% refused)', TG_OP;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER harness_version_immutable
  BEFORE UPDATE OR DELETE ON harness_harnessversion
  FOR EACH ROW EXECUTE FUNCTION harness_version_immutable();
"""
DROP = """
DROP TRIGGER IF EXISTS harness_version_immutable ON harness_harnessversion;
DROP FUNCTION IF EXISTS harness_version_immutable();
"""


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE, params=None)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP, params=None)


class Migration(migrations.Migration):
    dependencies = [("harness", "0001_initial")]
    operations = [migrations.RunPython(forwards, backwards)]
