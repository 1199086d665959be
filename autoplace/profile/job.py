"""The offline profiling job: unique kernels of many models on every target, copies, call overhead.

``profile_models`` extracts the units of every model on every target, drops the ones the store
already has (a killed job resumes where it stopped), measures the rest one by one (each record is
on disk before the next starts) with a progress bar and an estimate of the time left.
"""

from __future__ import annotations

import datetime
import itertools
import math
import time
from collections.abc import Iterable

from tqdm.auto import tqdm

from ..frontend import load_model
from ..graph import op_graph
from ..targets import TargetSet
from .copies import DEFAULT_COPY_SIZES, fit_copy_cost, measure_copies, measure_launch_overhead
from .measure import KernelTimer
from .store import ProfileStore
from .units import extract_units


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def target_label(target) -> str:
    """How records name a device: kind and vdevice id (``llvm:0``, ``cuda:0``)."""
    return f"{target.kind}:{target.vdevice_id}"


def unit_record(unit, graph, model_name: str, target_kind: str, result: dict) -> dict:
    """The record of one measured kernel: features the cost model uses plus the timing.

    Without ``graph`` (None) the record has the kernel's ops and argument shapes only: no anchor
    attributes and ``flops`` NaN.
    """
    nodes = [graph.nodes[n] for n in unit.nodes] if graph is not None else []
    anchor = max(nodes, key=lambda d: d.get("flops", 0.0)) if nodes else {}
    return dict(
        kind="unit",
        key=unit.key,
        target=target_kind,
        model=model_name,
        func_name=unit.func_name,
        ops=unit.ops,
        anchor_op=anchor.get("op", unit.ops[0] if unit.ops else unit.func_name),
        anchor_attrs=anchor.get("attrs", {}),
        anchor_input_shapes=[list(s) for s in anchor.get("input_shapes", [])],
        arg_shapes=[list(s) for s in unit.arg_shapes],
        arg_dtypes=unit.arg_dtypes,
        num_outputs=unit.num_outputs,
        flops=float(sum(d.get("flops", 0.0) for d in nodes)) if graph is not None else math.nan,
        bytes_in=unit.nbytes_in,
        bytes_out=unit.nbytes_out,
        measured_at=_now(),
        **result,
    )


def model_record(model, units, targets: TargetSet, name: str, kind: str, *, repeat: int = 7) -> dict:
    """End-to-end latency of the model built entirely on one target, with the kernels it launches.

    The cost model's evaluation and the fidelity experiment compare sums of unit costs to this.
    """
    import numpy as np

    from ..place import place

    one = TargetSet({name: targets[name].target})
    placement = place(model, None, None, one)
    inputs = model.random_inputs()
    try:
        samples = placement.runner.time_us(inputs, repeat=3)
        number = max(1, int(20_000 / max(1.0, float(np.median(samples)))))
        samples = placement.runner.time_us(inputs, number=number, repeat=repeat)
        timing = dict(status="ok", median_us=float(np.median(samples)), min_us=float(np.min(samples)),
                      max_us=float(np.max(samples)), samples=len(samples))
    except Exception as err:
        timing = dict(status="error", error=str(err).strip().splitlines()[-1][:300])
    return dict(kind="model", key=model.name, target=kind, unit_keys=[u.key for u in units],
                ops=sum(1 for _, d in placement.graph.nodes(data=True) if d.get("kind") == "op"),
                num_args=len(placement.mod["main"].params),
                output_bytes=int(placement.graph.nodes["output"].get("output_bytes", 0)),
                measured_at=_now(), **timing)


