"""How should an in-model timing read a kernel's inputs back? Against the kernels' times inside their models.

The profiler times a CPU kernel *in-model* (:mod:`autoplace.profile.cache_state`): every core's L2 evicted, then
the kernel's activation inputs read back in. It reads them back with a streaming kernel ``y = x + x``, which
also *writes* as many bytes as it reads (a new ``y``): lines the kernel then has to write back while it runs,
and that push its own output out of the last-level cache. On the AMD Zen 3 (512 KB L2 per core) seed003-base's
one kernel (four 4 MB tensors) read 1.33x its warm time in-model, while the model ran it at its warm time.

For each model, in one process and in interleaved rounds, every kernel of at least ``--min-us`` is timed:

* ``in_context``: inside the model's runs (:func:`autoplace.profile.in_context.time_in_context`, the truth);
* ``warm``: ``time_evaluator`` repeating it;
* ``stream``: in-model as the profiler does now (the inputs read back by ``y = x + x``);
* ``read``: in-model, the inputs read back by a kernel that loads every cache line of them and writes one float
  per line (``y[i] = x[16 i]``: 1/16 of the bytes);
* ``read_out``: as ``read``, and the kernel's outputs read back too (where a model's memory plan reuses a buffer
  a few kernels old).

    python experiments/in_model_reread.py [--models seed003-base mlp-base bert-base ...] [--rounds 3]

Writes ``experiments/results/<hardware id>/in_model_reread.csv`` (one row per kernel and round) and prints,
per mode, the median and 10-90% of ``mode / in_context`` over the kernels, and per model the kernels' sums.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import pandas as pd

DEFAULT_MODELS = ("seed003-base", "mlp-base", "bert-base", "cnn-base", "inception-base", "t5-encoder-base",
                  "llama-base")
MODES = ("warm", "stream", "read", "read_out")
READ_PREPROC = "autoplace.experiments.in_model_read"
_READERS: dict = {}


def _reader(n: int):
    """``y[i] = x[16 i]`` over ``n`` float32 (``n`` a multiple of 16), parallel: loads every 64-byte line of ``x``
    and writes a sixteenth of its bytes."""
    if n not in _READERS:
        import tvm
        from tvm import te

        from autoplace.backend.cpu_schedules import cpu_target

        x = te.placeholder((n,), "float32", name="x")
        y = te.compute((n // 16,), lambda i: x[i * 16], name="y")
        sch = tvm.s_tir.Schedule(te.create_prim_func([x, y]))
        (loop,) = sch.get_loops(sch.get_sblock("y"))
        if n // 16 >= 64:
            outer, _ = sch.split(loop, [None, 64])
            sch.parallel(outer)
        lib = tvm.tirx.build(sch.mod, target=cpu_target("llvm"))
        _READERS[n] = (lib["main"], tvm.runtime.empty((n // 16,), "float32", tvm.cpu()))
    return _READERS[n]


def register_read_preproc(reread_args) -> str:
    """The profiler's in-model preprocessing with the read-back done by :func:`_reader` (the eviction as now)."""
    import tvm

    from autoplace.profile import cache_state

    n = 2 * cache_state.usable_l2_bytes() // 4
    if n not in cache_state._EVICTION_BUFFERS:
        cache_state._EVICTION_BUFFERS[n] = tvm.runtime.tensor(np.ones(n, "float32"))
    evict, buffer = cache_state._streamer(n), cache_state._EVICTION_BUFFERS[n]
    reread_args = tuple(reread_args)

    def preproc(*args):
        evict(buffer)
        for i in reread_args:
            nbytes = int(np.prod(args[i].shape)) * np.dtype(str(args[i].dtype)).itemsize
            if nbytes >= cache_state.REREAD_MIN_BYTES and nbytes % 64 == 0:
                read, out = _reader(nbytes // 4)
                read(args[i]._create_view((nbytes // 4,), "float32"), out)

    tvm.register_global_func(READ_PREPROC, preproc, override=True)
    return READ_PREPROC


def time_modes(unit, lib, args) -> dict:
    """One kernel's median time (us) in every mode of :data:`MODES`."""
    import tvm

    from autoplace.profile.cache_state import activation_inputs, register_in_model_preproc

    inputs = activation_inputs(len(args), unit.num_outputs, unit.weight_args)
    outputs = list(range(len(args) - unit.num_outputs, len(args)))
    out = {}
    for mode in MODES:
        if mode == "warm":
            timer = lib.time_evaluator("main", tvm.cpu(), number=1, repeat=7, min_repeat_ms=10)
        else:
            preproc = (register_in_model_preproc(inputs) if mode == "stream"
                       else register_read_preproc(inputs + (outputs if mode == "read_out" else [])))
            timer = lib.time_evaluator("main", tvm.cpu(), number=1, repeat=7, min_repeat_ms=0, f_preproc=preproc)
        out[mode] = float(np.median(timer(*args).results)) * 1e6
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", default=list(DEFAULT_MODELS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--min-us", type=float, default=20.0, help="kernels below this (warm) are left out")
    parser.add_argument("--tag", default="")
    args = parser.parse_args(argv)
    from warm_vs_cold_kernels import compiled_kernels

    import autoplace
    from autoplace import zoo
    from autoplace.profile.hardware import hardware_metadata
    from autoplace.profile.job import in_context_fields, model_placement
    from autoplace.targets import TargetSet

    rows = []
    for spec in args.models:
        model = zoo.parse(spec)
        graph = autoplace.op_graph(model)
        placement = model_placement(model, graph, TargetSet({"cpu": "llvm"}), "cpu")
        inputs = model.random_inputs()
        units, kernels = compiled_kernels(model, graph)
        first = {}
        for unit in units:
            first.setdefault(unit.key, unit)
        for round_ in range(args.rounds):
            context = in_context_fields(placement, inputs, units)
            if "in_context_kernel_us" not in context:
                print(f"{spec}: no in-context times ({context.get('in_context_error')})")
                break
            per_key: dict = {}
            for unit, us in zip(units, context["in_context_kernel_us"]):
                per_key.setdefault(unit.key, []).append(us)
            for key, unit in first.items():
                if float(np.median(per_key[key])) < args.min_us:
                    continue
                lib, call_args = kernels[key]
                times = time_modes(unit, lib, call_args)
                rows.append(dict(model=spec, round=round_, key=key, func_name=unit.func_name, launches=len(per_key[key]),
                                 in_context_us=float(np.median(per_key[key])), **{f"{m}_us": v for m, v in times.items()}))
            part = pd.DataFrame([r for r in rows if r["model"] == spec and r["round"] == round_])
            if not part.empty:
                sums = {m: float((part[f"{m}_us"] * part["launches"]).sum()) for m in ("in_context", *MODES)}
                print(f"{spec} round {round_}: {len(part)} kernels, sums vs in-context "
                      + ", ".join(f"{m} {sums[m] / sums['in_context'] - 1:+.1%}" for m in MODES), flush=True)
    table = pd.DataFrame(rows)
    meta = hardware_metadata()
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", meta["hardware_id"],
                       f"in_model_reread{args.tag}.csv")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    table.to_csv(out, index=False)
    if table.empty:
        return
    for m in MODES:
        ratio = table[f"{m}_us"] / table["in_context_us"]
        print(f"{m:>9} / in-context over {len(table)} kernel timings: median {ratio.median():.3f}, "
              f"10-90% {ratio.quantile(.1):.3f}-{ratio.quantile(.9):.3f}, "
              f"median |log| {np.median(np.abs(np.log(ratio))):.3f}")
    sums = table.assign(**{f"{m}_x": table[f"{m}_us"] * table["launches"] for m in ("in_context", *MODES)})
    sums = sums.groupby(["model", "round"])[[f"{m}_x" for m in ("in_context", *MODES)]].sum()
    for m in MODES:
        sums[f"{m}_err"] = sums[f"{m}_x"] / sums["in_context_x"] - 1
    print(sums.groupby("model")[[f"{m}_err" for m in MODES]].median().to_string(float_format=lambda v: f"{v:+.1%}"))
    print(f"wrote {out} on {meta['hardware_id']} (LLVM cpu {meta['llvm_cpu']}, L2 {meta.get('l2_bytes', '?')})")


if __name__ == "__main__":
    main()
