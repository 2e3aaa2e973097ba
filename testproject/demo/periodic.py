"""The demo's periodic tasks (loaded when ``PGQUEUE_DEMO_SCHEDULE=1``, as
``pgqueue_demo_server`` sets it for its workers).

``nightly_report`` is scheduled in settings (``PGQUEUE["SCHEDULE"]``); ``tally_orders``
with ``@periodic`` and it is atomic: its row and its summary commit together.
"""

from __future__ import annotations

from django_pgqueue.compat import task
from django_pgqueue.periodic import periodic


@task()
def nightly_report() -> str:
    """Scheduled in testproject/settings.py for 03:00 Paris time."""
    from .models import TaskRun

    return f"{TaskRun.objects.count()} task runs recorded so far"


@periodic(cron="* * * * *", name="demo-tally-orders")
@task(takes_context=True, atomic=True)
def tally_orders(context) -> int:
    """Every minute, exactly once, and atomic: the TaskRun row it writes commits if and only
    if the job is marked succeeded (look for label "tally" in the admin)."""
    import os

    from .models import TaskRun

    TaskRun.objects.create(
        job_id=int(context.task_result.id), attempt=context.attempt, pid=os.getpid(), label="tally"
    )
    return TaskRun.objects.filter(label="tally").count()
