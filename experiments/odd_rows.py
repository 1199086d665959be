"""Rows no vector divides: schedule version 9 against 10, and PyTorch on the same cores.

``cpu_schedules.RowReduction`` accumulates a reduction along its rows in vector lanes (``rfactor``) when a vector
width divides the row; until schedule version 9 a row that none from 4 to 16 lanes divides (a ViT's 197 tokens,
a Swin window's 49, a mean over Inception-v3's 17x17 map) was added one scalar at a time. Version 10
(``cpu_schedules.ODD_ROW_REDUCTION``) splits such a row into full vectors and one partial step, and has TVM's
``LoopPartition`` split that step off the vector loop (``PARTITION_HINT``). Elementwise and pool rows longer than
four vectors that no width divides (a 197-wide attention row, Inception-v3's 73-wide pooled stem) ran as a
predicated tail TVM leaves scalar; version 10 runs them the same way (``ODD_ROW_PARTITION``). Each case (a Relax module of one op)
is built both ways through autoplace's single-device CPU build and timed in interleaved rounds
(``time_evaluator``, at least 20 ms per sample); the outputs are compared; PyTorch eager runs the same op in the
same rounds, on as many threads. ``--models`` also times whole models (all on the CPU) both ways.

    python experiments/odd_rows.py [--rounds 5] [--models vit-base swin ...]

Writes ``experiments/results/<hardware id>/odd_rows.csv`` (min and median over rounds, both versions; models:
``odd_rows_models.csv``).
"""

from __future__ import annotations

import argparse
import os

import numpy as np
from conv_rows import torch_median_us
from kernel_timing import time_runners_interleaved
from results_folder import write_csv

#: ``(name, op, input shape, reduced axes)``: attention softmaxes of a ViT-B/16 (197 tokens), a ViT-B/32 (50) and a
#: Swin window (49, 192 windows x heads); a global mean over 17x17 (Inception-v3's last 17x17 stage); a max over
#: 197; a layer norm over 768 and a softmax over 196 (a divisor of 4 lanes only, also scalar in version 9).
CASES = (
    ("softmax 12x197x197 (ViT-B/16)", "softmax", (1, 12, 197, 197), (-1,)),
    ("softmax 12x50x50 (ViT-B/32)", "softmax", (1, 12, 50, 50), (-1,)),
    ("softmax 192x49x49 (Swin window)", "softmax", (192, 49, 49), (-1,)),
    ("softmax 12x196x196", "softmax", (1, 12, 196, 196), (-1,)),
    ("mean 768x17x17 over the map", "mean", (1, 768, 17, 17), (2, 3)),
    ("max 2364x197", "max", (2364, 197), (-1,)),
    ("layer_norm 197x768 (unchanged)", "layer_norm", (197, 768), (-1,)),
    ("gelu 12x197x197 (elementwise)", "gelu", (1, 12, 197, 197), ()),
    ("max_pool 3x3/2 64x147x147 (Inception-v3 stem)", "max_pool", (1, 64, 147, 147), ()),
    ("avg_pool 3x3/1 192x73x73", "avg_pool", (1, 192, 73, 73), ()),
)


def case_module(op: str, shape, axes):
    """A Relax module of the one op."""
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    params = [x]
    if op == "layer_norm":
        params += [relax.Var("g", relax.TensorType(shape[-1:], "float32")),
                   relax.Var("b", relax.TensorType(shape[-1:], "float32"))]
    with bb.function("main", params):
        with bb.dataflow():
            if op == "softmax":
                call = relax.op.nn.softmax(x, axis=axes[0])
            elif op == "mean":
                call = relax.op.mean(x, axis=list(axes), keepdims=True)
            elif op == "max":
                call = relax.op.max(x, axis=list(axes), keepdims=True)
            elif op == "gelu":
                call = relax.op.nn.gelu(x)
            elif op == "max_pool":
                call = relax.op.nn.max_pool2d(x, (3, 3), (2, 2))
            elif op == "avg_pool":
                call = relax.op.nn.avg_pool2d(x, (3, 3), (1, 1), (1, 1), count_include_pad=True)
            else:
                call = relax.op.nn.layer_norm(x, params[1], params[2], axes=list(axes))
            out = bb.emit_output(call)
        bb.emit_func_output(out)
    return bb.get()


def torch_case(inputs, op: str, axes):
    """The same op in PyTorch eager, as a call."""
    import torch

    x, *rest = (torch.from_numpy(a) for a in inputs)
    if op == "softmax":
        return lambda: torch.softmax(x, dim=axes[0])
    if op == "mean":
        return lambda: x.mean(dim=axes, keepdim=True)
    if op == "max":
        return lambda: x.amax(dim=axes, keepdim=True)
    if op == "gelu":
        return lambda: torch.nn.functional.gelu(x)
    if op == "max_pool":
        return lambda: torch.nn.functional.max_pool2d(x, 3, 2)
    if op == "avg_pool":
        return lambda: torch.nn.functional.avg_pool2d(x, 3, 1, 1)
    return lambda: torch.nn.functional.layer_norm(x, x.shape[-1:], rest[0], rest[1])


