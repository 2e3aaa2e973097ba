"""The signed body: ``{"type","timestamp","data"}``, byte for byte."""

from __future__ import annotations

import datetime as dt
import json
import zoneinfo

import pytest

from django_pgqueue.webhooks.envelope import envelope_body, envelope_text, envelope_timestamp


@pytest.mark.parametrize(
    ("moment", "text"),
    [
        (dt.datetime(2026, 12, 2, 6, 10, 0, 123456, tzinfo=dt.UTC), "2026-12-02T06:10:00.123456Z"),
        (dt.datetime(2026, 12, 2, 6, 10, tzinfo=dt.UTC), "2026-12-02T06:10:00.000000Z"),
        (
            dt.datetime(2026, 12, 2, 7, 10, 0, 5, tzinfo=zoneinfo.ZoneInfo("Europe/Paris")),
            "2026-12-02T06:10:00.000005Z",
        ),
        (
            dt.datetime(2026, 1, 1, 19, 0, tzinfo=dt.timezone(dt.timedelta(hours=-5))),
            "2026-01-02T00:00:00.000000Z",
        ),
    ],
)
def test_the_timestamp_is_utc_with_microseconds_and_a_z(moment, text):
    assert envelope_timestamp(moment) == text


def test_the_body_is_compact_ascii_json_with_the_payload_spliced_unchanged():
    moment = dt.datetime(2026, 12, 2, 6, 10, 0, 123456, tzinfo=dt.UTC)
    data = '{"b":1,"a":"\\u00e9"}'
    text = envelope_text('order.pa"id\u00e9', moment, data)
    assert text == (
        '{"type":"order.pa\\"id\\u00e9","timestamp":"2026-12-02T06:10:00.123456Z",'
        '"data":{"b":1,"a":"\\u00e9"}}'
    )
    assert json.loads(text)["type"] == 'order.pa"id\u00e9'
    assert envelope_body("order.paid", moment, data) == envelope_text(
        "order.paid", moment, data
    ).encode("ascii")
