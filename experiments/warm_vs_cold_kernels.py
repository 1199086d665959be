"""Are kernels timed warm the kernels a model runs? Warm vs flushed kernel timings against the end to end.

The profiler times each kernel with ``time_evaluator`` repeating it on the same arguments, so a kernel's
weights stay in cache between repeats. A model reads each weight once per call. For each model, in one
process and in interleaved rounds: the all-CPU build end to end (median), the sum over its kernel launches of
each kernel timed warm (as the profiler does) and with every argument but the first flushed from the cache
before each run (``f_preproc="cache_flush_cpu_non_first_arg"``: weights, and also outputs and second
activations). Neither sum includes the VM's call overheads (a few us per model).

    python experiments/warm_vs_cold_kernels.py [--models mlp-base bert-base ...] [--rounds 3]

Writes ``experiments/results/warm_vs_cold_kernels.csv``.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import pandas as pd

DEFAULT_MODELS = ("mlp-base", "bert-base", "t5-encoder-base", "cnn-base", "inception-base", "bert", "cnn")
FLUSH = "cache_flush_cpu_non_first_arg"


def compiled_kernels(model, graph):
    """``(units, {key: (runtime module, argument tensors)})`` of the model's CPU kernels, as the profiler builds
    them (each PrimFunc with its own target)."""
    import tvm

    from autoplace.profile.measure import _random_args
    from autoplace.profile.units import extract_units

    units = extract_units(model, "llvm", graph=graph)
    kernels = {}
    for unit in units:
        if unit.key in kernels:
            continue
        func = unit.prim_func.with_attr("global_symbol", "main")
        target = func.attrs["target"]
        lib = tvm.tirx.build(tvm.IRModule({"main": func.without_attr("target")}), target=target)
        kernels[unit.key] = (lib, _random_args(unit.arg_shapes, unit.arg_dtypes, unit.num_outputs, tvm.cpu()))
    return units, kernels


def kernel_sum_us(units, kernels, flush: bool) -> float:
    import tvm

    per = {}
    for key, (lib, args) in kernels.items():
        timer = lib.time_evaluator("main", tvm.cpu(), number=1, repeat=5, min_repeat_ms=0 if flush else 10,
                                   f_preproc=FLUSH if flush else "")
        per[key] = float(np.median(timer(*args).results)) * 1e6
    return sum(per[u.key] for u in units)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", default=list(DEFAULT_MODELS))
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    import autoplace
    from autoplace import zoo
    from autoplace.profile.job import model_placement
    from autoplace.targets import TargetSet

    rows = []
    for spec in args.models:
        model = zoo.parse(spec)
        graph = autoplace.op_graph(model)
        runner = model_placement(model, graph, TargetSet({"cpu": "llvm"}), "cpu").runner
        inputs = model.random_inputs()
        units, kernels = compiled_kernels(model, graph)
        number = max(1, int(20_000 / float(np.median(runner.time_us(inputs, repeat=3)))))
        for round_ in range(args.rounds):
            e2e = float(np.median(runner.time_us(inputs, number=number, repeat=5)))
            warm, cold = kernel_sum_us(units, kernels, False), kernel_sum_us(units, kernels, True)
            rows.append(dict(model=spec, round=round_, kernels=len(units), end_to_end_us=e2e, warm_sum_us=warm,
                             flushed_sum_us=cold, warm_err=warm / e2e - 1, flushed_err=cold / e2e - 1))
            print(f"{spec} round {round_}: end to end {e2e:.1f} us, kernels warm {warm:.1f} ({warm / e2e - 1:+.0%}), "
                  f"flushed {cold:.1f} ({cold / e2e - 1:+.0%})", flush=True)
    table = pd.DataFrame(rows)
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "warm_vs_cold_kernels.csv")
    table.to_csv(out, index=False)
    print(table.groupby("model")[["warm_err", "flushed_err"]].agg(["min", "median", "max"]).to_string(
        float_format=lambda v: f"{v:+.1%}"))
    print(f"wrote {out} (TVM_NUM_THREADS={os.environ.get('TVM_NUM_THREADS')})")


if __name__ == "__main__":
    main()
