"""How the cost model priced an op family before it was profiled: fit on the profile without the family, price it.

A new op family (:data:`autoplace.op_families.FAMILIES`) is added because the cost model prices its kernels badly
from the rest of the training data; this says by how much, reproducibly, on the profile that timed it. The default
``XGBCostModel`` is fitted on every current kernel of the profile except the family's (``ops-<family>-...``
models; a kernel the family shares with another model stays in training, and is not scored), and prices the
family's kernels; the same model fitted on everything is the in-sample reference.

Written (``experiments/results/<profile>/``): ``family_held_out_<family>.csv``, one row per kernel of the family
(measured, held-out and in-sample prices), and a summary line per family printed.

    python experiments/family_held_out.py --profile profiles/amd-epyc-f25m1-2c conv_narrow
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import pandas as pd
from results_folder import write_csv
from scipy.stats import spearmanr

from autoplace.cost_model.cost_model import training_units
from autoplace.cost_model.xgb_model import XGBCostModel
from autoplace.op_families import FAMILIES
from autoplace.profile import ProfileStore, default_profile_dir


def held_out_prices(units: pd.DataFrame, family: str, shared_keys: set, full: XGBCostModel, random_state: int = 0,
                    hardware_id: str | None = None) -> pd.DataFrame:
    """The family's kernels but ``shared_keys`` (those other models launch too), with ``measured_us``,
    ``held_out_us`` (a model fitted without them) and ``in_sample_us`` (``full``, fitted on every unit)."""
    own = units["model"].str.startswith(f"ops-{family}-") & ~units["key"].isin(shared_keys)
    if not own.any():
        raise SystemExit(f"the profile has no kernel of op family {family!r}: autoplace profile --zoo ops:{family} "
                         "--no-copies --no-end-to-end")
    held = XGBCostModel(random_state=random_state).fit(units[~own].reset_index(drop=True), hardware_id=hardware_id)
    fam = units[own].reset_index(drop=True)
    return pd.DataFrame({"model": fam["model"], "func_name": fam["func_name"], "measured_us": fam["median_us"],
                         "held_out_us": held.predict(fam), "in_sample_us": full.predict(fam)})


def summary(prices: pd.DataFrame) -> str:
    def line(col):
        ratio = prices[col] / prices["measured_us"]
        ape = (ratio - 1).abs()
        return (f"MdAPE {100 * ape.median():.1f}%, MAPE {100 * ape.mean():.1f}%, within 15%: "
                f"{int((ape <= 0.15).sum())}/{len(ape)}, ratio {ratio.min():.2f}-{ratio.max():.2f}, "
                f"Spearman {spearmanr(prices[col], prices['measured_us'])[0]:.3f}")

    return f"{len(prices)} kernels; held out: {line('held_out_us')}; in sample: {line('in_sample_us')}"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("families", nargs="+", choices=sorted(FAMILIES), metavar="FAMILY")
    parser.add_argument("--profile", help="profile folder (default: this machine's)")
    parser.add_argument("--random-state", type=int, default=0)
    args = parser.parse_args(argv)
    profile = args.profile or default_profile_dir()
    records = ProfileStore(profile).records()
    records = records[(records["kind"] == "unit") & (records["target"] == "llvm")]
    units = training_units(records)
    hardware_id = os.path.basename(os.path.normpath(profile))
    full = XGBCostModel(random_state=args.random_state).fit(units, hardware_id=hardware_id)  # one for every family
    for family in args.families:
        others = set(records.loc[~records["model"].astype(str).str.startswith(f"ops-{family}-"), "key"])
        prices = held_out_prices(units, family, others, full, args.random_state, hardware_id)
        path = write_csv(prices, f"family_held_out_{family}.csv", hardware_id)
        print(f"{family}: {summary(prices)} ({path})")
        worst = prices.assign(ratio=prices["held_out_us"] / prices["measured_us"])
        worst = worst.iloc[np.argsort(-np.abs(np.log(worst["ratio"])))[:5]]
        for _, r in worst.iterrows():
            print(f"  {r['model']:48s} measured {r['measured_us']:9.2f} us, held out {r['held_out_us']:9.2f} "
                  f"({r['ratio']:.2f}x)")


if __name__ == "__main__":
    main()
