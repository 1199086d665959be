"""``autoplace.optimize``: graph view -> costs -> placement problem -> solver -> annotated module.

The solver places **units**: the kernels the build launches (fusion groups, see
:mod:`autoplace.profile.units`). A unit's ops always run together on one device, so the kernels of
every placement are the ones that were profiled, and costs add up to what the build runs. Model
inputs arrive on the host (the first target) and outputs return there unless pinned elsewhere.
"""

from __future__ import annotations

import math
import os
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field

import networkx as nx

from .errors import AutoplaceError
from .frontend import load_model
from .graph import op_graph, resolve_assignment, select_nodes
from .place import Placement, place
from .targets import TargetSet


class CostError(AutoplaceError):
    """A target has neither a profile nor a cost model to price its kernels."""


def _label(target) -> str:
    return f"{target.kind}:{target.vdevice_id}"


def _producers(graph: nx.DiGraph, node: str, key=None) -> list[tuple[str, object, int]]:
    """The (op/input/weight node, tensor key, nbytes) a value comes from, looking through tuples,
    getitems and aliases (which run on no device: their fields stay where they were made)."""
    data = graph.nodes[node]
    kind = data.get("kind")
    if kind in ("op", "input", "weight"):
        return [(node, key, data.get("output_bytes", 0))]
    preds = list(graph.predecessors(node))
    if kind == "getitem":
        out = []
        for p in preds:
            out.extend(_producers(graph, p, data.get("index")) if graph.nodes[p].get("kind") == "op"
                       else _producers(graph, p))
        return out
    out = []
    for p in preds:  # tuple, alias
        out.extend(_producers(graph, p))
    return out


@dataclass
class UnitView:
    """The graph the solver sees: one node per kernel (unit), plus inputs, weights and the output."""

    graph: nx.DiGraph
    members: dict  # unit node -> [op nodes]
    owner: dict  # op node -> unit node


def unit_view(graph: nx.DiGraph, units_by_kind: dict, costs, targets: TargetSet) -> UnitView:
    """Build the solver's graph with ``latency_us`` per target from ``costs``.

    Parameters
    ----------
    graph : the op graph
    units_by_kind : ``{target kind: [Unit]}`` from :func:`autoplace.profile.extract_units`
    costs : :class:`autoplace.cost_model.CostTable`-like (``unit_latency_us``, ``launch_us``)
    """
    first_kind = next(iter(units_by_kind))
    base_units = units_by_kind[first_kind]
    members, owner = {}, {}
    for i, unit in enumerate(base_units):
        if not unit.nodes:
            continue
        name = unit.nodes[-1]
        members[name] = list(unit.nodes)
        for n in unit.nodes:
            owner[n] = name
    for n, d in graph.nodes(data=True):  # ops no kernel computes (folded away by legalization)
        if d.get("kind") == "op" and n not in owner:
            members[n] = [n]
            owner[n] = n
    by_nodes = {kind: {frozenset(u.nodes): u for u in units if u.nodes} for kind, units in units_by_kind.items()}
    # One cost query per target kind: measured where profiled, predicted by the cost model elsewhere.
    priced = {}
    for kind, units in units_by_kind.items():
        frame = costs.latencies(units, kind, graph=graph)
        for unit, lat, src in zip(units, frame["latency_us"], frame["source"]):
            priced[(id(unit), kind)] = (float(lat), str(src))
    view = nx.DiGraph()
    host = targets.host.name
    for n, d in graph.nodes(data=True):
        if d.get("kind") == "input":
            view.add_node(n, kind="input", pinned=host, output_bytes=d["output_bytes"])
    sources = {}
    for name, nodes in members.items():
        latency, source = {}, {}
        for tname in targets:
            target = targets[tname]
            unit = by_nodes.get(target.kind, {}).get(frozenset(nodes))
            if unit is None:
                if len(nodes) == 1 and graph.nodes[nodes[0]].get("kind") == "op" and not any(
                    nodes[0] in u.nodes for u in units_by_kind.get(target.kind, [])
                ):
                    latency[tname], source[tname] = 0.0, "folded"  # no kernel at all
                continue  # grouped differently on this target: treated as unsupported
            lat, src = priced[(id(unit), target.kind)]
            if not math.isfinite(lat):
                continue  # the profile saw this kernel fail on this target: unsupported there
            latency[tname] = float(lat) + float(costs.launch_us(_label(target)))
            source[tname] = src
        ops = [graph.nodes[n]["op"] for n in nodes]
        # Weights live where their kernels run (one resident copy per device, uploaded at load time),
        # so a unit carries the bytes of the weights it reads.
        weights = {p for n in nodes for p in graph.predecessors(n) if graph.nodes[p].get("kind") == "weight"}
        view.add_node(name, kind="unit", ops=ops, latency_us=latency, cost_source=source,
                      weight_bytes=int(sum(graph.nodes[w]["weight_bytes"] for w in weights)),
                      output_bytes=graph.nodes[name].get("output_bytes", 0))
        sources[name] = source
    view.add_node("output", kind="output", pinned=host)
    # Edges: every tensor a unit (or the output) reads that another node makes.
    for consumer, d in graph.nodes(data=True):
        if d.get("kind") not in ("op", "output"):
            continue
        c = owner.get(consumer, consumer)
        for pred in graph.predecessors(consumer):
            for producer, key, nbytes in _producers(graph, pred):
                if graph.nodes[producer].get("kind") == "weight":
                    continue
                p = owner.get(producer, producer)
                if p == c:
                    continue
                tensor = f"{producer}" if key is None else f"{producer}[{key}]"
                if view.has_edge(p, c) and view.edges[p, c].get("tensor") != tensor:
                    # a second tensor between the same two nodes: keep both (sum of bytes, one edge)
                    view.edges[p, c]["nbytes"] += int(nbytes)
                    continue
                view.add_edge(p, c, nbytes=int(nbytes), tensor=tensor)
    return UnitView(view, members, owner)


