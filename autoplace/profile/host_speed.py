"""How fast this machine runs right now: a fixed reference kernel timed every few seconds of a profile job.

On a shared or virtual machine another tenant can take a core for minutes, and every kernel timed then
reads slow (on the Zen 3, a whole 16-minute profile once read 20-40% slow against the same kernels an
hour earlier, three rounds and all). Rounds minutes apart do not help when the slow stretch is longer
than the job. :class:`HostSpeed` times a fixed matmul (the *canary*) on the CPU right before a record
is timed, and each CPU record carries ``canary_us`` (the canary's time then)
and ``host_slowdown``: that over the fastest canary any record of the folder carries. Rounds are then
merged from the calm ones (:func:`autoplace.profile.job.merge_rounds`), and the job says how much of
what it timed ran slow, so ``--rounds`` can add rounds until enough are calm.
"""

from __future__ import annotations

import time

import numpy as np

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


class HostSpeed:
    """The canary's latest time against the fastest seen, refreshed at most every ``interval_s``.

    Parameters
    ----------
    best_us : float, optional
        The fastest canary this profile folder has recorded (:func:`best_canary_us`).
    interval_s : float
        Seconds between two canary timings (each takes about 10 ms). The default, 0, times it before
        every record: on the Zen 3 the canary flips between 1x and 2x in stretches of one to a few
        seconds (one of the two vCPUs taken by the host), so an older reading says little.
    """

    def __init__(self, best_us: float | None = None, interval_s: float = 0.0,
                 slow_phase_patience_s: float = SLOW_PHASE_PATIENCE_S):
        self.best_us = float(best_us) if best_us and np.isfinite(best_us) else None
        self.interval_s = interval_s
        self.slow_phase_patience_s = slow_phase_patience_s
        self.in_slow_phase = False  # the latest calm_samples call gave up without enough calm samples
        self._time_us = None
        self._last = -np.inf
        self.current = 1.0
        self.canary_us = None  # the latest timing
        self.timed: list[float] = []  # every slowdown read in this job

    def slowdown(self) -> float:
        """``canary now / fastest canary seen`` (1.0 = as fast as this machine has run)."""
        if time.monotonic() - self._last >= self.interval_s:
            if self._time_us is None:
                self._time_us = _canary_runner()
            self.canary_us = self._time_us()
            self._last = time.monotonic()
            self.best_us = self.canary_us if self.best_us is None else min(self.best_us, self.canary_us)
            self.current = self.canary_us / self.best_us
            self.timed.append(self.current)
        return self.current

    def fields(self) -> dict:
        """``host_slowdown`` and ``canary_us`` for a record timed now (timing the canary if it is due)."""
        slowdown = self.slowdown()
        return dict(host_slowdown=slowdown, canary_us=self.canary_us)

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
            ``all_us``), ``host_slowdown`` (the median slowdown
            of the samples kept) and ``canary_us`` (their median canary).
        """
        if self.in_slow_phase:
            patience_s = min(patience_s, self.slow_phase_patience_s)
        pairs, start = [], time.monotonic()
        while True:
            self.slowdown()
            pairs.append((self.canary_us, float(sample_us())))
            calm = sum(c <= self.best_us * CALM for c, _ in pairs)
            if calm >= wanted or (len(pairs) >= wanted and time.monotonic() - start >= patience_s):
                break
        self.in_slow_phase = calm < wanted
        calmest = min(c for c, _ in pairs)
        kept_index = [i for i, (c, _) in enumerate(pairs) if c <= calmest * CALM]
        canary = float(np.median([pairs[i][0] for i in kept_index]))
        return dict(kept_us=[pairs[i][1] for i in kept_index], all_us=[v for _, v in pairs], kept_index=kept_index,
                    canary_us=canary, host_slowdown=canary / self.best_us)

    def report(self, always: bool = True) -> str:
        """One line for the job's log: how much of it ran slow ("" when nothing was timed, or nothing ran
        slow and not ``always``)."""
        slow = sum(s > SLOW for s in self.timed)
        if not self.timed or not (slow or always):
            return ""
        return (f"host speed: canary slowdown median {np.median(self.timed):.2f}, max {max(self.timed):.2f} "
                f"({slow} of {len(self.timed)} checks over {SLOW:.2f}x the fastest this folder has seen, "
                f"{self.best_us:.0f} us)"
                + ("; rounds more than 10% slower than a kernel's fastest round are left out: "
                   "add rounds with a higher --rounds, or only where no two rounds agree with --max-rounds"
                   if slow else ""))


def best_canary_us(records) -> float | None:
    """The fastest canary the records of a profile (a DataFrame) carry, None without any."""
    if records is None or records.empty or "canary_us" not in records:
        return None
    canary = records["canary_us"].astype(float)
    return float(canary.min()) if canary.notna().any() else None
