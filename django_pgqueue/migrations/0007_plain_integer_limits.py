"""The limits' columns without the CHECKs their named rules already hold, and the
endpoint's two lists of values in the shape PostgreSQL checks cheapest.

PostgreSQL prepares every CHECK of a table again at each statement that writes a
row (``models/expressions.py``). Claims write ``pgqueue_queue`` (a flow-controlled
queue's ``served_at`` and ``rate_tat``) and ``pgqueue_endpoint`` (``served_at``,
the rate state, the breaker); each delivery attempt writes a row of
``pgqueue_delivery_attempt``. Their ``PositiveIntegerField``\\ s (and the message
queues' ``max_reads``, in their registry) each carried a CHECK
of their own (``>= 0``) beside the named rule that holds the column's range
(``>= 1``): a second declaration of the rule, prepared at every write. The columns
stay ``integer``; the named rules stay as they are. The endpoint's
``pgq_ep_breaker_valid`` and ``pgq_ep_ordering_valid`` become one array constant
(``OneOf``) instead of an array built from casts: the same values.

Online: dropping a CHECK takes a brief lock and reads nothing. The two endpoint
rules are added again validated, which reads ``pgqueue_endpoint`` (one row per
endpoint) under its lock, in this migration's transaction.

Rollback: ``migrate django_pgqueue 0006`` puts the CHECKs and the previous shapes
back, each checked against every row as it is added.
"""

import django.core.validators
from django.db import migrations, models

import django_pgqueue.models.expressions
from django_pgqueue.migrations._operations import plain_integers


def _limit(help_text: str) -> models.IntegerField:
    """A limit that may be empty (no limit), else at least 1."""
    return models.IntegerField(
        blank=True,
        help_text=help_text,
        null=True,
        validators=[django.core.validators.MinValueValidator(1)],
    )


def _period(help_text: str) -> models.IntegerField:
    return models.IntegerField(
        db_default=1,
        default=1,
        help_text=help_text,
        validators=[django.core.validators.MinValueValidator(1)],
    )


def _one_of(name: str, field: str, values: list[str]) -> list[migrations.operations.base.Operation]:
    return [
        migrations.RemoveConstraint(model_name="endpoint", name=name),
        migrations.AddConstraint(
            model_name="endpoint",
            constraint=models.CheckConstraint(
                condition=django_pgqueue.models.expressions.OneOf(field, values), name=name
            ),
        ),
    ]


class Migration(migrations.Migration):
    dependencies = [
        ("django_pgqueue", "0006_validate_check_constraints"),
    ]

    operations = [
        plain_integers(
            "pgqueue_queue",
            "queue",
            {
                "concurrency": _limit(
                    "Most jobs of this queue running at once, across every worker (empty: "
                    "no limit)."
                ),
                "key_concurrency": _limit(
                    "Most jobs of one concurrency key running at once (empty: no limit)."
                ),
                "rate_limit": _limit("Most jobs started per rate period (empty: no rate limit)."),
                "rate_period": _period("Seconds the rate limit counts starts in."),
                "key_rate_limit": _limit(
                    "Most jobs of one concurrency key started per key rate period (empty: "
                    "no limit)."
                ),
                "key_rate_period": _period("Seconds the per-key rate limit counts starts in."),
            },
        ),
        plain_integers(
            "pgqueue_endpoint",
            "endpoint",
            {
                "max_in_flight": _limit(
                    "Most deliveries to this endpoint in flight at once, across all workers. "
                    "Empty: PGQUEUE['WEBHOOKS']['MAX_IN_FLIGHT']."
                ),
                "rate_limit": _limit("Most requests per rate period (empty: no rate limit)."),
                "rate_period": models.IntegerField(
                    choices=[(1, "per second"), (60, "per minute"), (3600, "per hour")],
                    default=1,
                    help_text="The period the rate limit counts requests in.",
                    validators=[django.core.validators.MinValueValidator(1)],
                ),
            },
        ),
        plain_integers(
            "pgqueue_api_key",
            "apikey",
            {
                "rate_limit": _limit(
                    "Requests per rate window for this key (empty: PGQUEUE['API']['RATE_LIMIT'])."
                ),
            },
        ),
        plain_integers(
            "pgqueue_mq_queue",
            "messagequeue",
            {
                "max_reads": _limit(
                    "A message read this many times is dead-lettered on its next read."
                ),
            },
        ),
        plain_integers(
            "pgqueue_delivery_attempt",
            "deliveryattempt",
            {
                "attempt": models.IntegerField(
                    validators=[django.core.validators.MinValueValidator(1)]
                ),
            },
        ),
        *_one_of("pgq_ep_breaker_valid", "breaker_state", ["closed", "open", "half_open"]),
        *_one_of("pgq_ep_ordering_valid", "ordering", ["none", "endpoint", "key"]),
    ]
