"""Transposes read through fused reshapes, tiled (schedule version 6) against the plain vectorised copy before.

Attention's key transpose fuses into one kernel with the reshapes around it (``reshape -> reshape -> transpose
-> transpose -> broadcast_to -> reshape``), whose read indices are div/mod chains: ``cpu_schedules._transpose_axes``
saw no transpose there, so the kernel ran as a vectorised copy gathering each vector from eight rows 1 KB apart.
It now simplifies the indices over the block's ranges first, and such kernels get the tiled transpose (a tile
of input rows staged with contiguous loads). This builds every kernel of the models both ways
(``cpu_schedules.TRANSPOSE_THROUGH_RESHAPES``), checks the new ones against TVM's unscheduled kernel (outputs
start as NaN, so an element left unwritten shows), and times the kernels that differ in interleaved rounds.

    python experiments/transpose_chains.py [--models bert-base gpt2-base ...] [--rounds 5]

Writes ``experiments/results/<hardware id>/transpose_chains.csv``.
"""

from __future__ import annotations

import argparse
import os
from unittest import mock

import numpy as np
import pandas as pd
from kernel_timing import build_kernels, time_interleaved
from results_folder import results_folder

DEFAULT_MODELS = ("bert", "gpt2", "llama", "t5-encoder", "whisper-encoder", "swin", "convnext",
                  "bert-base", "gpt2-base", "llama-base", "vit-base", "t5-encoder-base")


def main(argv=None):
    from autoplace import zoo
    from autoplace.backend import cpu_schedules, pipeline
    from autoplace.profile.units import extract_units

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", default=list(DEFAULT_MODELS))
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    out_dir = results_folder()

    pairs, plain_units = [], {}
    for spec in args.models:
        model = zoo.parse(spec)
        new = extract_units(model, "llvm")
        with mock.patch.object(cpu_schedules, "TRANSPOSE_THROUGH_RESHAPES", False):
            old = extract_units(model, "llvm")
        with mock.patch.object(pipeline, "schedule_cpu_kernels", lambda mod, **kwargs: mod):
            plain = extract_units(model, "llvm")
        for n, o, p in zip(new, old, plain):
            if n.key != o.key:
                pairs.append((spec, n, o))
                plain_units[n.key] = p
    built = build_kernels([(u.key, u) for _, n, o in pairs for u in (n, o)])
    worst = 0.0
    for key, unit in plain_units.items():
        lib, targs = built[key]
        ref_lib, ref_args = build_kernels([(key, unit)])[key]
        n_out = unit.num_outputs
        for a, b in zip(targs[:-n_out], ref_args[:-n_out]):
            a.copyfrom(b.numpy())
        for a in targs[-n_out:]:
            a.copyfrom(np.full(a.shape, np.nan, a.dtype))
        lib["main"](*targs)
        ref_lib["main"](*ref_args)
        for a, b in zip(targs[-n_out:], ref_args[-n_out:]):
            worst = max(worst, float(np.nan_to_num(np.abs(a.numpy() - b.numpy()), nan=np.inf).max()))
    print(f"{len(pairs)} kernel launches differ, {len(plain_units)} distinct; largest difference from TVM's "
          f"unscheduled kernel: {worst:.1e}")
    times = time_interleaved(built, args.rounds)
    rows = []
    for spec, new, old in pairs:
        t_new, t_old = float(np.median(times[new.key])), float(np.median(times[old.key]))
        rows.append(dict(model=spec, func_name=new.func_name, shapes=str(new.arg_shapes), old_us=t_old, new_us=t_new,
                         ratio=t_new / t_old))
    table = pd.DataFrame(rows)
    path = os.path.join(out_dir, "transpose_chains.csv")
    table.to_csv(path, index=False)
    print(table.groupby("model", sort=False).agg(kernels=("ratio", "size"), old_us=("old_us", "sum"),
                                                 new_us=("new_us", "sum"), median_ratio=("ratio", "median"))
          .to_string(float_format=lambda v: f"{v:.3f}"))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
