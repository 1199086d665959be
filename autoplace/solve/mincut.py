"""Exact placement on two targets as one minimum s-t cut.

With two targets and no memory caps, every node makes a binary choice, and the cost is a sum
of unary terms (node latency) and one term per (tensor, destination) copy event. Both kinds
are representable as cut arcs, so one max-flow gives a proven optimum.

Construction
------------
Source ``S`` stands for target 0, sink ``T`` for target 1; a node on the source side of the
cut runs on target 0. For every node ``v``:

(a) arc ``S -> v`` with capacity ``latency_us[v, 1]`` (cut when ``v`` runs on target 1) and
    arc ``v -> T`` with capacity ``latency_us[v, 0]`` (cut when ``v`` runs on target 0).
    A node that may run on one target only (pinned, or unsupported on the other) is merged
    into that terminal instead.

For every non-resident tensor made by ``p`` with consumers ``C``, and copy latencies
``w01`` (target 0 -> 1) and ``w10`` (1 -> 0):

(b) copy 0 -> 1, paid once if ``p`` is on target 0 and any consumer on target 1: an
    auxiliary node ``a`` with arc ``p -> a`` of capacity ``w01`` and arcs ``a -> c`` of
    infinite capacity for every ``c`` in ``C``. If some ``c`` is on the sink side, ``a``
    must be too (else an infinite arc is cut), so ``p -> a`` is cut iff ``p`` is on the
    source side: the copy is charged once however many consumers there are.
(c) copy 1 -> 0, symmetrically: auxiliary node ``b`` with infinite arcs ``c -> b`` and arc
    ``b -> p`` of capacity ``w10``.

With a single consumer ``c`` the auxiliary node is skipped: arcs ``p -> c`` (``w01``) and
``c -> p`` (``w10``). Resident tensors cost nothing to copy and add no arcs.

The minimum cut's value equals the minimum objective, and the source side of the cut is an
optimal placement.
"""

from __future__ import annotations

import time

import numpy as np

from .errors import PlacementError
from .problem import PlacementProblem

__all__ = ["solve_mincut", "CAPACITY_SCALE_BITS"]

#: Finite capacities are scaled so that their sum is about ``2**CAPACITY_SCALE_BITS``.
CAPACITY_SCALE_BITS = 40


