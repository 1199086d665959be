"""Local search over placements: moves that never raise the cost, used by the ILP's heuristic phase.

* :func:`improve_by_swaps`: optimal swap moves between pairs of targets, each one a min cut
  (:func:`autoplace.solve.mincut.min_cut_labels`, terms (d) and (e) of :mod:`autoplace.solve.mincut`);
* :func:`improve_by_moves`: single nodes moved to their cheapest target, one at a time.

Both ignore memory caps; the caller checks the result (:func:`autoplace.solve.cost.fits_memory`).
"""

from __future__ import annotations

import time

import numpy as np

from .cost import evaluate
from .mincut import min_cut_labels
from .problem import PlacementProblem

__all__ = ["improve_by_moves", "improve_by_swaps"]


def improve_by_swaps(
    problem: PlacementProblem, target_of: np.ndarray, deadline: float | None = None, max_rounds: int = 20
) -> np.ndarray:
    """Improve a placement by optimal swap moves between pairs of targets (memory ignored).

    A swap move on targets ``a`` and ``b`` lets every node now on ``a`` or ``b`` (and allowed
    on both) choose again between the two, all others staying put. Its cost, as a function
    of those binary choices, is an energy of the form :func:`min_cut_labels` minimises
    exactly: node latencies and copies to other targets are unary terms; tensors made on
    ``a``/``b`` and consumed there are copy terms; tensors made elsewhere and consumed on
    ``a``/``b`` are fetch terms. So each move is optimal and never raises the cost; rounds
    over all pairs repeat until a round changes nothing, ``max_rounds`` is reached or the
    ``deadline`` (a ``time.perf_counter()`` value) passes.

    Parameters
    ----------
    problem : PlacementProblem
    target_of : numpy.ndarray of int, shape (n_nodes,)
        A placement that respects pins and support; not modified.
    deadline : float, optional
    max_rounds : int

    Returns
    -------
    numpy.ndarray of int
        A placement costing at most as much as ``target_of``.
    """
    p = problem
    k = p.n_targets
    L = np.asarray(target_of, dtype=np.int64).copy()
    W = p.copy_latency_us
    prod, ut, uc = p.tensor_producer, p.use_tensor, p.use_consumer
    best = evaluate(p, L).objective_us
    for _ in range(max_rounds):
        improved = False
        for a in range(k):
            for b in range(a + 1, k):
                if deadline is not None and time.perf_counter() > deadline:
                    return L
                in_set = (L == a) | (L == b)
                both = p.allowed[:, a] & p.allowed[:, b]
                fixed = np.where(in_set & both, -1, np.where(L == a, 0, 1))
                cost0 = p.latency_us[:, a].copy()
                cost1 = p.latency_us[:, b].copy()
                # uses whose tensor is made inside the set vs outside, consumer inside vs outside
                p_in = in_set[prod]
                c_in = in_set[uc]
                # copies from a set producer to consumers outside the set: unary on the producer,
                # once per (tensor, outside target)
                out_uses = p_in[ut] & ~c_in
                code = np.unique(ut[out_uses] * k + L[uc[out_uses]])
                t_o, d_o = code // k, code % k
                np.add.at(cost0, prod[t_o], W[t_o, a, d_o])
                np.add.at(cost1, prod[t_o], W[t_o, b, d_o])
                # copy terms: set producer, set consumers
                cu = p_in[ut] & c_in
                ct = np.unique(ut[cu])
                term = np.full(p.n_tensors, -1, dtype=np.int64)
                term[ct] = np.arange(len(ct))
                # fetch terms: producer outside the set, consumers inside
                fu = ~p_in[ut] & c_in
                ft = np.unique(ut[fu])
                fterm = np.full(p.n_tensors, -1, dtype=np.int64)
                fterm[ft] = np.arange(len(ft))
                src_f = L[prod[ft]]
                labels, _ = min_cut_labels(
                    fixed, np.where(np.isfinite(cost0), cost0, 0.0), np.where(np.isfinite(cost1), cost1, 0.0),
                    prod[ct], W[ct, a, b], W[ct, b, a], term[ut[cu]], uc[cu],
                    W[ft, src_f, a], W[ft, src_f, b], fterm[ut[fu]], uc[fu],
                )  # fmt: skip
                trial = L.copy()
                trial[in_set] = np.where(labels[in_set] == 0, a, b)
                cost = evaluate(p, trial).objective_us
                if cost < best - 1e-9 * max(1.0, abs(best)):
                    L, best, improved = trial, cost, True
        if not improved:
            break
    return L


def improve_by_moves(
    problem: PlacementProblem, target_of: np.ndarray, deadline: float | None = None
) -> np.ndarray:
    """Move single nodes to cheaper targets until no move helps (memory caps are ignored).

    Each pass visits every node and moves it to the target that lowers the total cost most
    (node latency, copies of its own tensors, and copies of the tensors it consumes). Stops
    when a pass moves nothing, or at ``deadline`` (``time.perf_counter()`` value).

    Parameters
    ----------
    problem : PlacementProblem
    target_of : numpy.ndarray of int, shape (n_nodes,)
        Starting placement (must respect pins and support); not modified.
    deadline : float, optional

    Returns
    -------
    numpy.ndarray of int
        A placement whose cost is at most the starting one.
    """
    p = problem
    n, k = p.n_nodes, p.n_targets
    target = [int(d) for d in target_of]
    lat = np.where(p.allowed, p.latency_us, np.inf).tolist()
    options = [np.nonzero(row)[0].tolist() for row in p.allowed]
    prod = p.tensor_producer.tolist()
    W = p.copy_latency_us.tolist()
    out_tensors = [[] for _ in range(n)]
    for t, i in enumerate(prod):
        out_tensors[i].append(t)
    in_tensors = [[] for _ in range(n)]
    count = [[0] * k for _ in range(p.n_tensors)]  # consumers of t on each target
    for t, u in zip(p.use_tensor.tolist(), p.use_consumer.tolist()):
        in_tensors[u].append(t)
        count[t][target[u]] += 1
    K = range(k)

    def move_cost(i, d):
        cost = lat[i][d]
        for t in out_tensors[i]:
            cnt, w = count[t], W[t][d]
            for e in K:
                if e != d and cnt[e]:
                    cost += w[e]
        return cost

    for _ in range(1000):
        moved = False
        for i in range(n):
            if deadline is not None and i % 1024 == 0 and time.perf_counter() > deadline:
                break
            opts = options[i]
            if len(opts) < 2:
                continue
            here = target[i]
            base = move_cost(i, here)
            best_d, best_delta = here, -1e-9 * max(1.0, abs(base))
            for d in opts:
                if d == here:
                    continue
                delta = move_cost(i, d) - base
                for t in in_tensors[i]:
                    s = target[prod[t]]
                    cnt = count[t]
                    if here != s and cnt[here] == 1:
                        delta -= W[t][s][here]
                    if d != s and cnt[d] == 0:
                        delta += W[t][s][d]
                if delta < best_delta:
                    best_d, best_delta = d, delta
            if best_d != here:
                for t in in_tensors[i]:
                    count[t][here] -= 1
                    count[t][best_d] += 1
                target[i] = best_d
                moved = True
        if not moved or (deadline is not None and time.perf_counter() > deadline):
            break
    return np.asarray(target, dtype=np.int64)
