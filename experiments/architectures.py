"""Every architecture of the suite through autoplace, checked against PyTorch (issue 12).

For each architecture of :mod:`autoplace.architectures` (small size by default): it loads (torch.export ->
TVM -> repairs), compiles on one device with plain ``tvm.compile`` and matches PyTorch, its optimized plan
over two CPU vdevices builds, runs and matches PyTorch, random placements over three CPU vdevices do too,
and the ONNX path (each of PyTorch's exporters, then the same optimize + random placement) works where
``autoplace.architectures.ONNX_PATHS`` says it does; plus kernel launches and the all-CPU latency of
autoplace's build (median of TVM's ``time_evaluator``) next to PyTorch eager's (median of 10 calls), both
on one thread (``TVM_NUM_THREADS=1``, ``torch.set_num_threads(1)``). "Matches" is
``rtol 1e-4`` and ``atol 1e-4 * max(1, max |PyTorch output|)``.

    python experiments/architectures.py [--size small|base] [--models llama gpt2 ...] [--random 3]

Prints the table and writes ``experiments/results/architectures[-base].md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
import warnings
import zlib

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import autoplace
from autoplace import architectures, repairs

TWO = {"cpu0": "llvm", "cpu1": "llvm"}
THREE = {"cpu0": "llvm", "cpu1": "llvm", "cpu2": "llvm"}
RTOL = 1e-4


# ------------------------------------------------------------------------------------- shared with the tests


def reference(name: str, size: str = "small"):
    """``(inputs as numpy, PyTorch's output as numpy)`` of a suite entry on its example inputs."""
    import torch

    net, inputs = architectures.torch_model(name, size)
    with torch.no_grad():
        expected = net(*inputs).numpy()
    return [t.numpy() for t in inputs], expected


def unwrap(output):
    """The model's one output tensor (the VM returns a 1-tuple for a tuple-returning ``main``)."""
    while isinstance(output, (tuple, list)) and len(output) == 1:
        output = output[0]
    return np.asarray(output)


def max_error(actual, expected) -> float:
    """Max absolute error; AssertionError unless within ``rtol 1e-4, atol 1e-4 * max(1, max |expected|)``."""
    actual = unwrap(actual)
    atol = RTOL * max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=atol)
    return float(np.abs(actual - expected).max())


def random_assignments(model, targets, count: int, key: str) -> list[dict]:
    """``count`` random placements of every op, input and output node, seeded by ``key`` (same draws in
    every process: zlib.crc32, not hash())."""
    graph = autoplace.op_graph(model)
    nodes = [n for n, d in graph.nodes(data=True) if d["kind"] in ("op", "input", "output")]
    rng = random.Random(zlib.crc32(key.encode()))
    return [{n: rng.choice(list(targets)) for n in nodes} for _ in range(count)]


def optimized_error(model, inputs, expected, measure: str = "auto") -> tuple[float, object]:
    """Optimize over two CPU vdevices (``measure`` as :func:`autoplace.optimize` takes it), build, run: (max error vs
    PyTorch, the result)."""
    result = autoplace.optimize(model, targets=TWO, measure=measure)
    return max_error(result.run(*inputs), expected), result


def random_errors(model, inputs, expected, count: int, key: str) -> list[float]:
    """Max errors vs PyTorch of ``count`` random placements over three CPU vdevices."""
    errors = []
    for assignment in random_assignments(model, THREE, count, key):
        placement = autoplace.place(model, None, assignment, THREE)
        errors.append(max_error(placement.run(*inputs), expected))
    return errors


def onnx_load(name: str, size: str, exporter: str):
    """The suite entry exported by ``exporter`` and read back through ``autoplace.load_model``."""
    proto = architectures.onnx_model(name, size, exporter)
    return autoplace.load_model(proto, name=f"{name}-onnx-{exporter}")


# ---------------------------------------------------------------------------------------------- the table


def _short(err: BaseException) -> str:
    lines = [line for line in str(err).strip().splitlines() if line.strip()]
    text = lines[-1] if lines else ""
    return f"{type(err).__name__}: {text}"[:300]


def _repairs_applied(name: str, size: str) -> dict:
    """Which repairs the import needed (the raw TVM import, repaired again to count)."""
    import torch
    from tvm.relax.frontend.torch import from_exported_program

    net, inputs = architectures.torch_model(name, size)
    with torch.no_grad():
        mod = from_exported_program(torch.export.export(net, inputs), keep_params_as_input=True)
    return repairs.apply(mod)[1]


