"""How much of a model's in-context timing is the instrument hook's own cost? (issue 11, session 51)

``measure="always"`` prices a model by its kernels timed inside its runs (:mod:`autoplace.profile.in_context`):
every call the VM makes is read with a hook, and the hook's own cost is taken off each reading. For a model of
many small kernels that cost is as large as the kernels: on the Zen 5, swin-base's hook cost 417-423 us a run
against 470-480 us of kernels, mobilenetv2-base's 182-185 against 581-604. An error of a tenth in the hook's cost
is then 4-9% of the model. For each model, in a fresh measurement folder: ``optimize(measure="always")``, then its
plan timed right after (calm samples, after waiting up to 60 s for the canaries), and the in-context record's
rounds, hook cost and canary readings.

    python experiments/in_context_hook_share.py [--models mobilenetv2-base swin-base] [--passes 2]
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
    return dict(model=spec, predicted_us=float(result.predicted_us), plan_us=plan["median_us"],
                error=float(result.predicted_us) / plan["median_us"] - 1.0,
                in_context_sum_us=float(np.sum(context.get("in_context_us", [np.nan]))),
                round_sums_us=[float(np.sum(r)) for r in rounds] if isinstance(rounds, list) else None,
                kernels_only_us=float(np.sum(context.get("in_context_kernel_us", [np.nan]))),
                hook_us=context.get("in_context_hook_us"), host_slowdown=context.get("in_context_host_slowdown"),
                apart=context.get("in_context_apart"), runs=context.get("in_context_runs"))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", default=["mobilenetv2-base", "swin-base"])
    parser.add_argument("--passes", type=int, default=2)
    args = parser.parse_args(argv)
    from autoplace.profile import ProfileStore
    from autoplace.profile.hardware import hardware_metadata
    from autoplace.profile.host_speed import HostSpeed

    warnings.filterwarnings("ignore", category=FutureWarning)
    profile = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "profiles",
                           hardware_metadata()["hardware_id"])
    speed = HostSpeed.for_records(ProfileStore(profile).records() if os.path.isdir(profile) else None,
                                  wait_budget_s=300)
    for _ in range(args.passes):
        for spec in args.models:
            row = one(spec, speed)
            print(f"{row['model']}: predicted {row['predicted_us']:.1f} us, plan {row['plan_us']:.1f} "
                  f"({row['error']:+.1%}); in context {row['in_context_sum_us']:.1f} (rounds "
                  f"{', '.join(f'{v:.1f}' for v in row['round_sums_us'] or [])}; kernels alone "
                  f"{row['kernels_only_us']:.1f}), hook {row['hook_us']:.1f} us a run, canary "
                  f"{row['host_slowdown']:.2f}, apart {row['apart']}, {row['runs']} runs", flush=True)


if __name__ == "__main__":
    main()
