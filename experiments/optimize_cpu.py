"""autoplace vs every baseline on two CPU vdevices, measured side by side (issue: solver and optimize).

For each zoo model: optimize from the committed CPU profile (optionally with a memory cap on cpu0, so
the best plan is mixed), then build and time autoplace, all:cpu0, all:cpu1, greedy and the seed 002
manual placement in interleaved rounds (autoplace.compare). Prints one table per model and a summary
of measured autoplace / best feasible baseline (median), and writes CSVs to experiments/results/.

    python experiments/optimize_cpu.py [--size small|base] [--cap 0.5] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os

import pandas as pd

import autoplace
import autoplace.solve
from autoplace import zoo

TARGETS = {"cpu0": "llvm", "cpu1": "llvm"}
MANUAL = {"seed002": {"relax.nn.conv2d": "cpu1", "relax.matmul": "cpu1"}}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="small", choices=["small", "base"])
    parser.add_argument("--cap", type=float, default=None, help="memory cap of cpu0 as a fraction of what the model holds all on cpu0")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--models", nargs="*", default=list(zoo.ZOO))
    args = parser.parse_args(argv)
    summary = []
    out_dir = os.path.join(os.path.dirname(__file__), "results")
    os.makedirs(out_dir, exist_ok=True)
    for name in args.models:
        model = zoo.get(name, args.size)
        caps = None
        if args.cap is not None:
            free = autoplace.optimize(model, None, TARGETS)
            all_cpu0 = autoplace.solve.solve(free.problem, "all:cpu0").memory_bytes_by_target["cpu0"]
            caps = {"cpu0": int(args.cap * all_cpu0)}  # a share of what all-on-cpu0 holds there
        try:
            result = autoplace.optimize(model, None, TARGETS, memory_bytes=caps)
        except autoplace.solve.InfeasiblePlacementError as err:
            print(f"\n== {model.name}: no placement fits the cap {caps}: {err}")
            summary.append(dict(model=model.name, cap=True, status="infeasible"))
            continue
        table = autoplace.compare(model, None, TARGETS, result=result, manual=MANUAL, rounds=args.rounds)
        with pd.option_context("display.width", 220, "display.max_colwidth", 30):
            print(f"\n== {model.name} ({'cap ' + str(caps) if caps else 'no cap'})")
            print(table.to_string(float_format=lambda v: f"{v:.2f}"))
        tag = f"{model.name}{'_cap' if caps else ''}"
        table.to_csv(os.path.join(out_dir, f"optimize_cpu_{tag}.csv"))
        feasible = table[(table.index != "autoplace") & ~table["status"].str.contains("over the memory cap|infeasible")]
        best = feasible["measured_median_us"].min()
        summary.append(dict(model=model.name, cap=bool(caps), status=result.plan.status,
                            predicted_us=result.predicted_us,
                            autoplace_median_us=table.loc["autoplace", "measured_median_us"],
                            best_baseline=feasible["measured_median_us"].idxmin(), best_baseline_median_us=best,
                            ratio=table.loc["autoplace", "measured_median_us"] / best,
                            prediction_error=table.loc["autoplace", "error"]))
    summary = pd.DataFrame(summary)
    print("\n== summary: measured autoplace / best feasible baseline (medians, same run)")
    print(summary.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    summary.to_csv(os.path.join(out_dir, f"optimize_cpu_summary_{args.size}{'_cap' if args.cap else ''}.csv"),
                   index=False)


if __name__ == "__main__":
    main()
