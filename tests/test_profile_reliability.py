"""Profiling reliability (issues 15 and 16): harness failures never become kernel records, options that
cannot measure are refused, two jobs on one folder share the work, records say what measured them, and a
profile without copy fits says what to run."""

import inspect
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import pytest
import tvm
from tvm import relax

from autoplace.errors import AutoplaceError, CostError, ProfilingError
from autoplace.profile import ForeignProfileWarning, KernelTimer, ProfileStore, extract_units, profile_models
from autoplace.profile import measure as measure_mod
from autoplace.profile.hardware import measured_by

REPO = os.path.join(os.path.dirname(__file__), "..")
PROFILE = os.path.join(REPO, "profiles", "amd-epyc-2c")
FAST = dict(repeat=1, min_repeat_ms=1)

def tiny():
    """A three-kernel Relax module (transpose, matmul, softmax); the job scripts below carry its source."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((8, 16), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            t = bb.emit(relax.op.permute_dims(x))
            m = bb.emit(relax.op.matmul(x, t))
            s = bb.emit_output(relax.op.nn.softmax(m))
        bb.emit_func_output(s)
    return bb.get()


TINY_SRC = "from tvm import relax\n\n\n" + inspect.getsource(tiny)


def tiny_keys():
    return {u.key for u in extract_units(tiny(), "llvm")}


def run_script(tmp_path, body: str, *args, timeout=120):
    script = tmp_path / "job.py"
    script.write_text(TINY_SRC + textwrap.dedent(body))
    return subprocess.run([sys.executable, str(script), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=str(tmp_path))


def quiet_records(folder, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ProfileStore(str(folder)).records(**kw)


# -- 15.8: a worker that cannot start is the harness's failure, not the kernels' ---------------------------
NO_GUARD = """
import sys
from autoplace.profile import KernelTimer, ProfileStore, profile_models
profile_models([("tiny", tiny())], {"cpu": "llvm"}, ProfileStore(sys.argv[1]), copies=False, end_to_end=False,
               timer=KernelTimer(repeat=1, min_repeat_ms=1), progress=False)
