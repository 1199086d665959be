"""LLVM's gathers and scatters in the CPU kernels: what telling it not to use them is worth here.

After TVM lowers a scheduled kernel, LLVM's loop vectoriser may vectorise a loop TVM left scalar *across* rows
(a norm's 8 rows of 32, fully unrolled), reading and writing lanes a row apart with ``vgatherdps`` /
``vscatterdps``. On AMD's Zen cores a scatter is microcoded and slow. LLVM's x86 tuning features
``prefer-no-scatter`` and ``prefer-no-gather`` (``-mattr``) make its cost model avoid them. This builds every
distinct kernel of the models three ways (the target as LLVM tunes it for the CPU, ``+prefer-no-scatter``, and
``+prefer-no-gather,+prefer-no-scatter``), counts the gather and scatter instructions in each build's assembly,
and times, in interleaved rounds (about 1 ms of calls per sample, same random inputs, outputs compared), the
kernels whose assembly differs; the others are the same code.

    python experiments/llvm_scatter.py [--models llama roberta ops:conv_odd_rows ...] [--rounds 5] [--time-models llama-base ...]

Session 55 on the Zen 5: the zoo and the suite (``llvm_scatter_kernels.csv``, ``as_built`` = LLVM's default then)
and ``--models ops:conv_odd_rows,conv2d_k3s1g1,conv1d_seq --tag convs`` (``llvm_scatter_kernels_convs.csv``).

Writes ``experiments/results/<hardware id>/llvm_scatter_kernels.csv`` (every kernel: instruction counts per build,
and for the timed ones min over rounds per build) and, with ``--time-models`` (each model placed all-CPU and built
with and without ``ZEN_LLVM_FEATURES``, timed in interleaved rounds), ``llvm_scatter_models.csv``.
"""

from __future__ import annotations

import argparse
import os
from collections import Counter

import numpy as np
import pandas as pd
from results_folder import results_folder

#: ``{build: -mattr features}`` (added to the target autoplace builds for, less its own ``ZEN_LLVM_FEATURES``).
BUILDS = {"llvm_default": [], "no_scatter": ["+prefer-no-scatter"], "no_gather_scatter": ["+prefer-no-gather",
                                                                                         "+prefer-no-scatter"]}
DEFAULT_MODELS = [f"{m}{s}" for s in ("", "-base") for m in (
    "mlp", "cnn", "bert", "seed003", "inception", "llama", "qwen2", "mistral", "gpt2", "opt", "roberta", "t5-encoder",
    "whisper-encoder", "vit", "swin", "convnext", "resnet", "mobilenetv2")]


def with_features(target, features):
    """``target`` with ``features`` as the only tuning features beyond its own ``mattr`` (less
    ``cpu_schedules.ZEN_LLVM_FEATURES``)."""
    import tvm

    from autoplace.backend.cpu_schedules import ZEN_LLVM_FEATURES

    config = dict(target.export())
    config["mattr"] = [str(a) for a in config.get("mattr") or [] if str(a) not in ZEN_LLVM_FEATURES] + list(features)
    config.pop("host", None)
    return tvm.target.Target(config)


def instruction_counts(asm: str) -> dict:
    ops = Counter(line.split()[0] for line in asm.splitlines() if line.startswith("\t") and not line.startswith("\t."))
    return dict(gathers=sum(n for op, n in ops.items() if op.startswith(("vgather", "vpgather"))),
                scatters=sum(n for op, n in ops.items() if op.startswith(("vscatter", "vpscatter"))),
                instructions=sum(ops.values()))


def models_of(specs):
    """``(name, model)`` of zoo and suite names and of ``ops:<family>[,<family>...]`` (those op families' models)."""
    from autoplace import zoo
    from autoplace.op_families import op_family_models

    for spec in specs:
        if spec.startswith("ops:"):
            yield from ((m.name, m) for m in op_family_models(families=spec[4:].split(",")))
        else:
            yield spec, zoo.parse(spec)


