"""Plots as inline SVG text, drawn by hand: bar charts, horizontal bar charts, scatters, step lines.

Why hand-written SVG and not matplotlib or Plotly: the report must be one static file that opens
offline (air-gapped clusters, CI artifacts). Plotly inlines about 3.5 MB of JavaScript per page;
matplotlib is an optional 40 MB dependency that takes about a second to import and embeds every
glyph as a path, so a page of 200 small plots weighs megabytes. The plots here are a few simple
kinds (bars, points, lines), so a few hundred lines of SVG cost nothing to install, render in any
browser with no script at all, and are deterministic (same data, same bytes: diffable artifacts).

Invariants: every function returns one `<svg class="plot" data-plot=NAME>` element (a plot with no
data still renders, saying so); every piece of text that reaches the SVG (labels, titles, names
from a store) goes through `html.escape`; numbers are formatted, never pasted as text.
"""

from __future__ import annotations

import math
from html import escape
from typing import Iterable, Sequence

WIDTH, HEIGHT = 420, 240
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 56, 12, 28, 46
PALETTE = ("#3b6fb6", "#d9822b", "#2f9e6e", "#b8405e", "#7a5cb0", "#7f7f7f")


def _num(v: float) -> str:
    """A coordinate: finite, two decimals (SVG must never hold 'nan' or 'inf')."""
    return f"{v:.2f}" if math.isfinite(v) else "0"


def _tick(v: float) -> str:
    """A readable axis label: 0, 12, 3.5, 1.2e-05, 4e+06."""
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e5 or a < 1e-3:
        return f"{v:.1e}"
    return f"{v:.3g}"


# The title's font is 12px, weight 600, sans-serif. These widths bound each character's as measured
# in headless Chromium on Debian (DejaVu Sans Bold: W 13.2 px, m 12.5, w 11.1, capitals at most
# 10.2, other letters and digits at most 8.6, i l t r ( _ at most 6), so a line measured with them fits.
TITLE_LINE_PX, TITLE_MAX_LINES = 14, 2
_NARROW = frozenset("iljtfrIJ.,:;'|!()[]-_ ")


def _title_px(text: str) -> float:
    """An upper bound of `text`'s width in pixels in the plot title's font."""
    return sum(14 if ch in "WMm%@" else 11.5 if ch in "w&" else 10.5 if ch.isupper() else 6 if ch in _NARROW else 9
               for ch in text)


def title_lines(title: str, width: int) -> list[str]:
    """`title` on at most TITLE_MAX_LINES lines that fit a plot `width` pixels wide, the last cut
    with '…' past them (the whole title stays in the SVG's <title>, shown on hover): an SVG text
    does not wrap, and a long title (the scatter's "... not shown" note) was clipped at the edge."""
    room = width - 12
    lines: list[str] = []
    line = ""
    for word in title.split():
        candidate = f"{line} {word}" if line else word
        if _title_px(candidate) <= room:
            line = candidate
            continue
        if line:
            lines.append(line)
        while _title_px(word) > room:  # a word wider than a line (a long output name): split it
            cut = 1
            while _title_px(word[:cut + 1]) <= room:
                cut += 1
            lines.append(word[:cut])
            word = word[cut:]
        line = word
    lines.append(line)
    if len(lines) > TITLE_MAX_LINES:
        last = lines[TITLE_MAX_LINES - 1]
        while last and _title_px(last + "…") > room:
            last = last[:-1]
        lines = lines[:TITLE_MAX_LINES - 1] + [last.rstrip() + "…"]
    return lines


