"""Before a profiling job adds CPU records to a folder: does this host time the folder's own kernels as fast as
when they were recorded?

A profile's records are its calm rounds (:mod:`.host_speed`, :func:`~autoplace.profile.job.confirmed`). On a
host that runs slow for a whole session every round of a job is slow, and the records it adds price their kernels
that much higher than the folder's others: the cost model then learns the difference as the kernels' own. On the
AMD Zen 5 (session 64) two re-profiles made on such a host held out 33 and 35 of 36 models within 15% against 36
before (resnet-base +7.4% -> +17.9%), while the host timed the folder's own kernels 1.06-1.42x their records
(``experiments/slow_host_ratios.py``) and the canary read 1.2-1.36x, not tracking it. The canary is one matmul;
this check times what the job's records will be compared with: a dozen of the folder's kernels, spread over
their sizes, twice each, and compares the faster reading with the record's. A job that times models end to end
also times up to :data:`HOST_CHECK_MODELS` models whose record launches the kernels their build launches now, and
reads them apart: a host can run kernels alone as fast as their records and whole models slower (the Zen 4,
session 66: kernels 1.01x, models 1.04-1.77x, the two vCPUs apart by the sharing canary, :mod:`.host_speed`). A host whose speed moves by the
minute reads over the limit at some moments and under it at others (the Zen 4, session 66: ten checks against
records 10-40 minutes old read 0.97-1.16x, five of them over 1.05x), as a record's rounds do; the check reads
again up to :data:`HOST_CHECK_TRIES` times, :data:`HOST_CHECK_RETRY_S` apart, and the calmest reading decides, as
a record's fastest rounds do.

:func:`check_host_speed` says how the job goes on: ``"refuse"`` (the default of a profiling job) raises
:class:`~autoplace.errors.ProfilingError` before anything is timed when the kernels read over ``limit`` times
their records (so nothing is lost: run the job again at a calmer moment), ``"warn"`` logs it and goes on (each
CPU record then carries ``host_check_ratio``), ``"off"`` skips the check.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ..errors import ProfilingError
from .host_speed import SLOW

#: Kernels a host check times (fewer when the folder has fewer to compare with).
HOST_CHECK_KERNELS = 12
#: Below this many kernels to compare with, the check says so and is skipped (a new folder, a new op family
#: whose folder lacks the reference models' kernels too).
MIN_HOST_CHECK_KERNELS = 6
#: The folder's kernels may read up to this many times their records (median over the kernels) before a job
#: refuses: session 64's Zen 5 read 1.056x at its calmest moment, 1.17x and 1.42x at others.
HOST_CHECK_LIMIT = 1.05
#: Kernels whose record is within this range (us) are compared: shorter ones are mostly call overhead, longer
#: ones make the check slow.
HOST_CHECK_US = (10.0, 5000.0)
#: Times each kernel is timed (the fastest counts, as a record's fastest rounds do).
HOST_CHECK_PASSES = 2
#: Models a job that times models end to end times first against their records (fewer when the folder has fewer
#: whose build is unchanged): on the Zen 4 (session 66) the host timed the folder's kernels at 1.01x their records
#: and its models end to end at 1.04-1.77x (median 1.10; the cores apart by the sharing canary in 97% of its checks),
#: and the models the re-profile timed then held out 29 of 36 within 15% against 35.
HOST_CHECK_MODELS = 3
#: Models whose record is within this range (us) are compared (a longer one costs seconds per check).
HOST_CHECK_MODEL_US = (10.0, 20000.0)
#: Zoo models whose kernels a job compares with when its own models give too few (an op family new to the
#: folder): every committed CPU profile has them.
REFERENCE_MODELS = ("cnn-base", "bert-base")
MODES = ("refuse", "warn", "off")
#: Checks a job makes at most before it refuses: one that reads over the limit is followed by another
#: :data:`HOST_CHECK_RETRY_S` later, and the calmest decides. On the Zen 4 (session 66), one check refused 5 of 10
#: moments, the calmest of three consecutive ones 1 of 8; the slow Xeon f6m167 read 1.40-1.67x at every one of ten.
HOST_CHECK_TRIES = 3
#: Seconds between a check that read slow and the next (a slow phase of the Zen 5 lasts 10 s to minutes).
HOST_CHECK_RETRY_S = 20.0


@dataclass
class HostCheck:
    """What a host check read: one row per kernel compared (``names``, ``record_us``, ``now_us``), and with
    ``models`` what the models' end-to-end check beside it read (a :class:`HostCheck` of ``what="models"``)."""

    names: list = field(default_factory=list)
    record_us: list = field(default_factory=list)
    now_us: list = field(default_factory=list)
    limit: float = HOST_CHECK_LIMIT
    checks: int = 1  # checks the job made to read this one (the calmest of them)
    what: str = "kernels"
    models: HostCheck | None = None

    @property
    def ratios(self) -> np.ndarray:
        return np.asarray(self.now_us, dtype=float) / np.asarray(self.record_us, dtype=float)

    @property
    def ratio(self) -> float:
        """The median over the kernels (or models) of now / record (NaN when none was compared)."""
        return float(np.median(self.ratios)) if self.names else float("nan")

    @property
    def own_slow(self) -> bool:
        return bool(self.names) and self.ratio > self.limit

    @property
    def slow(self) -> bool:
        """Its kernels, or its models end to end, read over ``limit`` times their records."""
        return self.own_slow or (self.models is not None and self.models.own_slow)

    def _describe_own(self) -> str:
        if not self.names:
            return f"no {'kernel' if self.what == 'kernels' else 'model'} of this folder to compare with"
        r = self.ratios
        worst = np.argsort(-r)[:2]
        what = "kernels" if self.what == "kernels" else "models end to end"
        return (f"this host times {len(r)} of the folder's {what} at {self.ratio:.3f}x their records "
                f"(quartiles {np.quantile(r, 0.25):.2f}-{np.quantile(r, 0.75):.2f}, range {r.min():.2f}-{r.max():.2f}; "
                + ", ".join(f"{self.names[i]} {self.record_us[i]:.3g} -> {self.now_us[i]:.3g} us" for i in worst)
                + f"; limit {self.limit:.2f}x)")

    def describe(self) -> str:
        parts = [self._describe_own()] if self.names or self.models is None else []
        if self.models is not None:
            parts.append(self.models._describe_own())
        return "host check: " + "; ".join(parts)

    def summary(self, decision: str) -> dict:
        out = dict(kernels=len(self.names), ratio=round(self.ratio, 4) if self.names else None,
                   limit=self.limit, checks=self.checks, decision=decision)
        if self.models is not None:
            out["models"] = dict(models=len(self.models.names),
                                 ratio=round(self.models.ratio, 4) if self.models.names else None)
        return out