@dataclass
class OptimizeResult:
    """What :func:`optimize` returns: the placed module, the plan and its predicted cost.

    Attributes
    ----------
    placement : Placement
        ``.mod`` (annotated IRModule), ``.params``, ``.run(*inputs)``.
    plan : autoplace.solve.PlacementPlan
        Over units; ``plan.objective_us`` is the predicted end-to-end latency.
    problem : autoplace.solve.PlacementProblem
    assignment : dict
        ``{op node: target}`` (what the plan means for every op of the model).
    """

    placement: Placement
    plan: object
    problem: object
    view: UnitView
    assignment: dict
    targets: TargetSet
    costs: object = field(repr=False, default=None)
    timings_s: dict = field(default_factory=dict)

    @property
    def mod(self):
        return self.placement.mod

    @property
    def params(self):
        return self.placement.params

    @property
    def predicted_us(self) -> float:
        """Predicted end-to-end latency: the plan's kernels and copies plus the VM's cost of invoking
        ``main`` on the host (measured by the profiler; it does not depend on the placement)."""
        invoke = getattr(self.costs, "invoke_us", None)
        if invoke is None:
            return float(self.plan.objective_us)
        main = self.placement.mod["main"]
        return float(self.plan.objective_us) + float(invoke(
            _label(self.targets.host), 0.0, num_args=len(main.params),
            output_bytes=self.placement.graph.nodes["output"].get("output_bytes", 0)))

    def run(self, *inputs):
        return self.placement.run(*inputs)

    def summary(self):
        """Per target: kernels, ops, predicted compute time and memory; plus copies."""
        import pandas as pd

        rows = []
        per = self.plan.per_target()
        for t in self.targets:
            info = per.get(t, {"nodes": [], "compute_us": 0.0, "memory_bytes": 0.0})
            units = [n for n in info["nodes"] if self.view.graph.nodes[n].get("kind") == "unit"]
            rows.append(dict(target=t, kernels=len(units), ops=sum(len(self.view.members[u]) for u in units),
                             compute_us=info["compute_us"], memory_MB=info["memory_bytes"] / 1e6))
        copies = self.plan.copies
        rows.append(dict(target="copies", kernels=len(copies), ops=None,
                         compute_us=sum(c.latency_us for c in copies),
                         memory_MB=sum(c.nbytes for c in copies) / 1e6))
        return pd.DataFrame(rows).set_index("target")

    def __repr__(self) -> str:
        plan = self.plan
        per = ", ".join(f"{t}: {len([n for n in v['nodes'] if self.view.graph.nodes[n].get('kind') == 'unit'])} kernels"
                        for t, v in plan.per_target().items())
        return (f"OptimizeResult({self.placement.model.name}: predicted {self.predicted_us:.1f} us "
                f"[{plan.status}, gap {plan.gap:.2%}]; {per}; {len(plan.copies)} copies)")

    def _repr_html_(self) -> str:
        head = (f"<b>{self.placement.model.name}</b>: predicted <b>{self.predicted_us:.1f} us</b> "
                f"({self.plan.status}, gap {self.plan.gap:.2%}, solved in {self.plan.solve_time_s:.3f} s)")
        html = head + self.summary().to_html(float_format=lambda v: f"{v:.1f}")
        try:
            import base64
            import io

            from .show import render_plan

            buffer = io.BytesIO()
            figure = render_plan(self)
            figure.savefig(buffer, format="png", dpi=90)
            import matplotlib.pyplot as plt

            plt.close(figure)
            html += f'<img src="data:image/png;base64,{base64.b64encode(buffer.getvalue()).decode()}"/>'
        except ImportError:  # matplotlib is an optional extra
            pass
        return html


