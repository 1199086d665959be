"""Reference placements: everything on one target, greedy, by hand, and exhaustive search.

Each function returns target numbers per node (``numpy.ndarray`` of int); :func:`autoplace.solve.solve`
turns them into validated plans.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..errors import InfeasiblePlacementError, PlacementError
from .cost import batch_objective_us, evaluate, over_memory_caps
from .problem import PlacementProblem

__all__ = ["all_on", "brute_force", "check_memory", "greedy", "manual", "memory_greedy"]


def _names(problem: PlacementProblem, rows) -> str:
    rows = list(rows)
    shown = [problem.nodes[i] for i in rows[:5]]
    return f"{shown}" + (f" (and {len(rows) - 5} more)" if len(rows) > 5 else "")


def check_memory(problem: PlacementProblem, target_of: np.ndarray, method: str) -> None:
    """Raise :class:`InfeasiblePlacementError` if a placement breaks a memory cap."""
    over = over_memory_caps(problem, target_of)
    if over:
        d = over[0]
        used = evaluate(problem, target_of).memory_bytes
        t = problem.targets[d]
        raise InfeasiblePlacementError(
            f"the {method} placement uses {int(used[d])} bytes on {t}, above its memory cap of "
            f"{int(problem.memory_bytes[d])} bytes: raise memory_bytes[{t!r}] or use an "
            "optimal method (method='auto'), which respects the caps"
        )


def all_on(problem: PlacementProblem, target: str) -> np.ndarray:
    """Every node on ``target``, except pinned nodes, which stay where they are pinned (model inputs
    arrive on the host and outputs return there, whatever runs the kernels).

    Raises
    ------
    PlacementError
        If ``target`` is unknown, or does not support some unpinned nodes (the message names them).
    """
    p = problem
    if target not in p.targets:
        raise PlacementError(f"unknown target {target!r}: the problem's targets are {list(p.targets)}")
    d = p.targets.index(target)
    free = p.pinned < 0
    unsupported = np.nonzero(free & ~p.allowed[:, d])[0]
    if len(unsupported):
        raise InfeasiblePlacementError(
            f"cannot put everything on {target}: it does not support nodes {_names(p, unsupported)}; "
            f"add {target!r} to their latency_us or choose another method"
        )
    return np.where(free, d, p.pinned).astype(np.int64)


def greedy(problem: PlacementProblem) -> np.ndarray:
    """Every node on its fastest allowed target (pins honoured, copies ignored; ties: first target)."""
    lat = np.where(problem.allowed, problem.latency_us, np.inf)
    return lat.argmin(axis=1).astype(np.int64)


def memory_greedy(problem: PlacementProblem, target: str, fallback: str | None = None) -> np.ndarray:
    """``target`` filled in model order until its memory cap, everything after on ``fallback``.

    The placement of Hugging Face accelerate's ``device_map="auto"`` and llama.cpp's GPU-layer count: walk the
    nodes in the order the model runs them (the problem's node order), keep each on ``target`` while the nodes
    placed so far still fit its memory cap (:func:`.cost.evaluate`'s memory: weights and outputs, copies
    included), and put the first node that does not fit and every node after it on ``fallback`` (default: the
    first other target). Pinned nodes stay where pinned; a node ``target`` does not run goes to ``fallback``
    too. Without a cap on ``target`` this is :func:`all_on`.

    Raises
    ------
    PlacementError
        If ``target`` or ``fallback`` is unknown.
    """
    p = problem
    for name in (target, fallback):
        if name is not None and name not in p.targets:
            raise PlacementError(f"unknown target {name!r}: the problem's targets are {list(p.targets)}")
    d = p.targets.index(target)
    other = p.targets.index(fallback) if fallback is not None else next(i for i in range(p.n_targets) if i != d)
    free = p.pinned < 0
    rest = np.where(free, other, p.pinned).astype(np.int64)
    eligible = np.nonzero(free & p.allowed[:, d])[0]  # in model order

    def first_on_target(k: int) -> np.ndarray:
        target_of = rest.copy()
        target_of[eligible[:k]] = d
        return target_of

    # The memory on ``target`` only grows with each node put there, so the longest prefix that fits is found by
    # bisection (one evaluate per step, not per node).
    lo, hi = 0, len(eligible)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if evaluate(p, first_on_target(mid)).memory_bytes[d] <= p.memory_bytes[d]:
            lo = mid
        else:
            hi = mid - 1
    return first_on_target(lo)


def manual(problem: PlacementProblem, assignment: Mapping | None) -> np.ndarray:
    """The placement given by hand as ``{node: target}``; every node must be listed.

    Raises
    ------
    PlacementError
        If ``assignment`` is missing, leaves out nodes, names unknown targets, or breaks a pin
        or support (the message names the node).
    """
    p = problem
    if assignment is None:
        raise PlacementError("method='manual' needs `assignment`, a {node: target} dict")
    target_of = p.assignment_index(assignment)
    bad = np.nonzero(~p.allowed[np.arange(p.n_nodes), target_of])[0]
    if len(bad):
        i = int(bad[0])
        t = p.targets[target_of[i]]
        why = (
            f"it is pinned to {p.targets[p.pinned[i]]!r}"
            if p.pinned[i] >= 0 and np.isfinite(p.latency_us[i, target_of[i]])
            else f"{t!r} does not support it"
        )
        raise PlacementError(f"the manual assignment puts node {p.nodes[i]!r} on {t!r} but {why}")
    return target_of


def brute_force(
    problem: PlacementProblem, max_assignments: int = 2_000_000, chunk: int = 65_536
) -> np.ndarray:
    """The optimal placement by trying every one (tiny problems only; a test reference).

    Enumerates every combination of allowed targets, costs them in batches with
    :func:`.cost.batch_objective_us`, and keeps the cheapest that fits the memory caps (the
    first in enumeration order among equals).

    Raises
    ------
    PlacementError
        If there are more than ``max_assignments`` combinations.
    InfeasiblePlacementError
        If none fits the memory caps.
    """
    p = problem
    options = [np.nonzero(row)[0] for row in p.allowed]
    sizes = np.array([len(o) for o in options], dtype=np.int64)
    total = int(np.prod(sizes.astype(float))) if len(sizes) else 1
    if total > max_assignments:
        raise PlacementError(
            f"brute force would try {total} placements (limit {max_assignments}): use method='auto'"
        )
    if p.n_nodes == 0:
        return np.zeros(0, dtype=np.int64)
    table = np.full((p.n_nodes, int(sizes.max())), -1, dtype=np.int64)
    for i, o in enumerate(options):
        table[i, : len(o)] = o
    stride = np.concatenate([[1], np.cumprod(sizes)[:-1]])
    best, best_obj = None, np.inf
    for first in range(0, total, chunk):
        idx = np.arange(first, min(first + chunk, total), dtype=np.int64)
        digits = (idx[:, None] // stride[None, :]) % sizes[None, :]
        A = table[np.arange(p.n_nodes)[None, :], digits]
        obj, memory = batch_objective_us(p, A)
        obj = np.where((memory <= p.memory_bytes[None, :]).all(axis=1), obj, np.inf)
        j = int(np.argmin(obj))
        if obj[j] < best_obj:
            best, best_obj = A[j].copy(), obj[j]
    if best is None:
        caps = {t: int(c) for t, c in zip(p.targets, p.memory_bytes) if np.isfinite(c)}
        raise InfeasiblePlacementError(f"no placement fits the memory caps {caps}: raise memory_bytes")
    return best
