"""``autoplace.optimize``: model -> op graph -> kernels and their costs -> placement problem -> solver ->
annotated module.

The solver places **units**: the kernels the build launches (fusion groups, see
:mod:`autoplace.profile.units`). A unit's ops always run together on one device, so the kernels of
every placement are the ones that were profiled, and costs add up to what the build runs. Model
inputs arrive on the host (the first target) and outputs return there unless pinned elsewhere.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from .errors import AutoplaceError, InfeasiblePlacementError
from .frontend import load_model
from .graph import UnitGraph, op_graph, unit_graph
from .place import Placement
from .targets import TargetSet

#: Format of a saved result (``<model>.result.json``); :meth:`OptimizeResult.load` refuses others.
RESULT_FORMAT = 1


@dataclass
class OptimizeResult:
    """What :func:`optimize` returns: the placed module, the plan and its predicted cost.

    Attributes
    ----------
    placement : Placement or None
        ``.mod`` (annotated IRModule), ``.params``, ``.run(*inputs)``; None for a result read back
        with :meth:`load` (its module is in the ``.placed.py`` file :meth:`save` wrote beside it).
    plan : autoplace.solve.PlacementPlan
        Over units; ``plan.objective_us`` is the kernels and copies of the plan.
    problem : autoplace.solve.PlacementProblem or None
    view : autoplace.graph.UnitGraph
        The kernel-level graph the solver placed.
    assignment : dict
        ``{op node: target}`` (what the plan means for every op of the model).
    targets : TargetSet
    predicted_us : float
        Predicted end-to-end latency: the plan's kernels and copies plus the VM's cost of invoking
        ``main`` on the host (measured by the profiler; the same for every placement).
    model_name : str
    """

    placement: Placement | None
    plan: object
    problem: object
    view: UnitGraph
    assignment: dict
    targets: TargetSet
    predicted_us: float
    model_name: str
    costs: object = field(repr=False, default=None)
    timings_s: dict = field(default_factory=dict)
    _nominal: float = field(repr=False, default=math.nan)  # band coverage of a result read from a file
    #: ``{"split_us", "single", "single_us", "min_split_gain"}`` when the solver's plan over several targets was
    #: predicted less than ``min_split_gain`` faster than the one-target plan returned instead; else None.
    split_declined: dict | None = None

    def _placed(self) -> Placement:
        if self.placement is None:
            raise AutoplaceError(
                f"this result of {self.model_name!r} was read from a file and holds no module: its annotated "
                "TVMScript is the .placed.py file beside it; run autoplace.optimize again to build and run it"
            )
        return self.placement

    @property
    def mod(self):
        return self._placed().mod

    @property
    def params(self):
        return self._placed().params

    def run(self, *inputs):
        """Build once and run on numpy inputs given on the host (see :meth:`Placement.run`)."""
        return self._placed().run(*inputs)

    def summary(self):
        """Per target: kernels (how many priced by measurement, how many predicted by the cost model),
        ops, predicted compute time and memory, and ``cache``: ``"in-context"`` where the kernels were priced by
        their times inside this model (:mod:`autoplace.profile.in_context`), ``"weights-cold"`` where as a model
        whose weights outgrow the caches runs them (weights from memory), ``"in-model"`` where as a model larger
        than the L2 runs them, ``"warm"`` otherwise (:mod:`autoplace.profile.cache_state`), and with
        ``"in-model"`` ``in_model_share``, the share of the kernels' in-model excess over their warm times priced in
        (:func:`~autoplace.profile.cache_state.in_model_share`); plus copies (a DataFrame)."""
        import pandas as pd

        from .cost_model.table import plan_band

        rows = []
        per = self.plan.per_target()
        in_model = self.view.graph.graph.get("in_model", {})
        in_model_share = self.view.graph.graph.get("in_model_share", {})
        in_context = self.view.graph.graph.get("in_context", {})
        weights_cold = self.view.graph.graph.get("weights_cold", {})
        for t in self.targets:
            info = per.get(t, {"nodes": [], "compute_us": 0.0, "memory_bytes": 0.0})
            units = [n for n in info["nodes"] if self.view.graph.nodes[n].get("kind") == "unit"]
            sources = [self.view.graph.nodes[u].get("cost_source", {}).get(t, "") for u in units]
            own = plan_band(self._band_rows({u: t for u in units}), nominal=self.band_nominal)
            rows.append(dict(target=t, kernels=len(units), measured=sum(src == "measured" for src in sources),
                             predicted=sum(src.startswith("predicted") for src in sources),
                             ops=sum(len(self.view.members[u]) for u in units),
                             compute_us=info["compute_us"], compute_lo_us=own["band_lo_us"],
                             compute_hi_us=own["band_hi_us"], memory_MB=info["memory_bytes"] / 1e6,
                             cache=("in-context" if in_context.get(self.targets[t].kind)
                                    else "weights-cold" if weights_cold.get(self.targets[t].kind)
                                    else "in-model" if in_model.get(self.targets[t].kind) else "warm"),
                             in_model_share=in_model_share.get(self.targets[t].kind, math.nan)))
        copies = self.plan.copies
        rows.append(dict(target="copies", kernels=len(copies), measured=None, predicted=None, ops=None,
                         compute_us=sum(c.latency_us for c in copies), compute_lo_us=None, compute_hi_us=None,
                         memory_MB=sum(c.nbytes for c in copies) / 1e6, cache=None, in_model_share=None))
        return pd.DataFrame(rows).set_index("target")

    # ------------------------------------------------------------------ how sure

    def band(self, unit_assignment: Mapping | None = None) -> dict:
        """The predicted end-to-end latency of the plan (or of another ``{unit: target}`` assignment of
        the same problem) with its error band: kernels measured are exact, predicted ones carry the
        cost model's calibrated band, copies and VM overheads are measured fits (exact here). See
        :func:`autoplace.cost_model.table.plan_band` for how kernels' bands combine."""
        from .cost_model.table import plan_band
        from .solve import evaluate

        assignment = dict(unit_assignment or self.plan.assignment)
        rows = self._band_rows(assignment)
        kernels_us = sum(r["latency_us"] for r in rows)
        if unit_assignment is None:
            fixed_us = self.predicted_us - kernels_us  # copies + the VM's invocation, as predicted
        else:
            cost = evaluate(self.problem, self.problem.assignment_index(assignment))
            fixed_us = float(cost.copy_us) + (self.predicted_us - float(self.plan.objective_us))
        return plan_band(rows, fixed_us=fixed_us, nominal=self.band_nominal)

    def _band_rows(self, assignment: Mapping) -> list[dict]:
        """One row per kernel of ``{unit: target}``: latency, band, source, op class and key there."""
        rows = []
        for unit, target in assignment.items():
            data = self.view.graph.nodes[unit] if unit in self.view.graph else {}
            if data.get("kind") != "unit" or target not in data.get("latency_us", {}):
                continue
            latency = float(data["latency_us"][target])
            low, high = data.get("band_us", {}).get(target, (latency, latency))
            op_class, key = data.get("kernel", {}).get(target, ("", unit))
            rows.append(dict(latency_us=latency, band_lo_us=float(low), band_hi_us=float(high),
                             source=data.get("cost_source", {}).get(target, ""), op_class=op_class,
                             target=target, key=key))
        return rows

    @property
    def band_nominal(self) -> float:
        """Nominal coverage of the kernels' error bands (0.8), NaN when the cost model has none."""
        return float(getattr(self.costs, "band_nominal", math.nan)) if self.costs is not None else self._nominal

    def band_text(self) -> str:
        """``"predicted 374 ms (+-9% 80% band, 12 of 40 kernels predicted)"`` for this plan."""
        from .cost_model.table import describe_band

        return describe_band(self.band())

    def choice_notes(self) -> list[str]:
        """Where the plan's choice rests on predictions whose bands overlap: one sentence per alternative
        (everything on one target, greedy) that is predicted slower but whose band overlaps the plan's."""
        from .cost_model.table import bands_overlap
        from .errors import PlacementError
        from .solve import solve

        notes = []
        if self.split_declined:
            d = self.split_declined
            notes.append(f"the solver's plan over several targets ({d['split_us']:.0f} us) was predicted less than "
                         f"{100 * d['min_split_gain']:.0f}% faster than {d['single']} ({d['single_us']:.0f} us), "
                         "so this is the one-target plan: pass min_split_gain=0 to keep the split")
        if self.problem is None:
            return notes
        mine = self.band()
        for method in [f"all:{t}" for t in self.targets] + ["greedy"]:
            try:
                other = solve(self.problem, method=method).assignment
            except PlacementError:
                continue  # does not fit the caps: not an alternative
            if other == dict(self.plan.assignment):
                continue
            theirs = self.band(other)
            if bands_overlap(mine, theirs):
                notes.append(
                    f"the choice over {method} rests on predictions whose {100 * mine['nominal']:.0f}% bands "
                    f"overlap ({mine['band_lo_us']:.0f}-{mine['band_hi_us']:.0f} us vs "
                    f"{theirs['band_lo_us']:.0f}-{theirs['band_hi_us']:.0f} us): measure it with "
                    "autoplace.compare, or profile the predicted kernels (measure='auto' on a machine that has "
                    "the devices)")
        return notes

    def __repr__(self) -> str:
        plan = self.plan
        per = ", ".join(f"{t}: {len([n for n in v['nodes'] if self.view.graph.nodes[n].get('kind') == 'unit'])} kernels"
                        for t, v in plan.per_target().items())
        return (f"OptimizeResult({self.model_name}: {self.band_text()} "
                f"[{plan.status}, gap {plan.gap:.2%}]; {per}; {len(plan.copies)} copies)")

    def _repr_html_(self) -> str:
        from .show import result_html

        return result_html(self)

    # ------------------------------------------------------------------ files

    def save(self, out_dir: str, *, picture: bool = True) -> dict:
        """Write the annotated TVMScript, the result (plan, graph, assignment) and its picture.

        Returns ``{"module": path, "result": path, "picture": path}`` (no picture without matplotlib
        or with ``picture=False``). :meth:`load` reads the result file back.
        """
        from networkx.readwrite import json_graph

        os.makedirs(out_dir, exist_ok=True)
        name = self.model_name
        paths = {"module": os.path.join(out_dir, f"{name}.placed.py"),
                 "result": os.path.join(out_dir, f"{name}.result.json")}
        with open(paths["module"], "w", encoding="utf-8") as f:
            f.write("# Placed by autoplace: every tensor carries its vdevice; R.to_vdevice marks each copy.\n")
            f.write(self.mod.script(show_meta=False))
        payload = dict(format=RESULT_FORMAT, model=name, predicted_us=self.predicted_us,
                       band_nominal=self.band_nominal,
                       targets={t: self.targets[t].kind for t in self.targets}, plan=self.plan.to_dict(),
                       assignment=self.assignment, members=self.view.members,
                       graph=json_graph.node_link_data(self.view.graph, edges="links"))
        _write_json_atomically(paths["result"], payload)
        if picture:
            from .show import render_plan

            try:
                render_plan(self, os.path.join(out_dir, f"{name}.png"))
            except ImportError:  # matplotlib is an optional extra: no picture
                return paths
            paths["picture"] = os.path.join(out_dir, f"{name}.png")
        return paths

    @classmethod
    def load(cls, path: str) -> OptimizeResult:
        """Read a ``<model>.result.json`` written by :meth:`save` (plan, graph, targets; no module).

        Raises
        ------
        AutoplaceError
            If the file is missing, is not JSON, or is not a result file (naming what it looks like).
        """
        from networkx.readwrite import json_graph

        from .solve import PlacementPlan

        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            raise AutoplaceError(f"no such result file: {path}; `autoplace optimize ... --out DIR` writes "
                                 "DIR/<model>.result.json") from None
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise AutoplaceError(f"{path} is not a result file (not JSON: {err}); give the <model>.result.json "
                                 "that `autoplace optimize --out DIR` wrote") from None
        needed = {"model", "plan", "members", "graph", "targets"}
        if not isinstance(data, dict) or not needed <= set(data):
            missing = sorted(needed - set(data)) if isinstance(data, dict) else sorted(needed)
            raise AutoplaceError(f"{path} is not a result file of autoplace optimize (missing {missing}); give "
                                 "the <model>.result.json that `autoplace optimize --out DIR` wrote")
        if data.get("format", RESULT_FORMAT) != RESULT_FORMAT:
            raise AutoplaceError(f"{path} has result format {data['format']}, this autoplace reads "
                                 f"{RESULT_FORMAT}: run autoplace optimize again")
        graph = json_graph.node_link_graph(data["graph"], edges="links")
        members = {k: list(v) for k, v in data["members"].items()}
        owner = {op: unit for unit, ops in members.items() for op in ops}
        targets = data["targets"]
        targets = TargetSet(targets if isinstance(targets, dict) else {t: "llvm" for t in targets})
        plan = PlacementPlan.from_dict(data["plan"])
        return cls(placement=None, plan=plan, problem=None, view=UnitGraph(graph, members, owner),
                   assignment=dict(data.get("assignment", {})), targets=targets,
                   predicted_us=float(data.get("predicted_us", plan.objective_us)), model_name=data["model"],
                   _nominal=float(data.get("band_nominal") or math.nan))


