"""Issue 14's comparison table from a GPU box's plan records: every plan of every model, measured side by side.

    python experiments/gpu/table.py experiments/results/<gpu box id>

Reads ``raw/plan_records.jsonl`` (the bundle runner's ``kind="plan"`` records, one per plan and round) and
``raw/plans_predicted.json`` (``experiments/gpu/plans.py --out``: predictions, copies, memory caps, which plans
are one placement) and writes ``plans.csv`` (one row per model and plan) and ``summary.csv`` (one row per model:
autoplace against the best other plan that fits the memory caps), and prints both.

Times: each round's record is the median of ``samples`` timed calls (each a mean over at least 10 ms of calls);
``median_us`` is the median of the rounds' medians, ``min_us``/``max_us`` the extremes over every round.
``error`` is predicted / measured median - 1. With ``raw/plans_repriced.json`` (``plans.py --no-build`` run by later
code on the same profile) ``repriced_us``/``repriced_error`` price the same placements again: no new measurement. Plans with the same ``placement`` letter are one placement,
built and timed separately: their differences are the noise of this box.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np
import pandas as pd


def timed_plans(folder: str) -> tuple[dict, dict]:
    """What the box timed: ``{"<model>:<plan>": [its ok round records]}`` from ``raw/plan_records.jsonl``, and
    ``{(model, placement crc): [labels timed with that placement, in bundle order]}`` with ``raw/plans_predicted.json``."""
    by_key: dict = {}
    with open(os.path.join(folder, "raw", "plan_records.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if r.get("kind") == "plan" and r.get("status") == "ok":
                by_key.setdefault(r["key"], []).append(r)
    with open(os.path.join(folder, "raw", "plans_predicted.json")) as f:
        built = json.load(f)
    timed_crc: dict = {}
    for p in built["plans"]:
        if by_key.get(f"{p['model']}:{p['plan']}") and p.get("placement_crc"):
            timed_crc.setdefault((p["model"], p["placement_crc"]), []).append(p["plan"])
    return by_key, timed_crc


def plan_table(folder: str, predictions: str = "plans_predicted.json") -> pd.DataFrame:
    """One row per plan of ``raw/<predictions>``, with the measurement of the timed plan of the same placement.

    ``predictions`` is ``plans_predicted.json`` (the plans built and timed, as priced when they were built) or
    ``plans_resolved.json`` (``plans.py --no-build`` on the box's own profile, after the call: the plans autoplace
    and the cost-based baselines pick there). A row's measurement is its own label's where that label was timed
    with the same placement, else that of a timed plan (``timed_as``) with the same placement (a candidate), else none.
    """
    by_key, timed_crc = timed_plans(folder)
    with open(os.path.join(folder, "raw", predictions)) as f:
        predicted = json.load(f)
    rows = []
    for p in predicted["plans"]:
        labels = timed_crc.get((p["model"], p.get("placement_crc")), [])
        timed_as = p["plan"] if p["plan"] in labels else (labels[0] if labels else None)
        rounds = by_key.get(f"{p['model']}:{timed_as}", []) if timed_as else []
        row = dict(model=p["model"], plan=p["plan"], timed_as=timed_as, predicted_us=p["predicted_us"], note=p["note"],
                   placement_crc=p.get("placement_crc"), copies=p.get("copies"),
                   copy_MB=(p["copy_bytes"] / 2**20) if p.get("copy_bytes") is not None else None,
                   cpu_ops=(p.get("ops_per_target") or {}).get("cpu"), gpu_ops=(p.get("ops_per_target") or {}).get("gpu"),
                   rounds=len(rounds))
        if rounds:
            row.update(median_us=float(np.median([r["median_us"] for r in rounds])),
                       min_us=float(min(r["min_us"] for r in rounds)), max_us=float(max(r["max_us"] for r in rounds)))
        rows.append(row)
    df = pd.DataFrame(rows)
    df["error"] = df["predicted_us"] / df["median_us"] - 1
    repriced_path = os.path.join(folder, "raw", "plans_repriced.json")
    if os.path.exists(repriced_path):  # the same plans priced again by later code (no new measurement)
        with open(repriced_path) as f:
            repriced = {(p["model"], p.get("placement_crc")): p["predicted_us"] for p in json.load(f)["plans"]}
        df["repriced_us"] = [repriced.get((m, crc), np.nan) for m, crc in zip(df["model"], df["placement_crc"])]
        df["repriced_error"] = df["repriced_us"] / df["median_us"] - 1
    df["fits_caps"] = ~df["note"].str.contains("over the memory cap|infeasible", regex=True)
    # one letter per distinct placement of a model, so equal placements are visible
    df["placement"] = ""
    for _, group in df.groupby("model", sort=False):
        letters = {}
        for i, crc in group["placement_crc"].items():
            if isinstance(crc, str):
                df.loc[i, "placement"] = letters.setdefault(crc, "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[len(letters)])
    return df


def summary_table(df: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for model, group in df.groupby("model", sort=False):
        auto = group[group["plan"] == "autoplace"].iloc[0]
        others = group[(group["plan"] != "autoplace") & ~group["plan"].str.startswith("candidate:")
                       & group["fits_caps"] & group["median_us"].notna()]
        best = others.loc[others["median_us"].idxmin()]
        other_placements = others[others["placement"] != auto["placement"]]
        rival = other_placements.loc[other_placements["median_us"].idxmin()] if len(other_placements) else None
        same = sorted(others.loc[others["placement"] == auto["placement"], "plan"])
        rows.append(dict(
            model=model, autoplace_timed_as=auto.get("timed_as"), autoplace_median_us=auto["median_us"], autoplace_min_us=auto["min_us"],
            autoplace_predicted_us=auto["predicted_us"], autoplace_error=auto["error"],
            autoplace_gpu_ops=auto["gpu_ops"], autoplace_cpu_ops=auto["cpu_ops"], autoplace_copies=auto["copies"],
            same_placement_as=",".join(same), best_other=best["plan"], best_other_median_us=best["median_us"],
            best_other_placement=(rival["plan"] if rival is not None else None),
            best_other_placement_median_us=(rival["median_us"] if rival is not None else np.nan),
            best_other_placement_min_us=(rival["min_us"] if rival is not None else np.nan),
            speedup_vs_best_other_placement=((rival["median_us"] / auto["median_us"]) if rival is not None else np.nan),
        ))
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder")
    parser.add_argument("--resolved", action="store_true",
                        help="rows from raw/plans_resolved.json (the plans picked on the box's own profile after the "
                             "call), measured by the timed plan of the same placement; writes *_resolved.csv")
    args = parser.parse_args(argv)
    df = plan_table(args.folder, "plans_resolved.json" if args.resolved else "plans_predicted.json")
    df = df[~df["plan"].str.startswith("candidate:")] if args.resolved else df
    summary = summary_table(df)
    suffix = "_resolved" if args.resolved else ""
    df.drop(columns=["placement_crc"]).to_csv(os.path.join(args.folder, f"plans{suffix}.csv"), index=False,
                                              float_format="%.4g")
    summary.to_csv(os.path.join(args.folder, f"summary{suffix}.csv"), index=False, float_format="%.4g")
    shown = df[["model", "plan", "timed_as", "placement", "cpu_ops", "gpu_ops", "copies", "copy_MB", "predicted_us", "median_us",
                "min_us", "max_us", "error", "fits_caps"] + (["repriced_us", "repriced_error"] if "repriced_us" in df else [])]
    print(shown.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    print()
    print(summary.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
