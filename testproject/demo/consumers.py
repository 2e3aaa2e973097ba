"""Demo message consumers (registered by the demo app when DEMO_MQ_CONSUMERS=1)."""

from __future__ import annotations

import time

from django_pgqueue import mq


@mq.consumer("demo_work", vt=2, batch=5)
def handle_work(message: mq.Message) -> None:
    """Records each handling in queue ``demo_done``; can hang or fail on early reads."""
    body = message.message
    print(f"HANDLING {message.msg_id} {message.read_ct}", flush=True)
    if body.get("hang_reads", 0) >= message.read_ct:
        time.sleep(3600)  # until the test kills the worker
    if body.get("fail_reads", 0) >= message.read_ct:
        raise RuntimeError(f"message {message.msg_id} fails on read {message.read_ct}")
    mq.send("demo_done", {"msg_id": message.msg_id, "read_ct": message.read_ct})
