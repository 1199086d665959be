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
        ``{target: bytes}`` used on each target: what stays there for the whole run plus the activations
        live there at its busiest program position (see :class:`PlacementProblem`).
    """
    p = problem
    compute_us = 0.0
    consumers: dict[int, list[int]] = {}
    for t, c in zip(p.use_tensor.tolist(), p.use_consumer.tolist()):
        consumers.setdefault(t, []).append(c)
    carried: dict[int, int] = {}
    for t in range(p.n_tensors):
        carried[int(p.tensor_producer[t])] = carried.get(int(p.tensor_producer[t]), 0) + int(p.tensor_nbytes[t])
    reads = {c for cons in consumers.values() for c in cons}
    producers = set(p.tensor_producer.tolist())  # nodes that make a tensor: kernels, not sinks
    is_input = [not p.resident[i] and i not in reads for i in range(p.n_nodes)]  # the caller holds it

    static = {t: 0.0 for t in p.targets}
    for i, v in enumerate(p.nodes):
        t = assignment[v]
        compute_us += float(p.latency_us[i, p.targets.index(t)])
        if p.resident[i]:
            static[t] += max(int(p.weight_bytes[i]), int(p.output_bytes[i]))
        elif is_input[i]:
            static[t] += int(p.weight_bytes[i]) + max(int(p.output_bytes[i]), carried.get(i, 0))
        else:
            static[t] += int(p.weight_bytes[i])
    copy_us = 0.0
    # activations: (target, bytes, first position, last position)
    live = []
    for t in range(p.n_tensors):
        i = int(p.tensor_producer[t])
        src = assignment[p.nodes[i]]
        cons = consumers.get(t, [])
        where = {src} | {assignment[p.nodes[c]] for c in cons}
        for dst in sorted(where - {src}):
            if p.resident[i]:
                static[dst] += int(p.tensor_nbytes[t])
            else:
                s_, d_ = p.targets.index(src), p.targets.index(dst)
                copy_us += p.copy_us(s_, d_, float(p.tensor_nbytes[t]))
                if any(c in producers for c in cons):  # it feeds a kernel there or elsewhere: the pair's hand-off
                    copy_us += float(p.copy_handoff_us[s_, d_]
                                     + p.tensor_nbytes[t] * p.copy_handoff_us_per_byte[s_, d_])
        if not p.resident[i]:
            span = [int(p.position[i])] + [int(p.position[c]) for c in cons]
            live += [(dst, int(p.tensor_nbytes[t]), min(span), max(span)) for dst in where
                     if not (is_input[i] and dst == src)]
    for i, v in enumerate(p.nodes):
        if not p.resident[i] and not is_input[i] and int(p.output_bytes[i]) > carried.get(i, 0):
            live.append((assignment[v], int(p.output_bytes[i]) - carried.get(i, 0), int(p.position[i]),
                         int(p.position[i])))
    # a sweep over the program per target: +bytes where an activation starts, -bytes after its last position
    events = {t: [] for t in p.targets}
    for dst, nbytes, lo, hi in live:
        events[dst] += [(lo, 0, nbytes), (hi, 1, -nbytes)]
    memory = {}
    for t in p.targets:
        held = busiest = 0
        for _, _, change in sorted(events[t]):
            held += change
            busiest = max(busiest, held)
        memory[t] = float(static[t] + busiest)
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
