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
        times inside this model, ``graph.graph["weights_cold"]``: whether with their weights from memory
        (:meth:`CostTable.latencies`).
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


def _exact_cover(nodes, units, computed: set) -> list:
    """The kernels of one target that compute exactly the group ``nodes`` of another (fused differently there):
    units whose nodes all lie in the group, covering every node of it that the target computes at all (the rest
    are folded there). Empty when a kernel of the target crosses the group's border (then the group cannot be
    placed there as one piece) or the group is one node."""
    group = set(nodes)
    if len(group) < 2:
        return []
    parts = []
    for unit in units:
        inside = group.intersection(unit.nodes)
        if not inside:
            continue
        if len(inside) != len(set(unit.nodes)):
            return []  # this kernel also computes nodes outside the group
        parts.append(unit)
    covered = {n for unit in parts for n in unit.nodes}
    if not parts or (group - covered) & computed:
        return []
    return parts


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
    A unit's latency on the host is its kernel's cost (measured where profiled, predicted elsewhere)
    plus one kernel call of the VM there. On a device with its own queue (CUDA) the VM's call returns
    before the kernel ends, and the next call overlaps it: a kernel there costs the larger of its time and
    the VM's call (the ``launch`` record, a chain of 65 calls of a tiny kernel), not their sum. On an H200
    box the sum priced all-GPU bert-base at 1301 us (measured 820: 108 kernels, 4.3 us a call); the larger
    of the two, 861 us. A group the target fuses into other kernels that stay inside it (the
    CUDA pipeline folds an op the CPU's computes, say) costs the sum of those kernels and their launches
    (:func:`_exact_cover`). A kernel the profile saw fail on a target, or a group a kernel of the target
    crosses, is left out of ``latency_us`` for that target: unsupported there. Ops no
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
    priced, in_model, in_model_share, in_context, weights_cold = {}, {}, {}, {}, {}
    for kind, units in units_by_kind.items():
        frame = costs.latencies(units, kind, graph=graph)
        in_model[kind] = bool(frame["in_model"].any()) if "in_model" in frame else False
        if in_model[kind] and "in_model_share" in frame:
            in_model_share[kind] = float(frame["in_model_share"].max())
        in_context[kind] = bool(len(frame) and frame["in_context"].all()) if "in_context" in frame else False
        weights_cold[kind] = bool(frame["weights_cold"].any()) if "weights_cold" in frame else False
        lo = frame["band_lo_us"] if "band_lo_us" in frame else frame["latency_us"]
        hi = frame["band_hi_us"] if "band_hi_us" in frame else frame["latency_us"]
        op_class = frame["op_class"] if "op_class" in frame else [""] * len(frame)
        for unit, lat, src, low, high, cls in zip(units, frame["latency_us"], frame["source"], lo, hi, op_class):
            priced[(id(unit), kind)] = (float(lat), str(src), float(low), float(high), str(cls))
    view = nx.DiGraph(in_model=in_model, in_model_share=in_model_share, in_context=in_context,
                      weights_cold=weights_cold)
    host = targets.host.name
    host_kind = targets.host.kind
    for n, d in graph.nodes(data=True):
        if d.get("kind") == "input":
            view.add_node(n, kind="input", pinned=host, output_bytes=d["output_bytes"], order=d.get("order", -1))
    for name, nodes in members.items():
        latency, source, band, kernel = {}, {}, {}, {}
        for tname in targets:
            target = targets[tname]
            unit = by_nodes.get(target.kind, {}).get(frozenset(nodes))
            parts = [unit] if unit is not None else _exact_cover(nodes, units_by_kind.get(target.kind, []),
                                                                 computed.get(target.kind, set()))
            if not parts:
                if len(nodes) == 1 and nodes[0] not in computed.get(target.kind, set()):
                    latency[tname], source[tname] = 0.0, "folded"  # no kernel at all
                continue  # grouped across this group's border on this target: treated as unsupported
            launch = float(costs.launch_us(target.label, in_context=True) if in_context.get(target.kind)
                           else costs.launch_us(target.label))
            prices = [priced[(id(part), target.kind)] for part in parts]
            if not all(math.isfinite(p[0]) for p in prices):
                continue  # the profile saw a kernel fail on this target: unsupported there
            # The host runs its kernels in the VM's thread (call, then kernel); a device queues them, and the VM's
            # call overlaps the kernel before it (see Notes). The launches are measured: exact in the band too.
            queued = target.kind != host_kind
            latency[tname], low, high = (sum(max(us, launch) if queued else us + launch for us in column)
                                         for column in ([q[0] for q in prices], [q[2] for q in prices],
                                                        [q[3] for q in prices]))
            band[tname] = (low, high)
            sources = {q[1] for q in prices}
            source[tname] = sources.pop() if len(sources) == 1 else "+".join(sorted(sources))
            main = max(range(len(parts)), key=lambda i: prices[i][0])
            kernel[tname] = (prices[main][4], "+".join(part.key for part in parts))
        # Weights live where their kernels run (one resident copy per device, uploaded at load time),
        # so a unit carries the bytes of the weights it reads.
        weights = {p for n in nodes for p in graph.predecessors(n) if graph.nodes[p].get("kind") == "weight"}
        view.add_node(name, kind="unit", ops=[graph.nodes[n]["op"] for n in nodes], latency_us=latency,
                      cost_source=source, band_us=band, kernel=kernel, weight_bytes=int(sum(graph.nodes[w]["weight_bytes"] for w in weights)),
                      output_bytes=graph.nodes[name].get("output_bytes", 0), order=graph.nodes[name].get("order"))
    view.add_node("output", kind="output", pinned=host, order=graph.nodes["output"].get("order")
                  if "output" in graph else None)
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
