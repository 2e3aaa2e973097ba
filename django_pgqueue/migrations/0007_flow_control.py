"""Flow control of webhook endpoints: in-flight and rate limits, FIFO ordering.

Endpoints get their limits (``max_in_flight``, ``rate_limit``/``rate_period``), an
``ordering`` mode and the two columns the delivery claim keeps (``served_at``, the
round robin cursor and fence; ``rate_tat``, the rate limit's state). Deliveries get an
``ordering_key``. The due index now leads with the endpoint, so the claim can walk the
endpoints with waiting deliveries; two small partial indexes count in-flight
deliveries per endpoint and find the head of each FIFO line.
"""

import django.core.validators
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_pgqueue", "0006_periodic_unique_atomic"),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="delivery",
            name="pgq_dlv_due_idx",
        ),
        migrations.AddField(
            model_name="delivery",
            name="ordering_key",
            field=models.CharField(
                blank=True,
                editable=False,
                help_text="FIFO line this delivery waits in (empty: not ordered).",
                max_length=255,
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="endpoint",
            name="max_in_flight",
            field=models.PositiveIntegerField(
                blank=True,
                help_text="Most deliveries to this endpoint in flight at once, across all workers. Empty: PGQUEUE['WEBHOOKS']['MAX_IN_FLIGHT'].",
                null=True,
                validators=[django.core.validators.MinValueValidator(1)],
            ),
        ),
        migrations.AddField(
            model_name="endpoint",
            name="ordering",
            field=models.CharField(
                choices=[
                    ("none", "None (in parallel, oldest first)"),
                    ("endpoint", "FIFO for the whole endpoint"),
                    ("key", "FIFO per ordering key"),
                ],
                default="none",
                help_text="FIFO: deliveries go one at a time in event order, for the whole endpoint or per ordering key. Applies to events sent after the change.",
                max_length=16,
            ),
        ),
        migrations.AddField(
            model_name="endpoint",
            name="rate_limit",
            field=models.PositiveIntegerField(
                blank=True,
                help_text="Most requests per rate period (empty: no rate limit).",
                null=True,
                validators=[django.core.validators.MinValueValidator(1)],
            ),
        ),
        migrations.AddField(
            model_name="endpoint",
            name="rate_period",
            field=models.PositiveIntegerField(
                choices=[(1, "per second"), (60, "per minute"), (3600, "per hour")],
                default=1,
                help_text="The period the rate limit counts requests in.",
            ),
        ),
        migrations.AddField(
            model_name="endpoint",
            name="rate_tat",
            field=models.DateTimeField(
                blank=True,
                editable=False,
                help_text="Rate limit state: when the bucket is full again (GCRA).",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="endpoint",
            name="served_at",
            field=models.DateTimeField(
                blank=True,
                editable=False,
                help_text="When a claim last took deliveries of this endpoint (the round robin).",
                null=True,
            ),
        ),
        migrations.AddIndex(
            model_name="delivery",
            index=models.Index(
                condition=models.Q(("status__in", ["pending", "failed"])),
                fields=["endpoint_id", "next_attempt_at", "id"],
                name="pgq_dlv_due_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="delivery",
            index=models.Index(
                condition=models.Q(("status", "in_progress")),
                fields=["endpoint_id"],
                name="pgq_dlv_flight_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="delivery",
            index=models.Index(
                condition=models.Q(
                    ("ordering_key__isnull", False),
                    ("status__in", ["pending", "failed", "in_progress"]),
                ),
                fields=["endpoint_id", "ordering_key", "id"],
                name="pgq_dlv_fifo_idx",
            ),
        ),
        migrations.AddConstraint(
            model_name="endpoint",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("max_in_flight__isnull", True), ("max_in_flight__gte", 1), _connector="OR"
                ),
                name="pgq_ep_max_in_flight_pos",
            ),
        ),
        migrations.AddConstraint(
            model_name="endpoint",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("rate_limit__isnull", True), ("rate_limit__gte", 1), _connector="OR"
                ),
                name="pgq_ep_rate_limit_pos",
            ),
        ),
        migrations.AddConstraint(
            model_name="endpoint",
            constraint=models.CheckConstraint(
                condition=models.Q(("rate_period__gte", 1)), name="pgq_ep_rate_period_pos"
            ),
        ),
        migrations.AddConstraint(
            model_name="endpoint",
            constraint=models.CheckConstraint(
                condition=models.Q(("ordering__in", ["none", "endpoint", "key"])),
                name="pgq_ep_ordering_valid",
            ),
        ),
    ]
