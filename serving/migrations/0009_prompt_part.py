"""Prompt parts: the system message and tool schemas a trace sent, stored once per workspace (serving.traces)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('console', '0003_identifiers_and_archive'),
        ('serving', '0008_trace_lz4'),
    ]

    operations = [
        migrations.CreateModel(
            name='PromptPart',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('digest', models.CharField(help_text='SHA-256 of `content`, hex', max_length=64)),
                ('content', models.TextField(help_text="the part as JSON text: a message's content or the list of tool schemas")),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('workspace', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='console.workspace')),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('workspace', 'digest'), name='prompt_part_per_workspace')],
            },
        ),
    ]