"""


def test_script_without_main_guard_stops_with_a_clear_error_and_records_nothing(tmp_path):
    folder = tmp_path / "p"
    run = run_script(tmp_path, NO_GUARD, folder)
    assert run.returncode != 0, run.stdout + run.stderr[-3000:]
    assert "ProfilingError" in run.stderr and 'if __name__ == "__main__":' in run.stderr, run.stderr[-3000:]
    assert "autoplace profile" in run.stderr
    assert not (folder / "records.jsonl").exists()  # no poisoned "crashed" records
    assert not folder.exists()  # the store is left as it was (it did not exist)


def test_a_worker_that_cannot_start_raises_instead_of_recording_a_crash(monkeypatch):
    unit = extract_units(tiny(), "llvm")[0]
    monkeypatch.setattr(measure_mod, "_worker_init", sys.exit)  # every worker exits before its handshake
    timer = KernelTimer(**FAST)
    with pytest.raises(ProfilingError, match="could not start.*not of any kernel"):
        timer.measure(unit, tvm.target.Target("llvm"))
    timer.close()


def _segfault(task):
    """Stands in for a kernel that kills the worker running it (runs in the worker)."""
    os.kill(os.getpid(), signal.SIGSEGV)


def test_a_kernel_that_kills_its_worker_is_recorded_as_crashed(monkeypatch):
    unit = extract_units(tiny(), "llvm")[0]
    with KernelTimer(**FAST) as timer:
        assert timer.measure(unit, tvm.target.Target("llvm"))["status"] == "ok"
        monkeypatch.setattr(measure_mod, "_worker_measure", _segfault)
        crashed = timer.measure(unit, tvm.target.Target("llvm"))
        monkeypatch.undo()
        assert timer.measure(unit, tvm.target.Target("llvm"))["status"] == "ok"  # a fresh worker carries on
    assert crashed["status"] == "crashed"


def test_a_full_disk_stops_the_job_with_a_clear_error(tmp_path, monkeypatch):
    store = ProfileStore(str(tmp_path / "p"))

    def full(record):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store, "append", full)
    with pytest.raises(ProfilingError, match="No space left.*resumes"):
        profile_models([("tiny", tiny())], {"cpu": "llvm"}, store, copies=False, end_to_end=False,
                       timer=KernelTimer(isolate=False, **FAST), progress=False, log=lambda *a: None)


# -- 16: options that cannot measure are refused up front; all-failing targets are not data ----------------
@pytest.mark.parametrize("options, match", [
    (dict(repeat=0), "repeat=0"),
    (dict(repeat=-3), "repeat=-3"),
    (dict(number=0), "number=0"),
    (dict(min_repeat_ms=-1), "min_repeat_ms=-1"),
    (dict(timeout_s=0.01), "timeout_s=0.01.*--timeout 300"),
    (dict(timeout_s=1.0, repeat=100, min_repeat_ms=50), "at least 6 s"),
    (dict(repeats=3), "unknown timing option"),
])
def test_options_that_cannot_measure_are_refused(options, match):
    with pytest.raises(ProfilingError, match=match):
        KernelTimer(**options)
    assert issubclass(ProfilingError, AutoplaceError)  # the CLI prints it as one line


def test_cli_profile_with_repeat_zero_fails_and_writes_nothing(tmp_path):
    from autoplace.cli import main

    folder = tmp_path / "p"
    assert main(["profile", "--zoo", "mlp", "--repeat", "0", "--dir", str(folder), "--no-progress"]) == 2
    assert not (folder / "records.jsonl").exists()


def test_a_target_where_every_kernel_fails_raises_and_keeps_none_of_it(tmp_path, monkeypatch):
    real = measure_mod.time_kernel

    def only_the_probe_runs(lib, kind, shapes, *args, **kw):
        if [list(s) for s in shapes] != [[16], [16], [16]]:  # the harness's probe kernel still runs
            raise RuntimeError("simulated: cannot time")
        return real(lib, kind, shapes, *args, **kw)

    monkeypatch.setattr(measure_mod, "time_kernel", only_the_probe_runs)
    store = ProfileStore(str(tmp_path / "p"))
    with pytest.raises(ProfilingError, match="every one of the 3 kernel.*llvm failed.*simulated"):
        profile_models([("tiny", tiny())], {"cpu": "llvm"}, store, copies=False, end_to_end=False,
                       timer=KernelTimer(isolate=False, **FAST), progress=False, log=lambda *a: None)
    assert quiet_records(store.path).empty


def test_options_that_fail_the_probe_kernel_raise_before_measuring(tmp_path, monkeypatch):
    def never(*args, **kw):
        raise RuntimeError("simulated: the timer is broken")

    monkeypatch.setattr(measure_mod, "time_kernel", never)
    store = ProfileStore(str(tmp_path / "p"))
    with pytest.raises(ProfilingError, match="trivial kernel.*repeat=1.*simulated"):
        profile_models([("tiny", tiny())], {"cpu": "llvm"}, store, copies=False, end_to_end=False,
                       timer=KernelTimer(isolate=False, **FAST), progress=False, log=lambda *a: None)
    assert not os.path.exists(os.path.join(store.path, "records.jsonl"))


def test_failures_on_a_working_target_are_kept_as_data(tmp_path, monkeypatch):
    """Once a target has run a kernel, a kernel that fails there is a fact about that kernel."""
    real = measure_mod.time_kernel
    store = ProfileStore(str(tmp_path / "p"))
    keys = tiny_keys()

    def softmax_fails(lib, kind, shapes, *args, **kw):
        if [list(s) for s in shapes] == [[8, 8], [8, 8]]:
            raise RuntimeError("simulated: softmax fails")
        return real(lib, kind, shapes, *args, **kw)

    monkeypatch.setattr(measure_mod, "time_kernel", softmax_fails)
    summary = profile_models([("tiny", tiny())], {"cpu": "llvm"}, store, copies=False, end_to_end=False,
                             timer=KernelTimer(isolate=False, **FAST), progress=False, log=lambda *a: None)
    df = quiet_records(store.path)
    assert set(df["key"]) == keys and summary["failed"] == 1
    assert sorted(df["status"]) == ["error", "ok", "ok"]


def test_failures_of_an_older_poisoned_run_are_measured_again(tmp_path):
    store = ProfileStore(str(tmp_path / "p"))
    for key in ("a", "b"):  # what the harness bug left: every kernel "crashed", none ran
        store.append(dict(kind="unit", key=key, target="llvm", status="crashed", error="worker died"))
    store.append(dict(kind="unit", key="c", target="cuda", status="ok", median_us=1.0))
    store.append(dict(kind="unit", key="d", target="cuda", status="timeout", timeout_s=2.0))
    assert store.done() == {("unit", "c", "cuda"), ("unit", "d", "cuda")}
    # A kernel that timed out under a shorter limit than this run's is tried again.
    assert store.done(retry_timeouts_below_s=300.0) == {("unit", "c", "cuda")}


# -- 15.9: two jobs on one folder ----------------------------------------------------------------------------
GUARDED = """
import json, sys
from autoplace.profile import KernelTimer, ProfileStore, profile_models
if __name__ == "__main__":
    summary = profile_models([("tiny", tiny())], {"cpu": "llvm"}, ProfileStore(sys.argv[1]), copies=False,
                             end_to_end=False, timer=KernelTimer(repeat=1, min_repeat_ms=1), progress=False,
                             log=lambda line: print(line, flush=True))
    print("SUMMARY " + json.dumps(summary), flush=True)
