"""AVX-512 gathers and scatters in the CPU kernels: how many LLVM emits, and what they cost on this machine.

Given AVX-512 (``znver4``, ``znver5``, Intel server cores), LLVM's vectorisers turn some loops of the scheduled
kernels into ``vgatherdps`` / ``vscatterdps``: the cross-lane sum of a row reduction over a few short rows (an
RMSNorm over rows of 32 as torch exports it: 64 gathers and 64 scatters for ``[1, 8, 32]``), a concatenation of
broadcast rows. On AMD Zen 4 a scatter is microcoded, and this is the suspect for the Zen 4's tiny row reductions
running 4-9x slower a row than the Zen 3's (session 19: RMSNorm ``[1, 73, 32]`` 4.1 us on the Zen 4, 0.46 us on
the Zen 3). LLVM's x86 features ``prefer-no-gather`` and ``prefer-no-scatter`` keep its vectorisers from them.

For every distinct kernel of the models given, on this machine's CPU target (:func:`autoplace.backend.
cpu_schedules.cpu_target`, or ``--mcpu``), this builds the kernel as autoplace ships it and with those two
features, counts the gathers and scatters in both, and (where the CPU can run it) checks that both compute the
same and times both side by side in interleaved rounds (``experiments/kernel_timing.py``).

    python experiments/gather_scatter.py [--models llama t5-encoder ops] [--mcpu znver4] [--rounds 5]
    python experiments/gather_scatter.py --mcpu znver4 --profiles profiles/amd-epyc-f25m17-2c profiles/amd-epyc-f25m1-2c

Writes ``experiments/results/<hardware id>/gather_scatter.csv`` (``--mcpu``: counts only, nothing timed,
``gather_scatter_<mcpu>.csv``). ``--profiles A B``: the two profiles' times of the same kernels (by model and
kernel name), A / B, for the kernels with gathers or scatters and for the others: measured evidence from a
machine this one cannot run (the Zen 4's, against this Zen 3's).
"""

from __future__ import annotations

import argparse
import os
import re
import sys

import numpy as np
import pandas as pd
from results_folder import results_folder

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

#: LLVM x86 features that keep the vectorisers from gathers and scatters.
NO_GATHER = ["+prefer-no-gather", "+prefer-no-scatter"]


def with_features(target, features):
    """``target`` (an llvm Target) with ``features`` added to its ``mattr``."""
    import tvm

    config = {k: v for k, v in dict(target.export()).items() if k not in ("keys", "tag", "host")}
    config["mattr"] = list(config.get("mattr") or []) + list(features)
    return tvm.target.Target(config)


def count(asm: str) -> tuple[int, int]:
    """Gather and scatter instructions in an assembly listing."""
    return len(re.findall(r"\bvp?gather", asm)), len(re.findall(r"\bvp?scatter", asm))


def model_units(spec: str, target):
    from autoplace import zoo
    from autoplace.op_families import op_family_models
    from autoplace.profile.units import extract_units

    models = op_family_models() if spec == "ops" else [zoo.get(spec)]
    for model in models:
        for unit in extract_units(model, target):
            yield model.name, unit


