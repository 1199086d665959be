"""The profiling job's host check: before timing, a dozen of the folder's own CPU kernels are timed against their
records, and a host that reads them slow is refused before anything is timed (issue 11)."""

import subprocess
import sys

import pytest

from autoplace import zoo
from autoplace.backend.cpu_schedules import SCHEDULE_VERSION
from autoplace.errors import ProfilingError
from autoplace.profile import KernelTimer, ProfileStore, extract_units, host_check, profile_models
from autoplace.profile.host_check import (
    HOST_CHECK_KERNELS,
    HOST_CHECK_PASSES,
    HOST_CHECK_TRIES,
    MIN_HOST_CHECK_KERNELS,
    HostCheck,
    check_host_speed,
    reference_kernels,
)


class ScaledTimer(KernelTimer):
    """Times every kernel at ``factor`` times the microseconds ``record_us`` gives its key (no compiling); with
    ``phases`` (``[(calls, factor), ...]``) at each phase's factor for its number of calls, then at ``factor``."""

    def __init__(self, record_us: dict, factor: float, phases=()):
        super().__init__(isolate=False)
        self.record_us, self.factor, self.phases, self.calls = record_us, factor, list(phases), 0

    def measure(self, unit, target, *, keep: bool = False) -> dict:
        self.calls += 1
        factor, start = self.factor, 0
        for calls, phase_factor in self.phases:
            if self.calls <= start + calls:
                factor = phase_factor
                break
            start += calls
        us = self.record_us.get(unit.key, 5.0) * factor
        return dict(status="ok", median_us=us, min_us=us, max_us=us, samples=7, std_us=0.0)


@pytest.fixture(autouse=True)
def _no_wait_between_checks(monkeypatch):
    monkeypatch.setattr(host_check, "HOST_CHECK_RETRY_S", 0.0)


def _folder_with_calm_records(path, model_name="cnn-base"):
    """A profile folder whose CPU kernels of ``model_name`` have two agreeing calm rounds each, 20-2000 us."""
    units = {u.key: u for u in extract_units(zoo.parse(model_name), "llvm")}
    store = ProfileStore(str(path))
    record_us = {key: 20.0 * (1 + i) ** 1.5 for i, key in enumerate(sorted(units))}
    for key, us in record_us.items():
        store.append(dict(kind="unit", key=key, target="llvm", status="ok", median_us=us, min_us=us, max_us=us,
                          round_medians_us=[us, us * 1.02], round_slowdowns=[1.0, 1.01], rounds=2,
                          host_slowdown=1.0, cpu_schedule=SCHEDULE_VERSION))
    return store, units, record_us


def test_reference_kernels_are_confirmed_calm_records_spread_over_their_times(tmp_path):
    store, units, record_us = _folder_with_calm_records(tmp_path / "p")
    newest = store.newest_good()
    tags = {("unit", key, "llvm"): unit for key, unit in units.items()}
    picked = reference_kernels(newest, tags)
    assert len(picked) == min(HOST_CHECK_KERNELS, len(tags))
    times = [r["median_us"] for _, _, r in picked]
    assert times == sorted(times) and times[0] == min(record_us.values())  # the fastest and the slowest kept
    # a record of one round, one timed while the host ran slow, or one whose code changed is no reference
    one_round, slow, changed = sorted(tags)[:3]
    store.append(dict(newest[one_round], round_medians_us=[10.0], rounds=1))
    store.append(dict(newest[slow], host_slowdown=1.4, round_slowdowns=[1.4, 1.5]))
    kept = {tag for tag, _, _ in reference_kernels(store.newest_good(), tags, exclude={changed}, count=100)}
    assert kept and not kept & {one_round, slow, changed}


def test_host_check_reads_the_median_ratio_and_refuses_or_warns():
    check = HostCheck(names=list("abcdefg"), record_us=[10.0] * 7, now_us=[10.0, 10.2, 10.3, 11.0, 12.0, 13.0, 30.0])
    assert check.ratio == pytest.approx(1.1) and check.slow
    assert "7 of the folder's kernels at 1.100x" in check.describe() and "g 10 -> 30 us" in check.describe()
    assert not HostCheck(names=["a"], record_us=[10.0], now_us=[10.4]).slow
    with pytest.raises(ProfilingError, match="host_check='sometimes'"):
        check_host_speed([], None, "llvm", mode="sometimes")
    lines = []
    assert check_host_speed([], None, "llvm", log=lines.append) is None and "skipped" in lines[0]
    for bad in (dict(host_check="sometimes"), dict(host_check_limit=0.9)):  # refused before any work
        with pytest.raises(ProfilingError, match="host_check"):
            profile_models([zoo.get("mlp")], {"cpu": "llvm"}, ProfileStore("/nonexistent/never-made"), **bad)