def default_profiles_root() -> str:
    """``$AUTOPLACE_PROFILES``, else the repository's ``profiles/`` folder, else ``./profiles``."""
    env = os.environ.get("AUTOPLACE_PROFILES")
    if env:
        return env
    bundled = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "profiles")
    return bundled if os.path.isdir(bundled) else "profiles"


def find_profiles(kinds, profile_dir: str | None = None, root: str | None = None) -> list[str]:
    """Profile folders that together cover ``kinds`` (target kinds such as ``llvm``, ``cuda``).

    Preference: the given folder; else this machine's own folder if it covers every kind; else a
    single folder that covers every kind (a plan for that machine); else one folder per kind.

    Raises
    ------
    CostError
        If some kind has no profile anywhere (and so no cost model either).
    """
    from .profile import ProfileStore, hardware_metadata

    if profile_dir is not None:
        return [profile_dir]
    root = root or default_profiles_root()
    folders = sorted(os.path.join(root, d) for d in os.listdir(root)) if os.path.isdir(root) else []
    covered = {}
    for folder in folders:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            df = ProfileStore(folder).records(allow_foreign=True)
        covered[folder] = set(df["target"][df["kind"] == "unit"]) if len(df) else set()
    kinds = set(kinds)
    own = os.path.join(root, hardware_metadata()["hardware_id"])
    if kinds <= covered.get(own, set()):
        return [own]
    for folder, have in covered.items():
        if kinds <= have:
            warnings.warn(f"planning with the profile measured on {os.path.basename(folder)} (this machine is "
                          f"{os.path.basename(own)}): the plan is for that machine", stacklevel=3)
            return [folder]
    chosen = []
    for kind in sorted(kinds):
        options = [f for f, have in covered.items() if kind in have]
        if not options:
            raise CostError(
                f"no profile measures target kind {kind!r} (searched {root}): run `autoplace profile --zoo ... "
                f"--targets '{{\"x\": \"{kind}\"}}'` on a machine with that device, or pass costs=... "
                "(a CostTable with a trained cost model)"
            )
        chosen.append(own if own in options else options[0])
    return sorted(set(chosen))


