"""Time compiled kernels and VM executables with TVM's ``time_evaluator``: a bundle's runner, and the
per-item code the RPC path (:mod:`autoplace.profile.rpc`) runs with a remote session's devices.

    TVM_USE_RUNTIME_LIB=1 python runner.py BUNDLE_DIR [--out BUNDLE_DIR/records.jsonl] [--rounds 3]

Reads ``manifest.json``, loads each compiled kernel / VM executable, times it and appends one
CRC-checked JSON line per measurement (the format of ``autoplace.profile.store``), tagged with this
machine's hardware id; CPU kernels are also timed in-model, as the profiler times them locally (every core's
L2 evicted, the activation inputs read back in: :func:`time_in_model`, with the bundle's streaming kernel).
``--rounds N`` times every item N times, round by round (round 2 starts when every item had round 1: on a
shared box a slow phase then spoils one round of an item, not all of them, and placed models of a plan bundle
are timed side by side); each line says its ``round``, and ``autoplace profile --merge``
keeps the median of each item's rounds within 10% of its fastest (``autoplace.profile.job.merge_rounds``).
Resumable: records already in the output file (item and round) are skipped. This file is copied into every
bundle and imports only tvm.runtime, numpy and the standard library.

:func:`run_item` times one manifest item given how to load a module file and how to make a device:
the runner passes ``tvm.runtime.load_module`` and ``tvm.device``; the RPC path passes
``session.upload`` + ``session.load_module`` and ``session.device``, so a kernel is timed by the same
code on this machine or on a machine of a farm.
"""

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import zlib

import numpy as np

#: How a CPU kernel's in-model time is taken (:mod:`autoplace.profile.cache_state`; records carry it as
#: ``in_model_timing``, other versions are timed again). These constants and :func:`l2_bytes` live here because
#: this file is copied alone to device boxes; ``cache_state`` takes them from here.
IN_MODEL_TIMING = "l2-evicted-inputs-read/2"
#: Inputs below this many bytes are not read back after the eviction (a few cache lines: not worth a call).
REREAD_MIN_BYTES = 4 << 10
#: Per-core L2 assumed when Linux does not say (sysfs).
DEFAULT_L2_PER_CORE_BYTES = 512 << 10
#: Name of the preprocessing function registered in the timing process (``time_evaluator(f_preproc=...)``).
PREPROC_NAME = "autoplace.profile.in_model_cache"
#: How a CPU kernel with weights is timed with its weights in memory (records carry it as ``weights_cold_timing``;
#: kernels with weights timed otherwise are timed again): the in-model state (:data:`PREPROC_NAME`), then every
#: weight argument flushed from every cache level by TVM's ``cache_flush_cpu_non_first_arg`` (``clflush``). A model
#: whose weights per call outgrow what the caches keep of them from one call to the next reads each weight from
#: memory: vit-base's kernels on the AMD Zen 3 summed in-model to -19.5% of its end-to-end time, so to +6.0%
#: (session 43, ``experiments/warm_vs_cold_kernels.py``).
WEIGHTS_COLD_TIMING = "in-model-weights-flushed/1"
#: Name of the weights-cold preprocessing function (:func:`register_weights_cold_preproc`).
WEIGHTS_COLD_PREPROC_NAME = "autoplace.profile.weights_cold_cache"
#: TVM's packed function that flushes every argument but the first from the CPU caches.
CACHE_FLUSH = "cache_flush_cpu_non_first_arg"
#: A bundle's streaming kernels for in-model timing (``main(x, y)``: ``y = x + x`` over float32 vectors of any
#: length, parallel, and ``serial(x, y)`` on one thread, built for the bundle's CPU target; the manifest's
#: ``stream``, used in parallel from ``stream_parallel_min`` elements: :func:`stream_by_length`).
STREAM_FILE = "lib/in_model_stream.so"

#: Relax functions a placed model's executable carries for timing it with every argument on its own device:
#: ``STASH(args on device 0)`` copies each argument to its device and keeps it in the runtime's tensor cache,
#: ``BENCH()`` calls ``main`` with them. (``VirtualMachine.set_input`` moves every argument to the first
#: device, and over RPC ``main`` cannot be called with tensors directly: they arrive as ``DLTensor*``.)
STASH, BENCH = "autoplace_stash", "autoplace_bench"
#: The in-context timing (``autoplace.profile.in_context``), copied beside the runner: a bundle's ``model`` items
#: (a model built on one target) have their kernels timed inside the model's runs with it (:func:`time_in_context_item`).
IN_CONTEXT_FILE = "in_context.py"


