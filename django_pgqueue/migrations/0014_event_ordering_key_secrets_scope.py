"""``Event.ordering_key``: the ordering key an event was sent with, so that a repeat
with the same idempotency key is compared with it (docs/http-api.md, "Idempotency").

And the ``secrets`` scope of API keys (only the field's help text changes). Keys
holding ``manage`` are not given ``secrets``: rotating a secret now needs it; add it to
a key in the admin (docs/http-api.md, "Scopes").
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_pgqueue", "0013_api_keys"),
    ]

    operations = [
        migrations.AddField(
            model_name="event",
            name="ordering_key",
            field=models.CharField(
                blank=True,
                editable=False,
                help_text="The FIFO line it was sent in (empty: none).",
                max_length=255,
                null=True,
            ),
        ),
        migrations.AlterField(
            model_name="apikey",
            name="scopes",
            field=models.JSONField(
                default=list,
                help_text="What the key may do: 'send', 'read', 'manage' and/or 'secrets'.",
            ),
        ),
    ]
