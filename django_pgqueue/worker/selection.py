"""What ``runworkers --queues`` selects, checked before a worker starts.

A typo (``--queues emials``) would otherwise run a worker that never claims anything,
and ``--queues emails,default`` quietly leaves webhook deliveries to nobody.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from ..docs import docs_url

#: The queue name that selects webhook deliveries (``webhooks.delivery_source.QUEUE_NAME``).
WEBHOOKS_QUEUE = "webhooks"


def known_queues() -> set[str] | None:
    """Every queue name the project's PgQueueBackends allow; None when any name goes.

    A backend without ``QUEUES`` (or with an empty list) accepts any queue name, and
    then no name can be called unknown.
    """
    names: set[str] = set()
    for params in (getattr(settings, "TASKS", {}) or {}).values():
        if not isinstance(params, dict):
            continue
        if params.get("BACKEND") != "django_pgqueue.backend.PgQueueBackend":
            continue
        queues = params.get("QUEUES")
        if not queues:
            return None
        names.update(queues)
    return names or None


def check_queue_selection(queues: Sequence[str] | None) -> list[str]:
    """Raise ImproperlyConfigured for names no backend allows; return warnings.

    The warning is given only when there are webhook endpoints to deliver to.
    """
    if not queues:
        return []
    allowed = known_queues()
    if allowed is not None:
        unknown = sorted(set(queues) - allowed - {WEBHOOKS_QUEUE})
        if unknown:
            raise ImproperlyConfigured(
                f"--queues names {', '.join(map(repr, unknown))}, which no TASKS backend "
                f"allows (QUEUES: {', '.join(sorted(allowed))}; '{WEBHOOKS_QUEUE}' selects "
                f"webhook deliveries). {docs_url('worker')}"
            )
    if WEBHOOKS_QUEUE in queues:
        return []
    from ..models import Endpoint

    if not Endpoint.objects.filter(is_active=True).exists():
        return []
    return [
        f"--queues {','.join(queues)} leaves webhook deliveries out: no delivery is sent by "
        f"this worker. Add '{WEBHOOKS_QUEUE}' to --queues, or run another worker with "
        f"--queues {WEBHOOKS_QUEUE}."
    ]


def unseen_queue_warnings(queues: Sequence[str] | None) -> list[str]:
    """A warning for each selected queue no job has used (a typo starts silently).

    Only when no backend declares ``QUEUES`` (a declared list makes an unknown name an
    error in :func:`check_queue_selection` instead). The look is cheap and may miss a
    rare old queue; it is a warning, never a refusal.
    """
    if not queues or known_queues() is not None:
        return []
    from django.db import connections

    from .. import sql
    from ..conf import get_settings

    names = [q for q in queues if q != WEBHOOKS_QUEUE]
    with connections[get_settings().DATABASE].cursor() as cursor:
        cursor.execute(sql.QUEUES_NEVER_SEEN, {"queues": names})
        unseen = [row[0] for row in cursor.fetchall()]
    return [
        f"--queues names {name!r}, a queue no job has used yet: this worker claims nothing "
        f"until a task enqueues to it (a typo? list the project's queues in the TASKS "
        f"backend's QUEUES to make an unknown name an error). {docs_url('worker')}"
        for name in unseen
    ]
