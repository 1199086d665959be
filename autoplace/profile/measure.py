"""Measure kernels, VM call overhead and copies with TVM's own timers.

Risky work (compiling and running a kernel) runs in a worker process with a time limit: a kernel
that fails to compile, crashes the process or hangs becomes a record with ``status`` ``"error"``,
``"crashed"`` or ``"timeout"`` (the op is then unsupported on that target) and the job goes on.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os

import numpy as np

#: Default timing settings: each sample runs the kernel for at least ``min_repeat_ms``.
DEFAULT_TIMING = dict(number=1, repeat=7, min_repeat_ms=20)


def _device(kind: str, index: int = 0):
    import tvm

    return tvm.device("cpu" if kind == "llvm" else kind, index)


def _random_args(shapes, dtypes, num_outputs, dev, seed=0):
    import tvm

    rng = np.random.default_rng(seed)
    args = []
    for i, (shape, dtype) in enumerate(zip(shapes, dtypes)):
        if i >= len(shapes) - num_outputs or not dtype.startswith(("float", "bfloat")):
            # Outputs, and integer/bool inputs (often indices: zeros are always in bounds).
            value = np.zeros(shape, dtype=dtype)
        else:
            value = rng.standard_normal(shape).astype(dtype)
        args.append(tvm.runtime.tensor(value, dev))
    return args


def _summary(samples_us) -> dict:
    samples = np.asarray(samples_us, dtype=float)
    return dict(
        median_us=float(np.median(samples)),
        min_us=float(samples.min()),
        max_us=float(samples.max()),
        std_us=float(samples.std()),
        samples=len(samples),
    )


def compile_kernel(func_script: str, target_json: str):
    """Build one PrimFunc (given as TVMScript) for a target into a runtime module.

    TVMScript is the transport because ``tvm.ir.save_json`` crashes on PrimFuncs in TVM 0.27.
    """
    import tvm

    func = tvm.script.from_source(func_script)
    if isinstance(func, tvm.IRModule):
        func = next(f for _, f in func.functions_items())
    import json

    target = tvm.target.Target(json.loads(target_json))
    func = func.with_attr("global_symbol", "main")
    if "target" in func.attrs:
        func = func.without_attr("target")
    return tvm.tirx.build(tvm.IRModule({"main": func}), target=target)


def time_kernel(lib, kind: str, shapes, dtypes, num_outputs, *, number, repeat, min_repeat_ms) -> dict:
    """Time a compiled kernel (``main``) with ``time_evaluator``; samples in microseconds."""
    dev = _device(kind)
    args = _random_args(shapes, dtypes, num_outputs, dev)
    lib["main"](*args)  # warm-up (and a crash here is caught by the worker's parent)
    dev.sync()
    timer = lib.time_evaluator("main", dev, number=number, repeat=repeat, min_repeat_ms=min_repeat_ms)
    return _summary(np.asarray(timer(*args).results) * 1e6)


def _worker_measure(task: dict) -> dict:
    """Runs in the worker process: compile and time one kernel; errors become a record."""
    try:
        lib = compile_kernel(task["func_script"], task["target_json"])
    except Exception as err:
        return dict(status="error", error=f"compile: {str(err).strip().splitlines()[-1][:300]}")
    if task.get("compile_only"):
        return dict(status="compiled")
    try:
        result = time_kernel(lib, task["kind"], task["arg_shapes"], task["arg_dtypes"], task["num_outputs"],
                             number=task["number"], repeat=task["repeat"], min_repeat_ms=task["min_repeat_ms"])
    except Exception as err:
        return dict(status="error", error=f"run: {str(err).strip().splitlines()[-1][:300]}")
    return dict(status="ok", **result)


def _worker_init():
    os.environ.setdefault("TVM_LOG_DEBUG", "0")


class KernelTimer:
    """Measures kernels in a worker process (``isolate=True``) or in this process.

    Parameters
    ----------
    timeout_s : float
        Per kernel (compile + time); past it the worker is killed and the kernel recorded as a timeout.
    isolate : bool
        Use a worker process (default). ``False`` is faster to start but a crash kills the caller.
    compile_only : bool
        Only check that each kernel compiles for the target (status ``"compiled"`` or ``"error"``):
        for a target this machine cannot run, e.g. CUDA kernels built here for a GPU box.
    """

    def __init__(self, *, timeout_s: float = 300.0, isolate: bool = True, compile_only: bool = False, **timing):
        self.timeout_s = timeout_s
        self.isolate = isolate
        self.compile_only = compile_only
        self.timing = {**DEFAULT_TIMING, **timing}
        self._pool = None

    def _executor(self):
        if self._pool is None:
            ctx = multiprocessing.get_context("spawn")
            self._pool = cf.ProcessPoolExecutor(max_workers=1, mp_context=ctx, initializer=_worker_init)
        return self._pool

    def _kill(self):
        if self._pool is not None:
            for proc in list(getattr(self._pool, "_processes", {}).values()):
                proc.terminate()
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def close(self):
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def measure(self, unit, target) -> dict:
        """Measure one :class:`~autoplace.profile.units.Unit` on a ``tvm.target.Target``; returns a result dict."""
        import tvm

        task = dict(
            func_script=unit.prim_func.script(show_meta=True),
            kind=unit.target_kind,
            arg_shapes=[list(s) for s in unit.arg_shapes],
            arg_dtypes=list(unit.arg_dtypes),
            num_outputs=unit.num_outputs,
            compile_only=self.compile_only,
            **self.timing,
        )
        task["target_json"] = _target_json(target)
        del tvm
        if not self.isolate:
            return _worker_measure(task)
        future = self._executor().submit(_worker_measure, task)
        try:
            return future.result(timeout=self.timeout_s)
        except cf.TimeoutError:
            self._kill()
            return dict(status="timeout", error=f"no result within {self.timeout_s:.0f} s")
        except cf.process.BrokenProcessPool:
            self._kill()
            return dict(status="crashed", error="the worker process died (segfault or abort) running this kernel")


def _target_json(target) -> str:
    return str(target)  # TVM 0.27 prints a target as its JSON config
