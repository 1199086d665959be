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

The same construction, with two more kinds of terms, gives optimal *swap moves* on any
number of targets (:func:`autoplace.solve.local_search.improve_by_swaps`): nodes on targets ``a`` and ``b`` choose again
between the two while the rest stay. A tensor made on a third target and consumed on ``a``
or ``b`` must be fetched once to each side that has a consumer:

(d) fetch to side 0 (``a``): auxiliary node with infinite arcs ``c -> aux`` and arc
    ``aux -> T`` of the fetch latency;
(e) fetch to side 1 (``b``): auxiliary node with arc ``S -> aux`` of the fetch latency and
    infinite arcs ``aux -> c``.

Copies from ``a``/``b`` to a third target depend only on the producer's side and are unary.
"""

from __future__ import annotations

import time

import numpy as np

from ..errors import PlacementError
from .problem import PlacementProblem

__all__ = ["CAPACITY_SCALE_BITS", "min_cut_labels", "solve_mincut"]

#: Finite capacities are scaled so that their sum is about ``2**CAPACITY_SCALE_BITS``.
CAPACITY_SCALE_BITS = 40


def min_cut_labels(
    fixed: np.ndarray,
    cost0: np.ndarray,
    cost1: np.ndarray,
    copy_src: np.ndarray,
    copy_w01: np.ndarray,
    copy_w10: np.ndarray,
    copy_use_term: np.ndarray,
    copy_use_node: np.ndarray,
    fetch_w0: np.ndarray | None = None,
    fetch_w1: np.ndarray | None = None,
    fetch_use_term: np.ndarray | None = None,
    fetch_use_node: np.ndarray | None = None,
) -> tuple[np.ndarray, dict]:
    """Minimise a binary energy of unary, copy and fetch terms by one s-t min cut.

    The energy over labels ``x`` in {0, 1} (``x = 0``: source side) is::

        sum_v cost0[v] [x_v = 0] + cost1[v] [x_v = 1]
        + sum_j  w01[j] [x_src(j) = 0 and some consumer of j has x = 1]      (b)
               + w10[j] [x_src(j) = 1 and some consumer of j has x = 0]      (c)
        + sum_f  w0[f] [some consumer of f has x = 0]                        (d)
               + w1[f] [some consumer of f has x = 1]                        (e)

    Copy terms ``j`` are tensors made by a node of the energy; fetch terms ``f`` are tensors
    made outside it (their producer sits on a third target) that must be fetched to each
    side where a consumer runs.

    Parameters
    ----------
    fixed : numpy.ndarray of int, shape (n,)
        ``0`` or ``1`` for a node whose label is fixed (merged into that terminal), ``-1``
        for a free node. Unary costs of fixed nodes are constants and ignored.
    cost0, cost1 : numpy.ndarray of float, shape (n,)
        Unary costs (>= 0).
    copy_src, copy_w01, copy_w10 : numpy.ndarray, shape (n_copy,)
        Producer node and the two copy latencies of each copy term.
    copy_use_term, copy_use_node : numpy.ndarray of int, shape (n_copy_uses,)
        (term, consumer node) pairs.
    fetch_w0, fetch_w1, fetch_use_term, fetch_use_node : numpy.ndarray, optional
        Likewise for fetch terms.

    Returns
    -------
    labels : numpy.ndarray of int, shape (n,)
    info : dict
        ``cut_us`` (cut value after rounding, constants of fixed nodes excluded), ``n_arcs``.

    Notes
    -----
    ``ortools.graph.python.max_flow.SimpleMaxFlow`` takes integer capacities, so every cost
    is multiplied by ``scale = 2**40 / (sum of all finite capacities)`` and rounded to the
    nearest integer. The cut found is optimal for the rounded capacities, so within
    ``n_arcs / (2 * scale)`` (about ``n_arcs * 5e-13`` times the sum of all costs) of
    optimal for the true ones. Callers recompute costs in floating point from the labels.
    Infinite capacities are ``1 +`` the sum of the rounded finite ones, more than any cut
    made of finite arcs alone.
    """
    from ortools.graph.python import max_flow

    free = fixed < 0
    gid = np.where(fixed == 1, 1, 0).astype(np.int64)
    gid[free] = 2 + np.arange(int(free.sum()))
    next_id = 2 + int(free.sum())
    tails, heads, caps, infinite = [], [], [], []

    def arcs(tail, head, cap, inf=False):
        tail = np.asarray(tail, dtype=np.int64)
        tails.append(tail)
        heads.append(np.asarray(head, dtype=np.int64))
        caps.append(np.broadcast_to(np.asarray(cap, dtype=np.float64), tail.shape))
        infinite.append(np.full(tail.shape, inf))

    def hyper(node_of_term, use_term, use_node, w_to1, w_to0, n_terms):
        """Arcs charging w_to1 if any consumer is on side 1, w_to0 if any is on side 0.

        ``node_of_term`` is the gid the charge is conditioned on: the producer for copy terms
        (charged only when it is on the other side), S/T for fetch terms (always charged).
        """
        nonlocal next_id
        n_cons = np.bincount(use_term, minlength=n_terms)
        single = n_cons[use_term] == 1
        st, sn = use_term[single], use_node[single]
        # one consumer: direct arcs producer -> consumer (w_to1) and consumer -> producer (w_to0)
        arcs(node_of_term[0][st], gid[sn], w_to1[st])
        arcs(gid[sn], node_of_term[1][st], w_to0[st])
        # several consumers: auxiliary node per term and direction
        multi = np.nonzero(n_cons > 1)[0]
        aux_1 = np.full(n_terms, -1, dtype=np.int64)
        aux_0 = np.full(n_terms, -1, dtype=np.int64)
        aux_1[multi] = next_id + 2 * np.arange(len(multi))
        aux_0[multi] = aux_1[multi] + 1
        next_id += 2 * len(multi)
        arcs(node_of_term[0][multi], aux_1[multi], w_to1[multi])
        arcs(aux_0[multi], node_of_term[1][multi], w_to0[multi])
        mt, mn = use_term[~single], use_node[~single]
        arcs(aux_1[mt], gid[mn], 0.0, inf=True)
        arcs(gid[mn], aux_0[mt], 0.0, inf=True)

    # (a) unary costs of free nodes
    fv = np.nonzero(free)[0]
    arcs(np.zeros(len(fv)), gid[fv], cost1[fv])
    arcs(gid[fv], np.ones(len(fv)), cost0[fv])
    # (b), (c) copies of tensors made inside the energy: conditioned on the producer's side
    src_g = gid[np.asarray(copy_src, dtype=np.int64)]
    hyper((src_g, src_g), np.asarray(copy_use_term, dtype=np.int64), np.asarray(copy_use_node, dtype=np.int64),
          np.asarray(copy_w01, dtype=np.float64), np.asarray(copy_w10, dtype=np.float64), len(src_g))  # fmt: skip
    # (d), (e) fetches of tensors made outside: charged from S (to side 1) and into T (to side 0)
    if fetch_w0 is not None and len(fetch_w0):
        nf = len(fetch_w0)
        hyper((np.zeros(nf, np.int64), np.ones(nf, np.int64)), np.asarray(fetch_use_term, dtype=np.int64),
              np.asarray(fetch_use_node, dtype=np.int64), np.asarray(fetch_w1, dtype=np.float64),
              np.asarray(fetch_w0, dtype=np.float64), nf)  # fmt: skip

    tail = np.concatenate(tails)
    head = np.concatenate(heads)
    cap = np.concatenate(caps)
    inf = np.concatenate(infinite)
    # drop arcs that can never be cut: self loops, arcs into S or out of T, zero capacity
    useful = (tail != head) & (head != 0) & (tail != 1) & (inf | (cap > 0))
    tail, head, cap, inf = tail[useful], head[useful], cap[useful], inf[useful]

    finite_sum = float(cap[~inf].sum())
    scale = 2.0**CAPACITY_SCALE_BITS / finite_sum if finite_sum > 0 else 1.0
    icap = np.rint(cap * scale).astype(np.int64)
    icap[inf] = int(icap[~inf].sum()) + 1

    solver = max_flow.SimpleMaxFlow()
    solver.add_arcs_with_capacity(tail, head, icap)
    solver.add_arc_with_capacity(0, 1, 0)  # both terminals exist even without arcs
    status = solver.solve(0, 1)
    if status != solver.OPTIMAL:
        raise PlacementError(f"max-flow failed with status {status} (capacity overflow?)")
    source_side = np.zeros(max(next_id, 2), dtype=bool)
    source_side[np.asarray(solver.get_source_side_min_cut(), dtype=np.int64)] = True
    labels = np.where(source_side[gid], 0, 1).astype(np.int64)
    labels[fixed == 0] = 0
    labels[fixed == 1] = 1
    return labels, {"cut_us": solver.optimal_flow() / scale, "n_arcs": len(tail)}


def solve_mincut(problem: PlacementProblem) -> tuple[np.ndarray, dict]:
    """Optimal two-target placement by one minimum s-t cut (memory caps ignored).

    Parameters
    ----------
    problem : PlacementProblem
        Must have exactly two targets. Memory caps are ignored (the caller checks them).

    Returns
    -------
    target_of : numpy.ndarray of int, shape (n_nodes,)
        Target number of every node in an optimal placement.
    info : dict
        ``n_arcs`` and ``mincut_s``.

    Raises
    ------
    PlacementError
        If the problem does not have two targets.

    Notes
    -----
    Capacities are scaled to integers; see :func:`min_cut_labels` for the rounding bound.
    """
    t0 = time.perf_counter()
    p = problem
    if p.n_targets != 2:
        raise PlacementError(f"min-cut placement needs exactly 2 targets, the problem has {p.n_targets}")
    allowed = p.allowed
    fixed = np.where(allowed[:, 0] & allowed[:, 1], -1, np.where(allowed[:, 0], 0, 1))
    W = p.copy_latency_us
    labels, info = min_cut_labels(
        fixed,
        p.latency_us[:, 0],
        p.latency_us[:, 1],
        p.tensor_producer,
        W[:, 0, 1],
        W[:, 1, 0],
        p.use_tensor,
        p.use_consumer,
    )
    return labels, {"n_arcs": info["n_arcs"], "mincut_s": round(time.perf_counter() - t0, 4)}
