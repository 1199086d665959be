"""In which cache a kernel finds its data inside a model, and timing a kernel in that state.

``time_evaluator`` repeats a kernel on the same arguments, so its timing is *warm*: weights, inputs and
output stay in the L1/L2 caches between repeats when they fit. A model of more than the L2 runs each
kernel right after the one that wrote its input: the input is in L2, the weights (read once per call)
come from L3 or memory. On an Intel Xeon (2 MB L2 per core) warm sums under-priced 9 base models by 16%
on average (bert-base -18%, gpt2-base -27%, inception-base -24%); timed *in-model* - every core's L2
evicted, then the kernel's activation inputs read back in - they were off by 5% on average
(``experiments/warm_vs_cold_kernels.py``, mode ``l2_evicted_inputs_read``).

The profiler times CPU kernels both ways (:func:`register_in_model_preproc`, ``in_model_median_us`` in
their records) and a cost table prices a model's kernels with the in-model time when the model touches
more bytes per call than the L2 of its cores holds (:func:`model_runs_in_model`), warm otherwise
(small models stay in L2 from one call to the next; a model of one kernel finds it as its warm timing leaves it).
Between the two, a model pays the share of the in-model excess that its L2 cannot hold (:func:`in_model_share`).
"""

from __future__ import annotations

import numpy as np

# How the in-model time is taken, and the L2 it evicts: defined in :mod:`.remote_runner` (copied alone to device
# boxes, whose runner times a bundle's CPU kernels in-model the same way, with a streaming kernel of its own).
# IN_MODEL_TIMING's version 1 timed kernels under 5 us warm only; one run per sample turned out to add no overhead
# to speak of (0.0-0.2 us on 1-40 us kernels), and what small kernels lose to the eviction (a 1.7 us embedding
# gather: 5.9 us) is what they lose in a model larger than the L2.
from .remote_runner import (  # noqa: F401  (re-exported: the profiler and the cost table read them here)
    DEFAULT_L2_PER_CORE_BYTES,
    IN_MODEL_TIMING,
    PREPROC_NAME,
    REREAD_MIN_BYTES,
    WEIGHTS_COLD_TIMING,
    activation_inputs,
    l2_bytes,
)


def usable_l2_bytes() -> int:
    """:func:`l2_bytes` of the CPUs this process could use when autoplace was imported
    (:data:`~autoplace.backend.cpu_threads.USABLE_CPUS`), not of the calling thread's affinity now: TVM's pool,
    with fewer threads than CPUs, pins the thread that launches a parallel kernel to one CPU, and the L2 read then
    is one core's (the L2 a job evicts and records would change mid-job)."""
    from ..backend.cpu_threads import USABLE_CPUS

    return l2_bytes(len(USABLE_CPUS) if USABLE_CPUS else None)


_STREAMERS: dict = {}
_EVICTION_BUFFERS: dict = {}


def _streamer(n: int):
    """``x + x`` over ``n`` float32 as autoplace builds it for the CPU (parallel from 32K elements: each
    thread streams through its own share, so each core's cache sees its part); cached per size."""
    if n not in _STREAMERS:
        import tvm
        from tvm import relax

        from ..backend.cpu_schedules import cpu_target
        from ..backend.pipeline import single_device_build

        bb = relax.BlockBuilder()
        x = relax.Var("x", relax.TensorType((n,), "float32"))
        with bb.function("main", [x]):
            with bb.dataflow():
                y = bb.emit_output(relax.op.add(x, x))
            bb.emit_func_output(y)
        exe = single_device_build(bb.get(), cpu_target("llvm"))
        _STREAMERS[n] = relax.VirtualMachine(exe, tvm.cpu())["main"]
    return _STREAMERS[n]


