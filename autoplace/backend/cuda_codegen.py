"""Compile CUDA kernels to machine code on a machine without a GPU driver (for a GPU box's bundle).

TVM's pip wheel links its CUDA runtime (``libtvm_runtime_cuda.so``) against the driver, ``libcuda.so.1``. Where
the driver is missing (the CPU machines that build bundles for a GPU box), that runtime does not load and TVM's
codegen falls back to a module that stores each kernel's CUDA C *source*: the GPU box then compiles every module
with NVRTC when it loads it. On session 27's H200 box that was ~0.9 s per kernel of the 15 minutes lent (and the
compile flags were chosen there, for ``sm_90a``).

:func:`enable` loads TVM's CUDA runtime against an empty stand-in for the driver (built here with the C compiler,
soname ``libcuda.so.1``, no symbols; the runtime is loaded with lazy binding). With no driver entry point the
CUDA runtime reports no device (``tvm.cuda().exist`` is False, as before) and nothing calls into the stand-in;
TVM's codegen then compiles kernels at build time with nvcc to a fatbin (``TVM_CUDA_COMPILE_MODE=nvcc`` unless
the NVRTC bindings are installed), for the architecture of the bundle's CUDA target.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import tempfile

_LOADED: bool | None = None
_TARGET = []  # the CUDA target kernels are compiled for (the callback reads it; one a process at a time)


def enable(target) -> bool:
    """Make this process compile CUDA kernels for ``target`` (a CUDA target or spec) to machine code at build
    time; True if it now does.

    Loads TVM's CUDA runtime against the stand-in driver where it did not load (does nothing to a runtime that
    loaded: a real driver) and replaces TVM's compile callback by one that compiles under ``target`` (TVM's own
    reads the architecture from ``Target.current()``, else from a GPU). False without nvcc or a C compiler, or
    where the runtime still cannot load, or with ``AUTOPLACE_CUDA_SOURCE=1``: builds then keep TVM's source
    modules.
    """
    global _LOADED
    import tvm
    import tvm_ffi

    target = target if isinstance(target, tvm.target.Target) else tvm.target.Target(target)
    if os.environ.get("AUTOPLACE_CUDA_SOURCE") == "1":  # escape hatch: TVM's own behaviour
        return False
    if _LOADED is None:
        _LOADED = bool(tvm.runtime.enabled("cuda")) or _load_with_stand_in()
    if not _LOADED or shutil.which("nvcc") is None:
        return False
    if not _TARGET:
        from tvm.support import nvcc

        compiler = "nvrtc"
        try:
            import cuda.bindings.nvrtc  # noqa: F401  (TVM's default compiler path)
        except ImportError:
            compiler = "nvcc"

        @tvm_ffi.register_global_func("tvm_callback_cuda_compile", override=True)
        def compile_for_target(code, *_):
            with _TARGET[-1]:
                return nvcc.compile_cuda(code, target_format="fatbin" if compiler == "nvcc" else "cubin",
                                         compiler=compiler)

    _TARGET[:] = [target]
    return True


def _load_with_stand_in() -> bool:
    import tvm

    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    runtime = os.path.join(os.path.dirname(tvm.__file__), "lib", "libtvm_runtime_cuda.so")
    if cc is None or not os.path.exists(runtime):
        return False
    folder = tempfile.mkdtemp(prefix="autoplace-libcuda-")
    source, stand_in = os.path.join(folder, "empty.c"), os.path.join(folder, "libcuda.so.1")
    with open(source, "w") as f:
        f.write("/* no driver: a stand-in so that TVM's CUDA runtime loads, for codegen only */\n")
    try:
        subprocess.run([cc, "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", stand_in, source],
                       check=True, capture_output=True, timeout=120)
        ctypes.CDLL(stand_in, mode=ctypes.RTLD_GLOBAL)  # found by its soname when the runtime asks for it
        ctypes.CDLL(runtime, mode=os.RTLD_LAZY | ctypes.RTLD_GLOBAL)  # registers TVM's CUDA module loaders
    except (OSError, subprocess.SubprocessError):
        return False
    return bool(tvm.runtime.enabled("cuda"))
