r"""Optimal placement on any number of targets, with memory caps, as an integer program.

Formulation
-----------
Sets: nodes :math:`i`, targets :math:`d, s`, tensors :math:`t` (made by node :math:`p(t)`,
consumed by nodes :math:`u \in C(t)`). Data: ``latency_us`` :math:`L_{i,d}`, copy latency
:math:`W_{t,s,d}` (``PlacementProblem.copy_latency_us``; 0 for resident tensors), bytes a node
holds for the whole run where placed :math:`S_i` (``static_bytes``: weights), bytes :math:`b_t` of a
tensor, memory cap :math:`M_d`. :math:`A_i` is the set of targets node :math:`i` may use (supported,
and the pinned one only if pinned). Activations are live over intervals of program positions
(``PlacementProblem.live_items``); :math:`P` are the positions that can be the busiest (``live_matrix``), :math:`L(r)` the
tensors live at :math:`r \in P` (and :math:`R` the tensors of resident nodes, held for the whole run).

Variables:

* :math:`x_{i,d} \in \{0,1\}`, node :math:`i` runs on target :math:`d`; fixed to 0 for
  :math:`d \notin A_i`.
* :math:`c_{t,s,d} \in [0,1]`, tensor :math:`t` is copied from :math:`s` to :math:`d \ne s`;
  created only where :math:`s \in A_{p(t)}` and some consumer may run on :math:`d`, and only
  for tensors whose copies cost something (all tensors when memory is capped). Integral at
  every optimum once the :math:`x` are, so left continuous.
* :math:`w_d \in [0, 1]`, the share of capped target :math:`d`'s memory that stays taken for the
  whole run.

Objective (microseconds; serial sum of latencies)::

    minimise  sum_{i,d} L[i,d] x[i,d]  +  sum_{t,s,d} W[t,s,d] c[t,s,d]

Constraints:

(a) one target per node: :math:`\sum_d x_{i,d} = 1` for every node :math:`i`.
(b) a tensor is copied to every target where one of its consumers runs, unless made there:
    :math:`\sum_{s \ne d} c_{t,s,d} \ge x_{u,d} - x_{p(t),d}` for every use
    :math:`(t, u)` and target :math:`d \in A_u`. One copy per (tensor, destination) serves
    every consumer there, which is why this is per consumer but the copy variable is not.
(c) a copy leaves from where the tensor was made: :math:`c_{t,s,d} \le x_{p(t),s}`.
    Together with (b) the copy is charged at the right source's price, and an LP
    relaxation cannot buy it from a cheaper, fractional source beyond :math:`x_{p,s}`.
(d) memory, for every capped target :math:`d`: what stays,
    :math:`\sum_i S_i x_{i,d} + \sum_{t \in R} b_t \sum_s c_{t,s,d} \le M_d w_d`, and at every
    :math:`r \in P`, :math:`M_d w_d + \sum_{t \in L(r)} b_t (x_{p(t),d} + \sum_s c_{t,s,d}) \le M_d`
    (a tensor is on :math:`d` where made there or copied there, never both; an output no edge
    carries counts as a tensor live at its producer only, with no copies; rows divided by :math:`M_d`).
    On a large model whose rows would hold more than :data:`MEMORY_ENTRIES` entries, neighbouring
    points share a row that counts every tensor live at any of them (a count that can only be high).

With (b) and (c) the LP relaxation is strong: on two targets it is the min-cut LP (integral);
on three random layered DAGs of 10,000 nodes its bound was within 0.1 % of the optimum.

Solving
-------
Every solve starts with a placement and a bound that cost nothing: the greedy placement (or
the caller's ``start``) and the sum of each node's fastest allowed latency. Small models then
go straight to HiGHS' branch and bound (:func:`scipy.optimize.milp`). Large models (more than
:data:`LP_FIRST_NNZ` nonzeros), where even HiGHS' root LP takes many seconds, first go
through:

1. the LP relaxation by PDLP (first-order, fast to moderate accuracy). Its dual values give
   a proven lower bound whatever their accuracy, through the Lagrangian
   :math:`\min_{l \le v \le u} (c - A^\top y)^\top v + b(y)^\top y` (row duals clipped to the
   sign their row allows);
2. a placement by rounding the LP (each node to its largest :math:`x_{i,d}`), improved, when
   memory is not capped, by optimal swap moves between pairs of targets (each one a min cut,
   :func:`autoplace.solve.local_search.improve_by_swaps`) and then single-node moves.

If the gap is still above the tolerance, branch and bound runs on the whole model with the
time left. The best placement found and the best bound proven are returned; the gap is
computed from the placement's cost recomputed in floating point.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from ..errors import InfeasiblePlacementError, PlacementError
from .baselines import greedy
from .cost import fits_memory
from .local_search import improve_by_moves, improve_by_swaps
from .plan import relative_gap as gap_of
from .problem import PlacementProblem

__all__ = ["LP_FIRST_NNZ", "IlpModel", "build_model", "solve_ilp"]

#: Models with more nonzeros than this start with the PDLP phases (see module docstring).
LP_FIRST_NNZ = 150_000
#: Most (program point, live tensor) entries of the memory rows (d) of one capped target; beyond it, neighbouring
#: points are merged into one row that counts every tensor live at any of them (:func:`_coarse_points`).
MEMORY_ENTRIES = 100_000


def _coarse_points(live: sp.csr_array, budget: int) -> sp.csr_array:
    """``live`` (points x items, 0/1) with runs of neighbouring points merged into one row holding every item live
    at any of them, the shortest runs that bring its entries within ``budget``: a cap that holds for the merged
    rows holds at every point (a count that may be high, never low). Unchanged when within ``budget``."""
    n_points = live.shape[0]
    run = 1
    merged = live
    while merged.nnz > budget and run < n_points:
        run *= 2
        group = sp.csr_array((np.ones(n_points), (np.arange(n_points) // run, np.arange(n_points))),
                             shape=((n_points + run - 1) // run, n_points))
        merged = (group @ live).astype(bool).astype(np.float64)
    return sp.csr_array(merged)


@dataclass
class IlpModel:
    """The integer program of a placement problem, as arrays (see the module docstring).

    Attributes
    ----------
    cost : numpy.ndarray
        Objective coefficient of every variable (microseconds).
    lower, upper : numpy.ndarray
        Variable bounds.
    integral : numpy.ndarray of bool
        Which variables are integer (the :math:`x`).
    matrix : scipy.sparse.csr_array
        Constraint matrix, rows ``row_lower <= matrix @ v <= row_upper``.
    row_lower, row_upper : numpy.ndarray
    blocks : list of (label, first_row, n_rows)
        Which rows implement which labelled constraint of the formulation.
    n_x : int
        The first ``n_x`` variables are :math:`x_{i,d}` at index ``i * n_targets + d``.
    copy_tensor, copy_src, copy_dst : numpy.ndarray
        Tensor, source and destination of each copy variable (at ``n_x + j``).
    """

    cost: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    integral: np.ndarray
    matrix: sp.csr_array
    row_lower: np.ndarray
    row_upper: np.ndarray
    n_x: int
    copy_tensor: np.ndarray
    copy_src: np.ndarray
    copy_dst: np.ndarray
    blocks: list = field(default_factory=list)

    @property
    def n_vars(self) -> int:
        return len(self.cost)

    @property
    def nnz(self) -> int:
        return int(self.matrix.nnz)

    def block(self, label: str) -> slice:
        """Rows of the constraint whose label starts with ``label`` (e.g. ``"(b)"``)."""
        for name, first, count in self.blocks:
            if name.startswith(label):
                return slice(first, first + count)
        raise KeyError(label)


class _Rows:
    """Collects constraint rows as (row, column, value) triples, block by block."""

    def __init__(self):
        self.rows, self.cols, self.vals = [], [], []
        self.lower, self.upper = [], []
        self.blocks = []
        self.n = 0

    def add(self, label, n_rows, row, col, val, lower, upper):
        row = np.asarray(row, dtype=np.int64)
        self.rows.append(row + self.n)
        self.cols.append(np.asarray(col, dtype=np.int64))
        self.vals.append(np.broadcast_to(np.asarray(val, dtype=np.float64), row.shape))
        self.lower.append(np.broadcast_to(np.asarray(lower, dtype=np.float64), (n_rows,)))
        self.upper.append(np.broadcast_to(np.asarray(upper, dtype=np.float64), (n_rows,)))
        self.blocks.append((label, self.n, n_rows))
        self.n += n_rows

    def matrix(self, n_cols):
        if not self.rows:
            return sp.csr_array((0, n_cols)), np.zeros(0), np.zeros(0)
        m = sp.csr_array(
            (np.concatenate(self.vals), (np.concatenate(self.rows), np.concatenate(self.cols))),
            shape=(self.n, n_cols),
        )
        m.sum_duplicates()
        return m, np.concatenate(self.lower), np.concatenate(self.upper)


def build_model(problem: PlacementProblem) -> IlpModel:
    """Build the integer program of the module docstring with numpy, no per-variable loop.

    Parameters
    ----------
    problem : PlacementProblem

    Returns
    -------
    IlpModel
    """
    p = problem
    n, k, m = p.n_nodes, p.n_targets, p.n_tensors
    allowed = p.allowed
    capped = np.isfinite(p.memory_bytes)
    ut, uc = p.use_tensor, p.use_consumer
    prod = p.tensor_producer
    W = p.copy_latency_us

    n_x = n * k
    x_cost = np.where(allowed, p.latency_us, 0.0).ravel()
    x_upper = allowed.astype(np.float64).ravel()

    # which tensors need copy variables, and which (s, d) pairs are possible for them
    modelled = (W > 0).any(axis=(1, 2)) | capped.any()
    prod_allowed = allowed[prod]  # (m, k)
    dest_possible = np.zeros((m, k), dtype=bool)
    for d in range(k):
        dest_possible[:, d] = np.bincount(ut, weights=allowed[uc, d], minlength=m) > 0
    pair = (
        modelled[:, None, None]
        & prod_allowed[:, :, None]
        & dest_possible[:, None, :]
        & ~np.eye(k, dtype=bool)[None]
    )
    copy_t, copy_s, copy_d = np.nonzero(pair)
    n_c = len(copy_t)
    cid = np.full((m, k, k), -1, dtype=np.int64)
    cid[copy_t, copy_s, copy_d] = n_x + np.arange(n_c)
    c_cost = W[copy_t, copy_s, copy_d]

    # memory variables: w_d, the share of capped target d's memory that stays taken for the whole run
    caps_d = np.nonzero(capped)[0]
    n_w = len(caps_d)
    resident_t = p.resident[prod]

    R = _Rows()
    # (a) one target per node
    R.add("(a) one target per node", n, np.repeat(np.arange(n), k), np.arange(n_x), 1.0, 1.0, 1.0)

    # (b) copy to every target where a consumer runs, unless the producer runs there
    use_rows = modelled[ut][:, None] & allowed[uc]  # (n_uses, k): one row per use and target
    # a row is void when the producer can only run on d itself
    only_here = prod_allowed.sum(axis=1) == 1
    use_rows &= ~(only_here[ut][:, None] & prod_allowed[ut])
    e, d = np.nonzero(use_rows)
    t = ut[e]
    r = np.arange(len(e))
    cols = cid[t[:, None], np.arange(k)[None, :], d[:, None]]  # (rows, k) copy vars into d
    has = cols >= 0
    rr = np.concatenate([np.broadcast_to(r[:, None], cols.shape)[has], r, r])
    cc = np.concatenate([cols[has], uc[e] * k + d, prod[t] * k + d])
    vv = np.concatenate([np.ones(int(has.sum())), -np.ones(len(r)), np.ones(len(r))])
    R.add("(b) copy to where a consumer runs", len(r), rr, cc, vv, 0.0, np.inf)

    # (c) a copy leaves from where the tensor was made (void if the producer cannot move)
    movable = ~only_here[copy_t]
    j = np.nonzero(movable)[0]
    r = np.arange(len(j))
    R.add(
        "(c) copy leaves from the producer's target",
        len(j),
        np.concatenate([r, r]),
        np.concatenate([n_x + j, prod[copy_t[j]] * k + copy_s[j]]),
        np.concatenate([np.ones(len(j)), -np.ones(len(j))]),
        -np.inf,
        0.0,
    )

    # (d) memory caps, each row divided by its cap: what stays for the run (w_d), then w_d plus the
    # activations live at each program point that can be the busiest
    items = p.live_items
    live = _coarse_points(p.live_matrix, MEMORY_ENTRIES).tocoo()
    item_t = items["tensor"][live.col]
    for j, dd in enumerate(caps_d):
        cap = float(p.memory_bytes[dd])
        scale = 1.0 / cap if cap > 0 else 1.0
        w_col = n_x + n_c + j
        into = np.nonzero((copy_d == dd) & resident_t[copy_t])[0]
        cols = np.concatenate([np.arange(n) * k + dd, n_x + into, [w_col]])
        vals = np.concatenate([p.static_bytes.astype(np.float64), p.tensor_nbytes[copy_t[into]].astype(np.float64),
                               [-cap]]) * scale
        keep = vals != 0
        R.add(f"(d) memory that stays on {p.targets[dd]}", 1, np.zeros(int(keep.sum())), cols[keep], vals[keep],
              -np.inf, 0.0)
        n_points = live.shape[0]
        if not n_points:
            continue
        # per live entry: the producer's x on dd, and every copy of the tensor into dd
        rows = [live.row, np.arange(n_points)]
        cols = [items["producer"][live.col] * k + dd, np.full(n_points, w_col)]
        vals = [(items["nbytes"] * items["placed"])[live.col].astype(np.float64), np.full(n_points, cap)]
        is_t = item_t >= 0
        copy_cols = (cid[np.where(is_t, item_t, 0)[:, None], np.arange(k)[None, :], dd] if m
                     else np.full((len(item_t), k), -1))  # (entries, k)
        has = (copy_cols >= 0) & is_t[:, None]
        rows.append(np.broadcast_to(live.row[:, None], copy_cols.shape)[has])
        cols.append(copy_cols[has])
        vals.append(np.broadcast_to(items["nbytes"][live.col][:, None], copy_cols.shape)[has].astype(np.float64))
        vals = np.concatenate(vals) * scale
        keep = vals != 0
        R.add(f"(d) memory of {p.targets[dd]} at each program point", n_points, np.concatenate(rows)[keep],
              np.concatenate(cols)[keep], vals[keep], -np.inf, cap * scale)

    n_vars = n_x + n_c + n_w
    matrix, row_lower, row_upper = R.matrix(n_vars)
    return IlpModel(
        cost=np.concatenate([x_cost, c_cost, np.zeros(n_w)]),
        lower=np.zeros(n_vars),
        upper=np.concatenate([x_upper, np.ones(n_c), np.ones(n_w)]),
        integral=np.concatenate([np.ones(n_x, bool), np.zeros(n_c + n_w, bool)]),
        matrix=matrix,
        row_lower=row_lower,
        row_upper=row_upper,
        n_x=n_x,
        copy_tensor=copy_t,
        copy_src=copy_s,
        copy_dst=copy_d,
        blocks=R.blocks,
    )


# ---------------------------------------------------------------------- bounds and decoding


def lagrangian_bound(model: IlpModel, duals: np.ndarray, lower=None, upper=None) -> float:
    """A proven lower bound on the LP (hence the integer) optimum from any row duals.

    Each dual is first clipped to the sign its row allows (>= 0 on a row with only a lower
    side, <= 0 with only an upper side), then the Lagrangian is minimised over the variable
    box ``[lower, upper]``. Exact LP duals give the LP optimum; inexact ones a smaller but
    still valid bound.
    """
    lo = model.lower if lower is None else lower
    hi = model.upper if upper is None else upper
    y = np.asarray(duals, dtype=np.float64).copy()
    has_lo = np.isfinite(model.row_lower)
    has_hi = np.isfinite(model.row_upper)
    y[(y > 0) & ~has_lo] = 0.0
    y[(y < 0) & ~has_hi] = 0.0
    rhs = np.where(y > 0, np.where(has_lo, model.row_lower, 0.0), np.where(has_hi, model.row_upper, 0.0))
    reduced = model.cost - model.matrix.T @ y
    box = np.minimum(reduced * lo, reduced * hi)
    return float(y @ rhs + box.sum())


def _decode(problem: PlacementProblem, values: np.ndarray) -> np.ndarray:
    """Target number per node: the largest :math:`x_{i,d}` among allowed targets."""
    x = np.asarray(values[: problem.n_nodes * problem.n_targets]).reshape(problem.n_nodes, problem.n_targets)
    x = np.where(problem.allowed, x, -1.0)
    return x.argmax(axis=1).astype(np.int64)


def _objective(problem: PlacementProblem, target_of: np.ndarray) -> float:
    from .cost import evaluate

    return evaluate(problem, target_of).objective_us


# ---------------------------------------------------------------------- solvers of the model


def _branch_and_bound(model: IlpModel, time_limit_s: float, relative_gap_tol: float, upper=None, lower=None):
    """HiGHS MIP through scipy. Returns (values or None, proven bound, scipy status)."""
    from scipy.optimize import Bounds, LinearConstraint, milp

    constraints = (
        [LinearConstraint(model.matrix, model.row_lower, model.row_upper)] if model.matrix.shape[0] else []
    )
    res = milp(
        model.cost,
        integrality=model.integral.astype(np.uint8),
        bounds=Bounds(model.lower if lower is None else lower, model.upper if upper is None else upper),
        constraints=constraints,
        options={"time_limit": max(time_limit_s, 1e-3), "mip_rel_gap": relative_gap_tol, "disp": False},
    )
    bound = getattr(res, "mip_dual_bound", None)
    if bound is None or not np.isfinite(bound):
        bound = res.fun if res.status == 0 and res.fun is not None else -math.inf
    return (res.x if res.x is not None else None), float(bound), int(res.status)


def _pdlp(model: IlpModel, time_limit_s: float, tolerance: float, threads: int):
    """LP relaxation by PDLP. Returns (primal values, row duals) or (None, None)."""
    from ortools.linear_solver.python import model_builder_helper as mbh

    helper = mbh.ModelBuilderHelper()
    helper.fill_model_from_sparse_data(
        model.lower, model.upper, model.cost, model.row_lower, model.row_upper, sp.csr_matrix(model.matrix)
    )
    solver = mbh.ModelSolverHelper("PDLP")
    solver.set_time_limit_in_seconds(max(time_limit_s, 0.01))
    solver.set_solver_specific_parameters(
        f"num_threads: {threads} termination_criteria {{ simple_optimality_criteria {{ "
        f"eps_optimal_relative: {tolerance} eps_optimal_absolute: {tolerance} }} }}"
    )
    solver.solve(helper)
    if not solver.has_solution():
        return None, None
    return np.asarray(solver.variable_values()), np.asarray(solver.dual_values())


# ---------------------------------------------------------------------- memory diagnosis


def check_memory_caps(problem: PlacementProblem) -> None:
    """Raise :class:`InfeasiblePlacementError` for memory caps that obviously cannot hold.

    Checks that what must sit on a target (nodes pinned there, or supported only there) fits
    its cap, that each node fits on some target it may use, and that all nodes fit in the
    memory of all targets together.
    """
    p = problem
    if not p.has_memory_caps:
        return
    items = p.live_items

    def busiest(on: np.ndarray) -> float:
        """Bytes live at the busiest program point of the items whose producers ``on`` marks."""
        held = p.live_matrix @ (items["nbytes"] * items["placed"] * on[items["producer"]]).astype(np.float64)
        return float(held.max()) if len(held) else 0.0

    S = p.static_bytes
    only = p.allowed.sum(axis=1) == 1
    for d, t in enumerate(p.targets):
        cap = p.memory_bytes[d]
        forced = only & p.allowed[:, d]
        need = int(S[forced].sum() + busiest(forced))
        if need > cap:
            which = np.nonzero(forced)[0]
            names = [p.nodes[i] for i in which[np.argsort(-p.footprint_bytes[which])][:5]]
            raise InfeasiblePlacementError(
                f"memory cap of {t} ({int(cap)} bytes) is below the weights and live outputs of the "
                f"nodes that must run there ({need} bytes; largest: {names}): raise "
                f"memory_bytes[{t!r}] to at least {need} or unpin some of them"
            )
    # a node needs its weights and its outputs at once where it runs
    own = S + np.bincount(items["producer"], weights=items["nbytes"] * items["placed"],
                          minlength=p.n_nodes).astype(np.int64)
    fits_somewhere = (p.allowed & (own[:, None] <= p.memory_bytes[None, :])).any(axis=1)
    if not fits_somewhere.all():
        i = int(np.argmin(fits_somewhere))
        where = [p.targets[d] for d in np.nonzero(p.allowed[i])[0]]
        raise InfeasiblePlacementError(
            f"node {p.nodes[i]!r} needs {int(own[i])} bytes but no target it may run on "
            f"({where}) has that much memory: raise memory_bytes for one of them"
        )
    total, capacity = float(S.sum()) + busiest(np.ones(p.n_nodes, dtype=bool)), float(p.memory_bytes.sum())
    if total > capacity:
        raise InfeasiblePlacementError(
            f"the nodes need {int(total)} bytes in all (weights, and the activations live at the busiest "
            f"point) but the targets hold {int(capacity)} bytes together: raise memory_bytes"
        )


def _infeasible_message(problem: PlacementProblem) -> str:
    caps = {t: int(c) for t, c in zip(problem.targets, problem.memory_bytes) if math.isfinite(c)}
    return (
        f"no placement fits the memory caps {caps} (memory counts the weights of every node placed on a "
        "target and the tensors made on it or copied to it while they are live): raise memory_bytes for one "
        "of these targets, or unpin nodes from them"
    )


# ---------------------------------------------------------------------- the solver


def solve_ilp(
    problem: PlacementProblem,
    time_limit_s: float = 10.0,
    relative_gap: float = 1e-4,
    start: np.ndarray | None = None,
    lp_first: bool | None = None,
    pdlp_tolerance: float = 1e-3,
    threads: int = 2,
    t_start: float | None = None,
):
    """Solve the placement integer program (see the module docstring).

    Parameters
    ----------
    problem : PlacementProblem
    time_limit_s : float
        Wall-clock budget, counted from ``t_start``, model building included.
    relative_gap : float
        Stop once ``(objective - bound) / objective`` is at most this.
    start : numpy.ndarray of int, optional
        A known placement (target number per node); kept if no better one is found.
    lp_first : bool, optional
        Run the PDLP phases first. Default: when the model has more than
        :data:`LP_FIRST_NNZ` nonzeros.
    pdlp_tolerance : float
        Relative tolerance of the PDLP solve.
    threads : int
        Threads PDLP may use.
    t_start : float, optional
        ``time.perf_counter()`` when the solve began (default: now).

    Returns
    -------
    target_of : numpy.ndarray of int
        Best placement found.
    bound_us : float
        Proven lower bound on the optimal objective.
    proven : bool
        Whether the gap is within ``relative_gap``.
    info : dict
        Model size and per-phase timings and values.

    Raises
    ------
    InfeasiblePlacementError
        If no placement satisfies the memory caps (with the knob to turn).
    PlacementError
        If no placement was found within the time limit.
    """
    t0 = time.perf_counter() if t_start is None else t_start
    deadline = t0 + time_limit_s
    p = problem
    check_memory_caps(p)

    model = build_model(p)
    info: dict = {
        "n_vars": model.n_vars,
        "n_rows": int(model.matrix.shape[0]),
        "nnz": model.nnz,
        "build_s": round(time.perf_counter() - t0, 4),
        "phases": [],
    }
    best, best_obj = None, math.inf
    bound = -math.inf

    def offer(target_of, phase):
        nonlocal best, best_obj
        if target_of is None or not fits_memory(p, target_of):
            return
        obj = _objective(p, target_of)
        if obj < best_obj - 1e-12 * max(1.0, abs(obj)):
            best, best_obj = np.asarray(target_of, dtype=np.int64), obj
            info["best_from"] = phase

    def gap_now():
        return gap_of(best_obj, bound) if best is not None else math.inf

    def done():
        return gap_now() <= relative_gap

    def note(phase, started, **extra):
        entry = {"phase": phase, "s": round(time.perf_counter() - started, 4),
                 "objective_us": best_obj if best is not None else None,
                 "bound_us": bound if math.isfinite(bound) else None}  # fmt: skip
        entry.update(extra)
        info["phases"].append(entry)

    # phase 0: a placement and a bound for free: greedy (or the caller's start), and every
    # node at its fastest allowed target with no copies
    offer(np.asarray(start) if start is not None else greedy(p), "start")
    bound = float(np.where(p.allowed, p.latency_us, np.inf).min(axis=1).sum())
    note("start", t0)

    if lp_first is None:
        lp_first = model.nnz > LP_FIRST_NNZ
    if lp_first:
        # phase 1: LP relaxation by PDLP -> proven bound from its duals
        t = time.perf_counter()
        lp_values, duals = _pdlp(model, 0.5 * (deadline - t), pdlp_tolerance, threads)
        if duals is not None:
            lagrangian = max(lagrangian_bound(model, duals), lagrangian_bound(model, -duals))
            bound = max(bound, lagrangian - 1e-9 * abs(lagrangian))  # round-off of the sum
        note("lp relaxation (pdlp)", t)
        # phase 2: round the LP, then swap moves and single-node moves (uncapped only)
        t = time.perf_counter()
        if lp_values is not None:
            offer(_decode(p, lp_values), "lp rounding")
        if not p.has_memory_caps:
            offer(improve_by_swaps(p, best, deadline - 0.3 * (deadline - t)), "swap moves")
            offer(improve_by_moves(p, best, deadline - 0.3 * (deadline - t)), "single moves")
        note("rounding + moves", t)

    # phase 3: branch and bound on the whole model with the time left, minus HiGHS' set-up
    t = time.perf_counter()
    budget = deadline - t - (0.1 + 3e-6 * model.nnz)
    if not done() and (budget > 0.2 or not lp_first):
        values, mip_bound, status = _branch_and_bound(model, max(budget, 0.05), relative_gap)
        if status == 2:  # proven infeasible
            raise InfeasiblePlacementError(_infeasible_message(p))
        if values is not None:
            offer(_decode(p, values), "branch and bound")
        bound = max(bound, mip_bound)
        note("branch and bound (highs)", t, status=status)

    if best is None:
        raise PlacementError(f"no placement found within time_limit_s={time_limit_s}: raise time_limit_s")
    bound = min(bound, best_obj)
    return best, bound, gap_now() <= relative_gap, info
