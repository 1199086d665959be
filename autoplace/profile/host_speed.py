"""How fast this machine runs right now: a fixed reference kernel timed every few seconds of a profile job.

On a shared or virtual machine another tenant can take a core for minutes, and every kernel timed then
reads slow (on the Zen 3, a whole 16-minute profile once read 20-40% slow against the same kernels an
hour earlier, three rounds and all). Rounds minutes apart do not help when the slow stretch is longer
than the job. :class:`HostSpeed` times a fixed matmul (the *canary*) on the CPU right before a record
is timed, and each CPU record carries ``canary_us`` (the canary's time then)
and ``host_slowdown``: that over the fastest canary any record of the folder carries. Rounds are then
merged from the calm ones (:func:`autoplace.profile.job.merge_rounds`), and the job says how much of
what it timed ran slow, so ``--rounds`` can add rounds until enough are calm.

A second canary sees what the matmul does not: the *sharing* canary, two parallel passes in which every thread
reads what another core wrote just before (as each kernel of a model reads its input). On the 2-vCPU AMD Zen 5
(session 49) whole models ran at two speeds in phases of 10 s to minutes (inception-base 1.30 vs 1.95 ms,
resnet-base 0.20 vs 0.28) while the matmul read the same in both; the sharing canary read 16-17 us in the fast
phase and 71-74 us in the slow one (the two vCPUs apart, on cores that share no cache, is the likely cause:
streaming canaries ran *faster* there, with two L3s to draw on). Over 7187 samples of each of two models, a
sharing canary over :data:`APART` times its fastest flagged 828 of the 1061 slow samples and 12 calm ones
(``experiments/canary_correlation.py``). While it reads so, ``host_slowdown`` is its ratio (over 4 there, so
every such record counts slow) and records carry ``sharing_canary_us``.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd

#: The canary: ``(M, K) @ (K, N)`` float32 on every CPU thread, about 0.2 ms on two Zen 3 cores.
CANARY_SHAPE = (128, 256, 256)
#: ``host_slowdown`` above which a record counts as timed while the machine ran slow.
SLOW = 1.15
#: A sample of a whole model counts as calm when the canary before it read within this of the fastest (and
#: within this of the calmest canary of its call). The canary reads only part of a slow phase: on the Zen 3
#: models ran 1.2-1.4x slow in stretches where it read 1.03-1.10x (``experiments/canary_correlation.py``:
#: Spearman 0.7 between canary and model samples); replayed on those samples, 1.05 instead of 1.15 / 1.10
#: halves the median excess of a timing over the calm floor (bert-base 7.7% -> 4.2%) for ~40% more samples.
CALM = 1.05
#: Seconds :meth:`HostSpeed.calm_samples` waits for calm samples once a call has found none: slow phases last
#: minutes (on the Zen 3 and on the Intel Xeon), so a few more seconds per call do not outlast one, while the
#: job's rounds, minutes apart, do. Waiting the full ``patience_s`` on every call of a slow phase had made the
#: Xeon's stride grid (149 single-kernel models, 3 rounds) take 19 minutes (the Zen 3's: 3.5).
SLOW_PHASE_PATIENCE_S = 0.3
#: Seconds a job (one :class:`HostSpeed`) waits in all for the host to calm down before timing again what only
#: slow readings have (:meth:`HostSpeed.wait_calm`): the Zen 5's slow phases last 10 s to 2 minutes, longer than
#: the rounds of a small model's kernels, which then all read slow (resnet-base's 21 kernels, 6 rounds in 37 s,
#: priced 1.38x their calm times by ``measure="always"``, session 49).
CALM_WAIT_S = 90.0
#: The sharing canary reads the cores apart when over this times its fastest (Zen 5: 1.04-1.29x in the fast
#: phase, 4.5-5.1x in the slow one).
APART = 2.0
#: Bytes the sharing canary's two buffers hold together: within the L2 of two cores, so a pass reads the other
#: core's cache, not memory.
SHARING_BYTES = 1 << 20


def _canary_runner():
    """``time_us()`` of the canary, compiled with autoplace's CPU pipeline for this machine's CPU."""
    import tvm
    from tvm import relax

    from ..backend.cpu_schedules import cpu_target
    from ..backend.pipeline import single_device_build
    from ..zoo import matmul_module

    m, k, n = CANARY_SHAPE
    dev = tvm.cpu()
    vm = relax.VirtualMachine(single_device_build(matmul_module(m, k, n), cpu_target("llvm")), dev)
    rng = np.random.default_rng(0)
    args = [tvm.runtime.tensor(rng.standard_normal(s).astype("float32"), dev) for s in ((m, k), (k, n))]
    timer = vm.time_evaluator("main", dev, number=20, repeat=5)

    def time_us() -> float:
        return float(np.median(timer(*args).results)) * 1e6

    time_us()  # warm up
    return time_us


def _sharing_canary_runner(nbytes: int = SHARING_BYTES, lanes: int = 16):
    """``time_us()`` of the sharing canary: two parallel passes over two float32 buffers of ``nbytes`` together,
    each block computed from the block half a buffer away, which another thread wrote in the pass before (with one
    thread it reads its own writes). A pass that reads its own half ran 10x faster on the Zen 5."""
    import tvm
    from tvm.script import tirx as T

    from ..backend.cpu_schedules import cpu_target

    blocks = nbytes // 8 // lanes
    half = blocks // 2

    @T.prim_func
    def main(x: T.Buffer((blocks, lanes), "float32"), y: T.Buffer((blocks, lanes), "float32")):
        T.func_attr({"global_symbol": "main", "tir.noalias": True})
        for b in T.parallel(blocks):
            for lane in T.vectorized(lanes):
                y[b, lane] = x[(b + half) % blocks, lane] * T.float32(0.5) + T.float32(1)
        for b in T.parallel(blocks):
            for lane in T.vectorized(lanes):
                x[b, lane] = y[(b + half) % blocks, lane] * T.float32(0.5) + T.float32(1)

    dev = tvm.cpu()
    lib = tvm.tirx.build(main, target=cpu_target("llvm"))
    args = [tvm.runtime.tensor(np.ones((blocks, lanes), "float32"), dev) for _ in range(2)]
    timer = lib.time_evaluator("main", dev, number=20, repeat=1)

    def time_us() -> float:
        return float(np.median(timer(*args).results)) * 1e6

    time_us()  # warm up
    return time_us


class HostSpeed:
    """The canary's latest time against the fastest seen, refreshed at most every ``interval_s``.

    Parameters
    ----------
    best_us : float, optional
        The fastest canary this profile folder has recorded (:func:`best_canary_us`).
    best_sharing_us : float, optional
        The fastest sharing canary it has recorded (``best_canary_us(records, "sharing_canary_us")``;
        :meth:`for_records` reads both).
    interval_s : float
        Seconds between two canary timings (each takes about 10 ms). The default, 0, times it before
        every record: on the Zen 3 the canary flips between 1x and 2x in stretches of one to a few
        seconds (one of the two vCPUs taken by the host), so an older reading says little.
    wait_budget_s : float, optional
        Seconds :meth:`wait_calm` may wait in all over this canary's life; default :data:`CALM_WAIT_S` (a
        profile job's). An experiment timing built plans for half an hour can afford minutes.
    """

    def __init__(self, best_us: float | None = None, interval_s: float = 0.0,
                 slow_phase_patience_s: float = SLOW_PHASE_PATIENCE_S, best_sharing_us: float | None = None,
                 wait_budget_s: float | None = None):
        self.best_us = float(best_us) if best_us and np.isfinite(best_us) else None
        self.best_sharing_us = float(best_sharing_us) if best_sharing_us and np.isfinite(best_sharing_us) else None
        self.interval_s = interval_s
        self.slow_phase_patience_s = slow_phase_patience_s
        self.in_slow_phase = False  # the latest calm_samples call gave up without enough calm samples
        self._time_us = None
        self._sharing_time_us = None
        self._last = -np.inf
        self.current = 1.0
        self.canary_us = None  # the latest timing
        self.sharing_us = None  # the sharing canary's latest timing
        self.apart = False  # the sharing canary read over APART times its fastest
        self.timed: list[float] = []  # every slowdown read in this job
        self.apart_count = 0  # readings of this job with the cores apart
        self.waited_s = 0.0  # seconds wait_calm waited in this job
        self.wait_budget_s = wait_budget_s
        #: Set by a profiling job whose host check read slow and went on (``host_check="warn"``): the ratio of
        #: the folder's kernels now to their records, stamped on every record (:mod:`.host_check`).
        self.host_check_ratio: float | None = None

    @classmethod
    def for_records(cls, *records, **options) -> HostSpeed:
        """A canary against the fastest readings of both canaries some records of this machine (DataFrames, or
        None) carry: a job's own folder, and for ``measure="auto"`` (whose folder starts empty) this machine's
        profile too. Without any, the job's first reading is the fastest so far: a job that starts in a slow phase
        it cannot tell from its own readings until the host speeds up."""
        def best(column):
            values = [b for b in (best_canary_us(r, column) for r in records) if b is not None]
            return min(values) if values else None

        return cls(best("canary_us"), best_sharing_us=best("sharing_canary_us"), **options)

    def slowdown(self) -> float:
        """``canary now / fastest canary seen`` (1.0 = as fast as this machine has run), or the sharing canary's
        ratio while it reads the cores apart (:data:`APART`)."""
        if time.monotonic() - self._last >= self.interval_s:
            if self._time_us is None:
                self._time_us = _canary_runner()
            if self._sharing_time_us is None:
                self._sharing_time_us = _sharing_canary_runner()
            self.canary_us = self._time_us()
            self.sharing_us = self._sharing_time_us()
            self._last = time.monotonic()
            self.best_us = self.canary_us if self.best_us is None else min(self.best_us, self.canary_us)
            self.best_sharing_us = (self.sharing_us if self.best_sharing_us is None
                                    else min(self.best_sharing_us, self.sharing_us))
            sharing = self.sharing_us / self.best_sharing_us
            self.apart = sharing > APART
            self.current = max(self.canary_us / self.best_us, sharing) if self.apart else self.canary_us / self.best_us
            self.timed.append(self.current)
            self.apart_count += self.apart
        return self.current

    def wait_calm(self, max_s: float | None = None, poll_s: float = 0.5) -> float:
        """Wait, reading the canaries every ``poll_s`` seconds, until the host reads calm (slowdown at most
        :data:`SLOW`), for at most ``max_s`` seconds and what is left of ``wait_budget_s`` (:data:`CALM_WAIT_S`
        for a job); the seconds waited (0 when it reads calm now)."""
        budget = max(0.0, (CALM_WAIT_S if self.wait_budget_s is None else self.wait_budget_s) - self.waited_s)
        budget = budget if max_s is None else min(budget, max_s)
        start = time.monotonic()
        while self.slowdown() > SLOW and time.monotonic() - start < budget:
            time.sleep(min(poll_s, max(0.0, budget - (time.monotonic() - start))))
            self._last = -np.inf  # read again now, whatever interval_s says
        waited = time.monotonic() - start
        self.waited_s += waited
        return waited

    def fields(self) -> dict:
        """``host_slowdown``, ``canary_us`` and ``sharing_canary_us`` for a record timed now (timing the canaries
        if they are due)."""
        slowdown = self.slowdown()
        checked = {} if self.host_check_ratio is None else dict(host_check_ratio=self.host_check_ratio)
        return dict(host_slowdown=slowdown, canary_us=self.canary_us, sharing_canary_us=self.sharing_us, **checked)

    def calm_samples(self, sample_us, wanted: int, patience_s: float = 3.0) -> dict:
        """Samples of ``sample_us()`` (one timing of a few ms, in us), each right after a canary, kept from
        the calm stretches of a host whose speed flips every second or so.

        Times until ``wanted`` samples followed a canary within :data:`CALM` of the fastest, or, after
        ``patience_s`` seconds, as soon as ``wanted`` samples are in. The samples kept are those whose canary
        read within :data:`CALM` of the calmest canary of the call (all ``wanted`` of them when the host stayed
        calm). After a call that gave up, the next ones wait only ``slow_phase_patience_s`` (a slow phase lasts
        minutes: :data:`SLOW_PHASE_PATIENCE_S`), until one finds its calm samples again.

        Returns
        -------
        dict
            ``kept_us`` (the samples kept), ``all_us`` (every sample), ``kept_index`` (where the kept ones are in
            ``all_us``), ``host_slowdown`` (the median slowdown of the samples kept), ``canary_us`` (their median
            canary) and ``apart`` (every sample kept followed a sharing canary that read the cores apart).
        """
        if self.in_slow_phase:
            patience_s = min(patience_s, self.slow_phase_patience_s)
        readings, start = [], time.monotonic()  # (slowdown, canary_us, apart, sample) per sample
        while True:
            slowdown = self.slowdown()
            readings.append((slowdown, self.canary_us, self.apart, float(sample_us())))
            # against the fastest canary as it stands now (this call's readings may have lowered it)
            calm = sum(c <= self.best_us * CALM and not a for _, c, a, _ in readings)
            if calm >= wanted or (len(readings) >= wanted and time.monotonic() - start >= patience_s):
                break
        self.in_slow_phase = calm < wanted
        calmest = min(s for s, _, _, _ in readings)
        kept = [i for i, (s, _, _, _) in enumerate(readings) if s <= calmest * CALM]
        return dict(kept_us=[readings[i][3] for i in kept], all_us=[r[3] for r in readings], kept_index=kept,
                    canary_us=float(np.median([readings[i][1] for i in kept])),
                    host_slowdown=float(np.median([readings[i][0] for i in kept])),
                    apart=all(readings[i][2] for i in kept))

    def report(self, always: bool = True, advice: bool = True) -> str:
        """One line for the job's log: how much of it ran slow ("" when nothing was timed, or nothing ran
        slow and not ``always``), and with ``advice`` what a profile job can do about it."""
        slow = sum(s > SLOW for s in self.timed)
        if not self.timed or not (slow or always):
            return ""
        apart = (f"; {self.apart_count} with the cores apart (the sharing canary over {APART:.0f}x its fastest, "
                 f"{self.best_sharing_us:.0f} us)" if self.apart_count else "")
        waited = f"; waited {self.waited_s:.0f} s for it to calm down" if self.waited_s >= 1 else ""
        return (f"host speed: canary slowdown median {np.median(self.timed):.2f}, max {max(self.timed):.2f} "
                f"({slow} of {len(self.timed)} checks over {SLOW:.2f}x the fastest this folder has seen, "
                f"{self.best_us:.0f} us{apart}{waited})"
                + ("; rounds more than 10% slower than a kernel's fastest round are left out: "
                   "add rounds with a higher --rounds, or only where no two rounds agree with --max-rounds"
                   if slow and advice else ""))


def best_canary_us(records, column: str = "canary_us") -> float | None:
    """The fastest canary (``column``: ``canary_us``, or ``sharing_canary_us`` for the sharing canary) the records
    of a profile (a DataFrame) carry, None without any."""
    if records is None or records.empty or column not in records:
        return None
    canary = pd.to_numeric(records[column], errors="coerce")
    return float(canary.min()) if canary.notna().any() else None
