"""The job's JSON columns, an event's payload and an endpoint's headers and previous
secrets become ``StoredJSONField`` (``models/fields.py``): a value Python cannot
decode reads as a marker instead of raising. No SQL: the columns stay ``jsonb``.
"""

from django.db import migrations

import django_pgqueue.models.fields


class Migration(migrations.Migration):
    dependencies = [
        ("django_pgqueue", "0003_mq_archive_retention"),
    ]

    operations = [
        migrations.AlterField(
            model_name="endpoint",
            name="headers",
            field=django_pgqueue.models.fields.StoredJSONField(
                blank=True, default=dict, help_text="Extra HTTP headers sent with every delivery."
            ),
        ),
        migrations.AlterField(
            model_name="endpoint",
            name="previous_secrets",
            field=django_pgqueue.models.fields.StoredJSONField(
                blank=True,
                default=list,
                editable=False,
                help_text="Encrypted secrets still signing during a rotation, with their expiry.",
            ),
        ),
        migrations.AlterField(
            model_name="event",
            name="payload",
            field=django_pgqueue.models.fields.StoredJSONField(),
        ),
        migrations.AlterField(
            model_name="job",
            name="args",
            field=django_pgqueue.models.fields.StoredJSONField(blank=True, default=list),
        ),
        migrations.AlterField(
            model_name="job",
            name="errors",
            field=django_pgqueue.models.fields.StoredJSONField(
                blank=True, default=list, help_text="One entry per failed attempt, oldest first."
            ),
        ),
        migrations.AlterField(
            model_name="job",
            name="kwargs",
            field=django_pgqueue.models.fields.StoredJSONField(blank=True, default=dict),
        ),
        migrations.AlterField(
            model_name="job",
            name="result",
            field=django_pgqueue.models.fields.StoredJSONField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="job",
            name="worker_ids",
            field=django_pgqueue.models.fields.StoredJSONField(
                blank=True, default=list, help_text="Worker of each attempt, in order."
            ),
        ),
    ]
