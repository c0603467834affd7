# Workspaces, memberships and the audit log now belong to the workspaces app (workspaces/0001 took over their
# tables): the console app forgets them. State only: dropping them here would drop the tenancy's rows.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('console', '0003_identifiers_and_archive'),
        ('evaluation', '0006_workspace_moved'),
        ('evolution', '0003_workspace_moved'),
        ('harness', '0004_workspace_moved'),
        ('serving', '0011_workspace_moved'),
        ('training', '0002_workspace_moved'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveField(
                    model_name='membership',
                    name='user',
                ),
                migrations.RemoveField(
                    model_name='membership',
                    name='workspace',
                ),
                migrations.DeleteModel(
                    name='AuditEvent',
                ),
                migrations.DeleteModel(
                    name='Membership',
                ),
                migrations.DeleteModel(
                    name='Workspace',
                ),
            ],
            database_operations=[],
        ),
    ]
