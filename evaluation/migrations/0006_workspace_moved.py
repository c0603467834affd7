# The workspace model moved from the console app to workspaces (workspaces/0001): only the state's foreign
# keys follow it. The column and its constraint stay as they are: the constraint points at the table itself,
# which workspaces/0002 renames, so nothing on disk changes here and no large table is re-checked.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('evaluation', '0005_fewer_indexes'),
        ('workspaces', '0001_initial'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='evalrun',
                    name='workspace',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='eval_runs', to='workspaces.workspace'),
                ),
                migrations.AlterField(
                    model_name='evalset',
                    name='workspace',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='eval_sets', to='workspaces.workspace'),
                ),
                migrations.AlterField(
                    model_name='runcomparison',
                    name='workspace',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='run_comparisons', to='workspaces.workspace'),
                ),
            ],
            database_operations=[],
        ),
    ]
