# The tables taken over from the console app (0001) get this app's names, and the audit index the name Django
# derives from the new table. PostgreSQL renames in place: rows, and the constraints that point at them, stay.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('workspaces', '0001_initial'),
        # after every app's foreign keys follow the models and the console forgets them (console/0004): a
        # migration still naming console.workspace would look for the old table
        ('console', '0004_tenancy_moved_to_workspaces'),
    ]

    operations = [
        migrations.RenameIndex(
            model_name='auditevent',
            new_name='workspaces__workspa_de81dd_idx',
            old_name='console_aud_workspa_35bcfe_idx',
        ),
        migrations.AlterModelTable(
            name='auditevent',
            table=None,
        ),
        migrations.AlterModelTable(
            name='membership',
            table=None,
        ),
        migrations.AlterModelTable(
            name='workspace',
            table=None,
        ),
    ]