def _write_json_atomically(path: str, payload) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(payload, f, indent=1, default=str)
    os.replace(tmp, path)


def load_costs(targets: TargetSet, profile_dir: str | None = None):
    """The :class:`~autoplace.cost_model.CostTable` that prices ``targets``: the profiles that cover
    their kinds (:func:`autoplace.profile.find_profiles`) and the cost model saved beside them."""
    from .cost_model import CostTable
    from .profile import find_profiles

    return CostTable.from_profiles(find_profiles({targets[t].kind for t in targets}, profile_dir))


def optimize(mod, params=None, targets=None, *, pins: Mapping | None = None, memory_bytes: Mapping | None = None,
             costs=None, profile_dir=None, method: str = "auto", time_limit_s: float = 10.0,
             example_inputs=None, shapes=None, measure: str = "auto", progress: bool = True,
             min_split_gain: float | None = None) -> OptimizeResult:
    """Place a model to minimise predicted end-to-end latency, copies included.

    Parameters
    ----------
    mod, params : the model and its weights (see :func:`autoplace.load_model`)
    targets : dict or TargetSet, optional
        ``{name: target}``; the first is the host (inputs arrive, outputs return there).
        Default :data:`autoplace.targets.DEFAULT_TARGETS`.
    pins : dict, optional
        ``{key: target}`` with keys as in :func:`autoplace.place` (node, op name, instance).
        A pin on one op pins its whole kernel (unit).
    memory_bytes : dict, optional
        ``{target: capacity in bytes}``: the weights, inputs and outputs held there, and the activations
        live there at once (TVM's memory planner reuses a dead tensor's storage). The solver counts
        these from the program's order; the plan's build is then checked against the caps by what TVM
        allocates for it (:meth:`autoplace.place.Placement.memory_bytes`), and solved again with every
        cap lowered by the most the build needed beyond the count (:data:`MEMORY_CHECK_ROUNDS` times at most).
    costs : CostTable-like, optional
        Default: the profiles covering the targets' kinds plus the cost model saved beside them
        (:func:`load_costs`).
    profile_dir : str, optional
        Price from exactly this profile folder. A folder another machine measured (its ``metadata.json`` names
        another hardware id) plans for that machine: ``measure="auto"`` then measures nothing here (this
        machine's timings would price that machine's kernels), and ``"always"`` is refused.
    method : str
        Solver method (``"auto"``: min-cut for 2 targets, ILP otherwise; or a baseline).
    time_limit_s : float
        Solver time limit.
    example_inputs : tuple, optional
        For a ``torch.nn.Module`` (see :func:`autoplace.load_model`).
    shapes : dict, optional
        ``{symbolic dimension: size}`` binding a model's symbolic dimensions, e.g. ``{"seq_len": 128}``
        (see :func:`autoplace.load_model`).
    measure : {"auto", "never", "always"}
        ``"auto"`` (default): kernels of this model that the profiles lack are measured first on every
        target whose device is on this machine (the profiler's harness, records and progress bar;
        resumable), and kept in this machine's measurement folder
        (:func:`autoplace.profile.measured_here_dir`), so the next call measures nothing; missing copy
        costs between such targets are measured too. Targets absent here are priced by the cost model.
        ``"never"``: profiles and cost model only. ``"always"``: measure every kernel of the model again.
        Ignored when ``costs`` is given.
    min_split_gain : float, optional
        A plan that runs kernels on several targets is kept only if it is predicted at least this fraction
        faster than the fastest plan with every kernel on one target that fits the caps (default
        :data:`MIN_SPLIT_GAIN`, 3%); otherwise that one-target plan is returned (``split_declined`` says so).
        A split pays what no profile prices yet (a device waiting for the other, a thread pool woken again):
        on an H200 box, mixed plans predicted 0.7-1.5% faster than all-GPU ran 0.7-2.4% slower (sessions 38, 41).
        0 keeps the solver's optimum whatever its margin.
    progress : bool
        Show the progress bar of measurements.

    Returns
    -------
    OptimizeResult

    Notes
    -----
    Measuring needs a worker process: in a script, call ``optimize`` under
    ``if __name__ == "__main__":`` (a notebook needs nothing). Where workers cannot start, ``"auto"``
    warns and prices the missing kernels with the cost model instead.
    """
    from .profile.units import units_by_kind
    from .solve import PlacementProblem, solve

    started = time.perf_counter()
    targets = TargetSet(targets)
    model = load_model(mod, params, example_inputs=example_inputs, shapes=shapes)
    graph = op_graph(model)
    if measure not in MEASURE_MODES:
        raise AutoplaceError(f"measure={measure!r}: choose one of {list(MEASURE_MODES)}")
    if min_split_gain is not None and not 0.0 <= float(min_split_gain) < 1.0:
        raise AutoplaceError(f"min_split_gain={min_split_gain!r}: give a fraction in [0, 1) (0.03 keeps a split "
                             "predicted at least 3% faster than one target; 0 keeps any split)")
    kernels = units_by_kind(model, graph, targets)
    if costs is None:
        costs = load_costs(targets, profile_dir)
        theirs = _measured_elsewhere(profile_dir)
        if theirs is not None and measure == "always":
            from .profile.hardware import measured_by

            raise AutoplaceError(
                f"measure='always' with profile_dir={profile_dir!r}: that folder is the profile of {theirs}, and this "
                f"machine is {measured_by()['hardware_id']}, so nothing timed here describes it. Use measure='never' "
                f"to plan for {theirs} from its profile, or profile_dir=None to plan for this machine")
        if theirs is not None:  # a plan for that machine: nothing measured here may price it
            measure = "never"
        if measure != "never":
            costs = measure_missing(model, graph, kernels, targets, costs, redo=measure == "always",
                                    progress=progress)
    units = unit_graph(graph, kernels, costs, targets)
    timings = {"costs_s": time.perf_counter() - started}

    unit_pins = units.unit_pins(graph, pins, targets)
    problem = PlacementProblem.from_graph(units.graph, costs.copy_costs(targets), targets=list(targets),
                                          memory_bytes=memory_bytes, pins=unit_pins)
    plan = solve(problem, method=method, time_limit_s=time_limit_s)
    timings["solve_s"] = plan.solve_time_s

    assignment = units.op_assignment(plan.assignment, graph)
    placement = Placement.from_assignment(model, graph, assignment, targets)
    if problem.has_memory_caps and method in SOLVER_METHODS:
        def solve_under(caps):
            capped = PlacementProblem.from_graph(units.graph, costs.copy_costs(targets), targets=list(targets),
                                                 memory_bytes=caps, pins=unit_pins)
            again = solve(capped, method=method, time_limit_s=time_limit_s)
            timings["solve_s"] += again.solve_time_s
            placed = Placement.from_assignment(model, graph, units.op_assignment(again.assignment, graph), targets)
            return again, placed

        plan, placement = _fit_the_build(problem, plan, placement, solve_under)
        assignment = units.op_assignment(plan.assignment, graph)
    split_declined = None
    gain = MIN_SPLIT_GAIN if min_split_gain is None else float(min_split_gain)
    if method in SOLVER_METHODS and gain > 0:
        single = _best_single_target_plan(problem, plan, units, graph, model, targets, gain)
        if single is not None:
            split_declined = dict(split_us=float(plan.objective_us), single=single[0].method,
                                  single_us=float(single[0].objective_us), min_split_gain=gain)
            plan, placement = single
            assignment = units.op_assignment(plan.assignment, graph)
    predicted_us = float(plan.objective_us) + invoke_us(costs, targets, placement,
                                                        in_context=units.graph.graph["in_context"].get(targets.host.kind, False))
    timings["total_s"] = time.perf_counter() - started
    return OptimizeResult(placement, plan, problem, units, assignment, targets, predicted_us, model.name, costs,
                          timings, split_declined=split_declined)


