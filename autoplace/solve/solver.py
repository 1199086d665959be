"""``solve``: turn a placement problem into a validated plan with the chosen method."""

from __future__ import annotations

import time
from collections.abc import Mapping

import numpy as np

from ..errors import PlacementError
from . import baselines
from .cost import fits_memory
from .ilp import solve_ilp
from .mincut import solve_mincut
from .plan import PlacementPlan
from .problem import PlacementProblem
from .validate import validate_plan

__all__ = ["METHODS", "one_target_alternatives", "solve"]

#: method names :func:`solve` accepts (plus ``"all:<target>"``)
METHODS = ("auto", "ilp", "mincut", "greedy", "manual", "brute_force", "all:<target>", "memory-greedy:<target>")

_ILP_OPTIONS = {"lp_first", "pdlp_tolerance", "threads"}


def solve(
    problem: PlacementProblem,
    method: str = "auto",
    time_limit_s: float = 10.0,
    relative_gap: float = 1e-4,
    assignment: Mapping | None = None,
    **opts,
) -> PlacementPlan:
    """Place every node of ``problem`` on a target, minimising total latency.

    Parameters
    ----------
    problem : PlacementProblem
    method : str
        ``"auto"`` (default): the exact path that fits: one target -> trivial; two targets ->
        min-cut (:mod:`.mincut`), exact, kept when it fits the memory caps; otherwise the
        integer program (:mod:`.ilp`). ``"ilp"``, ``"mincut"`` (two targets; with memory caps
        only when its optimum happens to fit them): that solver. Baselines:
        ``"all:<target>"`` (every kernel on one target; pinned nodes stay where pinned), ``"greedy"`` (each node on its fastest
        allowed target, copies ignored), ``"manual"`` (``assignment`` as given; every node
        must be listed), ``"brute_force"`` (tries every placement; tiny problems only), ``"memory-greedy:<target>"``
        (``target`` filled in model order until its memory cap, the rest on the first other target, as
        accelerate's ``device_map="auto"``: :func:`.baselines.memory_greedy`).
    time_limit_s : float
        Wall-clock budget of the ILP, model building included. On expiry the best plan found
        is returned with status ``"feasible"`` and its proven gap.
    relative_gap : float
        The ILP stops once ``(objective - bound) / objective <= relative_gap`` and then
        reports ``"optimal"``.
    assignment : mapping, optional
        ``{node: target}`` for ``method="manual"``.
    **opts
        Passed to :func:`.ilp.solve_ilp`: ``lp_first``, ``pdlp_tolerance``, ``threads``.

    Returns
    -------
    PlacementPlan
        Checked by :func:`.validate.validate_plan` before it is returned.

    Raises
    ------
    InfeasiblePlacementError
        If no placement meets the pins, support and memory caps (or the baseline asked for
        breaks them); the message says which knob to turn.
    PlacementError
        On an unknown method, a bad manual assignment, a brute force too large, or no plan
        within the time limit.

    Notes
    -----
    The objective is a sum of latencies (serial execution): node latencies plus one copy per
    (tensor, destination target), see :class:`.PlacementProblem`. ``"optimal"`` means proven
    optimal: exactly for ``"mincut"`` (up to the integer rounding of its capacities, see
    :func:`.mincut.solve_mincut`) and ``"brute_force"``, and within ``relative_gap`` for
    ``"ilp"``; :attr:`PlacementPlan.bound_us` is the proven lower bound either way.

    Examples
    --------
    >>> import networkx as nx
    >>> g = nx.DiGraph()
    >>> g.add_node("x", pinned="cpu")
    >>> g.add_node("mm", latency_us={"cpu": 100.0, "gpu": 10.0})
    >>> g.add_edge("x", "mm", nbytes=4096)
    >>> cost = {("cpu", "gpu"): (5.0, 1e-3), ("gpu", "cpu"): (5.0, 1e-3)}
    >>> plan = solve(PlacementProblem.from_graph(g, cost))
    >>> plan.assignment["mm"], round(plan.objective_us, 3)
    ('gpu', 19.096)
    """
    t0 = time.perf_counter()
    p = problem
    unknown = set(opts) - _ILP_OPTIONS
    if unknown:
        raise TypeError(f"solve() got unknown options {sorted(unknown)}; known: {sorted(_ILP_OPTIONS)}")
    status, bound, info = "feasible", -np.inf, {}

    if method == "auto":
        if p.n_targets == 1:
            target_of, status, method_used = np.zeros(p.n_nodes, dtype=np.int64), "optimal", "trivial"
            baselines.check_memory(p, target_of, "single-target")
        elif p.n_targets == 2:
            target_of, info = solve_mincut(p)
            method_used = "mincut"
            if fits_memory(p, target_of):
                status = "optimal"
            else:  # the uncapped optimum breaks a cap: the ILP decides
                target_of, bound, proven, info = solve_ilp(p, time_limit_s, relative_gap, t_start=t0, **opts)
                status, method_used = ("optimal" if proven else "feasible"), "ilp"
        else:
            target_of, bound, proven, info = solve_ilp(p, time_limit_s, relative_gap, t_start=t0, **opts)
            status, method_used = ("optimal" if proven else "feasible"), "ilp"
        method_label = f"auto/{method_used}"
    elif method == "ilp":
        target_of, bound, proven, info = solve_ilp(p, time_limit_s, relative_gap, t_start=t0, **opts)
        status, method_label = ("optimal" if proven else "feasible"), "ilp"
    elif method == "mincut":
        target_of, info = solve_mincut(p)
        if not fits_memory(p, target_of):
            raise PlacementError(
                "the min-cut optimum ignores memory caps and breaks one here: use method='auto' or 'ilp'"
            )
        status, method_label = "optimal", "mincut"
    elif method == "greedy":
        target_of, method_label = baselines.greedy(p), "greedy"
        baselines.check_memory(p, target_of, "greedy")
    elif method == "manual":
        target_of, method_label = baselines.manual(p, assignment), "manual"
        baselines.check_memory(p, target_of, "manual")
    elif method == "brute_force":
        target_of, status, method_label = baselines.brute_force(p), "optimal", "brute_force"
    elif isinstance(method, str) and method.startswith("memory-greedy:"):
        target_of, method_label = baselines.memory_greedy(p, method.split(":", 1)[1]), method
    elif isinstance(method, str) and method.startswith("all:"):
        target_of, method_label = baselines.all_on(p, method[4:]), method
        baselines.check_memory(p, target_of, method)
    else:
        raise PlacementError(f"unknown method {method!r}: choose one of {list(METHODS)}")

    if status == "optimal" and method_label != "ilp" and not method_label.endswith("/ilp"):
        bound = np.inf  # exact methods: the bound is the objective (clipped there)
    plan = PlacementPlan.from_target_numbers(
        p,
        target_of,
        method=method_label,
        status=status,
        bound_us=bound,
        solve_time_s=time.perf_counter() - t0,
        info=info,
    )
    validate_plan(p, plan)
    return plan


def one_target_alternatives(problem: PlacementProblem, plan: PlacementPlan, min_gain: float) -> list[PlacementPlan]:
    """The ``all:<target>`` plans (fastest first) that ``plan`` beats by less than ``min_gain`` (a fraction of its
    objective), when ``plan`` runs nodes on several targets; [] when it runs them on one, or when no one-target
    plan fits the caps as the solver counts them (a pin elsewhere, a node one target cannot run).

    A split pays costs no profile prices yet (one device waiting for the other, a CPU thread pool woken again);
    :func:`autoplace.optimize` takes the first of these whose build fits (``min_split_gain``)."""
    from ..errors import PlacementError

    pinned = {n for n, pin in zip(problem.nodes, problem.pinned) if pin >= 0}
    used = {t for n, t in plan.assignment.items() if n not in pinned}
    if len(used) <= 1 or min_gain <= 0:
        return []
    out = []
    for target in problem.targets:
        try:
            single = solve(problem, method=f"all:{target}")
        except PlacementError:  # InfeasiblePlacementError too
            continue
        if dict(single.assignment) != dict(plan.assignment) and single.objective_us <= plan.objective_us * (1.0 + min_gain):
            out.append(single)
    return sorted(out, key=lambda p: p.objective_us)
