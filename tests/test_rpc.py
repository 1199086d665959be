"""Profiling over TVM's RPC tracker (issue 17), on loopback: a tracker and two servers running a runtime-only TVM
(the Python package without libtvm_compiler.so, ``TVM_USE_RUNTIME_LIB=1``), started and stopped by the tests."""

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
import warnings

import pytest
import tvm

from autoplace import zoo
from autoplace.backend.cpu_threads import USABLE_CPUS, restore_usable_cpus
from autoplace.errors import ProfilingError, RPCError
from autoplace.profile import ProfileStore, extract_units
from autoplace.profile.cache_state import IN_MODEL_TIMING
from autoplace.profile.hardware import measured_by
from autoplace.profile.rpc import RPCConfig, profile_over_rpc, wait_for_servers

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TWO = {"cpu0": "llvm", "cpu1": "llvm"}


def runtime_only_tvm(dest) -> str:
    """A copy of the installed ``tvm`` package without the compiler (as ``experiments/gpu/pack.sh`` packs it for
    the GPU box); put its parent first on ``PYTHONPATH`` and set ``TVM_USE_RUNTIME_LIB=1``."""
    site = os.path.dirname(os.path.dirname(tvm.__file__))
    rt = os.path.join(str(dest), "rt")
    shutil.copytree(os.path.join(site, "tvm"), os.path.join(rt, "tvm"),
                    ignore=shutil.ignore_patterns("__pycache__", "libtvm_compiler.so", "3rdparty", "include", "src",
                                                  "web", "cmake", "licenses"))
    assert not os.path.exists(os.path.join(rt, "tvm", "lib", "libtvm_compiler.so"))
    return rt


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Farm:
    """A tracker and runtime-only servers under one key, each a process group of its own (killed on exit)."""

    def __init__(self, tmp, rt, key="loop", servers=2):
        self.tmp, self.rt, self.key = str(tmp), rt, key
        os.makedirs(self.tmp, exist_ok=True)
        self.port = free_port()
        self.procs, self.logs = {}, {}
        try:
            self._start_all(rt, key, servers)
        except BaseException:
            self.close()  # nothing started here outlives a failed start
            raise

    def _start_all(self, rt, key, servers):
        self._start("tracker", [sys.executable, "-m", "tvm.exec.rpc_tracker", "--host", "127.0.0.1",
                                "--port", str(self.port), "--port-end", str(self.port + 1)], {})
        self._wait(lambda: self._answers(), "the tracker to listen")
        env = {"PYTHONPATH": rt, "TVM_USE_RUNTIME_LIB": "1", "TVM_NUM_THREADS": "1"}
        self.server_ports = []
        for i in range(servers):
            port = free_port()
            self.server_ports.append(port)
            self._start(f"server{i}", [sys.executable, "-m", "tvm.exec.rpc_server", "--host", "127.0.0.1",
                                       "--port", str(port), "--port-end", str(port + 1),
                                       "--tracker", self.tracker, "--key", key], env)
        self._wait(lambda: len(self.registered()) == servers, f"{servers} servers to register")

    @property
    def tracker(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def config(self) -> RPCConfig:
        return RPCConfig.create(self.tracker, self.key, request_timeout_s=30)

    def _start(self, name, argv, env):
        self.logs[name] = os.path.join(self.tmp, f"{name}.log")
        with open(self.logs[name], "w") as log:  # the child keeps its own descriptor
            # with the CPUs a server started from a shell has, not the one TVM's pool pinned this thread to
            restore_usable_cpus()
            self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.tmp,
                                                env={**os.environ, **env}, start_new_session=True)

    def _answers(self):
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
            return True
        return False

    def registered(self):
        from tvm import rpc

        summary = rpc.connect_tracker("127.0.0.1", self.port).summary()
        return [tuple(s["addr"]) for s in summary["server_info"] if s["key"] == f"server:{self.key}"]

    def _wait(self, ready, what, timeout=90):
        deadline = time.time() + timeout
        while time.time() < deadline:
            dead = [n for n, p in self.procs.items() if p.poll() is not None]
            assert not dead, f"{dead} exited: " + "".join(self.log(n)[-2000:] for n in dead)
            if ready():
                return
            time.sleep(0.3)
        raise AssertionError(f"timed out waiting for {what}")

    def log(self, name) -> str:
        with open(self.logs[name]) as f:
            return f.read()

    def kill(self, name):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.procs[name].pid, signal.SIGKILL)
        self.procs[name].wait(timeout=30)

    def close(self):
        for name in list(self.procs):
            self.kill(name)


