"""Does ``optimize(measure="auto")`` predict a never-profiled model's latency? (issue 11)

For each model, with an empty measurement folder of this machine (``$AUTOPLACE_CACHE`` set to a fresh
temporary folder): ``autoplace.optimize(model, {"cpu": "llvm"}, measure="auto")`` measures the kernels
that this machine's profile (the committed one, when this is the machine that measured it) lacks, plans
(all on the one CPU target), and ``autoplace.compare`` builds the plan and times it end to end. Reported:
the predicted latency, the measured median/min/max of the built plan, their ratio, how many kernels were
priced by measurement, how long measuring and planning took, and the prediction of the cost model alone
(``measure="never"``) for comparison.
Goal (issue 11): predicted within 5% of measured.

    python experiments/measure_auto.py [--models mlp-base bert-base llama-base ...] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import pandas as pd

import autoplace
from autoplace import zoo

DEFAULT_MODELS = ("mlp-base", "cnn-base", "bert-base", "inception-base", "resnet-base", "vit-base", "gpt2-base",
                  "llama-base", "t5-encoder-base")
TARGETS = {"cpu": "llvm"}


def run(spec: str, rounds: int) -> dict:
    model = zoo.parse(spec)
    row = dict(model=spec, kernels=None)
    with tempfile.TemporaryDirectory() as cache:
        os.environ["AUTOPLACE_CACHE"] = cache
        start = time.perf_counter()
        result = autoplace.optimize(model, targets=TARGETS, measure="auto", progress=False)
        row["measure_and_plan_s"] = time.perf_counter() - start
        summary = result.summary()
        row.update(kernels=int(summary.loc["cpu", "kernels"]), measured_kernels=int(summary.loc["cpu", "measured"]),
                   predicted_kernels=int(summary.loc["cpu", "predicted"]))
        table = autoplace.compare(model, targets=TARGETS, result=result, baselines=False, rounds=rounds)
        plan = table.loc["autoplace"]
        row.update(predicted_us=float(plan["predicted_us"]), measured_median_us=float(plan["measured_median_us"]),
                   measured_min_us=float(plan["measured_min_us"]), measured_max_us=float(plan["measured_max_us"]))
        row["error"] = row["predicted_us"] / row["measured_median_us"] - 1.0
    os.environ.pop("AUTOPLACE_CACHE", None)
    never = autoplace.optimize(model, targets=TARGETS, measure="never", progress=False)
    row["never_predicted_us"] = float(never.predicted_us)
    row["never_error"] = row["never_predicted_us"] / row["measured_median_us"] - 1.0
    return row


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", default=list(DEFAULT_MODELS))
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    from autoplace.profile.hardware import hardware_metadata

    rows = []
    for spec in args.models:
        rows.append(run(spec, args.rounds))
        r = rows[-1]
        print(f"{spec}: predicted {r['predicted_us']:.1f} us, measured {r['measured_median_us']:.1f} us "
              f"({r['error']:+.1%}); cost model alone {r['never_error']:+.1%}; measuring took "
              f"{r['measure_and_plan_s']:.0f} s", flush=True)
    table = pd.DataFrame(rows)
    meta = hardware_metadata()
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    within = int((table["error"].abs() <= 0.05).sum())
    print(f"within 5%: {within} of {len(table)}; worst |error| {table['error'].abs().max():.1%}")
    out = os.path.join(os.path.dirname(__file__), "results", "measure_auto")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    table.to_csv(out + ".csv", index=False)
    with open(out + ".json", "w") as f:
        json.dump(dict(meta=meta, threads=os.environ.get("TVM_NUM_THREADS"), rows=rows), f, indent=1)
    print(f"wrote {out}.csv / .json")


if __name__ == "__main__":
    main()
