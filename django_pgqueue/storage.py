"""The former name of :mod:`django_pgqueue.operations`, kept so existing imports work.

Every operator state change and its declaration now lives in ``operations``.
"""

from .operations import (
    OperationResult,
    abort,
    abort_job,
    apply_endpoint_operation,
    apply_operation,
    cancel,
    move_to_dlq,
    replay,
    replay_endpoint_deliveries,
    retry_now,
    retry_refused_deliveries,
    send_test_event,
)

__all__ = [
    "OperationResult",
    "abort",
    "abort_job",
    "apply_endpoint_operation",
    "apply_operation",
    "cancel",
    "move_to_dlq",
    "replay",
    "replay_endpoint_deliveries",
    "retry_now",
    "retry_refused_deliveries",
    "send_test_event",
]
