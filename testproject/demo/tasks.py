"""Demo tasks: a realistic mix of quick work, flaky work and poison."""

from __future__ import annotations

import time

from django_pgqueue import task


@task()
def noop() -> None:
    """Does nothing (benchmarks and smoke tests)."""


@task(queue_name="emails", priority=10)
def send_receipt(order_id: int) -> str:
    time.sleep(0.01)
    return f"receipt for order {order_id} sent"


@task()
def add(a: int, b: int) -> int:
    return a + b


@task(takes_context=True, max_attempts=4)
def flaky_charge(context, order_id: int, fail_times: int = 2) -> dict:
    """Fails ``fail_times`` times, then succeeds (shows retries with backoff)."""
    if context.attempt <= fail_times:
        raise ConnectionError(f"payment gateway timed out (attempt {context.attempt})")
    return {"order_id": order_id, "charged": True, "attempts": context.attempt}


@task(max_attempts=3)
def always_fails(order_id: int) -> None:
    """Poison: exhausts its attempts and lands in the dead-letter queue."""
    raise ValueError(f"order {order_id} has an invalid address")


@task()
async def async_ping(n: int) -> int:
    return n * 2


@task(takes_context=True)
def report_attempt(context) -> int:
    return context.attempt


@task(takes_context=True)
def record_run(context, label: str = "", sleep: float = 0.0) -> int:
    """Writes one TaskRun row per execution (tests count executions with it)."""
    import os

    from .models import TaskRun

    if sleep:
        time.sleep(sleep)
    TaskRun.objects.create(
        job_id=int(context.task_result.id),
        attempt=context.attempt,
        pid=os.getpid(),
        label=label,
    )
    return context.attempt


@task(takes_context=True)
def mark_then_sleep(context, label: str, seconds: float) -> float:
    """Writes a TaskRun row when it starts, then sleeps: tests wait for "started", not "claimed"."""
    import os

    from .models import TaskRun

    TaskRun.objects.create(
        job_id=int(context.task_result.id),
        attempt=context.attempt,
        pid=os.getpid(),
        label=f"start:{label}",
    )
    time.sleep(seconds)
    return seconds


@task(takes_context=True, max_attempts=3)
def kill_own_process(context) -> None:
    """Poison that kills its worker process (crash tests)."""
    import os
    import signal

    os.kill(os.getpid(), signal.SIGKILL)