def test_a_job_on_a_host_that_times_the_folders_kernels_slow_is_refused_before_timing(tmp_path):
    store, units, record_us = _folder_with_calm_records(tmp_path / "p")
    assert len(units) >= MIN_HOST_CHECK_KERNELS
    before = len(store.records())
    slow, lines = ScaledTimer(record_us, 1.3), []
    with pytest.raises(ProfilingError, match=r"at 1\.300x their records.*calmest of 3 checks.*Nothing was timed.*"
                                             r"--host-check warn"):
        profile_models([zoo.parse("cnn-base")], {"cpu": "llvm"}, store, copies=False, end_to_end=False,
                       redo=["unit"], timer=slow, progress=False, log=lines.append)
    per_check = HOST_CHECK_PASSES * min(HOST_CHECK_KERNELS, len(units))
    assert slow.calls == HOST_CHECK_TRIES * per_check  # the checks' two passes each, nothing else
    assert sum("reading again" in line for line in lines) == HOST_CHECK_TRIES - 1
    assert len(store.records()) == before  # (retagging appends nothing: the records are on this version)

    # a host as fast as the records passes, and its records carry no ratio
    store, units, record_us = _folder_with_calm_records(tmp_path / "calm")
    summary = profile_models([zoo.parse("cnn-base")], {"cpu": "llvm"}, store, copies=False, end_to_end=False,
                             redo=["unit"], timer=ScaledTimer(record_us, 1.0), progress=False)
    assert summary["host_check"]["decision"] == "passed" and summary["host_check"]["ratio"] == 1.0
    newest = store.newest_good()
    assert not any("host_check_ratio" in newest[("unit", key, "llvm")] for key in units)

    # warn: times anyway, and the new records say how slow the check read
    store, units, record_us = _folder_with_calm_records(tmp_path / "warn")
    summary = profile_models([zoo.parse("cnn-base")], {"cpu": "llvm"}, store, copies=False, end_to_end=False,
                             redo=["unit"], timer=ScaledTimer(record_us, 1.3), progress=False, host_check="warn")
    assert summary["host_check"] == dict(kernels=min(HOST_CHECK_KERNELS, len(units)), ratio=1.3, limit=1.05,
                                         checks=1, decision="timed anyway")  # (warn does not read again)
    newest = store.newest_good()
    assert {newest[("unit", key, "llvm")].get("host_check_ratio") for key in units} == {1.3}


def test_a_host_slow_at_the_first_check_and_calm_at_the_next_is_timed(tmp_path):
    """A host whose speed moves by the minute: the check reads again, and the calmest reading decides."""
    store, units, record_us = _folder_with_calm_records(tmp_path / "p")
    per_check = HOST_CHECK_PASSES * min(HOST_CHECK_KERNELS, len(units))
    timer, lines = ScaledTimer(record_us, 1.0, phases=[(per_check, 1.2), (per_check, 1.02)]), []
    summary = profile_models([zoo.parse("cnn-base")], {"cpu": "llvm"}, store, copies=False, end_to_end=False,
                             redo=["unit"], timer=timer, progress=False, log=lines.append)
    assert summary["host_check"] == dict(kernels=min(HOST_CHECK_KERNELS, len(units)), ratio=1.02, limit=1.05,
                                         checks=2, decision="passed")
    assert [line[-14:] for line in lines if "[check" in line] == ["[check 1 of 3]", "[check 2 of 3]"]
    assert summary["measured"] == len(units)  # then the job timed its kernels (at the calm factor)
    newest = store.newest_good()
    assert {newest[("unit", key, "llvm")]["median_us"] / record_us[key] for key in units} == {1.0}


def test_a_job_of_kernels_new_to_the_folder_compares_the_reference_models(tmp_path):
    """mlp's kernels are not in the folder: the check times cnn-base's (a reference model) instead; a new folder
    is not checked at all; off skips it."""
    store, _units, record_us = _folder_with_calm_records(tmp_path / "p")
    lines = []
    with pytest.raises(ProfilingError, match="host check"):
        profile_models([zoo.get("mlp")], {"cpu": "llvm"}, store, copies=False, end_to_end=False,
                       timer=ScaledTimer(record_us, 2.0), progress=False, log=lines.append)
    summary = profile_models([zoo.get("mlp")], {"cpu": "llvm"}, store, copies=False, end_to_end=False,
                             timer=ScaledTimer(record_us, 2.0), progress=False, host_check="off")
    assert "host_check" not in summary and summary["measured"] == len({u.key for u in extract_units(zoo.get("mlp"), "llvm")})
    lines = []
    summary = profile_models([zoo.get("mlp")], {"cpu": "llvm"}, ProfileStore(str(tmp_path / "new")), copies=False,
                             end_to_end=False, timer=ScaledTimer({}, 2.0), progress=False, log=lines.append)
    assert "host_check" not in summary and any(line.startswith("host check: skipped") for line in lines)


