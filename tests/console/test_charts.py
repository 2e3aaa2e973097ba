"""The SVG charts: what they draw, what a screen reader reads, and no unescaped text."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from django_pgqueue.admin.charts import MAX_SERIES, Series, format_value, line_chart, sparkline
from django_pgqueue.rollup import histogram

SVG = "{http://www.w3.org/2000/svg}"


def _parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)


def test_a_line_chart_is_labelled_for_screen_readers_and_names_each_series():
    svg = line_chart(
        "Jobs succeeded",
        [Series("default", [1, 2, None, 4]), Series("emails", [0, 0, 3, 1])],
        start_label="10:00",
        end_label="10:03",
    )
    root = _parse(svg)
    assert root.get("role") == "img"
    title_id, desc_id = root.get("aria-labelledby").split()
    assert root.find(f"{SVG}title").get("id") == title_id
    assert root.find(f"{SVG}title").text == "Jobs succeeded"
    desc = root.find(f"{SVG}desc")
    assert desc.get("id") == desc_id
    assert desc.text == "default: latest 4, highest 4; emails: latest 1, highest 3"
    # The gap (None) splits the first line; a lone point after it has a marker only.
    lines = root.findall(f"{SVG}polyline")
    assert len(lines) == 2
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert "10:00" in texts and "10:03" in texts
    assert "default: latest 4, highest 4" in texts  # the legend, in words


def test_series_differ_by_dash_and_marker_not_colour_alone():
    series = [Series(f"q{i}", [i, i + 1]) for i in range(MAX_SERIES + 2)]
    root = _parse(line_chart("t", series, start_label="a", end_label="b"))
    lines = root.findall(f"{SVG}polyline")
    assert len(lines) == MAX_SERIES  # the busiest shown, no more
    dashes = [line.get("stroke-dasharray") for line in lines]
    assert len(set(dashes)) == MAX_SERIES
    shapes = {el.tag for el in root if el.tag.endswith(("circle", "rect", "polygon", "path"))}
    assert len(shapes) >= 3


def test_text_is_escaped():
    svg = line_chart(
        "<script>x</script>", [Series("a&b <c>", [1, 2])], start_label="<", end_label=">"
    )
    assert "<script>" not in svg
    root = _parse(svg)  # well-formed
    assert root.find(f"{SVG}title").text == "<script>x</script>"


def test_no_data_says_so():
    root = _parse(line_chart("t", [], start_label="a", end_label="b"))
    assert root.find(f"{SVG}desc").text == "no data"
    assert "no data in this window" in [t.text for t in root.iter(f"{SVG}text")]


def test_the_y_axis_ends_on_a_round_value_and_units_are_shown():
    root = _parse(
        line_chart("t", [Series("a", [0.3, 0.07])], start_label="a", end_label="b", unit="s")
    )
    labels = [t.text for t in root.iter(f"{SVG}text")]
    assert "500 ms" in labels  # 0.3 s rounds up to the 0.5 step
    assert format_value(2.5, "s") == "2.5 s"
    assert format_value(12_500, "") == "12k"
    assert format_value(None, "") == "-"


def test_a_sparkline_has_a_bar_and_a_tooltip_per_run_and_marks_by_shape():
    svg = sparkline(
        "Last runs", [("succeeded", "10:00"), ("dead", "10:05"), ("succeeded", "10:10")]
    )
    root = _parse(svg)
    assert root.find(f"{SVG}desc").text == "2 succeeded, 1 dead"
    groups = root.findall(f"{SVG}g")
    assert [g.find(f"{SVG}title").text for g in groups] == [
        "succeeded 10:00",
        "dead 10:05",
        "succeeded 10:10",
    ]
    marks = [g.find(f"{SVG}text").text for g in groups]
    assert marks == ["✓", "✗", "✓"]


def test_histogram_percentiles_are_the_upper_bound_of_their_bucket():
    counts = [0] * histogram.SIZE
    for seconds in [0.002] * 94 + [0.3] * 5 + [9999.0]:
        histogram.add(counts, seconds)
    assert histogram.percentile(counts, 0.5) == 0.0025
    assert histogram.percentile(counts, 0.95) == 0.5
    assert histogram.percentile(counts, 1.0) == histogram.BOUNDS[-1]  # the open bucket
    assert histogram.percentile([0] * histogram.SIZE, 0.95) is None
    assert histogram.merge([[1, 2], None, [1] * (histogram.SIZE + 3)])[:3] == [2, 3, 1]
    assert histogram.bucket(-1.0) == 0
