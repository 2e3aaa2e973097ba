"""The fan-out's cost with many applications: 100,000 applications x 3 endpoints
against 1 application x 3 endpoints (docs/multi-tenant.md, "Cost").

    DATABASE_URL=postgresql://.../scratch python3 scripts/dev.py shell -- \\
        python scripts/bench_tenant_fanout.py [--applications 100000]

Migrates the database it is given and fills it with applications and endpoints (use a
scratch database), then times ``send_event(..., application=...)`` in both shapes and
prints the median per event and the plan of the statement.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")


def main() -> None:
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection, transaction

    from django_pgqueue import send_event, sql
    from django_pgqueue.models import Application, Delivery, Endpoint, Event

    parser = argparse.ArgumentParser()
    parser.add_argument("--applications", type=int, default=100_000)
    parser.add_argument("--events", type=int, default=300)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)

    def fill(count: int) -> None:
        Delivery.objects.all().delete()
        Event.objects.all().delete()
        Endpoint.objects.all().delete()
        Application.objects.all().delete()
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO pgqueue_application (uid, name, metadata, is_active, created_at,"
                " updated_at) SELECT 'cust_' || i, '', '{}', true, now(), now()"
                " FROM generate_series(1, %s) AS i",
                [count],
            )
        ciphertext = Endpoint.objects.create(url="https://example.com/x").secret_ciphertext
        Endpoint.objects.all().delete()
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO pgqueue_endpoint (url, secret, previous_secrets, event_types,"
                " channels, headers, description, is_active, disabled_reason, breaker_state,"
                " consecutive_failures, breaker_cooldown, rate_period, ordering, created_at,"
                " updated_at, application_id)"
                " SELECT 'https://example.com/' || a.id || '/' || n, %s, '[]', '[]', '[]',"
                " '{}', '', true, '', 'closed', 0, 0, 1, 'none', now(), now(), a.id"
                " FROM pgqueue_application AS a, generate_series(1, 3) AS n",
                [ciphertext],
            )
            cursor.execute("ANALYZE pgqueue_application; ANALYZE pgqueue_endpoint")

    def measure(count: int) -> float:
        fill(count)
        uid = f"cust_{count // 2 or 1}"
        timings = []
        for i in range(args.events):
            started = time.perf_counter()
            with transaction.atomic():
                send_event("order.paid", {"n": i}, application=uid)
            timings.append(time.perf_counter() - started)
        assert Delivery.objects.count() == 3 * args.events
        # EXPLAIN ANALYZE runs the INSERT: in a transaction rolled back afterwards.
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("DELETE FROM pgqueue_delivery")
            app_id = Application.objects.get(uid=uid).pk
            cursor.execute(
                "EXPLAIN (ANALYZE, COSTS OFF) " + sql.INSERT_APPLICATION_DELIVERIES,
                {
                    "event_id": Event.objects.first().pk,
                    "max_attempts": 3,
                    "ordering_key": None,
                    "type_keys": ["order.paid", "order.*"],
                    "channels": [],
                    "application_id": app_id,
                },
            )
            plan = "\n    ".join(row[0] for row in cursor.fetchall())
            transaction.set_rollback(True)
        median = statistics.median(timings) * 1000
        print(f"{count:>7} applications x 3 endpoints: send_event median {median:.3f} ms")
        print("    " + plan)
        return median

    one = measure(1)
    many = measure(args.applications)
    print(f"ratio {args.applications} / 1 applications: {many / one:.2f}")


if __name__ == "__main__":
    main()
