"""Server-rendered SVG charts: no JavaScript, no CDN, readable by tests and screen readers
(every chart has a text label, and the numbers are also printed beside it)."""

from dataclasses import dataclass

from django import template

register = template.Library()

METER_WIDTH = 1000  # viewBox units; the SVG scales to its container
# Bar charts are drawn narrow (420 units) so their 12-unit text stays legible once scaled.
BAR_X, BAR_MAX = 150, 220


@dataclass(frozen=True)
class Segment:
    css: str
    x: float
    width: float


def _segments(total: int, parts: list[tuple[int, str]]) -> list[Segment]:
    """Consecutive segments of one bar, each `value` wide out of `total`, clipped to the bar."""
    segments, x = [], 0.0
    for value, css in parts:
        width = min(METER_WIDTH * value / total, METER_WIDTH - x) if total else 0.0
        if width > 0:
            segments.append(Segment(css=css, x=round(x, 1), width=round(width, 1)))
            x += width
    return segments


def _x(total: int, value: int) -> float:
    return round(METER_WIDTH * min(value, total) / total, 1) if total else 0.0


@register.inclusion_tag("charts/meter.html")
def pool_meter(summary):
    """A pool: guaranteed tokens/s against the guaranteeable limit (dashed) and capacity."""
    return {
        "width": METER_WIDTH,
        "segments": _segments(summary.capacity_tps, [(summary.guaranteed_tps, "fill-guaranteed")]),
        "marker": _x(summary.capacity_tps, summary.guaranteeable_tps),
        "label": f"{summary.name}: {summary.guaranteed_tps} of {summary.guaranteeable_tps} "
                 f"guaranteeable tokens/s guaranteed; capacity {summary.capacity_tps}",
    }


@register.inclusion_tag("charts/meter.html")
def allocation_meter(allocation):
    """An allocation: its guarantee and burst ceiling within its pool's capacity."""
    capacity = allocation.pool.capacity_tps
    return {
        "width": METER_WIDTH,
        "segments": _segments(capacity, [
            (allocation.guaranteed_tps, "fill-guaranteed"),
            (allocation.burst_tps - allocation.guaranteed_tps, "fill-headroom"),
        ]),
        "marker": None,
        "label": f"{allocation.guaranteed_tps} tokens/s guaranteed, bursting to "
                 f"{allocation.burst_tps}, in a pool of {capacity} tokens/s",
    }


@register.inclusion_tag("charts/bars.html")
def bar_chart(rows, label):
    """Horizontal bars for `rows` of {"label", "value"}: one row per 28 units of height, labels
    in the first BAR_X units, the longest bar BAR_MAX long."""
    peak = max((row["value"] for row in rows), default=0)
    bars = [
        {"label": row["label"], "value": row["value"], "y": i * 28,
         "width": round(BAR_MAX * row["value"] / peak, 1) if peak else 0}
        for i, row in enumerate(rows)
    ]
    return {"bars": bars, "height": max(len(bars) * 28, 28), "label": label, "bar_x": BAR_X,
            "width": BAR_X + BAR_MAX + 50}


# Line charts: a plot area of LINE_W x LINE_H units right of a LINE_X gutter for the y labels;
# about 1000 units wide, so the 12-unit text stays near 12px on a desktop-wide card.
LINE_X, LINE_W, LINE_H = 90, 880, 200


def _polyline(values: list[float], top: float) -> str:
    step = LINE_W / max(len(values) - 1, 1)
    return " ".join(f"{LINE_X + i * step:.1f},{LINE_H - LINE_H * v / top:.1f}"
                    for i, v in enumerate(values))


@register.inclusion_tag("charts/lines.html")
def line_chart(chart):
    """`chart`: {"label", "times", "series", "limits"?, "unit"?}. `series`: [{"name", "css",
    "values"}] drawn over `times` (datetimes, equally spaced); `limits`: [{"name", "value"}]
    drawn as dashed horizontal lines (allocation ceilings). The y axis runs from 0 to a little
    above the highest value or limit."""
    label, times, series = chart["label"], chart["times"], chart["series"]
    limits, unit = chart.get("limits", ()), chart.get("unit", "")
    peak = max([v for s in series for v in s["values"]] + [lim["value"] for lim in limits]
               + [1])
    top = peak * 1.1
    return {
        "label": label, "unit": unit, "x0": LINE_X, "x1": LINE_X + LINE_W, "height": LINE_H,
        "width": LINE_X + LINE_W + 10, "top": round(top), "first": times[0] if times else None,
        "last": times[-1] if times else None,
        "lines": [{"name": s["name"], "css": s["css"], "points": _polyline(s["values"], top),
                   "total": round(sum(s["values"]), 1), "latest": s["values"][-1] if s["values"]
                   else 0} for s in series],
        "limits": [{"name": lim["name"], "value": lim["value"],
                    "y": round(LINE_H - LINE_H * lim["value"] / top, 1)} for lim in limits],
    }


COLUMNS_WIDTH, COLUMNS_HEIGHT = 480, 120


@register.inclusion_tag("charts/columns.html")
def column_chart(points, label, limit=None, unit=""):
    """Columns over time for `points` of (start, value), oldest left. `limit` (a capacity or
    an allocation) is drawn as a dashed line and sets the scale when it is the higher."""
    peak = max([value for _, value in points] + [limit or 0]) or 1
    step = COLUMNS_WIDTH / max(len(points), 1)
    columns = [
        {"x": round(i * step, 1), "width": round(max(step - 2, 1), 1),
         "height": round(COLUMNS_HEIGHT * value / peak, 1),
         "y": round(COLUMNS_HEIGHT * (1 - value / peak), 1),
         "title": f"{start:%Y-%m-%d %H:%M} UTC: {value:,.1f} {unit}".strip()}
        for i, (start, value) in enumerate(points)
    ]
    highest = max((value for _, value in points), default=0)
    return {"columns": columns, "label": label, "width": COLUMNS_WIDTH,
            "height": COLUMNS_HEIGHT, "limit": limit,
            "limit_y": round(COLUMNS_HEIGHT * (1 - (limit or 0) / peak), 1),
            # The scale in words: SVG text would be stretched by preserveAspectRatio="none".
            "scale": f"highest {highest:,.1f} {unit}".strip()
                     + (f"; dashed line: {limit:,} {unit}".rstrip() if limit else "")}
