"""The worker process: claim loop, task threads, completer, listener, supervisor."""

from .worker import Worker

__all__ = ["Worker"]