def _best_single_target_plan(problem, plan, units, graph, model, targets, min_gain: float):
    """``(plan, placement)`` of the fastest ``all:<target>`` plan that ``plan`` beats by less than ``min_gain`` and
    whose build fits the caps (:func:`autoplace.solve.one_target_alternatives`), or None: when ``plan`` itself runs
    its kernels on one target, or no such plan fits."""
    from .solve import one_target_alternatives

    kernel_targets = {t for u, t in plan.assignment.items() if units.graph.nodes[u].get("kind") == "unit"}
    if len(kernel_targets) <= 1:
        return None
    caps = {t: float(c) for t, c in zip(problem.targets, problem.memory_bytes) if math.isfinite(c)}
    for single in one_target_alternatives(problem, plan, min_gain):
        placement = Placement.from_assignment(model, graph, units.op_assignment(single.assignment, graph), targets)
        if not caps or all(placement.memory_bytes()[t] <= cap for t, cap in caps.items()):
            return single, placement
    return None


def _bytes_text(caps: dict) -> str:
    return str({t: int(c) for t, c in caps.items()})


def _fit_the_build(problem, plan, placement, solve_under):
    """``(plan, placement)`` whose build fits the memory caps of ``problem``, solving again with
    ``solve_under(caps)`` (which returns the two) while the build of the plan needs more than a cap somewhere.

    The solver counts the tensors live at once; TVM's memory planner leaves gaps in its storage and the runtime's
    pool keeps copies' buffers by size, so a build can need more (:meth:`autoplace.place.Placement.memory_bytes`).
    Each try leaves the largest shortfall seen (build minus count, on any capped device) free on every capped
    device, since moving kernels off one device moves the shortfall with them.
    """
    caps = {t: float(c) for t, c in zip(problem.targets, problem.memory_bytes) if math.isfinite(c)}
    margin = 0.0
    for tries in range(MEMORY_CHECK_ROUNDS + 1):
        built = placement.memory_bytes()
        over = {t: built[t] for t, cap in caps.items() if built[t] > cap}
        if not over:
            return plan, placement  # (it fits the lowered caps, hence the user's)
        if tries == MEMORY_CHECK_ROUNDS:
            break
        count = problem.memory_use(problem.assignment_index(plan.assignment))
        margin = max([margin] + [built[t] - count[problem.targets.index(t)] for t in caps])
        counted = {t: max(0.0, cap - margin) for t, cap in caps.items()}
        try:
            plan, placement = solve_under(counted)
        except InfeasiblePlacementError as err:
            raise InfeasiblePlacementError(
                f"the memory caps {_bytes_text(caps)} do not hold the build of any plan: the best plan under them "
                f"needs {', '.join(f'{b} bytes on {t}' for t, b in over.items())} once built (TVM's memory planner, "
                f"copies and outputs), and with that much less ({_bytes_text(counted)}) the solver finds none "
                f"({err}): raise memory_bytes for {', '.join(repr(t) for t in over)}") from None
    raise InfeasiblePlacementError(
        f"the plan's build needs {', '.join(f'{b} bytes on {t}' for t, b in over.items())}, above the memory caps "
        f"{_bytes_text(caps)} after {MEMORY_CHECK_ROUNDS} tries (TVM's memory planner leaves gaps the solver's count "
        f"of live tensors does not see): raise memory_bytes for {', '.join(repr(t) for t in over)}")


