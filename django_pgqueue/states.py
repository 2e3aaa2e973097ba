"""The states of a queue row (jobs and webhook deliveries) and the sets of them that
rules are written with, declared once.

Apart from ``models/queue.py`` (which re-exports them) so that the SQL in
``sql/`` can build its state lists from them without the app registry:
``sql.fragments`` renders each set as SQL (``CLAIMABLE_SQL``...), and the
partial indexes in the models' ``Meta`` are built from the same tuples, so a
statement and the index it must match cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import models
from django.utils.translation import gettext_lazy as _


class Status(models.TextChoices):
    """The one state machine of every queue row (drawn in docs/state-machine.md).

    ``pending`` -> ``in_progress`` -> ``succeeded``; an error moves the row to
    ``failed`` (a retry is scheduled) or ``dead`` (attempts exhausted: the
    dead-letter queue); an operator may ``cancel`` it. ``replay`` moves any
    terminal or failed row back to ``pending``. A workflow step with parents is
    born ``waiting`` (never claimable); the completion of its last parent moves it
    to ``pending`` (or ``cancelled``, when a parent failed and its policy says so).
    """

    PENDING = "pending", _("Pending")
    IN_PROGRESS = "in_progress", _("In progress")
    SUCCEEDED = "succeeded", _("Succeeded")
    FAILED = "failed", _("Failed, retry scheduled")
    DEAD = "dead", _("Dead (DLQ)")
    CANCELLED = "cancelled", _("Cancelled")
    WAITING = "waiting", _("Waiting for its parents")


#: States a worker may claim (when due).
CLAIMABLE = (Status.PENDING, Status.FAILED)
#: States that end a row's life until an operator replays it.
TERMINAL = (Status.SUCCEEDED, Status.DEAD, Status.CANCELLED)
#: States of a workflow step not released yet: no claim, no index of the claim sees it.
WAITING = (Status.WAITING,)
#: States of a "live" job: at most one live job per (task, unique key).
LIVE = (Status.PENDING, Status.IN_PROGRESS, Status.FAILED)


def sql_list(states: Iterable[Status]) -> str:
    """``states`` as an SQL list of literals, in the order given: ``('pending', 'failed')``.

    Only these fixed values are ever formatted into SQL (never input), and in the
    order of the tuple, which is also the order Django renders a ``status__in``
    index predicate in: ``ON CONFLICT`` infers a partial index by its predicate.
    """
    return "(" + ", ".join(f"'{state.value}'" for state in states) + ")"