class _Svg:
    """An SVG element being written; `text` escapes what it is given. A title that needs a second
    line makes the plot that much taller (`top`: where the plot area starts), never narrower."""

    def __init__(self, name: str, title: str, width: int = WIDTH, height: int = HEIGHT):
        lines = title_lines(title, width)
        extra = TITLE_LINE_PX * (len(lines) - 1)
        self.name, self.width, self.height, self.top = name, width, height + extra, MARGIN_TOP + extra
        if len(lines) == 1:
            heading = escape(lines[0])
        else:
            heading = "".join(f'<tspan x="{width / 2:.0f}" dy="{0 if i == 0 else TITLE_LINE_PX}">{escape(line)}</tspan>'
                              for i, line in enumerate(lines))
        self.parts: list[str] = [
            f'<title>{escape(title)}</title>',
            f'<text x="{width / 2:.0f}" y="16" text-anchor="middle" class="plot-title">{heading}</text>',
        ]

    def text(self, x: float, y: float, s: str, *, anchor: str = "middle", cls: str = "tick", rotate: float | None = None) -> None:
        turn = f' transform="rotate({_num(rotate)} {_num(x)} {_num(y)})"' if rotate is not None else ""
        self.parts.append(
            f'<text x="{_num(x)}" y="{_num(y)}" text-anchor="{anchor}" class="{cls}"{turn}>{escape(str(s))}</text>'
        )

    def add(self, element: str) -> None:
        self.parts.append(element)

    def done(self) -> str:
        return (
            f'<svg class="plot" data-plot="{escape(self.name)}" xmlns="http://www.w3.org/2000/svg" role="img" '
            f'width="{self.width}" height="{self.height}" viewBox="0 0 {self.width} {self.height}">'
            + "".join(self.parts)
            + "</svg>"
        )


def _frame(svg: _Svg, x_label: str, y_label: str) -> tuple[float, float, float, float]:
    """Draw the axes; returns the plot area (left, top, right, bottom)."""
    left, top = MARGIN_LEFT, svg.top
    right, bottom = svg.width - MARGIN_RIGHT, svg.height - MARGIN_BOTTOM
    svg.add(f'<path class="axis" d="M{left} {top} V{bottom} H{right}" fill="none" stroke="#444"/>')
    svg.text((left + right) / 2, svg.height - 6, x_label, cls="axis-label")
    svg.text(14, (top + bottom) / 2, y_label, cls="axis-label", rotate=-90)
    return left, top, right, bottom


def _empty(svg: _Svg, message: str) -> str:
    svg.text(svg.width / 2, svg.height / 2, message, cls="no-data")
    return svg.done()


def _y_ticks(svg: _Svg, area, y_max: float, *, log: bool = False, y_min: float = 0.0) -> None:
    left, top, right, bottom = area
    values = _log_ticks(y_min, y_max) if log else [y_max * i / 4 for i in range(5)]
    for v in values:
        y = _scale(v, y_min, y_max, bottom, top, log)
        svg.add(f'<path d="M{left - 4} {_num(y)} H{left}" stroke="#444"/>')
        svg.text(left - 6, y + 4, _tick(v), anchor="end")


