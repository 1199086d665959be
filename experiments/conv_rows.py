"""Stride-1 convolutions on rows no vector divides, and global average pools: schedule version 7 against 9.

``cpu_schedules.Contraction`` vectorises a convolution along its output rows, and a row of 17, 19 or 38
(Inception-v3's 17x17 stage, YOLO's 19x19 and 38x38 heads) has no divisor from 4 to 16 lanes, so until schedule
version 7 it ran as one odd-width vector (17 lanes split by LLVM over two registers) or a scalar tail. Version 9
legalizes such a convolution (stride 1, one group) over its flattened padded map
(``cpu_schedules.FLATTEN_ODD_ROW_CONV``, ``_te_conv2d_flat``): output ``f`` reads input ``f + dy * Wp + dx``, so
the map is one long row of whole vectors, the few columns between rows computed and dropped. It also legalizes ``adaptive_avg_pool2d`` to 1x1 (``nn.AdaptiveAvgPool2d(1)``
of an ONNX or Relax model) as the mean a row reduction vectorises, where TVM's adaptive pool is a scalar loop on
one thread. Each case (convolution + bias + ReLU, as models fuse it) is built both ways through autoplace's
single-device CPU build and timed in interleaved rounds (``time_evaluator``, at least 20 ms per sample); the
outputs are compared; PyTorch eager (oneDNN) runs the same case in the same rounds, on as many threads.

    python experiments/conv_rows.py [--rounds 5]

Writes ``experiments/results/<hardware id>/conv_rows.csv`` (min and median over rounds, both versions).
"""

from __future__ import annotations

import argparse
import os

import numpy as np
from results_folder import write_csv

#: ``(name, input channels, output channels, map side, kernel, op)``: Inception-v3's 17x17 stage (192 / 768 wide,
#: 1x1 and 3x3), YOLO's 19x19 / 38x38 heads, a row of 23, a 5x5; two rows a vector tiles (unchanged, a check on the
#: noise); global pools.
CASES = (
    ("1x1 192->192 on 17x17", 192, 192, 17, 1, "conv"),
    ("1x1 768->192 on 17x17", 768, 192, 17, 1, "conv"),
    ("1x1 96->96 on 19x19", 96, 96, 19, 1, "conv"),
    ("1x1 512->256 on 19x19", 512, 256, 19, 1, "conv"),
    ("1x1 64->64 on 38x38", 64, 64, 38, 1, "conv"),
    ("1x1 128->128 on 23x23", 128, 128, 23, 1, "conv"),
    ("3x3 48->24 on 17x17", 48, 24, 17, 3, "conv"),
    ("3x3 192->192 on 17x17", 192, 192, 17, 3, "conv"),
    ("3x3 256->512 on 19x19", 256, 512, 19, 3, "conv"),
    ("3x3 32->32 on 38x38", 32, 32, 38, 3, "conv"),
    ("5x5 64->64 on 17x17", 64, 64, 17, 5, "conv"),
    ("1x1 64->64 on 56x56 (unchanged)", 64, 64, 56, 1, "conv"),
    ("3x3 128->128 on 26x26 (unchanged)", 128, 128, 26, 3, "conv"),
    ("AdaptiveAvgPool2d(1) 64x56x56", 64, 0, 56, 1, "pool"),
    ("AdaptiveAvgPool2d(1) 2048x7x7", 2048, 0, 7, 1, "pool"),
    ("AdaptiveAvgPool2d(1) 768x17x17", 768, 0, 17, 1, "pool"),
)


