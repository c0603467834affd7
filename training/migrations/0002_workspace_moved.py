# The workspace model moved from the console app to workspaces (workspaces/0001): only the state's foreign
# keys follow it. The column and its constraint stay as they are: the constraint points at the table itself,
# which workspaces/0002 renames, so nothing on disk changes here and no large table is re-checked.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('training', '0001_jobs_checkpoints_matrix'),
        ('workspaces', '0001_initial'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='checkpoint',
                    name='workspace',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='checkpoints', to='workspaces.workspace'),
                ),
                migrations.AlterField(
                    model_name='checkpointmatrix',
                    name='workspace',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='checkpoint_matrices', to='workspaces.workspace'),
                ),
                migrations.AlterField(
                    model_name='trainingjob',
                    name='workspace',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='training_jobs', to='workspaces.workspace'),
                ),
            ],
            database_operations=[],
        ),
    ]
