"""Pictures of a placement: kernels coloured by device, copies drawn and sized by bytes.

Layout: one column per topological generation of the kernel graph (data flows left to right), so
a model with thousands of ops stays a readable band; the most expensive kernels are labelled.
"""

from __future__ import annotations

import math

import networkx as nx

PALETTE = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860"]


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
            if folded.nodes[v].get("kind") in ("input", "output") or folded.nodes[u].get("kind") in ("input", "output"):
                continue
            du, dv = folded.nodes[u], folded.nodes[v]
            merged = dict(dv)
            merged["latency_us"] = {t: (du.get("latency_us") or {}).get(t, 0.0) + (dv.get("latency_us") or {}).get(t, 0.0)
                                    for t in set(du.get("latency_us") or {}) | set(dv.get("latency_us") or {})}
            merged["ops"] = list(du.get("ops") or [u]) + list(dv.get("ops") or [v])
            merged["folded"] = du.get("folded", 1) + dv.get("folded", 1)
            for p in list(folded.predecessors(u)):
                folded.add_edge(p, v, **folded.edges[p, u])
            folded.remove_node(u)
            folded.nodes[v].update(merged)
            changed = True
    return folded, {n: where.get(n) for n in folded}


def render_plan(result, path: str | None = None, *, labels: int = 8, title: str | None = None,
                fold: bool | None = None):
    """Draw an :class:`~autoplace.optimizer.OptimizeResult` (or anything with ``view``, ``plan``,
    ``targets``); save to ``path`` (``.png``/``.svg``) if given; return the matplotlib figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    graph = result.view.graph
    assignment = result.plan.assignment
    if fold or (fold is None and graph.number_of_nodes() > 60):
        graph, assignment = fold_chains(graph, assignment)
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
    top, used_x = [], []
    for n in sorted(latency, key=latency.get, reverse=True):  # the costliest kernels, not crowded together
        if len(top) >= labels:
            break
        if all(abs(pos[n][0] - x) > 2 for x in used_x):
            top.append(n)
            used_x.append(pos[n][0])
    names = {}
    for n in top:
        ops = graph.nodes[n].get("ops") or [n]
        heavy = [o for o in ops if any(k in o for k in ("matmul", "conv", "softmax", "norm", "pool"))] or ops
        short = max(heavy, key=len).replace("relax.", "").replace("nn.", "")
        count = graph.nodes[n].get("folded", 1)
        names[n] = f"{short}{f' +{count - 1} kernels' if count > 1 else ''}\n{latency[n]:.0f} us"
    label_pos = {n: (pos[n][0], pos[n][1] + 0.35) for n in names}
    nx.draw_networkx_labels(graph, label_pos, labels=names, ax=ax, font_size=7, verticalalignment="bottom")
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
        fig.savefig(path, dpi=110, bbox_inches="tight")
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
    for i, (name, row) in enumerate(rows.sort_values("measured_median_us").iterrows()):
        # Plans often land close together: stagger their labels so each stays readable.
        ax.annotate(name, (row["predicted_us"], row["measured_median_us"]), fontsize=8,
                    xytext=(8, -18 + 12 * (i % 4)), textcoords="offset points",
                    arrowprops=dict(arrowstyle="-", color="#999999", linewidth=0.5))
    lo = min(rows["predicted_us"].min(), rows["measured_min_us"].min()) * 0.9
    hi = max(rows["predicted_us"].max(), rows["measured_max_us"].max()) * 1.1
    ax.plot([lo, hi], [lo, hi], color="#888888", linewidth=0.8, linestyle=":")
    ax.set_xlabel("predicted latency (us)")
    ax.set_ylabel("measured latency (us): median, min-max")
    ax.set_title(f"{table.attrs.get('model', '')}: predicted vs measured", fontsize=9)
    fig.tight_layout()
    if path:
        fig.savefig(path, dpi=110, bbox_inches="tight")
    return fig
