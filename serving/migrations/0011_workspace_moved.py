# The workspace model moved from the console app to workspaces (workspaces/0001): only the state's foreign
# keys follow it. The column and its constraint stay as they are: the constraint points at the table itself,
# which workspaces/0002 renames after this, so nothing on disk changes here and no large table is re-checked.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('serving', '0010_fewer_indexes'),
        ('workspaces', '0001_initial'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='apikey',
                    name='workspace',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='api_keys', to='workspaces.workspace'),
                ),
                migrations.AlterField(
                    model_name='event',
                    name='workspace',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='workspaces.workspace'),
                ),
                migrations.AlterField(
                    model_name='experiment',
                    name='workspace',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='experiments', to='workspaces.workspace'),
                ),
                migrations.AlterField(
                    model_name='promptpart',
                    name='workspace',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='workspaces.workspace'),
                ),
                migrations.AlterField(
                    model_name='room',
                    name='workspace',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='rooms', to='workspaces.workspace'),
                ),
                migrations.AlterField(
                    model_name='trace',
                    name='workspace',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='traces', to='workspaces.workspace'),
                ),
            ],
            database_operations=[],
        ),
    ]