def case_module(c_in: int, c_out: int, side: int, kernel: int, op: str):
    """A Relax module of one convolution (padded to keep the map) + bias + ReLU, or one adaptive average pool
    to 1x1."""
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, c_in, side, side), "float32"))
    params = [x]
    if op == "conv":
        params += [relax.Var("w", relax.TensorType((c_out, c_in, kernel, kernel), "float32")),
                   relax.Var("b", relax.TensorType((1, c_out, 1, 1), "float32"))]
    with bb.function("main", params):
        with bb.dataflow():
            if op == "conv":
                y = bb.emit(relax.op.add(relax.op.nn.conv2d(x, params[1], padding=kernel // 2), params[2]))
                out = bb.emit_output(relax.op.nn.relu(y))
            else:
                out = bb.emit_output(relax.op.nn.adaptive_avg_pool2d(x, 1))
        bb.emit_func_output(out)
    return bb.get()


def torch_case(inputs, kernel: int, op: str):
    """The same case in PyTorch eager (oneDNN), as a call: what a user would run instead."""
    import torch

    x, *rest = (torch.from_numpy(a) for a in inputs)
    if op == "conv":
        w, b = rest
        return lambda: torch.relu(torch.nn.functional.conv2d(x, w, padding=kernel // 2) + b)
    return lambda: torch.nn.functional.adaptive_avg_pool2d(x, 1)


def torch_median_us(call, samples: int = 5, min_sample_s: float = 0.02) -> float:
    """Median over ``samples`` of the mean time of ``call`` in a sample of at least ``min_sample_s``."""
    import time

    import torch

    with torch.inference_mode():
        call()
        number, start = 1, time.perf_counter()
        while time.perf_counter() - start < min_sample_s:
            call()
            number += 1
        out = []
        for _ in range(samples):
            start = time.perf_counter()
            for _ in range(number):
                call()
            out.append((time.perf_counter() - start) / number * 1e6)
    return float(np.median(out))


def build(mod, version: int):
    """``mod`` built by autoplace's CPU pipeline, with the legalizations of schedule version 7 or 9."""
    from autoplace.backend import cpu_schedules as cs
    from autoplace.backend.pipeline import single_device_build

    flatten, as_mean = cs.FLATTEN_ODD_ROW_CONV, cs.GLOBAL_POOL_AS_MEAN
    cs.FLATTEN_ODD_ROW_CONV = cs.GLOBAL_POOL_AS_MEAN = version >= 9
    try:
        return single_device_build(mod, "llvm")
    finally:
        cs.FLATTEN_ODD_ROW_CONV, cs.GLOBAL_POOL_AS_MEAN = flatten, as_mean


def main(argv=None):
    import tvm
    from tvm import relax


    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--torch-threads", type=int, default=os.cpu_count(),
                        help="PyTorch's threads (TVM's runtime uses every core; default: as many)")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.torch_threads)
    dev, rng, rows = tvm.cpu(), np.random.default_rng(0), []
    for name, c_in, c_out, side, kernel, op in CASES:
        mod = case_module(c_in, c_out, side, kernel, op)
        inputs = [rng.standard_normal([int(d) for d in p.ty.shape]).astype("float32") for p in mod["main"].params]
        runs = {}
        for version in (7, 9):
            vm = relax.VirtualMachine(build(mod, version), dev)
            tensors = [tvm.runtime.tensor(a, dev) for a in inputs]
            runs[version] = (vm, tensors, vm["main"](*tensors).numpy())
        diff = float(np.abs(runs[9][2] - runs[7][2]).max())
        torch_call = torch_case(inputs, kernel, op)
        diff_torch = float(np.abs(torch_call().numpy() - runs[9][2]).max())
        times = {v: [] for v in (*runs, "torch")}
        for _ in range(args.rounds):
            for v, (vm, tensors, _) in runs.items():
                result = vm.time_evaluator("main", dev, number=5, repeat=5, min_repeat_ms=20)(*tensors)
                times[v].append(float(np.median(result.results)) * 1e6)
            times["torch"].append(torch_median_us(torch_call))
        row = dict(case=name, op=op, c_in=c_in, c_out=c_out, side=side, kernel=kernel, max_abs_diff=diff,
                   v7_min_us=min(times[7]), v7_median_us=float(np.median(times[7])),
                   v9_min_us=min(times[9]), v9_median_us=float(np.median(times[9])))
        row.update(torch_min_us=min(times["torch"]), torch_median_us=float(np.median(times["torch"])),
                   torch_max_abs_diff=diff_torch)
        row["v9_vs_torch_min"] = row["v9_min_us"] / row["torch_min_us"]
        row["speedup_min"] = row["v7_min_us"] / row["v9_min_us"]
        row["speedup_median"] = row["v7_median_us"] / row["v9_median_us"]
        if op == "conv":
            macs = c_in * c_out * side * side * kernel * kernel
            row["v7_gmacs"], row["v9_gmacs"] = macs / row["v7_min_us"] / 1e3, macs / row["v9_min_us"] / 1e3
        print(f"{name}: version 7 {row['v7_min_us']:.1f} us -> version 9 {row['v9_min_us']:.1f} us (min; "
              f"x{row['speedup_min']:.2f}, median x{row['speedup_median']:.2f}), max diff {diff:.1e}; PyTorch "
              f"{row['torch_min_us']:.1f} us (version 9 at {row['v9_vs_torch_min']:.2f}x its time)", flush=True)
        rows.append(row)
    write_csv(rows, "conv_rows.csv")


if __name__ == "__main__":
    main()
