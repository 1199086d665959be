"""Does another machine's profile help price a small profile's held-out kernels? A donor model as the base margin.

The Xeon f6m167's profile has 733 CPU kernels (schedule version 6, the op families of then); the f6m207 trains on
1122 and the Zen 4 on 1601. Leaving one architecture out, its kernels rank at Spearman >= 0.95 in 11 of 21 held-out models
(f6m207 15 of 21). The same kernel times alike on the two Xeons: over the 733 kernels both measured, the log ratio
f6m167 / f6m207 has a spread (sd) of 0.12 and Spearman 0.999 (Zen 4: 0.36, 0.995). So a model trained on another
machine's records could carry what this profile never timed.

Variant ``donor``: :class:`~autoplace.cost_model.XGBCostModel` with ``prior=<the donor's folder>``, whose trees
start not from ``log(floor + work x c)`` but from a model of the donor profile plus a constant, and learn this
machine's ratio to it from the same features. Leaving one architecture out honestly, each fold keeps its held-out
family out of the donor too (:meth:`~autoplace.cost_model.CostModel.hold_out_of_prior`: the held-out models' kernels
by key, and every donor record profiled for that family): a user's new model is in no machine's profile. The ``now``
variant is the default model (:func:`autoplace.cost_model.evaluate.leave_one_family_out`, pure prediction, seed 0).

The rows of session 72 were written by this script's first version (commit b86e113), a class of its own that the
package's ``prior`` then took over; run through the package, the f6m167 with the f6m207 as donor gives the same
Spearman figures (``experiments/results/intel-r-xeon-r-processor-f6m167-2c-s72``), its largest end-to-end error 9.9%
instead of 10.9% (in-model fits told apart by the timing they are priced at, not by their ratio to the warm times).

    python experiments/donor_prior.py profiles/<target id> --donor profiles/<donor id> [--variants now donor]

Writes one row per (profile, donor, variant, held-out model) to ``experiments/results/donor_prior.csv`` (rows of
other runs kept): kernel Spearman, distinct kernels, MdAPE, end-to-end error.
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

import pandas as pd

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "results", "donor_prior.csv")


def rows_of(profile: str, variant: str, donor: str | None, random_state: int = 0) -> pd.DataFrame:
    """One row per held-out model of ``profile`` under ``variant`` (target ``llvm``)."""
    from autoplace.cost_model.evaluate import leave_one_family_out
    from autoplace.profile.store import ProfileStore

    records = ProfileStore(profile).records()
    params = {"prior": donor} if variant == "donor" else {}
    models = leave_one_family_out(records, "xgb", target="llvm", random_state=random_state, **params)["models"]
    rows = models[["model", "distinct", "spearman", "mdape", "e2e_pure_err"]].copy()
    rows.insert(0, "variant", variant)
    rows.insert(0, "donor", os.path.basename(os.path.normpath(donor)) if donor and variant != "now" else "")
    rows.insert(0, "profile", os.path.basename(os.path.normpath(profile)))
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("profile")
    parser.add_argument("--donor", required=True, help="the donor machine's profile folder")
    parser.add_argument("--variants", nargs="+", default=["now", "donor"], choices=["now", "donor"])
    parser.add_argument("--out", default=OUT)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    new = []
    for variant in args.variants:
        started = time.perf_counter()
        rows = rows_of(args.profile, variant, args.donor)
        new.append(rows)
        ranked = rows.dropna(subset=["spearman"])
        print(f"{rows['profile'].iloc[0]} {variant} {rows['donor'].iloc[0]}: Spearman >= 0.95 for "
              f"{(ranked['spearman'] >= 0.95).sum()} of {len(ranked)} (median {ranked['spearman'].median():.3f}), "
              f"end to end within 15% {(rows['e2e_pure_err'].abs() < 0.15).sum()} of {len(rows)} "
              f"(largest {rows['e2e_pure_err'].abs().max():.1%}), MdAPE median {rows['mdape'].median():.1%} "
              f"({time.perf_counter() - started:.0f} s)", flush=True)
        print(rows[["model", "distinct", "spearman", "mdape", "e2e_pure_err"]].to_string(index=False), flush=True)
    new = pd.concat(new, ignore_index=True)
    if os.path.exists(args.out):
        old = pd.read_csv(args.out).fillna({"donor": ""})
        done = set(zip(new["profile"], new["donor"], new["variant"]))
        old = old[[(p, d, v) not in done for p, d, v in zip(old["profile"], old["donor"], old["variant"])]]
        new = pd.concat([old, new], ignore_index=True)
    new.sort_values(["profile", "donor", "variant", "model"]).to_csv(args.out, index=False, float_format="%.4f")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
