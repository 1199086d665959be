"""How much slower than its profile's records does this host time the same kernels and models now? (issue 11)

A profile is timed at calm moments (the fastest rounds, :mod:`autoplace.profile.host_speed`); on a host that reads
slow for a whole session the records a re-profile adds are slow, and mixed into a calm profile they pull its prices
up (sessions 62 and 64: the Zen 5's resnet-base +7.4% -> +17.9% held out). This times, in a copy of the profile
folder (the profile itself is not touched), the kernels (``--redo unit``) and the end-to-end models (``--redo
model``) of some models again with the profile job's own harness and rounds, and reports for each the ratio of
the new reading to the record's: the median, quartiles and range per kernel class and size, and per model. Were
the ratios tight, records timed on a slow host could be divided by them; the spread says whether they are.

    python experiments/slow_host_ratios.py                      # this machine's profile, the default models
    python experiments/slow_host_ratios.py --models resnet-base bert-base --rounds 3 --tag _s64

Writes ``experiments/results/<hardware id>/slow_host_ratios<tag>.csv`` (one row per kernel or model) and prints
the summary.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import pandas as pd
from results_folder import write_csv

HERE = os.path.dirname(os.path.abspath(__file__))
UNIT_MODELS = ["resnet-base", "bert-base", "cnn-base", "mobilenetv2", "inception-base"]
E2E_MODELS = ["cnn", "bert", "resnet", "convnext", "vit", "swin", "inception", "resnet-base", "cnn-base",
              "convnext-base"]
#: Kernel classes of the summary, by the bytes a kernel reads and writes.
BYTES_BANDS = [(0, 1e5), (1e5, 1e6), (1e6, 4e6), (4e6, float("inf"))]


def newest(folder: str, kind: str) -> dict:
    """``{key: record}``: the newest successful llvm record of ``kind`` in the profile ``folder``."""
    from autoplace.profile.store import ProfileStore

    return {key: record for (record_kind, key, target), record in ProfileStore(folder).newest_good().items()
            if record_kind == kind and target == "llvm"}


def retime(copy: str, models: list, redo: str, rounds: int) -> None:
    """Time ``models`` again (``redo``: ``unit`` or ``model``) into the profile copy ``copy``."""
    command = [sys.executable, "-m", "autoplace.cli", "profile", "--dir", copy, "--zoo", *models, "--redo", redo,
               "--rounds", str(rounds), "--no-copies", "--no-progress", "--host-check", "off"]  # slowness is measured here
    if redo == "unit":
        command.append("--no-end-to-end")
    print(" ".join(command[2:]), flush=True)
    subprocess.run(command, check=True, cwd=os.path.dirname(HERE))


def ratios(before: dict, after: dict, kind: str) -> pd.DataFrame:
    """One row per record ``after`` timed anew: its median over the record's before, with what it is."""
    rows = []
    for key, new in after.items():
        old = before.get(key)
        if old is None or old.get("measured_at") == new.get("measured_at"):
            continue
        rows.append(dict(
            kind=kind, key=key, model=new.get("model", key), anchor_op=new.get("anchor_op", ""),
            bytes=float(new.get("bytes_in", 0) or 0) + float(new.get("bytes_out", 0) or 0),
            record_us=float(old["median_us"]), now_us=float(new["median_us"]),
            ratio=float(new["median_us"]) / float(old["median_us"]),
            record_slowdown=old.get("host_slowdown"), now_slowdown=new.get("host_slowdown"),
        ))
    return pd.DataFrame(rows)


def _summary(label: str, values) -> str:
    v = np.asarray(values, dtype=float)
    return (f"{label:34s} n={len(v):4d}  median {np.median(v):.3f}  q25 {np.quantile(v, 0.25):.3f}  "
            f"q75 {np.quantile(v, 0.75):.3f}  min {v.min():.2f}  max {v.max():.2f}")


def main(argv=None) -> int:
    from autoplace.profile.hardware import hardware_metadata

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", help="profile folder (default: profiles/<this machine's hardware id>)")
    parser.add_argument("--models", nargs="+", default=UNIT_MODELS, help="models whose kernels are timed again")
    parser.add_argument("--e2e-models", nargs="*", default=E2E_MODELS, help="models timed again end to end")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tag", default="")
    args = parser.parse_args(argv)
    hardware_id = hardware_metadata()["hardware_id"]
    profile = args.profile or os.path.join(os.path.dirname(HERE), "profiles", hardware_id)
    with tempfile.TemporaryDirectory(prefix="slow_host_") as tmp:
        copy = os.path.join(tmp, os.path.basename(os.path.normpath(profile)))
        shutil.copytree(profile, copy)
        if args.models:
            retime(copy, args.models, "unit", args.rounds)
        if args.e2e_models:
            retime(copy, args.e2e_models, "model", args.rounds)
        table = pd.concat([ratios(newest(profile, kind), newest(copy, kind), kind) for kind in ("unit", "model")],
                          ignore_index=True)
    if table.empty:
        print("nothing was timed again")
        return 1
    write_csv(table, f"slow_host_ratios{args.tag}.csv", hardware_id)
    units, models = table[table["kind"] == "unit"], table[table["kind"] == "model"]
    if not units.empty:
        print(_summary("kernels", units["ratio"]))
        for lo, hi in BYTES_BANDS:
            band = units[(units["bytes"] >= lo) & (units["bytes"] < hi)]
            if not band.empty:
                print(_summary(f"  reading+writing {lo:.0e}-{hi:.0e} B", band["ratio"]))
        for op, group in units.groupby("anchor_op"):
            if len(group) >= 5:
                print(_summary(f"  {op}", group["ratio"]))
    if not models.empty:
        print(_summary("models end to end", models["ratio"]))
        for row in models.itertuples():
            print(f"  {row.model:20s} {row.record_us:10.1f} -> {row.now_us:10.1f} us  x{row.ratio:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
