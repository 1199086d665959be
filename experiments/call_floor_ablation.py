"""Leave one architecture out with and without the cost model's call floor (and max_depth 4, no read-run features).

The call floor (``XGBCostModel(call_floor=0.05)``: the base margin starts from each target's 5% quantile of its
training latencies, session 56) was chosen on the Zen 5 from one fold and two seeds. This runs the whole leave-one-
architecture-out (:func:`autoplace.cost_model.evaluate.leave_one_family_out`, pure prediction, seed 0) once per variant
and writes one row per (profile, variant, held-out model): kernel Spearman, distinct kernels and the end-to-end
error, to ``experiments/results/call_floor_ablation.csv`` (rows of other profiles and variants kept).

    python experiments/call_floor_ablation.py profiles/<id> [...] [--variants now nofloor floor01 depth4 depth4_nofloor depth4_nofloor_noruns]

About 3 min a variant on a Xeon profile (21 held-out families), 7 on an AMD one (34 with the architecture suite),
on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

import pandas as pd

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "results", "call_floor_ablation.csv")

#: Variant name -> keyword arguments of ``XGBCostModel`` on top of its defaults.
VARIANTS = {
    "now": {},
    "nofloor": dict(call_floor=None),
    "depth4": dict(max_depth=4),
    "depth4_nofloor": dict(max_depth=4, call_floor=None),
    "floor01": dict(call_floor=0.01),
    # about the model of session 48 (before max_depth 5, the call floor and the read-run features)
    "depth4_nofloor_noruns": dict(max_depth=4, call_floor=None, drop_features=("read_run",)),
}


def ablation_rows(profile: str, variant: str, random_state: int = 0) -> pd.DataFrame:
    """One row per held-out model of ``profile`` under ``variant`` (target ``llvm``)."""
    from autoplace.cost_model.evaluate import leave_one_family_out
    from autoplace.profile.store import ProfileStore

    records = ProfileStore(profile).records()
    models = leave_one_family_out(records, "xgb", target="llvm", random_state=random_state, **VARIANTS[variant])["models"]
    rows = models[["model", "distinct", "spearman", "e2e_pure_err"]].copy()
    rows.insert(0, "variant", variant)
    rows.insert(0, "profile", os.path.basename(os.path.normpath(profile)))
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("profiles", nargs="+")
    parser.add_argument("--variants", nargs="+", default=["now", "nofloor"], choices=list(VARIANTS))
    parser.add_argument("--out", default=OUT)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    new = []
    for profile in args.profiles:
        for variant in args.variants:
            started = time.perf_counter()
            rows = ablation_rows(profile, variant)
            new.append(rows)
            ranked = rows.dropna(subset=["spearman"])
            print(f"{rows['profile'].iloc[0]} {variant}: Spearman >= 0.95 for {(ranked['spearman'] >= 0.95).sum()} of "
                  f"{len(ranked)}, end to end within 15% {(rows['e2e_pure_err'].abs() < 0.15).sum()} of {len(rows)} "
                  f"({time.perf_counter() - started:.0f} s)", flush=True)
    new = pd.concat(new, ignore_index=True)
    if os.path.exists(args.out):
        old = pd.read_csv(args.out)
        done = set(zip(new["profile"], new["variant"]))
        old = old[[(p, v) not in done for p, v in zip(old["profile"], old["variant"])]]
        new = pd.concat([old, new], ignore_index=True)
    new.sort_values(["profile", "variant", "model"]).to_csv(args.out, index=False, float_format="%.4f")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