#: Solver methods whose plans :func:`optimize` checks against the memory caps by what their build allocates (the
#: baselines are what they are: a cap they break is an error of the method).
SOLVER_METHODS = ("auto", "ilp", "mincut")
#: How much faster than the fastest one-target plan :func:`optimize` needs a plan over several targets predicted
#: (fraction) to keep it: the spread of one placement built and timed three times on the H200 box was up to 2.4% in
#: session 41 (7% in session 38), and mixed plans predicted 0.7-1.5% faster than all-GPU ran 0.7-2.4% slower.
MIN_SPLIT_GAIN = 0.03
#: Times :func:`optimize` solves again with lower caps when a plan's build needs more than the solver counted.
MEMORY_CHECK_ROUNDS = 3


#: Rounds ``measure="auto"`` times each missing kernel in, one round over all of them after the other: a kernel
#: on two threads reads up to 2x slow while the host's neighbours hold the second vCPU, and one round lands in
#: whatever phase the host is in (resnet-base's parallel kernels: 1.20x their re-timed median, session 10).
MEASURE_ROUNDS = 3
#: Rounds ``measure="auto"`` goes up to for the kernels no two rounds confirm, or whose agreeing rounds were all
#: read while the host-speed canary ran slow (:func:`autoplace.profile.job.confirmed`): in a slow phase of the host
#: three rounds can all read a kernel slow, and the plan then runs faster than priced (session 28 on the Intel
#: Xeon f6m207: vit-base's, llama-base's and t5-encoder-base's plans 16-28% under their predictions).
MEASURE_MAX_ROUNDS = 6

