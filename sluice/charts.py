"""The one chart component of the portal and the console, server side.

A view describes a chart as a `TimeChart`: series over UTC time buckets and the limits that
matter (an allocation's guarantee, a pool's speed floor). `{% chart %}` (templatetags/charts.py)
writes it into the page as JSON with a text summary, and static/charts.js draws it with uPlot
(vendored in static/vendor/): UTC time axis, gridlines, units, values on hover, limits as
labelled dashed lines.

The y scale is chosen here, so that it shows the data: a limit far above the data (a pool's
121,000 tokens/s capacity over 500 tokens/s of use) would flatten the data into the floor, so
it is listed beside the chart as above the scale instead of stretching the axis to it.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sluice.templatetags.numbers import count, rate

# A limit up to this many times the highest value is drawn inside the chart; higher ones are
# named beside it ("above the chart") so the data keeps most of the height.
LIMIT_REACH = 4
HEADROOM = 1.15  # the top of the scale, above the highest value or limit drawn


@dataclass(frozen=True)
class Series:
    name: str
    values: Sequence[float | None]
    color: str = "brand"  # a colour name of static/charts.js's palette
    bars: bool = False
    # What the summary says about it: "total" for counts per bucket (requests), "average"
    # for rates (tokens/s), "latest" for running totals (tokens used so far today).
    summary: str = "average"
    # The window's true average, when the buckets at its edges are partial (so the mean of
    # the buckets is not quite it): the figure other places on the page print.
    mean: float | None = None


@dataclass(frozen=True)
class Limit:
    name: str
    value: float


@dataclass(frozen=True)
class TimeChart:
    key: str  # unique on its page: the figure's data-chart and the JSON element's id
    title: str
    unit: str
    times: Sequence[datetime]  # bucket starts, UTC
    step_seconds: int
    series: Sequence[Series]
    limits: Sequence[Limit] = field(default_factory=tuple)
    decimals: int = 0  # 0: integers (counts, ms); 1: rates

    def _data_max(self) -> float:
        return max((v for s in self.series for v in s.values if v is not None), default=0)

    @property
    def limits_shown(self) -> list[Limit]:
        reach = self._data_max() * LIMIT_REACH
        # Without data there is nothing to squash: every limit shows where the ceiling is.
        return [lim for lim in self.limits if not reach or lim.value <= reach]

    @property
    def limits_above(self) -> list[Limit]:
        shown = self.limits_shown
        return [lim for lim in self.limits if lim not in shown]

    @property
    def y_max(self) -> float:
        top = max([self._data_max(), *(lim.value for lim in self.limits_shown)])
        return top * HEADROOM if top else 1

    def format(self, value: float | None) -> str:
        return rate(value) if self.decimals else count(value)

    @staticmethod
    def format_limit(value: float) -> str:
        """Limits are whole tokens/s or ms: no decimals unless they have some."""
        return count(value) if float(value).is_integer() else rate(value)

    @property
    def summary(self) -> str:
        """The chart in words: its aria-label, and the facts printed under it."""
        parts = []
        for s in self.series:
            values = [v for v in s.values if v is not None]
            if not values:
                parts.append(f"{s.name}: nothing measured")
            elif s.summary == "total":
                parts.append(f"{s.name}: {count(sum(values))} in total, at most "
                             f"{count(max(values))} in one bucket")
            elif s.summary == "latest":
                parts.append(f"{s.name}: {self.format(values[-1])} {self.unit} so far")
            else:
                mean = s.mean if s.mean is not None else sum(values) / len(values)
                parts.append(f"{s.name}: {self.format(mean)} {self.unit} on average, "
                             f"highest {self.format(max(values))}")
        return "; ".join(parts) + "."

    def as_json(self) -> dict:
        shown = self.limits_shown
        return {
            "key": self.key, "title": self.title, "unit": self.unit, "decimals": self.decimals,
            "step": self.step_seconds, "yMax": self.y_max,
            "x": [int(t.timestamp()) for t in self.times],
            "series": [{"name": s.name, "values": list(s.values), "color": s.color,
                        "bars": s.bars} for s in self.series],
            "limits": [{"name": lim.name, "value": lim.value} for lim in shown],
        }
