"""Pictures of a placement: kernels coloured by device, copies drawn and sized by bytes.

Layout: one column per topological generation of the kernel graph (data flows left to right), so
a model with thousands of ops stays a readable band; the most expensive kernels are labelled.
"""

from __future__ import annotations

import math

import networkx as nx

PALETTE = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860"]


def _layout(graph: nx.DiGraph) -> dict:
    pos = {}
    for x, generation in enumerate(nx.topological_generations(graph)):
        generation = sorted(generation, key=str)
        for y, node in enumerate(generation):
            pos[node] = (x, y - (len(generation) - 1) / 2)
    return pos


def render_plan(result, path: str | None = None, *, labels: int = 8, title: str | None = None):
    """Draw an :class:`~autoplace.optimizer.OptimizeResult` (or anything with ``view``, ``plan``,
    ``targets``); save to ``path`` (``.png``/``.svg``) if given; return the matplotlib figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    graph = result.view.graph
    assignment = result.plan.assignment
    targets = list(result.targets)
    colour = {t: PALETTE[i % len(PALETTE)] for i, t in enumerate(targets)}
    pos = _layout(graph)
    width = max(8.0, min(40.0, 0.25 * (max(x for x, _ in pos.values()) + 1)))
    height = max(3.0, min(12.0, 0.6 * (max(abs(y) for _, y in pos.values()) * 2 + 2)))
    fig, ax = plt.subplots(figsize=(width, height))
    same, cross, cross_w = [], [], []
    for u, v, d in graph.edges(data=True):
        if assignment.get(u) == assignment.get(v):
            same.append((u, v))
        else:
            cross.append((u, v))
            cross_w.append(0.8 + math.log10(1 + d.get("nbytes", 0)) / 2)
    nx.draw_networkx_edges(graph, pos, edgelist=same, ax=ax, edge_color="#BBBBBB", width=0.6, arrows=False)
    if cross:
        nx.draw_networkx_edges(graph, pos, edgelist=cross, ax=ax, edge_color="#D62728", width=cross_w,
                               arrows=True, arrowsize=8, style="dashed")
    latency = {}
    for n, d in graph.nodes(data=True):
        lat = (d.get("latency_us") or {}).get(assignment.get(n), 0.0)
        latency[n] = lat
    biggest = max(latency.values()) or 1.0
    sizes = [40 + 400 * math.sqrt(latency[n] / biggest) for n in graph.nodes]
    colours = [colour.get(assignment.get(n), "#999999") for n in graph.nodes]
    nx.draw_networkx_nodes(graph, pos, ax=ax, node_size=sizes, node_color=colours, linewidths=0.5,
                           edgecolors="black")
    top = sorted(latency, key=latency.get, reverse=True)[:labels]
    names = {}
    for n in top:
        ops = graph.nodes[n].get("ops") or [n]
        short = max(ops, key=len).replace("relax.", "").replace("nn.", "")
        names[n] = f"{short}\n{latency[n]:.0f} us"
    nx.draw_networkx_labels(graph, pos, labels=names, ax=ax, font_size=7)
    handles = [Line2D([0], [0], marker="o", color="w", markerfacecolor=colour[t], markersize=9, label=t)
               for t in targets]
    handles.append(Line2D([0], [0], color="#D62728", linestyle="--", label="copy (width ~ log bytes)"))
    ax.legend(handles=handles, loc="upper left", fontsize=8, frameon=False)
    name = getattr(getattr(result, "placement", None), "model", None)
    ax.set_title(title or f"{getattr(name, 'name', 'model')}: predicted {result.plan.objective_us:.0f} us, "
                 f"{len([c for c in result.plan.copies if c.latency_us > 0])} copies "
                 f"(node size ~ sqrt(kernel latency); data flows left to right)", fontsize=9)
    ax.axis("off")
    fig.tight_layout()
    if path:
        fig.savefig(path, dpi=110)
    return fig


def plot_compare(table, path: str | None = None):
    """Predicted vs measured latency of each plan in a :func:`autoplace.compare` table."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = table.dropna(subset=["predicted_us", "measured_median_us"])
    fig, ax = plt.subplots(figsize=(5, 5))
    ax.errorbar(rows["predicted_us"], rows["measured_median_us"],
                yerr=[rows["measured_median_us"] - rows["measured_min_us"],
                      rows["measured_max_us"] - rows["measured_median_us"]], fmt="o", capsize=3)
    for name, row in rows.iterrows():
        ax.annotate(name, (row["predicted_us"], row["measured_median_us"]), fontsize=8, xytext=(4, 4),
                    textcoords="offset points")
    lo = min(rows["predicted_us"].min(), rows["measured_min_us"].min()) * 0.9
    hi = max(rows["predicted_us"].max(), rows["measured_max_us"].max()) * 1.1
    ax.plot([lo, hi], [lo, hi], color="#888888", linewidth=0.8, linestyle=":")
    ax.set_xlabel("predicted latency (us)")
    ax.set_ylabel("measured latency (us): median, min-max")
    ax.set_title(f"{table.attrs.get('model', '')}: predicted vs measured", fontsize=9)
    fig.tight_layout()
    if path:
        fig.savefig(path, dpi=110)
    return fig