#: What ``optimize(measure=...)`` accepts.
MEASURE_MODES = ("auto", "never", "always")


def _measured_elsewhere(profile_dir: str | None) -> str | None:
    """The hardware id of the machine that measured the profile folder ``profile_dir`` when that is another machine
    than this one (its metadata names another hardware id), else None."""
    from .profile import ProfileStore
    from .profile.hardware import measured_by

    if profile_dir is None:
        return None
    theirs = (ProfileStore(profile_dir).stored_metadata() or {}).get("hardware_id")
    return None if theirs is None or theirs == measured_by()["hardware_id"] else str(theirs)


def measure_missing(model, graph, kernels: dict, targets: TargetSet, costs, *, redo: bool = False,
                    progress: bool = True):
    """Measure, on the targets this machine can run, the kernels ``costs`` has no measurement of (all of
    them with ``redo``; for a model larger than the L2 here, also the CPU kernels measured without an in-model
    timing, :mod:`autoplace.profile.cache_state`) in ``MEASURE_ROUNDS`` rounds, and in up to
    ``MEASURE_MAX_ROUNDS`` those the rounds do not confirm (:func:`autoplace.profile.job.confirmed`), the
    model's kernels inside its runs where no record has them
    (:mod:`autoplace.profile.in_context`: the model built on each target kind here, in ``MEASURE_ROUNDS`` rounds
    checked against its kernels' own times, :func:`autoplace.profile.job.measure_in_context`), and the copy
    costs and VM call overheads it lacks; return ``costs`` with the new records.

    Measurements go to :func:`autoplace.profile.measured_here_dir`. If the harness cannot run here
    (e.g. a script without a main guard), warn and return ``costs`` unchanged: the cost model prices
    what is missing.
    """
    import warnings

    import pandas as pd

    from .cost_model import CostTable
    from .errors import CopyCostError, ProfilingError
    from .profile import ProfileStore, measured_here_dir
    from .profile.cache_state import model_runs_in_model, usable_l2_bytes
    from .profile.job import measure_in_context, measure_kernels

    runnable = [t for t in targets if t not in targets.unavailable()]
    here_kinds = {targets[t].kind for t in runnable}
    # What another machine measured prices nothing this machine can measure itself.
    own = measured_on_this_machine(costs)
    timed_in_model = getattr(own, "measured_in_model_", None)
    missing = {}
    for kind, units in kernels.items():
        if kind not in here_kinds:
            continue
        # A model larger than this machine's L2 is priced in-model: a kernel timed warm only is missing too.
        in_model = kind == "llvm" and timed_in_model is not None and model_runs_in_model(units, usable_l2_bytes())
        # measured here or elsewhere, or seen failing (unsupported there): nothing to measure
        # ... and one whose weights outgrow the caches with its weights from memory: a kernel with weights timed
        # without them is missing too
        cold = in_model and hasattr(own, "runs_weights_cold") and own.runs_weights_cold(units, kind)
        todo = [u for u in units if redo or ((u.key, kind) not in own.measured_
                                             and (u.key, kind) not in own.unsupported_)
                or (in_model and (u.key, kind) in own.measured_ and (u.key, kind) not in timed_in_model)
                or (cold and u.weight_bytes > 0 and (u.key, kind) in own.measured_
                    and (u.key, kind) not in own.measured_weights_cold_)]
        if todo:
            missing[kind] = todo
    # The VM's call overheads (``kind="launch"``) come with the copies: a machine never profiled has neither.
    copies = any(math.isnan(own.launch_us(targets[t].label, default=math.nan)) for t in runnable)
    for src in runnable:
        for dst in runnable:
            if src == dst:
                continue
            try:
                own.copy_cost(targets[src].label, targets[dst].label)
            except CopyCostError:
                copies = True
    # The model's kernels timed inside its runs, on each kind here (one build per kind; in_context).
    context = {kind: units for kind, units in kernels.items()
               if kind in here_kinds and units and (redo or not own.in_context_tried(units, kind))}
    if not missing and not copies and not context:
        return costs
    store = ProfileStore(measured_here_dir())
    try:
        if missing or copies:
            measure_kernels(model, graph, missing, targets, store, copies=copies, redo=("unit",) if redo else (),
                            progress=progress, log=lambda message: None, rounds=MEASURE_ROUNDS,
                            max_rounds=MEASURE_MAX_ROUNDS, canary_records=own.records)
        if context:
            measure_in_context(model, graph, context, targets, store, rounds=MEASURE_ROUNDS,
                               kernel_us=_own_kernel_us(context, own, store), progress=progress,
                               canary_records=own.records, fresh=redo)
    except ProfilingError as err:
        warnings.warn(f"measure='auto' could not measure here, so the cost model prices the kernels the "
                      f"profiles lack: {err}", stacklevel=3)
        return costs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        new = store.records(allow_foreign=True)
    return CostTable(pd.concat([costs.records, new], ignore_index=True), model=costs.model,
                     in_model_model=getattr(costs, "in_model_model", None))


