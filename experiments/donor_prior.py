"""Does another machine's profile help price a small profile's held-out kernels? A donor model as the base margin.

The Xeon f6m167's profile has 733 CPU kernels (schedule version 6, the op families of then); the f6m207 trains on
1122 and the Zen 4 on 1601. Leaving one architecture out, its kernels rank at Spearman >= 0.95 in 11 of 21 held-out models
(f6m207 15 of 21). The same kernel times alike on the two Xeons: over the 733 kernels both measured, the log ratio
f6m167 / f6m207 has a spread (sd) of 0.12 and Spearman 0.999 (Zen 4: 0.36, 0.995). So a model trained on another
machine's records could carry what this profile never timed.

Variant ``donor`` (:class:`DonorPrior`): the trees of this profile's model start not from ``log(floor + work x c)``
but from a donor profile's own model (:class:`~autoplace.cost_model.xgb_model.XGBCostModel`, defaults) plus a
constant, and learn this machine's ratio to it from the same features. Leaving one architecture out honestly, each
fold's donor is trained without the held-out family (every donor kernel of the held-out models' kernels by key, and
every donor record profiled for that family): a user's new model is in no machine's profile. The in-model fits (for
models that outgrow the L2) get a donor trained on the donor's in-model times. The ``now`` variant is the default
model (:func:`autoplace.cost_model.evaluate.leave_one_family_out`, pure prediction, seed 0).

    python experiments/donor_prior.py profiles/<target id> --donor profiles/<donor id> [--variants now donor]

Writes one row per (profile, donor, variant, held-out model) to ``experiments/results/donor_prior.csv`` (rows of
other runs kept): kernel Spearman, distinct kernels, MdAPE, end-to-end error.
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

import numpy as np
import pandas as pd

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "results", "donor_prior.csv")


def donor_prior_class():
    """:class:`DonorPrior`, defined once the package is importable."""
    from autoplace.cost_model.evaluate import family
    from autoplace.cost_model.train import in_model_training_records
    from autoplace.cost_model.xgb_model import XGBCostModel

    class DonorPrior(XGBCostModel):
        """XGBoost on top of a donor machine's model: ``log(latency_us) = donor(x) + c + trees(x)``.

        ``donor_records``: the donor profile's records; ``target_units``: this profile's usable unit records (to tell
        which kernels a fold holds out: those missing from the training records); ``keys_of``: ``{model: kernel
        keys}`` of this profile's models (which families a fold holds out: those none of whose models' kernels it
        trains on)."""

        def __init__(self, donor_records=None, target_units=None, keys_of=None, **params):
            super().__init__(**params)
            self.donor_records = donor_records
            self.target_units = target_units
            self.keys_of = keys_of

        def _donor_training(self, units: pd.DataFrame) -> pd.DataFrame:
            from autoplace.cost_model.cost_model import training_units

            missing = set(self.target_units["key"]) - set(units["key"])
            held = {family(m) for m, keys in self.keys_of.items() if keys and set(keys) <= missing}
            donor = training_units(self.donor_records)
            donor = donor[donor["target"].isin(units["target"].unique())]
            profiled_for = donor["model"].astype(str).map(family) if "model" in donor else pd.Series("", index=donor.index)
            keep = ~donor["key"].isin(missing) & ~profiled_for.isin(held)
            # the in-model fits train on in-model times: the donor's then too
            warm = dict(zip(self.target_units["key"], self.target_units["median_us"].astype(float)))
            ratio = [float(u) / warm[k] for k, u in zip(units["key"], units["median_us"].astype(float)) if k in warm]
            in_model = bool(ratio) and float(np.median(ratio)) > 1.001
            self.donor_in_model_ = in_model
            donor = donor[keep]
            if in_model:
                timed, _ = in_model_training_records(donor)
                donor = timed[timed["kind"] == "unit"] if "kind" in timed else timed
            return donor

        def _fit(self, units: pd.DataFrame) -> None:
            donor_units = self._donor_training(units)
            self.donor_ = XGBCostModel(random_state=self.random_state, n_jobs=self.n_jobs)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self.donor_.fit(donor_units)
            self.donor_kernels_ = len(donor_units)
            self.base_margin = None  # _margin below; the parent's offset is the mean of y - donor
            recs = [row for _, row in units.iterrows()]
            targets = [str(t) for t in units["target"]]
            y = np.log(units["median_us"].to_numpy(dtype=float))
            self.donor_offset_ = 0.0
            self.donor_offset_ = float(np.mean(y - self._margin(recs, targets)))
            super()._fit(units)

        def _margin(self, recs: list, targets: list[str]) -> np.ndarray:
            return self.donor_._predict_log(recs, targets) + getattr(self, "donor_offset_", 0.0)

    return DonorPrior


def rows_of(profile: str, variant: str, donor: str | None, random_state: int = 0) -> pd.DataFrame:
    """One row per held-out model of ``profile`` under ``variant`` (target ``llvm``)."""
    from autoplace.cost_model.cost_model import training_units
    from autoplace.cost_model.evaluate import leave_one_family_out, model_unit_keys
    from autoplace.profile.store import ProfileStore

    records = ProfileStore(profile).records()
    if variant == "now":
        make = "xgb"
    else:
        donor_records = ProfileStore(donor).records()
        units = training_units(records)
        units = units[units["target"] == "llvm"]
        keys_of = model_unit_keys(records, "llvm")
        DonorPrior = donor_prior_class()

        def make():
            return DonorPrior(donor_records, units, keys_of, random_state=random_state)

    models = leave_one_family_out(records, make, target="llvm", random_state=random_state)["models"]
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
