"""All-on-one-device speed: autoplace's per-device fusing build vs the plain single-device tvm.compile.

For each zoo model, the same module is built twice: ``single_device_build(mod)`` (what a user writes
for one device, ``tvm.compile(mod, target)`` with TVM's default CPU pipeline, plus the same CPU schedules
and ``mcpu`` autoplace uses, so that the comparison is between builds, not between schedules) and
autoplace's build of the placement "everything on the CPU".
Both are timed in this process, interleaved round by round (``VirtualMachine.time_evaluator``),
and the ratio of medians is printed (goal: <= 1.05). Results go to experiments/results/.

    python experiments/fused_build_ratio.py [--size small|base] [--rounds 5]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform

import numpy as np
import pandas as pd
import tvm

import autoplace
from autoplace import zoo
from autoplace.backend import Runner, single_device_build


def measure(name: str, size: str, rounds: int, repeat: int) -> dict:
    model = zoo.get(name, size)
    inputs = model.random_inputs()
    host = autoplace.TargetSet({"cpu": "llvm"})
    plain = Runner(single_device_build(model.mod), host, model.params, ["cpu"] * len(model.params),
                   ["cpu"] * len(inputs))
    placement = autoplace.place(model, None, None, {"cpu": "llvm"})
    ours = placement.runner
    # Same numbers first.
    a, b = plain(*inputs), ours(*inputs)
    for x, y in zip(a if isinstance(a, tuple) else (a,), b if isinstance(b, tuple) else (b,)):
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-4)
    # Warm up, then interleave rounds so both see the same machine noise.
    one = plain.time_us(inputs, repeat=3)
    number = max(1, int(20_000 / max(1.0, float(np.median(one)))))  # ~20 ms per sample
    ours.time_us(inputs, repeat=3)
    plain_us, ours_us = [], []
    for _ in range(rounds):
        plain_us.extend(plain.time_us(inputs, number=number, repeat=repeat))
        ours_us.extend(ours.time_us(inputs, number=number, repeat=repeat))
    lowered = autoplace.backend.lower(placement.mod)
    kernels = sum(1 for _, f in lowered.functions_items() if isinstance(f, tvm.tirx.PrimFunc))
    return dict(
        model=name,
        size=size,
        ops=sum(1 for _, d in placement.graph.nodes(data=True) if d["kind"] == "op"),
        fused_kernels=kernels,
        plain_median_us=float(np.median(plain_us)),
        plain_min_us=float(np.min(plain_us)),
        autoplace_median_us=float(np.median(ours_us)),
        autoplace_min_us=float(np.min(ours_us)),
        ratio_of_medians=float(np.median(ours_us) / np.median(plain_us)),
        samples=len(ours_us),
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="base", choices=["small", "base"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--models", nargs="*", default=list(zoo.ZOO))
    args = parser.parse_args(argv)
    rows = [measure(m, args.size, args.rounds, args.repeat) for m in args.models]
    table = pd.DataFrame(rows)
    pd.set_option("display.width", 200)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    meta = dict(
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        machine=platform.processor() or platform.machine(),
        cpu_count=os.cpu_count(),
        tvm=tvm.__version__,
    )
    os.makedirs(os.path.join(os.path.dirname(__file__), "results"), exist_ok=True)
    out = os.path.join(os.path.dirname(__file__), "results", f"fused_build_ratio_{args.size}.json")
    with open(out, "w") as f:
        json.dump(dict(meta=meta, rows=rows), f, indent=1)
    print(f"wrote {out}")
    worst = table["ratio_of_medians"].max()
    print(f"worst ratio of medians: {worst:.3f} (goal <= 1.05)")


if __name__ == "__main__":
    main()