"""


def test_two_jobs_on_one_folder_measure_every_kernel_once(tmp_path):
    """Design: one job per folder at a time (an flock on the folder). The second waits, then reads the store
    again and finds nothing left; two jobs timing kernels at once would also disturb each other's numbers."""
    folder = tmp_path / "p"
    script = tmp_path / "job.py"
    script.write_text(TINY_SRC + textwrap.dedent(GUARDED))
    store = ProfileStore(str(folder))
    outputs = [[], []]
    with store.lock(log=lambda *a: None):  # both jobs start while the folder is busy: they must overlap
        procs = [subprocess.Popen([sys.executable, str(script), str(folder)], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, cwd=str(tmp_path)) for _ in range(2)]
        readers = [threading.Thread(target=lambda p=p, out=out: out.extend(p.stdout), daemon=True)
                   for p, out in zip(procs, outputs)]
        for reader in readers:
            reader.start()
        deadline = time.time() + 90
        while time.time() < deadline and not all(any("waiting for another" in line for line in out)
                                                  for out in outputs):
            time.sleep(0.2)
    for proc in procs:
        proc.wait(timeout=120)
    for reader in readers:
        reader.join(timeout=10)
    assert all(p.returncode == 0 for p in procs), outputs
    assert all(any("waiting for another" in line for line in out) for out in outputs), outputs
    summaries = [json.loads(line.split(" ", 1)[1])
                 for out in outputs for line in out if line.startswith("SUMMARY")]
    assert sorted(s["measured"] for s in summaries) == [0, 3], outputs  # one measured all, the other none
    df = quiet_records(folder)
    assert len(df) == 3 and set(df["key"]) == tiny_keys(), df  # every kernel once in total


# -- 16: provenance comes from what measured a record ----------------------------------------------------
def _label_folder(folder, **meta):
    os.makedirs(folder, exist_ok=True)
    base = {"hardware_id": measured_by()["hardware_id"], "tvm_version": tvm.__version__, "cpu_model": "x",
            "cpu_cores": 1, "gpus": []}
    with open(os.path.join(folder, "metadata.json"), "w") as f:
        json.dump({**base, **meta}, f)


def test_records_carry_the_running_tvm_not_the_folder_label(tmp_path):
    folder = tmp_path / "p"
    _label_folder(folder, tvm_version="0.26.0")  # a folder made by an older TVM
    profile_models([("tiny", tiny())], {"cpu": "llvm"}, ProfileStore(str(folder)), copies=False,
                   end_to_end=False, timer=KernelTimer(isolate=False, **FAST), progress=False,
                   log=lambda *a: None)
    records = [json.loads(line) for line in (folder / "records.jsonl").read_text().splitlines()]
    assert len(records) == 3
    assert {r["tvm_version"] for r in records} == {tvm.__version__}
    assert {r["hardware_id"] for r in records} == {measured_by()["hardware_id"]}
    assert all(r["measured_at"] for r in records)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # they are this TVM's: no warning
        assert len(ProfileStore(str(folder)).records()) == 3


