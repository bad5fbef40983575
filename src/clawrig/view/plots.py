"""Plots as plain SVG built on the server (no front-end library, nothing fetched at run time).

Each function returns one ``<svg>`` element as a string (markup-safe: every label is escaped),
sized in CSS pixels, with a ``<title>`` per mark so hovering shows the exact value. Scores are
in [0, 1]; costs in USD.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

PALETTE = ("#3366cc", "#dc7633", "#229954", "#8e44ad", "#c0392b", "#17a589", "#7f8c8d")
"""Series colours (job 1, job 2, ...); chosen to stay apart for common colour blindness."""


def colour(i: int) -> str:
    """The colour of series ``i``."""
    return PALETTE[i % len(PALETTE)]


def _fmt(v: float | None, digits: int = 3) -> str:
    return "—" if v is None else f"{v:.{digits}f}"


def _tick(v: float) -> str:
    """An axis label: whole numbers with thousands separators, else 3 significant digits."""
    return f"{v:,.0f}" if abs(v) >= 10 or v == int(v) else f"{v:.3g}"


def _empty(message: str, width: int = 520) -> str:
    return (
        f'<svg class="plot" width="{width}" height="40" role="img" aria-label="{escape(message)}">'
        f'<text x="8" y="24" class="muted">{escape(message)}</text></svg>'
    )


def _legend(series: Sequence[str], x: float, y: float) -> str:
    parts = []
    for i, name in enumerate(series):
        yy = y + i * 16
        parts.append(
            f'<rect x="{x}" y="{yy - 9}" width="10" height="10" fill="{colour(i)}"/>'
            f'<text x="{x + 14}" y="{yy}">{escape(name)}</text>'
        )
    return "".join(parts)


def bars(
    labels: Sequence[str],
    series: Sequence[str],
    values: Sequence[Sequence[float | None]],
    *,
    title: str,
    max_value: float = 1.0,
    width: int = 640,
) -> str:
    """Horizontal grouped bars: one group per label, one bar per series; ``values[s][i]`` is
    series ``s`` at label ``i`` (None: no bar, "—"). Values are drawn on [0, max_value]."""
    if not labels:
        return _empty(f"{title}: nothing to show")
    label_w = min(240, 12 + 7 * max(len(x) for x in labels))
    legend_h = 16 * len(series) + 8 if len(series) > 1 else 0
    bar_h, gap = 14, 8
    group_h = bar_h * len(series) + gap
    plot_w = width - label_w - 70
    height = 28 + legend_h + group_h * len(labels) + 24
    out = [
        f'<svg class="plot" width="{width}" height="{height}" role="img" '
        f'aria-label="{escape(title)}"><text x="4" y="16" class="ptitle">{escape(title)}</text>'
    ]
    if len(series) > 1:
        out.append(_legend(series, label_w, 36))
    top = 28 + legend_h
    for frac in (0, 0.25, 0.5, 0.75, 1.0):
        x = label_w + plot_w * frac
        out.append(
            f'<line x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{height - 20}" class="grid"/>'
            f'<text x="{x:.1f}" y="{height - 6}" class="axis" text-anchor="middle">'
            f"{max_value * frac:g}</text>"
        )
    for i, label in enumerate(labels):
        y0 = top + i * group_h
        out.append(
            f'<text x="{label_w - 6}" y="{y0 + group_h / 2 + 1}" text-anchor="end" '
            f'dominant-baseline="middle">{escape(label)}</text>'
        )
        for s, name in enumerate(series):
            v = values[s][i]
            y = y0 + s * bar_h
            if v is None:
                out.append(f'<text x="{label_w + 4}" y="{y + 11}" class="muted">—</text>')
                continue
            w = max(0.0, min(1.0, v / max_value)) * plot_w if max_value else 0
            out.append(
                f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="{bar_h - 2}" '
                f'fill="{colour(s)}"><title>{escape(name)} · {escape(label)}: {_fmt(v)}'
                f'</title></rect><text x="{label_w + w + 4:.1f}" y="{y + 11}" class="val">'
                f"{_fmt(v)}</text>"
            )
    out.append("</svg>")
    return "".join(out)


def scatter(
    series: Sequence[str],
    points: Sequence[Sequence[tuple[float, float, str]]],
    *,
    title: str,
    x_label: str,
    y_label: str,
    width: int = 640,
    height: int = 300,
) -> str:
    """A scatter plot: ``points[s]`` = (x, y, label) of series ``s``; y on [0, 1], x on
    [0, max x]. With every x equal to 0 it says so instead of drawing a line of dots."""
    xs = [p[0] for pts in points for p in pts]
    if not xs:
        return _empty(f"{title}: nothing to show")
    x_max = max(xs)
    if x_max <= 0:
        return _empty(f"{title}: no cost recorded (every trial cost $0)")
    left, right, top, bottom = 48, 16, 28 + (16 * len(series) if len(series) > 1 else 0), 40
    pw, ph = width - left - right, height - top - bottom
    out = [
        f'<svg class="plot" width="{width}" height="{height}" role="img" '
        f'aria-label="{escape(title)}"><text x="4" y="16" class="ptitle">{escape(title)}</text>'
    ]
    if len(series) > 1:
        out.append(_legend(series, left + 8, 36))
    for frac in (0, 0.25, 0.5, 0.75, 1.0):
        y = top + ph * (1 - frac)
        x = left + pw * frac
        out.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" class="grid"/>'
            f'<text x="{left - 4}" y="{y + 4:.1f}" class="axis" text-anchor="end">{frac:g}</text>'
            f'<text x="{x:.1f}" y="{top + ph + 14}" class="axis" text-anchor="middle">'
            f"{x_max * frac:.3g}</text>"
        )
    out.append(
        f'<text x="{left + pw / 2}" y="{height - 6}" class="axis" text-anchor="middle">'
        f"{escape(x_label)}</text>"
        f'<text x="12" y="{top + ph / 2}" class="axis" text-anchor="middle" '
        f'transform="rotate(-90 12 {top + ph / 2})">{escape(y_label)}</text>'
    )
    for s, pts in enumerate(points):
        for x, y, label in pts:
            cx = left + pw * (x / x_max)
            cy = top + ph * (1 - max(0.0, min(1.0, y)))
            out.append(
                f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="4" fill="{colour(s)}" '
                f'fill-opacity="0.7"><title>{escape(label)}: ${x:.4g}, score {y:.3f}</title>'
                "</circle>"
            )
    out.append("</svg>")
    return "".join(out)


def columns(
    labels: Sequence[str],
    series: Sequence[str],
    values: Sequence[Sequence[float]],
    *,
    title: str,
    y_label: str,
    width: int = 640,
    height: int = 240,
) -> str:
    """Vertical grouped columns (e.g. a histogram: labels = bins, values = counts)."""
    if not labels:
        return _empty(f"{title}: nothing to show")
    y_max = max((v for vs in values for v in vs), default=0) or 1
    left, right, top, bottom = 48, 16, 28 + (16 * len(series) if len(series) > 1 else 0), 40
    pw, ph = width - left - right, height - top - bottom
    group_w = pw / len(labels)
    col_w = max(2.0, (group_w - 6) / max(1, len(series)))
    out = [
        f'<svg class="plot" width="{width}" height="{height}" role="img" '
        f'aria-label="{escape(title)}"><text x="4" y="16" class="ptitle">{escape(title)}</text>'
    ]
    if len(series) > 1:
        out.append(_legend(series, left + 8, 36))
    for frac in (0, 0.5, 1.0):
        y = top + ph * (1 - frac)
        out.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" class="grid"/>'
            f'<text x="{left - 4}" y="{y + 4:.1f}" class="axis" text-anchor="end">'
            f"{_tick(y_max * frac)}</text>"
        )
    out.append(
        f'<text x="12" y="{top + ph / 2}" class="axis" text-anchor="middle" '
        f'transform="rotate(-90 12 {top + ph / 2})">{escape(y_label)}</text>'
    )
    for i, label in enumerate(labels):
        gx = left + i * group_w
        out.append(
            f'<text x="{gx + group_w / 2:.1f}" y="{top + ph + 14}" class="axis" '
            f'text-anchor="middle">{escape(label)}</text>'
        )
        for s, name in enumerate(series):
            v = values[s][i]
            h = ph * v / y_max
            out.append(
                f'<rect x="{gx + 3 + s * col_w:.1f}" y="{top + ph - h:.1f}" width="{col_w:.1f}" '
                f'height="{h:.1f}" fill="{colour(s)}"><title>{escape(name)} · {escape(label)}: '
                f"{v:g}</title></rect>"
            )
    out.append("</svg>")
    return "".join(out)


def lines(
    xs: Sequence[int],
    series: Sequence[str],
    values: Sequence[Sequence[float | None]],
    *,
    title: str,
    x_label: str,
    width: int = 640,
    height: int = 240,
) -> str:
    """Lines over integer x (e.g. pass@k and pass^k over k); y on [0, 1]; None breaks a line."""
    if len(xs) < 1:
        return _empty(f"{title}: nothing to show")
    left, right, top, bottom = 48, 16, 28 + 16 * len(series), 40
    pw, ph = width - left - right, height - top - bottom
    span = (max(xs) - min(xs)) or 1
    out = [
        f'<svg class="plot" width="{width}" height="{height}" role="img" '
        f'aria-label="{escape(title)}"><text x="4" y="16" class="ptitle">{escape(title)}</text>',
        _legend(series, left + 8, 36),
    ]
    for frac in (0, 0.5, 1.0):
        y = top + ph * (1 - frac)
        out.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" class="grid"/>'
            f'<text x="{left - 4}" y="{y + 4:.1f}" class="axis" text-anchor="end">{frac:g}</text>'
        )
    for x in xs:
        cx = left + pw * (x - min(xs)) / span
        out.append(
            f'<text x="{cx:.1f}" y="{top + ph + 14}" class="axis" text-anchor="middle">{x}</text>'
        )
    out.append(
        f'<text x="{left + pw / 2}" y="{height - 6}" class="axis" text-anchor="middle">'
        f"{escape(x_label)}</text>"
    )
    for s, name in enumerate(series):
        pts = [
            (left + pw * (x - min(xs)) / span, top + ph * (1 - v), x, v)
            for x, v in zip(xs, values[s], strict=False)
            if v is not None
        ]
        if len(pts) > 1:
            d = " ".join(f"{px:.1f},{py:.1f}" for px, py, _, _ in pts)
            out.append(
                f'<polyline points="{d}" fill="none" stroke="{colour(s)}" stroke-width="2"/>'
            )
        for px, py, x, v in pts:
            out.append(
                f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3.5" fill="{colour(s)}">'
                f"<title>{escape(name)} k={x}: {v:.3f}</title></circle>"
            )
    out.append("</svg>")
    return "".join(out)
