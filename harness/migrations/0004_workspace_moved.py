# The workspace model moved from the console app to workspaces (workspaces/0001): only the state's foreign
# keys follow it. The column and its constraint stay as they are: the constraint points at the table itself,
# which workspaces/0002 renames, so nothing on disk changes here and no large table is re-checked.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('harness', '0003_identifiers_and_archive'),
        ('workspaces', '0001_initial'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='harness',
                    name='workspace',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='harnesses', to='workspaces.workspace'),
                ),
            ],
            database_operations=[],
        ),
    ]
