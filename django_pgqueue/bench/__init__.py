"""The benchmark behind ``manage.py pgqueue_bench`` (see docs/performance.md)."""
