"""How much a tiny kernel's time depends on where its buffers happen to lie: each kernel timed on fresh allocations.

A profile times a kernel once per round on arguments allocated for that round (``autoplace.profile.measure``), and
keeps the median of the rounds. For kernels of a few nanoseconds the buffers' addresses matter (cache sets, 4 KiB
aliasing between an input and the output): this times every profiled kernel faster than ``--limit-us`` on
``--allocations`` argument sets, all kept alive so that each lies elsewhere, one after the other (each a median of
3 samples of about 10 ms), and compares the median over allocations with the profile's record.

    python experiments/allocation_spread.py [--profile profiles/<hardware id>] [--limit-us 0.05] [--allocations 9]

Writes ``experiments/results/<hardware id>/allocation_spread.csv``: per kernel its record, the time on each
allocation, their median, min and max.
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np
import pandas as pd
from results_folder import results_folder


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default=None, help="profile folder (default: this machine's)")
    parser.add_argument("--limit-us", type=float, default=0.05, help="kernels whose record is under this")
    parser.add_argument("--allocations", type=int, default=9)
    args = parser.parse_args(argv)

    import tvm
    from kernel_timing import build_kernels

    from autoplace import zoo
    from autoplace.backend.cpu_schedules import cpu_target
    from autoplace.cost_model.cost_model import training_units
    from autoplace.op_families import op_family_models
    from autoplace.profile import ProfileStore, default_profile_dir
    from autoplace.profile.measure import _random_args
    from autoplace.profile.units import extract_units

    folder = args.profile or default_profile_dir()
    units = training_units(ProfileStore(folder).records())
    units = units[(units["target"] == "llvm") & (units["median_us"] < args.limit_us)].set_index("key")
    op_models = {m.name: m for m in op_family_models()}
    rows, done = [], set()
    for name in sorted(set(units["model"])):
        if name.startswith("grid-"):
            continue  # the stride grid's kernels are all larger
        model = op_models.get(name) or zoo.parse(name)
        for unit in extract_units(model, cpu_target("llvm")):
            if unit.key not in units.index or unit.key in done:
                continue
            done.add(unit.key)
            (lib, first), = build_kernels([(unit.key, unit)]).values()
            alive, times_us = [first], []
            for i in range(args.allocations):
                if i:  # each further allocation kept alive, so it lies elsewhere
                    alive.append(_random_args(unit.arg_shapes, unit.arg_dtypes, unit.num_outputs, tvm.cpu()))
                lib["main"](*alive[-1])
                samples = lib.time_evaluator("main", tvm.cpu(), number=1, repeat=3, min_repeat_ms=10)(*alive[-1])
                times_us.append(float(np.median(samples.results)) * 1e6)
            rows.append(dict(key=unit.key, model=name, func_name=unit.func_name,
                             record_us=float(units.loc[unit.key, "median_us"]), allocations_us=json.dumps(times_us),
                             median_us=float(np.median(times_us)), min_us=min(times_us), max_us=max(times_us)))
    table = pd.DataFrame(rows)
    path = os.path.join(results_folder(os.path.basename(os.path.normpath(folder))), "allocation_spread.csv")
    table.to_csv(path, index=False)
    spread = table["max_us"] / table["min_us"]
    record = table["record_us"] / table["median_us"]
    print(f"{len(table)} kernels under {args.limit_us} us, {args.allocations} allocations each")
    print(f"max/min over allocations: median {spread.median():.2f}, 90% {spread.quantile(0.9):.2f}, max {spread.max():.2f}")
    print(f"record / median over allocations: median {record.median():.3f}, std {record.std():.3f}, "
          f"{record.min():.2f}-{record.max():.2f}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
