"""Would dividing each round's timing by the host-speed canary make a noisy profile agree with itself? (issue 11)

Every CPU record keeps its rounds' medians (``round_medians_us``) and the canary's slowdown before each round
(``round_slowdowns``, :mod:`autoplace.profile.host_speed`). A record's time is the median of its rounds within 10%
of its fastest (:func:`autoplace.profile.job.fastest_rounds`). This asks, from the records alone (no timing):

1. how much of the spread between a record's rounds the canary explains: the least-squares slope ``beta`` of
   log(round time) on log(canary slowdown), within records, and the correlation;
2. whether timings adjusted to a calm host, ``round / slowdown ** beta``, merged by the same rule, make the
   profile's kernels add up to its own end-to-end records more consistently: the spread (standard deviation) of
   log(sum of a model's kernels / the model's end-to-end time) over the models whose kernels are all in the profile,
   raw and adjusted. A smaller spread means the adjustment removed noise that the kernels and models did not share.

    python experiments/canary_adjusted_rounds.py [--profile profiles/<id> ...]

Writes ``experiments/results/canary_adjusted_rounds.csv`` (one row per profile).

3. how much slower than its record's calm rounds (canary within 1.08x of its fastest) a round reads, by the canary's
   reading before it, and how many records the rounds confirm (two rounds agreeing within 10%,
   :func:`autoplace.profile.job.confirmed`) only with rounds read while the canary ran slow (over
   :data:`autoplace.profile.host_speed.SLOW`): written to ``experiments/results/slow_rounds.csv`` (one row per profile
   and canary band). Since session 32 such records count as unconfirmed, and ``--max-rounds`` times them again.
"""

from __future__ import annotations

import argparse
import glob
import itertools
import os

import numpy as np
import pandas as pd

from autoplace.profile import ProfileStore
from autoplace.profile.job import _a_calm_round_among_fastest, fastest_rounds


def round_pairs(record) -> tuple[np.ndarray, np.ndarray] | None:
    """``(round medians, canary slowdowns)`` of a record timed in 3 or more rounds, else None."""
    medians, slowdowns = record.get("round_medians_us"), record.get("round_slowdowns")
    if not isinstance(medians, list) or not isinstance(slowdowns, list) or len(medians) != len(slowdowns):
        return None
    m, s = np.asarray(medians, dtype=float), np.asarray(slowdowns, dtype=float)
    ok = np.isfinite(m) & np.isfinite(s) & (m > 0) & (s > 0)
    return (m[ok], s[ok]) if ok.sum() >= 3 else None


def merged_us(record, beta: float) -> float:
    """The record's time by the profile's rule, its rounds first divided by ``slowdown ** beta``."""
    pairs = round_pairs(record)
    if pairs is None:
        return float(record["median_us"])
    m, s = pairs
    return float(np.median(fastest_rounds(list(m / np.maximum(s, 1.0) ** beta))))


def evaluate(profile: str) -> dict:
    records = ProfileStore(profile).newest_good()
    x, y = [], []
    for (kind, _, target), record in records.items():
        pairs = round_pairs(record) if target == "llvm" else None
        if pairs is not None:
            x.append(np.log(pairs[1]) - np.log(pairs[1]).mean())
            y.append(np.log(pairs[0]) - np.log(pairs[0]).mean())
    name = os.path.basename(os.path.normpath(profile))
    if not x:
        return dict(profile=name, rounds=0)  # no canary before its rounds (profiled before session 21)
    x, y = np.concatenate(x), np.concatenate(y)
    beta = float(x @ y / (x @ x))
    units = {key: r for (kind, key, target), r in records.items() if kind == "unit" and target == "llvm"}
    spreads = {}
    for label, b in (("raw", 0.0), ("adjusted", beta)):
        ratios = []
        for (kind, key, target), r in records.items():
            keys = r.get("unit_keys")
            if kind != "model" or target != "llvm" or not isinstance(keys, list) or r["median_us"] < 100:
                continue
            if not all(k in units for k in keys):
                continue
            ratios.append(sum(merged_us(units[k], b) for k in keys) / merged_us(r, b))
        spreads[label] = float(np.std(np.log(ratios)))
        spreads["models"] = len(ratios)
    return dict(profile=name, rounds=len(x), beta=round(beta, 3),
                correlation=round(float(np.corrcoef(x, y)[0, 1]), 3), models_over_100us=spreads["models"],
                spread_raw=round(spreads["raw"], 3), spread_adjusted=round(spreads["adjusted"], 3))


#: Canary bands of :func:`slow_rounds` (``host_slowdown`` before a round).
SLOWDOWN_BANDS = (1.0, 1.08, 1.15, 1.2, 1.3, 1.5, 1.7, np.inf)


def slow_rounds(profile: str) -> list[dict]:
    """Per canary band, how a round reads against its record's calm rounds (records of 5 us or more with a round at
    canary <= 1.08), and how many confirmed records have no round at canary <= ``SLOW`` among their agreeing ones."""
    records = ProfileStore(profile).newest_good()
    name = os.path.basename(os.path.normpath(profile))
    ratios, slowdowns, agreeing, slow_only = [], [], 0, 0
    for (kind, _, target), record in records.items():
        pairs = round_pairs(record) if target == "llvm" else None
        if pairs is None:
            continue
        m, s = pairs
        if len(fastest_rounds(list(m))) >= 2:
            agreeing += 1
            slow_only += not _a_calm_round_among_fastest(list(m), list(s))  # the profiler's own rule
        calm = m[s <= 1.08]
        if len(calm) and float(record["median_us"]) >= 5.0:
            ratios.extend(m / calm.min())
            slowdowns.extend(s)
    ratios, slowdowns = np.asarray(ratios), np.asarray(slowdowns)
    rows = []
    for lo, hi in itertools.pairwise(SLOWDOWN_BANDS):
        x = ratios[(slowdowns >= lo) & (slowdowns < hi)]
        rows.append(dict(profile=name, canary_from=lo, canary_to=hi, rounds=len(x),
                         median_vs_calm=round(float(np.median(x)), 3) if len(x) else None,
                         share_over_1_1=round(float(np.mean(x > 1.1)), 3) if len(x) else None,
                         records_with_agreeing_rounds=agreeing, of_them_all_slow=slow_only))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--profile", nargs="*",
                        default=sorted(glob.glob(os.path.join(here, "..", "profiles", "*-2c"))))
    args = parser.parse_args(argv)
    rows = [evaluate(p) for p in args.profile]
    table = pd.DataFrame(rows)
    print(table.to_string(index=False))
    table.to_csv(os.path.join(here, "results", "canary_adjusted_rounds.csv"), index=False)
    bands = pd.DataFrame([row for p in args.profile for row in slow_rounds(p)])
    print(bands.to_string(index=False))
    bands.to_csv(os.path.join(here, "results", "slow_rounds.csv"), index=False)


if __name__ == "__main__":
    main()