def _time_us(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1e6)
    return float(np.median(times))


def check(name: str, size: str = "small", random_count: int = 3) -> dict:
    """Every check of the table for one architecture; each cell records its outcome and never raises."""
    import torch

    row: dict = {"architecture": name, "family": architectures.ARCHITECTURES[name].family, "size": size}
    inputs, expected = reference(name, size)
    started = time.perf_counter()
    try:
        model = architectures.get(name, size)
        row["load"] = {"ok": True, "s": time.perf_counter() - started}
    except Exception as err:
        row["load"] = {"ok": False, "error": _short(err)}
        return row
    row["repairs"] = _repairs_applied(name, size)
    try:
        from autoplace.backend import Runner
        from autoplace.targets import TargetSet

        started = time.perf_counter()
        executable = repairs.check_compiles(model)
        host = TargetSet({"cpu": "llvm"})
        runner = Runner(executable, host, model.params, ["cpu"] * len(model.params), ["cpu"] * len(inputs))
        row["one_device"] = {"ok": True, "s": time.perf_counter() - started,
                             "max_error": max_error(runner(*inputs), expected)}
    except Exception as err:
        row["one_device"] = {"ok": False, "error": _short(err)}
    try:
        error, result = optimized_error(model, inputs, expected)
        row["optimized"] = {"ok": True, "max_error": error, "predicted_us": result.predicted_us}
    except Exception as err:
        row["optimized"] = {"ok": False, "error": _short(err)}
    try:
        errors = random_errors(model, inputs, expected, random_count, f"{name}/{size}/3")
        row["random"] = {"ok": True, "count": len(errors), "max_error": max(errors)}
    except Exception as err:
        row["random"] = {"ok": False, "error": _short(err)}
    row["onnx"] = {}
    for exporter in architectures.EXPORTERS:
        expected_reason = architectures.ONNX_PATHS[name][exporter]
        cell: dict = {"expected_to_work": expected_reason is None}
        if exporter == "dynamo" and not architectures.has_dynamo_exporter():
            cell.update(ok=None, error="not run: the dynamo exporter needs onnxscript")
            row["onnx"][exporter] = cell
            continue
        try:
            onnx_model = onnx_load(name, size, exporter)
            errors = [optimized_error(onnx_model, inputs, expected)[0]]
            errors += random_errors(onnx_model, inputs, expected, 1, f"{name}/{size}/onnx-{exporter}")
            cell.update(ok=True, max_error=max(errors))
        except Exception as err:
            cell.update(ok=False, error=_short(err), reason=expected_reason)
        row["onnx"][exporter] = cell
    try:
        placement = autoplace.place(model, None, None, {"cpu": "llvm"})
        row["kernels"] = int(sum(1 for _ in _kernel_calls(placement)))
        samples = placement.runner.time_us(inputs, number=1, repeat=10)
        row["all_cpu_us"] = float(np.median(samples))
        net, torch_inputs = architectures.torch_model(name, size)
        torch.set_num_threads(1)  # the same one thread as TVM's build (TVM_NUM_THREADS=1)
        with torch.no_grad():
            net(*torch_inputs)
            row["pytorch_us"] = _time_us(lambda: net(*torch_inputs), repeat=10)
    except Exception as err:
        row["latency_error"] = _short(err)
    return row


def _kernel_calls(placement):
    """The kernel launches of the all-on-one-device build (call_tir bindings after lowering)."""
    import tvm
    from tvm import relax

    from autoplace.backend.pipeline import lower

    call_tir = tvm.ir.Op.get("relax.call_tir")
    main = lower(placement.mod)["main"]
    for block in main.body.blocks:
        for binding in block.bindings:
            if isinstance(binding.value, relax.Call) and binding.value.op.same_as(call_tir):
                yield binding.var.name


def _mark(ok) -> str:
    return {True: "✓", False: "✗", None: "–"}[ok]


def _onnx_text(row) -> str:
    parts = []
    for exporter, cell in row.get("onnx", {}).items():
        if cell["ok"] is None:
            parts.append(f"{exporter} – (no onnxscript)")
        elif cell["ok"]:
            parts.append(f"{exporter} ✓")
        elif not cell["expected_to_work"]:
            parts.append(f"{exporter} n/a")
        else:
            parts.append(f"{exporter} ✗")
    return ", ".join(parts)


