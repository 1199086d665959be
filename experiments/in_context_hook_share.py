"""How much of a model's in-context timing is the instrument hook's own cost? (issue 11, session 51)

``measure="always"`` prices a model by its kernels timed inside its runs (:mod:`autoplace.profile.in_context`):
every call the VM makes is read with a hook, and the hook's own cost is taken off each reading. For a model of
many small kernels that cost is as large as the kernels: on the Zen 5, swin-base's hook cost 417-423 us a run
against 470-480 us of kernels, mobilenetv2-base's 182-185 against 581-604. An error of a tenth in the hook's cost
is then 4-9% of the model. For each model, in a fresh measurement folder: ``optimize(measure="always")``, then its
plan timed right after (calm samples, after waiting up to 60 s for the canaries), and the in-context record's
rounds, hook cost and canary readings.

Since session 52 each round also times the build without the hook in the same samples (``in_context_wall_us``) and
the prediction takes the in-context times as shares of it. ``readings_over_wall`` is each round's in-context sum
(the hook's cost taken off) over that round's time without the hook: what the hook's estimate left in the
readings, round by round, that the prediction no longer carries (the VM's own dispatch between calls, a few us a
run, is in the time without the hook only).

    python experiments/in_context_hook_share.py [--models mobilenetv2-base swin-base] [--passes 2] [--tag _s52]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import warnings

import numpy as np

import autoplace
from autoplace import zoo


def one(spec: str, speed) -> dict:
    from measure_auto import time_plan

    from autoplace.profile import ProfileStore, measured_here_dir

    model = zoo.parse(spec)
    with tempfile.TemporaryDirectory() as cache:
        os.environ["AUTOPLACE_CACHE"] = cache
        result = autoplace.optimize(model, targets={"cpu": "llvm"}, measure="always", progress=False)
        records = ProfileStore(measured_here_dir()).records(allow_foreign=True)
        context = records[records["kind"] == "context"].iloc[-1].to_dict() if not records.empty else {}
        inputs = model.random_inputs(seed=0)
        result.placement.run(*inputs)
        plan, _ = time_plan(result.placement, inputs, speed, wait_s=60)
    os.environ.pop("AUTOPLACE_CACHE", None)
    rounds = context.get("round_in_context_us")
    rounds = rounds if isinstance(rounds, list) else [context.get("in_context_us", [np.nan])]
    walls = context.get("round_in_context_wall_us")
    walls = walls if isinstance(walls, list) and len(walls) == len(rounds) else [context.get("in_context_wall_us")]
    return dict(model=spec, predicted_us=float(result.predicted_us), plan_us=plan["median_us"],
                error=float(result.predicted_us) / plan["median_us"] - 1.0,
                in_context_sum_us=float(np.sum(context.get("in_context_us", [np.nan]))),
                round_sums_us=[float(np.sum(r)) for r in rounds],
                round_walls_us=[float(w) if w is not None else np.nan for w in walls],
                readings_over_wall=[float(np.sum(r)) / float(w) if w else np.nan for r, w in zip(rounds, walls)],
                wall_us=context.get("in_context_wall_us", np.nan),
                kernels_only_us=float(np.sum(context.get("in_context_kernel_us", [np.nan]))),
                hook_us=context.get("in_context_hook_us"), host_slowdown=context.get("in_context_host_slowdown"),
                apart=context.get("in_context_apart"), runs=context.get("in_context_runs"))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", default=["mobilenetv2-base", "swin-base"])
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--tag", default="", help="suffix of the result file (in_context_hook_share<tag>.csv)")
    args = parser.parse_args(argv)
    from measure_auto import this_machines_speed
    from results_folder import write_csv

    warnings.filterwarnings("ignore", category=FutureWarning)
    speed = this_machines_speed(wait_budget_s=300)
    rows = []
    for pass_ in range(args.passes):
        for spec in args.models:
            row = dict(one(spec, speed), **{"pass": pass_ + 1})
            rows.append(row)
            print(f"{row['model']}: predicted {row['predicted_us']:.1f} us, plan {row['plan_us']:.1f} "
                  f"({row['error']:+.1%}); in context {row['in_context_sum_us']:.1f} (rounds "
                  f"{', '.join(f'{v:.1f}' for v in row['round_sums_us'])}; kernels alone "
                  f"{row['kernels_only_us']:.1f}), without the hook {row['wall_us']:.1f} (rounds "
                  f"{', '.join(f'{v:.1f}' for v in row['round_walls_us'])}; readings over it "
                  f"{', '.join(f'{v:.3f}' for v in row['readings_over_wall'])}), hook {row['hook_us']:.1f} us a run, "
                  f"canary {row['host_slowdown']:.2f}, apart {row['apart']}, {row['runs']} runs", flush=True)
    write_csv(rows, f"in_context_hook_share{args.tag}.csv")


if __name__ == "__main__":
    main()
