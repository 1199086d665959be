"""When is a CPU kernel worth two threads? Each zoo kernel built at several parallel thresholds, timed side by side.

``autoplace.backend.cpu_schedules`` runs a block's outer loop in parallel when its work reaches
``PARALLEL_MIN_WORK`` of its rule (multiply-adds of a matmul or convolution, elements of an elementwise block,
iterations of a row reduction). A parallel region costs a thread wake-up and a join; on a small kernel that is
more than the work it splits, and on a shared host the second core is not always there. A threshold variant is
a number (every rule at that work) or ``default`` (the shipped ``PARALLEL_MIN_WORK``). For each variant the
models' kernels are extracted as the build makes them; a kernel whose TIR does not change between variants is
timed once. All builds are timed in interleaved rounds (``time_evaluator``, ~1 ms per sample, median of each
round), so they see the same host. The CSV carries each kernel's work (the largest block's iterations) and the
rule that scheduled it, to read the break-even work per rule off the variants "1" (always parallel) and a huge
number (never).

    python experiments/parallel_threshold.py [--models inception mobilenetv2-base ...] [--thresholds default 4096]

Writes ``experiments/results/<hardware id>/parallel_threshold.csv`` (one row per kernel and threshold) and prints,
per model, the sum of its kernels' times (each launch counted) at every threshold relative to the first.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import pandas as pd
from kernel_timing import time_variants
from results_folder import results_folder

DEFAULT_MODELS = ("inception", "mobilenetv2", "convnext", "resnet", "bert", "gpt2", "vit", "cnn",
                  "inception-base", "mobilenetv2-base", "convnext-base", "resnet-base", "cnn-base", "bert-base",
                  "gpt2-base", "vit-base")
DEFAULT_THRESHOLDS = ("default", "4096", "1", str(1 << 62))


def kernels_at(specs, threshold: str) -> dict:
    """``{spec: [(func_name, kernel key (a TIR hash), unit)]}``: each model's kernel launches built with
    ``threshold`` (``"default"`` or a work every rule parallelises from)."""
    from autoplace import zoo
    from autoplace.backend import cpu_schedules
    from autoplace.profile.units import extract_units

    shipped = dict(cpu_schedules.PARALLEL_MIN_WORK)
    if threshold != "default":
        cpu_schedules.PARALLEL_MIN_WORK.update(dict.fromkeys(shipped, int(threshold)))
    try:
        out = {}
        for spec in specs:
            units = extract_units(zoo.parse(spec), "llvm")
            out[spec] = [(u.func_name, u.key, u) for u in units]
    finally:
        cpu_schedules.PARALLEL_MIN_WORK.update(shipped)
    return out


def block_work(prim_func) -> int:
    """Iterations of the kernel's largest block (its spatial and reduction extents multiplied)."""
    from tvm import s_tir, tirx

    from autoplace.backend.cpu_schedules import _root

    sch = s_tir.Schedule(prim_func)
    work = 0
    for block in sch.get_child_blocks(_root(sch)):
        n = 1
        for iv in sch.get(block).iter_vars:
            n *= int(iv.dom.extent) if isinstance(iv.dom.extent, tirx.IntImm) else 1
        work = max(work, n)
    return work


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", default=list(DEFAULT_MODELS))
    parser.add_argument("--thresholds", nargs="*", default=list(DEFAULT_THRESHOLDS))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tag", default="")
    args = parser.parse_args(argv)

    from autoplace.backend.cpu_schedules import RULE_ATTR

    by_threshold = {t: kernels_at(args.models, t) for t in args.thresholds}
    rounds = time_variants(by_threshold, args.rounds)
    rows = []
    for t, launches in by_threshold.items():
        for spec, spec_launches in launches.items():
            for func_name, tir_hash, unit in spec_launches:
                us = rounds[tir_hash]
                attrs = unit.prim_func.attrs
                rows.append(dict(model=spec, threshold=t, func_name=func_name, tir_hash=tir_hash,
                                 rule=str(attrs[RULE_ATTR]) if attrs and RULE_ATTR in attrs else "",
                                 work=block_work(unit.prim_func), parallel="T.parallel" in unit.prim_func.script(),
                                 median_us=float(np.median(us)), min_us=float(np.min(us))))
    table = pd.DataFrame(rows)
    first = args.thresholds[0]
    summary = table.groupby(["model", "threshold"]).median_us.sum().unstack("threshold")
    summary = summary.div(summary[first], axis=0).round(3)
    summary.insert(0, f"sum_us_at_{first}", table[table.threshold == first].groupby("model").median_us.sum().round(1))
    pd.set_option("display.width", 200)
    print(summary.to_string())
    numeric = sorted((t for t in args.thresholds if t != "default"), key=int)
    if len(numeric) >= 2 and int(numeric[0]) <= 1:
        # Break-even per rule: single-thread over two-thread time of each kernel, by its work (log2 bins).
        par = table[table.threshold == numeric[0]].reset_index(drop=True)
        ser = table[table.threshold == numeric[-1]].reset_index(drop=True)
        both = par.assign(serial_us=ser.median_us, speedup=ser.median_us / par.median_us)
        both = both[par.parallel].drop_duplicates("tir_hash")
        both["log2_work"] = np.floor(np.log2(both.work.clip(lower=1))).astype(int)
        print("\nsingle-thread / two-thread time by rule and log2(work) (median over kernels):")
        print(both.pivot_table(index="log2_work", columns="rule", values="speedup", aggfunc="median").round(2)
              .to_string())
    out_dir = results_folder()
    path = os.path.join(out_dir, f"parallel_threshold{args.tag}.csv")
    table.to_csv(path, index=False)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
