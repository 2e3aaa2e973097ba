"""Building a workflow: steps, their parents, and the one-transaction enqueue.

``Workflow.add`` records a call of a ``@task`` and the steps it waits for;
``Workflow.enqueue`` checks the whole graph (no cycle, no unknown parent, no step
of another workflow) before anything is written, then writes the workflow's row,
every step (a job: ``waiting`` when it has parents) and every edge in the
caller's transaction: all of them or none.
"""

from __future__ import annotations

import dataclasses
import graphlib
from collections.abc import Iterable, Sequence
from typing import Any

from django.db import transaction

from ..compat import Task, task_backends
from ..conf import get_settings
from ..exceptions import InvalidWorkflow
from ..models.workflows import WorkflowKind
from ..notify import wake_workers
from . import store

#: What a parent's failure (dead or cancelled) does to a step.
#: ``cancel``: the step and its own ``cancel`` descendants are cancelled at once.
#: ``continue``: the step runs once every parent has ended, and reads their outcomes.
#: ``if_failed``: runs once every parent ended, only if one failed (``on_failure``).
POLICIES = ("cancel", "continue", "if_failed")
#: Longest workflow or step name (the columns' length).
NAME_MAX_LENGTH = 200


@dataclasses.dataclass(frozen=True)
class Call:
    """A call of a ``@task`` not enqueued yet: ``call(send_receipt, order_id=42)``."""

    task: Task
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)


def call(task: Task, *args: Any, **kwargs: Any) -> Call:
    """A call of ``task`` for :func:`chain`, :func:`group`, :func:`chord` and batches."""
    return Call(task, args, kwargs)


@dataclasses.dataclass(eq=False)
class Step:
    """One step of a :class:`Workflow`; pass it in ``after=`` of later steps. After
    ``enqueue``, ``id`` is its job's id (``get_result`` reads it)."""

    workflow: Workflow
    name: str
    call: Call
    after: tuple[Step | str, ...]
    policy: str
    id: int | None = None


