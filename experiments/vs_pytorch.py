"""autoplace's all-CPU build vs PyTorch eager on the same cores, side by side (issue 13).

For each model (zoo names: ``mlp cnn bert seed003 inception``, ``-base`` for the larger size; the
architecture suite's names such as ``llama`` or ``vit-base`` when ``autoplace.architectures`` has them),
the same seeded model runs in PyTorch eager (``torch.inference_mode``) and as autoplace's build of the
placement "everything on the CPU" (``autoplace.place(model, None, None, {"cpu": "llvm"})``), with the same
number of threads on both sides (``--threads``, default: all cores; TVM reads ``TVM_NUM_THREADS``, set
here before TVM starts its thread pool). Both are checked to compute the same numbers, warmed up, then
timed in interleaved rounds (a batch of autoplace samples, a batch of PyTorch samples, again...), so
both see the same machine noise. Each sample averages enough calls to last about 20 ms. Reported: median,
min and max per side and the ratio of medians (autoplace / PyTorch; goal <= 3 where PyTorch takes < 1 s).
``matmul:MxKxN`` times one matmul and
reports GFLOP/s against the nominal peak of the cores (:func:`peak_gflops`).

``--before`` also times the build without CPU schedules (``build(mod, schedule_cpu=False)``: TVM's
unscheduled default kernels, what autoplace shipped before issue 13), a few samples only. The number of
kernels per schedule rule (``none``: no rule applied, the unscheduled kernel is used) is reported too.

    python experiments/vs_pytorch.py                       # zoo, small and base
    python experiments/vs_pytorch.py mlp-base bert-base --before --rounds 7
    python experiments/vs_pytorch.py llama-base vit-base --tag arch
    python experiments/vs_pytorch.py matmul:128x768x3072 --tag matmul   # GFLOP/s against the nominal peak
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time

DEFAULT_MODELS = ["mlp", "cnn", "bert", "seed003", "inception",
                  "mlp-base", "cnn-base", "bert-base", "seed003-base", "inception-base"]


def _parse_threads(argv) -> int:
    for i, arg in enumerate(argv):
        if arg == "--threads" and i + 1 < len(argv):
            return int(argv[i + 1])
        if arg.startswith("--threads="):
            return int(arg.split("=", 1)[1])
    return int(os.environ.get("TVM_NUM_THREADS") or os.cpu_count() or 1)


# TVM sizes its thread pool when the runtime starts: the thread count must be in the environment first.
os.environ["TVM_NUM_THREADS"] = str(_parse_threads(sys.argv[1:]))

import numpy as np
import torch
import tvm

import autoplace
from autoplace import zoo
from autoplace.backend import Runner, build, lower
from autoplace.backend.cpu_schedules import cpu_target, host_cpu, rule_counts


def _matmul_model(spec: str):
    """``matmul:MxKxN``: one (M, K) @ (K, N) matmul, both operands inputs (the issue's kernel)."""
    m, k, n = (int(x) for x in spec.split(":", 1)[1].lower().split("x"))

    class Matmul(torch.nn.Module):
        def forward(self, x, y):
            return x @ y

    gen = torch.Generator().manual_seed(0)
    inputs = (torch.randn(m, k, generator=gen), torch.randn(k, n, generator=gen))
    return autoplace.load_model(zoo.matmul_module(m, k, n), name=spec), Matmul().eval(), inputs, 2.0 * m * k * n


def peak_gflops(threads: int) -> dict:
    """Nominal fp32 peak from the CPU flags (as ``lscpu`` shows them) and the clock in /proc/cpuinfo (the
    base clock on a VM): vector lanes (AVX-512: 16, AVX2: 8, else 4) x 2 (an FMA is two flops, when the CPU
    has FMA) x 2 FMA pipes (Zen 4/5, Intel server cores; an assumption) x GHz x threads."""
    flags, mhz = set(), 0.0
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags") and not flags:
                    flags = set(line.split(":", 1)[1].split())
                elif line.startswith("cpu MHz") and not mhz:
                    mhz = float(line.split(":", 1)[1])
    except OSError:
        pass
    lanes = 16 if "avx512f" in flags else 8 if "avx2" in flags else 4
    fma = 2 if "fma" in flags else 1
    per_cycle = lanes * fma * 2
    return dict(lanes=lanes, fma="fma" in flags, fma_pipes_assumed=2, flops_per_cycle_per_core=per_cycle,
                ghz=mhz / 1e3, gflops=per_cycle * mhz / 1e3 * threads)


def torch_model(spec: str):
    """``(autoplace Model, torch module, torch example inputs)`` for a zoo or architecture-suite name."""
    try:
        from autoplace import architectures
    except ImportError:  # the suite is not in this checkout
        architectures = None
    if architectures is not None and architectures.split_spec(spec) is not None:
        name, size = architectures.split_spec(spec)
        net, inputs = architectures.torch_model(name, size)
        return architectures.get(name, size), net.eval(), tuple(inputs)
    name, _, size = spec.partition("-")
    if name == "seed003":
        class Seed003(torch.nn.Module):
            def forward(self, a, b, c):
                return (a + b) - (b + c)

        model = zoo.get(name, size or "small")
        inputs = tuple(torch.from_numpy(x) for x in model.random_inputs())
        return model, Seed003().eval(), inputs
    # The zoo builds each torch module and hands it to load_model: catch it there.
    caught = {}
    original = zoo.load_model

    def catching(net, example_inputs=None, **kwargs):
        caught["net"], caught["inputs"] = net, example_inputs
        return original(net, example_inputs=example_inputs, **kwargs)

    zoo.load_model = catching
    try:
        model = zoo.parse(spec)
    finally:
        zoo.load_model = original
    if "net" not in caught:
        raise KeyError(f"{spec!r}: no PyTorch module behind this model")
    return model, caught["net"].eval(), tuple(caught["inputs"])


def _flat(out):
    if isinstance(out, (tuple, list)):
        return [y for x in out for y in _flat(x)]
    if hasattr(out, "detach"):
        return [out.detach().numpy()]
    return [np.asarray(out)]


def _torch_samples(net, inputs, number: int, repeat: int) -> list[float]:
    samples = []
    with torch.inference_mode():
        for _ in range(repeat):
            start = time.perf_counter()
            for _ in range(number):
                net(*inputs)
            samples.append((time.perf_counter() - start) / number * 1e3)
    return samples


def measure(spec: str, rounds: int, repeat: int, before: bool, threads: int) -> dict:
    flops = None
    if spec.startswith("matmul:"):
        model, net, torch_inputs, flops = _matmul_model(spec)
    else:
        model, net, torch_inputs = torch_model(spec)
    inputs = [x.numpy() for x in torch_inputs]
    placement = autoplace.place(model, None, None, {"cpu": "llvm"})
    t0 = time.perf_counter()
    ours = placement.runner
    build_s = time.perf_counter() - t0
    counts = rule_counts(lower(placement.mod))
    # Same numbers on both sides.
    with torch.inference_mode():
        expected = _flat(net(*torch_inputs))
    got = _flat(ours(*inputs))
    max_err = max(float(np.max(np.abs(a - b) / (1.0 + np.abs(b)))) for a, b in zip(got, expected))
    # Warm up; size the samples to about 20 ms each.
    one = float(np.median(ours.time_us(inputs, repeat=3))) / 1e3
    number = max(1, int(20.0 / max(one, 1e-3)))
    torch_one = float(np.median(_torch_samples(net, torch_inputs, 1, 3)))
    torch_number = max(1, int(20.0 / max(torch_one, 1e-3)))
    ours_ms, torch_ms = [], []
    cpu = {"ours": [0.0, 0.0], "torch": [0.0, 0.0]}  # process CPU seconds, wall seconds
    for _ in range(rounds):
        wall, used = time.perf_counter(), time.process_time()
        ours_ms.extend(ours.time_us(inputs, number=number, repeat=repeat) / 1e3)
        cpu["ours"][0] += time.process_time() - used
        cpu["ours"][1] += time.perf_counter() - wall
        wall, used = time.perf_counter(), time.process_time()
        torch_ms.extend(_torch_samples(net, torch_inputs, torch_number, repeat))
        cpu["torch"][0] += time.process_time() - used
        cpu["torch"][1] += time.perf_counter() - wall
    row = dict(
        model=spec,
        threads=threads,
        autoplace_median_ms=float(np.median(ours_ms)),
        autoplace_min_ms=float(np.min(ours_ms)),
        autoplace_max_ms=float(np.max(ours_ms)),
        torch_median_ms=float(np.median(torch_ms)),
        torch_min_ms=float(np.min(torch_ms)),
        torch_max_ms=float(np.max(torch_ms)),
        ratio=float(np.median(ours_ms) / np.median(torch_ms)),
        samples=len(ours_ms),
        kernels=sum(counts.values()),
        rules=counts,
        unscheduled_kernels=counts.get("none", 0),
        max_rel_error_vs_torch=max_err,
        # CPU time the process got per second of wall time while timing (threads = full use; less means
        # the cores were shared with other work, or threads waited).
        autoplace_cpu_per_wall=cpu["ours"][0] / max(cpu["ours"][1], 1e-9),
        torch_cpu_per_wall=cpu["torch"][0] / max(cpu["torch"][1], 1e-9),
        build_s=build_s,
    )
    if flops is not None:
        row["autoplace_gflops_median"] = flops / row["autoplace_median_ms"] / 1e6
        row["autoplace_gflops_best"] = flops / row["autoplace_min_ms"] / 1e6
        row["torch_gflops_median"] = flops / row["torch_median_ms"] / 1e6
        row["torch_gflops_best"] = flops / row["torch_min_ms"] / 1e6
    if before:
        a = placement.annotated
        plain = Runner(build(placement.mod, schedule_cpu=False), placement.targets, a.params, a.param_targets,
                       a.input_targets)
        plain(*inputs)
        plain_ms = plain.time_us(inputs, repeat=3 if one * 200 > 5000 else 5) / 1e3
        row["before_median_ms"] = float(np.median(plain_ms))
        row["before_ratio"] = float(np.median(plain_ms) / np.median(torch_ms))
        row["speedup"] = float(np.median(plain_ms) / np.median(ours_ms))
    return row


def markdown(rows, meta) -> str:
    lines = [
        f"# autoplace all-CPU vs PyTorch eager ({meta['date']})",
        "",
        (f"{meta['cpu']} ({meta['cpu_count']} cores, LLVM mcpu {meta['mcpu']}), {meta['threads']} "
         f"thread{'s' if meta['threads'] != 1 else ''} on both sides, TVM {meta['tvm']}, "
         f"torch {meta['torch']}. "
         f"Load average at start: {meta['loadavg_start']}, at end: {meta['loadavg_end']}. "
         "Interleaved rounds; times in ms. CPU/wall: process CPU seconds per wall "
        "second while that side was timed (at most the thread count; less: the cores were shared with other "
        "work, or threads waited)."),
        "",
    ]
    before = any("before_median_ms" in r for r in rows)
    head = "| model | autoplace median | min | max | torch median | min | max | ratio |"
    sep = "|---|---:|---:|---:|---:|---:|---:|---:|"
    if before:
        head += " before (unscheduled) | before ratio | speedup |"
        sep += "---:|---:|---:|"
    head += " kernels | unscheduled | CPU/wall autoplace | CPU/wall torch |"
    sep += "---:|---:|---:|---:|"
    lines += [head, sep]
    for r in rows:
        line = (f"| {r['model']} | {r['autoplace_median_ms']:.3f} | {r['autoplace_min_ms']:.3f} | "
                f"{r['autoplace_max_ms']:.3f} | {r['torch_median_ms']:.3f} | {r['torch_min_ms']:.3f} | "
                f"{r['torch_max_ms']:.3f} | {r['ratio']:.2f} |")
        if before:
            if "before_median_ms" in r:
                line += f" {r['before_median_ms']:.1f} | {r['before_ratio']:.1f} | {r['speedup']:.1f} |"
            else:
                line += " | | |"
        line += (f" {r['kernels']} | {r['unscheduled_kernels']} | {r['autoplace_cpu_per_wall']:.2f} |"
                 f" {r['torch_cpu_per_wall']:.2f} |")
        lines.append(line)
    for r in rows:
        if "autoplace_gflops_median" in r:
            peak = meta["peak"]
            best, median = r["autoplace_gflops_best"], r["autoplace_gflops_median"]
            per_core, ghz, threads = peak["flops_per_cycle_per_core"], peak["ghz"], meta["threads"]
            lines += ["", (
                f"{r['model']}: autoplace {median:.1f} GFLOP/s (median; best {best:.1f}), PyTorch "
                f"{r['torch_gflops_median']:.1f} (best {r['torch_gflops_best']:.1f}); nominal peak at the "
                f"base clock {peak['gflops']:.0f} GFLOP/s ({per_core} flop/cycle/core x {ghz:.2f} GHz x "
                f"{threads} thread(s); the cores boost above the base clock, so more than 100% is "
                f"possible): best {100 * best / peak['gflops']:.0f}%, "
                f"median {100 * median / peak['gflops']:.0f}%.")]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", default=DEFAULT_MODELS)
    parser.add_argument("--threads", type=int, default=int(os.environ["TVM_NUM_THREADS"]))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--before", action="store_true", help="also time the unscheduled build (slow)")
    parser.add_argument("--tag", default="", help="suffix of the result files (vs_pytorch_<tag>.json/.md)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    meta = dict(
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        cpu=platform.processor() or platform.machine(),
        cpu_count=os.cpu_count(),
        mcpu=host_cpu(),
        target=str(cpu_target("llvm")),
        threads=args.threads,
        tvm=tvm.__version__,
        torch=torch.__version__,
        loadavg_start=" ".join(f"{x:.1f}" for x in os.getloadavg()),
        peak=peak_gflops(args.threads),
    )
    try:
        with open("/proc/cpuinfo") as f:
            meta["cpu"] = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    rows = []
    for spec in args.models:
        row = measure(spec, args.rounds, args.repeat, args.before, args.threads)
        rows.append(row)
        before = f"  before {row['before_median_ms']:.1f} ms" if "before_median_ms" in row else ""
        print(f"{spec:18s} autoplace {row['autoplace_median_ms']:9.3f} ms  torch "
              f"{row['torch_median_ms']:9.3f} ms  ratio {row['ratio']:6.2f}  rules {row['rules']}{before}",
              flush=True)
    meta["loadavg_end"] = " ".join(f"{x:.1f}" for x in os.getloadavg())
    out_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
    os.makedirs(out_dir, exist_ok=True)
    stem = os.path.join(out_dir, "vs_pytorch" + (f"_{args.tag}" if args.tag else ""))
    with open(stem + ".json", "w") as f:
        json.dump(dict(meta=meta, rows=rows), f, indent=1)
    with open(stem + ".md", "w") as f:
        f.write(markdown(rows, meta))
    print(markdown(rows, meta))
    print(f"wrote {stem}.json and {stem}.md")
    slow = [r["model"] for r in rows if r["torch_median_ms"] < 1000 and r["ratio"] > 3]
    print("ratio <= 3 wherever PyTorch takes < 1 s:", "yes" if not slow else f"NO: {slow}")


if __name__ == "__main__":
    main()