def with_version(version: int, make):
    """``make()`` with the rows of schedule version 9 or 10."""
    from autoplace.backend import cpu_schedules as cs

    shipped = cs.ODD_ROW_REDUCTION, cs.ODD_ROW_PARTITION
    cs.ODD_ROW_REDUCTION = cs.ODD_ROW_PARTITION = version >= 10
    try:
        return make()
    finally:
        cs.ODD_ROW_REDUCTION, cs.ODD_ROW_PARTITION = shipped


def time_cases(rounds: int) -> list:
    import torch
    import tvm
    from tvm import relax

    from autoplace.backend.pipeline import single_device_build

    dev, rng, rows = tvm.cpu(), np.random.default_rng(0), []
    for name, op, shape, axes in CASES:
        mod = case_module(op, shape, axes)
        inputs = [rng.standard_normal([int(d) for d in p.ty.shape]).astype("float32") for p in mod["main"].params]
        runs = {}
        for version in (9, 10):
            vm = relax.VirtualMachine(with_version(version, lambda m=mod: single_device_build(m, "llvm")), dev)
            tensors = [tvm.runtime.tensor(a, dev) for a in inputs]
            runs[version] = (vm, tensors, vm["main"](*tensors).numpy())
        diff = float(np.abs(runs[10][2] - runs[9][2]).max())
        torch_call = torch_case(inputs, op, axes)
        with torch.inference_mode():
            diff_torch = float(np.abs(torch_call().numpy() - runs[10][2]).max())
        times = {v: [] for v in (*runs, "torch")}
        for _ in range(rounds):
            for v, (vm, tensors, _) in runs.items():
                result = vm.time_evaluator("main", dev, number=5, repeat=5, min_repeat_ms=20)(*tensors)
                times[v].append(float(np.median(result.results)) * 1e6)
            times["torch"].append(torch_median_us(torch_call))
        row = dict(case=name, op=op, shape="x".join(map(str, shape)), max_abs_diff=diff,
                   torch_max_abs_diff=diff_torch)
        for v, us in times.items():
            label = f"v{v}" if v != "torch" else "torch"
            row[f"{label}_min_us"], row[f"{label}_median_us"] = min(us), float(np.median(us))
        row["speedup_min"] = row["v9_min_us"] / row["v10_min_us"]
        row["speedup_median"] = row["v9_median_us"] / row["v10_median_us"]
        row["v10_vs_torch_min"] = row["v10_min_us"] / row["torch_min_us"]
        row["v9_vs_torch_min"] = row["v9_min_us"] / row["torch_min_us"]
        print(f"{name}: version 9 {row['v9_min_us']:.1f} us -> version 10 {row['v10_min_us']:.1f} us (min; "
              f"x{row['speedup_min']:.2f}, median x{row['speedup_median']:.2f}), max diff {diff:.1e}; PyTorch "
              f"{row['torch_min_us']:.1f} us (version 10 at {row['v10_vs_torch_min']:.2f}x its time, version 9 at "
              f"{row['v9_vs_torch_min']:.2f}x)", flush=True)
        rows.append(row)
    return rows


def time_models(specs, rounds: int) -> list:
    """Each model built whole for the CPU with version 9's and 10's rows, same outputs checked, timed
    in interleaved rounds (~20 ms per sample)."""
    import autoplace
    from autoplace import zoo

    rows = []
    for spec in specs:
        model = zoo.parse(spec)
        inputs = model.random_inputs()
        runners = {v: with_version(v, lambda m=model: autoplace.place(m, None, None, {"cpu": "llvm"}).runner)
                   for v in (9, 10)}
        times = time_runners_interleaved(runners, inputs, rounds)
        row = dict(model=spec, v9_median_us=float(np.median(times[9])), v9_min_us=float(np.min(times[9])),
                   v10_median_us=float(np.median(times[10])), v10_min_us=float(np.min(times[10])))
        row["ratio_of_medians"] = row["v10_median_us"] / row["v9_median_us"]
        row["ratio_of_mins"] = row["v10_min_us"] / row["v9_min_us"]
        print(f"{spec}: version 9 {row['v9_median_us']:.1f} us, version 10 {row['v10_median_us']:.1f} us (medians; "
              f"x{row['ratio_of_medians']:.3f}; mins x{row['ratio_of_mins']:.3f})", flush=True)
        rows.append(row)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--models", nargs="*", default=["vit-base", "vit", "swin", "inception-base"],
                        help="whole models to time both ways (none: the op cases only)")
    parser.add_argument("--torch-threads", type=int, default=os.cpu_count(),
                        help="PyTorch's threads (TVM's runtime uses every core; default: as many)")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.torch_threads)
    write_csv(time_cases(args.rounds), "odd_rows.csv")
    if args.models:
        write_csv(time_models(args.models, args.rounds), "odd_rows_models.csv")


if __name__ == "__main__":
    main()
