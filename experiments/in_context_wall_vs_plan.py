"""Does the in-context timing's time without the hook read what the plan's own timing reads? (issue 11, session 52)

``measure="auto"`` prices a model's kernels as shares of ``in_context_wall_us``, its build timed without the
instrument hook inside the in-context samples (:func:`autoplace.profile.in_context.time_in_context`), and a plan is
timed end to end by :func:`autoplace.profile.job.time_end_to_end` (what ``compare`` and ``experiments/measure_auto.py``
read). For each model: the all-CPU plan built once, then ``--pairs`` times, alternately, its in-context timing and its
end-to-end timing, each after waiting up to 30 s for the host-speed canaries to read calm: the ratio end to end /
without the hook, pair by pair, says whether the two timings of one build disagree beyond the host's noise.

    python experiments/in_context_wall_vs_plan.py [--models bert-base vit-base swin-base] [--pairs 5] [--tag _s52]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import warnings

import numpy as np
import pandas as pd

import autoplace
from autoplace import zoo


def pairs(spec: str, speed, count: int) -> list[dict]:
    from autoplace.profile import extract_units
    from autoplace.profile.in_context import time_in_context
    from autoplace.profile.job import time_end_to_end

    model = zoo.parse(spec)
    with tempfile.TemporaryDirectory() as cache:
        os.environ["AUTOPLACE_CACHE"] = cache
        placement = autoplace.optimize(model, targets={"cpu": "llvm"}, measure="never", progress=False).placement
    os.environ.pop("AUTOPLACE_CACHE", None)
    inputs = model.random_inputs(seed=0)
    placement.run(*inputs)
    units = extract_units(model, "llvm")
    args = placement.runner.device_inputs(inputs) + list(placement.runner.weights)
    rows = []
    for i in range(count):
        speed.wait_calm(max_s=30)
        context = time_in_context(placement.build(), placement.runner.targets.devices, args, units, speed=speed)
        if "in_context_wall_us" not in context:
            raise RuntimeError(f"{spec}: {context.get('in_context_error')}")
        e2e = time_end_to_end(placement.runner, inputs, "llvm", repeat=5, speed=speed)
        rows.append(dict(model=spec, pair=i + 1, wall_us=context["in_context_wall_us"],
                         in_context_sum_us=float(np.sum(context["in_context_us"])), end_to_end_us=e2e["median_us"],
                         end_to_end_over_wall=e2e["median_us"] / context["in_context_wall_us"]))
        print(f"{spec} pair {i + 1}: without the hook {rows[-1]['wall_us']:.1f} us, in-context sum "
              f"{rows[-1]['in_context_sum_us']:.1f}, end to end {rows[-1]['end_to_end_us']:.1f} "
              f"({rows[-1]['end_to_end_over_wall']:.3f}x)", flush=True)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", default=["bert-base", "vit-base", "swin-base"])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--tag", default="", help="suffix of the result file (in_context_wall_vs_plan<tag>.csv)")
    args = parser.parse_args(argv)
    from measure_auto import this_machines_speed
    from results_folder import write_csv

    warnings.filterwarnings("ignore", category=FutureWarning)
    speed = this_machines_speed(wait_budget_s=300)
    table = pd.DataFrame([row for spec in args.models for row in pairs(spec, speed, args.pairs)])
    summary = table.groupby("model")["end_to_end_over_wall"].agg(["median", "min", "max"])
    print(summary.to_string(float_format=lambda v: f"{v:.3f}"))
    write_csv(table, f"in_context_wall_vs_plan{args.tag}.csv")


if __name__ == "__main__":
    main()
