"""Check any plan against its problem, recomputing its cost from scratch.

The recomputation walks the problem with plain Python loops, independently of the vectorised
:func:`autoplace.solve.cost.evaluate` that the solvers use, so the two check each other.
"""

from __future__ import annotations

import math

from ..errors import PlacementError
from .plan import PlacementPlan
from .problem import PlacementProblem

__all__ = ["recompute_cost_us", "validate_plan"]


def recompute_cost_us(problem: PlacementProblem, assignment: dict) -> tuple[float, float, dict]:
    """Cost of an assignment by the definition, one node and one tensor at a time.

    Parameters
    ----------
    problem : PlacementProblem
    assignment : dict
        ``{node: target name}`` for every node.

    Returns
    -------
    compute_us : float
    copy_us : float
    memory_bytes : dict
        ``{target: bytes}`` used on each target (conservative, see :class:`PlacementProblem`).
    """
    p = problem
    compute_us = 0.0
    present = {t: set() for t in p.targets}
    for i, v in enumerate(p.nodes):
        t = assignment[v]
        compute_us += float(p.latency_us[i, p.targets.index(t)])
        present[t].add(i)

    consumers: dict[int, list[int]] = {}
    for t, c in zip(p.use_tensor.tolist(), p.use_consumer.tolist()):
        consumers.setdefault(t, []).append(c)
    copy_us = 0.0
    for t, cons in consumers.items():
        i = int(p.tensor_producer[t])
        src = assignment[p.nodes[i]]
        s = p.targets.index(src)
        for dst in sorted({assignment[p.nodes[c]] for c in cons} - {src}):
            d = p.targets.index(dst)
            present[dst].add(i)
            if not p.resident[i]:
                copy_us += p.copy_us(s, d, float(p.tensor_nbytes[t]))
    memory = {
        t: float(sum(int(p.weight_bytes[i]) + int(p.output_bytes[i]) for i in nodes))
        for t, nodes in present.items()
    }
    return compute_us, copy_us, memory


def validate_plan(problem: PlacementProblem, plan: PlacementPlan, rtol: float = 1e-6) -> None:
    """Check that a plan is a valid placement of ``problem`` and that its cost is right.

    Checks, in order: every node is assigned to a known target; that target supports the
    node; pins are honoured; memory caps hold; the objective (and its compute and copy parts)
    recomputed from the problem equals the plan's within ``rtol``; the bound does not exceed
    the objective.

    Parameters
    ----------
    problem : PlacementProblem
    plan : PlacementPlan
    rtol : float
        Relative tolerance of the cost comparison (absolute floor 1e-9 microseconds).

    Raises
    ------
    PlacementError
        Describing the first violation found.
    """
    p = problem
    a = plan.assignment
    for i, v in enumerate(p.nodes):
        if v not in a:
            raise PlacementError(f"plan ({plan.method}) gives no target for node {v!r}")
        t = a[v]
        if t not in p.targets:
            raise PlacementError(
                f"plan ({plan.method}) puts node {v!r} on unknown target {t!r} (targets: {list(p.targets)})"
            )
        d = p.targets.index(t)
        if not math.isfinite(p.latency_us[i, d]):
            raise PlacementError(f"plan ({plan.method}) puts node {v!r} on {t!r}, which does not support it")
        if p.pinned[i] >= 0 and p.pinned[i] != d:
            raise PlacementError(
                f"plan ({plan.method}) puts node {v!r} on {t!r} but it is pinned to "
                f"{p.targets[p.pinned[i]]!r}"
            )
    extra = set(a) - set(p.nodes)
    if extra:
        raise PlacementError(
            f"plan ({plan.method}) assigns nodes not in the problem: {sorted(map(str, extra))[:5]}"
        )

    compute_us, copy_us, memory = recompute_cost_us(p, a)
    for d, t in enumerate(p.targets):
        cap = p.memory_bytes[d]
        if memory[t] > cap:
            raise PlacementError(
                f"plan ({plan.method}) uses {memory[t]:.0f} bytes on {t!r}, above its memory cap "
                f"of {cap:.0f} bytes"
            )

    def close(x: float, y: float) -> bool:
        return abs(x - y) <= max(rtol * max(abs(x), abs(y)), 1e-9)

    for name, mine, theirs in (
        ("objective_us", compute_us + copy_us, plan.objective_us),
        ("compute_us", compute_us, plan.compute_us),
        ("copy_us", copy_us, plan.copy_us),
    ):
        if not close(mine, theirs):
            raise PlacementError(
                f"plan ({plan.method}) claims {name} = {theirs!r} but the problem gives {mine!r}"
            )
    if plan.bound_us > plan.objective_us and not close(plan.bound_us, plan.objective_us):
        raise PlacementError(
            f"plan ({plan.method}) claims a lower bound {plan.bound_us!r} above its objective "
            f"{plan.objective_us!r}"
        )
