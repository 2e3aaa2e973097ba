"""Park a disabled endpoint's waiting deliveries out of the delivery claim's way.

The delivery claim walks the due index (``next_attempt_at, id`` over pending and
failed rows) from its head and skips rows whose endpoint is disabled. A disabled
endpoint keeps its waiting deliveries, and an endpoint disabled after days of
failures (or by a 410 Gone) may hold a large backlog at the head of that index:
every claim of every worker then read through all of it (a claim took about 60 ms
with 100,000 such rows instead of about 2 ms).

A trigger on the endpoint table moves those deliveries' ``next_attempt_at`` to a
fixed far-future instant (``sql.PARKED_AT``) when ``is_active`` goes false, and
back to now when it goes true again, however the flag changed: the admin
actions, the breaker's automatic disable, a form, ``QuerySet.update()`` or SQL.
Parked rows are beyond every ``next_attempt_at <= now()`` range scan, so a claim
never reads them. Their state and attempts do not change.

The trigger and its function are declared in ``models/database_objects.py``
(``PARKING_TRIGGER``); that declaration is never edited in place, so this migration
keeps creating what it created. The two statements below are this migration's own
one-off data changes, written out with the instant (``sql.PARKED_AT``).
"""

from django.db import migrations

from django_pgqueue.models.database_objects import PARKING_TRIGGER

# Endpoints disabled before this migration: park what they hold now.
PARK_EXISTING = """
UPDATE pgqueue_delivery AS d
SET next_attempt_at = TIMESTAMPTZ '9999-01-01 00:00:00+00', updated_at = now()
FROM pgqueue_endpoint AS e
WHERE e.id = d.endpoint_id AND NOT e.is_active AND d.status IN ('pending', 'failed')
  AND d.next_attempt_at < TIMESTAMPTZ '9999-01-01 00:00:00+00'
"""

UNPARK_ALL = """
UPDATE pgqueue_delivery SET next_attempt_at = now(), updated_at = now()
WHERE status IN ('pending', 'failed') AND next_attempt_at >= TIMESTAMPTZ '9999-01-01 00:00:00+00'
"""


class Migration(migrations.Migration):
    dependencies = [
        ("django_pgqueue", "0003_queue_autovacuum"),
    ]

    operations = [
        migrations.RunSQL(
            sql=[*PARKING_TRIGGER.create_sql(), PARK_EXISTING],
            reverse_sql=[*PARKING_TRIGGER.drop_sql(), UNPARK_ALL],
        ),
    ]
