"""``runworkers --reload``: Django's autoreloader around one worker, for development.

Django's ``run_with_reloader`` (what ``runserver`` uses) runs the command in a child
process that watches every imported module and exits to be restarted when one
changes; the worker runs in that child's main Django thread. Before the reload, a
``file_changed`` receiver stops the worker as SIGTERM would (no new claims, running
tasks finish within ``SHUTDOWN_GRACE_SECONDS``, unstarted rows released), so a reload
never leaves rows to wait for their lease.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.utils import autoreload

from ..conf import get_settings
from .worker import Worker

logger = logging.getLogger("django_pgqueue.worker")


def run_with_reload(make_worker: Callable[[], Worker]) -> None:
    """Run ``make_worker()`` under the autoreloader until interrupted."""

    def inner() -> None:
        worker = make_worker()
        finished = threading.Event()

        def drain_before_reload(sender: Any, file_path: Path, **kwargs: Any) -> None:
            logger.info("%s changed: stopping worker %s to reload", file_path, worker.worker_id)
            worker.stop()
            finished.wait(get_settings().SHUTDOWN_GRACE_SECONDS + 10)
            # Returning nothing (falsy) lets Django go on with the reload.

        autoreload.file_changed.connect(drain_before_reload, weak=False)
        try:
            worker.run()
        finally:
            finished.set()

    autoreload.run_with_reloader(inner)
