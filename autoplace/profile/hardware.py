"""Where a profile was measured: CPU model and cores, GPU name and driver, TVM version, date.

:func:`hardware_metadata` describes this machine (a profile folder's ``metadata.json``);
:func:`measured_by` is the stamp every record gets from the process that measures it: the hardware
id, the TVM version running now and the date (never copied from a folder's metadata).
"""

from __future__ import annotations

import datetime
import functools
import os
import platform
import shutil
import subprocess

from .remote_runner import cpu_arch_from, cpu_model_from
from .remote_runner import hardware_id as _hardware_id


def _cpu_model() -> tuple[str, str | None]:
    """The CPU's model name and microarchitecture numbers (:func:`cpu_arch_from`)."""
    fallback = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpuinfo = f.read()
    except OSError:
        return fallback, None
    return cpu_model_from(cpuinfo, fallback), cpu_arch_from(cpuinfo)


def _gpus() -> list[dict]:
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.strip().splitlines():
        name, driver, memory = [p.strip() for p in line.split(",")]
        gpus.append({"name": name, "driver": driver, "memory": memory})
    return gpus


@functools.lru_cache(maxsize=1)
def _hardware() -> tuple:
    """CPU model, its microarchitecture, usable cores and GPUs of this machine (asked once per process:
    nvidia-smi is slow)."""
    from ..backend.cpu_threads import USABLE_CPUS

    # the CPUs at import: TVM's thread pool may have pinned this thread to one since
    cores = len(USABLE_CPUS) if USABLE_CPUS else os.cpu_count()
    cpu, arch = _cpu_model()
    gpus = _gpus()
    gpu_items = tuple(tuple(sorted(g.items())) for g in gpus)
    return _hardware_id(cpu, cores, [g["name"] for g in gpus], arch), cpu, arch, cores, gpu_items


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def measured_by() -> dict:
    """What measures a record made in this process now: ``hardware_id``, ``tvm_version``, ``measured_at``.

    The TVM version is read from the ``tvm`` module imported here (the one compiling and timing the
    kernels), not from any profile's ``metadata.json``.
    """
    import tvm

    return {"hardware_id": _hardware()[0], "tvm_version": tvm.__version__, "measured_at": _now()}


def hardware_metadata() -> dict:
    """Describe this machine; ``hardware_id`` names its ``profiles/`` folder.

    The id is built from the CPU model, its microarchitecture numbers (family and model: a virtual
    machine may name a Zen 3 and a Zen 5 both ``AMD EPYC``), the number of cores usable here and the
    GPUs, so two machines of the same kind share profiles and a different one never does silently.
    ``llvm_cpu`` is what the CPU kernels are compiled for (``znver3``: AVX2; ``znver5``: AVX-512);
    ``cpu_threads`` the threads TVM runs CPU kernels on in this process (:mod:`autoplace.backend.cpu_threads`).
    """
    import tvm

    from ..backend.cpu_schedules import host_cpu
    from ..backend.cpu_threads import runtime_threads

    hardware_id, cpu, arch, cores, gpus = _hardware()
    return {
        "hardware_id": hardware_id,
        "cpu_model": cpu,
        "cpu_arch": arch,
        "llvm_cpu": host_cpu(),
        "cpu_cores": cores,
        "cpu_threads": runtime_threads(),
        "machine": platform.machine(),
        "gpus": [dict(g) for g in gpus],
        "tvm_version": tvm.__version__,
        "python": platform.python_version(),
        "created": _now(),
    }
