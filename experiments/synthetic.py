"""Seeded random op graphs for tests and the solver benchmark (not models: made-up costs)."""

from __future__ import annotations

import networkx as nx
import numpy as np

__all__ = ["default_copy_cost", "layered_dag", "small_random_graph"]


def default_copy_cost(targets) -> dict:
    """Copy costs between a host (``targets[0]``) and accelerators (the rest).

    Host <-> accelerator: 8 us + 12 GB/s (PCIe-like); accelerator <-> accelerator: 5 us +
    50 GB/s (NVLink-like). Microseconds per byte = 1e-3 / (GB/s).
    """
    cost = {}
    for s in targets:
        for d in targets:
            if s == d:
                continue
            host = targets[0] in (s, d)
            cost[(s, d)] = (8.0, 1e-3 / 12.0) if host else (5.0, 1e-3 / 50.0)
    return cost


def layered_dag(
    n_layers: int = 100,
    width: int = 100,
    targets=("cpu", "gpu0"),
    seed: int = 0,
    max_preds: int = 3,
    reach_layers: int = 3,
    unsupported_fraction: float = 0.02,
) -> nx.DiGraph:
    """A layered random DAG with per-target latencies and tensor sizes on every edge.

    Layer 0 holds graph inputs, pinned to ``targets[0]`` (inputs arrive on the host). Every
    other node has 1 to ``max_preds`` predecessors drawn from the ``reach_layers`` layers
    before it, and a latency on each target of ``base * factor`` with ``base`` log-normal
    (median 20 us) and ``factor`` uniform in [0.3, 2.0], independently per target, so no
    target wins everywhere. A fraction ``unsupported_fraction`` of the nodes is not
    supported on one random accelerator. Tensor sizes are log-normal (median 60 KB).

    Parameters
    ----------
    n_layers, width : int
        ``n_layers * width`` nodes.
    targets : sequence of str
    seed : int
    max_preds, reach_layers : int
    unsupported_fraction : float

    Returns
    -------
    networkx.DiGraph
        Nodes ``0 .. n-1`` with ``latency_us`` (inputs: none, so free everywhere) and
        ``pinned``; edges with ``nbytes``.
    """
    rng = np.random.default_rng(seed)
    k = len(targets)
    n = n_layers * width
    g = nx.DiGraph()
    base = rng.lognormal(np.log(20.0), 1.0, n)
    factor = rng.uniform(0.3, 2.0, (n, k))
    nbytes = rng.lognormal(np.log(60e3), 1.5, n).astype(np.int64) + 1
    unsupported = rng.random(n) < unsupported_fraction
    which = rng.integers(1, k, n) if k > 1 else np.zeros(n, dtype=np.int64)
    for v in range(n):
        if v < width:
            g.add_node(v, pinned=targets[0])
            continue
        lat = {t: float(base[v] * factor[v, d]) for d, t in enumerate(targets)}
        if unsupported[v] and k > 1:
            del lat[targets[which[v]]]
        g.add_node(v, latency_us=lat)
    for v in range(width, n):
        layer = v // width
        lo = max(0, layer - reach_layers) * width
        preds = rng.choice(
            np.arange(lo, layer * width), size=int(rng.integers(1, max_preds + 1)), replace=False
        )
        for u in preds:
            g.add_edge(int(u), v, nbytes=int(nbytes[u]))
    return g


def small_random_graph(rng: np.random.Generator, n_targets: int = 2, n_nodes: int | None = None):
    """A tiny random problem with the awkward cases: shared tensors, several tensors per node,
    resident weights, pins, unsupported targets, sometimes memory caps.

    Returns
    -------
    graph : networkx.DiGraph
    copy_cost : dict
    memory_bytes : dict or None
    targets : list of str
    """
    targets = [f"t{d}" for d in range(n_targets)]
    n = int(rng.integers(3, 9)) if n_nodes is None else n_nodes
    g = nx.DiGraph()
    for v in range(n):
        attrs = {}
        if rng.random() < 0.85:
            lat = {t: float(rng.integers(1, 60)) for t in targets}
            if rng.random() < 0.25:
                del lat[targets[int(rng.integers(n_targets))]]
            attrs["latency_us"] = lat
        supported = list(attrs["latency_us"]) if "latency_us" in attrs else targets
        if rng.random() < 0.15:
            attrs["pinned"] = supported[int(rng.integers(len(supported)))]
        if rng.random() < 0.2:
            attrs["resident"] = True
        attrs["weight_bytes"] = int(rng.integers(0, 5)) * 100
        g.add_node(v, **attrs)
    for v in range(1, n):
        preds = rng.choice(v, size=int(rng.integers(1, min(v, 3) + 1)), replace=False)
        for u in preds:
            data = {"nbytes": int(rng.integers(0, 4000))}
            if rng.random() < 0.2:
                data["tensor"] = int(rng.integers(0, 2))
            g.add_edge(int(u), v, **data)
    copy_cost = {
        (s, d): (float(rng.integers(0, 20)), float(rng.integers(0, 10)) * 1e-3)
        for s in targets
        for d in targets
        if s != d
    }
    memory = None
    if rng.random() < 0.3:
        out = [max((d["nbytes"] for _, _, d in g.out_edges(v, data=True)), default=0) for v in g]
        total = sum(g.nodes[v]["weight_bytes"] for v in g) + sum(out)
        memory = {t: int(total * rng.uniform(0.4, 1.0)) for t in targets if rng.random() < 0.6}
    return g, copy_cost, memory, targets
