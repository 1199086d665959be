"""Timing each kernel inside its model: the Relax VM's instrument hook around every call of one build.

A kernel timed alone (:mod:`.measure`) runs warm, and even timed *in-model* (:mod:`.cache_state`: every
core's L2 evicted, its inputs read back) it finds its data in one cache state for every kernel, while in the
model each kernel finds what the kernels before it left. On the Intel Xeon those states put the in-model
kernel sums of 9 base models 2-10% off their end-to-end latency, of both signs (bert-base +6.8%, llama-base
-8.9%). Timed *in context* - the model built on one target and run as a whole, with
``VirtualMachine.set_instrument`` reading a clock before and after every call the VM makes - each kernel is
timed in the cache state it really meets.

What one reading adds: the hook's own Python call and return, about 0.4 us on the Xeon, read from the VM's
no-op calls (``vm.builtin.null_value``) of the same runs and taken off every kernel (``in_context_floor_us``).

Used where the device is on this machine: the profiler times every ``model`` record's kernels in context
(``in_context_us``, one value per kernel launch, in launch order) and ``optimize(measure="auto")`` times a new
model's kernels so (a ``context`` record); a cost table prices the kernels of a model it has in-context times
of with them (:meth:`autoplace.cost_model.CostTable.latencies`). A kernel of a plan that mixes devices meets
neighbours from the same device only in part: there the times of the single-device build are an estimate.
"""

from __future__ import annotations

import hashlib
import time

import numpy as np

#: Version of the in-context timing (records carry it as ``in_context_timing``; other versions are re-timed).
IN_CONTEXT_TIMING = "vm-instrument/1"
#: The VM's call that does nothing: its readings are the hook's own cost.
NO_OP_CALL = "vm.builtin.null_value"
#: The VM's call a reshape kernel becomes (a view: ``RewriteDataflowReshape`` in the VM build).
RESHAPE_CALL = "vm.builtin.reshape"
#: Runs of the model kept (the calm ones when the host-speed canary is given).
DEFAULT_RUNS = 15


def context_key(unit_keys, target_kind: str) -> str:
    """The key of a ``context`` record: the model's kernels, in launch order, on a target kind (the model's name
    plays no part: two models launching the same kernels in the same order are one context)."""
    text = "\n".join([str(target_kind), *(str(k) for k in unit_keys)])
    return "ctx-" + hashlib.sha256(text.encode()).hexdigest()[:24]


def align_calls(call_names: list[str], units) -> list[int]:
    """The index in ``call_names`` (one run's VM calls, in order) of each unit's kernel, in launch order.

    A unit's kernel is the next call of its ``func_name`` or, for a unit the VM build turned into a view, the
    next ``vm.builtin.reshape``; the VM's other builtins (allocation, shape checks) are skipped.

    Raises
    ------
    ValueError
        When the calls do not match the units one to one (the build launched other kernels).
    """
    kernels = [i for i, name in enumerate(call_names) if not name.startswith("vm.builtin.") or name == RESHAPE_CALL]
    if len(kernels) != len(units):
        raise ValueError(f"the build launched {len(kernels)} kernels for {len(units)} units")
    for i, unit in zip(kernels, units):
        if call_names[i] != unit.func_name and call_names[i] != RESHAPE_CALL:
            raise ValueError(f"call {call_names[i]!r} where the units have {unit.func_name!r}")
    return kernels


def time_in_context(executable, devices, args: list, units, *, runs: int = DEFAULT_RUNS, speed=None,
                    patience_s: float = 3.0) -> dict:
    """Every kernel of one single-target build timed inside its runs.

    Parameters
    ----------
    executable : tvm.relax.VMExecutable
        The model built on one target (:func:`autoplace.profile.job.model_placement`).
    devices : list of tvm.runtime.Device
        As the executable's runner has them.
    args : list of tvm.runtime.Tensor
        ``main``'s arguments on their devices (inputs, then weights).
    units : list of autoplace.profile.Unit
        The model's kernels on that target, in launch order (:func:`autoplace.profile.extract_units`).
    runs : int
        Runs of the model to keep (after two unrecorded ones).
    speed : autoplace.profile.host_speed.HostSpeed, optional
        Keep the runs made while the host ran calm (:meth:`HostSpeed.calm_samples`).

    Returns
    -------
    dict
        ``in_context_us`` (per unit, the median over the runs kept less the hook's cost), ``in_context_floor_us``
        (that cost), ``in_context_runs``, ``in_context_timing``, and with ``speed`` ``in_context_host_slowdown``;
        or ``in_context_error`` (why not) when the calls do not match the units.
    """
    from tvm import relax

    vm = relax.VirtualMachine(executable, devices)
    syncs = [d for d in devices if d.dlpack_device_type() != 1]  # asynchronous devices: wait for the kernel to end
    calls: list = []
    clock = time.perf_counter

    def hook(func, name, before_run, ret_value, *call_args):
        if before_run:
            for d in syncs:
                d.sync()
            calls.append([str(name), clock()])
        else:
            for d in syncs:
                d.sync()
            calls[-1][1] = clock() - calls[-1][1]
        return 0

    vm.set_instrument(hook)
    main = vm["main"]
    recorded: list = []

    def one_run() -> float:
        calls.clear()
        start = clock()
        main(*args)
        for d in syncs:
            d.sync()
        recorded.append([(name, seconds * 1e6) for name, seconds in calls])
        return (clock() - start) * 1e6

    for _ in range(2):
        one_run()
    recorded.clear()
    extra = {}
    if speed is None:
        for _ in range(runs):
            one_run()
        kept = recorded
    else:
        calm = speed.calm_samples(one_run, runs, patience_s)
        kept = [recorded[i] for i in calm["kept_index"]]
        extra = dict(in_context_host_slowdown=calm["host_slowdown"])
    names = [name for name, _ in kept[0]]
    try:
        if any([name for name, _ in run] != names for run in kept):
            raise ValueError("the runs made different calls")
        kernels = align_calls(names, units)
    except ValueError as err:
        return dict(in_context_error=str(err), in_context_timing=IN_CONTEXT_TIMING)
    readings = np.array([[us for _, us in run] for run in kept])  # (runs, calls)
    no_op = [i for i, name in enumerate(names) if name == NO_OP_CALL]
    floor = float(np.median(readings[:, no_op])) if no_op else float(readings.min())
    per_call = np.median(readings, axis=0)
    times = np.maximum(per_call[kernels] - floor, 0.0)
    return dict(in_context_us=[float(t) for t in times], in_context_floor_us=floor, in_context_runs=len(kept),
                in_context_timing=IN_CONTEXT_TIMING, **extra)


def in_context_record(model_name: str, units, target_kind: str, timing: dict) -> dict:
    """A ``context`` record: the in-context times of a model's kernels on a target kind, without the model's
    end-to-end latency (what :func:`autoplace.optimize` measures for a model the profile lacks)."""
    keys = [u.key for u in units]
    return dict(kind="context", key=context_key(keys, target_kind), target=target_kind, model=model_name,
                unit_keys=keys, status="ok" if "in_context_us" in timing else "error", **timing)
