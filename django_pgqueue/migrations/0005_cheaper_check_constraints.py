"""The queue tables' CHECK constraints in the shape PostgreSQL checks cheapest.

PostgreSQL prepares every CHECK constraint again at each statement that writes a
row, so on the one-row paths (an enqueue, a woken claim, an admin action) they were
most of the statement's own work (``models/expressions.py``). The rules do not
change; their shape does:

* ``*_status_valid``: one array constant instead of an array of seven casts;
* ``*_lease_iff_running``: one ``CASE`` on the state instead of two tests of it;
* ``attempts`` and ``max_attempts`` (and a step's parent counts) become plain integer
  columns: ``*_attempts_range`` holds their range, and the new
  ``pgq_job_parents_range`` the parent counts', where each ``PositiveIntegerField``
  had a CHECK of its own.

Online: each constraint is dropped and added again ``NOT VALID`` in this
migration's transaction (a brief lock: new rows are checked from then on), and the
rows already there are validated by the next migration, in its own transaction,
under a lock that lets the workers claim and complete.

Rollback: ``migrate django_pgqueue 0004`` puts the previous shapes back, each
checked against every row as it is added (under a lock that holds up the workers
for as long as that scan of the two tables takes).
"""

import django.core.validators
from django.contrib.postgres.operations import AddConstraintNotValid
from django.db import migrations, models
from django.db.migrations.operations.base import Operation

import django_pgqueue.models.expressions
from django_pgqueue.migrations._operations import plain_integers

STATES = ["pending", "in_progress", "succeeded", "failed", "dead", "cancelled", "waiting"]


def _status_valid(prefix: str) -> models.CheckConstraint:
    return models.CheckConstraint(
        condition=django_pgqueue.models.expressions.OneOf("status", STATES),
        name=f"{prefix}_status_valid",
    )


def _lease_iff_running(prefix: str) -> models.CheckConstraint:
    return models.CheckConstraint(
        condition=django_pgqueue.models.expressions.LeaseIffRunning("in_progress"),
        name=f"{prefix}_lease_iff_running",
    )


def _swap(model_name: str, prefix: str) -> list[Operation]:
    """Drop the two constraints and add them again in their new shape, NOT VALID."""
    return [
        migrations.RemoveConstraint(model_name=model_name, name=f"{prefix}_status_valid"),
        AddConstraintNotValid(model_name=model_name, constraint=_status_valid(prefix)),
        migrations.RemoveConstraint(model_name=model_name, name=f"{prefix}_lease_iff_running"),
        AddConstraintNotValid(model_name=model_name, constraint=_lease_iff_running(prefix)),
    ]


def _attempt_fields() -> dict[str, models.Field]:
    return {
        "attempts": models.IntegerField(
            default=0,
            help_text="Claims so far; counted when a worker claims the row.",
            validators=[django.core.validators.MinValueValidator(0)],
        ),
        "max_attempts": models.IntegerField(
            default=5, validators=[django.core.validators.MinValueValidator(1)]
        ),
    }


class Migration(migrations.Migration):
    dependencies = [
        ("django_pgqueue", "0004_stored_json_fields"),
    ]

    operations = [
        *_swap("job", "pgq_job"),
        *_swap("delivery", "pgq_dlv"),
        # Each PositiveIntegerField's own CHECK goes; the columns stay ``integer``.
        plain_integers("pgqueue_job", "job", _attempt_fields()),
        plain_integers("pgqueue_delivery", "delivery", _attempt_fields()),
        plain_integers(
            "pgqueue_job",
            "job",
            {
                "pending_parents": models.IntegerField(
                    blank=True,
                    editable=False,
                    help_text="Parents that have not ended yet.",
                    null=True,
                ),
                "failed_parents": models.IntegerField(
                    blank=True,
                    editable=False,
                    help_text="Parents that ended without success.",
                    null=True,
                ),
            },
        ),
        AddConstraintNotValid(
            model_name="job",
            constraint=models.CheckConstraint(
                condition=models.Q(("pending_parents__gte", 0), ("failed_parents__gte", 0)),
                name="pgq_job_parents_range",
            ),
        ),
    ]
