"""How many threads TVM's CPU kernels run on: every physical core this process may use, unless the user says.

TVM 0.27 sizes its CPU thread pool from ``TVM_NUM_THREADS`` (or ``OMP_NUM_THREADS``); without either it takes
the number of logical CPUs *halved* on x86 ("ignore hyper-threading"), whether or not the CPUs have SMT. On a
virtual machine whose vCPUs are separate cores that is half the machine: on a 2-vCPU Zen 3, cnn-base ran in
13.1 ms on TVM's default (1 thread) and 6.8 ms on 2 threads, while a profile measured with
``TVM_NUM_THREADS=2`` priced it at the 2-thread speed, so every CPU cost was off by up to 2x for a user who had
not set the variable. :func:`use_physical_cores` (called when ``autoplace`` is imported) sets
``TVM_NUM_THREADS`` to the physical cores of this process's CPU set when neither variable is set; the thread
pool is created on the first parallel kernel, so this holds for every kernel run after the import. Profiles
record the thread count they were measured with (:func:`runtime_threads`).
"""

from __future__ import annotations

import os

__all__ = ["USABLE_CPUS", "physical_cores", "restore_usable_cpus", "runtime_threads", "use_physical_cores"]

#: The CPUs this process may run on, read when autoplace is imported. TVM's thread pool, sized below the CPUs
#: (``TVM_NUM_THREADS=1`` on two), pins the thread that runs a parallel kernel to one CPU: after an in-process
#: profile job the main thread's affinity read ``{0}`` on the 2-vCPU Zen 3, so a hardware id computed then said
#: ``-1c`` and every process started from that thread (the profiling worker, RPC servers in the tests) inherited
#: one CPU. The hardware id counts these; :func:`restore_usable_cpus` gives a child process them back.
USABLE_CPUS = frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None


def restore_usable_cpus(cpus=None) -> None:
    """Let this process run on ``cpus`` (default :data:`USABLE_CPUS`) again, whatever thread affinity it inherited
    (nothing where the platform has no affinity)."""
    cpus = USABLE_CPUS if cpus is None else cpus
    if cpus and hasattr(os, "sched_setaffinity"):
        try:
            os.sched_setaffinity(0, cpus)
        except OSError:  # a CPU set the container no longer allows: keep what there is
            pass


def physical_cores() -> int:
    """Physical cores among the CPUs this process may use (SMT siblings count once)."""
    # imported here, not above: autoplace.profile imports this module
    from ..profile.remote_runner import physical_cores as cores

    return cores()


def use_physical_cores() -> None:
    """Make TVM's CPU thread pool use every physical core unless ``TVM_NUM_THREADS``/``OMP_NUM_THREADS`` is set.

    The same rule as the standalone bundle runner (:func:`autoplace.profile.remote_runner.use_physical_cores`).
    Has no effect on a thread pool TVM already created in this process (a parallel kernel run before
    ``import autoplace``).
    """
    from ..profile.remote_runner import use_physical_cores as use

    use()


def runtime_threads() -> int:
    """The threads TVM's CPU thread pool runs parallel kernels on in this process (creates the pool)."""
    import tvm

    return int(tvm.get_global_func("runtime.NumThreads")())
