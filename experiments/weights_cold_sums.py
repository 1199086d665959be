"""How a profile's models' measured kernels add up against their end-to-end times, timed three ways (no timing
here: the profile's records).

Per model with an end-to-end record on a target kind whose kernels were all measured: the weights every launch
reads (MB per call), those plus every launch's output (``bytes_per_call_mb``, the line's axis), and the sum over
its launches of each kernel's warm, in-model and weights-cold time (``weights_cold_median_us``: in-model with the
kernel's weights flushed from every cache; a kernel without weights counts its in-model time), plus the VM's
overheads as the cost table prices them, each as an error against the end-to-end median; and the in-context sum
where the model was timed so; ``touched_over_l2``, the bytes one call touches (its distinct kernels' weights and every
launch's output, :func:`autoplace.profile.cache_state.touched_bytes`) over the L2 that timed the kernels in-model; and
``in_model_share``, the share of the in-model sum's excess over the warm one that the end-to-end time pays
(0: warm, 1: in-model; only where the two sums differ by 5% or more), beside the share the cost table prices
(``share_rule``, :func:`autoplace.profile.cache_state.in_model_share`: ``1 - L2 / touched``) and the error of the
sum so (``share_err``). Then the line the cost table learnt
(:meth:`autoplace.cost_model.CostTable._fit_weights_line`): models above it are priced weights-cold.

    python experiments/weights_cold_sums.py amd-epyc-f25m1-2c
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import pandas as pd

HERE = os.path.dirname(os.path.abspath(__file__))
#: ``in_model_share`` only where the in-model sum differs from the warm one by this share of it: below, the share of
#: a difference that small is noise.
MIN_EXCESS = 0.05


def model_sums(table, kind: str = "llvm") -> pd.DataFrame:
    """One row per model of ``table``'s records (a :class:`~autoplace.cost_model.CostTable`) with an end-to-end
    record on ``kind`` whose kernels were all measured."""
    from autoplace.profile.cache_state import in_model_share, model_runs_in_model, touched_bytes

    df = table.records
    units = df[(df["kind"] == "unit") & (df["target"] == kind)].drop_duplicates(["key"], keep="last")
    unit_of = {str(r["key"]): r for r in units.to_dict("records")}
    runs = df[(df["kind"] == "model") & (df["target"] == kind) & (df["status"] == "ok")]
    runs = runs.drop_duplicates(["key"], keep="last")
    rows = []
    label = f"{kind}:0"
    for rec in runs.to_dict("records"):
        keys = rec.get("unit_keys")
        if not isinstance(keys, list) or not keys or not all((str(k), kind) in table.measured_ for k in keys):
            continue
        tags = [(str(k), kind) for k in keys]
        recs = [unit_of[t[0]] for t in tags if t[0] in unit_of]
        if len(recs) != len(tags):
            continue
        e2e = float(rec["median_us"])
        fixed = table.invoke_us(label, default=0.0) + len(tags) * table.launch_us(label, default=0.0)
        warm = sum(table.measured_[t] for t in tags)
        in_model = sum(table.measured_in_model_.get(t, table.measured_[t]) for t in tags)
        with_weights = [t for t, r in zip(tags, recs) if float(r.get("weight_bytes") or 0) > 0]
        timed_cold = all(t in table.measured_weights_cold_ for t in with_weights)
        cold = (sum(table.measured_weights_cold_.get(t, table.measured_in_model_.get(t, table.measured_[t]))
                    for t in tags) if timed_cold else np.nan)
        context = table.in_context_times(recs, kind)
        l2 = table.l2_bytes_.get(kind)
        excess = in_model - warm
        share = in_model_share(recs, l2)
        rows.append(dict(
            model=str(rec["key"]), kernels=len(tags), weights_mb=table.weights_per_call(recs) / 1e6,
            bytes_per_call_mb=table.bytes_per_call(recs) / 1e6,
            runs_in_model=bool(l2 is not None and model_runs_in_model(recs, l2)),
            touched_over_l2=touched_bytes(recs) / l2 if l2 else np.nan,
            in_model_share=(e2e - fixed - warm) / excess if abs(excess) >= MIN_EXCESS * warm else np.nan,
            share_rule=share, share_err=(warm + share * excess + fixed) / e2e - 1,
            weights_cold=bool(table.runs_weights_cold(recs, kind)), e2e_us=e2e,
            warm_err=(warm + fixed) / e2e - 1, in_model_err=(in_model + fixed) / e2e - 1,
            weights_cold_err=(cold + fixed) / e2e - 1,
            in_context_err=(sum(context) + table.invoke_us(label, default=0.0, in_context=True)
                            + len(tags) * table.launch_us(label, default=0.0, in_context=True)) / e2e - 1
            if context else np.nan))
    return pd.DataFrame(rows).sort_values("bytes_per_call_mb") if rows else pd.DataFrame(rows)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("hardware_id", help="a folder of profiles/")
    parser.add_argument("--min-weights-mb", type=float, default=0.5,
                        help="list models reading at least this many MB of weights per call")
    args = parser.parse_args(argv)
    from autoplace.cost_model import CostTable
    from autoplace.profile import ProfileStore

    table = CostTable(ProfileStore(os.path.join(os.path.dirname(HERE), "profiles", args.hardware_id)).records())
    sums = model_sums(table)
    sums = sums[sums["weights_mb"] >= args.min_weights_mb]
    line = table.weights_line_.get("llvm")
    print(f"{args.hardware_id}: weights line {line / 1e6:.2f} MB per call (weights and outputs)" if line else
          f"{args.hardware_id}: no weights line (no model priced better weights-cold, or none timed so)")
    pd.set_option("display.width", 200)
    print(sums.round(3).to_string(index=False))
    out = os.path.join(HERE, "results", args.hardware_id, "weights_cold_sums.csv")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    sums.assign(weights_line_mb=line / 1e6 if line else np.nan).to_csv(out, index=False)
    print("wrote", out)


if __name__ == "__main__":
    main()