def register_in_model_preproc(reread_args=()) -> str:
    """Register (again) the ``time_evaluator`` preprocessing function that puts a kernel's arguments where a
    model leaves them: it evicts every core's L2 (a parallel pass over twice the L2 of all cores), then reads
    the arguments at positions ``reread_args`` (the activation inputs) back in; returns its name.

    Only the first run after it is in that state: time with ``number=1, min_repeat_ms=0``.
    """
    import tvm

    n = 2 * usable_l2_bytes() // 4
    if n not in _EVICTION_BUFFERS:  # one buffer for every kernel timed
        _EVICTION_BUFFERS[n] = tvm.runtime.tensor(np.ones(n, "float32"))
    evict, buffer = _streamer(n), _EVICTION_BUFFERS[n]
    reread_args = tuple(reread_args)

    def preproc(*args):  # returns nothing: the timer takes no object back
        evict(buffer)
        for i in reread_args:
            nbytes = int(np.prod(args[i].shape)) * np.dtype(str(args[i].dtype)).itemsize
            if nbytes >= REREAD_MIN_BYTES and nbytes % 4 == 0:
                _streamer(nbytes // 4)(args[i]._create_view((nbytes // 4,), "float32"))

    tvm.register_global_func(PREPROC_NAME, preproc, override=True)
    return PREPROC_NAME


def _launch_bytes(unit) -> tuple:
    """``(key, weight bytes, output bytes)`` of one launch: a Unit or a unit record (dict or pandas row)."""
    if hasattr(unit, "prim_func"):  # a Unit
        return str(unit.key), int(finite_or_zero(unit.weight_bytes)), int(finite_or_zero(unit.nbytes_out))
    return (str(unit.get("key")), int(finite_or_zero(unit.get("weight_bytes", 0))),
            int(finite_or_zero(unit.get("bytes_out", 0))))


def touched_bytes(units) -> int:
    """Bytes one call of a model touches: its distinct kernels' weights plus every launch's output.

    ``units``: the model's kernels in launch order, with repeats (Units or unit records: ``key``,
    ``weight_bytes``, ``bytes_out``/``nbytes_out``).
    """
    weights, outputs = {}, 0
    for key, weight, out in map(_launch_bytes, units):
        weights[key] = weight
        outputs += out
    return sum(weights.values()) + outputs


def bytes_per_call(units) -> int:
    """Bytes that pass through the caches in one call of a model: every launch's weights (each layer's are its
    own, even where layers share a kernel) plus every launch's output. Between two calls' reads of one weight the
    rest of this passes through the caches: what decides whether the host's caches keep the weights from one call
    to the next (:meth:`autoplace.cost_model.CostTable.runs_weights_cold`).

    ``units``: as :func:`touched_bytes`.
    """
    return sum(weight + out for _, weight, out in map(_launch_bytes, units))


def in_model_share(units, l2_total_bytes: int | None) -> float:
    """The share of its kernels' in-model excess (in-model time less warm time) a model pays in one call: the share
    of the bytes it touches (:func:`touched_bytes`) that its L2 cannot hold, ``1 - L2 / touched``, where it runs
    in-model (:func:`model_runs_in_model`); 0 where it does not.

    The in-model time evicts every byte of the L2 before each kernel; a model a little larger than its L2 keeps
    most of its data there from one call to the next, so it pays a part of that, growing with how far it outgrows
    the L2. Measured as ``(end to end - VM probe - warm sum) / (in-model sum - warm sum)`` over the models whose
    two sums differ by 5% or more (session 69, ``experiments/weights_cold_sums.py``, ``in_model_share``): the AMD
    Zen 3's mobilenetv2 at 1.05x its L2 paid 0.46 of it (this rule: 0.05), cnn-base on the Xeon f6m167 at 1.56x
    paid 0.20 (0.36), inception-base on both Xeons at 2.61x 0.75 and 0.86 (0.62), convnext-base on the Zen 3 at
    4.73x 0.72 (0.79), bert-base on both Xeons at 5.36x 0.56 and 0.84 (0.81). Over the 60 models of the five CPU
    profiles that run in-model, their measured kernels priced so (and the VM's overheads fitted so) sum to within
    15.6% of their end-to-end times on the Zen 3 (in-model 19.0%: mobilenetv2; warm 17.3%), 4.9% and 3.6% on the
    Xeons (in-model 8.5 and 4.1%, warm 15.8 and 21.1%), 9.1% on the Zen 5 (8.5%, warm 11.6%) and 18.0% on the
    Zen 4 (18.3%, warm 17.6%); median errors 2.1, 3.7, 1.9, 2.1 and 7.0% (in-model 2.2, 5.0, 3.1, 2.2, 7.2%)
    (session 70, ``share_err`` of ``experiments/weights_cold_sums.py``).
    """
    units = list(units)
    if not model_runs_in_model(units, l2_total_bytes):
        return 0.0
    return float(max(0.0, 1.0 - int(l2_total_bytes) / touched_bytes(units)))


def finite_or_zero(value) -> float:
    """``value`` as a float, 0 when missing, not a number or not finite."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        return 0.0
    return value if np.isfinite(value) else 0.0


def model_runs_in_model(units, l2_total_bytes: int | None) -> bool:
    """Whether a model's kernels run in-model: its data does not stay in the L2 of its cores from one call to the
    next (:func:`touched_bytes` above ``l2_total_bytes``), and it launches more than one kernel.

    Between two runs of a kernel the rest of the model runs; in a model of one kernel nothing else does, and the
    kernel finds its data where its warm timing leaves it, however large (seed003-base, one 16 MB kernel on the
    AMD Zen 3: 127 us warm, the model 137 us end to end; in-model 147-491 us over six rounds, the reread of inputs
    larger than the L2 adding what the model never pays, and the model of in-model times priced it 250 us). False
    when the L2 is unknown (None).
    """
    units = list(units)
    distinct = {str(u.key if hasattr(u, "prim_func") else u.get("key")) for u in units}
    return l2_total_bytes is not None and len(distinct) > 1 and touched_bytes(units) > int(l2_total_bytes)
