"""Measure kernels, VM call overhead and copies with TVM's own timers.

Risky work (compiling and running a kernel) runs in a worker process with a time limit: a kernel
that fails to compile, crashes the process or hangs becomes a record with ``status`` ``"error"``,
``"crashed"`` or ``"timeout"`` (the op is then unsupported on that target) and the job goes on.

A failure of the harness itself is never a kernel's: every worker answers a handshake (it started and
imported TVM) before it is given a kernel, and after a crash or a timeout a fresh worker must start
again before the kernel is blamed. A worker that cannot start (typically a script calling
``profile_models`` without an ``if __name__ == "__main__":`` guard: the ``spawn`` worker imports the
script again) and options that cannot time anything raise :class:`~autoplace.errors.ProfilingError`.
"""

from __future__ import annotations

import concurrent.futures as cf
import math
import multiprocessing
import os
import sys

import numpy as np

from ..backend.cpu_threads import runtime_threads
from ..errors import ProfilingError

#: Default timing settings: each sample runs the kernel for at least ``min_repeat_ms``.
DEFAULT_TIMING = dict(number=1, repeat=7, min_repeat_ms=20)
#: Shortest per-kernel time limit accepted beyond the timing itself: compiling a kernel takes up to seconds.
MIN_TIMEOUT_S = 1.0
#: How long a new worker may take to start and import TVM before the harness is declared broken.
STARTUP_TIMEOUT_S = 180.0

MAIN_GUARD_HELP = (
    "If you call autoplace.profile.profile_models (or KernelTimer) from a script, put those calls under "
    "`if __name__ == \"__main__\":` - the worker process starts by importing your script again (Python's "
    "'spawn' start method) and must not run the job itself - or run the `autoplace profile` command line "
    "instead (e.g. `autoplace profile --zoo mlp`)."
)


def in_spawn_bootstrap() -> bool:
    """True while this process is a spawned child still importing its parent's main script.

    Code reached then (a script without a main guard) must not start a profiling job.
    """
    return bool(getattr(multiprocessing.current_process(), "_inheriting", False))


