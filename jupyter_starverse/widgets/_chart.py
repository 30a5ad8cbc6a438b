"""A small loss chart as inline SVG: no plotting library, renders in any notebook front end."""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

__all__ = ["downsample", "loss_svg"]


def downsample(points: Sequence[tuple[int, float]], *, limit: int = 300) -> list[tuple[int, float]]:
    """Keep at most ``limit`` points, evenly spaced, always keeping the first and the last."""
    finite = [(s, v) for s, v in points if math.isfinite(v)]
    if len(finite) <= limit:
        return finite
    stride = (len(finite) - 1) / (limit - 1)
    return [finite[round(i * stride)] for i in range(limit)]


#: The widest character of the 10 px labels (digits, "e", "-", "."), in pixels.
_CHAR_W = 6.2


def _fmt(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1000 or abs(value) < 0.01:
        return f"{value:.2e}"
    return f"{value:.3g}"


def loss_svg(
    points: Sequence[tuple[int, float]],
    *,
    width: int = 360,
    height: int = 150,
    label: str = "loss",
    reference: Sequence[tuple[int, float]] = (),
    reference_label: str = "reference",
) -> str:
    """Render ``(step, value)`` pairs as an SVG line chart with its axis ranges.

    Parameters
    ----------
    points
        Metric values by step; non-finite values (nan, inf) are left out.
    width, height
        Size in pixels.
    label
        Name of the metric, shown in the corner.
    reference
        A reproduction's reference curve at the same steps (``runtime.reference_series``), drawn
        dashed beside the live line; the value range covers both.
    reference_label
        What the dashed line is (its kind and source), in its tooltip.
    """
    data = downsample(points)
    pad_l, pad_r, pad_t, pad_b = 46, 8, 16, 20
    plot_w, plot_h = width - pad_l - pad_r, height - pad_t - pad_b
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="starverse-chart" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(label)} by step">',
        f'<rect x="{pad_l}" y="{pad_t}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#bbb"/>',
        f'<text x="{pad_l}" y="11" font-size="11" fill="#555">{escape(label)}</text>',
    ]
    if not data:
        parts.append(
            f'<text x="{pad_l + plot_w / 2}" y="{pad_t + plot_h / 2}" font-size="11" fill="#888" '
            'text-anchor="middle">waiting for metrics</text>'
        )
        parts.append("</svg>")
        return "".join(parts)
    ref = [(s, v) for s, v in downsample(reference) if data[0][0] <= s <= data[-1][0]]
    steps = [s for s, _ in data]
    values = [v for _, v in data] + [v for _, v in ref]
    s0, s1 = min(steps), max(steps)
    v0, v1 = min(values), max(values)
    if v1 == v0:
        v0, v1 = v0 - 0.5, v1 + 0.5
    if s1 == s0:
        s0, s1 = s0 - 1, s1 + 1
    # the value labels sit left of the plot: the margin fits the longer one (10 px text is at
    # most ~6.2 px a character), so a minimum such as 1.23e-03 is never cut at the left edge
    pad_l = max(30, math.ceil(_CHAR_W * max(len(_fmt(v0)), len(_fmt(v1)))) + 8)
    plot_w = width - pad_l - pad_r
    parts[1] = f'<rect x="{pad_l}" y="{pad_t}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#bbb"/>'
    parts[2] = f'<text x="{pad_l}" y="11" font-size="11" fill="#555">{escape(label)}</text>'

    def xy(step: int, value: float) -> str:
        x = pad_l + (step - s0) / (s1 - s0) * plot_w
        y = pad_t + (v1 - value) / (v1 - v0) * plot_h
        return f"{x:.1f},{y:.1f}"

    path = " ".join(xy(s, v) for s, v in data)
    low_y = pad_t + plot_h - 1  # the minimum's baseline inside the plot, above the step labels
    last_step, last_value = data[-1]
    if len(ref) >= 2:
        parts.append(
            f'<polyline class="starverse-reference" fill="none" stroke="#ff7f0e" stroke-width="1.2" '
            f'stroke-dasharray="4 3" points="{" ".join(xy(s, v) for s, v in ref)}">'
            f"<title>{escape(reference_label)}</title></polyline>"
        )
        parts.append(f'<text x="{pad_l + 4}" y="{pad_t + 11}" font-size="10" fill="#ff7f0e">- - reference</text>')
    parts += [
        f'<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" points="{path}"/>',
        f'<circle cx="{xy(last_step, last_value).split(",")[0]}" cy="{xy(last_step, last_value).split(",")[1]}" '
        'r="2.5" fill="#1f77b4"/>',
        f'<text x="{pad_l - 4}" y="{pad_t + 9}" font-size="10" fill="#555" text-anchor="end">{_fmt(v1)}</text>',
        f'<text x="{pad_l - 4}" y="{low_y}" font-size="10" fill="#555" text-anchor="end">{_fmt(v0)}</text>',
        f'<text x="{pad_l}" y="{height - 6}" font-size="10" fill="#555">step {s0}</text>',
        f'<text x="{pad_l + plot_w}" y="{height - 6}" font-size="10" fill="#555" text-anchor="end">{s1}</text>',
        f'<text x="{width - pad_r}" y="11" font-size="11" fill="#1f77b4" text-anchor="end">'
        f"{_fmt(last_value)} @ {last_step}</text>",
        "</svg>",
    ]
    return "".join(parts)
