"""Leave one architecture out, with and without pricing models whose weights outgrow the caches weights-cold.

The same evaluation as ``experiments/cost_model_eval.py`` (``autoplace.cost_model.evaluate.leave_one_family_out``,
no error bands: about 100 s a run on a 2-core Zen 3), run twice on one profile: as the cost table prices models
now (a model reading more weights per call than the line its profile learns is priced by its kernels'
weights-cold times, predicted ones by their in-model price plus their weights' memory time), and with no line
(every model larger than the L2 in-model, as before session 44). Writes ``weights_cold_eval.csv`` under
``experiments/results/<profile folder>/``: per held-out model and variant, its weights per call, whether it was
priced weights-cold, the oracle error (its measured kernels summed as priced) and the pure-prediction error
against its end-to-end time.

    python experiments/weights_cold_eval.py [--profile profiles/<hardware id>]
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

import pandas as pd

HERE = os.path.dirname(os.path.abspath(__file__))
COLUMNS = ["model", "weights_per_call_mb", "in_model", "weights_cold", "spearman", "e2e_measured_us",
           "e2e_oracle_err", "e2e_pure_err", "e2e_pure_vs_oracle_err"]


def evaluate(records: pd.DataFrame, *, weights_line: bool, n_jobs: int = 2) -> pd.DataFrame:
    """The held-out models' rows, the cost table learning its weights line or not."""
    from autoplace.cost_model import evaluate as ev
    from autoplace.cost_model.table import CostTable

    fit = CostTable._fit_weights_line
    if not weights_line:
        CostTable._fit_weights_line = lambda self, df: None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = ev.leave_one_family_out(records, "xgb", target="llvm", n_jobs=n_jobs)
    finally:
        CostTable._fit_weights_line = fit
    models = result["models"]
    return models[[c for c in COLUMNS if c in models]].assign(variant="weights line" if weights_line else "no line")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", help="profile folder (default: this machine's)")
    parser.add_argument("--min-weights-mb", type=float, default=0.5, help="report models of at least this many MB")
    args = parser.parse_args(argv)
    from autoplace.profile import ProfileStore, hardware_metadata

    folder = args.profile or os.path.join(os.path.dirname(HERE), "profiles", hardware_metadata()["hardware_id"])
    records = ProfileStore(folder).records()
    frames = []
    for weights_line in (True, False):
        start = time.time()
        frames.append(evaluate(records, weights_line=weights_line))
        print(f"{frames[-1]['variant'].iloc[0]}: {time.time() - start:.0f} s")
    both = pd.concat(frames, ignore_index=True)
    both = both[both["weights_per_call_mb"] >= args.min_weights_mb]
    wide = both.pivot(index="model", columns="variant", values=["e2e_oracle_err", "e2e_pure_err"])
    wide.insert(0, "weights_mb", both.groupby("model")["weights_per_call_mb"].first())
    wide.insert(1, "weights_cold", both[both["variant"] == "weights line"].set_index("model")["weights_cold"])
    pd.set_option("display.width", 200)
    print(wide.sort_values("weights_mb").round(3).to_string())
    for variant, rows in both.groupby("variant"):
        heavy = rows[rows["in_model"]]
        print(f"{variant}: {int((heavy['e2e_pure_err'].abs() <= 0.15).sum())} of {len(heavy)} models priced in-model "
              f"within 15% (pure prediction), mean |error| {heavy['e2e_pure_err'].abs().mean():.3f}; oracle "
              f"{int((heavy['e2e_oracle_err'].abs() <= 0.15).sum())} of {len(heavy)}")
    out = os.path.join(HERE, "results", os.path.basename(os.path.normpath(folder)), "weights_cold_eval.csv")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    both.to_csv(out, index=False)
    print("wrote", out)


if __name__ == "__main__":
    main()