@pytest.fixture(scope="module")
def rt(tmp_path_factory):
    return runtime_only_tvm(tmp_path_factory.mktemp("runtime"))


@pytest.fixture(scope="module")
def farm(tmp_path_factory, rt):
    farm = Farm(tmp_path_factory.mktemp("farm"), rt)
    try:
        yield farm
    finally:
        farm.close()


JOB = textwrap.dedent(
    """
    import json, sys
    from autoplace import zoo
    from autoplace.profile import KernelTimer, ProfileStore
    from autoplace.profile.rpc import RPCConfig, profile_over_rpc

    if __name__ == "__main__":
        folder, tracker, key, models, ms = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(","), int(sys.argv[5])
        copies = len(sys.argv) > 6
        summary = profile_over_rpc([zoo.get(m) for m in models], {"cpu0": "llvm", "cpu1": "llvm"},
                                   RPCConfig.create(tracker, key, request_timeout_s=30), store=ProfileStore(folder),
                                   copies=copies, copy_sizes=(4, 4096), timer=KernelTimer(repeat=2, min_repeat_ms=ms),
                                   progress=False)
        print("SUMMARY", json.dumps(summary))
    """
)


def job(tmp_path, farm, folder, models, *, min_repeat_ms=1, copies=True):
    script = tmp_path / "rpc_job.py"
    script.write_text(JOB)
    argv = [sys.executable, str(script), str(folder), farm.tracker, farm.key, ",".join(models), str(min_repeat_ms)]
    return argv + (["copies"] if copies else [])


def records(folder):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ProfileStore(str(folder)).load().records


