"""Copy costs between devices and VM call overhead, measured as the Relax VM runs them.

Copies are timed as ``R.to_vdevice`` inside a compiled Relax function (what a placed module
executes), over sizes from 4 bytes to hundreds of MB, and fitted with
``latency_us = alpha_us + nbytes * us_per_byte`` by non-negative least squares.
"""

from __future__ import annotations

import numpy as np
import scipy.optimize
import tvm
from tvm import relax

from ..backend.pipeline import build
from ..targets import TargetSet

#: Copy sizes measured by default: 4 B .. 256 MiB (powers of 4).
DEFAULT_COPY_SIZES = tuple(4 ** k for k in range(1, 15))


def _vm_time_us(executable, targets: TargetSet, args, *, repeat: int, min_repeat_ms: int) -> dict:
    vm = relax.VirtualMachine(executable, targets.devices)
    vm.set_input("main", *args)
    vm["main"](*args)
    timer = vm.time_evaluator("invoke_stateful", targets.host.device, number=1, repeat=repeat,
                              min_repeat_ms=min_repeat_ms)
    samples = np.asarray(timer("main").results) * 1e6
    return dict(median_us=float(np.median(samples)), min_us=float(samples.min()), max_us=float(samples.max()),
                std_us=float(samples.std()), samples=len(samples))