@task()
def sleep_for(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


@task(timeout=0.3, max_attempts=2)
def overruns_its_timeout(seconds: float) -> float:
    """Sleeps past its timeout when ``seconds`` exceeds 0.3: each attempt times out."""
    time.sleep(seconds)
    return seconds


not_a_task = "this module attribute is a string, not a Task"


@task(unique=True)
def unique_add(a: int, b: int) -> int:
    """At most one live job per arguments (unique tasks)."""
    return a + b


@task(on_duplicate="raise")
def keyed_refund(order_id: int) -> int:
    """Enqueued with ``.using(unique_key=...)``; a second live enqueue raises."""
    return order_id


@task(takes_context=True, atomic=True, max_attempts=3)
def record_atomic(context, label: str = "", sleep: float = 0.0, fail: bool = False) -> int:
    """An atomic task: its TaskRun row commits if and only if the job succeeds."""
    return _record(context, label, sleep, fail)


@task(takes_context=True, max_attempts=3)
def record_leased(context, label: str = "", sleep: float = 0.0, fail: bool = False) -> int:
    """``record_atomic``'s body as an ordinary (at-least-once) task, for comparison."""
    return _record(context, label, sleep, fail)


def _record(context, label: str, sleep: float, fail: bool) -> int:
    import os

    from .models import TaskRun

    TaskRun.objects.create(
        job_id=int(context.task_result.id), attempt=context.attempt, pid=os.getpid(), label=label
    )
    if sleep:
        time.sleep(sleep)
    if fail:
        raise RuntimeError(f"{label}: failing after the write (it must roll back)")
    return context.attempt


@task(takes_context=True, atomic=True, max_attempts=100)
def atomic_effect(context, label: str = "", sleep: float = 0.0) -> int:
    """The exactly-once fault test's task: one effect row, in the claim's transaction."""
    return _record(context, label, sleep, False)


@task(takes_context=True, max_attempts=100)
def leased_effect(context, label: str = "", sleep: float = 0.0) -> int:
    """``atomic_effect`` as an at-least-once task: the fault test's control run."""
    return _record(context, label, sleep, False)


@task()
def echo(value: object) -> object:
    """Returns its argument (tests of return values the queue cannot store)."""
    return value


def _beyond_any_timestamp(exception: BaseException, task_result: object) -> float:
    return 1e300


@task(backoff=_beyond_any_timestamp)
def fails_with_absurd_backoff() -> None:
    """Fails; its backoff asks for a retry further away than any timestamp."""
    raise RuntimeError("failing on purpose")


@task(max_attempts=1)
def fail_with_text(codepoints: list[int]) -> None:
    """Raises with a message built from code points (NUL and lone surrogates included)."""
    raise ValueError("".join(map(chr, codepoints)))


@task()
def record_interval(seconds: float, tag: str = "") -> None:
    """Sleeps, then writes a TaskRun whose label is "tag start end" (wall clock, one
    host): flow-control tests rebuild how many jobs ran at once from these."""
    import os

    from .models import TaskRun

    start = time.time()
    time.sleep(seconds)
    TaskRun.objects.create(
        job_id=0, attempt=0, pid=os.getpid(), label=f"{tag} {start:.6f} {time.time():.6f}"
    )


@task(takes_context=True)
def report_progress(context, steps: list) -> list:
    """Report each ``[fraction, message]`` step; return what the job row held after
    each (progress tests: the throttle and the last value written at the end)."""
    from django_pgqueue.models import Job

    seen = []
    for fraction, message in steps:
        # "{NUL}" stands for a NUL character, which a job's arguments cannot hold.
        context.set_progress(fraction, message.replace("{NUL}", "\x00"))
        row = Job.objects.values_list("progress", "progress_message").get(
            pk=int(context.task_result.id)
        )
        seen.append(list(row))
    return seen


@task(takes_context=True)
def report_and_wait(context, fraction: float, message: str, timeout: float = 30.0) -> str:
    """Report progress, then wait for a TaskRun labelled ``release <job id>`` (up to
    ``timeout`` seconds): tests read the job while it is running."""
    from .models import TaskRun

    context.set_progress(fraction, message)
    label = f"release {context.task_result.id}"
    deadline = time.monotonic() + timeout
    while not TaskRun.objects.filter(label=label).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"nobody wrote {label!r} within {timeout} s")
        time.sleep(0.02)
    return "released"


@task(takes_context=True)
def refuse_bad_progress(context) -> list:
    """The errors set_progress raises for values it refuses."""
    errors = []
    for args in ((1.5,), (-0.1,), (float("nan"),), (True,), ("half",), (0.5, 7)):
        try:
            context.set_progress(*args)
        except (TypeError, ValueError) as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
    return errors


# ---- Workflows (docs/workflows.md) ------------------------------------------------


def _record_step(context, label: str, fail: bool) -> str:
    import os

    from django_pgqueue.workflows import parents

    from .models import TaskRun

    # A step released before all its parents succeeded would be a bug: say so loudly
    # (the chaos tests count these rows).
    early = [p.name for p in parents(context) if p.status != "succeeded"]
    TaskRun.objects.create(
        job_id=int(context.task_result.id),
        attempt=context.attempt,
        pid=os.getpid(),
        label=f"early:{','.join(early)}" if early else label,
    )
    if fail:
        raise RuntimeError(f"step {label} fails as asked")
    return label


@task(takes_context=True, atomic=True)
def record_step(context, label: str = "", fail: bool = False) -> str:
    """A workflow step recorded in the same transaction as its success (one TaskRun
    per successful attempt, exactly): the chaos tests count them."""
    return _record_step(context, label, fail)


@task(takes_context=True)
def record_plain_step(context, label: str = "", fail: bool = False) -> str:
    """The same step as an ordinary (at-least-once) job: completed by the worker's
    batched completion rather than in the task's transaction."""
    return _record_step(context, label, fail)


@task(takes_context=True)
def add_parents(context, extra: int = 0) -> int:
    """The sum of the parents' return values (results flow downstream)."""
    from django_pgqueue.workflows import parent_results

    return sum(parent_results(context).values()) + extra


@task(takes_context=True, atomic=True)
def record_batch_counts(context, label: str = "") -> str:
    """A batch callback: records the counts it saw (one TaskRun per run, exactly)."""
    import os

    from django_pgqueue.workflows import batch_counts

    from .models import TaskRun

    counts = batch_counts(context)
    text = f"{label}:{counts.total}/{counts.succeeded}/{counts.failed}/{counts.cancelled}"
    TaskRun.objects.create(
        job_id=int(context.task_result.id), attempt=context.attempt, pid=os.getpid(), label=text
    )
    return text