def load_costs(targets: TargetSet, profile_dir: str | None = None):
    """A CostTable from the profiles (and cost models saved beside them) covering ``targets``."""
    import pandas as pd

    from .cost_model import CostTable
    from .profile import ProfileStore

    kinds = {targets[t].kind for t in targets}
    frames, model = [], None
    for folder in find_profiles(kinds, profile_dir):
        frames.append(ProfileStore(folder).records(allow_foreign=True))
        path = os.path.join(folder, "cost_model.json")
        if model is None and os.path.exists(path):
            from .cost_model import XGBCostModel

            model = XGBCostModel.load(path)
    # No saved cost model: train one on these records (seconds) for kernels never profiled.
    return CostTable(pd.concat(frames, ignore_index=True), model=model if model is not None else "xgb")


def _load_costs(costs, targets: TargetSet, profile_dir):
    return costs if costs is not None else load_costs(targets, profile_dir)


def optimize(mod, params=None, targets=None, *, pins: Mapping | None = None, memory_bytes: Mapping | None = None,
             costs=None, profile_dir=None, method: str = "auto", time_limit_s: float = 10.0,
             example_inputs=None) -> OptimizeResult:
    """Place a model to minimise predicted end-to-end latency, copies included.

    Parameters
    ----------
    mod, params : the model and its weights (see :func:`autoplace.load_model`)
    targets : dict
        ``{name: target}``; the first is the host (inputs arrive, outputs return there).
    pins : dict, optional
        ``{key: target}`` with keys as in :func:`autoplace.place` (node, op name, instance).
        A pin on one op pins its whole kernel (unit).
    memory_bytes : dict, optional
        ``{target: capacity in bytes}`` (weights resident there plus activations, no reuse).
    costs : CostTable-like, optional
        Default: the committed profiles of this machine's hardware plus the cost model.
    method : str
        Solver method (``"auto"``: min-cut for 2 targets, ILP otherwise; or a baseline).

    Returns
    -------
    OptimizeResult
    """
    from .profile.units import extract_units
    from .solve import PlacementProblem, solve

    started = time.perf_counter()
    targets = TargetSet(targets if targets is not None else {"cpu": "llvm"})
    model = load_model(mod, params, example_inputs=example_inputs)
    graph = op_graph(model)
    costs = _load_costs(costs, targets, profile_dir)
    units_by_kind = {}
    for name in targets:
        kind = targets[name].kind
        if kind not in units_by_kind:
            units_by_kind[kind] = extract_units(model, targets[name].target, graph=graph)
    view = unit_view(graph, units_by_kind, costs, targets)
    timings = {"costs_s": time.perf_counter() - started}
    # Pins name op nodes; a pin applies to the unit that holds the op.
    unit_pins = {}
    for key, target in (pins or {}).items():
        nodes = select_nodes(graph, key)
        if not nodes:
            resolve_assignment(graph, {key: target}, targets, targets.host.name)  # raises the clear error
        for n in nodes:
            unit = view.owner.get(n, n)
            if unit in unit_pins and unit_pins[unit] != target:
                from .solve import InfeasiblePlacementError

                raise InfeasiblePlacementError(
                    f"contradictory pins: {n!r} (in kernel {unit!r}) is pinned to {target!r} but another op of the "
                    f"same kernel is pinned to {unit_pins[unit]!r}; ops fused into one kernel run on one device"
                )
            unit_pins[unit] = target
    copy_cost = {}
    for src in targets:
        for dst in targets:
            if src != dst:
                copy_cost[(src, dst)] = costs.copy_cost(_label(targets[src]), _label(targets[dst]))
    problem = PlacementProblem.from_graph(view.graph, copy_cost, targets=list(targets), memory_bytes=memory_bytes,
                                          pins=unit_pins)
    plan = solve(problem, method=method, time_limit_s=time_limit_s)
    timings["solve_s"] = plan.solve_time_s
    assignment = {}
    for node, target in plan.assignment.items():
        if node in view.members:
            for op in view.members[node]:
                assignment[op] = target
        elif graph.has_node(node) and graph.nodes[node].get("kind") in ("input", "output"):
            assignment[node] = target
    placement = place(model, None, assignment, targets)
    timings["total_s"] = time.perf_counter() - started
    return OptimizeResult(placement, plan, problem, view, assignment, targets, costs, timings)
