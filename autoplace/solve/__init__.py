"""``autoplace.solve``: placement problem -> solver -> plan -> validator.

A :class:`PlacementProblem` is plain data (latency of each node on each target, tensors and
who consumes them, copy costs, pins, memory caps), read off an op graph with
:meth:`PlacementProblem.from_graph`. :func:`solve` turns it into a :class:`PlacementPlan` with
one of several methods: an exact min-cut for two targets (:mod:`.mincut`), an integer program
for any number of targets and memory caps (:mod:`.ilp`, whose docstring writes out the
formulation; its heuristic phase uses the moves of :mod:`.local_search`), and baselines
(:mod:`.baselines`, including ``"brute_force"``, which tries every placement of a tiny problem).
Every plan from every method is checked by :func:`validate_plan`, which recomputes its cost from
scratch.

Units: microseconds (``*_us``) and bytes (``*_bytes``, ``nbytes``) throughout.
"""

from ..errors import InfeasiblePlacementError, PlacementError
from .baselines import check_memory
from .cost import PlacementCost, evaluate, fits_memory, over_memory_caps
from .ilp import build_model, solve_ilp
from .local_search import improve_by_moves, improve_by_swaps
from .mincut import solve_mincut
from .plan import Copy, PlacementPlan
from .problem import CopyCost, PlacementProblem
from .solver import METHODS, one_target_alternatives, solve
from .validate import recompute_cost_us, validate_plan

__all__ = [
    "METHODS",
    "Copy",
    "CopyCost",
    "InfeasiblePlacementError",
    "PlacementCost",
    "PlacementError",
    "PlacementPlan",
    "PlacementProblem",
    "build_model",
    "check_memory",
    "evaluate",
    "fits_memory",
    "improve_by_moves",
    "improve_by_swaps",
    "one_target_alternatives",
    "over_memory_caps",
    "recompute_cost_us",
    "solve",
    "solve_ilp",
    "solve_mincut",
    "validate_plan",
]
