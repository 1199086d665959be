"""Pictures of a placement: kernels coloured by device, copies drawn and sized by bytes.

Layout: one column per topological generation of the kernel graph (data flows left to right), so
a model with thousands of ops stays a readable band; the most expensive kernels are labelled where
their label overlaps no node, copy or other label.

Drawing uses :class:`matplotlib.figure.Figure` objects with an Agg canvas of their own: no pyplot, no
``matplotlib.use``, so showing a result in a notebook leaves the user's backend alone.
"""

from __future__ import annotations

import base64
import html
import io
import math

import networkx as nx
import numpy as np

PALETTE = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860"]
COPY_COLOUR = "#D62728"
TITLE_BAND_IN = 0.55  # above the graph: two title lines
LEGEND_BAND_IN = 0.35  # below the graph: one legend row
MARGIN_IN = 0.15
LABEL_FONT_PT = 7


def _figure(width_in: float, height_in: float):
    """A figure with its own Agg canvas (so text can be measured), outside pyplot's state."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in))
    FigureCanvasAgg(fig)
    return fig


def _layout(graph: nx.DiGraph) -> dict:
    """x: longest path from the inputs; nodes that read no activation (weight preparation) sit just
    before their first consumer; y: spread within each column."""
    x = {}
    for node in nx.topological_sort(graph):
        preds = list(graph.predecessors(node))
        x[node] = max((x[p] + 1 for p in preds), default=0)
    for node in reversed(list(nx.topological_sort(graph))):
        if graph.in_degree(node) == 0 and graph.nodes[node].get("kind") != "input":
            succ = [x[s] for s in graph.successors(node)]
            if succ:
                x[node] = max(0, min(succ) - 1)
    columns: dict = {}
    for node in sorted(graph, key=str):
        columns.setdefault(x[node], []).append(node)
    pos = {}
    for col, nodes in columns.items():
        for y, node in enumerate(nodes):
            pos[node] = (col, y - (len(nodes) - 1) / 2)
    return pos


def fold_chains(graph: nx.DiGraph, assignment: dict) -> tuple[nx.DiGraph, dict]:
    """Contract every chain of kernels on one device (each with one producer and one consumer) into a
    single node that carries the chain's summed latency and length: a 12-layer encoder becomes a
    readable band of blocks instead of hundreds of dots. Returns the folded graph and its assignment."""
    folded = graph.copy()
    where = dict(assignment)
    changed = True
    while changed:
        changed = False
        for u in list(nx.topological_sort(folded)):
            if u not in folded or folded.out_degree(u) != 1:
                continue
            (v,) = folded.successors(u)
            if folded.in_degree(v) != 1 or where.get(u) != where.get(v):
                continue
            du, dv = folded.nodes[u], folded.nodes[v]
            if du.get("kind") in ("input", "output") or dv.get("kind") in ("input", "output"):
                continue
            lat_u, lat_v = du.get("latency_us") or {}, dv.get("latency_us") or {}
            merged = dict(dv)
            merged["latency_us"] = {t: lat_u.get(t, 0.0) + lat_v.get(t, 0.0) for t in set(lat_u) | set(lat_v)}
            merged["ops"] = list(du.get("ops") or [u]) + list(dv.get("ops") or [v])
            merged["folded"] = du.get("folded", 1) + dv.get("folded", 1)
            for p in list(folded.predecessors(u)):
                folded.add_edge(p, v, **folded.edges[p, u])
            folded.remove_node(u)
            folded.nodes[v].update(merged)
            changed = True
    return folded, {n: where.get(n) for n in folded}


def _model_name(result) -> str:
    name = getattr(result, "model_name", None)
    if name is None:
        model = getattr(getattr(result, "placement", None), "model", None)
        name = getattr(model, "name", "model")
    return str(name)


def _label_text(graph: nx.DiGraph, node, latency_us: float) -> str:
    """``conv2d +3 kernels`` over ``1234 us``: the heaviest op of a (folded) kernel and its latency."""
    ops = graph.nodes[node].get("ops") or [str(node)]
    heavy = [o for o in ops if any(k in o for k in ("matmul", "conv", "softmax", "norm", "pool"))] or ops
    short = max(heavy, key=len).replace("relax.", "").replace("nn.", "")
    count = graph.nodes[node].get("folded", 1)
    digits = 0 if latency_us >= 10 else 1
    return f"{short}{f' +{count - 1} kernels' if count > 1 else ''}\n{latency_us:.{digits}f} us"


def _place_labels(ax, graph, pos, texts: dict, radius_pt: dict, arrows_px: list, limit: int) -> list:
    """Label up to ``limit`` nodes, tried in the order of ``texts``: each label goes above, below,
    right or left of its node, at the first spot inside the axes that overlaps no node, copy arrow
    or earlier label; a node with no such spot stays unlabelled.

    Needs the axes position and limits final (data -> pixels must not change afterwards).
    Returns the placed text artists.
    """
    renderer = ax.figure.canvas.get_renderer()
    px_per_pt = ax.figure.dpi / 72.0
    nodes = list(graph.nodes)
    centre_px = ax.transData.transform([pos[n] for n in nodes])
    r_px = np.array([radius_pt[n] * px_per_pt for n in nodes])
    axes_box = ax.get_window_extent(renderer)
    arrow_points = (np.concatenate([np.linspace(a, b, 24) for a, b in arrows_px])
                    if arrows_px else np.empty((0, 2)))
    placed, boxes = [], []
    pad_px = 2.0 * px_per_pt
    for node, text in texts.items():
        if len(placed) >= limit:
            break
        gap = radius_pt[node] + 2.0
        for dx, dy, ha, va in ((0, gap, "center", "bottom"), (0, -gap, "center", "top"),
                               (gap, 0, "left", "center"), (-gap, 0, "right", "center")):
            artist = ax.annotate(text, pos[node], xytext=(dx, dy), textcoords="offset points", ha=ha, va=va,
                                 fontsize=LABEL_FONT_PT, zorder=5,
                                 bbox=dict(boxstyle="round,pad=0.2", facecolor="white", edgecolor="none",
                                           alpha=0.8))
            box = artist.get_window_extent(renderer).padded(pad_px)
            x0, y0, x1, y1 = box.extents
            inside = axes_box.x0 <= x0 and x1 <= axes_box.x1 and axes_box.y0 <= y0 and y1 <= axes_box.y1
            hits_node = np.any((centre_px[:, 0] + r_px > x0) & (centre_px[:, 0] - r_px < x1)
                               & (centre_px[:, 1] + r_px > y0) & (centre_px[:, 1] - r_px < y1))
            hits_arrow = np.any((arrow_points[:, 0] > x0) & (arrow_points[:, 0] < x1)
                                & (arrow_points[:, 1] > y0) & (arrow_points[:, 1] < y1))
            if inside and not hits_node and not hits_arrow and not any(box.overlaps(b) for b in boxes):
                placed.append(artist)
                boxes.append(box)
                break
            artist.remove()
    return placed


def render_plan(result, path: str | None = None, *, labels: int = 8, title: str | None = None,
                fold: bool | None = None):
    """Draw a placement: one dot per kernel coloured by device, copies as red dashed arrows.

    Parameters
    ----------
    result : OptimizeResult
        Or anything with ``view.graph``, ``plan`` (``assignment``, ``objective_us``, ``copies``) and
        ``targets``.
    path : str, optional
        Save there (``.png``, ``.svg``, ...).
    labels : int
        Label at most this many of the costliest kernels (those whose label fits without overlap).
    title : str, optional
        Replaces the first title line (model, predicted end-to-end latency, copies).
    fold : bool, optional
        Contract single-device chains into one node; default: when the graph has over 60 nodes.

    Returns
    -------
    matplotlib.figure.Figure
    """
    from matplotlib.collections import LineCollection
    from matplotlib.lines import Line2D
    from matplotlib.patches import FancyArrowPatch

    graph = result.view.graph
    assignment = result.plan.assignment
    if fold or (fold is None and graph.number_of_nodes() > 60):
        graph, assignment = fold_chains(graph, assignment)
    targets = list(result.targets)
    colour = {t: PALETTE[i % len(PALETTE)] for i, t in enumerate(targets)}
    pos = _layout(graph)
    max_x = max(x for x, _ in pos.values())
    max_y = max(abs(y) for _, y in pos.values())
    graph_w_in = max(8.0, min(40.0, 0.25 * (max_x + 1)))
    graph_h_in = max(2.5, min(12.0, 0.6 * (max_y * 2 + 2)))
    fig_w_in, fig_h_in = graph_w_in + 2 * MARGIN_IN, graph_h_in + TITLE_BAND_IN + LEGEND_BAND_IN
    fig = _figure(fig_w_in, fig_h_in)
    # Fixed bands (not tight/constrained layout): the axes must not move once labels are placed.
    ax = fig.add_axes((MARGIN_IN / fig_w_in, LEGEND_BAND_IN / fig_h_in,
                       graph_w_in / fig_w_in, graph_h_in / fig_h_in))
    ax.set_xlim(-0.6, max_x + 0.6)
    ax.set_ylim(-max_y - 0.8, max_y + 0.8)
    ax.axis("off")

    latency = {n: (d.get("latency_us") or {}).get(assignment.get(n), 0.0) for n, d in graph.nodes(data=True)}
    biggest = max(latency.values(), default=0.0) or 1.0
    size_pt2 = {n: 40 + 400 * math.sqrt(latency[n] / biggest) for n in graph.nodes}
    radius_pt = {n: math.sqrt(s) / 2 for n, s in size_pt2.items()}

    same = [(pos[u], pos[v]) for u, v in graph.edges if assignment.get(u) == assignment.get(v)]
    ax.add_collection(LineCollection(same, colors="#BBBBBB", linewidths=0.6, zorder=1))
    arrows_px = []
    for u, v, d in graph.edges(data=True):
        if assignment.get(u) != assignment.get(v):
            width_pt = 0.8 + math.log10(1 + d.get("nbytes", 0)) / 2
            ax.add_patch(FancyArrowPatch(pos[u], pos[v], arrowstyle="-|>", mutation_scale=8, linestyle="--",
                                         color=COPY_COLOUR, linewidth=width_pt, zorder=3,
                                         shrinkA=radius_pt[u], shrinkB=radius_pt[v]))
            arrows_px.append(ax.transData.transform([pos[u], pos[v]]))
    nodes = list(graph.nodes)
    ax.scatter([pos[n][0] for n in nodes], [pos[n][1] for n in nodes], s=[size_pt2[n] for n in nodes],
               c=[colour.get(assignment.get(n), "#999999") for n in nodes], linewidths=0.5,
               edgecolors="black", zorder=2)

    costliest = sorted((n for n in nodes if latency[n] > 0), key=lambda n: (-latency[n], pos[n][0]))
    texts = {n: _label_text(graph, n, latency[n]) for n in costliest[:4 * labels]}
    _place_labels(ax, graph, pos, texts, radius_pt, arrows_px, labels)

    handles = [Line2D([0], [0], marker="o", color="w", markerfacecolor=colour[t], markeredgecolor="black",
                      markeredgewidth=0.5, markersize=9, label=t) for t in targets]
    handles.append(Line2D([0], [0], color=COPY_COLOUR, linestyle="--", label="copy (width ~ log bytes)"))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=len(handles), fontsize=8,
              frameon=False, borderaxespad=0.2)
    copies = len([c for c in result.plan.copies if c.latency_us > 0])
    predicted_us = getattr(result, "predicted_us", result.plan.objective_us)  # as the header and repr say
    head = title or f"{_model_name(result)}: predicted {predicted_us:.0f} us, {copies} copies"
    ax.set_title(f"{head}\nnode size ~ sqrt(kernel latency); data flows left to right", fontsize=9)
    if path:
        fig.savefig(path, dpi=110, bbox_inches="tight")
    return fig


def _spread(wanted: list, gap: float, low: float = 0.0, high: float = 1.0) -> list:
    """Positions as close to ``wanted`` (ascending) as possible, at least ``gap`` apart, within
    ``[low, high]`` where they fit."""
    out = []
    for w in wanted:
        out.append(max(w, low, out[-1] + gap) if out else max(w, low))
    for i in range(len(out) - 1, -1, -1):
        out[i] = min(out[i], high if i == len(out) - 1 else out[i + 1] - gap)
    return out


def plot_compare(table, path: str | None = None):
    """Predicted vs measured latency of each plan in a :func:`autoplace.compare` table.

    Parameters
    ----------
    table : pandas.DataFrame
        One row per plan, with ``predicted_us``, ``measured_median_us``, ``measured_min_us`` and
        ``measured_max_us``; plans missing either latency are left out.
    path : str, optional
        Save there (``.png``, ``.svg``, ...).

    Returns
    -------
    matplotlib.figure.Figure
        Plan names sit in a column right of the axes, each joined to its point by a thin line.
    """
    rows = table.dropna(subset=["predicted_us", "measured_median_us"])
    fig = _figure(6.5, 5.0)
    ax = fig.add_axes((0.13, 0.1, 0.6, 0.82))
    ax.set_xlabel("predicted latency (us)")
    ax.set_ylabel("measured latency (us): median, min-max")
    ax.set_title(f"{table.attrs.get('model', '')}: predicted vs measured", fontsize=9)
    if rows.empty:
        ax.text(0.5, 0.5, "no plan was both predicted and measured", ha="center", va="center",
                transform=ax.transAxes)
    else:
        low_us = rows["measured_min_us"].fillna(rows["measured_median_us"])
        high_us = rows["measured_max_us"].fillna(rows["measured_median_us"])
        ax.errorbar(rows["predicted_us"], rows["measured_median_us"],
                    yerr=[rows["measured_median_us"] - low_us, high_us - rows["measured_median_us"]],
                    fmt="o", capsize=3)
        lo = min(rows["predicted_us"].min(), low_us.min()) * 0.9
        hi = max(rows["predicted_us"].max(), high_us.max()) * 1.1
        ax.plot([lo, hi], [lo, hi], color="#888888", linewidth=0.8, linestyle=":")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        # Plans often land on top of each other: their names go in a column right of the axes, in the
        # order of their points, spread one line apart.
        rows = rows.sort_values("measured_median_us")
        to_axes = ax.transAxes.inverted()
        wanted = [to_axes.transform(ax.transData.transform((p, m)))[1]
                  for p, m in zip(rows["predicted_us"], rows["measured_median_us"])]
        line = 8 * 1.5 / 72 / (ax.get_position().height * fig.get_figheight())  # 8 pt text, in axes heights
        points = zip(rows.index, rows["predicted_us"], rows["measured_median_us"], _spread(wanted, line))
        for name, p, m, y in points:
            ax.annotate(str(name), (p, m), xytext=(1.04, y), textcoords="axes fraction", fontsize=8,
                        va="center", annotation_clip=False,
                        arrowprops=dict(arrowstyle="-", color="#999999", linewidth=0.5, shrinkA=0, shrinkB=4))
    if path:
        fig.savefig(path, dpi=110, bbox_inches="tight")
    return fig


def result_html(result) -> str:
    """What a notebook shows for an :class:`~autoplace.optimizer.OptimizeResult`.

    Parameters
    ----------
    result : OptimizeResult

    Returns
    -------
    str
        A header line (model, predicted latency, solver status, gap, solve time), the predicted
        latency's error band and kernels measured vs predicted, a note where the plan's choice rests on
        overlapping bands, the :meth:`~autoplace.optimizer.OptimizeResult.summary` table, and the plan picture as an
        embedded PNG (left out when matplotlib is not installed).
    """
    plan = result.plan
    name = html.escape(_model_name(result))
    out = (f"<b>{name}</b>: predicted <b>{result.predicted_us:.1f} us</b> "
           f"({plan.status}, gap {plan.gap:.2%}, solved in {plan.solve_time_s:.3f} s)")
    out += f"<br/>{html.escape(result.band_text())}"
    for note in result.choice_notes():
        out += f"<br/><i>{html.escape(note)}</i>"
    out += result.summary().to_html(float_format=lambda v: f"{v:.1f}")
    try:
        import matplotlib  # noqa: F401  (an optional extra)
    except ImportError:
        return out
    buffer = io.BytesIO()
    render_plan(result).savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    png = base64.b64encode(buffer.getvalue()).decode("ascii")
    return out + f'<img alt="placement of {name}" src="data:image/png;base64,{png}"/>'


def table_text(table) -> str:
    """A :func:`autoplace.compare` table (or any DataFrame) as plain text for a terminal: every column
    shown, floats with two decimals."""
    import pandas as pd

    with pd.option_context("display.width", 200, "display.max_columns", 30, "display.max_colwidth", 40):
        return table.to_string(float_format=lambda v: f"{v:.2f}")