def main(argv=None):
    import tvm
    from kernel_timing import time_interleaved

    from autoplace.backend.cpu_schedules import cpu_target
    from autoplace.profile.measure import _random_args

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["llama", "t5-encoder", "mobilenetv2", "gpt2", "ops"])
    parser.add_argument("--mcpu", help="compile for this CPU instead (counts only: nothing is run)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profiles", nargs=2, metavar=("A", "B"), help="compare these profiles' kernel times")
    args = parser.parse_args(argv)
    base = tvm.target.Target({"kind": "llvm", "mcpu": args.mcpu}) if args.mcpu else cpu_target("llvm")
    variants = {"shipped": base, "no_gather": with_features(base, NO_GATHER)}
    rows, built, seen = [], {}, set()
    for spec in args.models:
        for model_name, unit in model_units(spec, base):
            if unit.key in seen:
                continue
            seen.add(unit.key)
            func = unit.prim_func.with_attr("global_symbol", "main").without_attr("target")
            row = dict(model=model_name, func_name=unit.func_name, key=unit.key)
            libs = {}
            for name, target in variants.items():
                libs[name] = tvm.tirx.build(tvm.IRModule({"main": func}), target=target)
                row[f"{name}_gathers"], row[f"{name}_scatters"] = count(libs[name].inspect_source("asm"))
            rows.append(row)
            changed = (row["shipped_gathers"], row["shipped_scatters"]) != (row["no_gather_gathers"],
                                                                             row["no_gather_scatters"])
            if changed and not args.mcpu:
                dev = tvm.cpu()
                targs = {n: _random_args(unit.arg_shapes, unit.arg_dtypes, unit.num_outputs, dev) for n in libs}
                for name, lib in libs.items():
                    lib["main"](*targs[name])
                out = [targs[n][-1].numpy() for n in libs]
                row["same_output"] = bool(np.allclose(out[0], out[1], rtol=1e-5, atol=1e-6))
                built.update({(unit.key, n): (lib, targs[n]) for n, lib in libs.items()})
    df = pd.DataFrame(rows)
    if built:
        times = time_interleaved(built, args.rounds)
        for name in variants:
            df[f"{name}_us"] = [float(np.min(times[(k, name)])) if (k, name) in times else np.nan for k in df["key"]]
        df["speedup"] = df["shipped_us"] / df["no_gather_us"]
    path = os.path.join(results_folder(), f"gather_scatter{'_' + args.mcpu if args.mcpu else ''}.csv")
    df.to_csv(path, index=False)
    hit = df[(df["shipped_gathers"] + df["shipped_scatters"]) > 0]
    print(f"{len(df)} kernels for {base}: {len(hit)} with gathers or scatters "
          f"({int(hit['shipped_gathers'].sum())} gathers, {int(hit['shipped_scatters'].sum())} scatters); "
          f"with {NO_GATHER}: {int(df['no_gather_gathers'].sum())} gathers, {int(df['no_gather_scatters'].sum())} "
          "scatters")
    cols = ["model", "func_name", "shipped_gathers", "shipped_scatters"] + (
        ["same_output", "shipped_us", "no_gather_us", "speedup"] if built else [])
    print(hit[cols].to_string(index=False))
    print(f"wrote {path}")
    if args.profiles:
        compare_profiles(df, *args.profiles)


def compare_profiles(df: pd.DataFrame, a: str, b: str) -> None:
    """Print profile ``a``'s time / profile ``b``'s of the kernels of ``df``, with and without gathers."""
    from autoplace.cost_model.cost_model import training_units
    from autoplace.profile import ProfileStore

    def times(folder):
        units = training_units(ProfileStore(folder).records())
        return units.drop_duplicates(["model", "func_name"], keep="last").set_index(["model", "func_name"])["median_us"]

    ta, tb = times(a), times(b)
    df = df.set_index(["model", "func_name"])
    both = [i for i in df.index if i in ta.index and i in tb.index]
    ratio = pd.Series(ta.loc[both].to_numpy() / tb.loc[both].to_numpy(), index=pd.MultiIndex.from_tuples(both))
    hit = (df.loc[both, "shipped_gathers"] + df.loc[both, "shipped_scatters"]).to_numpy() > 0
    small = tb.loc[both].to_numpy() < 2.0
    for name, mask in (("with gathers or scatters", hit), ("without", ~hit),
                       ("with, under 2 us in B", hit & small), ("without, under 2 us in B", ~hit & small)):
        r = ratio[mask]
        print(f"{name}: {len(r)} kernels, time in {os.path.basename(a)} / {os.path.basename(b)}: median "
              f"{r.median():.2f}, 10-90% {r.quantile(.1):.2f}-{r.quantile(.9):.2f}")


if __name__ == "__main__":
    main()