def test_job_over_two_servers_resumes_after_a_kill_with_the_records_of_a_local_job(tmp_path, farm):
    folder = tmp_path / "profile"
    path = folder / "records.jsonl"
    proc = subprocess.Popen(job(tmp_path, farm, folder, ["cnn", "mlp"]), start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 240
        while time.time() < deadline and proc.poll() is None:
            if path.exists() and len(path.read_text().splitlines()) >= 4:
                break
            time.sleep(0.1)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # mid-job, maybe mid-write
        out = proc.communicate(timeout=60)[0]
    assert proc.returncode == -signal.SIGKILL, out[-3000:]  # it was killed, it did not finish
    before = records(folder)
    assert len(before) >= 4
    run = subprocess.run(job(tmp_path, farm, folder, ["cnn", "mlp"]), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    after = records(folder)
    units = [r for r in after if r["kind"] == "unit"]
    expected = {u.key for m in ("cnn", "mlp") for u in extract_units(zoo.get(m), "llvm")}
    assert {r["key"] for r in units} == expected  # every kernel measured ...
    assert len(units) == len(expected)  # ... once
    assert all(r["status"] == "ok" and r.get("median_us", 1) > 0 for r in after), [r for r in after if r["status"] != "ok"]
    assert {r["key"] for r in after if r["kind"] == "model"} == {"cnn", "mlp"}
    assert {r["target"] for r in after if r["kind"] == "launch"} == {"llvm:0", "llvm:1"}
    assert {r["target"] for r in after if r["kind"] == "copy_fit"} == {"llvm:0->llvm:1", "llvm:1->llvm:0"}
    tags = [(r["kind"], r["key"], r["target"]) for r in after if r["kind"] != "copy"]
    assert len(tags) == len(set(tags))
    assert {(r["kind"], r["key"], r["target"]) for r in before} <= set(tags) | {
        ("copy", r["key"], r["target"]) for r in after}  # nothing that was on disk got lost
    # The work was shared: both servers loaded kernels.
    for name in ("server0", "server1"):
        assert farm.log(name).count("load_module") >= 2, farm.log(name)[-2000:]
    # The profile is the servers' machine (loopback: this one), found from the remote side.
    meta = json.loads((folder / "metadata.json").read_text())
    assert meta["hardware_id"] == measured_by()["hardware_id"] and meta["rpc"].startswith(farm.tracker)
    assert {r["hardware_id"] for r in after} == {meta["hardware_id"]}
    # Records identical in form to a local job's (same kinds and fields).
    local = tmp_path / "local"
    script = tmp_path / "local_job.py"
    script.write_text(textwrap.dedent("""
        import sys
        from autoplace import zoo
        from autoplace.profile import KernelTimer, ProfileStore, profile_models
        if __name__ == "__main__":
            profile_models([zoo.get("seed003")], {"cpu0": "llvm", "cpu1": "llvm"}, ProfileStore(sys.argv[1]),
                           copy_sizes=(4, 4096), timer=KernelTimer(repeat=2, min_repeat_ms=1), progress=False)
    """))
    restore_usable_cpus()  # the CPUs a job started from a shell has (as the servers'), not this pinned thread's
    done = subprocess.run([sys.executable, str(script), str(local)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    mine = records(local)

    def fields(rows):
        out = {}
        for r in rows:
            out.setdefault(r["kind"], set()).update(r)
        return out

    # Only the host-speed canary differs (it times this machine, not the servers a farm job times on) and the
    # in-context timing of models' kernels (not over RPC yet).
    local_only = {"host_slowdown", "canary_us", "sharing_canary_us", "calm_samples", "in_context_us", "in_context_kernel_us",
                  "in_context_hook_us", "in_context_runs", "in_context_timing", "in_context_host_slowdown",
                  "in_context_apart", "in_context_wall_us", "round_in_context_wall_us"}
    # The local job's model (seed003) has no weights: the weights-cold fields of kernels with weights are checked below.
    with_weights_only = {"weights_cold_median_us", "weights_cold_min_us", "weights_cold_timing"}
    expected = {kind: names - local_only for kind, names in fields(mine).items()}
    got = {kind: names - with_weights_only for kind, names in fields(after).items()}
    assert got == expected, {kind: (names ^ expected.get(kind, set())) for kind, names in got.items()}
    # CPU kernels were timed in-model on the servers too (the preprocessing library each session loads), the
    # L2 read there, as the local job reads it here.
    assert all(r["in_model_median_us"] > 0 and r["in_model_timing"] == IN_MODEL_TIMING for r in units)
    # and the kernels with weights with their weights flushed from every cache (the same library's second function)
    from autoplace.profile.cache_state import WEIGHTS_COLD_TIMING

    with_weights = [r for r in units if r.get("weight_args")]
    assert with_weights and all(r["weights_cold_median_us"] > 0 and r["weights_cold_timing"] == WEIGHTS_COLD_TIMING
                                for r in with_weights)
    assert {r["l2_bytes"] for r in units} == {r["l2_bytes"] for r in mine if r["kind"] == "unit"}



def test_a_kernel_timed_on_a_server_checked_in_its_session_evicts_the_l2_of_all_the_servers_cpus(tmp_path, farm):
    """The first item a job gives a server is timed in the session that reads the server's hardware. Reading its
    thread pool's size there created the pool, which pinned the session's thread to one CPU (TVM_NUM_THREADS=1 on
    two), and the in-model library loaded next evicted one core's L2: on a 2-core Zen 5, CI found records of 1 and
    2 MiB in one profile."""
    import concurrent.futures as cf

    from autoplace.backend.cpu_schedules import cpu_target
    from autoplace.profile.job import probe_module
    from autoplace.profile.remote import export_kernel, kernel_item
    from autoplace.profile.remote_runner import l2_bytes
    from autoplace.profile.rpc import Farm as RPCFarm
    from autoplace.profile.rpc import Work

    target = cpu_target("llvm")
    with RPCFarm(farm.config, {"repeat": 2, "number": 1, "min_repeat_ms": 1}, log=lambda *_: None) as servers:
        servers.open(target, in_model=True)
        assert servers.in_model_library is not None
        unit = extract_units(probe_module(), target)[0]
        path = os.path.join(servers.workdir, "probe.so")
        export_kernel(unit.prim_func.script(show_meta=True), str(target), path)
        built = cf.Future()
        built.set_result(path)
        results = []
        for _ in range(2):
            servers._checked.clear()  # each server is new to the job: its hardware is read in the timing session
            servers.run([Work(kernel_item(unit, None, "probe", "llvm", "probe.so"), built, what="probe")],
                        lambda work, result: results.append(result))
    assert [r["status"] for r in results] == ["ok", "ok"], results
    # the servers run on the CPUs this test process had when autoplace was imported (Farm._start)
    assert {r["l2_bytes"] for r in results} == {l2_bytes(len(USABLE_CPUS))}


ROUNDS_JOB = textwrap.dedent(
    """
    import json, sys
    from autoplace import zoo
    from autoplace.profile import KernelTimer, ProfileStore
    from autoplace.profile.rpc import RPCConfig, profile_over_rpc

    if __name__ == "__main__":
        folder, tracker, key, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
        summary = profile_over_rpc([zoo.get("mlp")], {"cpu": "llvm"}, RPCConfig.create(tracker, key, request_timeout_s=30),
                                   store=ProfileStore(folder), copies=False, timer=KernelTimer(repeat=2, min_repeat_ms=1),
                                   progress=False, rounds=rounds)
        print("SUMMARY", json.dumps(summary))
    """
)


def test_rounds_over_rpc_time_every_kernel_and_model_again_and_merge_as_a_local_job(tmp_path, farm):
    """``rounds=2`` over RPC: every kernel and the model timed twice on the servers, the newest record of each
    keeping both rounds and the median of the fastest (the local job's rule); run again with 3, only the third
    round is timed; then, as a local job, kernels whose records lack the weights-cold or in-model timing are timed
    again (the first going on with its rounds), and nothing else."""
    import numpy as np

    from autoplace.profile.job import fastest_rounds

    folder = tmp_path / "profile"
    script = tmp_path / "rpc_rounds.py"
    script.write_text(ROUNDS_JOB)

    def run(rounds):
        done = subprocess.run([sys.executable, str(script), str(folder), farm.tracker, farm.key, str(rounds)],
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    run(2)
    newest = ProfileStore(str(folder)).newest_good()
    timed = [r for (kind, _, _), r in newest.items() if kind in ("unit", "model")]
    assert sorted(r["kind"] for r in timed) == ["model", "unit", "unit", "unit"]
    for record in timed:
        assert record["status"] == "ok" and record["rounds"] == 2 and len(record["round_medians_us"]) == 2
        assert record["median_us"] == pytest.approx(float(np.median(fastest_rounds(record["round_medians_us"]))))
        assert record["min_us"] <= min(record["round_medians_us"])
    assert len(records(folder)) == 2 * 4
    run(3)
    assert len(records(folder)) == 3 * 4
    newest = ProfileStore(str(folder)).newest_good()
    assert all(r["rounds"] == 3 for (kind, _, _), r in newest.items() if kind in ("unit", "model"))
    # As a local job: a kernel with weights whose record lacks the weights-cold timing (profiled before it) is timed
    # again and goes on with its rounds; one lacking the in-model timing is timed afresh; nothing else is timed.
    from autoplace.profile.cache_state import WEIGHTS_COLD_TIMING

    units = [r for (kind, _, _), r in newest.items() if kind == "unit"]
    cold = next(r for r in units if r.get("weight_args"))
    warm = next(r for r in units if r is not cold)
    store = ProfileStore(str(folder))
    store.append({k: v for k, v in cold.items() if not k.startswith(("weights_cold", "round_weights_cold"))})
    store.append({k: v for k, v in warm.items() if not k.startswith(("in_model", "round_in_model", "weights_cold",
                                                                     "round_weights_cold"))})
    run(3)
    after = ProfileStore(str(folder)).newest_good()
    again = after[("unit", cold["key"], "llvm")]
    assert again["round_medians_us"][:3] == cold["round_medians_us"] and again["rounds"] == 6
    assert again["round_in_model_medians_us"][:3] == cold["round_in_model_medians_us"]
    assert again["weights_cold_timing"] == WEIGHTS_COLD_TIMING and len(again["round_weights_cold_medians_us"]) == 3
    assert again["round_weights_cold_in_model_us"] == again["round_in_model_medians_us"][3:]
    fresh = after[("unit", warm["key"], "llvm")]
    assert fresh["in_model_timing"] == IN_MODEL_TIMING and fresh["rounds"] == 3
    assert {tag: r["rounds"] for tag, r in after.items() if tag[1] not in (cold["key"], warm["key"])} == {
        tag: r["rounds"] for tag, r in newest.items() if tag[1] not in (cold["key"], warm["key"])}
    count = len(records(folder))
    run(3)
    assert len(records(folder)) == count  # nothing left to time


def test_a_server_killed_mid_job_is_reported_and_its_kernels_measured_on_the_other(tmp_path, rt):
    farm = Farm(tmp_path / "farm", rt, key="dying")
    try:
        folder = tmp_path / "profile"
        # 400 ms per sample: a server spends most of its time inside an item.
        proc = subprocess.Popen(job(tmp_path, farm, folder, ["mlp", "seed003"], min_repeat_ms=400,
                                    copies=False),
                                start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        victim, item = None, None
        try:
            deadline = time.time() + 240
            while victim is None and time.time() < deadline and proc.poll() is None:
                for name in ("server0", "server1"):
                    lines = [line for line in farm.log(name).splitlines() if "INFO" in line]
                    last = lines[-1] if lines else ""
                    if "load_module" in last and last.endswith(".so") and not any(
                            skip in last for skip in ("probe_", "autoplace_hardware", "autoplace_in_model")):
                        victim, item = name, os.path.basename(last.split()[-1])[: -len(".so")]
                        break
                time.sleep(0.05)
            assert victim is not None, "no server was caught timing a kernel"
            farm.kill(victim)  # while it times `item`
            out = proc.communicate(timeout=600)[0]
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        assert proc.returncode == 0, out[-4000:]
        port = farm.server_ports[int(victim[-1])]
        assert f"lost the session on RPC server 127.0.0.1:{port}" in out, out[-4000:]
        assert "measured again" in out
        rows = records(folder)
        assert all(r["status"] == "ok" for r in rows), [r for r in rows if r["status"] != "ok"]  # not marked failed
        key = item.rsplit("_", 1)[0]  # "<unit key>_<kind>" or "model_<name>_<kind>"
        assert any(r["key"] == key or f"model_{r['key']}" == key for r in rows), (item, [r["key"] for r in rows])
        expected = {u.key for m in ("mlp", "seed003") for u in extract_units(zoo.get(m), "llvm")}
        assert {r["key"] for r in rows if r["kind"] == "unit"} == expected
        survivor = "server1" if victim == "server0" else "server0"
        assert farm.procs[survivor].poll() is None
    finally:
        farm.close()


def test_bad_addresses_and_absent_servers_are_clear_errors(tmp_path, farm):
    with pytest.raises(RPCError, match="HOST:PORT"):
        RPCConfig.create("localhost:notaport", "k")
    with pytest.raises(RPCError, match="--rpc-key"):
        RPCConfig.create(farm.tracker, "two words")
    closed = free_port()
    with pytest.raises(RPCError, match=f"cannot reach the RPC tracker at 127.0.0.1:{closed}.*rpc_tracker"):
        wait_for_servers(RPCConfig.create(f"127.0.0.1:{closed}", "k"))
    started = time.time()
    with pytest.raises(RPCError, match=r"no RPC server with key 'nobody'.*\['loop'\].*--key nobody"):
        profile_over_rpc([zoo.get("seed003")], TWO, RPCConfig.create(farm.tracker, "nobody", request_timeout_s=2),
                         profiles_root=str(tmp_path / "p"), progress=False)
    assert time.time() - started < 30
    assert not (tmp_path / "p").exists()  # nothing written
    # A folder of other hardware is refused before anything is measured.
    other = tmp_path / "other"
    other.mkdir()
    (other / "metadata.json").write_text(json.dumps({"hardware_id": "some-other-box-8c"}))
    with pytest.raises(ProfilingError, match="some-other-box-8c"):
        profile_over_rpc([zoo.get("seed003")], TWO, farm.config, store=ProfileStore(str(other)), progress=False)
    assert not (other / "records.jsonl").exists()
    # The command line: one `autoplace: error:` line, exit 2, before any model is loaded.
    for argv, needle in (([f"--rpc=127.0.0.1:{closed}", "--rpc-key", "k"], "cannot reach the RPC tracker"),
                         (["--rpc", farm.tracker], "needs --rpc-key"),
                         (["--rpc", farm.tracker, "--rpc-key", "k", "--bundle", str(tmp_path / "b")], "--bundle")):
        run = subprocess.run([sys.executable, "-m", "autoplace", "profile", "--zoo", "seed003", *argv],
                             capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
        assert run.returncode == 2, run.stderr[-2000:]
        last = run.stderr.strip().splitlines()[-1]
        assert last.startswith("autoplace: error:") and needle in last, run.stderr[-2000:]


def test_compare_times_plans_on_the_remote_machine_priced_by_its_profile(tmp_path, farm, monkeypatch):
    import autoplace
    from autoplace.profile import KernelTimer

    root = tmp_path / "profiles"
    summary = profile_over_rpc([zoo.mlp()], TWO, farm.config, profiles_root=str(root), copy_sizes=(4, 4096, 1 << 20),
                               timer=KernelTimer(repeat=2, min_repeat_ms=1), progress=False)
    assert summary["profile"] == str(root / measured_by()["hardware_id"])
    monkeypatch.setenv("AUTOPLACE_PROFILES", str(root))  # compare finds profiles/<the servers' id> there
    table = autoplace.compare(zoo.mlp(), None, TWO, manual={"matmuls on cpu1": {"relax.matmul": "cpu1"}},
                              rounds=2, repeat=2, rpc=farm.config)
    assert table.attrs["hardware_id"] == measured_by()["hardware_id"]
    assert {"autoplace", "all:cpu0", "all:cpu1", "greedy", "manual:matmuls on cpu1"} <= set(table.index)
    assert (table["measured_median_us"] > 0).all()
    assert table.loc["manual:matmuls on cpu1", "copies"] > 0  # weights on cpu1, copies between the devices
    assert (table["predicted_us"] > 0).all()  # priced by the profile just measured over RPC


def test_the_runner_alone_with_a_runtime_only_tvm_gives_the_records_of_a_local_job(tmp_path, rt, monkeypatch):
    """The bundle flow shares the RPC path's runner: copied alone next to a runtime-only TVM it still times
    kernels, probes and placed models, and a merged profile has the launch fields a local job writes. Large
    weights are drawn there (here every float weight of 1 KiB or more), one arrays file serves the plans of a
    model, and the runner says whether the CUDA runtime loaded (a runtime-only TVM skips it at import)."""
    import autoplace
    from autoplace.profile import remote
    from autoplace.profile.remote import build_bundle, build_plan_bundle, merge_records

    monkeypatch.setattr(remote, "GENERATED_MIN_BYTES", 1 << 10)
    bundle = tmp_path / "bundle"
    build_bundle([zoo.get("seed003")], TWO, str(bundle), copy_sizes=(4,))
    manifest = build_plan_bundle({("mlp", "matmul-on-cpu1"): autoplace.place(zoo.mlp(), None, {"relax.matmul": "cpu1"}, TWO),
                                  ("mlp", "all-on-cpu0"): autoplace.place(zoo.mlp(), None, {}, TWO)}, str(bundle))
    plans = [m for m in manifest["models"] if m["record"]["kind"] == "plan"]
    assert len({m["arrays"] for m in plans}) == 1  # inputs and small tensors, shared
    assert all(len(m["generated"]) >= 3 for m in plans)  # mlp's weight matrices, drawn there
    alone = tmp_path / "device"
    alone.mkdir()
    shutil.copytree(bundle, alone / "bundle")
    env = {**os.environ, "PYTHONPATH": rt, "TVM_USE_RUNTIME_LIB": "1", "TVM_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, "bundle/runner.py", "bundle", "--repeat", "2", "--min-repeat-ms", "1"],
                         capture_output=True, text=True, timeout=300, cwd=str(alone), env=env)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    assert "tvm_runtime_cuda: " in run.stdout  # "loaded" on a GPU box, else why not (no libcuda here)
    # CPU top-k/sort call tvm.contrib.sort.*, which live in libtvm_runtime_extra.so: the runtime-only TVM skips it
    # (session 38's box failed every CPU top-k of detect-base so), the runner loads it
    assert "tvm_runtime_extra: loaded" in run.stdout, run.stdout[-2000:]
    folder = merge_records(str(alone / "bundle" / "records.jsonl"), str(tmp_path / "profiles"))
    rows = records(folder)
    assert all(r["status"] == "ok" for r in rows), [r for r in rows if r["status"] != "ok"]
    units = [r for r in rows if r["kind"] == "unit"]  # timed in-model too, with the runtime alone
    assert units and all(r["in_model_median_us"] > 0 and r["in_model_timing"] for r in units)
    launch = [r for r in rows if r["kind"] == "launch"]
    assert len(launch) == 2 and all({"per_arg_us", "alloc_us_per_byte", "single_call_us"} <= set(r) for r in launch)
    plan = {r["key"]: r for r in rows if r["kind"] == "plan"}
    assert set(plan) == {"mlp:matmul-on-cpu1", "mlp:all-on-cpu0"} and all(r["median_us"] > 0 for r in plan.values())
    assert plan["mlp:matmul-on-cpu1"]["copies"] > 0
    # seed003 built on the CPU: timed end to end and its kernel in context by the bundle's in_context.py, on the
    # runtime alone
    model = [r for r in rows if r["kind"] == "model"]
    assert len(model) == 1 and model[0]["median_us"] > 0 and len(model[0]["in_context_us"]) == 1, model
    # Without the compiler Target.current() has no FFI function; the CUDA runtime asks it for the GPU's compute
    # version through Python, so the runner gives one that answers "no target" (the device then says).
    code = ("import sys; sys.path.insert(0, 'bundle'); import tvm, runner; runner.load_device_runtimes(tvm); "
            "print(tvm.get_global_func('tvm.contrib.sort.topk', allow_missing=True) is not None); "
            "print(tvm.target.Target.current(allow_none=True))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=str(alone), env=env)
    assert out.returncode == 0 and out.stdout.split()[-2:] == ["True", "None"], out.stdout[-500:] + out.stderr[-2000:]


def test_servers_of_another_architecture_get_warm_timing_and_the_log_says_why(tmp_path, monkeypatch):
    """The in-model library is C++ compiled here: for servers of another architecture (and no cross compiler in
    CXX) the job times their CPU kernels warm only and says so, naming the fix; for this one it builds a library
    that registers the preprocessing when loaded."""
    import platform

    from autoplace.profile.rpc import CONFIGURE_NAME, PREPROC_NAME, build_in_model_library

    monkeypatch.delenv("CXX", raising=False)
    other = "riscv64" if platform.machine() != "riscv64" else "x86_64"
    said = []
    assert build_in_model_library(tvm.target.Target("llvm"), {"machine": other}, str(tmp_path), log=said.append) is None
    assert len(said) == 1 and other in said[0] and "CXX" in said[0] and "warm only" in said[0]
    path = build_in_model_library(tvm.target.Target("llvm"), {"machine": platform.machine()}, str(tmp_path),
                                  log=said.append)
    assert path is not None and len(said) == 1
    # Loaded in a process of its own (as a server's session would): the two functions exist there, and the
    # configuration answers with the L2 the library will evict.
    probe = textwrap.dedent(f"""
        import tvm
        lib = tvm.runtime.load_module({path!r})
        print(int(tvm.get_global_func({CONFIGURE_NAME!r})(1, 32768)), tvm.get_global_func({PREPROC_NAME!r}) is not None)
    """)
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    l2, found = run.stdout.split()
    assert int(l2) > 0 and found == "True"


def test_a_server_that_cannot_load_the_in_model_library_gets_warm_timing_not_failed_kernels(tmp_path, farm,
                                                                                             monkeypatch):
    """The first session checks that a server loads the in-model library; where it does not, the job times CPU
    kernels warm only and says why, and no kernel is recorded as failed for its preprocessing."""
    from autoplace.profile import KernelTimer, rpc

    junk = tmp_path / "autoplace_in_model.so"
    junk.write_bytes(b"not a shared library")
    monkeypatch.setattr(rpc, "build_in_model_library", lambda *args, **kwargs: str(junk))
    said = []
    store = ProfileStore(str(tmp_path / "p"))
    summary = profile_over_rpc([zoo.get("seed003")], {"cpu": "llvm"}, farm.config, store=store, copies=False,
                               end_to_end=False, timer=KernelTimer(repeat=2, min_repeat_ms=1), progress=False,
                               log=said.append)
    assert summary["measured"] >= 1 and summary["failed"] == 0
    assert any("timed warm only" in line and "could not load" in line for line in said), said
    units = [r for (kind, _, _), r in store.newest_good().items() if kind == "unit"]
    assert units and all(r["status"] == "ok" and "in_model_median_us" not in r for r in units)


def test_a_runner_keeps_each_call_overhead_probes_fastest_timing_as_the_local_job_does():
    """A bundle's or an RPC job's call-overhead probes carry ``probe_rounds`` (LAUNCH_PROBE_ROUNDS), and the runner
    keeps each one's fastest timing of that many: one timing of the Zen 3's probes read 0.095 and 0.167 us an
    argument 12 s apart (session 58). Kernels carry none and are timed once."""
    from autoplace.profile import remote_runner
    from autoplace.profile.copies import LAUNCH_PROBE_ROUNDS
    from autoplace.profile.remote import launch_items
    from autoplace.targets import TargetSet

    items = [item for item, _ in launch_items(TargetSet({"cpu": "llvm"}), "cpu")]
    assert {i["record"]["key"] for i in items} == {"calls1", "calls65", "args9", "alloc", "alloc_alone"}
    assert all(i["probe_rounds"] == LAUNCH_PROBE_ROUNDS > 1 for i in items)
    readings = iter([dict(median_us=us) for us in (0.9, 0.7, 1.3, 0.8, 0.75)])
    calls = []

    def time_once():
        calls.append(1)
        return next(readings)

    assert remote_runner.fastest(time_once, LAUNCH_PROBE_ROUNDS) == dict(median_us=0.7)
    assert len(calls) == LAUNCH_PROBE_ROUNDS
    assert remote_runner.fastest(lambda: dict(median_us=2.0), 1) == dict(median_us=2.0)
