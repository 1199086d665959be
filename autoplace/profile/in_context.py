"""Timing each kernel inside its model: the Relax VM's instrument hook around every call of one build.

A kernel timed alone (:mod:`.measure`) runs warm, and even timed *in-model* (:mod:`.cache_state`: every
core's L2 evicted, its inputs read back) it finds its data in one cache state for every kernel, while in the
model each kernel finds what the kernels before it left. On the Intel Xeon those states put the in-model
kernel sums of 9 base models 2-10% off their end-to-end latency, of both signs (bert-base +6.8%, llama-base
-8.9%). Timed *in context* - the model built on one target and run as a whole, with
``VirtualMachine.set_instrument`` reading a clock before and after every call the VM makes - each kernel is
timed in the cache state it really meets.

What one reading adds: the hook's own return to the VM and its next Python entry, about 0.35 us on the Xeon for
a call without arguments, read from the VM's no-op calls (``vm.builtin.null_value``) of the same runs, and what
each call's arguments add to the entry (each wrapped as a Python object: about 0.1 us a tensor, more for shapes),
timed by calling a no-op Python function through TVM's FFI with the very arguments the hook got; taken off every
reading (``in_context_hook_us``: their sum over one run). Each sample runs the model back to back for about 20 ms
and leaves out its first run, which finds the caches as the host-speed canary (or whatever ran before) left
them: timed one run after each canary, a 5 us model read 12 us.

The hook's cost is an estimate, timed apart from the runs, and for a model of many small kernels it is as large
as the kernels (Zen 5, session 51: swin-base 407-423 us of hook against 449-480 us of kernels a run, mobilenetv2-base
174-185 against 578-604), so a 10% error in it is 4-9% of the model. Each sample therefore also times the same
build without the hook, as a plan is timed end to end (``in_context_wall_us``), and a cost table takes the kernels'
readings as shares of that latency (:meth:`autoplace.cost_model.CostTable.in_context_times`).

A kernel's in-context time includes the VM's own calls that serve it (allocating its output from the VM's pool,
a reshape view): 22 us of resnet-base's 337 (6.5%), 100 us of bert-base's 4240. What is left besides (the VM's
dispatch, a call of ``main``) is fitted to the profile's end-to-end records
(:func:`autoplace.cost_model.table.fit_vm_overhead` with ``in_context=True``).

Used where the device is on this machine: the profiler times every ``model`` record's kernels in context
(``in_context_us``, one value per kernel launch, in launch order) and ``optimize(measure="auto")`` times a new
model's kernels so (a ``context`` record); a cost table prices the kernels of a model it has in-context times
of with them (:meth:`autoplace.cost_model.CostTable.latencies`). A kernel of a plan that mixes devices meets
neighbours from the same device only in part: there the times of the single-device build are an estimate.
"""

from __future__ import annotations

import hashlib
import itertools
import time

import numpy as np

#: Version of the in-context timing (records carry it as ``in_context_timing``; other versions are re-timed).
IN_CONTEXT_TIMING = "vm-instrument/3"
#: The VM's call that does nothing: its readings are the hook's own cost.
NO_OP_CALL = "vm.builtin.null_value"
#: The VM's call a reshape kernel becomes (a view: ``RewriteDataflowReshape`` in the VM build).
RESHAPE_CALL = "vm.builtin.reshape"
#: Samples kept (the calm ones when the host-speed canary is given), each of back-to-back runs of the model.
DEFAULT_SAMPLES = 7
#: Most runs in one sample (a model of a few microseconds runs this many times in its 20 ms).
MAX_RUNS_PER_SAMPLE = 200