@pytest.mark.parametrize("args, message", [
    (["--host-check", "sometimes"], "invalid choice: 'sometimes'"),
    (["--host-check-limit", "0.9"], "argument --host-check-limit: must be a ratio >= 1"),
])
def test_bad_host_check_options_are_refused_before_any_work(tmp_path, args, message):
    run = subprocess.run([sys.executable, "-m", "autoplace.cli", "profile", "--zoo", "mlp", "--dir",
                          str(tmp_path / "p"), "--no-copies", *args], capture_output=True, text=True, timeout=300)
    assert run.returncode != 0 and message in run.stderr and "Traceback" not in run.stderr


def _model_record(model_name: str, median_us: float) -> dict:
    """A confirmed calm end-to-end record of ``model_name`` built on the CPU, launching its current kernels."""
    keys = [u.key for u in extract_units(zoo.parse(model_name), "llvm")]
    return dict(kind="model", key=model_name, target="llvm", status="ok", unit_keys=keys, median_us=median_us,
                min_us=median_us, max_us=median_us, round_medians_us=[median_us, median_us * 1.01],
                round_slowdowns=[1.0, 1.0], rounds=2, host_slowdown=1.0)


def test_models_end_to_end_are_checked_apart_from_the_kernels():
    """Kernels alone at their records' speed, whole models slower (the Zen 4, session 66): refused, and the error
    says that the kernels alone could be timed now; models as fast as their records pass."""
    kernels = HostCheck(names=list("abcdef"), record_us=[10.0] * 6, now_us=[10.1] * 6)

    class Kernels:  # time_references stand-in: the same calm kernels each check
        def measure(self, unit, target, keep=False):
            return dict(status="ok", median_us=10.1)

        def forget_kept(self):
            pass

    references = [(("unit", name, "llvm"), type("U", (), {"func_name": name})(), dict(median_us=10.0))
                  for name in kernels.names]
    slow_models = [("m1", lambda: 130.0, dict(median_us=100.0)), ("m2", lambda: 1200.0, dict(median_us=1000.0))]
    lines = []
    with pytest.raises(ProfilingError, match=r"kernels at 1\.010x.*2 of the folder's models end to end at 1\.250x"
                                             r".*--no-end-to-end"):
        check_host_speed(references, Kernels(), "llvm", models=slow_models, log=lines.append, retry_s=0.0)
    assert sum("[check" in line for line in lines) == HOST_CHECK_TRIES
    calm_models = [("m1", lambda: 101.0, dict(median_us=100.0)), ("m2", lambda: None, dict(median_us=1000.0))]
    check = check_host_speed(references, Kernels(), "llvm", models=calm_models, log=lines.append)
    assert not check.slow and check.summary("passed")["models"] == dict(models=1, ratio=1.01)  # (m2 failed: left out)
    # with too few kernels to compare with, the models alone decide
    check = check_host_speed([], Kernels(), "llvm", models=calm_models, log=lines.append)
    assert check.summary("passed")["kernels"] == 0 and not check.slow


def test_a_job_timing_models_on_a_host_that_runs_them_slow_is_refused(tmp_path):
    """The job's own model, whose record launches the kernels its build launches now, is built and timed end to end
    before the job times anything; mlp-base's record says 1000 us, it runs several times that."""
    store, _units, record_us = _folder_with_calm_records(tmp_path / "p")
    store.append(_model_record("mlp-base", 1000.0))
    before = len(store.records())
    lines = []
    with pytest.raises(ProfilingError, match=r"1 of the folder's models end to end.*mlp-base 1e\+03 ->"):
        profile_models([zoo.parse("mlp-base")], {"cpu": "llvm"}, store, copies=False, redo=["model"],
                       timer=ScaledTimer(record_us, 1.0), progress=False, log=lines.append)
    assert len(store.records()) == before
    # without end-to-end timing the models are not checked
    summary = profile_models([zoo.parse("mlp-base")], {"cpu": "llvm"}, store, copies=False, end_to_end=False,
                             timer=ScaledTimer(record_us, 1.0), progress=False, log=lines.append)
    assert "models" not in summary.get("host_check", {})