def _crc(record):
    body = json.dumps({k: v for k, v in record.items() if k != "crc"}, sort_keys=True, separators=(",", ":"))
    return f"{zlib.crc32(body.encode()):08x}"


def _slug(text):
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def hardware_id(cpu, cores, gpu_names, arch=None):
    """``<cpu model>[-<arch>]-<cores>c[-<gpu>...]``: the name of a machine's ``profiles/`` folder (the same
    rule as ``autoplace.profile.hardware``). ``arch`` (:func:`cpu_arch_from`) tells apart CPUs whose model
    name a virtual machine masks: ``amd-epyc-f25m1-2c`` (Zen 3) is not ``amd-epyc-f26m17-2c``."""
    return "-".join([_slug(cpu)[:40]] + ([_slug(arch)] if arch else []) + [f"{cores}c"]
                    + [_slug(name)[:30] for name in gpu_names])


def cpu_arch_from(cpuinfo_text):
    """The CPU's microarchitecture numbers from ``/proc/cpuinfo``: ``f25m1`` (x86 ``cpu family`` 25,
    ``model`` 1), ``i0x41p0xd0c`` (Arm implementer and part); None when it has neither.

    Virtual machines often mask the model name (every AMD server reads ``AMD EPYC``) but keep these, and
    kernels tuned on one microarchitecture run at other speeds on another (AVX-512 or not, FMA units).
    """
    fields = {}
    for line in cpuinfo_text.splitlines():
        if not line.strip():
            if fields:
                break  # the first processor's block is enough
            continue
        key, sep, value = line.partition(":")
        key = key.strip()
        if sep and key not in fields:
            fields[key] = value.strip()
    if fields.get("cpu family", "").isdigit() and fields.get("model", "").isdigit():
        return f"f{fields['cpu family']}m{fields['model']}"
    if fields.get("CPU implementer") and fields.get("CPU part"):
        return f"i{fields['CPU implementer']}p{fields['CPU part']}"
    return None


def cpu_flags_from(cpuinfo_text):
    """The first processor's ``flags`` of ``/proc/cpuinfo`` (``{"avx2", "avx512f", ...}``); None without any."""
    for line in cpuinfo_text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return None


def missing_cpu_flags(needed, cpuinfo_text):
    """The instruction-set flags of ``needed`` (``/proc/cpuinfo`` names, the manifest's ``cpu_flags_needed``)
    that this CPU lacks; empty when it has them all or when its flags cannot be read (nothing to tell by)."""
    flags = cpu_flags_from(cpuinfo_text)
    return [] if flags is None else sorted(set(needed) - flags)


def cpu_model_from(cpuinfo_text, fallback):
    """The first ``model name`` of ``/proc/cpuinfo``, else ``fallback``."""
    for line in cpuinfo_text.splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return fallback


def cores_from(status_text, cpuinfo_text=""):
    """Usable cores from ``/proc/self/status`` (``Cpus_allowed_list: 0-3,8``), else processors in cpuinfo."""
    for line in status_text.splitlines():
        if line.startswith("Cpus_allowed_list:"):
            count = 0
            for part in line.split(":", 1)[1].strip().split(","):
                low, _, high = part.partition("-")
                if low.strip():
                    count += int(high or low) - int(low) + 1
            if count:
                return count
    return sum(1 for line in cpuinfo_text.splitlines() if line.startswith("processor")) or None