def test_records_of_another_tvm_version_are_named_when_read(tmp_path):
    folder = tmp_path / "p"
    _label_folder(folder, tvm_version="0.26.0")
    old = ProfileStore(str(folder), metadata=json.loads((folder / "metadata.json").read_text()))
    for key in ("a", "b", "c"):  # measured by TVM 0.26.0 in its own folder: consistent, but not this TVM's
        old.append(dict(kind="unit", key=key, target="llvm", status="ok", median_us=1.0))
    match = r"all record\(s\).*3 measured on .* with TVM 0\.26\.0.*left out"
    with pytest.warns(ForeignProfileWarning, match=match):
        assert ProfileStore(str(folder)).records().empty
    ProfileStore(str(folder)).append(dict(kind="unit", key="a", target="llvm", status="ok", median_us=1.0))
    with pytest.warns(ForeignProfileWarning, match=r"3 of 4 record\(s\).*TVM 0\.26\.0"):
        assert list(ProfileStore(str(folder)).records()["key"]) == ["a"]
    assert ProfileStore(str(folder)).done() == {("unit", "a", "llvm")}  # b, c get measured again


def test_profiling_into_another_machines_folder_is_refused(tmp_path):
    folder = tmp_path / "p"
    _label_folder(folder, hardware_id="some-other-box-64c")
    with pytest.raises(ProfilingError, match="some-other-box-64c.*would mix two machines"):
        profile_models([("tiny", tiny())], {"cpu": "llvm"}, ProfileStore(str(folder)), copies=False,
                       end_to_end=False, timer=KernelTimer(isolate=False, **FAST), progress=False)
    assert not (folder / "records.jsonl").exists()


def test_committed_profile_loads_without_warnings_on_its_own_machine():
    root = os.path.join(REPO, "profiles")
    folders = [os.path.join(root, name) for name in sorted(os.listdir(root))]
    folders = [p for p in folders if os.path.exists(os.path.join(p, "records.jsonl"))]
    if not folders:
        pytest.skip("no committed CPU profile")
    for folder in folders:
        with open(os.path.join(folder, "metadata.json")) as f:
            meta = json.load(f)
        assert os.path.basename(folder) == meta["hardware_id"], folder
        if (measured_by()["hardware_id"], tvm.__version__) != (meta["hardware_id"], meta["tvm_version"]):
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            report = ProfileStore(folder).load()
        assert report.foreign == 0 and not report.skipped and len(report.records) > 500
        return
    pytest.skip("no committed profile of this machine and TVM")


# -- 16: a profile without a copy fit says what to run ---------------------------------------------------
def test_missing_copy_fit_says_which_targets_to_profile():
    from autoplace.cost_model import CostTable

    table = CostTable([dict(kind="unit", key="k", target="llvm", status="ok", median_us=1.0)])
    with pytest.raises(CostError, match=r"""no copy fit for llvm:0->llvm:1.*autoplace profile --zoo mlp """
                                        r"""--targets '\{"cpu0": "llvm", "cpu1": "llvm"\}'""") as err:
        table.copy_cost("llvm:0", "llvm:1")
    assert "cuda" not in str(err.value)  # a CPU pair gets a CPU-only example
    assert isinstance(err.value, KeyError)  # what this lookup raised before
    with pytest.raises(CostError, match=r'"cpu": "llvm", "gpu": "cuda"'):
        table.copy_cost("llvm:0", "cuda:0")


def test_optimize_with_a_single_target_profile_raises_cost_error(tmp_path):
    import autoplace
    from autoplace.cost_model import CostTable

    store = ProfileStore(str(tmp_path / "p"))
    profile_models([("tiny", tiny())], {"cpu": "llvm"}, store, end_to_end=False,  # the default: one target
                   timer=KernelTimer(isolate=False, **FAST), progress=False, log=lambda *a: None)
    table = CostTable(quiet_records(store.path))
    assert table.launch_ and not table.copy_
    with pytest.raises(CostError, match="no copy fit for llvm:0->llvm:1.*cpu0"):
        autoplace.optimize(tiny(), targets={"cpu0": "llvm", "cpu1": "llvm"}, costs=table)
