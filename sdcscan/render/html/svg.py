"""Charts as plain SVG text: scales, ticks, axes, marks and a legend, nothing else.

Every chart is an `<svg class="chart">` whose data marks carry the class `mark` (the browser tests count
them) and a `<title>` child where a reader may want the number under the pointer: the browser shows it
as a tooltip, with no script. Colours come from classes styled by the page's one stylesheet, so a mark
costs a few dozen bytes. All text passes through `esc`: unit ids, workloads and model names come from
report files, and a report is hostile input.
"""

from __future__ import annotations

import html
import itertools
import math
from collections.abc import Callable, Iterable, Sequence

WIDTH = 1000  # a full-width chart's viewBox width; the page scales it to the column
HALF = 600  # a chart in one of two columns: narrower, so its text is scaled down less
Point = tuple[float, float | None]  # (x, y); y None: a gap in the line


def esc(value: object) -> str:
    """`value` as text safe inside an HTML or SVG element or a quoted attribute."""
    return html.escape(str(value), quote=True)


def fmt_num(x: float | None, digits: int = 3) -> str:
    """A number for people: 3 significant digits and an SI prefix (29.9G, 512, 0.0412)."""
    if x is None or not math.isfinite(x):
        return "-"
    ax = abs(x)
    for size, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if ax >= size:
            return f"{x / size:.{digits}g}{prefix}"
    return f"{x:.{digits}g}"


def fmt_pct(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:.0%}"


def pct_ticks(ticks: Sequence[float]) -> Callable[[float], str]:
    """A percent format with as many decimals as the ticks' step needs for no two to read alike
    (ticks 0.2% apart were drawn "0%, 0%, 0%, 1%")."""
    step = min((b - a for a, b in itertools.pairwise(ticks) if b > a), default=1.0)
    decimals = max(0, -math.floor(math.log10(step * 100) + 1e-9)) if step > 0 else 0
    return lambda x: "-" if not math.isfinite(x) else f"{x:.{decimals}%}"


def fmt_efficiency(x: float | None) -> str:
    """An efficiency for the page: above 100% the plain-op peak it is divided by was measured low (under
    contention at the unit's start), so the figure is not a fact about the unit and is not shown as one."""
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x:.0%}" if x <= 1.0 else "uncertain (above 100%: the peak was measured under load)"


