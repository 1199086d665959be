"""Give back the calm rounds that the first weights-cold jobs dropped: one repair of a profile folder.

Until session 45 a job timed a CPU kernel with weights whose record lacked the weights-cold timing
(``weights_cold_timing``) afresh: a new record whose rounds started from nothing, so the kernel's warm and in-model
rounds of before (often of a calmer host) no longer counted. On the AMD Zen 3 (session 45) the op families'
kernels re-timed so read a median 1.18x (warm) and 1.22x (in-model) their earlier records, the host-speed canary
at 1.46x its fastest. A job now goes on with such a kernel's rounds (``job._profile_extracted``, ``continued``)
and sets its weights-cold time from the rounds that timed both (``job._weights_cold_on_in_model``).

This appends, for every kernel whose newest record is such a fresh start (its weights-cold rounds as many as its
rounds, no ``round_weights_cold_in_model_us``) and that has an earlier record (the same kernel: the key is its TIR) of the same in-model
timing without the weights-cold timing, that earlier record with each of the new record's rounds merged in, in
order (:func:`autoplace.profile.job.merge_rounds`), marked ``rounds_rejoined_at``. Nothing is timed; the store stays
append-only (the older records stay, the newest of a key wins).

    python experiments/rejoin_rounds.py [--profile profiles/<hardware id>] [--dry-run]
"""

from __future__ import annotations

import argparse
import datetime

import numpy as np

from autoplace.profile import ProfileStore
from autoplace.profile.cache_state import IN_MODEL_TIMING, WEIGHTS_COLD_TIMING
from autoplace.profile.hardware import measured_by
from autoplace.profile.job import merge_rounds

#: The per-round fields of a record, and the single-round field each round of it becomes.
ROUND_FIELDS = (("round_medians_us", "median_us"), ("round_in_model_medians_us", "in_model_median_us"),
                ("round_weights_cold_medians_us", "weights_cold_median_us"), ("round_slowdowns", "host_slowdown"))


def fresh_start(record: dict) -> bool:
    """Whether a kernel's record was started afresh for the weights-cold timing (all its rounds timed it)."""
    cold = record.get("round_weights_cold_medians_us")
    rounds = int(record.get("rounds", 1))
    return (record.get("weights_cold_timing") == WEIGHTS_COLD_TIMING and isinstance(cold, list)
            and "round_weights_cold_in_model_us" not in record and len(cold) == rounds
            and all(isinstance(record.get(f), list) and len(record[f]) == rounds for f, _ in ROUND_FIELDS[:2]))


def rejoined(earlier: dict, fresh: dict) -> dict:
    """``earlier`` with each round of ``fresh`` merged in, in order; ``fresh``'s other fields win."""
    rounds = int(fresh["rounds"])
    merged = {k: v for k, v in fresh.items() if not k.startswith("round") and k not in ("rounds", "crc")}
    merged.update({k: v for k, v in earlier.items() if k.startswith("round") or k in (
        "median_us", "min_us", "max_us", "samples", "rounds", "host_slowdown", "in_model_median_us", "in_model_min_us")})
    for k in ("weights_cold_median_us", "weights_cold_min_us"):
        merged.pop(k, None)
    for i in range(rounds):
        timing = {single: fresh[field][i] for field, single in ROUND_FIELDS
                  if isinstance(fresh.get(field), list) and len(fresh[field]) == rounds}
        timing.setdefault("host_slowdown", None)
        timing.update(min_us=fresh["min_us"], max_us=fresh["max_us"], samples=0,
                      in_model_min_us=fresh["in_model_min_us"], in_model_timing=fresh["in_model_timing"],
                      weights_cold_min_us=fresh["weights_cold_min_us"], weights_cold_timing=fresh["weights_cold_timing"])
        merged = merge_rounds(merged, timing)
    merged.update(measured_at=fresh["measured_at"], samples=int(earlier.get("samples", 0)) + int(fresh.get("samples", 0)),
                  rounds_rejoined_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    return merged


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile", default=f"profiles/{measured_by()['hardware_id']}")
    parser.add_argument("--dry-run", action="store_true", help="say what would change, append nothing")
    args = parser.parse_args()
    store = ProfileStore(args.profile)
    history: dict = {}
    for record in store.records(allow_foreign=True).to_dict("records"):
        if record.get("kind") == "unit" and record.get("status") == "ok" and record.get("target") == "llvm":
            history.setdefault(record["key"], []).append({k: v for k, v in record.items()
                                                          if not (isinstance(v, float) and np.isnan(v))})
    out, warm, in_model = [], [], []
    for records in history.values():
        fresh = records[-1]
        if not fresh_start(fresh):
            continue
        # the key is the kernel's TIR: a record of an older schedule version timed this very kernel
        earlier = [r for r in records[:-1] if "weights_cold_median_us" not in r
                   and r.get("in_model_timing") == IN_MODEL_TIMING and str(r.get("measured_at")) < str(fresh["measured_at"])]
        if not earlier:
            continue
        merged = rejoined(earlier[-1], fresh)
        out.append(merged)
        warm.append(merged["median_us"] / fresh["median_us"])
        in_model.append(merged["in_model_median_us"] / fresh["in_model_median_us"])
    print(f"{len(out)} kernels rejoined with their earlier rounds in {args.profile}")
    if out:
        print("warm median rejoined / fresh: p10 {:.3f} median {:.3f} p90 {:.3f}".format(*np.percentile(warm, [10, 50, 90])))
        print("in-model median rejoined / fresh: p10 {:.3f} median {:.3f} p90 {:.3f}".format(
            *np.percentile(in_model, [10, 50, 90])))
    if not args.dry_run and out:
        with store.lock():
            for record in out:
                store.append(record)


if __name__ == "__main__":
    main()