def reference_kernels(newest: dict, units: dict, *, exclude=frozenset(), count: int = HOST_CHECK_KERNELS) -> list:
    """``[(tag, Unit, record)]``: up to ``count`` CPU kernels of ``units`` (``{tag: Unit}``) with a record in
    ``newest`` (:meth:`~autoplace.profile.store.ProfileStore.newest_good`) to compare with: confirmed by a second
    round, timed calm (``host_slowdown`` at most :data:`~autoplace.profile.host_speed.SLOW`), within
    :data:`HOST_CHECK_US`, not in ``exclude`` (kernels whose code changed since their record); evenly spread
    over their record times."""
    return _calm_records_spread(newest, {tag: unit for tag, unit in units.items()
                                         if tag[2] == "llvm" and tag not in exclude}, HOST_CHECK_US, count)


def _calm_records_spread(newest: dict, items: dict, within_us: tuple, count: int) -> list:
    """``[(tag, item, record)]``: up to ``count`` of ``items`` (``{tag: item}``) whose record in ``newest`` is
    confirmed (:func:`~autoplace.profile.job.confirmed`), timed calm (``host_slowdown`` at most
    :data:`~autoplace.profile.host_speed.SLOW`) and within ``within_us``; evenly spread over their record times."""
    from .job import confirmed

    low, high = within_us
    candidates = []
    for tag, item in items.items():
        record = newest.get(tag)
        if record is None or not confirmed(record):
            continue
        slowdown = record.get("host_slowdown")
        if slowdown is not None and np.isfinite(slowdown) and float(slowdown) > SLOW:
            continue
        if low <= float(record["median_us"]) <= high:
            candidates.append((tag, item, record))
    candidates.sort(key=lambda c: (float(c[2]["median_us"]), c[0][1]))
    if len(candidates) <= count:
        return candidates
    picks = np.unique(np.linspace(0, len(candidates) - 1, count).round().astype(int))
    return [candidates[i] for i in picks]


def time_references(references: list, timer, target, *, passes: int = HOST_CHECK_PASSES,
                    limit: float = HOST_CHECK_LIMIT) -> HostCheck:
    """Time each of ``references`` (:func:`reference_kernels`) ``passes`` times with ``timer`` (the job's
    :class:`~autoplace.profile.measure.KernelTimer`) on ``target``; the fastest reading of each is compared with
    its record. A kernel that fails now is left out."""
    best: dict = {}
    for _ in range(passes):
        for tag, unit, _record in references:
            result = timer.measure(unit, target, keep=True)
            if result.get("status") == "ok":
                best[tag] = min(best.get(tag, np.inf), float(result["median_us"]))
    timer.forget_kept()
    check = HostCheck(limit=limit)
    for tag, unit, record in references:
        if tag in best:
            check.names.append(unit.func_name)
            check.record_us.append(float(record["median_us"]))
            check.now_us.append(best[tag])
    return check


def reference_models(newest: dict, candidates: dict, *, count: int = HOST_CHECK_MODELS) -> list:
    """``[(tag, item, record)]``: up to ``count`` of ``candidates`` (``{("model", name, "llvm"): item}``, models
    whose build launches the kernels of their record) whose end-to-end record in ``newest`` is confirmed
    (:func:`~autoplace.profile.job.confirmed`), timed calm and within :data:`HOST_CHECK_MODEL_US`; evenly spread
    over their record times."""
    return _calm_records_spread(newest, candidates, HOST_CHECK_MODEL_US, count)