def refuse_in_spawn_bootstrap(what: str = "profiling") -> None:
    """Raise :class:`ProfilingError` if called while a spawned worker imports its parent's script."""
    if in_spawn_bootstrap():
        script = getattr(sys.modules.get("__mp_main__"), "__file__", None) or "of its parent"
        raise ProfilingError(
            f"{what} was started inside a worker process that is importing the main script {script}: the "
            "script has no main guard. " + MAIN_GUARD_HELP
        )


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

    TVMScript is the transport because ``tvm.ir.save_json`` crashes on PrimFuncs in TVM 0.27. The parser's
    well-formedness check is off: a scheduled kernel may bind one variable in two ``Let`` expressions (detect's box
    decoding, whose two sigmoids both inline ``exp_x``), which TVM builds but its printed script does not parse back
    with the check on (session 41: that kernel had never been profiled on any machine).
    """
    import tvm

    func = tvm.script.from_source(func_script, check_well_formed=False)
    if isinstance(func, tvm.IRModule):
        func = next(f for _, f in func.functions_items())
    import json

    target = tvm.target.Target(json.loads(target_json))
    func = func.with_attr("global_symbol", "main")
    if "target" in func.attrs:
        # The kernel's own target is what the build ships (autoplace.backend.lower fills in this CPU's
        # mcpu for llvm, e.g. znver5: AVX-512/FMA; plain "llvm" would mean SSE2): time exactly that.
        own = func.attrs["target"]
        if own.kind.name == target.kind.name:
            target = own
        func = func.without_attr("target")
    from ..backend.strided_loads import TIR_PIPELINE

    return tvm.tirx.build(tvm.IRModule({"main": func}), target=target, pipeline=TIR_PIPELINE)


def time_kernel(lib, kind: str, shapes, dtypes, num_outputs, *, number, repeat, min_repeat_ms,
                weight_args=None) -> dict:
    """Time a compiled kernel (``main``) with ``time_evaluator``; samples in microseconds.

    With ``weight_args`` (positions of the weight arguments; CPU kernels only), the kernel is also timed
    in-model (every core's L2 evicted, its activation inputs read back in, one run per sample,
    :func:`~autoplace.profile.cache_state.register_in_model_preproc`): ``in_model_median_us``,
    ``in_model_min_us``; ``in_model_timing`` and ``l2_bytes`` say how. A kernel with weights is timed a third
    time, in that state with its weights flushed from every cache
    (:func:`~autoplace.profile.remote_runner.register_weights_cold_preproc`): ``weights_cold_median_us``,
    ``weights_cold_min_us``, ``weights_cold_timing``.
    """
    dev = _device(kind)
    args = _random_args(shapes, dtypes, num_outputs, dev)
    lib["main"](*args)  # warm-up (and a crash here is caught by the worker's parent)
    dev.sync()
    timer = lib.time_evaluator("main", dev, number=number, repeat=repeat, min_repeat_ms=min_repeat_ms)
    result = _summary(np.asarray(timer(*args).results) * 1e6)
    if weight_args is not None and kind == "llvm":
        from . import cache_state
        from .remote_runner import in_model_fields, register_weights_cold_preproc, weights_cold_fields

        preproc = cache_state.register_in_model_preproc(
            cache_state.activation_inputs(len(args), num_outputs, weight_args))
        result.update(in_model_fields(lib, dev, args, preproc, repeat, cache_state.usable_l2_bytes()))
        if weight_args:
            import tvm

            cold = register_weights_cold_preproc(tvm, weight_args)
            result.update(weights_cold_fields(lib, dev, args, cold, repeat))
    return result


#: In the worker process: kernels compiled for a job's later rounds (``KernelTimer.measure(keep=True)``), by key.
_KEPT: dict = {}


def _worker_measure(task: dict) -> dict:
    """Runs in the worker process: compile (or take the kept build of) and time one kernel; errors become a
    record. Without ``func_script``, a kernel that is not kept answers ``status="not_kept"``."""
    keep = task.get("keep")
    lib = _KEPT.get(keep) if keep else None
    if lib is None:
        if task.get("func_script") is None:
            return dict(status="not_kept")
        try:
            lib = compile_kernel(task["func_script"], task["target_json"])
        except Exception as err:
            return dict(status="error", error=f"compile: {str(err).strip().splitlines()[-1][:300]}")
        if keep:
            _KEPT[keep] = lib
    if task.get("compile_only"):
        return dict(status="compiled")
    try:
        result = time_kernel(lib, task["kind"], task["arg_shapes"], task["arg_dtypes"], task["num_outputs"],
                             number=task["number"], repeat=task["repeat"],
                             min_repeat_ms=task["min_repeat_ms"], weight_args=task.get("weight_args"))
    except Exception as err:
        return dict(status="error", error=f"run: {str(err).strip().splitlines()[-1][:300]}")
    if task["kind"] == "llvm":
        result["threads"] = runtime_threads()  # a CPU kernel's time depends on it (autoplace.backend.cpu_threads)
    return dict(status="ok", **result)


def _worker_forget() -> int:
    """Drop the kept builds (the end of a job's rounds); returns how many there were."""
    count = len(_KEPT)
    _KEPT.clear()
    return count


def _worker_init(cpus=None):
    os.environ.setdefault("TVM_LOG_DEBUG", "0")
    from ..backend import cpu_threads

    # The CPUs the parent had at import, not the one TVM may have pinned its thread to (which this process
    # inherited, and read as its own when it imported autoplace): they are this worker's too (the L2 it evicts).
    if cpus:
        cpu_threads.USABLE_CPUS = frozenset(cpus)
    cpu_threads.restore_usable_cpus()


def _worker_ready() -> dict:
    """The handshake: the worker started, imported TVM and can answer."""
    import tvm

    return dict(pid=os.getpid(), tvm_version=tvm.__version__)


def _main_script_hint() -> str:
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    cli = path is not None and path.endswith(("autoplace/__main__.py", "autoplace"))
    if path and getattr(main, "__spec__", None) is None and not cli:
        return f" Most likely cause: the script {path} has no main guard. "
    return " "


def validate_timing(timeout_s, isolate: bool, timing: dict) -> dict:
    """Check timing options up front; returns the full timing dict or raises :class:`ProfilingError`.

    Options that cannot measure (``repeat=0``, a time limit shorter than the timing itself) would
    otherwise turn every kernel into a failure record.
    """
    unknown = sorted(set(timing) - set(DEFAULT_TIMING))
    if unknown:
        raise ProfilingError(f"unknown timing option(s) {unknown}: KernelTimer takes "
                             f"{sorted(DEFAULT_TIMING)} and timeout_s, isolate, compile_only")
    timing = {**DEFAULT_TIMING, **timing}
    for name, what, default, flag in (("repeat", "samples taken of each kernel", 7, "; --repeat 7"),
                                      ("number", "runs averaged in each sample", 1, "")):
        value = timing[name]
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ProfilingError(
                f"{name}={value!r} cannot measure anything: {name} is the number of {what} and must be an "
                f"integer >= 1 (default {default}{flag})"
            )
    value = timing["min_repeat_ms"]
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) or not math.isfinite(value) \
            or value < 0:
        raise ProfilingError(f"min_repeat_ms={value!r} must be a number of milliseconds >= 0 (default 20; "
                             "e.g. --min-repeat-ms 20)")
    timing["number"], timing["repeat"] = int(timing["number"]), int(timing["repeat"])
    if isolate:
        need = MIN_TIMEOUT_S + timing["repeat"] * timing["min_repeat_ms"] / 1000.0
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float, np.number)) \
                or not math.isfinite(timeout_s) or timeout_s < need:
            raise ProfilingError(
                f"timeout_s={timeout_s!r} is too short to measure a kernel: it must cover compiling it "
                f"plus repeat x min_repeat_ms = {timing['repeat']} x {timing['min_repeat_ms']} ms of timing, "
                f"so at least {need:.3g} s; use a generous limit (default 300; e.g. --timeout 300): it only "
                "stops kernels that hang"
            )
    return timing


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
    **timing
        ``number``, ``repeat`` (integers >= 1), ``min_repeat_ms`` (>= 0): see :data:`DEFAULT_TIMING`.

    Raises
    ------
    ProfilingError
        Options that cannot measure (``repeat=0``, a ``timeout_s`` shorter than the timing itself);
        from :meth:`measure`, a worker process that cannot start.
    """

    def __init__(self, *, timeout_s: float = 300.0, isolate: bool = True, compile_only: bool = False,
                 **timing):
        self.timing = validate_timing(timeout_s, isolate, timing)
        self.timeout_s = float(timeout_s) if isolate else timeout_s
        self.isolate = isolate
        self.compile_only = compile_only
        self._pool = None
        self._kept: set = set()  # unit keys measured with keep=True (the worker may have lost them since)

    def options(self) -> str:
        """The options, as a user would name them in a message."""
        return (f"repeat={self.timing['repeat']}, number={self.timing['number']}, "
                f"min_repeat_ms={self.timing['min_repeat_ms']}, timeout_s={self.timeout_s}")

    def _executor(self):
        """The worker pool; a new worker must answer the handshake before it is given a kernel."""
        if self._pool is None:
            refuse_in_spawn_bootstrap("a profiling worker")
            ctx = multiprocessing.get_context("spawn")
            from ..backend.cpu_threads import USABLE_CPUS

            self._pool = cf.ProcessPoolExecutor(max_workers=1, mp_context=ctx, initializer=_worker_init,
                                                initargs=(sorted(USABLE_CPUS) if USABLE_CPUS else None,))
            try:
                self._pool.submit(_worker_ready).result(timeout=max(STARTUP_TIMEOUT_S, self.timeout_s))
            except Exception as err:
                self._kill()
                if isinstance(err, cf.TimeoutError):
                    cause = f"it did not answer within {max(STARTUP_TIMEOUT_S, self.timeout_s):.0f} s"
                elif isinstance(err, cf.process.BrokenProcessPool):
                    cause = "it died while starting (see its error above)"
                else:
                    cause = f"{type(err).__name__}: {str(err).strip()[:300]}"
                raise ProfilingError(
                    f"the profiling worker process could not start: {cause}. This is a failure of the "
                    "profiling harness, not of any kernel: nothing was recorded for the kernel about to be "
                    "measured."
                    + _main_script_hint() + MAIN_GUARD_HELP
                ) from err
        return self._pool

    def check_harness(self) -> None:
        """Start a worker (if ``isolate``) and check that it answers, else raise :class:`ProfilingError`."""
        if self.isolate:
            self._executor()

    def _kill(self):
        self._kept.clear()  # the worker's kept builds die with it
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

    def measure(self, unit, target, *, keep: bool = False) -> dict:
        """Measure one :class:`~autoplace.profile.units.Unit` on a ``tvm.target.Target``; returns a result
        dict.

        With ``keep``, the worker keeps the compiled kernel, and a later ``measure(..., keep=True)`` of the same
        unit and target times it again without compiling (a profiling job's later rounds) until
        :meth:`forget_kept`; a worker that restarted in between compiles it again.
        """
        target_json = _target_json(target)
        task = dict(
            kind=unit.target_kind,
            arg_shapes=[list(s) for s in unit.arg_shapes],
            arg_dtypes=list(unit.arg_dtypes),
            num_outputs=unit.num_outputs,
            compile_only=self.compile_only,
            target_json=target_json,
            keep=f"{unit.key}|{target_json}" if keep else None,
            weight_args=list(unit.weight_args) if unit.target_kind == "llvm" else None,
            **self.timing,
        )
        if keep and unit.key in self._kept:
            result = self._run(dict(task, func_script=None))  # the worker's kept build
            if result.get("status") != "not_kept":
                return result
        result = self._run(dict(task, func_script=unit.prim_func.script(show_meta=True)))
        if keep:
            self._kept.add(unit.key)
        return result

    def forget_kept(self) -> None:
        """Let the worker drop the kernels kept by ``measure(keep=True)``."""
        if self._kept:
            self._kept.clear()
            if not self.isolate:
                _worker_forget()
            elif self._pool is not None:
                self._pool.submit(_worker_forget).result(timeout=self.timeout_s)

    def _run(self, task: dict) -> dict:
        if not self.isolate:
            return _worker_measure(task)
        future = self._executor().submit(_worker_measure, task)
        try:
            return future.result(timeout=self.timeout_s)
        except cf.TimeoutError:
            self._kill()
            self._executor()  # the harness still works (else ProfilingError): the kernel is to blame
            return dict(status="timeout", error=f"no result within {self.timeout_s:.0f} s",
                        timeout_s=self.timeout_s)
        except cf.process.BrokenProcessPool:
            self._kill()
            self._executor()  # a fresh worker starts (else ProfilingError): the kernel killed the last one
            return dict(status="crashed",
                        error="the worker process died (segfault or abort) running this kernel")


def _target_json(target) -> str:
    return str(target)  # TVM 0.27 prints a target as its JSON config
