"""The worker: its loop end to end, as real processes, supervised task threads."""
