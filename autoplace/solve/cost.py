"""Vectorised cost of a placement: what the solvers use to turn an assignment into a plan.

:func:`~autoplace.solve.validate.validate_plan` recomputes the same quantities with plain
loops over the problem, on purpose by a different code path, so a slip here shows up there.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .problem import PlacementProblem

__all__ = ["PlacementCost", "batch_objective_us", "evaluate", "fits_memory", "over_memory_caps"]


class PlacementCost(NamedTuple):
    """Cost of one assignment (see :func:`evaluate`)."""

    compute_us: float
    copy_us: float
    #: tensor number, source and destination target number and latency of every copy
    copy_tensor: np.ndarray
    copy_src: np.ndarray
    copy_dst: np.ndarray
    copy_latency_us: np.ndarray
    #: bytes used on each target (weights and the busiest point's activations, see :class:`PlacementProblem`)
    memory_bytes: np.ndarray
    #: compute microseconds on each target
    compute_us_by_target: np.ndarray

    @property
    def objective_us(self) -> float:
        return self.compute_us + self.copy_us


def evaluate(problem: PlacementProblem, target_of: np.ndarray) -> PlacementCost:
    """Cost of placing node ``i`` on target ``target_of[i]``.

    Parameters
    ----------
    problem : PlacementProblem
    target_of : numpy.ndarray of int, shape (n_nodes,)

    Returns
    -------
    PlacementCost
        Latencies in microseconds; ``compute_us`` is ``inf`` if a node sits on a target that
        does not support it.
    """
    p, k = problem, problem.n_targets
    target_of = np.asarray(target_of, dtype=np.int64)
    node_lat = p.latency_us[np.arange(p.n_nodes), target_of]
    compute_by_target = np.bincount(target_of, weights=node_lat, minlength=k) if p.n_nodes else np.zeros(k)

    # one copy per (tensor, destination target other than the producer's)
    src_of_use = target_of[p.tensor_producer[p.use_tensor]]
    dst_of_use = target_of[p.use_consumer]
    remote = src_of_use != dst_of_use
    code = np.unique(p.use_tensor[remote] * k + dst_of_use[remote])
    t, dst = code // k, code % k
    src = target_of[p.tensor_producer[t]]
    lat = p.copy_latency_us[t, src, dst]

    memory = p.memory_use(target_of, t, dst)

    return PlacementCost(
        compute_us=float(node_lat.sum()),
        copy_us=float(lat.sum()),
        copy_tensor=t,
        copy_src=src,
        copy_dst=dst,
        copy_latency_us=lat,
        memory_bytes=memory,
        compute_us_by_target=compute_by_target,
    )


def batch_objective_us(problem: PlacementProblem, target_of: np.ndarray):
    """Objective and memory of many assignments at once (for brute force).

    Parameters
    ----------
    problem : PlacementProblem
    target_of : numpy.ndarray of int, shape (n_assignments, n_nodes)

    Returns
    -------
    objective_us : numpy.ndarray, shape (n_assignments,)
    memory_bytes : numpy.ndarray, shape (n_assignments, n_targets)
    """
    p, k = problem, problem.n_targets
    A = np.asarray(target_of, dtype=np.int64)
    B = A.shape[0]
    obj = p.latency_us[np.arange(p.n_nodes)[None, :], A].sum(axis=1) if p.n_nodes else np.zeros(B)
    copied = np.zeros((B, p.n_tensors, k), dtype=bool)  # tensor t copied to target d
    for t in range(p.n_tensors):
        prod = p.tensor_producer[t]
        consumers = p.use_consumer[p.use_tensor == t]
        src = A[:, prod]
        for d in range(k):
            needed = (A[:, consumers] == d).any(axis=1) & (src != d)
            obj = obj + needed * p.copy_latency_us[t, src, d]
            copied[:, t, d] = needed
    placed = A[:, :, None] == np.arange(k)[None, None, :]  # (B, n, k)
    static = np.einsum("bnd,n->bd", placed, p.static_bytes.astype(np.float64))
    resident = p.resident[p.tensor_producer]
    static += np.einsum("btd,t->bd", copied[:, resident], p.tensor_nbytes[resident].astype(np.float64))
    items = p.live_items
    present = placed[:, items["producer"]] & items["placed"][None, :, None]  # (B, items, k)
    is_tensor = items["tensor"] >= 0
    present[:, is_tensor] |= copied[:, items["tensor"][is_tensor]]
    live = p.live_matrix.toarray()  # (points, items): brute force is for tiny problems
    held = np.einsum("ri,bid->brd", live, present * items["nbytes"][None, :, None].astype(np.float64))
    memory = static + (held.max(axis=1) if live.shape[0] else 0.0)
    return obj, memory


def over_memory_caps(problem: PlacementProblem, target_of: np.ndarray) -> list[int]:
    """Target numbers whose memory cap the placement breaks (empty when it fits, or there are no caps).

    The one memory-fit check of the package: every solver, baseline and comparison asks it.
    """
    if not problem.has_memory_caps:
        return []
    used = evaluate(problem, target_of).memory_bytes
    return [int(d) for d in np.nonzero(used > problem.memory_bytes)[0]]


def fits_memory(problem: PlacementProblem, target_of: np.ndarray) -> bool:
    """Whether the placement keeps every target within its memory cap."""
    return not over_memory_caps(problem, target_of)