def kernel_rows(specs, rounds: int) -> pd.DataFrame:
    import tvm
    from kernel_timing import time_interleaved

    from autoplace.backend.cpu_schedules import cpu_target
    from autoplace.backend.strided_loads import TIR_PIPELINE
    from autoplace.profile.measure import _random_args
    from autoplace.profile.units import extract_units

    rows, built, seen = [], {}, set()
    for spec, model in models_of(specs):
        count = 0
        for unit in extract_units(model, cpu_target("llvm")):
            if unit.key in seen:
                continue
            seen.add(unit.key)
            func = unit.prim_func.with_attr("global_symbol", "main")
            target = func.attrs["target"]
            row = dict(model=spec, func_name=unit.func_name, key=unit.key,
                       shape="x".join(map(str, unit.arg_shapes[-1])))
            libs, asms = {}, {}
            for name, features in BUILDS.items():
                lib = tvm.tirx.build(tvm.IRModule({"main": func.without_attr("target")}),
                                     target=with_features(target, features), pipeline=TIR_PIPELINE)
                libs[name], asms[name] = lib, lib.inspect_source("asm")
                row.update({f"{name}_{k}": v for k, v in instruction_counts(asms[name]).items()})
            row["differs"] = len({a.split("\t.ident")[0] for a in asms.values()}) > 1
            if row["differs"]:
                count += 1
                args = {name: _random_args(unit.arg_shapes, unit.arg_dtypes, unit.num_outputs, tvm.cpu())
                        for name in libs}
                first = next(iter(libs))
                for name in libs:  # the same inputs every build
                    for i in range(len(unit.arg_shapes) - unit.num_outputs):
                        args[name][i].copyfrom(args[first][i].numpy())
                    libs[name]["main"](*args[name])
                outs = [args[name][-1].numpy() for name in libs]
                row["max_abs_diff"] = max(float(np.nan_to_num(np.abs(o - outs[0])).max()) for o in outs)
                built.update({(unit.key, name): (libs[name], args[name]) for name in libs})
            rows.append(row)
        if count or not spec.startswith("ops-"):
            print(f"{spec}: {count} of its new kernels built differently", flush=True)
    times = time_interleaved(built, rounds)
    for row in rows:
        if row["differs"]:
            for name in BUILDS:
                row[f"{name}_us"] = float(np.min(times[(row["key"], name)]))
            row["speedup_no_scatter"] = row["llvm_default_us"] / row["no_scatter_us"]
            row["speedup_no_gather_scatter"] = row["llvm_default_us"] / row["no_gather_scatter_us"]
    return pd.DataFrame(rows)


def model_rows(specs, rounds: int) -> pd.DataFrame:
    """Each model placed all-CPU and built with LLVM's default tuning and with ``ZEN_LLVM_FEATURES`` (``zen_features``),
    outputs compared, timed in interleaved rounds."""
    from kernel_timing import side_by_side_row, time_runners_interleaved

    import autoplace
    from autoplace import zoo
    from autoplace.backend import cpu_schedules as cs

    rows = []
    for spec in specs:
        model = zoo.parse(spec)
        inputs = model.random_inputs()
        runners, shipped = {}, cs.ZEN_LLVM_FEATURES
        for name, features in (("llvm_default", ()), ("zen_features", shipped)):
            cs.ZEN_LLVM_FEATURES = features
            try:
                runners[name] = autoplace.place(model, None, None, {"cpu": "llvm"}).runner
            finally:
                cs.ZEN_LLVM_FEATURES = shipped
        times = time_runners_interleaved(runners, inputs, rounds)  # outputs checked within 1e-3 first
        rows.append(side_by_side_row(spec, times, "llvm_default", "zen_features"))
        print(rows[-1], flush=True)
    return pd.DataFrame(rows)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=DEFAULT_MODELS)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--time-models", nargs="*", default=[], help="models timed whole both ways (default none)")
    parser.add_argument("--skip-kernels", action="store_true", help="time the models only")
    parser.add_argument("--tag", default="", help="suffix of the kernels' CSV (llvm_scatter_kernels_<tag>.csv)")
    args = parser.parse_args(argv)
    folder = results_folder()
    if args.time_models:
        models = model_rows(args.time_models, args.rounds)
        models.to_csv(os.path.join(folder, "llvm_scatter_models.csv"), index=False)
        print(models.round(3).to_string(index=False))
    if args.skip_kernels:
        return
    kernels = kernel_rows(args.models, args.rounds)
    path = os.path.join(folder, f"llvm_scatter_kernels{'_' + args.tag if args.tag else ''}.csv")
    kernels.to_csv(path, index=False)
    timed = kernels[kernels["differs"]]
    cols = ["model", "func_name", "shape", "llvm_default_gathers", "llvm_default_scatters", "llvm_default_us", "no_scatter_us",
            "no_gather_scatter_us", "speedup_no_scatter", "speedup_no_gather_scatter"]
    with pd.option_context("display.width", 250, "display.max_colwidth", 40, "display.max_rows", 2000):
        print(timed[cols].round(3).to_string(index=False))
    print(f"{len(kernels)} kernels, {len(timed)} built differently "
          f"({int((kernels['llvm_default_scatters'] > 0).sum())} with scatters, {int((kernels['llvm_default_gathers'] > 0).sum())} "
          "with gathers as built)")
    for name in ("no_scatter", "no_gather_scatter"):
        if len(timed):
            s = timed[f"speedup_{name}"]
            total = timed["llvm_default_us"].sum() / timed[f"{name}_us"].sum()
            print(f"{name}: speedup min {s.min():.2f}, median {s.median():.2f}, max {s.max():.2f}; "
                  f"{int((s < 0.95).sum())} slower by more than 5%; their summed time x{total:.2f}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