def solve_mincut(problem: PlacementProblem, fixed=None) -> tuple[np.ndarray, dict]:
    """Optimal two-target placement by a minimum s-t cut.

    Parameters
    ----------
    problem : PlacementProblem
        Must have exactly two targets. Memory caps are ignored (the caller checks them).
    fixed : numpy.ndarray of int, shape (n_nodes,), optional
        Extra restriction: target number per node, ``-1`` where free.

    Returns
    -------
    target_of : numpy.ndarray of int, shape (n_nodes,)
        Target number of every node in an optimal placement.
    info : dict
        ``cut_us`` (the cut value, in microseconds, after rounding), ``n_arcs``,
        ``build_s`` and ``maxflow_s``.

    Raises
    ------
    PlacementError
        If the problem does not have two targets, or the max-flow fails.

    Notes
    -----
    ``ortools.graph.python.max_flow.SimpleMaxFlow`` takes integer capacities, so every
    latency is multiplied by ``scale = 2**40 / (sum of all finite capacities)`` and rounded
    to the nearest integer. The cut found is optimal for the rounded capacities; it is
    within ``n_arcs / (2 * scale)`` microseconds (about ``n_arcs * 5e-13`` times the sum of
    all latencies) of optimal for the true ones. The plan's objective is then recomputed in
    floating point from the assignment, so the reported cost has no rounding error.
    Infinite capacities are ``1 +`` the sum of the rounded finite ones, larger than any cut
    made of finite arcs alone.
    """
    from ortools.graph.python import max_flow

    t_start = time.perf_counter()
    p = problem
    if p.n_targets != 2:
        raise PlacementError(f"min-cut placement needs exactly 2 targets, the problem has {p.n_targets}")
    n = p.n_nodes
    allowed = p.allowed.copy()
    if fixed is not None:
        fixed = np.asarray(fixed)
        rows = np.nonzero(fixed >= 0)[0]
        forced = np.zeros_like(allowed)
        forced[rows, fixed[rows]] = True
        allowed[rows] &= forced[rows]
        if not allowed.any(axis=1).all():
            raise PlacementError("`fixed` puts a node where it may not run")

    # graph node ids: 0 = S (target 0), 1 = T (target 1), 2.. = free nodes, then auxiliaries;
    # a node allowed on one target only is merged into that terminal
    only0 = allowed[:, 0] & ~allowed[:, 1]
    only1 = allowed[:, 1] & ~allowed[:, 0]
    free = ~(only0 | only1)
    gid = np.empty(n, dtype=np.int64)
    gid[only0] = 0
    gid[only1] = 1
    gid[free] = 2 + np.arange(int(free.sum()))
    next_id = 2 + int(free.sum())

    tails, heads, caps, infinite = [], [], [], []

    def arcs(tail, head, cap, inf=False):
        tails.append(np.asarray(tail, dtype=np.int64))
        heads.append(np.asarray(head, dtype=np.int64))
        cap = np.broadcast_to(np.asarray(cap, dtype=np.float64), tails[-1].shape)
        caps.append(cap)
        infinite.append(np.full(tails[-1].shape, inf))

    # (a) unary latency arcs for free nodes
    fv = np.nonzero(free)[0]
    arcs(np.zeros(len(fv)), gid[fv], p.latency_us[fv, 1])
    arcs(gid[fv], np.ones(len(fv)), p.latency_us[fv, 0])
    constant_us = float(p.latency_us[only0, 0].sum() + p.latency_us[only1, 1].sum())

    # (b), (c) copy events, for tensors whose copies cost something
    w01 = p.copy_latency_us[:, 0, 1]
    w10 = p.copy_latency_us[:, 1, 0]
    ut, uc = p.use_tensor, p.use_consumer
    costly = (w01 > 0) | (w10 > 0)
    keep = costly[ut]
    ut, uc = ut[keep], uc[keep]
    n_cons = np.bincount(ut, minlength=p.n_tensors)
    prod_g = gid[p.tensor_producer]
    # single consumer: direct arcs
    single = n_cons[ut] == 1
    st, sc = ut[single], uc[single]
    arcs(prod_g[st], gid[sc], w01[st])
    arcs(gid[sc], prod_g[st], w10[st])
    # several consumers: auxiliary nodes a_t (copy 0->1) and b_t (copy 1->0)
    multi_t = np.nonzero(n_cons > 1)[0]
    aux_a = np.full(p.n_tensors, -1, dtype=np.int64)
    aux_b = np.full(p.n_tensors, -1, dtype=np.int64)
    aux_a[multi_t] = next_id + 2 * np.arange(len(multi_t))
    aux_b[multi_t] = aux_a[multi_t] + 1
    next_id += 2 * len(multi_t)
    arcs(prod_g[multi_t], aux_a[multi_t], w01[multi_t])
    arcs(aux_b[multi_t], prod_g[multi_t], w10[multi_t])
    mt, mc = ut[~single], uc[~single]
    arcs(aux_a[mt], gid[mc], 0.0, inf=True)
    arcs(gid[mc], aux_b[mt], 0.0, inf=True)

    tail = np.concatenate(tails)
    head = np.concatenate(heads)
    cap = np.concatenate(caps)
    inf = np.concatenate(infinite)
    # drop arcs that can never be cut: self loops, arcs into S, arcs out of T, zero capacity
    useful = (tail != head) & (head != 0) & (tail != 1) & (inf | (cap > 0))
    tail, head, cap, inf = tail[useful], head[useful], cap[useful], inf[useful]

    finite_sum = float(cap[~inf].sum())
    scale = 2.0**CAPACITY_SCALE_BITS / finite_sum if finite_sum > 0 else 1.0
    icap = np.rint(cap * scale).astype(np.int64)
    icap[inf] = int(icap[~inf].sum()) + 1

    solver = max_flow.SimpleMaxFlow()
    solver.add_arcs_with_capacity(tail, head, icap)
    # make sure both terminals exist even with no arcs
    solver.add_arc_with_capacity(0, 1, 0)
    t_built = time.perf_counter()
    status = solver.solve(0, 1)
    if status != solver.OPTIMAL:
        raise PlacementError(f"max-flow failed with status {status} (capacity overflow?)")
    source_side = np.zeros(max(next_id, 2), dtype=bool)
    source_side[np.asarray(solver.get_source_side_min_cut(), dtype=np.int64)] = True
    target_of = np.where(source_side[gid], 0, 1).astype(np.int64)
    target_of[only0] = 0
    target_of[only1] = 1
    t_done = time.perf_counter()
    return target_of, {
        "cut_us": constant_us + solver.optimal_flow() / scale,
        "n_arcs": int(len(tail)),
        "build_s": t_built - t_start,
        "maxflow_s": t_done - t_built,
    }
