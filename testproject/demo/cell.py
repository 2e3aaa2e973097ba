"""The pressure cells' consumer (``scripts/pressure_cells_mq.py``, configuration
``workers``): registered by the demo app when ``PRESSURE_CELL_PAUSE_MS`` is set."""

from __future__ import annotations

import os
import time

from django_pgqueue import mq

PAUSE = float(os.environ.get("PRESSURE_CELL_PAUSE_MS", "20")) / 1000.0


@mq.consumer("cell", vt=30, batch=10)
def handle_cell(message: mq.Message) -> None:
    """A message of known duration, so the worker's capacity is known."""
    time.sleep(PAUSE)