def _own_kernel_us(kernels: dict, own, store) -> dict:
    """``{kind: [us per unit]}``: each kernel's larger of its warm and in-model times measured on this machine
    (in ``store``, just measured, or in ``own``), NaN where it has none; what bounds its in-context times
    (:func:`autoplace.profile.in_context.in_context_ceiling_us`). In a model priced weights-cold
    (:meth:`~autoplace.cost_model.CostTable.runs_weights_cold`) a kernel with weights counts its weights-cold time
    too: there its weights come from memory (vit-base on the AMD Zen 3 read 1.33x its kernels' in-model times in
    context and was refused as a slow phase, session 43; in session 44's records its in-context sum is 1.47x its
    in-model sum, 1.14x its weights-cold one)."""
    import warnings

    from .cost_model import CostTable

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        new = CostTable(store.records(allow_foreign=True))
    out = {}
    for kind, units in kernels.items():
        cold = any(getattr(t, "runs_weights_cold", lambda *a: False)(units, kind) for t in (new, own))
        values = []
        for unit in units:
            tag = (unit.key, kind)
            table = new if tag in new.measured_ else own
            warm = table.measured_.get(tag, math.nan)
            times = [warm, getattr(table, "measured_in_model_", {}).get(tag, warm)]
            if cold:
                times.append(getattr(table, "measured_weights_cold_", {}).get(tag, warm))
            values.append(max(times))
        out[kind] = values
    return out


