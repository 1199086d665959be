"""Strided vector loads as contiguous loads + a shuffle (``autoplace.backend.strided_loads``): what it is worth here.

TVM 0.27 lowers a vector load whose lanes are 2-4 elements apart (a stride-2 convolution or pool vectorised along
its output row) to one scalar load and insert per lane. Every CPU build now lowers such loads of Contraction and
Pool kernels as ``s`` contiguous loads and one shuffle. This times both lowerings side by side on this machine:

* kernels: every kernel of the models whose scheduled TIR has such loads, built with TVM's default TIR pipeline
  and with autoplace's (``TIR_PIPELINE``), outputs compared, timed in interleaved rounds;
* models: each model placed all-CPU and built both ways, outputs compared, timed in interleaved rounds.

    python experiments/strided_loads.py [--models resnet-base mobilenetv2-base ...] [--rounds 5]

Writes ``experiments/results/<hardware id>/strided_loads_kernels.csv`` and ``strided_loads_models.csv``
(speedup = default pipeline's time / autoplace's; min over rounds for kernels, median of round medians for models).
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import pandas as pd
from results_folder import results_folder

DEFAULT_MODELS = ["resnet-base", "mobilenetv2-base", "cnn-base", "convnext-base", "swin-base", "whisper-encoder-base",
                  "inception-base", "bert-base"]


def kernel_rows(specs, rounds: int) -> pd.DataFrame:
    import tvm
    from kernel_timing import time_interleaved

    from autoplace import zoo
    from autoplace.backend.cpu_schedules import RULE_ATTR, cpu_target
    from autoplace.backend.strided_loads import STRIDED_LOADS_ATTR, TIR_PIPELINE
    from autoplace.profile.measure import _random_args
    from autoplace.profile.units import extract_units

    target = cpu_target("llvm")
    built, rows, seen = {}, [], set()
    for spec in specs:
        for unit in extract_units(zoo.parse(spec), target):
            func = unit.prim_func
            if unit.key in seen or func.attrs is None or STRIDED_LOADS_ATTR not in func.attrs:
                continue
            seen.add(unit.key)
            func = func.with_attr("global_symbol", "main").without_attr("target")
            libs = {p: tvm.tirx.build(tvm.IRModule({"main": func}), target=target, pipeline=p)
                    for p in ("default", TIR_PIPELINE)}
            args = {p: _random_args(unit.arg_shapes, unit.arg_dtypes, unit.num_outputs, tvm.cpu()) for p in libs}
            for i in range(len(unit.arg_shapes) - unit.num_outputs):  # same inputs both ways
                args[TIR_PIPELINE][i].copyfrom(args["default"][i].numpy())
            for p, lib in libs.items():
                lib["main"](*args[p])
            same = bool(np.allclose(args["default"][-1].numpy(), args[TIR_PIPELINE][-1].numpy(), rtol=1e-5,
                                    atol=1e-6))
            built.update({(unit.key, p): (lib, args[p]) for p, lib in libs.items()})
            rows.append(dict(model=spec, func_name=unit.func_name, key=unit.key, rule=str(func.attrs[RULE_ATTR]),
                             strides=list(func.attrs[STRIDED_LOADS_ATTR]), same_output=same))
    times = time_interleaved(built, rounds)
    for row in rows:
        row["default_us"] = float(np.min(times[(row["key"], "default")]))
        row["autoplace_us"] = float(np.min(times[(row["key"], TIR_PIPELINE)]))
        row["speedup"] = row["default_us"] / row["autoplace_us"]
    return pd.DataFrame(rows)


def model_rows(specs, rounds: int, repeat: int = 5, sample_ms: float = 20.0) -> pd.DataFrame:
    from kernel_timing import side_by_side_row

    import autoplace
    from autoplace import zoo
    from autoplace.backend import pipeline
    from autoplace.backend.strided_loads import TIR_PIPELINE

    rows = []
    for spec in specs:
        model = zoo.parse(spec)
        inputs = model.random_inputs()
        runners = {}
        for p in ("default", TIR_PIPELINE):
            pipeline.TIR_PIPELINE = p  # what autoplace.backend.build compiles with
            try:
                runners[p] = autoplace.place(model, None, None, {"cpu": "llvm"}).runner
            finally:
                pipeline.TIR_PIPELINE = TIR_PIPELINE
        outs = [r(*inputs) for r in runners.values()]
        a, b = (o if isinstance(o, tuple) else (o,) for o in outs)
        same = all(np.allclose(np.asarray(x), np.asarray(y), rtol=1e-3, atol=1e-3) for x, y in zip(a, b))
        once = min(float(np.median(r.time_us(inputs, repeat=3))) for r in runners.values())
        number = max(1, int(sample_ms * 1e3 / max(1.0, once)))
        medians = {p: [] for p in runners}
        for _ in range(rounds):
            for p, r in runners.items():
                medians[p].append(float(np.median(r.time_us(inputs, number=number, repeat=repeat))))
        row = side_by_side_row(spec, medians, "default", TIR_PIPELINE, labels=("default", "autoplace"))
        rows.append({"model": spec, "same_output": same, **row})
        print(rows[-1], flush=True)
    return pd.DataFrame(rows)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=DEFAULT_MODELS)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--skip-models", action="store_true", help="time the kernels only")
    args = parser.parse_args(argv)
    folder = results_folder()
    kernels = kernel_rows(args.models, args.rounds)
    kernels.to_csv(os.path.join(folder, "strided_loads_kernels.csv"), index=False)
    with pd.option_context("display.width", 200, "display.max_colwidth", 50):
        print(kernels.drop(columns=["key"]).round(3).to_string(index=False))
    if not args.skip_models:
        models = model_rows(args.models, args.rounds)
        models.to_csv(os.path.join(folder, "strided_loads_models.csv"), index=False)
        print(models.round(3).to_string(index=False))
    print(f"wrote {folder}/strided_loads_*.csv")


if __name__ == "__main__":
    main()
