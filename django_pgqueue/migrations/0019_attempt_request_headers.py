"""The attempt log records the request headers each attempt sent; relay endpoints.

``request_headers`` holds the HTTP request's (or the broker message's) headers, with
credential headers redacted (``webhooks/redaction.py``). Existing attempts get ``{}``:
what they sent was not recorded. A database default, so adding the column to a large
attempt log rewrites nothing (PostgreSQL 11+ stores a constant default in the catalog)
and every writer that does not name the column (the lapse log) writes ``{}``.

``pgqueue_endpoint.relay``: the endpoint's events go to its broker in batches, in
event order (``webhooks/relay_source.py``); false for every existing endpoint.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_pgqueue", "0018_mq_topics"),
    ]

    operations = [
        migrations.AddField(
            model_name="endpoint",
            name="relay",
            field=models.BooleanField(
                db_default=False,
                default=False,
                help_text=(
                    "Relay mode (broker destinations only): events go to the broker in "
                    "batches, in event order, one batch in flight; consumers fan out "
                    "from the broker."
                ),
            ),
        ),
        migrations.AddField(
            model_name="deliveryattempt",
            name="request_headers",
            field=models.JSONField(
                blank=True,
                db_default=models.Value({}, output_field=models.JSONField()),
                default=dict,
            ),
        ),
    ]
