"""show: pictures leave matplotlib's global state alone, nothing overlaps, notebooks get HTML."""

import base64
import os
import subprocess
import sys
from types import SimpleNamespace

import networkx as nx
import pandas as pd
import pytest

import autoplace
from autoplace import show, zoo
from autoplace.solve import solve

matplotlib = pytest.importorskip("matplotlib")
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.text import Text

TWO = {"cpu0": "llvm", "cpu1": "llvm"}


@pytest.fixture(scope="module")
def result():
    """mlp with cpu0 capped at half the model: kernels on cpu1, copies between the two."""
    model = zoo.parse("mlp")
    free = autoplace.optimize(model, None, TWO)
    cap = int(0.5 * solve(free.problem, "all:cpu0").memory_bytes_by_target["cpu0"])
    return autoplace.optimize(model, None, TWO, memory_bytes={"cpu0": cap})


def _wide_result(length: int = 150):
    """A synthetic plan: a long chain with side branches on alternating devices (folding kicks in)."""
    graph = nx.DiGraph()
    assignment = {}
    for i in range(length):
        graph.add_node(f"k{i}", kind="unit", ops=["relax.matmul" if i % 3 else "relax.add"],
                       latency_us={"cpu0": 10.0 + i % 7, "cpu1": 10.0 + i % 7})
        assignment[f"k{i}"] = "cpu0" if (i // 10) % 2 else "cpu1"
        if i:
            graph.add_edge(f"k{i - 1}", f"k{i}", nbytes=4096)
        if i % 5 == 0:
            graph.add_node(f"w{i}", kind="unit", ops=["relax.permute_dims"],
                           latency_us={"cpu0": 1.0, "cpu1": 1.0})
            graph.add_edge(f"w{i}", f"k{i}", nbytes=1024)
            assignment[f"w{i}"] = "cpu0"
    copies = [SimpleNamespace(latency_us=1.0) for u, v in graph.edges if assignment[u] != assignment[v]]
    plan = SimpleNamespace(assignment=assignment, objective_us=1234.0, copies=copies)
    return SimpleNamespace(view=SimpleNamespace(graph=graph), plan=plan, targets=list(TWO), model_name="wide")


def _table(n: int = 8) -> pd.DataFrame:
    """A compare table whose plans all land on nearly the same point."""
    median = [100.0 + i * 0.1 for i in range(n)]
    columns = dict(predicted_us=[120.0] * n, measured_median_us=median,
                   measured_min_us=[m - 1 for m in median], measured_max_us=[m + 1 for m in median])
    table = pd.DataFrame(columns, index=[f"plan {i}" for i in range(n)])
    table.attrs["model"] = "synthetic"
    return table


def _boxes(fig, artists):
    """Window extents; of an annotation, its text's only (not the line to its point)."""
    renderer = fig.canvas.get_renderer()
    return [Text.get_window_extent(a, renderer) if isinstance(a, Text) else a.get_window_extent(renderer)
            for a in artists]


def test_drawing_leaves_the_backend_alone(result):
    before = matplotlib.get_backend()
    matplotlib.use("svg")  # any backend but Agg: the old code switched to Agg
    try:
        show.render_plan(result)
        show.plot_compare(_table())
        show.result_html(result)
        assert matplotlib.get_backend() == "svg"
    finally:
        matplotlib.use(before)


def test_drawing_imports_no_pyplot():
    code = ("import sys, test_show; from autoplace import show; show.render_plan(test_show._wide_result()); "
            "show.plot_compare(test_show._table()); assert 'matplotlib.pyplot' not in sys.modules, 'pyplot'")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=os.path.dirname(os.path.abspath(__file__)))
    assert run.returncode == 0, run.stderr


def test_result_html_has_header_table_and_picture(result):
    html = show.result_html(result)
    assert html.startswith(f"<b>{result.model_name}</b>: predicted <b>{result.predicted_us:.1f} us</b>")
    assert "gap" in html and "solved in" in html and "<table" in html
    assert "<img" in html
    png = base64.b64decode(html.split("data:image/png;base64,")[1].split('"')[0])
    assert png.startswith(b"\x89PNG")


@pytest.mark.parametrize("which", ["mlp", "wide"])
def test_plan_legend_title_and_labels_do_not_overlap(result, which, tmp_path):
    fig = show.render_plan(result if which == "mlp" else _wide_result(), str(tmp_path / "plan.png"))
    assert (tmp_path / "plan.png").stat().st_size > 0
    FigureCanvasAgg(fig).draw()
    (ax,) = fig.axes
    labels = ax.texts
    assert labels, "the costliest kernels are labelled"
    legend, title = _boxes(fig, [ax.get_legend(), ax.title])
    boxes = _boxes(fig, labels)
    for i, box in enumerate(boxes):
        assert not box.overlaps(legend) and not box.overlaps(title), labels[i].get_text()
        assert fig.bbox.contains(box.x0, box.y0) and fig.bbox.contains(box.x1, box.y1), "label clipped"
        assert not any(box.overlaps(other) for other in boxes[i + 1:]), labels[i].get_text()
    assert not legend.overlaps(title)
    assert fig.bbox.contains(legend.x0, legend.y0) and fig.bbox.contains(legend.x1, legend.y1)


def test_compare_labels_do_not_overlap(tmp_path):
    fig = show.plot_compare(_table(), str(tmp_path / "compare.png"))
    FigureCanvasAgg(fig).draw()
    (ax,) = fig.axes
    boxes = _boxes(fig, ax.texts)
    assert len(boxes) == 8
    for i, box in enumerate(boxes):
        assert not any(box.overlaps(other) for other in boxes[i + 1:]), ax.texts[i].get_text()
