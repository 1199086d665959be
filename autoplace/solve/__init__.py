"""``autoplace.solve``: placement problem -> solver -> plan -> validator.

A :class:`PlacementProblem` is plain data (latency of each node on each target, tensors and
who consumes them, copy costs, pins, memory caps), read off an op graph with
:meth:`PlacementProblem.from_graph`. :func:`solve` turns it into a :class:`PlacementPlan` with
one of several methods: an exact min-cut for two targets (:mod:`.mincut`), an integer program
for any number of targets and memory caps (:mod:`.ilp`, whose docstring writes out the
formulation), and baselines (:mod:`.baselines`). Every plan from every method is checked by
:func:`validate_plan`, which recomputes its cost from scratch.

Units: microseconds (``*_us``) and bytes (``*_bytes``, ``nbytes``) throughout.
"""

from .baselines import check_memory
from .cost import PlacementCost, evaluate
from .errors import InfeasiblePlacementError, PlacementError
from .ilp import build_model, improve_by_moves, solve_ilp
from .mincut import solve_mincut
from .plan import Copy, PlacementPlan
from .problem import CopyCost, PlacementProblem
from .solver import METHODS, solve
from .validate import recompute_cost_us, validate_plan


def brute_force(problem: PlacementProblem) -> PlacementPlan:
    """The optimal plan by trying every placement (tiny problems only): ``solve(problem, "brute_force")``."""
    return solve(problem, method="brute_force")


__all__ = [
    "METHODS",
    "Copy",
    "CopyCost",
    "InfeasiblePlacementError",
    "PlacementCost",
    "PlacementError",
    "PlacementPlan",
    "PlacementProblem",
    "brute_force",
    "build_model",
    "check_memory",
    "evaluate",
    "improve_by_moves",
    "recompute_cost_us",
    "solve",
    "solve_ilp",
    "solve_mincut",
    "validate_plan",
]
