from __future__ import annotations

import math
import xml.etree.ElementTree as ET

from jupyter_starverse.widgets._chart import downsample, loss_svg

SVG = "{http://www.w3.org/2000/svg}"


def test_empty_chart_says_it_waits() -> None:
    svg = loss_svg([])
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    assert "waiting for metrics" in svg
    assert root.find(f"{SVG}polyline") is None


def test_line_has_one_vertex_per_point_and_shows_the_last_value() -> None:
    points = [(i, 3.0 - i * 0.05) for i in range(40)]
    root = ET.fromstring(loss_svg(points, label="loss"))
    line = root.find(f"{SVG}polyline")
    assert line is not None
    vertices = line.attrib["points"].split()
    assert len(vertices) == 40
    # falling loss: the line goes down the screen, i.e. y grows
    ys = [float(v.split(",")[1]) for v in vertices]
    assert ys == sorted(ys)
    texts = [t.text or "" for t in root.iter(f"{SVG}text")]
    assert any(t.startswith("1.05 @ 39") for t in texts)


def test_non_finite_values_are_left_out_and_label_is_escaped() -> None:
    svg = loss_svg([(0, 1.0), (1, math.nan), (2, math.inf), (3, 0.5)], label="<loss>")
    root = ET.fromstring(svg)
    line = root.find(f"{SVG}polyline")
    assert line is not None
    assert len(line.attrib["points"].split()) == 2
    assert "&lt;loss&gt;" in svg


def test_flat_series_and_single_point_render() -> None:
    for pts in ([(5, 2.0)], [(0, 2.0), (1, 2.0)]):
        root = ET.fromstring(loss_svg(pts))
        assert root.find(f"{SVG}polyline") is not None


def test_downsample_keeps_ends_and_limit() -> None:
    pts = [(i, float(i)) for i in range(1000)]
    out = downsample(pts, limit=100)
    assert len(out) == 100
    assert out[0] == (0, 0.0)
    assert out[-1] == (999, 999.0)
    assert [s for s, _ in out] == sorted(s for s, _ in out)
    assert downsample(pts[:10], limit=100) == pts[:10]


def test_the_value_labels_fit_left_of_the_plot_whatever_their_length() -> None:
    # the minimum label (e.g. 1.23e-03) was cut at the chart's left edge
    for points in ([(0, 0.00123), (10, 0.00098)], [(0, 12345.0), (5, -2.5e-05)], [(0, 3.3), (9, 0.74)]):
        root = ET.fromstring(loss_svg(points, width=320, label="loss"))
        ns = {"s": "http://www.w3.org/2000/svg"}
        plot = root.find("s:rect", ns)
        assert plot is not None
        left = float(plot.get("x", "0"))
        for text in root.findall("s:text", ns):
            if text.get("text-anchor") == "end" and float(text.get("x", "0")) < left:
                width = 6.2 * len(text.text or "")  # the widest 10 px character
                assert float(text.get("x", "0")) - width >= 0, (points, text.text, left)
                assert float(text.get("y", "0")) <= float(plot.get("y", "0")) + float(plot.get("height", "0"))
