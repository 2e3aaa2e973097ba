"""A producer process for fault tests: ``producer.py COUNT``.

Enqueues COUNT ``record_run`` jobs through the public API, one transaction each,
and prints ``ACK <id>`` only after ``enqueue`` returned (the commit was
acknowledged). A connection error (the server crashed or restarts) is retried
with a fresh connection; such an enqueue is not acknowledged, so the test only
holds the queue to the ids it printed.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")

import django

django.setup()

from django.db import InterfaceError, OperationalError, connection  # noqa: E402

from testproject.demo.tasks import record_run  # noqa: E402


def main(count: int) -> None:
    done = 0
    while done < count:
        try:
            result = record_run.enqueue(f"p{done}")
        except (OperationalError, InterfaceError) as exc:
            print(f"ERR {type(exc).__name__}", flush=True)
            connection.close()
            time.sleep(0.05)
            continue
        print(f"ACK {result.id}", flush=True)
        done += 1
    print("DONE", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]))