def onnx_green(row) -> bool:
    """ONNX cells as expected: each exporter works exactly where ONNX_PATHS says (not run: no verdict)."""
    cells = row.get("onnx", {}).values()
    return all(cell["ok"] is None or cell["ok"] == cell["expected_to_work"] for cell in cells)


def green(row) -> bool:
    checks = ("load", "one_device", "optimized", "random")
    return all(row.get(k, {}).get("ok") for k in checks) and onnx_green(row)


def _cells(row):
    def cell(key):
        value = row.get(key, {})
        if not value:
            return "–"
        if not value.get("ok"):
            return f"✗ {value.get('error', '')[:80]}"
        extra = f" ({value['count']}, " if "count" in value else " ("
        return f"✓{extra}err {value['max_error']:.1e})" if "max_error" in value else "✓"

    return cell


def markdown(rows: list[dict]) -> str:
    head = ("| architecture | loads | compiles on 1 device | optimized plan matches "
            "| random placements match | ONNX path | kernels | all-CPU latency (us, 1 thread) "
            "| PyTorch eager (us, 1 thread) | repairs | row |")
    lines = [head, "|" + "---|" * 11]
    for row in rows:
        cell = _cells(row)
        fixes = ", ".join(f"{k} x{v}" for k, v in row.get("repairs", {}).items()) or "none"
        lines.append(
            f"| {row['architecture']} | {_mark(row['load']['ok'])} | {cell('one_device')} "
            f"| {cell('optimized')} "
            f"| {cell('random')} | {_onnx_text(row)} | {row.get('kernels', '–')} "
            f"| {row.get('all_cpu_us', float('nan')):.0f} | {row.get('pytorch_us', float('nan')):.0f} "
            f"| {fixes} | {'green' if green(row) else 'RED'} |"
        )
    reasons = {}
    for row in rows:
        for exporter, value in row.get("onnx", {}).items():
            if value["ok"] is False:
                reason = f"{exporter}: {value.get('reason') or value['error']}"
                reasons.setdefault(reason, []).append(row["architecture"])
    if reasons:
        lines.append("")
        lines.append("ONNX paths that do not work (n/a: expected, see autoplace.architectures.ONNX_PATHS):")
        for reason, names in reasons.items():
            lines.append(f"- {', '.join(names)}: {reason}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="small", choices=list(architectures.SIZES))
    parser.add_argument("--models", nargs="*", default=list(architectures.SUITE))
    parser.add_argument("--random", type=int, default=3, help="random placements over three vdevices")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = parser.parse_args(argv)
    os.environ.setdefault("TVM_NUM_THREADS", "1")
    warnings.filterwarnings("ignore")
    rows = []
    for name in args.models:
        started = time.perf_counter()
        row = check(name, args.size, args.random)
        row["check_s"] = time.perf_counter() - started
        rows.append(row)
        print(f"{name}: {'green' if green(row) else 'RED'} ({row['check_s']:.0f} s)", flush=True)
    table = markdown(rows)
    print()
    print(table)
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, "architectures" + ("" if args.size == "small" else f"-{args.size}"))
    environment = _environment()
    with open(f"{stem}.md", "w", encoding="utf-8") as f:
        f.write(f"# Architecture suite ({args.size}), `python experiments/architectures.py"
                f"{'' if args.size == 'small' else ' --size ' + args.size}`\n\n{environment}\n\n{table}\n")
    with open(f"{stem}.json", "w", encoding="utf-8") as f:
        json.dump({"environment": environment, "rows": rows}, f, indent=1, default=str)
    return 0 if all(green(r) for r in rows) else 1


def _environment() -> str:
    import platform

    import torch
    import transformers
    import tvm

    return (f"{time.strftime('%Y-%m-%d')}, {platform.machine()}, {os.cpu_count()} cores, "
            f"TVM {tvm.__version__}, "
            f"torch {torch.__version__}, transformers {transformers.__version__}, onnxscript "
            f"{'yes' if architectures.has_dynamo_exporter() else 'no (dynamo ONNX exporter not run)'}, "
            f"TVM_NUM_THREADS={os.environ.get('TVM_NUM_THREADS')}")


if __name__ == "__main__":
    sys.exit(main())
