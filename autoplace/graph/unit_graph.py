"""The kernel-level graph the solver places: one node per kernel (fusion group, a "unit"), plus the
model's inputs and its output; edges are the tensors kernels pass each other, with their bytes.

A unit's ops always run together on one device, so a placement of units builds into exactly the
kernels that were profiled. Tuples, getitems and aliases run on no device: their fields stay where
they were made, so edges look through them to the kernel that produced each tensor.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import networkx as nx

from ..errors import InfeasiblePlacementError
from .select import resolve_assignment, select_nodes


def producers(graph: nx.DiGraph, node: str, key=None) -> list[tuple[str, object, int]]:
    """The ``(op/input/weight node, tuple field or None, nbytes)`` a value comes from, looking through
    tuples, getitems and aliases of the op graph."""
    data = graph.nodes[node]
    kind = data.get("kind")
    if kind in ("op", "input", "weight"):
        return [(node, key, data.get("output_bytes", 0))]
    preds = list(graph.predecessors(node))
    if kind == "getitem":
        out = []
        for p in preds:
            out.extend(producers(graph, p, data.get("index")) if graph.nodes[p].get("kind") == "op"
                       else producers(graph, p))
        return out
    out = []
    for p in preds:  # tuple, alias
        out.extend(producers(graph, p))
    return out


@dataclass
class UnitGraph:
    """The solver's graph and how its kernel nodes map to the op graph's nodes.

    Attributes
    ----------
    graph : networkx.DiGraph
        Nodes ``kind="unit"`` (``ops``; per target name ``latency_us``, ``cost_source``
        (measured / predicted), ``band_us`` (the cost model's error band, ``(low, high)``) and ``kernel``
        (op class, kernel key); ``weight_bytes``, ``output_bytes``), ``kind="input"`` and one ``"output"`` (both pinned to
        the host); edges carry ``nbytes`` and the ``tensor`` they move. ``graph.graph["in_model"]``:
        ``{target kind: whether its kernels were priced in-model}``, ``graph.graph["in_context"]``: whether by their
        times inside this model (:meth:`CostTable.latencies`).
    members : dict
        Unit node -> its op nodes, in program order.
    owner : dict
        Op node -> the unit node that computes it.
    """

    graph: nx.DiGraph
    members: dict
    owner: dict

    def unit_pins(self, op_graph: nx.DiGraph, pins: Mapping | None, targets) -> dict:
        """``{unit: target}`` from pins given on ops (node names, op names or instances, as
        :func:`autoplace.place` reads them): a pin on one op pins its whole kernel.

        Raises
        ------
        AssignmentError
            If a key names nothing or an unknown target.
        InfeasiblePlacementError
            If two ops of one kernel are pinned to different targets.
        """
        # Every key and target checked as place() checks them (unknown node, weight, target: clear errors).
        resolve_assignment(op_graph, pins, targets, targets.host.name)
        out = {}
        for key, target in (pins or {}).items():
            for n in select_nodes(op_graph, key):
                unit = self.owner.get(n, n)
                if unit in out and out[unit] != target:
                    raise InfeasiblePlacementError(
                        f"contradictory pins: {n!r} (in kernel {unit!r}) is pinned to {target!r} but another op "
                        f"of the same kernel is pinned to {out[unit]!r}; ops fused into one kernel run on one device"
                    )
                out[unit] = target
        return out

    def op_assignment(self, unit_assignment: Mapping, op_graph: nx.DiGraph) -> dict:
        """``{op, input or output node: target}`` of the op graph for a ``{unit node: target}`` plan."""
        out = {}
        for node, target in unit_assignment.items():
            if node in self.members:
                for op in self.members[node]:
                    out[op] = target
            elif op_graph.has_node(node) and op_graph.nodes[node].get("kind") in ("input", "output"):
                out[node] = target
        return out


def unit_graph(graph: nx.DiGraph, units_by_kind: dict, costs, targets) -> UnitGraph:
    """Build the solver's graph with ``latency_us`` per target name from ``costs``.

    Parameters
    ----------
    graph : networkx.DiGraph
        The op graph (:func:`autoplace.graph.op_graph`).
    units_by_kind : dict
        ``{target kind: [Unit]}`` from :func:`autoplace.profile.extract_units`.
    costs : CostTable-like
        ``latencies(units, kind, graph=)`` and ``launch_us(label)``.
    targets : TargetSet

    Returns
    -------
    UnitGraph

    Notes
    -----
    A unit's latency on a target is its kernel's cost (measured where profiled, predicted elsewhere)
    plus one kernel launch there. A kernel the profile saw fail on a target, or a group the target
    fuses differently, is left out of ``latency_us`` for that target: unsupported there. Ops no
    kernel computes (folded away by legalization) become zero-cost units.
    """
    first_kind = next(iter(units_by_kind))
    members, owner = {}, {}
    for unit in units_by_kind[first_kind]:
        if not unit.nodes:
            continue
        name = unit.nodes[-1]
        members[name] = list(unit.nodes)
        for n in unit.nodes:
            owner[n] = name
    for n, d in graph.nodes(data=True):  # ops no kernel computes (folded away by legalization)
        if d.get("kind") == "op" and n not in owner:
            members[n] = [n]
            owner[n] = n
    by_nodes = {kind: {frozenset(u.nodes): u for u in units if u.nodes} for kind, units in units_by_kind.items()}
    computed = {kind: {n for u in units for n in u.nodes} for kind, units in units_by_kind.items()}
    # One cost query per target kind: measured where profiled, predicted by the cost model elsewhere.
    priced, in_model, in_context = {}, {}, {}
    for kind, units in units_by_kind.items():
        frame = costs.latencies(units, kind, graph=graph)
        in_model[kind] = bool(frame["in_model"].any()) if "in_model" in frame else False
        in_context[kind] = bool(len(frame) and frame["in_context"].all()) if "in_context" in frame else False
        lo = frame["band_lo_us"] if "band_lo_us" in frame else frame["latency_us"]
        hi = frame["band_hi_us"] if "band_hi_us" in frame else frame["latency_us"]
        op_class = frame["op_class"] if "op_class" in frame else [""] * len(frame)
        for unit, lat, src, low, high, cls in zip(units, frame["latency_us"], frame["source"], lo, hi, op_class):
            priced[(id(unit), kind)] = (float(lat), str(src), float(low), float(high), str(cls))
    view = nx.DiGraph(in_model=in_model, in_context=in_context)
    host = targets.host.name
    for n, d in graph.nodes(data=True):
        if d.get("kind") == "input":
            view.add_node(n, kind="input", pinned=host, output_bytes=d["output_bytes"])
    for name, nodes in members.items():
        latency, source, band, kernel = {}, {}, {}, {}
        for tname in targets:
            target = targets[tname]
            unit = by_nodes.get(target.kind, {}).get(frozenset(nodes))
            if unit is None:
                if len(nodes) == 1 and nodes[0] not in computed.get(target.kind, set()):
                    latency[tname], source[tname] = 0.0, "folded"  # no kernel at all
                continue  # grouped differently on this target: treated as unsupported
            lat, src, low, high, cls = priced[(id(unit), target.kind)]
            if not math.isfinite(lat):
                continue  # the profile saw this kernel fail on this target: unsupported there
            launch = float(costs.launch_us(target.label, in_context=True) if in_context.get(target.kind)
                           else costs.launch_us(target.label))
            latency[tname] = float(lat) + launch
            source[tname] = src
            band[tname] = (low + launch, high + launch)  # the launch is measured: exact
            kernel[tname] = (cls, unit.key)
        # Weights live where their kernels run (one resident copy per device, uploaded at load time),
        # so a unit carries the bytes of the weights it reads.
        weights = {p for n in nodes for p in graph.predecessors(n) if graph.nodes[p].get("kind") == "weight"}
        view.add_node(name, kind="unit", ops=[graph.nodes[n]["op"] for n in nodes], latency_us=latency,
                      cost_source=source, band_us=band, kernel=kernel, weight_bytes=int(sum(graph.nodes[w]["weight_bytes"] for w in weights)),
                      output_bytes=graph.nodes[name].get("output_bytes", 0))
    view.add_node("output", kind="output", pinned=host)
    # Edges: every tensor a unit (or the output) reads that another node makes.
    for consumer, d in graph.nodes(data=True):
        if d.get("kind") not in ("op", "output"):
            continue
        c = owner.get(consumer, consumer)
        for pred in graph.predecessors(consumer):
            for producer, key, nbytes in producers(graph, pred):
                if graph.nodes[producer].get("kind") == "weight":
                    continue
                p = owner.get(producer, producer)
                if p == c:
                    continue
                tensor = f"{producer}" if key is None else f"{producer}[{key}]"
                if view.has_edge(p, c) and view.edges[p, c].get("tensor") != tensor:
                    # a second tensor between the same two nodes: keep both (sum of bytes, one edge)
                    view.edges[p, c]["nbytes"] += int(nbytes)
                    continue
                view.add_edge(p, c, nbytes=int(nbytes), tensor=tensor)
    return UnitGraph(view, members, owner)
