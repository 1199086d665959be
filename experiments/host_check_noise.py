"""How often does the profile job's host check read a host as slow when it is not? (issue 11)

The check (:mod:`autoplace.profile.host_check`) times a dozen of a folder's kernels twice and compares the faster
reading with the records; over :data:`~autoplace.profile.host_check.HOST_CHECK_LIMIT` (1.05x, median) a job is
refused. This runs the check ``--checks`` times, ``--gap-s`` apart, against a profile and writes what each read,
with the canary beside it, so that the limit can be set from measured readings: against a folder profiled
minutes before on the same host (``--fresh``: cnn-base and bert-base, ``--rounds 3 --max-rounds 6``, into a
temporary folder) the check reads the host's own noise; against a committed profile, how far this session's host
is from the one that made it.

    python experiments/host_check_noise.py --fresh --checks 10 --gap-s 20 --tag _s65
    python experiments/host_check_noise.py --checks 5          # this machine's committed profile

Writes ``experiments/results/<hardware id>/host_check_noise<tag>.csv`` (one row per check and kernel).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import pandas as pd
from results_folder import write_csv

HERE = os.path.dirname(os.path.abspath(__file__))
FRESH_MODELS = ["cnn-base", "bert-base"]


def references_of(folder: str, models: list, target):
    """The check's reference kernels of ``models`` in ``folder`` (:func:`~autoplace.profile.host_check.reference_kernels`)."""
    from autoplace import zoo
    from autoplace.profile.host_check import reference_kernels
    from autoplace.profile.store import ProfileStore
    from autoplace.profile.units import extract_units

    units = {("unit", u.key, "llvm"): u for name in models for u in extract_units(zoo.parse(name), target)}
    return reference_kernels(ProfileStore(folder).newest_good(), units)


def main(argv=None) -> int:
    from autoplace.profile.hardware import hardware_metadata
    from autoplace.profile.host_check import HOST_CHECK_LIMIT, time_references
    from autoplace.profile.host_speed import _canary_runner, best_canary_us
    from autoplace.profile.measure import KernelTimer
    from autoplace.profile.store import ProfileStore
    from autoplace.targets import TargetSet

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", help="profile folder (default: profiles/<this machine's hardware id>)")
    parser.add_argument("--fresh", action="store_true", help="profile cnn-base and bert-base into a temporary "
                        "folder first and check against it")
    parser.add_argument("--models", nargs="+", default=FRESH_MODELS, help="models whose kernels are compared")
    parser.add_argument("--checks", type=int, default=10)
    parser.add_argument("--gap-s", type=float, default=20.0)
    parser.add_argument("--tag", default="")
    args = parser.parse_args(argv)
    hardware_id = hardware_metadata()["hardware_id"]
    target = TargetSet({"cpu": "llvm"})["cpu"].target
    with tempfile.TemporaryDirectory(prefix="host_check_") as tmp:
        if args.fresh:
            folder = os.path.join(tmp, hardware_id)
            started = time.perf_counter()
            subprocess.run([sys.executable, "-m", "autoplace.cli", "profile", "--dir", folder, "--zoo", *args.models,
                            "--rounds", "3", "--max-rounds", "6", "--no-copies", "--no-end-to-end", "--no-progress",
                            "--host-check", "off"], check=True, cwd=os.path.dirname(HERE))
            print(f"profiled {args.models} in {time.perf_counter() - started:.0f} s", flush=True)
        else:
            folder = args.profile or os.path.join(os.path.dirname(HERE), "profiles", hardware_id)
        references = references_of(folder, args.models, target)
        print(f"{len(references)} reference kernels in {folder}")
        if not references:
            return 1
        best_canary = best_canary_us(ProfileStore(folder).records())
        canary = _canary_runner()
        rows = []
        with KernelTimer() as timer:
            for index in range(args.checks):
                if index:
                    time.sleep(args.gap_s)
                canary_us = min(canary() for _ in range(5))
                started = time.perf_counter()
                check = time_references(references, timer, target)
                seconds = time.perf_counter() - started
                print(f"check {index}: {check.ratio:.3f}x over {len(check.names)} kernels "
                      f"(q25 {np.quantile(check.ratios, 0.25):.3f}, q75 {np.quantile(check.ratios, 0.75):.3f}) "
                      f"in {seconds:.0f} s; canary {canary_us:.1f} us = {canary_us / best_canary:.2f}x the folder's "
                      "fastest", flush=True)
                rows += [dict(check=index, kernel=name, record_us=record, now_us=now, ratio=now / record,
                              check_ratio=check.ratio, canary_us=canary_us, canary_slowdown=canary_us / best_canary,
                              seconds=seconds, fresh=args.fresh)
                         for name, record, now in zip(check.names, check.record_us, check.now_us)]
    table = pd.DataFrame(rows)
    write_csv(table, f"host_check_noise{args.tag}.csv", hardware_id)
    per_check = table.groupby("check")["check_ratio"].first()
    for limit in (HOST_CHECK_LIMIT, 1.08, 1.10, 1.15):
        print(f"over {limit:.2f}x: {int((per_check > limit).sum())} of {len(per_check)} checks")
    print(f"check ratios: min {per_check.min():.3f}, median {per_check.median():.3f}, max {per_check.max():.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