def _c(v: float) -> str:
    """A coordinate: one decimal is finer than any screen shows, and keeps the file small."""
    return f"{v:.1f}".rstrip("0").rstrip(".")


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values (1, 2 or 5 times a power of ten) covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / max(count, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    n = int((hi - first) / step + 1e-9) + 1
    return [first + k * step for k in range(n)]


class Scale:
    """Linear map from data [lo, hi] to pixels [a, b]; `log` maps log10(1 + x) instead (counts)."""

    def __init__(self, lo: float, hi: float, a: float, b: float, *, log: bool = False) -> None:
        self.log = log
        self.lo, self.hi = (self._t(lo), self._t(hi)) if hi > lo else (self._t(lo), self._t(lo) + 1.0)
        self.a, self.b = a, b

    def _t(self, x: float) -> float:
        return math.log10(1.0 + max(x, 0.0)) if self.log else x

    def __call__(self, x: float) -> float:
        return self.a + (self._t(x) - self.lo) / (self.hi - self.lo) * (self.b - self.a)


class Chart:
    """One SVG chart: a plot area inside margins, then axes, marks and a legend added in order."""

    def __init__(
        self,
        label: str,
        *,
        height: int = 240,
        width: int = WIDTH,
        left: int = 70,
        right: int = 24,
        top: int = 16,
        bottom: int = 42,
    ) -> None:
        self.label = label
        self.height, self.width = height, width
        self.x0, self.x1 = float(left), float(width - right)
        self.y0, self.y1 = float(top), float(height - bottom)  # y0: top of the plot area
        self.under: list[str] = []  # axes and grid lines: drawn first, whenever they are added
        self.parts: list[str] = []
        self.marks = 0

    # -- axes --------------------------------------------------------------------------------------

    def x_axis(self, scale: Scale, ticks: Iterable[float], fmt: Callable[[float], str], label: str) -> None:
        out = [
            f'<line class="axis" x1="{_c(self.x0)}" y1="{_c(self.y1)}" x2="{_c(self.x1)}" y2="{_c(self.y1)}"/>'
        ]
        for t in ticks:
            x = scale(t)
            if self.x0 - 0.5 <= x <= self.x1 + 0.5:
                out.append(
                    f'<text class="tick" x="{_c(x)}" y="{_c(self.y1 + 15)}" text-anchor="middle">{esc(fmt(t))}</text>'
                )
        mid = (self.x0 + self.x1) / 2
        out.append(
            f'<text class="axis-label" x="{_c(mid)}" y="{_c(self.y1 + 34)}" text-anchor="middle">{esc(label)}</text>'
        )
        self.under.extend(out)

    def y_axis(self, scale: Scale, ticks: Iterable[float], fmt: Callable[[float], str], label: str) -> None:
        out = [
            f'<line class="axis" x1="{_c(self.x0)}" y1="{_c(self.y0)}" x2="{_c(self.x0)}" y2="{_c(self.y1)}"/>'
        ]
        for t in ticks:
            y = scale(t)
            if self.y0 - 0.5 <= y <= self.y1 + 0.5:
                out.append(
                    f'<line class="grid" x1="{_c(self.x0)}" y1="{_c(y)}" x2="{_c(self.x1)}" y2="{_c(y)}"/>'
                )
                out.append(
                    f'<text class="tick" x="{_c(self.x0 - 6)}" y="{_c(y + 4)}" text-anchor="end">{esc(fmt(t))}</text>'
                )
        mid = (self.y0 + self.y1) / 2
        out.append(
            f'<text class="axis-label" x="14" y="{_c(mid)}" text-anchor="middle" '
            f'transform="rotate(-90 14 {_c(mid)})">{esc(label)}</text>'
        )
        self.under.extend(out)

    def band_labels(self, labels: Sequence[tuple[float, str]], *, x: float | None = None) -> None:
        """Row labels left of the plot area (a strip chart's units), right-aligned at `x`."""
        at = self.x0 - 6 if x is None else x
        self.parts.extend(
            f'<text class="tick" x="{_c(at)}" y="{_c(y + 4)}" text-anchor="end">{esc(text)}</text>'
            for y, text in labels
        )

    # -- marks -------------------------------------------------------------------------------------

    def line(self, points: Sequence[tuple[float, float]], cls: str, title: str = "") -> None:
        """A polyline through pixel points (a data series: counted as a mark)."""
        if len(points) == 1:  # a lone point would be invisible as a line
            self.circle(points[0][0], points[0][1], 2.5, cls, title)
            return
        pts = " ".join(f"{_c(x)},{_c(y)}" for x, y in points)
        self.parts.append(f'<polyline class="mark {cls}" points="{pts}">{_title(title)}</polyline>')
        self.marks += 1

    def series(
        self, xs: Scale, ys: Scale, points: Sequence[Point], cls: str, title: str = "", *, dots: bool = False
    ) -> None:
        """A data series as one line through its points; a point with y None (no data there) is skipped,
        not drawn as zero. `dots` also marks each point (a short series reads better with them)."""
        kept = [(xs(x), ys(y)) for x, y in points if y is not None and math.isfinite(y)]
        if kept:
            self.line(kept, cls, title)
        if dots and len(kept) > 1:
            self.parts.extend(f'<circle class="{cls}" cx="{_c(x)}" cy="{_c(y)}" r="2.2"/>' for x, y in kept)

    def rect(self, x: float, y: float, w: float, h: float, cls: str, title: str = "") -> None:
        self.parts.append(
            f'<rect class="mark {cls}" x="{_c(x)}" y="{_c(y)}" width="{_c(max(w, 0.0))}" height="{_c(max(h, 0.0))}">'
            f"{_title(title)}</rect>"
        )
        self.marks += 1

    def stack(self, x: float, width: float, ys: Scale, parts: Sequence[tuple[float, str, str]]) -> None:
        """A stacked bar at pixel `x`: (value, class, title) of each part, from the baseline up; empty
        parts are left out."""
        base = 0.0
        for n, cls, title in parts:
            if n:
                self.rect(x, ys(base + n), width, ys(base) - ys(base + n), cls, title)
                base += n

    def circle(self, x: float, y: float, r: float, cls: str, title: str = "") -> None:
        self.parts.append(
            f'<circle class="mark {cls}" cx="{_c(x)}" cy="{_c(y)}" r="{_c(r)}">{_title(title)}</circle>'
        )
        self.marks += 1

    def marker(self, x: float, y: float, cls: str, title: str = "") -> None:
        """A downward triangle whose tip is at (x, y): a unit singled out on a distribution."""
        self.parts.append(f'<path class="mark {cls}" d="M{_c(x)} {_c(y)}l-5 -9h10z">{_title(title)}</path>')
        self.marks += 1

    # -- annotations -------------------------------------------------------------------------------

    def rule(self, x: float, cls: str, label: str = "", *, anchor: str = "start") -> None:
        """A vertical reference line across the plot area (a median, a threshold), labelled at the top."""
        self.parts.append(
            f'<line class="{cls}" x1="{_c(x)}" y1="{_c(self.y0)}" x2="{_c(x)}" y2="{_c(self.y1)}"/>'
        )
        if label:
            dx = 4 if anchor == "start" else -4
            self.text(x + dx, self.y0 + 10, label, "note", anchor=anchor)

    def hrule(self, y: float, cls: str, label: str = "") -> None:
        self.parts.append(
            f'<line class="{cls}" x1="{_c(self.x0)}" y1="{_c(y)}" x2="{_c(self.x1)}" y2="{_c(y)}"/>'
        )
        if label:
            self.text(self.x1 - 4, y - 4, label, "note", anchor="end")

    def text(self, x: float, y: float, text: str, cls: str = "note", *, anchor: str = "start") -> None:
        self.parts.append(
            f'<text class="{cls}" x="{_c(x)}" y="{_c(y)}" text-anchor="{anchor}">{esc(text)}</text>'
        )

    def legend(self, items: Sequence[tuple[str, str]]) -> None:
        """Swatches and labels in a row at the top right of the plot area, right to left."""
        x = self.x1
        for cls, label in reversed(items):
            width = 7.0 * len(label) + 26
            x -= width
            self.parts.append(
                f'<rect class="swatch {cls}" x="{_c(x)}" y="{_c(self.y0 - 12)}" width="12" height="8"/>'
                f'<text class="tick" x="{_c(x + 16)}" y="{_c(self.y0 - 4)}">{esc(label)}</text>'
            )

    def svg(self) -> str:
        """The chart as one `<svg>` element; its `<title>` is what screen readers announce."""
        return (
            f'<svg class="chart" viewBox="0 0 {self.width} {self.height}" role="img" '
            f'preserveAspectRatio="xMidYMid meet"><title>{esc(self.label)}</title>{"".join(self.under)}{"".join(self.parts)}</svg>'
        )


def _title(text: str) -> str:
    return f"<title>{esc(text)}</title>" if text else ""