def physical_cores():
    """Physical cores among the CPUs this process may run on (SMT siblings count once), from
    ``/sys/devices/system/cpu/cpu<N>/topology``; where that is missing, every allowed CPU counts."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    cores = set()
    for cpu in cpus:
        core = []
        for name in ("physical_package_id", "core_id"):
            try:
                with open(f"/sys/devices/system/cpu/cpu{cpu}/topology/{name}") as f:
                    core.append(f.read().strip())
            except OSError:
                return len(cpus)
        cores.add(tuple(core))
    return max(1, len(cores))


def use_physical_cores():
    """TVM's CPU thread pool takes half the logical CPUs on x86 unless told (one of two cores on a 2-vCPU
    virtual machine): set ``TVM_NUM_THREADS`` to the physical cores, before TVM runs anything, unless the
    user set it or ``OMP_NUM_THREADS`` (``autoplace.backend.cpu_threads``)."""
    if not (os.environ.get("TVM_NUM_THREADS", "").strip() or os.environ.get("OMP_NUM_THREADS", "").strip()):
        os.environ["TVM_NUM_THREADS"] = str(physical_cores())


def hardware(tvm_version, threads=None):
    cpu, arch = platform.processor() or platform.machine(), None
    try:
        with open("/proc/cpuinfo") as f:
            cpuinfo = f.read()
        cpu, arch = cpu_model_from(cpuinfo, cpu), cpu_arch_from(cpuinfo)
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    gpus = []
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                                  "--format=csv,noheader"], capture_output=True, text=True, timeout=20).stdout
            for line in out.strip().splitlines():
                name, driver, memory = [p.strip() for p in line.split(",")]
                gpus.append({"name": name, "driver": driver, "memory": memory})
        except (OSError, subprocess.SubprocessError):
            pass
    return {"hardware_id": hardware_id(cpu, cores, [g["name"] for g in gpus], arch), "cpu_model": cpu,
            "cpu_arch": arch, "cpu_cores": cores, "cpu_threads": threads, "machine": platform.machine(), "gpus": gpus,
            "tvm_version": tvm_version,
            "python": platform.python_version(),
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


#: The CPUs this process may run on, read when this module is loaded (the runner: when it starts). TVM's thread
#: pool, with fewer threads than CPUs (``TVM_NUM_THREADS`` of the physical cores on an SMT machine), pins the thread
#: that runs a parallel kernel to one CPU, whose affinity then reads one CPU (``cpu_threads.USABLE_CPUS``).
CPUS_AT_START = frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None


def l2_bytes(cores=None):
    """The L2 of ``cores`` cores of this machine together (default: the CPUs this process could use when this
    module was loaded, :data:`CPUS_AT_START`).

    Read from Linux sysfs (``cpu0/cache/index2``); :data:`DEFAULT_L2_PER_CORE_BYTES` per core when it cannot
    be read.
    """
    if cores is None:
        cores = len(CPUS_AT_START) if CPUS_AT_START else (os.cpu_count() or 1)
    return (cache_size_bytes(2) or DEFAULT_L2_PER_CORE_BYTES) * max(1, int(cores))


def cache_size_bytes(index):
    """The size of cpu0's cache ``index`` (Linux sysfs ``cache/index<N>/size``: 2 is the L2, 3 the L3); None when
    it cannot be read."""
    try:
        with open(f"/sys/devices/system/cpu/cpu0/cache/index{index}/size", encoding="ascii") as f:
            text = f.read().strip().upper()
        return int(text.rstrip("KMG")) << {"K": 10, "M": 20, "G": 30}.get(text[-1], 0)
    except (OSError, ValueError, IndexError):
        return None


def activation_inputs(num_args, num_outputs, weight_args):
    """Positions of a kernel's inputs that are not weights (what the kernel before it wrote)."""
    weights = set(weight_args)
    return [i for i in range(num_args - num_outputs) if i not in weights]


def stream_by_length(module, parallel_min_elems):
    """``stream(x, y)`` with a bundle's streaming kernels (``module``): ``serial`` for vectors shorter than
    ``parallel_min_elems``, ``main`` (parallel) for the others, as autoplace schedules an elementwise kernel
    (older bundles have ``main`` only)."""
    parallel = module["main"]
    try:
        serial = module["serial"]
    except Exception:  # a bundle built before session 21
        return parallel
    threshold = int(parallel_min_elems or 0)

    def stream(x, y):
        (serial if int(x.shape[0]) < threshold else parallel)(x, y)

    return stream