def measured_on_this_machine(costs):
    """``costs`` restricted to the records measured on this machine (its hardware id; records that name no
    machine count as this one's) with the CPU thread count TVM runs here (records that name none count as
    measured with it): what ``measure="auto"`` need not measure again. A CPU kernel timed on 2 threads says
    little about its time on 1."""
    import pandas as pd

    from .backend.cpu_threads import runtime_threads
    from .cost_model import CostTable
    from .profile.hardware import measured_by

    records = costs.records
    here = pd.Series(True, index=records.index)
    if "hardware_id" in records:
        here &= records["hardware_id"].isna() | (records["hardware_id"] == measured_by()["hardware_id"])
    if "threads" in records:
        here &= records["threads"].isna() | (records["threads"] == runtime_threads())
    return costs if bool(here.all()) else CostTable(records[here])


def invoke_us(costs, targets: TargetSet, placement: Placement, *, in_context: bool = False) -> float:
    """The VM's fixed cost of one call of ``main`` on the host, besides kernels and copies (0 when the
    cost table has no measurement of it). It does not depend on the placement; ``in_context``: besides
    host kernels priced by their in-context times (:meth:`CostTable.invoke_us`)."""
    invoke = getattr(costs, "invoke_us", None)
    if invoke is None:
        return 0.0
    call = dict(num_args=len(placement.mod["main"].params), num_inputs=placement.model.num_input,
                output_bytes=placement.graph.nodes["output"].get("output_bytes", 0))
    if in_context:
        call["in_context"] = True
    return float(invoke(targets.host.label, 0.0, **call))
