"""Pools on one thread by row width: how the time per window tap of ``cpu_schedules.Pool`` kernels moves with the
width of the map's rows.

Session 26 found, timing a tiny tier of pool models beside inception's own pools (built and timed in one process,
interleaved), that a 3x3 stride-1 max pool over 8x32x32 took 7.8 us where inception's over 8x16x16 took 0.82: 9.5x
the time for 4x the work. Held out, inception's pools are priced from such records, so a tier like that made its
end-to-end prediction worse (+21% -> +29%) and was not kept. This builds max and average pools (3x3 stride 1 and 2,
2x2 stride 2, padded like torchvision's) over maps of 7-64 pixels with channels chosen to keep every kernel on one
thread (under ``PARALLEL_MIN_WORK["pool"]``), times them in interleaved rounds and reports nanoseconds per output
element and window tap.

    python experiments/pool_rows.py [--rounds 5]

Writes ``experiments/results/<hardware id>/pool_rows.csv``.
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd
from kernel_timing import build_kernels, time_interleaved
from results_folder import write_csv

MAPS = (7, 8, 14, 16, 28, 32, 56, 64)
WINDOWS = (("max", 3, 1, 1), ("max", 3, 2, 1), ("max", 2, 2, 0), ("avg", 3, 1, 1))
#: Output elements x taps of every kernel: ~2^15, a quarter of the work from which a pool runs on two threads.
TAP_WORK = 1 << 15


def pool_units():
    """``[(label, window, map, channels, output elements x taps, unit)]``, one per (window, map)."""
    from tvm import relax

    from autoplace.op_families import _f32, _model
    from autoplace.profile.units import extract_units

    out = []
    for kind, size, stride, pad in WINDOWS:
        fn = relax.op.nn.max_pool2d if kind == "max" else relax.op.nn.avg_pool2d
        for h in MAPS:
            oh = (h + 2 * pad - size) // stride + 1
            c = max(1, round(TAP_WORK / (oh * oh * size * size)))
            model = _model(f"pool-{kind}{size}s{stride}-{c}x{h}x{h}", _f32((1, c, h, h)),
                           lambda bb, x, fn=fn, cfg=(size, stride, pad): fn(x, cfg[0], cfg[1], cfg[2]))
            units = [u for u in extract_units(model, "llvm") if "pool" in u.func_name]
            out.append((model.name, f"{kind}{size}s{stride}", h, c, c * oh * oh * size * size, units[0]))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)

    units = pool_units()
    built = build_kernels((u.key, u) for *_, u in units)
    times = time_interleaved(built, args.rounds)
    rows = []
    for name, window, h, c, taps, unit in units:
        us = times[unit.key]
        rows.append(dict(model=name, window=window, map=h, channels=c, tap_work=taps, min_us=min(us),
                         median_us=float(np.median(us)), ns_per_tap=1e3 * min(us) / taps))
    df = pd.DataFrame(rows)
    print(df.pivot(index="map", columns="window", values="ns_per_tap").round(3).to_string())
    write_csv(df, "pool_rows.csv")


if __name__ == "__main__":
    main()