class Workflow:
    """A DAG of task calls, enqueued in one transaction (docs/workflows.md).

    ``on_parent_failure`` is the default policy of its steps (see ``POLICIES``);
    each ``add`` may set its own.
    """

    kind = WorkflowKind.WORKFLOW

    def __init__(self, name: str, *, on_parent_failure: str = "cancel") -> None:
        if not isinstance(name, str) or not name or len(name) > NAME_MAX_LENGTH:
            raise InvalidWorkflow(
                f"a workflow's name must be a non-empty string of at most "
                f"{NAME_MAX_LENGTH} characters, got {name!r}"
            )
        self.name = name
        self.policy = _policy(on_parent_failure)
        self.steps: list[Step] = []
        self._names: set[str] = set()
        self.id: int | None = None

    def add(
        self,
        task: Task | Call,
        *args: Any,
        after: Iterable[Step | str] = (),
        step_name: str | None = None,
        on_parent_failure: str | None = None,
        **kwargs: Any,
    ) -> Step:
        """Add a call of ``task`` that starts once every step in ``after`` succeeded
        (or ended, by its policy); return the step. ``after`` holds steps of this
        workflow or their names."""
        the_call = task if isinstance(task, Call) else Call(task, args, kwargs)
        if not isinstance(the_call.task, Task):
            raise InvalidWorkflow(f"step of {self.name!r}: {the_call.task!r} is not a @task")
        name = step_name or f"{the_call.task.name}-{len(self.steps) + 1}"
        if not isinstance(name, str) or len(name) > NAME_MAX_LENGTH:
            raise InvalidWorkflow(f"{self.name!r}: step name {name!r} is too long or not a string")
        if name in self._names:
            raise InvalidWorkflow(f"{self.name!r}: two steps are named {name!r}")
        if isinstance(after, Step | str):
            after = [after]
        policy = _policy(on_parent_failure) if on_parent_failure else self.policy
        step = Step(self, name, the_call, tuple(after), policy)
        self.steps.append(step)
        self._names.add(name)
        return step

    def _parents(self) -> dict[Step, list[Step]]:
        """Every step's parents, checked: each is a step of this workflow (by object
        or name), given once; the graph has no cycle."""
        by_name = {s.name: s for s in self.steps}
        parents: dict[Step, list[Step]] = {}
        for step in self.steps:
            found: list[Step] = []
            seen: set[int] = set()
            for parent in step.after:
                if isinstance(parent, str):
                    if parent not in by_name:
                        raise InvalidWorkflow(
                            f"{self.name!r}: step {step.name!r} waits for an unknown step "
                            f"{parent!r}"
                        )
                    parent = by_name[parent]
                elif not isinstance(parent, Step):
                    raise InvalidWorkflow(
                        f"{self.name!r}: step {step.name!r}: after= takes steps or step "
                        f"names, got {parent!r}"
                    )
                elif parent.workflow is not self:
                    raise InvalidWorkflow(
                        f"{self.name!r}: step {step.name!r} waits for step {parent.name!r} "
                        f"of another workflow ({parent.workflow.name!r})"
                    )
                if parent is step:
                    raise InvalidWorkflow(f"{self.name!r}: step {step.name!r} waits for itself")
                if id(parent) in seen:
                    raise InvalidWorkflow(
                        f"{self.name!r}: step {step.name!r} lists {parent.name!r} twice"
                    )
                seen.add(id(parent))
                found.append(parent)
            parents[step] = found
        return parents

    def enqueue(self) -> Workflow:
        """Write the workflow, every step and every edge in the caller's transaction
        (or in one of its own), after checking the whole graph; return ``self`` with
        ``id`` and each step's ``id`` set. Raises :class:`InvalidWorkflow` (nothing
        written) for a cycle, an unknown parent or a step of another workflow."""
        if self.id is not None:
            raise InvalidWorkflow(f"{self.name!r} was enqueued already (workflow #{self.id})")
        if not self.steps:
            raise InvalidWorkflow(f"{self.name!r} has no steps")
        parents = self._parents()
        try:
            order = list(graphlib.TopologicalSorter(parents).static_order())
        except graphlib.CycleError as exc:
            cycle = " -> ".join(s.name for s in exc.args[1])
            raise InvalidWorkflow(f"{self.name!r} has a cycle: {cycle}") from None
        # Every step checked and serialised before the first row is written.
        rows = []
        for step in order:
            backend = task_backends[step.call.task.backend]
            if not hasattr(backend, "step_row"):
                raise InvalidWorkflow(
                    f"{self.name!r}: step {step.name!r} uses backend "
                    f"{step.call.task.backend!r}, which is not django_pgqueue's"
                )
            rows.append(
                backend.step_row(
                    step.call.task,
                    step.call.args,
                    step.call.kwargs,
                    name=step.name,
                    policy=step.policy,
                    parents=len(parents[step]),
                )
            )
        position = {step: i for i, step in enumerate(order)}
        edges = [(position[p], position[s]) for s in self.steps for p in parents[s]]
        db = get_settings().DATABASE
        with transaction.atomic(using=db):
            workflow_id, job_ids = store.insert(db, self.name, self.kind, rows, edges)
            wake_workers(db)
        ids = {step: job_ids[position[step]] for step in order}
        self.id = workflow_id
        for step in self.steps:
            step.id = ids[step]
        return self


def _policy(value: str) -> str:
    if value not in POLICIES:
        raise InvalidWorkflow(f"on_parent_failure must be one of {POLICIES}, got {value!r}")
    return value


def _calls(calls: Sequence[Call | Task]) -> list[Call]:
    return [c if isinstance(c, Call) else Call(c) for c in calls]


def chain(*calls: Call | Task, name: str = "chain") -> Workflow:
    """Each call after the one before: ``chain(call(a), call(b), call(c)).enqueue()``."""
    wf = Workflow(name)
    previous: list[Step] = []
    for c in _calls(calls):
        previous = [wf.add(c, after=previous)]
    return wf


def group(*calls: Call | Task, name: str = "group") -> Workflow:
    """Every call at once, independent of each other."""
    wf = Workflow(name)
    for c in _calls(calls):
        wf.add(c)
    return wf


def chord(calls: Sequence[Call | Task], then: Call | Task, *, name: str = "chord") -> Workflow:
    """Every call of ``calls`` at once, then ``then`` once all have succeeded; it reads
    their results with ``parent_results``."""
    wf = Workflow(name)
    heads = [wf.add(c) for c in _calls(calls)]
    wf.add(_calls([then])[0], after=heads)
    return wf
