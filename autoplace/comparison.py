"""``autoplace.compare``: build and run every plan side by side, predicted vs measured.

Plans: autoplace's optimum, everything on each target (``all:<target>``), greedy (each kernel on
its fastest target, copies ignored) and any manual placements given. All are built and loaded in
this process and timed in interleaved rounds (round 1 times every plan, then round 2, ...), so
machine noise hits them alike; the table reports the median over the rounds the host ran calm in, and min and
max over all samples.

The host's speed (:mod:`autoplace.profile.host_speed`: a matmul canary and the sharing canary, against the
fastest readings of this machine's profile) is read before every plan's round, and each round starts once it
reads calm (waiting up to ``calm_wait_s`` in all): on the 2-vCPU AMD Zen 5 whole models ran 1.3-1.6x slow for
minutes at a time with the cores apart (session 49), so a comparison timed then measured every plan at a speed
its prediction is not for. A plan's rounds read slow are left out of its median where it has calm ones.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping

import numpy as np
import pandas as pd

from .errors import AssignmentError, AutoplaceError
from .frontend import load_model
from .graph import op_graph, resolve_assignment
from .optimizer import OptimizeResult, optimize
from .place import Placement
from .targets import TargetSet


def _unit_assignment(result: OptimizeResult, op_assignment: dict) -> dict:
    """A per-op placement seen at unit level (a unit goes where most of its ops go)."""
    plan_assignment = dict(result.plan.assignment)
    for unit, ops in result.view.members.items():
        votes = Counter(op_assignment.get(op, result.targets.host.name) for op in ops)
        plan_assignment[unit] = votes.most_common(1)[0][0]
    return plan_assignment


def compare(mod, params=None, targets=None, *, manual: Mapping[str, Mapping] | None = None, baselines=True,
            result: OptimizeResult | None = None, rounds: int = 5, repeat: int = 3, check: bool = True,
            rpc=None, memory_greedy: bool | None = None, calm_wait_s: float | None = None,
            **optimize_kwargs) -> pd.DataFrame:
    """Measure autoplace's plan against the baselines and manual placements, in one process.

    Parameters
    ----------
    mod, params, targets : as for :func:`autoplace.optimize`
    manual : dict, optional
        ``{label: assignment}`` with assignments as :func:`autoplace.place` takes them
        (e.g. ``{"seed 002": {"relax.nn.conv2d": "gpu", "relax.matmul": "gpu"}}``).
    baselines : bool
        Include ``all:<target>`` for every target, and ``greedy``.
    memory_greedy : bool, optional
        Include ``memory-greedy:<target>`` for every target but the first: that target filled in model order
        until its memory cap, the rest on the first (Hugging Face accelerate's ``device_map="auto"``). Default:
        for the targets ``memory_bytes`` caps (without a cap it is ``all:<target>``).
    result : OptimizeResult, optional
        Reuse an optimize result instead of solving again.
    rounds, repeat : int
        Timing: ``rounds`` interleaved rounds of ``repeat`` samples per plan.
    calm_wait_s : float, optional
        Seconds to wait in all, over the rounds, for the host's speed canaries to read calm before a round
        (default :data:`autoplace.profile.host_speed.CALM_WAIT_S`, 90; 0: time at whatever speed the host runs).
    check : bool
        Check that every plan computes the same outputs as the first (rtol 1e-4).
    rpc : RPCConfig, str, dict or pair, optional
        Time the plans on a machine of a TVM RPC tracker instead of this one
        (:func:`autoplace.profile.rpc.time_plans`: built here, run there, every plan in one session, the
        same interleaved rounds), e.g. ``rpc=("10.0.0.5:9190", "gpu-box")`` to plan a CPU+GPU box from a
        laptop. Unless ``result``, ``costs`` or ``profile_dir`` is given, the plans are priced with that
        machine's profile (``profiles/<its hardware id>``, see ``autoplace profile --rpc``) where there is
        one, and nothing is measured on this machine (``measure="never"``).
    **optimize_kwargs
        Passed to :func:`autoplace.optimize` (``pins``, ``memory_bytes``, ``measure="auto"|"never"|"always"``
        ...) when ``result`` is not given.

    Returns
    -------
    pandas.DataFrame
        One row per plan: ``predicted_us``, ``measured_median_us`` (over the samples of the rounds read calm, all
        rounds where none was), ``measured_min_us``, ``measured_max_us`` (over every sample), ``error``
        (predicted/measured - 1), ``calm_rounds`` (rounds the canaries read calm before; None over RPC),
        ``copies``, ``copy_MB``, ops per target, ``same_placement_as`` (the first plan above with every op on the
        same target, else None). ``attrs["host_speed"]`` is the canaries' report ("" when the host ran calm).

    Raises
    ------
    AutoplaceError
        Before any plan is built: ``rounds``/``repeat`` below 1, a manual plan that is not a dict or
        names a node or target the model does not have (:class:`AssignmentError`); and whatever
        :func:`autoplace.optimize` raises.
    """
    if rpc is not None:
        from .profile.rpc import RPCConfig, remote_profile_dir

        rpc = RPCConfig.create(rpc)
        if result is None:
            optimize_kwargs.setdefault("measure", "never")  # this machine is not the one measured
            if optimize_kwargs.get("costs") is None and optimize_kwargs.get("profile_dir") is None:
                folder, _ = remote_profile_dir(rpc)
                if os.path.isdir(folder):
                    optimize_kwargs["profile_dir"] = folder
    if result is None:
        # Check every option before the first plan is built: a bad manual plan must not cost a solve.
        load_kwargs = {k: optimize_kwargs.pop(k) for k in ("example_inputs", "shapes") if k in optimize_kwargs}
        model = load_model(mod, params, **load_kwargs)
        _check_options(model, op_graph(model), TargetSet(targets), manual, rounds, repeat)
        result = optimize(model, None, targets, **optimize_kwargs)
    else:
        placed = result._placed()  # a result read from a file has no module to build: says so
        _check_options(placed.model, placed.graph, result.targets, manual, rounds, repeat)
    model = result.placement.model
    capped = [t for t, cap in zip(result.problem.targets[1:], result.problem.memory_bytes[1:]) if np.isfinite(cap)]
    if memory_greedy is None:
        memory_greedy = capped if baselines else []
    plans = candidate_plans(result, manual=manual, baselines=baselines, memory_greedy=memory_greedy)
    if rpc is not None:
        from .profile.rpc import time_plans

        placed = {name: placement for name, (_, placement, _) in plans.items() if placement is not None}
        samples, hardware = time_plans(placed, rpc, rounds=rounds, repeat=repeat, check=check)
        return _table(plans, samples, model, hardware_id=hardware.get("hardware_id"))
    inputs = model.random_inputs(seed=0)
    reference = None
    runners = {}
    for name, (_, placement, _) in plans.items():
        if placement is None:
            continue
        out = placement.run(*inputs)
        if check:
            if reference is None:
                reference = out
            else:
                for a, b in zip(_flat(out), _flat(reference)):
                    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4, err_msg=f"plan {name} computes other numbers")
        runners[name] = placement.runner
    first = next(iter(runners.values()))
    one = float(np.median(first.time_us(inputs, repeat=3)))
    number = max(1, int(20_000 / max(one, 1.0)))
    speed = _host_speed(result, calm_wait_s)
    samples = {name: [] for name in runners}
    for _ in range(rounds):
        speed.wait_calm()
        for name, runner in runners.items():
            slowdown = speed.slowdown()
            samples[name].append((slowdown, list(runner.time_us(inputs, number=number, repeat=repeat))))
    table = _table(plans, {name: _calm_rounds(taken) for name, taken in samples.items()}, model)
    table.attrs["host_speed"] = speed.report(always=False, advice=False)
    return table


def _host_speed(result: OptimizeResult, calm_wait_s: float | None):
    """The host's speed canaries against the fastest readings this machine's records in ``result``'s costs carry
    (its profile, the measurements of ``measure="auto"``), waiting up to ``calm_wait_s`` in all."""
    from .optimizer import measured_on_this_machine
    from .profile.host_speed import CALM_WAIT_S, HostSpeed

    costs = getattr(result, "costs", None)
    records = measured_on_this_machine(costs).records if costs is not None else None
    return HostSpeed.for_records(records, wait_budget_s=CALM_WAIT_S if calm_wait_s is None else calm_wait_s)


def _calm_rounds(rounds: list) -> tuple[list, list, int]:
    """``(samples of the rounds read calm, or of every round when none was; every sample; calm rounds)`` of one
    plan's ``[(canary slowdown before the round, [samples])]``."""
    from .profile.host_speed import SLOW

    calm = [taken for slowdown, taken in rounds if slowdown <= SLOW]
    every = [v for _, taken in rounds for v in taken]
    return ([v for taken in calm for v in taken] or every), every, len(calm)


def candidate_plans(result: OptimizeResult, *, manual: Mapping[str, Mapping] | None = None, baselines=True,
                    memory_greedy=False) -> dict:
    """Every plan :func:`compare` times, built but not run: ``{label: (predicted_us, placement, note)}``.

    ``autoplace`` (``result``'s plan), with ``baselines`` ``all:<target>`` for every target and ``greedy``,
    with ``memory_greedy`` (True, or a list of target names) also ``memory-greedy:<target>`` for every target but
    the first, or for those listed (that target filled in model order until its memory cap, the rest on the first
    target: accelerate's ``device_map="auto"``, :func:`autoplace.solve.baselines.memory_greedy`), then
    ``manual:<label>`` for each manual assignment.
    Baselines ignore memory caps, except memory-greedy, whose point they are; a note says when a plan breaks a
    cap. An infeasible baseline has ``(None, None, why)``.
    """
    from .solve import PlacementError, solve

    model, graph, targets = result.placement.model, result.placement.graph, result.targets
    plans = {"autoplace": (result.predicted_us, result.placement, result.plan.status)}
    invoke_us = result.predicted_us - result.plan.objective_us  # the same for every plan
    methods = ([f"all:{t}" for t in targets] + ["greedy"]) if baselines else []
    if memory_greedy:
        host, *devices = list(targets)
        chosen = devices if memory_greedy is True else [t for t in memory_greedy if t != host]
        methods += [f"memory-greedy:{t}" for t in chosen]
    # Baselines ignore memory caps (the table says when one breaks a cap); the solver's own
    # "all:<target>" keeps pinned nodes (inputs, outputs, user pins) where they are pinned.
    uncapped = _uncapped(result.problem)
    for method in methods:
        try:
            problem = result.problem if method.startswith("memory-greedy:") else uncapped
            unit_assignment = solve(problem, method=method).assignment
        except PlacementError as err:
            plans[method] = (None, None, f"infeasible: {err}")
            continue
        predicted, over = _predict(result.problem, unit_assignment)
        placement = Placement.from_assignment(model, graph, result.view.op_assignment(unit_assignment, graph),
                                              targets)
        plans[method] = (predicted + invoke_us, placement, "baseline" + over)
    for label, assignment in (manual or {}).items():
        placement = Placement.from_assignment(model, graph, assignment, targets)
        unit_assignment = _unit_assignment(result, placement.assignment)
        unit_assignment = {k: v for k, v in unit_assignment.items() if k in set(result.problem.nodes)}
        predicted, over = _predict(result.problem, unit_assignment)
        plans[f"manual:{label}"] = (predicted + invoke_us, placement, "manual (predicted at kernel level)" + over)
    return plans


def _table(plans: dict, samples: dict, model, hardware_id: str | None = None) -> pd.DataFrame:
    """One row per plan: predicted and measured latency, copies, ops per target, and ``same_placement_as``: the
    first plan above it that puts every op where it does (the same build: their gap in the table is noise).
    ``samples``: ``{plan: [us]}``, or ``{plan: (samples of its calm rounds, every sample, calm rounds)}``
    (:func:`_calm_rounds`)."""
    rows = []
    seen = {}
    for name, (predicted, placement, status) in plans.items():
        row, same = dict(plan=name, status=status, predicted_us=predicted), None
        if placement is not None:
            first = seen.setdefault(tuple(sorted(placement.assignment.items())), name)
            same = first if first != name else None
            kept, s, calm = samples[name] if isinstance(samples[name], tuple) else (samples[name], samples[name], None)
            kept, s = np.asarray(kept), np.asarray(s)
            row.update(measured_median_us=float(np.median(kept)), measured_min_us=float(s.min()),
                       measured_max_us=float(s.max()),
                       error=(predicted / float(np.median(kept)) - 1.0) if predicted is not None else None,
                       calm_rounds=calm,
                       copies=len(placement.copies), copy_MB=sum(c["nbytes"] for c in placement.copies) / 1e6)
            for t, n in placement.ops_per_target().items():
                row[f"ops_{t}"] = n
        row["same_placement_as"] = same
        rows.append(row)
    table = pd.DataFrame(rows).set_index("plan")
    table.attrs["model"] = model.name
    if hardware_id is not None:
        table.attrs["hardware_id"] = hardware_id  # the machine that ran the plans (over RPC)
    return table


def _check_options(model, graph, targets: TargetSet, manual, rounds, repeat) -> None:
    """Refuse options that would fail only after every plan was built: timing counts, manual plans."""
    for name, value in (("rounds", rounds), ("repeat", repeat)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise AutoplaceError(f"{name}={value!r}: compare times every plan {name} times, so it must be an "
                                 f"integer >= 1 (default {5 if name == 'rounds' else 3})")
    if manual is None:
        return
    if not isinstance(manual, Mapping):
        raise AssignmentError(f"manual must be a dict {{label: assignment}} (e.g. {{'convs on cpu1': "
                              f"{{'relax.nn.conv2d': 'cpu1'}}}}), got a {type(manual).__name__}")
    for label, assignment in manual.items():
        if not isinstance(assignment, Mapping):
            raise AssignmentError(f"manual plan {label!r} must be a dict {{key: target}} (e.g. "
                                  f"{{'relax.nn.conv2d': {list(targets)[-1]!r}}}), got {assignment!r}"[:400])
        try:
            resolve_assignment(graph, assignment, targets, default=targets.host.name)
        except AssignmentError as err:
            raise AssignmentError(f"manual plan {label!r}: {err}") from None


def _uncapped(problem):
    """The same problem without memory caps (baselines ignore them; the table says when they break one)."""
    from .solve import PlacementProblem

    data = problem.to_dict()
    data["memory_bytes"] = [None] * len(data["memory_bytes"])
    return PlacementProblem.from_dict(data)


def _predict(problem, unit_assignment: dict) -> tuple[float, str]:
    """Predicted latency of a unit-level assignment, and a note if it breaks a memory cap."""
    from .solve import evaluate, over_memory_caps

    target_of = problem.assignment_index(unit_assignment)
    over = [problem.targets[d] for d in over_memory_caps(problem, target_of)]
    return float(evaluate(problem, target_of).objective_us), (f"; over the memory cap of {over}" if over else "")


def _flat(out):
    return out if isinstance(out, tuple) else (out,)
