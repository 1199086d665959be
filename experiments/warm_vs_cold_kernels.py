"""Are kernels timed warm the kernels a model runs? Warm vs flushed kernel timings against the end to end.

The profiler times each kernel with ``time_evaluator`` repeating it on the same arguments, so a kernel's
weights stay in cache between repeats. A model reads each weight once per call. For each model, in one
process and in interleaved rounds: the all-CPU build end to end (median), the sum over its kernel launches of
each kernel timed warm (as the profiler does), with only the model's weights flushed from every cache level
before each run (TVM's ``clflush`` of exactly the arguments that are ``main``'s weight parameters,
``Unit.weight_args``), and with every argument but the first flushed
(``f_preproc="cache_flush_cpu_non_first_arg"``: weights, and also outputs and second activations), and with
every core's L2 evicted before each run (``l2_evicted``: a parallel kernel streams through twice the machine's
L2 first, so a kernel finds its weights and inputs in L3, not in DRAM as after a flush), and the same with
the kernel's activation inputs (every input but the weights, from 4 KB) read back in after the eviction
(``l2_evicted_inputs_read``: weights in L3, inputs in L2, as a model runs a kernel right after the one that
wrote its input; what the profiler records as ``in_model_median_us``, :mod:`autoplace.profile.cache_state`).
No sum includes the VM's call overheads (a few us per model).

    python experiments/warm_vs_cold_kernels.py [--models mlp-base bert-base ...] [--rounds 3]

Writes ``experiments/results/<hardware id>/warm_vs_cold_kernels<tag>.csv``.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import pandas as pd

from autoplace.profile.cache_state import activation_inputs, register_in_model_preproc
from autoplace.profile.remote_runner import CACHE_FLUSH

DEFAULT_MODELS = ("mlp-base", "bert-base", "t5-encoder-base", "cnn-base", "inception-base", "bert", "cnn")
FLUSH = CACHE_FLUSH  # the profiler's weights-cold timing flushes with it too
FLUSH_WEIGHTS = "autoplace.experiments.flush_weights"
MODES = ("warm", "weights_flushed", "flushed", "l2_evicted", "l2_evicted_inputs_read")


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


def _register_weight_flush(weight_args) -> str:
    """Register (again) the preprocessing function that flushes the arguments ``weight_args`` only."""
    import tvm

    flush = tvm.get_global_func(FLUSH)  # skips its first argument: give it a placeholder there
    placeholder = tvm.runtime.tensor(np.zeros(1, "float32"))
    tvm.register_global_func(FLUSH_WEIGHTS, lambda *args: flush(placeholder, *[args[i] for i in weight_args]),
                             override=True)
    return FLUSH_WEIGHTS


def kernel_sum_us(units, kernels, mode: str) -> float:
    """Sum over the model's kernel launches of each kernel's median time in ``mode`` (one of MODES)."""
    import tvm

    weight_args = {u.key: u.weight_args for u in units}
    outputs = {u.key: u.num_outputs for u in units}
    per = {}
    for key, (lib, args) in kernels.items():
        if mode == "warm" or (mode == "weights_flushed" and not weight_args[key]):
            preproc, min_ms = "", 10
        else:
            if mode == "l2_evicted":
                preproc = register_in_model_preproc()
            elif mode == "l2_evicted_inputs_read":  # weights in L3, the activations it reads in L2: the profiler's
                preproc = register_in_model_preproc(activation_inputs(len(args), outputs[key], weight_args[key]))
            else:
                preproc = FLUSH if mode == "flushed" else _register_weight_flush(weight_args[key])
            min_ms = 0  # one run per sample: only the first run after a flush is cold
        timer = lib.time_evaluator("main", tvm.cpu(), number=1, repeat=5, min_repeat_ms=min_ms, f_preproc=preproc)
        per[key] = float(np.median(timer(*args).results)) * 1e6
    return sum(per[u.key] for u in units)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", default=list(DEFAULT_MODELS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tag", default="", help="suffix of the result file (warm_vs_cold_kernels<tag>.csv)")
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
            sums = {mode: kernel_sum_us(units, kernels, mode) for mode in MODES}
            rows.append(dict(model=spec, round=round_, kernels=len(units), weight_bytes=model.weight_nbytes,
                             end_to_end_us=e2e, **{f"{m}_sum_us": v for m, v in sums.items()},
                             **{f"{m}_err": v / e2e - 1 for m, v in sums.items()}))
            print(f"{spec} round {round_}: end to end {e2e:.1f} us, kernels "
                  + ", ".join(f"{m} {v:.1f} ({v / e2e - 1:+.0%})" for m, v in sums.items()), flush=True)
    table = pd.DataFrame(rows)
    from autoplace.profile.hardware import measured_by

    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", measured_by()["hardware_id"],
                       f"warm_vs_cold_kernels{args.tag}.csv")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    table.to_csv(out, index=False)
    print(table.groupby("model")[[f"{m}_err" for m in MODES]].agg(["min", "median", "max"]).to_string(
        float_format=lambda v: f"{v:+.1%}"))
    from autoplace.profile.hardware import hardware_metadata

    meta = hardware_metadata()
    print(f"wrote {out} on {meta['hardware_id']} (LLVM cpu {meta['llvm_cpu']}, "
          f"TVM_NUM_THREADS={os.environ.get('TVM_NUM_THREADS')})")


if __name__ == "__main__":
    main()