def register_stream_preproc(tvm, stream, reread_args, buffers):
    """Register :data:`PREPROC_NAME` as the profiler's in-model preprocessing (``cache_state``) does, with a
    bundle's streaming kernel ``stream(x, y)``: a pass over twice the L2 of this process's cores evicts them,
    then the arguments at ``reread_args`` are read back in. ``buffers``: a dict kept between calls (the
    eviction buffer, and outputs by size)."""
    n = 2 * l2_bytes() // 4

    def scratch(size):
        if size not in buffers:
            buffers[size] = tvm.runtime.empty((size,), "float32", tvm.cpu())
        return buffers[size]

    if "evict" not in buffers:
        buffers["evict"] = tvm.runtime.tensor(np.ones(n, "float32"), tvm.cpu())
    evict, reread_args = buffers["evict"], tuple(reread_args)

    def preproc(*args):  # returns nothing: the timer takes no object back
        stream(evict, scratch(n))
        for i in reread_args:
            nbytes = int(np.prod(args[i].shape)) * np.dtype(str(args[i].dtype)).itemsize
            if nbytes >= REREAD_MIN_BYTES and nbytes % 4 == 0:
                stream(args[i]._create_view((nbytes // 4,), "float32"), scratch(nbytes // 4))

    tvm.register_global_func(PREPROC_NAME, preproc, override=True)
    return PREPROC_NAME


def time_in_model(tvm, lib, dev, call_args, record, stream, buffers, repeat):
    """A CPU kernel timed in-model (:func:`register_stream_preproc` before every run, one run per sample): the
    fields the profiler adds to its record (``in_model_median_us``, ``in_model_min_us``, ``in_model_timing``,
    ``l2_bytes``; for a kernel with weights, the ``weights_cold_*`` fields too: :func:`weights_cold_fields`)."""
    reread = activation_inputs(len(call_args), record["num_outputs"], record.get("weight_args") or [])
    name = register_stream_preproc(tvm, stream, reread, buffers)
    fields = in_model_fields(lib, dev, call_args, name, repeat, l2_bytes())
    if record.get("weight_args"):  # and with its weights in memory
        fields.update(weights_cold_fields(lib, dev, call_args,
                                          register_weights_cold_preproc(tvm, record["weight_args"]), repeat))
    return fields


def in_model_fields(lib, dev, call_args, preproc_name, repeat, l2_total_bytes):
    """Time ``main`` of ``lib`` once per sample after the registered preprocessing ``preproc_name`` (here, or in
    an RPC server's process when ``lib`` is a module of its session); the in-model fields of a record."""
    cold = lib.time_evaluator("main", dev, number=1, repeat=repeat, min_repeat_ms=0, f_preproc=preproc_name)
    samples = np.asarray(cold(*call_args).results) * 1e6
    return dict(in_model_median_us=float(np.median(samples)), in_model_min_us=float(samples.min()),
                in_model_timing=IN_MODEL_TIMING, l2_bytes=int(l2_total_bytes))


def register_weights_cold_preproc(tvm, weight_args):
    """Register :data:`WEIGHTS_COLD_PREPROC_NAME`: the registered in-model preprocessing (:data:`PREPROC_NAME`,
    registered first for this kernel), then the arguments at ``weight_args`` flushed from every cache
    (:data:`CACHE_FLUSH`, which skips its first argument: a placeholder goes there); returns its name."""
    in_model = tvm.get_global_func(PREPROC_NAME)
    flush = tvm.get_global_func(CACHE_FLUSH, allow_missing=True)
    placeholder = tvm.runtime.tensor(np.zeros(1, "float32"), tvm.cpu())
    weight_args = tuple(weight_args)

    def preproc(*args):  # returns nothing: the timer takes no object back
        if flush is None:  # the timing fails, not the kernel (weights_cold_fields)
            raise RuntimeError(f"this TVM has no {CACHE_FLUSH}: kernels are not timed with their weights flushed")
        in_model(*args)
        flush(placeholder, *[args[i] for i in weight_args])

    tvm.register_global_func(WEIGHTS_COLD_PREPROC_NAME, preproc, override=True)
    return WEIGHTS_COLD_PREPROC_NAME


def weights_cold_fields(lib, dev, call_args, preproc_name, repeat):
    """Time ``main`` of ``lib`` once per sample after ``preproc_name`` (:func:`register_weights_cold_preproc`):
    the weights-cold fields of a record (``weights_cold_median_us``, ``weights_cold_min_us``,
    ``weights_cold_timing``). A failure of this timing alone (a TVM without the flush) is no failure of the kernel:
    ``weights_cold_error`` says why, with the timing's version (it is not tried again), and no time."""
    try:
        cold = lib.time_evaluator("main", dev, number=1, repeat=repeat, min_repeat_ms=0, f_preproc=preproc_name)
        samples = np.asarray(cold(*call_args).results) * 1e6
    except Exception as err:  # any TVM error of the flush
        return dict(weights_cold_timing=WEIGHTS_COLD_TIMING, weights_cold_error=error_text(err))
    return dict(weights_cold_median_us=float(np.median(samples)), weights_cold_min_us=float(samples.min()),
                weights_cold_timing=WEIGHTS_COLD_TIMING)


#: Runtime libraries that ``import tvm`` loads with its backends, which ``TVM_USE_RUNTIME_LIB=1`` skips: without
#: ``libtvm_runtime_cuda.so`` a runtime-only TVM has no CUDA device API and every CUDA item would be skipped;
#: without ``libtvm_runtime_extra.so`` no CPU sort or top-k runs (``tvm.contrib.sort.*``, the packed functions
#: TVM's CPU ``topk``/``sort``/``argsort`` call: session 38's box failed every CPU top-k of detect-base so).
DEVICE_RUNTIME_LIBS = ("tvm_runtime_extra", "tvm_runtime_cuda")
#: Where a GPU box keeps ``libcudart`` if the loader does not find it (the CUDA toolkit; the ``nvidia`` Python
#: packages beside PyTorch are searched too).
CUDART_DIRS = ("/usr/local/cuda/lib64", "/usr/local/cuda/lib", "/usr/lib/x86_64-linux-gnu")


def load_device_runtimes(tvm):
    """Load the device runtimes a runtime-only TVM skipped (:data:`DEVICE_RUNTIME_LIBS`, those present in its
    ``lib`` folder); returns ``{name: None if loaded, else why not}``. ``libcudart`` is looked for in
    :data:`CUDART_DIRS` and in the ``nvidia`` Python packages when the loader alone does not find it."""
    import ctypes
    import glob

    if not getattr(tvm, "_RUNTIME_ONLY", False):
        return {}
    # The CUDA runtime asks Python for the GPU's compute version (``tvm.support.nvcc.get_compute_version``), which
    # looks at ``Target.current()`` first: without the compiler that has no FFI function and the call fails
    # ("no attribute 'TargetCurrent'"). No target is current in a runner, so it answers None and the compute
    # version comes from the device, as it would with the compiler.
    from tvm.target import _ffi_api as target_api

    if not hasattr(target_api, "TargetCurrent"):
        target_api.TargetCurrent = lambda allow_none=True: None
    lib_dir = os.path.join(os.path.dirname(tvm.__file__), "lib")
    found = {}
    for name in DEVICE_RUNTIME_LIBS:
        path = os.path.join(lib_dir, f"lib{name}.so")
        if not os.path.exists(path):
            continue
        try:
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)  # registers the device API when loaded
            found[name] = None
            continue
        except OSError as err:
            found[name] = str(err)
        if "cudart" not in found[name]:
            continue
        dirs = list(CUDART_DIRS)
        for entry in sys.path:
            dirs += glob.glob(os.path.join(entry, "nvidia", "*", "lib")) + glob.glob(os.path.join(entry, "nvidia", "cuda_runtime", "lib"))
        for candidate in [c for d in dirs for c in sorted(glob.glob(os.path.join(d, "libcudart.so*")))]:
            try:
                ctypes.CDLL(candidate, mode=ctypes.RTLD_GLOBAL)
                ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                found[name] = None
                break
            except OSError as err:
                found[name] = f"{found[name]}; with {candidate}: {err}"
    return found


def generated_array(index, shape, dtype):
    """A weight a plan bundle did not carry (large float arrays): normal, scale 0.02, seeded by its position
    among ``main``'s arguments, so every plan of a model gets the same values."""
    return (np.random.default_rng(index).standard_normal(shape, dtype=np.float32) * 0.02).astype(dtype)


def device(tvm, kind, index=0):
    return tvm.device("cpu" if kind == "llvm" else kind, index)


def summary(samples_us):
    s = np.asarray(samples_us, dtype=float)
    return dict(median_us=float(np.median(s)), min_us=float(s.min()), max_us=float(s.max()),
                std_us=float(s.std()), samples=len(s))


def args_for(tvm, shapes, dtypes, num_outputs, dev):
    # The same arguments as autoplace.profile.measure._random_args, written again on purpose: this file
    # is copied alone to a device box that has only the TVM runtime (no autoplace, no compiler).
    rng = np.random.default_rng(0)
    out = []
    for i, (shape, dtype) in enumerate(zip(shapes, dtypes)):
        if i >= len(shapes) - num_outputs or not dtype.startswith(("float", "bfloat")):
            value = np.zeros(shape, dtype=dtype)
        else:
            value = rng.standard_normal(shape).astype(dtype)
        out.append(tvm.runtime.tensor(value, dev))
    return out


def time_kernel(tvm, lib, dev, call_args, timing):
    """A compiled kernel (``main``): one warm-up call, then ``time_evaluator`` (as the local profiler)."""
    lib["main"](*call_args)
    dev.sync()
    timer = lib.time_evaluator("main", dev, **timing)
    return summary(np.asarray(timer(*call_args).results) * 1e6)


def time_vm_stateful(runtime_vm, lib, devices, call_args, timing):
    """A probe executable (copy, call overhead): ``set_input`` + ``invoke_stateful``, as
    ``autoplace.profile.copies`` times it here (every argument of a probe lives on device 0)."""
    machine = runtime_vm.VirtualMachine(lib, devices)
    machine.set_input("main", *call_args)
    machine.invoke_stateful("main")
    timer = machine.time_evaluator("invoke_stateful", devices[0], **timing)
    return summary(np.asarray(timer("main").results) * 1e6)


def time_placed_model(tvm, runtime_vm, lib, devices, arrays, arg_devices, timing):
    """A placed model: each argument on its own device, ``main`` timed end to end.

    Executables built with :data:`STASH`/:data:`BENCH` (every bundle and RPC job now) are timed as
    ``BENCH()``: the arguments are uploaded to device 0, copied to their devices once by ``STASH`` (not
    timed), and ``BENCH`` calls ``main`` with them (about 0.2 us per argument more than calling ``main``
    directly). Older bundles: ``main`` with the arguments (possible on this machine only).
    """
    machine = stage_placed_model(tvm, runtime_vm, lib, devices, arrays)
    if machine is not None:
        return summary(time_staged(machine, devices[0], timing))
    machine = runtime_vm.VirtualMachine(lib, devices)
    call_args = [tvm.runtime.tensor(np.asarray(a), devices[d]) for a, d in zip(arrays, arg_devices)]
    machine["main"](*call_args)
    timer = machine.time_evaluator("main", devices[0], **timing)
    return summary(np.asarray(timer(*call_args).results) * 1e6)


def stage_placed_model(tvm, runtime_vm, lib, devices, arrays):
    """A VM of a placed model built with :data:`STASH`/:data:`BENCH`, its arguments uploaded and copied to
    their devices, one warm-up call made; None for an executable without them (older bundles)."""
    machine = runtime_vm.VirtualMachine(lib, devices)
    try:
        machine.module.get_function(BENCH)
    except Exception:
        return None
    machine.set_input(STASH, *[tvm.runtime.tensor(np.asarray(a), devices[0]) for a in arrays])
    machine.invoke_stateful(STASH)
    machine[BENCH]()
    devices[0].sync()
    return machine


def time_staged(machine, dev, timing):
    """Samples in microseconds of :data:`BENCH` (``main`` with the staged arguments)."""
    timer = machine.time_evaluator(BENCH, dev, **timing)
    return np.asarray(timer().results) * 1e6


def staged_outputs(machine):
    """The outputs of ``main`` on the staged arguments, as numpy arrays (a tuple output flattened)."""
    machine.set_input(BENCH)
    machine.invoke_stateful(BENCH)
    out = machine.get_outputs(BENCH)
    flat = []

    def walk(value):
        if isinstance(value, (list, tuple)):
            for v in value:
                walk(v)
        else:
            flat.append(value.numpy())

    walk(out)
    return flat


_LOADED = {}  # {path of a bundle's in_context.py: the module}


def time_in_context_item(tvm, lib, devices, arrays, arg_devices, func_names, bundle_dir):
    """The ``in_context_*`` fields of a ``model`` item (a model built on one target): each kernel timed inside the
    model's runs by the bundle's copy of ``autoplace.profile.in_context`` (:data:`IN_CONTEXT_FILE`), ``main`` called
    with every argument on its device; ``func_names``: the kernels the build launches, in order (the units')."""
    import importlib.util
    import types

    path = os.path.join(bundle_dir, IN_CONTEXT_FILE)
    if not os.path.exists(path):
        return dict(in_context_error=f"this bundle has no {IN_CONTEXT_FILE} (built by an older autoplace)")
    in_context = _LOADED.get(path)
    if in_context is None:  # loaded once per bundle
        spec = importlib.util.spec_from_file_location("autoplace_bundle_in_context", path)
        in_context = _LOADED[path] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(in_context)
    call_args = [tvm.runtime.tensor(np.asarray(a), devices[d]) for a, d in zip(arrays, arg_devices)]
    units = [types.SimpleNamespace(func_name=name) for name in func_names]
    try:
        return in_context.time_in_context(lib, devices, call_args, units)
    except Exception as err:  # the model keeps its end-to-end timing
        return dict(in_context_error=error_text(err), in_context_timing=in_context.IN_CONTEXT_TIMING)


def run_item(tvm, runtime_vm, item, *, load, make_device, timing, arrays=None, in_model=None):
    """Time one manifest item; returns the result fields (``status`` ``"ok"`` and the summary).

    Parameters
    ----------
    item : dict
        A manifest item: ``record`` (its ``kind`` picks the timing), ``file``, and ``kind`` + argument
        shapes for a kernel, ``devices`` + ``inputs`` for a probe, ``devices`` + ``arg_devices`` for a
        placed model.
    load : callable
        ``load(file) -> module`` (here: ``tvm.runtime.load_module``; over RPC: upload, then
        ``session.load_module``).
    make_device : callable
        ``make_device(kind, index) -> device`` (here: ``tvm.device``; over RPC: ``session.device``).
    arrays : list of numpy arrays, optional
        A placed model's inputs and weights (the bundle's ``.npz``).
    in_model : callable, optional
        ``in_model(lib, dev, call_args, record) -> fields``: also time a CPU kernel in-model
        (:func:`time_in_model`: the runner, where its bundle has a streaming kernel; over RPC, the preprocessing
        library of :mod:`autoplace.profile.rpc`).

    Raises whatever TVM raises: the caller decides what a failure is (a record here, a lost connection
    or a kernel's failure over RPC).
    """
    kind = item["record"]["kind"]
    lib = load(item["file"])
    # a call-overhead probe: its fastest of this many timings (as autoplace.profile.copies keeps its fastest round)
    probe_rounds = max(1, int(item.get("probe_rounds", 1)))
    if kind == "unit" or item.get("alone"):
        dev = make_device(item["kind"], 0)
        call_args = args_for(tvm, item["arg_shapes"], item["arg_dtypes"], item["num_outputs"], dev)
        result = dict(status="ok", **fastest(lambda: time_kernel(tvm, lib, dev, call_args, timing), probe_rounds))
        if in_model is not None and kind == "unit" and item["kind"] == "llvm" and "weight_args" in item["record"]:
            result.update(in_model(lib, dev, call_args, item["record"]))
        return result
    devices = [make_device(k, i) for k, i in item["devices"]]
    if arrays is not None or "arrays" in item:
        return dict(status="ok", **time_placed_model(tvm, runtime_vm, lib, devices, arrays,
                                                      item["arg_devices"], timing))
    # Probe inputs: only their size matters (a copy's bytes, a call's argument), so nothing is uploaded.
    call_args = [tvm.runtime.empty(tuple(s), d, devices[i]) for s, d, i in item["inputs"]]
    return dict(status="ok", **fastest(lambda: time_vm_stateful(runtime_vm, lib, devices, call_args, timing),
                                       probe_rounds))


def fastest(time_once, rounds: int) -> dict:
    """The summary of ``time_once()`` with the smallest median over ``rounds`` calls."""
    return min((time_once() for _ in range(max(1, rounds))), key=lambda timed: timed["median_us"])


def error_text(err):
    """The last line of an exception's message (TVM's carry a traceback), at most 300 characters."""
    text = str(err).strip()
    return text.splitlines()[-1][:300] if text else repr(err)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("bundle")
    parser.add_argument("--out")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--min-repeat-ms", type=int, default=20)
    parser.add_argument("--rounds", type=int,
                        help="time every item this many times, round by round (default: the bundle's, else 1)")
    args = parser.parse_args(argv)
    if args.rounds is not None and args.rounds < 1:
        parser.error(f"--rounds must be at least 1, not {args.rounds}")
    use_physical_cores()
    import tvm  # the runtime is enough (TVM_USE_RUNTIME_LIB=1)
    from tvm.runtime import vm as runtime_vm
    for name, why in load_device_runtimes(tvm).items():
        print(f"{name}: {'loaded' if why is None else 'not loaded: ' + why}", flush=True)

    with open(os.path.join(args.bundle, "manifest.json")) as f:
        manifest = json.load(f)
    out = args.out or os.path.join(args.bundle, "records.jsonl")
    rounds = args.rounds or int(manifest.get("rounds", 1))
    meta = hardware(getattr(tvm, "__version__", manifest.get("tvm_version", "unknown")),
                    threads=int(tvm.get_global_func("runtime.NumThreads")()))
    with open(os.path.join(os.path.dirname(out) or ".", "metadata.json"), "w") as f:
        json.dump(meta, f, indent=1, sort_keys=True)
    done = set()
    if os.path.exists(out):
        with open(out) as f:
            for line in f:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                if r.get("crc") == _crc(r):
                    done.add((r.get("kind"), r.get("key"), r.get("target"), r.get("round", 1)))
    timing = dict(number=1, repeat=args.repeat, min_repeat_ms=args.min_repeat_ms)

    def write(record):
        if record.get("target") == "llvm" and record.get("status") == "ok":
            record = dict(record, threads=meta["cpu_threads"])  # a CPU time depends on the threads that ran it
        record = dict(record, schema=1, hardware_id=meta["hardware_id"], tvm_version=meta["tvm_version"],
                      measured_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
        record["crc"] = _crc(record)
        with open(out, "a") as f:
            f.write(json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n")
            f.flush()
            os.fsync(f.fileno())

    items = manifest["units"] + manifest.get("launch", []) + manifest.get("copies", []) + manifest.get("models", [])
    present = {}

    # CPU code compiled for instructions this CPU lacks would die on its first call (SIGILL): the CPU counts as
    # absent (its items, and every item that runs CPU code, are skipped) rather than crash item after item.
    try:
        with open("/proc/cpuinfo") as f:
            missing = missing_cpu_flags(manifest.get("cpu_flags_needed", ()), f.read())
    except OSError:
        missing = []

    def available(kind):
        if kind not in present:
            try:
                present[kind] = bool(device(tvm, kind).exist)
            except Exception:
                present[kind] = False
            if not present[kind]:
                print(f"no {kind} device on this machine: its items are skipped (not recorded as failures)")
            elif kind == "llvm" and missing:
                present[kind] = False
                print(f"this CPU lacks {', '.join(missing)}, which the bundle's CPU code was compiled for "
                      f"({manifest.get('targets', {})}): its CPU items are skipped (not recorded as failures). Pack "
                      "again for this CPU: name its mcpu in the llvm target (x86-64-v3 runs on any AVX2 CPU)",
                      flush=True)
        return present[kind]

    in_model = None  # CPU kernels also timed in-model, with the bundle's streaming kernel (older bundles: none)
    if manifest.get("stream") and any(item.get("kind") == "llvm" for item in manifest["units"]) and available("llvm"):
        stream = stream_by_length(tvm.runtime.load_module(os.path.join(args.bundle, manifest["stream"])),
                                  manifest.get("stream_parallel_min", 0))
        buffers = {}

        def in_model(lib, dev, call_args, record):
            return time_in_model(tvm, lib, dev, call_args, record, stream, buffers, args.repeat)

    # An item that kills the process (a crash in a kernel or the driver) is not timed again: the item in flight is
    # kept in OUT.current, and a runner that finds one there without its record writes that record as failed.
    current = out + ".current"
    if os.path.exists(current):
        with open(current) as f:
            try:
                died = json.load(f)
            except ValueError:
                died = None
        if died and (died.get("kind"), died.get("key"), died.get("target"), died.get("round", 1)) not in done:
            write(dict(died, status="error", error="the runner died while timing this item (a crash, or it was "
                                                   "killed); not timed again when resumed"))
            done.add((died.get("kind"), died.get("key"), died.get("target"), died.get("round", 1)))

    last_loaded = {}  # the item's library, loaded once for its end-to-end and its in-context timing

    def load(file):
        if file not in last_loaded:
            last_loaded.clear()
            last_loaded[file] = tvm.runtime.load_module(os.path.join(args.bundle, file))
        return last_loaded[file]

    todo = [(r, n, item) for r in range(1, rounds + 1) for n, item in enumerate(items, 1)]
    for r, n, item in todo:
        record = dict(item["record"], round=r)
        kinds = [item["kind"]] if "kind" in item else [k for k, _ in item["devices"]]
        if not all(available(k) for k in kinds):
            continue
        if (record["kind"], record["key"], record["target"], r) in done:
            continue
        print(f"[{n}/{len(items)}{f', round {r}/{rounds}' if rounds > 1 else ''}] {record['kind']} "
              f"{record['target']} {record.get('func_name', record['key'])}", flush=True)
        arrays = None
        if "arrays" in item:  # a placed model: inputs and weights saved beside it, large weights drawn here
            saved = np.load(os.path.join(args.bundle, item["arrays"]))
            drawn = item.get("generated", {})
            arrays = [generated_array(i, *drawn[str(i)]) if str(i) in drawn else saved[f"arg{i}"]
                      for i in range(len(item["arg_devices"]))]
        with open(current, "w") as f:
            json.dump(record, f)
        try:
            record.update(run_item(tvm, runtime_vm, item, timing=timing, arrays=arrays, in_model=in_model,
                                   load=load, make_device=lambda kind, index: device(tvm, kind, index)))
        except Exception as err:
            record.update(status="error", error=error_text(err))
        if "in_context" in item and record.get("status") == "ok":  # a model built on one target: its kernels too
            record.update(time_in_context_item(
                tvm, load(item["file"]), [device(tvm, k, i) for k, i in item["devices"]], arrays,
                item["arg_devices"], item["in_context"], args.bundle))
        write(record)
    if os.path.exists(current):
        os.remove(current)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