def time_models(models: list, *, limit: float = HOST_CHECK_LIMIT) -> HostCheck:
    """Time each of ``models`` (``[(name, time_us, record)]``: ``time_us()`` times the model built on the CPU end to
    end, None when it fails) once against its record's ``median_us``."""
    check = HostCheck(limit=limit, what="models")
    for name, time_us, record in models:
        now = time_us()
        if now is not None and np.isfinite(now):
            check.names.append(name)
            check.record_us.append(float(record["median_us"]))
            check.now_us.append(float(now))
    return check


def check_host_speed(references: list, timer, target, *, mode: str = "refuse", limit: float = HOST_CHECK_LIMIT,
                     log=print, folder: str = "", models: list = (), tries: int | None = None,
                     retry_s: float | None = None, sleep=time.sleep) -> HostCheck | None:
    """Run the host check of a profiling job (module docstring) and act on it by ``mode``; returns what it read
    (the calmest of up to ``tries`` checks, ``retry_s`` apart: :data:`HOST_CHECK_TRIES`, :data:`HOST_CHECK_RETRY_S`),
    None with ``mode="off"`` or nothing to compare with. ``models`` (``[(name, time_us, record)]``,
    :func:`reference_models`) are timed end to end in each check too, and read apart: a host can time kernels
    alone as fast as their records and whole models slower (the cores apart, :mod:`.host_speed`)."""
    if mode not in MODES:
        raise ProfilingError(f"host_check={mode!r}: give one of {', '.join(MODES)} (e.g. --host-check warn)")
    if mode == "off":
        return None
    with_kernels = len(references) >= MIN_HOST_CHECK_KERNELS
    if not with_kernels:
        log(f"host check: kernels skipped, {folder or 'the folder'} has {len(references)} confirmed calm CPU kernels "
            f"of these models or of {', '.join(REFERENCE_MODELS)} to compare with (it needs {MIN_HOST_CHECK_KERNELS})"
            if models else
            f"host check: skipped, {folder or 'the folder'} has {len(references)} confirmed calm CPU kernels of "
            f"these models or of {', '.join(REFERENCE_MODELS)} to compare with (it needs {MIN_HOST_CHECK_KERNELS})")
        if not models:
            return None
    # (warn times anyway, whatever a second check reads)
    tries = 1 if mode == "warn" else HOST_CHECK_TRIES if tries is None else max(1, int(tries))
    retry_s = HOST_CHECK_RETRY_S if retry_s is None else retry_s
    kernels = models_read = None  # the calmest reading of each so far
    for attempt in range(1, tries + 1):
        # (what already read calm is not timed again: a retry is for what read slow)
        if with_kernels and (kernels is None or kernels.own_slow):
            reading = time_references(references, timer, target, limit=limit)
            if len(reading.names) < MIN_HOST_CHECK_KERNELS:
                log(f"host check: kernels skipped, only {len(reading.names)} of {len(references)} ran")
                with_kernels = False
                if not models:
                    return None
            elif kernels is None or reading.ratio < kernels.ratio:
                kernels = reading
        if models and (models_read is None or not models_read.names or models_read.own_slow):
            reading = time_models(models, limit=limit)
            if models_read is None or not models_read.names or (reading.names and reading.ratio < models_read.ratio):
                models_read = reading
        check = kernels if with_kernels else HostCheck(limit=limit)
        check.models, check.checks = models_read, attempt
        log(check.describe() + (f" [check {attempt} of {tries}]" if tries > 1 else ""))
        if not check.slow:
            break
        if attempt < tries:
            log(f"host check: over {limit:.2f}x; reading again in {retry_s:.0f} s")
            sleep(retry_s)
    if check.slow and mode == "refuse":
        only_models = not check.own_slow
        raise ProfilingError(
            f"{check.describe()}{f', the calmest of {tries} checks {retry_s:.0f} s apart' if tries > 1 else ''}. "
            + ("Models timed end to end now would read that much slow beside the kernels' records, and the cost "
               "model's evaluation and VM overhead would take it for error. "
               if only_models else
               f"Records timed now would price their kernels about {check.ratio - 1:.0%} slow beside the folder's, "
               "and the cost model would learn the difference as the kernels' own. ")
            + "Nothing was timed. Run the job again at a calmer moment (this check runs first each time), "
            + ("time only the kernels now with --no-end-to-end (they read as fast as their records), "
               if only_models and check.names else "")
            + "or time anyway with --host-check warn (host_check=\"warn\"; each CPU kernel record then carries "
            "host_check_ratio), or give a new --dir for a profile of this host as it is now")
    if check.slow:
        log(f"host check: over {limit:.2f}x, timing anyway (--host-check warn)"
            + (f": the new CPU kernel records carry host_check_ratio={check.ratio:.3f}" if check.own_slow else ""))
    return check
