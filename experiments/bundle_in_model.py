"""Does a bundle's runner time CPU kernels in-model as the local profiler does? (issue 14's CPU side)

Builds a bundle of a few zoo models for this machine's CPU (``autoplace.profile.remote.build_bundle``: kernels,
the streaming kernel for the L2 eviction, ``runner.py``), runs its runner here in a subprocess (the runner
imports no autoplace), merges its records into a scratch folder and compares them, kernel by kernel, with this
machine's committed profile: warm and in-model medians, and the in-model / warm ratio of each (what the eviction
costs the kernel), which drifts of the host between the two timings leave alone.

    python experiments/bundle_in_model.py [--models bert-base mlp-base seed003-base cnn] [--rounds 3]

Writes ``experiments/results/<hardware id>/bundle_in_model.csv``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import pandas as pd


def newest_units(records: pd.DataFrame) -> pd.DataFrame:
    units = records[(records["kind"] == "unit") & (records["status"] == "ok")]
    return units.drop_duplicates("key", keep="last").set_index("key")


def main(argv=None):
    from autoplace import zoo
    from autoplace.profile import ProfileStore
    from autoplace.profile.hardware import hardware_metadata
    from autoplace.profile.remote import build_bundle, merge_records

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["bert-base", "mlp-base", "seed003-base", "cnn"])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    hw = hardware_metadata()["hardware_id"]
    here = os.path.dirname(os.path.abspath(__file__))
    local = newest_units(ProfileStore(os.path.join(here, "..", "profiles", hw)).records())
    with tempfile.TemporaryDirectory() as scratch:
        bundle = os.path.join(scratch, "bundle")
        build_bundle([zoo.parse(m) for m in args.models], {"cpu": "llvm"}, bundle, copy_sizes=(), rounds=args.rounds)
        subprocess.run([sys.executable, os.path.join(bundle, "runner.py"), bundle], check=True,
                       stdout=subprocess.DEVNULL)
        remote = newest_units(ProfileStore(merge_records(os.path.join(bundle, "records.jsonl"),
                                                         os.path.join(scratch, "profiles"))).records())
    timed = [k for k in remote.index if k in local.index and pd.notna(local.loc[k].get("in_model_median_us"))]
    df = pd.DataFrame(dict(model=local.loc[timed, "model"].to_numpy(), func_name=remote.loc[timed, "func_name"].to_numpy(),
                           warm_local_us=local.loc[timed, "median_us"].to_numpy(),
                           warm_bundle_us=remote.loc[timed, "median_us"].to_numpy(),
                           in_model_local_us=local.loc[timed, "in_model_median_us"].to_numpy(),
                           in_model_bundle_us=remote.loc[timed, "in_model_median_us"].to_numpy()))
    df["eviction_cost_local"] = df["in_model_local_us"] / df["warm_local_us"]
    df["eviction_cost_bundle"] = df["in_model_bundle_us"] / df["warm_bundle_us"]
    df = df.sort_values("warm_local_us").reset_index(drop=True)
    out = os.path.join(here, "results", hw, "bundle_in_model.csv")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    df.to_csv(out, index=False)
    pd.set_option("display.width", 220)
    print(df.to_string(float_format=lambda x: f"{x:.3f}"))
    for name, part in (("all", df), ("warm >= 20 us", df[df["warm_local_us"] >= 20])):
        r_warm = part["warm_bundle_us"] / part["warm_local_us"]
        r_cold = part["in_model_bundle_us"] / part["in_model_local_us"]
        r_cost = part["eviction_cost_bundle"] / part["eviction_cost_local"]
        print(f"{name}: {len(part)} kernels; bundle / local, median [10%, 90%]: warm {r_warm.median():.2f} "
              f"{np.round(r_warm.quantile([.1, .9]).to_numpy(), 2)}, in-model {r_cold.median():.2f} "
              f"{np.round(r_cold.quantile([.1, .9]).to_numpy(), 2)}, eviction cost {r_cost.median():.2f} "
              f"{np.round(r_cost.quantile([.1, .9]).to_numpy(), 2)}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
