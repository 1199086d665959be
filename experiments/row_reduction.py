"""Row reductions in vector lanes: every RowReduction kernel built scalar and with 1, 2, 4 vector accumulators.

LLVM does not vectorise a float sum on its own (the additions would be reordered), so until schedule version 4
``cpu_schedules.RowReduction`` ran the sums, means, maxima, softmax and norms of every model one scalar add at a
time. ``RowReduction(accumulators=n)`` accumulates a row in ``n`` vectors (``rfactor``; ``0``: the old scalar
loop). This builds the kernels of zoo, architecture-suite and op-family models at each setting; a kernel whose
TIR does not change is built once. All builds are timed in interleaved rounds (``time_evaluator``, ~1 ms per
sample, median of each round), so every setting sees the same host; each kernel's output is checked against the
scalar build's.

    python experiments/row_reduction.py [--models bert-base inception-base ...] [--families softmax mean ...]
    python experiments/row_reduction.py --end-to-end bert-base gpt2-base ...   # whole models, scalar vs shipped

Writes ``experiments/results/<hardware id>/row_reduction.csv`` (one row per RowReduction kernel and setting) and
prints each setting's time relative to the scalar loop: per kernel kind, and per model (the sum of its
RowReduction kernels, each launch counted). ``--end-to-end`` builds each model whole with the scalar loop and
with the shipped setting, checks they compute the same, times them in interleaved rounds and writes
``row_reduction_end_to_end.csv``.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import pandas as pd
from kernel_timing import build_kernels, time_interleaved, time_runners_interleaved
from results_folder import results_folder

DEFAULT_MODELS = ("bert", "gpt2", "llama", "vit", "convnext", "inception", "resnet", "whisper-encoder",
                  "bert-base", "gpt2-base", "llama-base", "vit-base", "inception-base", "cnn-base", "convnext-base")
DEFAULT_FAMILIES = ("softmax", "layer_norm", "rms_norm", "group_norm", "mean", "sum", "max")
SETTINGS = (0, 1, 2, 4)  # accumulators; 0 = the scalar loop of schedule version 3


def row_reduction_kernels(models, accumulators: int) -> list:
    """``[(model name, func name, TIR hash, unit)]`` of the RowReduction kernels the models launch when the rule
    accumulates in ``accumulators`` vectors."""
    from autoplace.backend import cpu_schedules
    from autoplace.profile.units import extract_units

    shipped = cpu_schedules.RowReduction.ACCUMULATORS
    cpu_schedules.RowReduction.ACCUMULATORS = accumulators
    try:
        out = []
        for model in models:
            for unit in extract_units(model, "llvm"):
                attrs = unit.prim_func.attrs
                if attrs is not None and str(attrs.get(cpu_schedules.RULE_ATTR, "")) == "RowReduction":
                    out.append((model.name, unit.func_name, unit.key, unit))
        return out
    finally:
        cpu_schedules.RowReduction.ACCUMULATORS = shipped


def end_to_end(specs, rounds: int) -> pd.DataFrame:
    """Each model built whole with the scalar row loop (accumulators 0) and with the shipped setting, same
    outputs checked, timed in interleaved rounds (~20 ms per sample)."""
    import autoplace
    from autoplace import zoo
    from autoplace.backend import cpu_schedules

    shipped = cpu_schedules.RowReduction.ACCUMULATORS
    rows = []
    for spec in specs:
        model = zoo.parse(spec)
        inputs = model.random_inputs()
        runners = {}
        for accumulators in (0, shipped):
            cpu_schedules.RowReduction.ACCUMULATORS = accumulators
            try:
                runners[accumulators] = autoplace.place(model, None, None, {"cpu": "llvm"}).runner
            finally:
                cpu_schedules.RowReduction.ACCUMULATORS = shipped
        times = time_runners_interleaved(runners, inputs, rounds)
        row = dict(model=spec, scalar_median_us=float(np.median(times[0])), scalar_min_us=float(np.min(times[0])),
                   lanes_median_us=float(np.median(times[shipped])), lanes_min_us=float(np.min(times[shipped])))
        row["ratio_of_medians"] = row["lanes_median_us"] / row["scalar_median_us"]
        print(f"{spec}: scalar {row['scalar_median_us']:.1f} us, vector lanes {row['lanes_median_us']:.1f} us, "
              f"x{row['ratio_of_medians']:.3f}", flush=True)
        rows.append(row)
    return pd.DataFrame(rows)


def main(argv=None):
    from autoplace import zoo
    from autoplace.backend.cpu_schedules import vectorized_row_reduction
    from autoplace.op_families import op_family_models

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", default=list(DEFAULT_MODELS))
    parser.add_argument("--families", nargs="*", default=list(DEFAULT_FAMILIES))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tag", default="")
    parser.add_argument("--end-to-end", nargs="*", metavar="MODEL",
                        help="time these models whole, scalar row loop vs the shipped setting, instead")
    args = parser.parse_args(argv)
    out_dir = results_folder()
    if args.end_to_end is not None:
        table = end_to_end(args.end_to_end or ["bert-base", "gpt2-base", "llama-base", "vit-base", "inception-base",
                                                "cnn-base"], args.rounds)
        path = os.path.join(out_dir, f"row_reduction_end_to_end{args.tag}.csv")
        table.to_csv(path, index=False)
        print(f"wrote {path}")
        return

    models = [zoo.parse(spec) for spec in args.models] + op_family_models(families=args.families)
    by_setting = {n: row_reduction_kernels(models, n) for n in SETTINGS}
    built = build_kernels((tir_hash, unit) for launches in by_setting.values() for _, _, tir_hash, unit in launches)
    print(f"{len(built)} distinct kernel builds over accumulators {SETTINGS}", flush=True)

    # Same inputs for every setting of a kernel (the launch's position in the model), outputs compared.
    errors = {}
    for position in zip(*by_setting.values()):
        ref_hash = position[0][2]
        ref_lib, ref_args = built[ref_hash]
        ref_lib["main"](*ref_args)
        n_out = position[0][3].num_outputs
        expected = [a.numpy() for a in ref_args[-n_out:]]
        for _, _, tir_hash, _ in position[1:]:
            lib, targs = built[tir_hash]
            for a, b in zip(targs[:-n_out], ref_args[:-n_out]):
                a.copyfrom(b.numpy())
            lib["main"](*targs)
            got = [a.numpy() for a in targs[-n_out:]]
            scale = max(float(np.abs(e).max()) for e in expected) or 1.0
            errors[tir_hash] = max(float(np.abs(g - e).max()) for g, e in zip(got, expected)) / scale
    worst = max(errors.values(), default=0.0)
    print(f"largest difference from the scalar loop, relative to the output's largest value: {worst:.1e}")

    rounds = time_interleaved(built, args.rounds)

    rows = []
    for n, launches in by_setting.items():
        for model, func_name, tir_hash, unit in launches:
            rows.append(dict(model=model, accumulators=n, func_name=func_name, tir_hash=tir_hash,
                             shapes=str(unit.arg_shapes), ops=" ".join(o.split(".")[-1] for o in unit.ops),
                             vectorized=vectorized_row_reduction(unit.prim_func),
                             median_us=float(np.median(rounds[tir_hash])), min_us=float(np.min(rounds[tir_hash])),
                             rel_err=errors.get(tir_hash, 0.0)))
    table = pd.DataFrame(rows)
    pd.set_option("display.width", 200)
    scalar = table[table.accumulators == 0].groupby(["model", "func_name"]).median_us.first()
    table["speedup"] = [scalar[(m, f)] / t for m, f, t in zip(table.model, table.func_name, table.median_us)]
    kinds = table.assign(kind=table.func_name.str.replace(r"\d+", "", regex=True).str.replace("_llvm", ""))
    print("\nscalar time / time, by kernel kind (median over kernels; n kernels, vectorised at the shipped setting):")
    shipped = kinds[kinds.accumulators == 2]
    summary = kinds.pivot_table(index="kind", columns="accumulators", values="speedup", aggfunc="median").round(2)
    summary.insert(0, "n", kinds[kinds.accumulators == 0].groupby("kind").size())
    summary.insert(1, "vectorised", shipped.groupby("kind").vectorized.sum())
    print(summary.to_string())
    print("\nper model: sum of its RowReduction kernels, scalar us and time relative to scalar:")
    per_model = table.groupby(["model", "accumulators"]).median_us.sum().unstack("accumulators")
    ratio = per_model.div(per_model[0], axis=0).round(3)
    ratio.insert(0, "scalar_us", per_model[0].round(1))
    print(ratio.to_string())
    path = os.path.join(out_dir, f"row_reduction{args.tag}.csv")
    table.to_csv(path, index=False)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