def copy_module(nbytes: int, src, dst, targets: TargetSet) -> tvm.IRModule:
    """``main(x on src) = to_vdevice(x, dst)`` for a float32 tensor of ``nbytes`` (rounded up to 4)."""
    n = max(1, nbytes // 4)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((n,), "float32", targets[src].vdevice))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.to_vdevice(x, targets[dst].vdevice))
        bb.emit_func_output(y)
    mod = bb.get()
    mod.update_global_info("vdevice", targets.vdevices)
    return mod


def measure_copies(targets: TargetSet, src: str, dst: str, sizes=DEFAULT_COPY_SIZES, *, repeat: int = 7,
                   min_repeat_ms: int = 20, progress=None) -> list[dict]:
    """Time ``to_vdevice`` from ``src`` to ``dst`` for each size; one result dict per size."""
    results = []
    for nbytes in sizes:
        mod = copy_module(nbytes, src, dst, targets)
        executable = build(mod)
        x = tvm.runtime.tensor(np.zeros(max(1, nbytes // 4), "float32"), targets[src].device)
        res = _vm_time_us(executable, targets, [x], repeat=repeat, min_repeat_ms=min_repeat_ms)
        results.append(dict(nbytes=int(max(1, nbytes // 4) * 4), **res))
        if progress is not None:
            progress.update(1)
    return results


def fit_copy_cost(nbytes, latency_us) -> tuple[float, float]:
    """Fit ``latency = alpha + nbytes * per_byte`` (both >= 0) by least squares on relative error.

    Relative weighting (each point divided by its latency) keeps the small copies, whose cost is all
    alpha, from being ignored next to the large ones.
    """
    nbytes = np.asarray(nbytes, dtype=float)
    latency = np.asarray(latency_us, dtype=float)
    weight = 1.0 / np.maximum(latency, 1e-3)
    a = np.stack([np.ones_like(nbytes), nbytes], axis=1) * weight[:, None]
    (alpha, per_byte), _ = scipy.optimize.nnls(a, latency * weight)
    return float(alpha), float(per_byte)


def launch_module(calls: int, vdevice) -> tvm.IRModule:
    """``main(x)`` applying ``calls`` chained one-element adds: to time the VM's cost of one kernel call."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1,), "float32", vdevice))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = x
            for _ in range(calls):
                y = bb.emit(relax.op.add(y, y))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()


def args_module(num_args: int, elems: int, vdevice) -> tvm.IRModule:
    """``main(x0, ..., x{k-1})`` returning ``x0 + x0`` (``elems`` float32): VM cost of arguments and of
    allocating the returned tensor."""
    bb = relax.BlockBuilder()
    xs = [relax.Var(f"x{i}", relax.TensorType((elems,), "float32", vdevice)) for i in range(num_args)]
    with bb.function("main", xs):
        with bb.dataflow():
            out = bb.emit_output(relax.op.add(xs[0], xs[0]))
        bb.emit_func_output(out)
    return bb.get()


#: Rounds of the VM-overhead probes (:func:`measure_launch_overhead`), the fastest counting. One round on the Zen 3
#: (session 58) read ``per_arg_us`` 0.095 and 0.167 us in two runs 12 s apart (0.25 and 0.325 a week before), and
#: seed003, one 1 us kernel on three inputs, is priced mostly from it.
LAUNCH_PROBE_ROUNDS = 5
#: Elements of the float32 tensor whose allocation the ``alloc`` probe times (4 MiB).
ALLOC_ELEMS = 1 << 20


def alloc_alone_func():
    """The ``alloc`` probe's ``x + x`` over :data:`ALLOC_ELEMS` float32 as a bare kernel (``main``), timed alone to
    take the kernel's own time out of the probe."""
    from tvm import te

    a = te.placeholder((ALLOC_ELEMS,), "float32", name="a")
    func = te.create_prim_func([a, te.compute((ALLOC_ELEMS,), lambda i: a[i] + a[i])])
    return func.with_attr("global_symbol", "main")


def measure_launch_overhead(targets: TargetSet, name: str, *, repeat: int = 7, min_repeat_ms: int = 20,
                            rounds: int = LAUNCH_PROBE_ROUNDS) -> dict:
    """The VM's own costs on target ``name``, beyond the kernels:

    * ``median_us``: one kernel call (a 65-call chain minus a 1-call one, per call);
    * ``single_call_us``: invoking a 1-argument ``main`` that makes one tiny kernel call;
    * ``per_arg_us``: each further argument of ``main``;
    * ``alloc_us_per_byte``: allocating the returned tensor (a fresh buffer each call: page faults for
      large ones), from a 4 MiB ``add`` timed in the VM minus the same kernel timed alone.

    Each probe is built once and timed in ``rounds`` rounds, one probe after the other, and its fastest round
    counts: a busy host only adds to what a call costs (:data:`LAUNCH_PROBE_ROUNDS`).
    """
    target = TargetSet({name: targets[name].target})
    vdevice, dev = target[name].vdevice, target[name].device

    def vm_probe(mod, args):
        mod.update_global_info("vdevice", target.vdevices)
        executable = build(mod, fuse=False)
        return lambda: _vm_time_us(executable, target, args, repeat=repeat, min_repeat_ms=min_repeat_ms)["median_us"]

    one = tvm.runtime.tensor(np.zeros(1, "float32"), dev)
    probes = {calls: vm_probe(launch_module(calls, vdevice), [one]) for calls in (1, 65)}
    probes["args"] = vm_probe(args_module(9, 1, vdevice), [one] * 9)
    if target[name].kind == "llvm":  # the kernel-alone timing below runs on this machine's CPU
        big = tvm.runtime.tensor(np.zeros(ALLOC_ELEMS, "float32"), dev)
        probes["alloc"] = vm_probe(args_module(1, ALLOC_ELEMS, vdevice), [big])
        kernel = tvm.tirx.build(tvm.IRModule({"main": alloc_alone_func()}), target=target[name].target)
        out = tvm.runtime.tensor(np.zeros(ALLOC_ELEMS, "float32"), dev)
        timer = kernel.time_evaluator(kernel.entry_name, dev, number=1, repeat=repeat, min_repeat_ms=min_repeat_ms)
        probes["alone"] = lambda: float(np.median(timer(big, out).results)) * 1e6
    fastest = dict.fromkeys(probes, np.inf)
    for _ in range(max(1, int(rounds))):
        for probe, time_us in probes.items():
            fastest[probe] = min(fastest[probe], time_us())
    single = float(fastest[1])
    result = dict(median_us=max(0.0, (fastest[65] - single) / 64), single_call_us=single,
                  per_arg_us=max(0.0, (fastest["args"] - single) / 8))
    if "alloc" in probes:
        result["alloc_us_per_byte"] = max(0.0, fastest["alloc"] - fastest["alone"] - single) / (4 * ALLOC_ELEMS)
    return {key: float(value) for key, value in result.items()}