#: In-context timings taken in a slow phase of the host are told apart from real ones by the model's kernels'
#: own times (each kernel's larger of its warm and in-model times, timed in rounds): a model's in-context times
#: adding up to more than this many times those, plus :data:`CEILING_US_PER_LAUNCH` per kernel, were timed slow.
#: Every model record of the Zen 4 and Intel Xeon profiles with in-context times (195 models, 0.8 us to 5.1 ms)
#: lies within 1.2 times its kernels plus 0.87 us per kernel (the VM's calls that serve each kernel: allocating
#: its output, views); the 67 of over 100 us within 0.63-1.11 times. On the Zen 4 (session 18) the host had
#: phases of a minute and more in which models ran 1.25-2.2x slow while the host-speed canary (a small matmul)
#: read 1.04-1.06 against 1.01-1.03 in calm ones, and ``measure="auto"`` read inception-base's in-context times
#: at 2.2 times its end-to-end latency, resnet-base's at 1.5, t5-encoder-base's at 1.4.
CEILING_RATIO = 1.25
#: See :data:`CEILING_RATIO`.
CEILING_US_PER_LAUNCH = 1.0


def in_context_ceiling_us(kernel_us) -> float | None:
    """The most a model's in-context times may add up to before they count as timed in a slow phase of the host
    (:data:`CEILING_RATIO`), from each kernel's own time in microseconds (launch order); None when a kernel's
    time is unknown."""
    values = [float(v) for v in kernel_us] if kernel_us else []
    if not values or not all(np.isfinite(v) and v >= 0 for v in values):
        return None
    return CEILING_RATIO * float(np.sum(values)) + CEILING_US_PER_LAUNCH * len(values)


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


def _hook_entry_us(call_args: list, repeat: int = 7, number: int = 20) -> list:
    """For each argument list (one per VM call of a run): how long a no-op Python function takes called through
    TVM's FFI with the arguments the hook gets for that call (each wrapped as a Python object: about 0.1 us a
    tensor, more for shapes and storage), the median of ``repeat`` timings of ``number`` calls, in us."""
    import tvm_ffi

    noop = tvm_ffi.convert(lambda *a: 0)
    out = []
    for one in call_args:
        noop(*one)
        timings = []
        for _ in range(repeat):
            start = time.perf_counter()
            for _ in range(number):
                noop(*one)
            timings.append((time.perf_counter() - start) / number * 1e6)
        out.append(float(np.median(timings)))
    return out