def profile_models(models: Iterable, targets, store: ProfileStore, *, copies: bool = True, end_to_end: bool = True,
                   redo: Iterable[str] = (),
                   copy_sizes=DEFAULT_COPY_SIZES, timer: KernelTimer | None = None, progress: bool = True,
                   log=print) -> dict:
    """Profile models on targets into ``store``; returns a summary dict.

    Parameters
    ----------
    models : iterable
        Models (anything :func:`autoplace.load_model` reads, or ``(name, model)`` pairs).
    targets : dict or TargetSet
        Only targets this machine can run are measured; the others are reported as skipped
        (profile them on their machine, see :mod:`autoplace.profile.remote`).
    store : ProfileStore
    copies : bool
        Also measure copies between every ordered pair of targets, and the VM call overhead.
    end_to_end : bool
        Also time each model built entirely on each target (``kind="model"`` records).
    redo : iterable of str
        Record kinds to measure again even if present (e.g. ``("model",)`` after a run disturbed by
        other load). The store is append-only: readers take the latest record of a key.
    """
    targets = TargetSet(targets)
    skipped_targets = targets.unavailable()
    runnable = [name for name in targets if name not in skipped_targets]
    kinds = {}
    for name in runnable:
        kinds.setdefault(targets[name].kind, name)  # one profile per target kind
    redo = set(redo)
    done = {tag for tag in store.done() if tag[0] not in redo}
    todo, seen, total_units = [], set(), 0
    model_runs = []
    started = time.perf_counter()
    for item in models:
        name, model = item if isinstance(item, tuple) else (None, item)
        model = load_model(model, name=name)
        graph = op_graph(model)
        for kind, tname in kinds.items():
            units = extract_units(model, targets[tname].target, graph=graph)
            total_units += len(units)
            if end_to_end and ("model", model.name, kind) not in done:
                model_runs.append((model, units, tname, kind))
            for unit in units:
                tag = ("unit", unit.key, kind)
                if tag in seen:
                    continue
                seen.add(tag)
                if tag not in done:
                    todo.append((model.name, graph, unit, targets[tname].target, kind))
    log(f"{total_units} kernel launches, {len(seen)} unique kernels, {len(seen) - len(todo)} already profiled, "
        f"{len(todo)} to measure on {sorted(kinds)}" + (f"; not on this machine: {skipped_targets}" if skipped_targets else ""))
    own_timer = timer is None
    timer = timer or KernelTimer()
    measured = failed = 0
    try:
        bar = tqdm(todo, desc="kernels", unit="kernel", disable=not progress)
        for model_name, graph, unit, target, kind in bar:
            bar.set_postfix_str(f"{model_name}:{unit.func_name}"[:40])
            result = timer.measure(unit, target)
            store.append(unit_record(unit, graph, model_name, kind, result))
            measured += 1
            failed += result["status"] != "ok"
    finally:
        if own_timer:
            timer.close()
    for model, units, tname, kind in tqdm(model_runs, desc="end to end", unit="model", disable=not progress):
        store.append(model_record(model, units, targets, tname, kind))
    if copies:
        _profile_copies(targets, runnable, store, copy_sizes, done, progress, log)
    return dict(units_total=total_units, units_unique=len(seen), measured=measured, failed=failed,
                skipped_targets=skipped_targets, seconds=time.perf_counter() - started)


def _profile_copies(targets, runnable, store, copy_sizes, done, progress, log) -> None:
    for name in runnable:
        label = target_label(targets[name])
        if ("launch", "vm_call", label) not in done:
            result = measure_launch_overhead(targets, name)
            store.append(dict(kind="launch", key="vm_call", target=label, measured_at=_now(), status="ok", **result))
    pairs = [(s, d) for s, d in itertools.permutations(runnable, 2)]
    for src, dst in pairs:
        label = f"{target_label(targets[src])}->{target_label(targets[dst])}"
        if ("copy_fit", "fit", label) in done:
            continue
        bar = tqdm(total=len(copy_sizes), desc=f"copies {label}", unit="size", disable=not progress)
        results = measure_copies(targets, src, dst, copy_sizes, progress=bar)
        bar.close()
        for res in results:
            store.append(dict(kind="copy", key=str(res["nbytes"]), target=label, measured_at=_now(), status="ok", **res))
        alpha, per_byte = fit_copy_cost([r["nbytes"] for r in results], [r["median_us"] for r in results])
        store.append(dict(kind="copy_fit", key="fit", target=label, alpha_us=alpha, us_per_byte=per_byte,
                          bandwidth_gb_s=(1e-3 / per_byte) if per_byte > 0 else None,
                          measured_at=_now(), status="ok"))
        log(f"copy {label}: alpha {alpha:.2f} us, {1e-3 / per_byte if per_byte else float('inf'):.2f} GB/s")
