"""A workflow's graph as SVG, drawn on the server (the admin's workflow page needs
no front-end build): steps in columns by depth, an arrow per edge, each box
coloured by its step's state. Every text is escaped."""

from __future__ import annotations

from collections.abc import Sequence

from django.utils.html import escape

from .store import StepRow

#: Fill of a step's box by state.
COLOURS = {
    "waiting": "#e5e7eb",
    "pending": "#dbeafe",
    "in_progress": "#fde68a",
    "failed": "#fecaca",
    "succeeded": "#bbf7d0",
    "dead": "#f87171",
    "cancelled": "#d1d5db",
}
BOX_W, BOX_H, GAP_X, GAP_Y, PAD = 170, 44, 60, 16, 10
#: Most steps drawn; a wider workflow shows its first ones and says how many are left.
MAX_STEPS = 300


def _depths(steps: Sequence[StepRow], edges: Sequence[tuple[int, int]]) -> dict[int, int]:
    parents: dict[int, list[int]] = {s.id: [] for s in steps}
    for parent, child in edges:
        if child in parents and parent in parents:
            parents[child].append(parent)
    depth: dict[int, int] = {}
    for step in steps:  # ids grow in topological order (written so at enqueue)
        depth[step.id] = 1 + max((depth.get(p, 0) for p in parents[step.id]), default=-1)
    return depth


def workflow_svg(steps: Sequence[StepRow], edges: Sequence[tuple[int, int]]) -> str:
    """The SVG of a workflow's steps and edges."""
    shown = list(steps[:MAX_STEPS])
    depth = _depths(shown, edges)
    rows: dict[int, int] = {}
    where: dict[int, tuple[int, int]] = {}
    for step in shown:
        column = depth[step.id]
        row = rows.get(column, 0)
        rows[column] = row + 1
        where[step.id] = (PAD + column * (BOX_W + GAP_X), PAD + row * (BOX_H + GAP_Y))
    width = PAD * 2 + (max(depth.values(), default=0) + 1) * (BOX_W + GAP_X)
    height = PAD * 2 + max(rows.values(), default=1) * (BOX_H + GAP_Y)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="pgq-workflow" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img">',
        '<defs><marker id="pgq-arrow" viewBox="0 0 10 10" refX="10" refY="5" '
        'markerWidth="6" markerHeight="6" orient="auto"><path d="M0,0 L10,5 L0,10 z" '
        'fill="#6b7280"/></marker></defs>',
    ]
    for parent, child in edges:
        if parent in where and child in where:
            (x1, y1), (x2, y2) = where[parent], where[child]
            parts.append(
                f'<line x1="{x1 + BOX_W}" y1="{y1 + BOX_H // 2}" x2="{x2}" '
                f'y2="{y2 + BOX_H // 2}" stroke="#6b7280" marker-end="url(#pgq-arrow)"/>'
            )
    for step in shown:
        x, y = where[step.id]
        fill = COLOURS.get(step.status, "#ffffff")
        parts.append(
            f'<g class="pgq-step pgq-{escape(step.status)}"><title>#{step.id} '
            f"{escape(step.task_path)}: {escape(step.status)}</title>"
            f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="6" fill="{fill}" '
            'stroke="#374151"/>'
            f'<text x="{x + 8}" y="{y + 18}" font-size="12" font-family="sans-serif">'
            f"{escape(step.name[:24])}</text>"
            f'<text x="{x + 8}" y="{y + 34}" font-size="11" font-family="sans-serif" '
            f'fill="#374151">{escape(step.status)}</text></g>'
        )
    if len(steps) > MAX_STEPS:
        parts.append(
            f'<text x="{PAD}" y="{height - 2}" font-size="12" font-family="sans-serif">'
            f"... and {len(steps) - MAX_STEPS} more steps</text>"
        )
    parts.append("</svg>")
    return "".join(parts)
