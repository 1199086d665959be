"""Contractions of one output element a row: schedule version 14 against 15, on every kernel of the models it changes.

A 1x1 convolution over a 1x1 map (a MobileNet's last stages and head, a squeeze-excitation block) or a matmul by
one column writes one element per output row. Until version 14 ``cpu_schedules.Contraction`` vectorised it along
that row, one lane wide: one scalar multiply-add at a time (the Zen 5 streamed the weights of such a convolution at
14 GB/s, where a matmul of two rows by the same weights reads them at 100-130). Version 15
(``UNIT_ROW_DOT_PRODUCTS``) leaves it to ``DotProduct``, which accumulates each output along the reduction in vector
lanes, as ``RowReduction`` does a sum.

* kernels: every kernel of the models whose scheduled TIR differs between the versions, built both ways with the
  same random inputs, outputs compared, timed in interleaved rounds (about 1 ms of calls per sample);
* models: each model placed all-CPU and built both ways, outputs compared, timed in interleaved rounds.

    python experiments/dot_products.py [--models mobilenetv2 ops-conv_head-1x1-160x1x1-1280-relu6 ...]
                                       [--time-models mobilenetv2 mobilenetv2-base] [--rounds 5]

Model names are zoo specs or op-family models (``ops-<family>-...``, as ``autoplace profile --zoo ops`` names them;
``ops:<family>`` takes all of a family's). Writes ``experiments/results/<hardware id>/dot_products_kernels.csv``
(per kernel: min over rounds both ways, speedup = version 14's time / version 15's, the weights' bytes a
microsecond both ways) and ``dot_products_models.csv``.
"""

from __future__ import annotations

import argparse
import contextlib
import os

import numpy as np
import pandas as pd
from register_rows import op_family_model
from results_folder import results_folder

DEFAULT_MODELS = ("mobilenetv2", "ops:conv_head", "ops:cnn_tiny_maps")  # the zoo, suite, grid and families: only these change
DEFAULT_TIMED_MODELS = ("mobilenetv2",)


@contextlib.contextmanager
def schedule_version(version: int):
    """The CPU rules as they were in schedule version 14 or are in 15."""
    from autoplace.backend import cpu_schedules as cs

    saved = cs.UNIT_ROW_DOT_PRODUCTS
    cs.UNIT_ROW_DOT_PRODUCTS = version >= 15
    try:
        yield
    finally:
        cs.UNIT_ROW_DOT_PRODUCTS = saved


def models_of(specs) -> list:
    """The models ``specs`` name: zoo specs, op-family models by name, ``ops:<family>`` for a whole family."""
    from autoplace import zoo
    from autoplace.op_families import op_family_models

    out = []
    for spec in specs:
        if spec.startswith("ops:"):
            out += op_family_models(families=spec.removeprefix("ops:").split(","))
        else:
            out.append(op_family_model(spec) or zoo.parse(spec))
    return out


def kernel_rows(specs, rounds: int) -> pd.DataFrame:
    from kernel_timing import build_kernels, time_interleaved

    from autoplace.backend.cpu_schedules import cpu_target
    from autoplace.profile.units import extract_units

    target = cpu_target("llvm")
    pairs, rows, seen = [], [], set()
    for model in models_of(specs):
        units = {}
        for version in (14, 15):
            with schedule_version(version):
                units[version] = extract_units(model, target)
        for old, new in zip(units[14], units[15]):
            if old.key == new.key or (old.key, new.key) in seen:
                continue
            seen.add((old.key, new.key))
            pairs += [(old.key, old), (new.key, new)]
            weights = int(np.prod(new.arg_shapes[1])) * 4 if len(new.arg_shapes) > 1 else 0
            rows.append(dict(model=model.name, func_name=new.func_name,
                             shapes=" ".join("x".join(map(str, s)) for s in new.arg_shapes[:2]),
                             weight_bytes=weights, rule=str(new.prim_func.attrs["autoplace.cpu_schedule"]),
                             v14_key=old.key, v15_key=new.key))
        print(f"{model.name}: {sum(r['model'] == model.name for r in rows)} kernels changed", flush=True)
    built = build_kernels(pairs)
    for row in rows:  # the same inputs both ways, outputs compared
        old_lib, old_args = built[row["v14_key"]]
        new_lib, new_args = built[row["v15_key"]]
        for a, b in zip(old_args, new_args):
            b.copyfrom(a.numpy())
        old_lib["main"](*old_args)
        new_lib["main"](*new_args)
        row["max_abs_diff"] = float(np.abs(old_args[-1].numpy() - new_args[-1].numpy()).max())
    times = time_interleaved(built, rounds)
    for row in rows:
        row["v14_us"] = float(np.min(times[row["v14_key"]]))
        row["v15_us"] = float(np.min(times[row["v15_key"]]))
        row["speedup"] = row["v14_us"] / row["v15_us"]
        row["v14_weights_gb_s"] = row["weight_bytes"] / row["v14_us"] / 1e3
        row["v15_weights_gb_s"] = row["weight_bytes"] / row["v15_us"] / 1e3
    return pd.DataFrame(rows)


def model_rows(specs, rounds: int) -> pd.DataFrame:
    from kernel_timing import side_by_side_row, time_runners_interleaved

    import autoplace

    rows = []
    for model in models_of(specs):
        inputs = model.random_inputs()
        runners = {}
        for version in (14, 15):
            with schedule_version(version):
                runners[version] = autoplace.place(model, None, None, {"cpu": "llvm"}).runner
        times = time_runners_interleaved(runners, inputs, rounds)  # outputs checked within 1e-3 first
        rows.append(side_by_side_row(model.name, times, 14, 15, labels=("v14", "v15")))
        print(rows[-1], flush=True)
    return pd.DataFrame(rows)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS), help="models whose changed kernels are timed")
    parser.add_argument("--time-models", nargs="*", default=list(DEFAULT_TIMED_MODELS), help="models timed whole both ways")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    folder = results_folder()
    kernels = kernel_rows(args.models, args.rounds)
    kernels.to_csv(os.path.join(folder, "dot_products_kernels.csv"), index=False)
    if len(kernels):
        with pd.option_context("display.width", 220, "display.max_colwidth", 48, "display.max_rows", 500):
            print(kernels.drop(columns=["v14_key", "v15_key"]).round(3).to_string(index=False))
        s = kernels["speedup"]
        print(f"{len(kernels)} kernels changed: speedup min {s.min():.2f}, median {s.median():.2f}, max {s.max():.2f}; "
              f"{int((s < 0.95).sum())} slower by more than 5%; max abs diff {kernels['max_abs_diff'].max():.1e}")
    if args.time_models:
        models = model_rows(args.time_models, args.rounds)
        models.to_csv(os.path.join(folder, "dot_products_models.csv"), index=False)
        print(models.round(3).to_string(index=False))
    print(f"wrote {folder}/dot_products_*.csv")


if __name__ == "__main__":
    main()