def time_in_context(executable, devices, args: list, units, *, samples: int = DEFAULT_SAMPLES, speed=None,
                    patience_s: float = 3.0, sample_ms: float = 20.0) -> dict:
    """Every kernel of one single-target build timed inside its runs.

    Parameters
    ----------
    executable : tvm.relax.VMExecutable or tvm.runtime.Module
        The model built on one target (:func:`autoplace.profile.job.model_placement`), or its library loaded.
    devices : list of tvm.runtime.Device
        As the executable's runner has them.
    args : list of tvm.runtime.Tensor
        ``main``'s arguments on their devices (inputs, then weights).
    units : list of autoplace.profile.Unit
        The model's kernels on that target, in launch order (:func:`autoplace.profile.extract_units`); only their
        ``func_name`` is read.
    samples : int
        Samples to keep, each of back-to-back runs lasting about ``sample_ms`` (at least two runs; the first
        run of each is left out: it finds the caches as whatever ran before the sample left them).
    speed : autoplace.profile.host_speed.HostSpeed, optional
        Keep the samples timed while the host ran calm (:meth:`HostSpeed.calm_samples`).

    Returns
    -------
    dict
        ``in_context_us`` (per unit: the median over the runs kept of its kernel and of the VM's calls since
        the kernel before - allocating its output, a view - each less the hook's cost), ``in_context_kernel_us``
        (the kernels alone), ``in_context_hook_us`` (the hook's cost over one run), ``in_context_runs``,
        ``in_context_timing``, ``in_context_wall_us`` (the build's end-to-end latency without the hook, timed in the
        same samples: the median over the samples kept), and with ``speed`` ``in_context_host_slowdown`` and ``in_context_apart`` (the samples
        kept were all read with the cores apart, :meth:`HostSpeed.calm_samples`); or ``in_context_error`` (why not)
        when the calls do not match the units.
    """
    # the runtime's VirtualMachine (relax.VirtualMachine is it): a bundle's runner has the runtime alone
    from tvm.runtime.vm import VirtualMachine

    vm = VirtualMachine(executable, devices)
    syncs = [d for d in devices if d.dlpack_device_type() != 1]  # asynchronous devices: wait for the kernel to end
    calls: list = []
    captured: list = []  # the hook's arguments of every call of one run, to time its cost with
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

    def capture(func, name, before_run, ret_value, *call_args):
        if not before_run:
            captured.append((func, name, False, ret_value, *call_args))
        return 0

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

    vm.set_instrument(hook)
    one_run()
    number = int(min(MAX_RUNS_PER_SAMPLE, max(2, np.ceil(sample_ms * 1e3 / max(one_run(), 1.0)))))
    per_sample: list = []
    # The same build without the hook, timed as a plan is timed end to end (``runner.time_us``: the VM's
    # time_evaluator, after a run it leaves out), right after the hook's runs of each sample: the model's latency
    # in the very phase of the host its kernels were read in (``in_context_wall_us``).
    plain = vm.time_evaluator("main", syncs[0] if syncs else devices[0], number=max(1, number - 1), repeat=1)
    plain_us: list = []

    def one_sample() -> float:
        recorded.clear()
        hooked_us = [one_run() for _ in range(number)]
        per_sample.append(list(recorded[1:]))
        vm.set_instrument(None)
        plain_us.append(float(plain(*args).results[0]) * 1e6)
        vm.set_instrument(hook)
        return float(np.mean(hooked_us[1:]))

    extra = {}
    if speed is None:
        for _ in range(samples):
            one_sample()
        kept_samples = list(range(len(per_sample)))
    else:
        calm = speed.calm_samples(one_sample, samples, patience_s)
        kept_samples = list(calm["kept_index"])
        extra = dict(in_context_host_slowdown=calm["host_slowdown"], in_context_apart=calm["apart"])
    vm.set_instrument(None)
    kept = [run for i in kept_samples for run in per_sample[i]]
    extra["in_context_wall_us"] = float(np.median([plain_us[i] for i in kept_samples]))
    names = [name for name, _ in kept[0]]
    try:
        if any([name for name, _ in run] != names for run in kept):
            raise ValueError("the runs made different calls")
        kernels = align_calls(names, units)
    except ValueError as err:
        return dict(in_context_error=str(err), in_context_timing=IN_CONTEXT_TIMING)
    readings = np.median(np.array([[us for _, us in run] for run in kept]), axis=0)  # per call
    # The hook's cost in a reading: its return to the VM and its next entry with the call's arguments. A no-op
    # call (no arguments) reads that return and an entry without arguments; what the call's own arguments add
    # to the entry is timed on the same arguments.
    vm.set_instrument(capture)
    main(*args)
    vm.set_instrument(None)
    entry = np.array(_hook_entry_us([c[:4] for c in captured[:1]] + captured))
    no_op = [i for i, name in enumerate(names) if name == NO_OP_CALL]
    if no_op:
        hook_us = float(np.median(readings[no_op] - entry[1:][no_op])) + entry[1:]
    else:  # without a no-op call: the cheapest reading is the hook's return and an entry without arguments
        hook_us = float(readings.min()) - entry[0] + entry[1:]
    net = np.maximum(readings - hook_us, 0.0)
    # Each kernel with the VM's own calls since the kernel before (its output's allocation, views): the calls
    # before the first kernel and after the last go with the first and the last.
    bounds = [0, *[k + 1 for k in kernels[:-1]], len(names)]
    times = [float(net[a:b].sum()) for a, b in itertools.pairwise(bounds)]
    return dict(in_context_us=times, in_context_kernel_us=[float(net[k]) for k in kernels],
                in_context_hook_us=float(hook_us.sum()), in_context_runs=len(kept),
                in_context_timing=IN_CONTEXT_TIMING, **extra)


def in_context_record(model_name: str, units, target_kind: str, timing: dict) -> dict:
    """A ``context`` record: the in-context times of a model's kernels on a target kind, without the model's
    end-to-end latency (what :func:`autoplace.optimize` measures for a model the profile lacks)."""
    keys = [u.key for u in units]
    return dict(kind="context", key=context_key(keys, target_kind), target=target_kind, model=model_name,
                unit_keys=keys, status="ok" if "in_context_us" in timing else "error", **timing)
