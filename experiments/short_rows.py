"""Row reductions over short rows: schedule version 11 against 12, on every kernel of the models it changes.

Until version 11 ``cpu_schedules.RowReduction`` accumulated a row reduction in a full vector (16 lanes with
AVX-512, 32 with two accumulators) as soon as the row held two, then added the lanes up one scalar at a time: a
max over rows of 32 took 2 vector steps and 16 dependent scalar steps. Rows no width divides took vectors only
from four (a Swin window's 49 stayed scalar), and the elementwise blocks of a kernel over rows of one vector or
less (softmax's exp over a decode step's 8 keys) were left to LLVM, which vectorised across rows with gathers.
Version 12 accumulates in at most as many lanes as the row has vector steps (``LANES_UP_TO_STEPS``,
``ODD_LANES_UP_TO_STEPS``: 4 lanes for rows of 16-63, 8 for 64-255) and vectorises those short rows
(``SHORT_ROW_VECTORS``).

* kernels: every kernel of the models whose scheduled TIR differs between the versions, built both ways with the
  same random inputs, outputs compared, timed in interleaved rounds (about 1 ms of calls per sample);
* models: each model placed all-CPU and built both ways, outputs compared, timed in interleaved rounds.

    python experiments/short_rows.py [--models roberta t5-encoder ...] [--time-models bert-base ...] [--rounds 5]

Writes ``experiments/results/<hardware id>/short_rows_kernels.csv`` (per kernel: min over rounds both ways,
speedup = version 11's time / version 12's) and ``short_rows_models.csv``.
"""

from __future__ import annotations

import argparse
import contextlib
import os

import numpy as np
import pandas as pd
from results_folder import results_folder

#: Schedule flags of version 12, all False in version 11.
FLAGS = ("LANES_UP_TO_STEPS", "ODD_LANES_UP_TO_STEPS", "SHORT_ROW_VECTORS")
DEFAULT_MODELS = [f"{m}{s}" for s in ("", "-base") for m in (
    "mlp", "cnn", "bert", "seed003", "inception", "llama", "qwen2", "mistral", "gpt2", "opt", "roberta", "t5-encoder",
    "whisper-encoder", "vit", "swin", "convnext", "resnet", "mobilenetv2")]
DEFAULT_TIMED_MODELS = ["roberta", "t5-encoder", "llama", "bert-base", "vit-base", "swin-base", "whisper-encoder-base"]


@contextlib.contextmanager
def schedule_version(version: int):
    """The CPU rules as they were in schedule version 11 or are in 12."""
    from autoplace.backend import cpu_schedules as cs

    saved = {f: getattr(cs, f) for f in FLAGS}
    for f in FLAGS:
        setattr(cs, f, version >= 12)
    try:
        yield
    finally:
        for f, value in saved.items():
            setattr(cs, f, value)


def kernel_rows(specs, rounds: int) -> pd.DataFrame:
    from kernel_timing import build_kernels, time_interleaved

    from autoplace import zoo
    from autoplace.backend.cpu_schedules import cpu_target
    from autoplace.profile.units import extract_units

    target = cpu_target("llvm")
    pairs, rows, seen = [], [], set()
    for spec in specs:
        model = zoo.parse(spec)
        units = {}
        for version in (11, 12):
            with schedule_version(version):
                units[version] = extract_units(model, target)
        for old, new in zip(units[11], units[12]):
            if old.key == new.key or (old.key, new.key) in seen:
                continue
            seen.add((old.key, new.key))
            pairs += [(old.key, old), (new.key, new)]
            rows.append(dict(model=spec, func_name=new.func_name, shape="x".join(map(str, new.arg_shapes[0])),
                             v11_key=old.key, v12_key=new.key))
        print(f"{spec}: {sum(r['model'] == spec for r in rows)} kernels changed", flush=True)
    built = build_kernels(pairs)
    for row in rows:  # the same inputs both ways, outputs compared
        old_lib, old_args = built[row["v11_key"]]
        new_lib, new_args = built[row["v12_key"]]
        for a, b in zip(old_args, new_args):
            b.copyfrom(a.numpy())
        old_lib["main"](*old_args)
        new_lib["main"](*new_args)
        old_out, new_out = old_args[-1].numpy(), new_args[-1].numpy()
        row["same_nans"] = bool((np.isnan(old_out) == np.isnan(new_out)).all())  # an rsqrt of random inputs
        row["max_abs_diff"] = float(np.nan_to_num(np.abs(old_out - new_out)).max())
    times = time_interleaved(built, rounds)
    for row in rows:
        row["v11_us"] = float(np.min(times[row["v11_key"]]))
        row["v12_us"] = float(np.min(times[row["v12_key"]]))
        row["speedup"] = row["v11_us"] / row["v12_us"]
    return pd.DataFrame(rows)


def model_rows(specs, rounds: int) -> pd.DataFrame:
    from kernel_timing import side_by_side_row, time_runners_interleaved

    import autoplace
    from autoplace import zoo

    rows = []
    for spec in specs:
        model = zoo.parse(spec)
        inputs = model.random_inputs()
        runners = {}
        for version in (11, 12):
            with schedule_version(version):
                runners[version] = autoplace.place(model, None, None, {"cpu": "llvm"}).runner
        times = time_runners_interleaved(runners, inputs, rounds)  # outputs checked within 1e-3 first
        rows.append(side_by_side_row(spec, times, 11, 12, labels=("v11", "v12")))
        print(rows[-1], flush=True)
    return pd.DataFrame(rows)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=DEFAULT_MODELS, help="models whose changed kernels are timed")
    parser.add_argument("--time-models", nargs="*", default=DEFAULT_TIMED_MODELS, help="models timed whole both ways")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    folder = results_folder()
    kernels = kernel_rows(args.models, args.rounds)
    kernels.to_csv(os.path.join(folder, "short_rows_kernels.csv"), index=False)
    if len(kernels):
        with pd.option_context("display.width", 220, "display.max_colwidth", 48, "display.max_rows", 500):
            print(kernels.drop(columns=["v11_key", "v12_key"]).round(3).to_string(index=False))
        s = kernels["speedup"]
        print(f"{len(kernels)} kernels changed: speedup min {s.min():.2f}, median {s.median():.2f}, max {s.max():.2f}; "
              f"{int((s < 0.95).sum())} slower by more than 5%; max abs diff {kernels['max_abs_diff'].max():.1e}")
    if args.time_models:
        models = model_rows(args.time_models, args.rounds)
        models.to_csv(os.path.join(folder, "short_rows_models.csv"), index=False)
        print(models.round(3).to_string(index=False))
    print(f"wrote {folder}/short_rows_*.csv")


if __name__ == "__main__":
    main()