def _log_ticks(lo: float, hi: float) -> list[float]:
    """Powers of ten inside [lo, hi] (2x and 5x too when the range spans less than two decades)."""
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    step = max(1, (b - a) // 5)
    mantissas = (1, 2, 5) if b - a <= 2 else (1,)
    ticks = [m * 10.0**e for e in range(a, b + 1, step) for m in mantissas]
    return [t for t in ticks if lo <= t <= hi] or [lo, hi]


def _scale(v: float, lo: float, hi: float, px_lo: float, px_hi: float, log: bool) -> float:
    if log:
        v, lo, hi = math.log10(max(v, lo)), math.log10(lo), math.log10(hi)
    if hi == lo:
        return (px_lo + px_hi) / 2
    return px_lo + (v - lo) / (hi - lo) * (px_hi - px_lo)


def bar_chart(name: str, title: str, bars: Sequence[tuple[str, float]], *, x_label: str, y_label: str) -> str:
    """Vertical bars, one per (label, value), in the order given (a histogram's bins)."""
    svg = _Svg(name, title)
    if not bars or not any(v > 0 for _, v in bars):
        return _empty(svg, "no data stored for this plot")
    area = left, top, right, bottom = _frame(svg, x_label, y_label)
    y_max = max(v for _, v in bars)
    _y_ticks(svg, area, y_max)
    slot = (right - left) / len(bars)
    every = max(1, math.ceil(len(bars) / 10))  # at most ten labels under the bars
    for i, (label, v) in enumerate(bars):
        h = (v / y_max) * (bottom - top) if y_max else 0
        x = left + i * slot
        svg.add(
            f'<rect class="bar" x="{_num(x + slot * 0.1)}" y="{_num(bottom - h)}" width="{_num(slot * 0.8)}" '
            f'height="{_num(h)}" fill="{PALETTE[0]}"><title>{escape(str(label))}: {_tick(v)}</title></rect>'
        )
        if i % every == 0:
            svg.text(x + slot / 2, bottom + 14, label)
    return svg.done()


def hbar_chart(
    name: str, title: str, rows: Sequence[tuple[str, Sequence[float]]], *, series: Sequence[str], x_label: str
) -> str:
    """Horizontal grouped bars: one row per label, one bar per series value (coverage, timings)."""
    height = MARGIN_TOP + MARGIN_BOTTOM + max(1, len(rows)) * (6 + 9 * len(series)) + 16
    svg = _Svg(name, title, width=WIDTH + 120, height=max(HEIGHT // 2, height))
    if not rows or not any(v > 0 for _, vs in rows for v in vs):
        return _empty(svg, "no data stored for this plot")
    left, top = MARGIN_LEFT + 120, svg.top
    right, bottom = svg.width - MARGIN_RIGHT - 40, svg.height - MARGIN_BOTTOM
    svg.add(f'<path class="axis" d="M{left} {top} V{bottom} H{right}" fill="none" stroke="#444"/>')
    svg.text((left + right) / 2, svg.height - 6, x_label, cls="axis-label")
    x_max = max(v for _, vs in rows for v in vs)
    row_h = (bottom - top) / len(rows)
    bar_h = (row_h - 4) / len(series)
    for r, (label, values) in enumerate(rows):
        y0 = top + r * row_h + 2
        svg.text(left - 6, y0 + row_h / 2 + 3, label, anchor="end")
        for s, v in enumerate(values):
            w = v / x_max * (right - left) if x_max else 0
            y = y0 + s * bar_h
            svg.add(
                f'<rect class="bar" x="{left}" y="{_num(y)}" width="{_num(w)}" height="{_num(bar_h * 0.9)}" '
                f'fill="{PALETTE[s % len(PALETTE)]}"><title>{escape(label)}, {escape(series[s])}: {_tick(v)}</title></rect>'
            )
            svg.text(left + w + 3, y + bar_h * 0.8, _tick(v), anchor="start", cls="value")
    _legend(svg, series, y=svg.height - 22)
    return svg.done()


def _legend(svg: _Svg, names: Iterable[str], *, y: float) -> None:
    x = MARGIN_LEFT
    for i, n in enumerate(names):
        svg.add(f'<rect x="{x}" y="{_num(y - 8)}" width="10" height="10" fill="{PALETTE[i % len(PALETTE)]}"/>')
        svg.text(x + 14, y + 1, n, anchor="start", cls="legend")
        x += 20 + 7 * len(str(n))


def scatter(
    name: str,
    title: str,
    points: Sequence[tuple[float, float]],
    *,
    x_label: str,
    y_label: str,
    log: bool = True,
    diagonal: bool = False,
    point_labels: Sequence[str] | None = None,
    sides: tuple[str, str] | None = None,
    empty_message: str = "no points to draw",
) -> str:
    """Points, on log axes by default (zeros and non-finite values are dropped there, and counted
    in the title); `diagonal` draws y = x, the line a compiled error equal to eager's sits on.
    With `diagonal` and `sides` (what a point above the line means, what one below means) the
    two halves are labelled and their points coloured apart (class `above` / `below` / `on`)."""
    finite = [(x, y) for x, y in points if math.isfinite(x) and math.isfinite(y)]
    labels = list(point_labels) if point_labels is not None else [""] * len(points)
    kept = [(p, lab) for p, lab in zip(points, labels) if p in finite and (not log or (p[0] > 0 and p[1] > 0))]
    dropped = len(points) - len(kept)
    svg = _Svg(name, title + (f" ({dropped} at 0 or not finite, not shown)" if dropped else ""))
    if not kept:
        return _empty(svg, empty_message if not points else "every point is 0 or not finite")
    area = left, top, right, bottom = _frame(svg, x_label, y_label)
    xs, ys = [p[0] for p, _ in kept], [p[1] for p, _ in kept]
    if diagonal:  # one scale for both axes, so the diagonal is y = x
        lo, hi = min(xs + ys), max(xs + ys)
        x_lo, x_hi, y_lo, y_hi = lo, hi, lo, hi
    else:
        x_lo, x_hi, y_lo, y_hi = min(xs), max(xs), min(ys), max(ys)
    if log:
        x_lo, x_hi, y_lo, y_hi = x_lo / 2, x_hi * 2, y_lo / 2, y_hi * 2
    else:
        x_lo, y_lo = min(0.0, x_lo), min(0.0, y_lo)
        x_hi, y_hi = x_hi * 1.05 or 1.0, y_hi * 1.05 or 1.0
    _y_ticks(svg, area, y_hi, log=log, y_min=y_lo if log else 0.0)
    for v in _log_ticks(x_lo, x_hi) if log else [x_hi * i / 4 for i in range(5)]:
        x = _scale(v, x_lo, x_hi, left, right, log)
        if left <= x <= right:
            svg.add(f'<path d="M{_num(x)} {bottom} V{bottom + 4}" stroke="#444"/>')
            svg.text(x, bottom + 15, _tick(v))
    if diagonal:
        svg.add(
            f'<path class="diagonal" d="M{_num(_scale(x_lo, x_lo, x_hi, left, right, log))} {_num(_scale(y_lo, y_lo, y_hi, bottom, top, log))} '
            f'L{_num(_scale(x_hi, x_lo, x_hi, left, right, log))} {_num(_scale(y_hi, y_lo, y_hi, bottom, top, log))}" '
            f'stroke="#999" stroke-dasharray="4 3" fill="none"/>'
        )
    if diagonal and sides:
        above, below = sides
        n_above = sum(y > x for (x, y), _ in kept)
        n_below = sum(y < x for (x, y), _ in kept)
        svg.text(left + 6, top + 12, f"{above}: {n_above}", anchor="start", cls="legend")
        svg.text(right - 6, bottom - 6, f"{below}: {n_below}", anchor="end", cls="legend")
    for (x, y), label in kept:
        cx, cy = _scale(x, x_lo, x_hi, left, right, log), _scale(y, y_lo, y_hi, bottom, top, log)
        tip = f"{label + ': ' if label else ''}{_tick(x)}, {_tick(y)}"
        side, color = "point", PALETTE[1]
        if diagonal and sides:
            side, color = ("above", PALETTE[3]) if y > x else ("below", PALETTE[0]) if y < x else ("on", PALETTE[5])
        svg.add(
            f'<circle class="point {side}" cx="{_num(cx)}" cy="{_num(cy)}" r="3.5" fill="{color}" fill-opacity="0.75">'
            f'<title>{escape(tip)}</title></circle>'
        )
    return svg.done()


def step_lines(
    name: str, title: str, series: Sequence[tuple[str, Sequence[tuple[float, float]]]], *, x_label: str, y_label: str
) -> str:
    """Lines through (x, y) points, one per named series, on one linear scale (x from 0)."""
    svg = _Svg(name, title)
    pts = [p for _, s in series for p in s]
    if len(pts) < 2:
        return _empty(svg, "fewer than two points: nothing to draw over time")
    area = left, top, right, bottom = _frame(svg, x_label, y_label)
    x_hi = max(x for x, _ in pts) or 1.0
    y_hi = max(y for _, y in pts) * 1.05 or 1.0
    _y_ticks(svg, area, y_hi)
    for i in range(5):
        v = x_hi * i / 4
        x = _scale(v, 0, x_hi, left, right, False)
        svg.text(x, bottom + 15, _tick(v))
    for i, (label, s) in enumerate(series):
        if not s:
            continue
        d = " ".join(
            f"{'M' if j == 0 else 'L'}{_num(_scale(x, 0, x_hi, left, right, False))} {_num(_scale(y, 0, y_hi, bottom, top, False))}"
            for j, (x, y) in enumerate(s)
        )
        svg.add(f'<path class="line" d="{d}" fill="none" stroke="{PALETTE[i % len(PALETTE)]}" stroke-width="2"/>')
    _legend(svg, [label for label, _ in series], y=svg.height - 22)
    return svg.done()
