"""Convolution rows no vector divides: the scalar tail of schedule version 4 against one odd-width vector (version 5).

``cpu_schedules.Contraction`` vectorises a convolution along its output rows. A row of 13, 17, 26 or 27 has no
divisor from 4 to 8 lanes, and a convolution's columns cannot be padded (its input is read at ``x + rx``), so
until schedule version 5 such a row ran as full vectors with a predicated tail, which TVM leaves scalar. Now a
row that fits in four registers is one odd-width vector (``Contraction.tile_plan(odd=True)``; LLVM splits it
into registers). Each convolution below is built both ways and timed in interleaved rounds (``time_evaluator``,
~2 ms per sample); outputs compared.

    python experiments/odd_conv_rows.py [--rounds 5]

Writes ``experiments/results/<hardware id>/odd_conv_rows.csv``.
"""

from __future__ import annotations

import argparse

import numpy as np
from results_folder import write_csv

#: ``(name, input NCHW, weight OIHW, padding, groups)``: AlexNet's 13 and 27, YOLO's 13 and 26, Inception-v3's 17.
CASES = (
    ("3x3 48->24 on 17x17", (1, 48, 17, 17), (24, 48, 3, 3), 1, 1),
    ("3x3 64->64 on 13x13", (1, 64, 13, 13), (64, 64, 3, 3), 1, 1),
    ("3x3 128->128 on 26x26", (1, 128, 26, 26), (128, 128, 3, 3), 1, 1),
    ("5x5 64->64 on 27x27", (1, 64, 27, 27), (64, 64, 5, 5), 2, 1),
    ("3x3 depthwise 96 on 26x26", (1, 96, 26, 26), (96, 1, 3, 3), 1, 96),
    ("1x1 192->192 on 17x17", (1, 192, 17, 17), (192, 192, 1, 1), 0, 1),
)


def conv_prim_func(x_shape, w_shape, padding: int, groups: int):
    """The legalized conv2d kernel (unscheduled), targeted at this machine's CPU."""
    import tvm
    from tvm import relax

    from autoplace.backend.cpu_schedules import cpu_legalize_map, cpu_target

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(x_shape, "float32"))
    w = relax.Var("w", relax.TensorType(w_shape, "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.nn.conv2d(x, w, padding=padding, groups=groups))
        bb.emit_func_output(out)
    mod = relax.transform.LegalizeOps(cpu_legalize_map("llvm"))(bb.get())
    (func,) = [f for _, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    return func.with_attr("target", cpu_target("llvm"))


def main(argv=None):
    import tvm

    from autoplace.backend import cpu_schedules as cs

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    shipped = cs.Contraction.tile_plan

    def without_odd(self, *a, odd=False, **k):
        return shipped(self, *a, **k)

    dev, rng, rows = tvm.cpu(), np.random.default_rng(0), []
    for name, x_shape, w_shape, padding, groups in CASES:
        func = conv_prim_func(x_shape, w_shape, padding, groups)
        built = {}
        for variant in ("scalar tail", "odd vector"):
            cs.Contraction.tile_plan = without_odd if variant == "scalar tail" else shipped
            try:
                scheduled, _ = cs.schedule_prim_func(func, func.attrs["target"])
            finally:
                cs.Contraction.tile_plan = shipped
            lib = tvm.tirx.build(tvm.IRModule({"main": scheduled.with_attr("global_symbol", "main")
                                               .without_attr("target")}), target=func.attrs["target"])
            built[variant] = (lib, cs.vector_width(scheduled))
        inputs = [rng.standard_normal([int(d) for d in p.ty.shape]).astype("float32") for p in func.params[:-1]]
        out_shape = [int(d) for d in func.params[-1].ty.shape]
        tensors = {v: [tvm.runtime.tensor(a, dev) for a in inputs] + [tvm.runtime.tensor(np.zeros(out_shape, "float32"), dev)]
                   for v in built}
        for v, (lib, _) in built.items():
            lib["main"](*tensors[v])
        diff = float(np.abs(tensors["odd vector"][-1].numpy() - tensors["scalar tail"][-1].numpy()).max())
        once = np.median(built["scalar tail"][0].time_evaluator("main", dev, number=1, repeat=3)(
            *tensors["scalar tail"]).results)
        number = max(1, int(2e-3 / max(once, 1e-9)))
        times = {v: [] for v in built}
        for _ in range(args.rounds):
            for v, (lib, _) in built.items():
                times[v].append(float(np.median(lib.time_evaluator("main", dev, number=number, repeat=3)(
                    *tensors[v]).results)) * 1e6)
        macs = int(np.prod(w_shape)) * out_shape[-2] * out_shape[-1]
        row = dict(conv=name, macs=macs, tail_us=float(np.median(times["scalar tail"])),
                   odd_us=float(np.median(times["odd vector"])), max_abs_diff=diff,
                   odd_vector_width=built["odd vector"][1])
        row["speedup"] = row["tail_us"] / row["odd_us"]
        row["odd_ns_per_1000_macs"] = row["odd_us"] * 1e6 / macs
        print(f"{name}: scalar tail {row['tail_us']:.1f} us -> odd vector {row['odd_us']:.1f} us "
              f"(x{row['speedup']:.1f}; {row['odd_ns_per_1000_macs']:.0f} ns per 1000 multiply-adds)", flush=True)
        rows.append(row)
    write_csv(rows, "odd_conv_rows.csv")


if __name__ == "__main__":
    main()
