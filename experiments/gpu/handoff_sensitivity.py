"""What autoplace would pick on a GPU box's profile for a range of GPU -> CPU hand-off costs, and what those plans
measured where the box timed the same placement (no new measurement).

    python experiments/gpu/handoff_sensitivity.py experiments/results/<gpu box id>-s38 --profile profiles/<gpu box id> \
        --models mlp-base cnn-base bert-base inception-base llama-base detect-base --gpu-cap-mb llama-base=10

The hand-off (:attr:`autoplace.solve.problem.CopyCost.handoff_us`) is not in the profile until the box times the
probes of ``handoff_probes.py``; this table says how much the choice depends on it. Writes
``handoff_sensitivity.csv`` into the results folder (which holds ``raw/plan_records.jsonl`` and
``raw/plans_predicted.json`` of the plans timed).
"""

from __future__ import annotations

import argparse
import os
import sys

HANDOFFS_US = (0.0, 15.0, 30.0, 60.0, 120.0)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder")
    parser.add_argument("--profile", required=True)
    parser.add_argument("--models", nargs="+", required=True)
    parser.add_argument("--gpu-cap-mb", nargs="*", default=[])
    parser.add_argument("--handoffs-us", nargs="+", type=float, default=list(HANDOFFS_US))
    args = parser.parse_args(argv)

    import numpy as np
    import pandas as pd

    sys.path.insert(0, os.path.dirname(__file__))
    from plans import TARGETS, _crc, _parse_caps, variant_costs
    from table import timed_plans

    from autoplace import optimize, zoo
    from autoplace.targets import TargetSet

    by_key, timed_crc = timed_plans(args.folder)
    targets = TargetSet(TARGETS)
    caps = _parse_caps(args.gpu_cap_mb)
    rows = []
    for spec in args.models:
        model = zoo.parse(spec)
        memory = {"gpu": caps[spec]} if spec in caps else None
        base = optimize(model, None, targets, profile_dir=args.profile, measure="never", memory_bytes=memory,
                        progress=False)
        for handoff in args.handoffs_us:
            result = optimize(model, None, targets, costs=variant_costs(base.costs, "handoff", handoff),
                              measure="never", memory_bytes=memory, progress=False)
            crc = _crc(result.placement)
            label = (timed_crc.get((spec, crc)) or [None])[0]
            median = float(np.median([r["median_us"] for r in by_key[f"{spec}:{label}"]])) if label else np.nan
            rows.append(dict(model=spec, handoff_us=handoff, **{f"{t}_kernels": n for t, n in
                                                                result.placement.ops_per_target().items()},
                             copies=len(result.placement.copies), predicted_us=result.predicted_us,
                             timed_as=label, measured_median_us=median, placement_crc=crc))
            print(rows[-1], flush=True)
    df = pd.DataFrame(rows)
    df.to_csv(os.path.join(args.folder, "handoff_sensitivity.csv"), index=False, float_format="%.4g")
    print(df.drop(columns=["placement_crc"]).to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
