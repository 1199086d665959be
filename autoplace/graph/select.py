"""Naming nodes: a key is a node name (``"lv3"``), an op name (``"relax.nn.conv2d"``: every such op)
or an instance (``"relax.nn.conv2d#0"``: the first conv2d in program order)."""

from __future__ import annotations

from collections.abc import Mapping

import networkx as nx

from ..errors import AssignmentError


def select_nodes(graph: nx.DiGraph, key: str) -> list[str]:
    """Nodes of ``graph`` that ``key`` names (see the module docstring); ``[]`` when none."""
    if key in graph:
        return [key]
    ops = [n for n, d in graph.nodes(data=True) if d.get("op") == key or d.get("instance") == key]
    if not ops and "." not in key and "#" not in key:
        # Short op names: "conv2d" or "nn.conv2d" for "relax.nn.conv2d".
        ops = [
            n for n, d in graph.nodes(data=True)
            if d.get("kind") == "op" and str(d.get("op", "")).split(".")[-1] == key
        ]
    return ops


def _is_op_name(key: str) -> bool:
    import tvm

    if "#" in key or not key.startswith("relax."):
        return False
    try:
        tvm.ir.Op.get(key)
        return True
    except Exception:
        return False


def resolve_assignment(graph: nx.DiGraph, assignment: Mapping[str, str] | None, target_names, default: str):
    """Expand a user assignment into ``{node: target}`` for every op, input and output node.

    Keys are applied from the least to the most specific: op names, then instances, then node names,
    so ``{"relax.nn.conv2d": "gpu", "relax.nn.conv2d#0": "cpu"}`` puts every conv2d but the first on
    the GPU. Nodes no key names go to ``default``.

    A full op name (``"relax.nn.conv2d"``) of an op this model does not use matches nothing, so one
    per-op-type policy serves many models.

    Raises
    ------
    AssignmentError
        An assignment that is not a dict, a key that names no node (and is no Relax op name) or names a
        weight (weights go where the ops that read them run), or a value that names no target.
    """
    target_names = list(target_names)
    if assignment is not None and not isinstance(assignment, Mapping):
        raise AssignmentError(
            f"an assignment is a dict {{key: target}} (e.g. {{'relax.nn.conv2d': 'gpu'}}) with targets from "
            f"{target_names}, got a {type(assignment).__name__}: {assignment!r}"[:400]
        )
    assignment = dict(assignment or {})
    for key in assignment:
        if not isinstance(key, str):
            raise AssignmentError(
                f"assignment key {key!r} is a {type(key).__name__}: keys are node names (e.g. 'lv3'), op names "
                "(e.g. 'relax.nn.conv2d') or instances (e.g. 'relax.nn.conv2d#0'), as strings"
            )
    result = {n: default for n, d in graph.nodes(data=True) if d.get("kind") in ("op", "input", "output")}

    def rank(key):
        if key in graph:
            return 2
        return 1 if "#" in key else 0

    for key in sorted(assignment, key=rank):
        target = assignment[key]
        if target not in target_names:
            raise AssignmentError(
                f"assignment {key!r} -> {target!r}: no target named {target!r}; the targets are {target_names}"
            )
        nodes = select_nodes(graph, key)
        if not nodes and _is_op_name(key):
            continue  # a per-op-type policy ("relax.nn.conv2d": "gpu") for an op this model does not use
        folded = _folded_from(graph, key) if not nodes else None
        if folded:
            users = sorted(n for n in graph.successors(folded) if graph.nodes[n].get("kind") == "op")
            raise AssignmentError(
                f"assignment key {key!r} names a weight (autoplace changed its layout once, at import: it is "
                f"{folded!r} now), which is not placed by itself: a weight lives on every device that runs an "
                f"op reading it; place those ops instead (here {users[:4]})"
            )
        if not nodes:
            ops = sorted({d["op"] for _, d in graph.nodes(data=True) if d.get("kind") == "op"})
            raise AssignmentError(
                f"assignment key {key!r} names no node of the model: use a node name as it prints in TVMScript "
                f"(e.g. {graph.graph.get('order', ['lv'])[:3]}), an op name (one of {ops[:8]}...) or an "
                f"instance like 'relax.nn.conv2d#0'"
            )
        if key in graph and graph.nodes[key].get("kind") == "weight":
            users = sorted(n for n in graph.successors(key) if graph.nodes[n].get("kind") == "op")
            raise AssignmentError(
                f"assignment key {key!r} names a weight, which is not placed by itself: a weight lives on every "
                f"device that runs an op reading it; place those ops instead (here {users[:4]})"
            )
        for node in nodes:
            if graph.nodes[node].get("kind") == "weight":
                continue  # weights follow their consumers
            result[node] = target
    return result


def _folded_from(graph: nx.DiGraph, key: str) -> str | None:
    """The weight node that ``key``, a weight name of the imported model, became when
    :func:`autoplace.frontend.fold_weight_transforms` folded a layout change or arithmetic into it
    (``p_0_weight`` -> ``p_0_weight_permute_dims``; a convolution's weight scaled by the BatchNorm after it ->
    ``p_0_weight_multiply``), if any."""
    from ..frontend import WEIGHT_ARITHMETIC_OPS, WEIGHT_LAYOUT_OPS

    suffixes = tuple(f"_{op.removeprefix('relax.')}" for op in WEIGHT_LAYOUT_OPS | WEIGHT_ARITHMETIC_OPS)
    for node, data in graph.nodes(data=True):
        if data.get("kind") == "weight" and node.startswith(f"{key}_") and node.endswith(suffixes):
            return node
    return None
