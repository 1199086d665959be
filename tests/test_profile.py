"""Profiler: units, measurement in a worker, the append-only store, resume after a kill."""

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import numpy as np
import pandas as pd
import pytest
import tvm

import autoplace
from autoplace import zoo
from autoplace.backend.cpu_threads import restore_usable_cpus
from autoplace.profile import (
    CorruptRecordWarning,
    ForeignProfileWarning,
    KernelTimer,
    ProfileStore,
    extract_units,
)


def test_units_cover_every_kernel_launch_and_dedupe_repeated_layers():
    model = zoo.get("bert")  # two identical encoder layers
    units = extract_units(model, "llvm")
    keys = [u.key for u in units]
    assert len(set(keys)) < len(keys)  # repeated layers share kernels
    covered = [n for u in units for n in u.nodes]
    assert len(covered) == len(set(covered))  # no op claimed by two kernels
    assert all(u.target_kind == "llvm" for u in units)
    # Which arguments are model weights: every weight byte is read by exactly the kernels that take it.
    assert sum(u.weight_bytes for u in units) == model.weight_nbytes
    assert any(not u.weight_args for u in units) and any(u.weight_args for u in units)  # attention vs linear


def test_units_say_whether_a_fused_reshape_transpose_chain_reads_in_order_or_down_columns():
    from autoplace.cost_model import record_features
    from autoplace.profile.job import unit_record

    # BERT's query/value head split (16, 64) -> (2, 16, 32) reads each input row in order; its key,
    # (16, 64) -> (2, 32, 16), reads down the columns: same ops and sizes, 3-4x apart in time on the CPU.
    units = {u.func_name: u for u in extract_units(zoo.get("bert"), "llvm")}
    split = [u for name, u in units.items() if "transpose" in name and u.arg_shapes == [(16, 64), (2, 16, 32)]]
    key = [u for name, u in units.items() if "transpose" in name and u.arg_shapes == [(16, 64), (2, 32, 16)]]
    assert split and key
    assert split[0].read_strides == [1.0] and key[0].read_strides == [64.0]
    residual = [u for name, u in units.items() if name.startswith("fused_reshape1_llvm_add")]
    assert residual and residual[0].read_strides == [1.0, 1.0]
    matmul = [u for name, u in units.items() if "matmul" in name]
    assert matmul and all(u.read_strides is None for u in matmul)  # not data movement: other features
    record = unit_record(key[0], None, "bert", "llvm", {})
    assert record["read_strides"] == [64.0]
    feats = record_features(record)
    assert feats["read_strided_share"] == 1.0 and feats["read_stride"] > 5.9
    assert record_features(unit_record(split[0], None, "bert", "llvm", {}))["read_strided_share"] == 0.0
    assert np.isnan(record_features({**record, "read_strides": None})["read_stride"])  # older records: unknown
    # How far each read runs on contiguously: the query split in rows of 32, the key in single elements, the residual
    # in one run of the whole tensor.
    assert split[0].read_runs == [32.0] and key[0].read_runs == [1.0] and residual[0].read_runs == [1024.0, 1024.0]
    assert np.isnan(feats["read_run"])  # read down columns: the stride says it
    split_feats = record_features(unit_record(split[0], None, "bert", "llvm", {}))
    assert split_feats["read_run"] == 5.0 and split_feats["read_run_count"] == np.log2(1 + 1024 / 32)
    assert np.isnan(record_features(unit_record(residual[0], None, "bert", "llvm", {}))["read_run"])  # one run: a copy
    assert np.isnan(record_features({**unit_record(split[0], None, "bert", "llvm", {}), "read_runs": None})["read_run"])


def test_a_window_partition_reads_in_window_rows_where_a_reshape_copies_in_one_run():
    """Swin's window partition and the reshape beside it both read with stride 1 (the same features before
    ``read_runs``), but the partition jumps to the next map row after each window row: 4.4x the copy's time on the
    Zen 5 at (1, 16, 16, 48) -> (16, 16, 48)."""
    from autoplace.cost_model import record_features
    from autoplace.profile.job import unit_record

    units = {u.func_name: u for u in extract_units(zoo.get("swin"), "llvm")}
    window = [u for name, u in units.items() if "transpose" in name and u.arg_shapes == [(1, 64, 16), (4, 16, 16)]]
    copy = [u for u in units.values() if u.arg_shapes == [(1, 64, 16), (64, 16)]]
    assert window and copy
    assert window[0].read_strides == copy[0].read_strides == [1.0]
    assert window[0].read_runs == [64.0]  # a window's row: 4 tokens x 16 channels of the 8 x 8 map
    assert copy[0].read_runs == [1024.0]
    runs = [record_features(unit_record(u, None, "swin", "llvm", {}))["read_run_count"] for u in (window[0], copy[0])]
    assert runs[0] == np.log2(1 + 16) and np.isnan(runs[1])  # 16 window rows; the copy: one run, no run features


def test_hardware_id_tells_apart_cpus_a_virtual_machine_names_alike():
    from autoplace.profile.remote_runner import cpu_arch_from, hardware_id

    zen3 = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\nmodel name\t: AMD EPYC\n\n" \
           "processor\t: 1\ncpu family\t: 99\nmodel\t\t: 9\n"
    zen5 = zen3.replace("cpu family\t: 25\nmodel\t\t: 1", "cpu family\t: 26\nmodel\t\t: 17")
    arm = "processor\t: 0\nCPU implementer\t: 0x41\nCPU part\t: 0xd0c\n"
    assert (cpu_arch_from(zen3), cpu_arch_from(zen5), cpu_arch_from(arm)) == ("f25m1", "f26m17", "i0x41p0xd0c")
    assert cpu_arch_from("model name\t: mystery\n") is None
    ids = {hardware_id("AMD EPYC", 2, [], cpu_arch_from(text)) for text in (zen3, zen5)}
    assert ids == {"amd-epyc-f25m1-2c", "amd-epyc-f26m17-2c"}
    assert hardware_id("AMD EPYC", 2, ["NVIDIA H100"], None) == "amd-epyc-2c-nvidia-h100"


def test_every_op_is_mapped_to_the_kernel_that_computes_it():
    from autoplace.graph import op_graph

    # bert: the attention mask reads a constant through an alias (`lv27 = const5`) that lowering
    # reads directly; a one-kernel model: the kernel is bound to the output alias (`gv = lv`).
    for model in (zoo.get("bert"), zoo.regime_grid()[2]):
        graph = op_graph(model)
        ops = {n for n, d in graph.nodes(data=True) if d.get("kind") == "op" and d.get("op") != "relax.const"}
        units = extract_units(model, "llvm", graph=graph)
        covered = {n for u in units for n in u.nodes}
        assert not [u.func_name for u in units if not u.nodes], "a kernel mapped to no op"
        missing = {graph.nodes[n]["op"] for n in ops - covered}
        assert not (ops - covered) - {n for n in ops if graph.nodes[n]["op"] == "relax.arange"}, missing
    softmax = [u for u in extract_units(zoo.get("bert"), "llvm") if "softmax" in u.func_name]
    assert softmax and all("relax.nn.softmax" in u.ops for u in softmax)

def test_store_roundtrip_detects_torn_and_altered_lines(tmp_path):
    store = ProfileStore(str(tmp_path / "p"))
    for i in range(3):
        store.append(dict(kind="unit", key=f"k{i}", target="llvm", status="ok", median_us=float(i)))
    path = tmp_path / "p" / "records.jsonl"
    lines = path.read_text().splitlines()
    altered = json.loads(lines[1])
    altered["median_us"] = 999.0  # same CRC, other content: must not be trusted
    lines[1] = json.dumps(altered, sort_keys=True, separators=(",", ":"))
    path.write_text("\n".join(lines) + "\n" + lines[2][: len(lines[2]) // 2])  # a torn last line
    with pytest.warns(CorruptRecordWarning, match="skipped 2 corrupt line"):
        df = store.records()
    assert sorted(df["key"]) == ["k0", "k2"]
    # Appending after a torn line starts a fresh line; the torn one stays skipped, never merged.
    store.append(dict(kind="unit", key="k3", target="llvm", status="ok", median_us=3.0))
    with pytest.warns(CorruptRecordWarning):
        assert sorted(store.records()["key"]) == ["k0", "k2", "k3"]
    assert ("unit", "k3", "llvm") in store.done()


def test_a_line_is_checked_on_its_text_and_a_line_written_another_way_on_its_record():
    """The CRC of a line as the store writes it is checked on the line's text (the ``crc`` field taken out, first
    key or not); a line another writer spaced differently is checked by serialising its record again; an altered
    value fails both."""
    from autoplace.profile.store import _crc, _intact

    for record in (dict(a=1, kind="unit", median_us=2.5), dict(kind="unit", median_us=2.5, nested={"crc": "x"})):
        record["crc"] = _crc(record)
        line = json.dumps(record, sort_keys=True, separators=(",", ":"))
        assert _intact(line, json.loads(line))
        spaced = json.dumps(record, indent=1)
        assert _intact(spaced, json.loads(spaced))
        altered = line.replace("2.5", "2.6")
        assert not _intact(altered, json.loads(altered))
    assert not _intact('{"kind":"unit"}', {"kind": "unit"}) and not _intact("[]", [])


def test_kernel_descriptions_added_later_are_merged_into_the_records_that_lack_them(tmp_path):
    store = ProfileStore(str(tmp_path / "p"))
    store.append(dict(kind="unit", key="old", target="llvm", status="ok", median_us=1.0))
    store.append(dict(kind="unit", key="new", target="llvm", status="ok", median_us=1.0, read_strides=[1.0]))
    store.append(dict(kind="model", key="old", target="llvm", status="ok", median_us=9.0))
    before = (tmp_path / "p" / "records.jsonl").read_bytes()
    assert store.add_unit_fields({"old": {"read_strides": [64.0]}, "new": {"read_strides": [2.0]}}) == 2
    assert store.add_unit_fields({"gone": {"read_strides": None}}) == 3  # merged, not replaced
    assert (tmp_path / "p" / "records.jsonl").read_bytes() == before  # timed records are never rewritten
    df = store.records().set_index(["kind", "key"])
    assert df.loc[("unit", "old"), "read_strides"] == [64.0]
    assert df.loc[("unit", "new"), "read_strides"] == [1.0]  # what was measured with the kernel wins
    assert not isinstance(df.loc[("model", "old"), "read_strides"], list)  # unit records only
    assert not list(tmp_path.glob("p/*.tmp"))
    (tmp_path / "p" / ProfileStore.UNIT_FIELDS).write_text('{"old": ')  # torn: said, and left out
    with pytest.warns(CorruptRecordWarning, match="run the back-fill again"):
        assert not isinstance(store.records().set_index(["kind", "key"]).loc[("unit", "old"), "read_strides"], list)



def test_the_back_fill_describes_the_current_kernels_and_skips_older_schedules(tmp_path):
    from autoplace.backend.cpu_schedules import SCHEDULE_VERSION
    from autoplace.profile.access import backfill_read_access

    units = extract_units(zoo.get("mlp"), "llvm")
    store = ProfileStore(str(tmp_path / "p"))
    for u in units:  # timed before records said how kernels read
        store.append(dict(kind="unit", key=u.key, target="llvm", status="ok", median_us=1.0, model="mlp",
                          cpu_schedule=SCHEDULE_VERSION))
    store.append(dict(kind="unit", key="llvm-older-schedule", target="llvm", status="ok", median_us=1.0,
                      model="no-such-model", cpu_schedule=SCHEDULE_VERSION - 1))
    store.append(dict(kind="unit", key="llvm-size-no-longer-drawn", target="llvm", status="ok", median_us=1.0,
                      model="mlp", cpu_schedule=SCHEDULE_VERSION))
    report = backfill_read_access(store, progress=False)
    assert report["kernels"] == len({u.key for u in units}) + 1 and report["unmatched"] == 1
    assert report["skipped_models"] == []  # the older schedule's record is not looked for at all
    fields = store.unit_fields()
    assert set(fields) == {u.key for u in units} | {"llvm-size-no-longer-drawn"}
    assert all(fields[u.key]["read_strides"] == u.read_strides for u in units)
    assert fields["llvm-size-no-longer-drawn"]["read_strides"] is None
    again = backfill_read_access(store, progress=False)  # done once, never again: no model rebuilt for the stale key
    assert again["kernels"] == 0 and again["models"] == 0

def test_end_to_end_records_say_which_arguments_are_inputs_and_older_ones_are_told(tmp_path):
    """The VM checks an input of ``main`` at several times a weight's cost, so model records carry ``num_inputs``
    beside ``num_args``; records made before get it from the model rebuilt by name (nothing timed), merged in when
    the store is read, never written into the timed records."""
    from autoplace.profile.access import backfill_model_inputs
    from autoplace.profile.job import model_fields

    model = zoo.get("seed003")
    placement = autoplace.place(model)
    fields = model_fields(model, extract_units(model, "llvm"), placement, "llvm")
    assert fields["num_inputs"] == 3 == fields["num_args"]  # (a + b) - (b + c): three inputs, no weight
    store = ProfileStore(str(tmp_path / "p"))
    for name in ("seed003", "mlp", "my-model.onnx"):  # timed before records said it; a model file is not rebuilt
        store.append(dict(kind="model", key=name, target="llvm", status="ok", median_us=1.0, num_args=3))
    report = backfill_model_inputs(store, progress=False)
    assert report["models"] == 3 and report["added"] == 2 and report["skipped_models"] == ["my-model.onnx"]
    inputs = store.records().set_index("key")["num_inputs"]
    assert inputs["seed003"] == 3 and inputs["mlp"] == 1 and pd.isna(inputs["my-model.onnx"])
    assert "num_inputs" not in (tmp_path / "p" / "records.jsonl").read_text()
    assert backfill_model_inputs(store, progress=False)["added"] == 0


def test_foreign_records_are_left_out_unless_asked(tmp_path):
    store = ProfileStore(str(tmp_path / "p"))
    store.append(dict(kind="unit", key="mine", target="llvm", status="ok", median_us=1.0))
    store.append(dict(kind="unit", key="theirs", target="llvm", status="ok", median_us=1.0,
                      hardware_id="some-other-box-8c"))
    with pytest.warns(ForeignProfileWarning, match="other hardware"):
        assert list(store.records()["key"]) == ["mine"]
    with pytest.warns(ForeignProfileWarning, match="included"):
        assert sorted(store.records(allow_foreign=True)["key"]) == ["mine", "theirs"]


def test_kernel_fails_on_one_target_and_not_the_other():
    """A GPU-scheduled kernel (thread bindings) compiles for CUDA but not for the CPU: it is recorded as
    unsupported on the CPU only. (CUDA kernels compile here with nvcc; running them needs a GPU.)"""
    unit = extract_units(zoo.get("mlp"), {"kind": "cuda", "arch": "sm_90"})[1]
    cuda = tvm.target.Target({"kind": "cuda", "arch": "sm_90"}, host="llvm")
    with KernelTimer(compile_only=True) as timer:
        on_cuda = timer.measure(unit, cuda)
    unit.target_kind = "llvm"
    with KernelTimer(repeat=2, min_repeat_ms=1) as timer:
        on_cpu = timer.measure(unit, tvm.target.Target("llvm"))
    assert on_cuda["status"] == "compiled"
    assert on_cpu["status"] == "error" and "compile" in on_cpu["error"]


JOB = textwrap.dedent(
    """
    import sys
    from autoplace import zoo
    from autoplace.profile import KernelTimer, ProfileStore, profile_models
    if __name__ == "__main__":  # the kernel timer's worker process imports this script again
        store = ProfileStore(sys.argv[1])
        timer = KernelTimer(repeat=2, min_repeat_ms=10)
        profile_models([zoo.get("cnn"), zoo.get("mlp")], {"cpu": "llvm"}, store, copies=False,
                       end_to_end=False, timer=timer, progress=False)
    """
)


def test_resume_after_kill_loses_nothing(tmp_path):
    folder = str(tmp_path / "p")
    script = tmp_path / "job.py"
    script.write_text(JOB)
    records = os.path.join(folder, "records.jsonl")
    proc = subprocess.Popen([sys.executable, str(script), folder], start_new_session=True)
    deadline = time.time() + 240
    while time.time() < deadline:
        if os.path.exists(records):
            with open(records) as f:
                if len(f.read().splitlines()) >= 4:
                    break
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # mid-job, maybe mid-write
    proc.wait()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CorruptRecordWarning)
        before = ProfileStore(folder).records()
    assert 4 <= len(before)
    subprocess.run([sys.executable, str(script), folder], check=True, timeout=600)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CorruptRecordWarning)
        after = ProfileStore(folder).records()
    expected = {u.key for m in ("cnn", "mlp") for u in extract_units(zoo.get(m), "llvm")}
    assert set(after["key"]) == expected  # every kernel measured
    assert len(after) == len(expected)  # none measured twice
    assert (after["status"] == "ok").all(), after[after["status"] != "ok"][["func_name", "status", "error"]]
    assert set(before["key"]) <= set(after["key"])  # nothing that was on disk got lost


def test_remote_bundle_runs_with_the_runner_alone_and_merges(tmp_path):
    """Build here, run with the bundle's standalone runner, merge: the CPU stands in for the device box."""
    from autoplace.profile.job import fastest_rounds
    from autoplace.profile.remote import build_bundle, merge_records

    bundle = tmp_path / "bundle"
    manifest = build_bundle([zoo.get("seed003")], {"cpu0": "llvm", "cpu1": "llvm"}, str(bundle), copy_sizes=(4, 4096),
                            rounds=2)
    assert len(manifest["units"]) == 1 and len(manifest["copies"]) == 4 and manifest["rounds"] == 2
    assert (bundle / manifest["stream"]).exists()  # the runner's streaming kernel for in-model timing
    env = {k: v for k, v in os.environ.items() if k not in ("TVM_NUM_THREADS", "OMP_NUM_THREADS")}
    run = [sys.executable, str(bundle / "runner.py"), str(bundle), "--repeat", "2", "--min-repeat-ms", "1"]
    # with the CPUs a runner started from a shell has, not the one CPU TVM's pool pinned this thread to (the runner's
    # in-model timing evicts the L2 of the CPUs it starts with)
    restore_usable_cpus()
    subprocess.run(run, check=True, timeout=300, cwd=str(tmp_path), env=env)  # the bundle's 2 rounds; no autoplace
    lines = (bundle / "records.jsonl").read_text().splitlines()
    assert sorted({json.loads(line)["round"] for line in lines}) == [1, 2] and len(lines) % 2 == 0
    # resumable by item and round: a third round adds one line per item, nothing else is timed again
    subprocess.run(run + ["--rounds", "3"], check=True, timeout=300, cwd=str(tmp_path), env=env)
    assert len((bundle / "records.jsonl").read_text().splitlines()) == len(lines) * 3 // 2
    folder = merge_records(str(bundle / "records.jsonl"), str(tmp_path / "profiles"))
    df = ProfileStore(folder).records()
    assert set(df["kind"]) == {"unit", "copy", "copy_fit", "launch", "model"}
    assert (df["status"] == "ok").all()
    # the model built on the CPU, timed end to end and its kernels inside its runs, as a local job's model record:
    # what prices that model's kernels on the box (its CPU-heavy plans were priced 14-20% low from warm times)
    from autoplace.cost_model import CostTable
    from autoplace.profile.in_context import IN_CONTEXT_TIMING

    model = df[df["kind"] == "model"].iloc[0]
    assert model["key"] == "seed003" and model["target"] == "llvm" and model["rounds"] == 3 and model["median_us"] > 0
    assert model["in_context_timing"] == IN_CONTEXT_TIMING and len(model["round_in_context_us"]) == 3
    assert len(model["in_context_us"]) == len(model["unit_keys"]) == 1
    assert model["in_context_us"][0] >= 0 and len(model["in_context_kernel_us"]) == 1
    # seed003's one kernel takes about 1 us: on a loaded host a round can read it at or under the hook's own cost
    # (0 once that is taken off; the suite beside two other jobs, session 45), not every round
    assert max(r[0] for r in model["round_in_context_us"]) > 0
    table = CostTable(df)
    assert table.in_context_[("llvm", tuple(model["unit_keys"]))] == model["in_context_us"]
    # one record per item, its rounds merged as a profile job merges them (median of the fastest rounds)
    unit = df[df["kind"] == "unit"].iloc[0]
    assert unit["rounds"] == 3 and len(unit["round_medians_us"]) == 3 and "round" not in df
    assert unit["median_us"] == pytest.approx(float(np.median(fastest_rounds(unit["round_medians_us"]))))
    # CPU kernels are timed in-model as well, as a local job times them (the merged rounds alike)
    from autoplace.profile.cache_state import IN_MODEL_TIMING, usable_l2_bytes

    assert unit["in_model_timing"] == IN_MODEL_TIMING and unit["l2_bytes"] == usable_l2_bytes()
    assert len(unit["round_in_model_medians_us"]) == 3 and unit["in_model_median_us"] > 0
    assert unit["in_model_median_us"] == pytest.approx(
        float(np.median(fastest_rounds(unit["round_in_model_medians_us"]))))
    assert len(df[df["kind"] == "copy"]) == 4
    # TVM alone would run CPU kernels on half the logical CPUs; the runner uses every physical core
    from autoplace.backend.cpu_threads import physical_cores

    cores = physical_cores()
    assert json.loads((bundle / "metadata.json").read_text())["cpu_threads"] == cores
    assert (df.loc[df["kind"] == "unit", "threads"] == cores).all()
    again = merge_records(str(bundle / "records.jsonl"), str(tmp_path / "profiles"))  # idempotent
    assert len(ProfileStore(again).records()) == len(df)


def test_a_bundle_says_which_vector_instructions_its_cpu_code_needs_and_a_cpu_without_them_skips_it(tmp_path):
    """CPU code for ``emeraldrapids`` (AVX-512) dies on an AVX2-only box at its first call: the manifest names the
    instruction sets (as /proc/cpuinfo spells them) and the runner skips the CPU items of a bundle this CPU cannot
    run, saying how to pack for it, instead of crashing item after item."""
    import tvm

    from autoplace.profile.remote import build_bundle, cpu_flags_needed
    from autoplace.profile.remote_runner import missing_cpu_flags

    avx512 = cpu_flags_needed(tvm.target.Target({"kind": "llvm", "mcpu": "emeraldrapids"}))
    assert {"avx2", "fma", "avx512f", "avx512bw", "avx512_vnni"} <= set(avx512)
    assert cpu_flags_needed(tvm.target.Target({"kind": "llvm", "mcpu": "x86-64-v3"})) == ["avx", "avx2", "f16c", "fma"]
    assert missing_cpu_flags(avx512, "processor : 0\nflags : fpu sse2 avx avx2 fma f16c\n")[:2] == ["avx512_bf16",
                                                                                                  "avx512_bitalg"]
    assert missing_cpu_flags(avx512, "processor : 0\n") == []  # flags unreadable: nothing to tell by
    # A Zen 5 runs its own znver5 code: every instruction set LLVM's znver5 implies, by the name /proc/cpuinfo gives
    # it (the AVX-512 flags of the Zen 5 of session 48; avx512vp2intersect is avx512_vp2intersect there)
    zen5 = ("processor : 0\nflags : fpu sse2 avx avx2 fma f16c avx_vnni avx512f avx512dq avx512ifma avx512cd avx512bw "
            "avx512vl avx512_bf16 avx512vbmi avx512_vbmi2 avx512_vnni avx512_bitalg avx512_vpopcntdq "
            "avx512_vp2intersect\n")
    assert missing_cpu_flags(cpu_flags_needed(tvm.target.Target({"kind": "llvm", "mcpu": "znver5"})), zen5) == []
    # A Sierra Forest's code needs LLVM's avxifma, avxneconvert and avxvnniint8, which Linux does not list (KVM-only
    # or hidden flags): only what /proc/cpuinfo can show is asked for, so its own bundle runs there.
    sierra_forest = "processor : 0\nflags : fpu sse2 avx avx2 fma f16c avx_vnni\n"
    needed = cpu_flags_needed(tvm.target.Target({"kind": "llvm", "mcpu": "sierraforest"}))
    assert {"avx2", "avx_vnni"} <= set(needed) and missing_cpu_flags(needed, sierra_forest) == []

    bundle = tmp_path / "bundle"
    manifest = build_bundle([zoo.get("seed003")], {"cpu": {"kind": "llvm", "mcpu": "x86-64-v3"}}, str(bundle),
                            copy_sizes=())
    assert manifest["cpu_flags_needed"] == ["avx", "avx2", "f16c", "fma"]
    manifest["cpu_flags_needed"] = ["avx2", "avx1024"]  # an instruction set no CPU has
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    env = {k: v for k, v in os.environ.items() if k not in ("TVM_NUM_THREADS", "OMP_NUM_THREADS")}
    done = subprocess.run([sys.executable, str(bundle / "runner.py"), str(bundle), "--repeat", "1"], check=True,
                          timeout=300, cwd=str(tmp_path), env=env, capture_output=True, text=True)
    assert "this CPU lacks avx1024" in done.stdout and "mcpu" in done.stdout
    records = bundle / "records.jsonl"
    assert not records.exists() or not records.read_text().strip()  # skipped, not recorded as failures
    # Appending kernels for a lesser CPU keeps what the bundle's earlier kernels need.
    appended = build_bundle([zoo.get("mlp")], {"cpu": {"kind": "llvm", "mcpu": "x86-64-v3"}}, str(bundle),
                            copy_sizes=(), append=True)
    assert appended["cpu_flags_needed"] == ["avx", "avx1024", "avx2", "f16c", "fma"]


def test_a_bundles_stream_reads_short_vectors_on_one_thread_and_long_ones_in_parallel(tmp_path):
    """The bundle's streaming kernels double any length of float32 vector; the runner takes the one-thread one
    below the manifest's threshold (as autoplace schedules an elementwise kernel) and the parallel one from it."""
    import numpy as np
    import tvm

    from autoplace.profile.remote import STREAM_PARALLEL_MIN_ELEMS, export_stream_kernel
    from autoplace.profile.remote_runner import stream_by_length

    calls = []
    fake = {"main": lambda x, y: calls.append("main"), "serial": lambda x, y: calls.append("serial")}
    stream = stream_by_length(fake, 1000)
    for n in (999, 1000, 16):
        stream(np.zeros(n), None)
    assert calls == ["serial", "main", "serial"]
    path = str(tmp_path / "stream.so")
    export_stream_kernel("llvm", path)
    stream = stream_by_length(tvm.runtime.load_module(path), STREAM_PARALLEL_MIN_ELEMS)
    for n in (37, STREAM_PARALLEL_MIN_ELEMS + 5):
        x = np.arange(n, dtype="float32")
        y = tvm.runtime.empty((n,), "float32", tvm.cpu())
        stream(tvm.runtime.tensor(x), y)
        np.testing.assert_array_equal(y.numpy(), 2 * x)


def test_bundle_rounds_merge_per_item_in_round_order_and_keep_a_failure():
    from autoplace.profile.remote import merge_bundle_rounds

    def ok(key, r, us):
        return dict(kind="unit", key=key, target="llvm", status="ok", median_us=us, min_us=us, max_us=us, samples=3,
                    round=r, measured_at=f"t{r}")

    merged = merge_bundle_rounds([ok("b", 1, 1.0), ok("a", 2, 2.0), ok("a", 1, 1.0), ok("b", 2, 1.0), ok("a", 3, 1.05)])
    assert [r["key"] for r in merged] == ["b", "a"]  # where each item first appears
    a = merged[1]
    assert a["rounds"] == 3 and a["round_medians_us"] == [1.0, 2.0, 1.05] and a["median_us"] == pytest.approx(1.025)
    assert a["measured_at"] == "t3" and "round" not in a  # when the box measured it, not when it was merged
    failed = dict(ok("a", 2, 0.0), status="error", error="lost")
    assert [r["status"] for r in merge_bundle_rounds([ok("a", 1, 1.0), failed, ok("a", 3, 1.0)])] == ["error"]


def test_a_kernel_that_failed_on_an_earlier_call_and_ran_on_a_later_one_is_merged(tmp_path):
    """Session 38's box failed detect-base's CPU top-k (a library the runner did not load yet); session 41's ran it.
    The merge skips what a profile already holds, but not a kernel whose earlier record is a failure: its ok record
    is appended, and the profile's readers keep the last record of a key. A failure after an ok record, or the
    same ok record again, adds nothing."""
    import tvm

    from autoplace.profile.remote import merge_records
    from autoplace.profile.store import _crc

    def write(name, *records):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "metadata.json").write_text(json.dumps(dict(hardware_id="box", tvm_version=tvm.__version__)))
        with open(folder / "records.jsonl", "w") as f:
            for record in records:
                record = dict(record, hardware_id="box", tvm_version=tvm.__version__, measured_at="t", round=1)
                f.write(json.dumps(dict(record, crc=_crc(record))) + "\n")
        return str(folder / "records.jsonl")

    unit = dict(kind="unit", key="llvm-topk", target="llvm", samples=3)
    failed = dict(unit, status="error", error="cannot find tvm.contrib.sort.topk")
    ran = dict(unit, status="ok", median_us=965.0, min_us=960.0, max_us=970.0)
    profiles = str(tmp_path / "profiles")
    folder = merge_records(write("call1", failed), profiles)
    merge_records(write("call2", ran), profiles)
    merge_records(write("call3", failed), profiles)
    merge_records(write("call4", ran), profiles)
    df = ProfileStore(folder).records()
    assert list(df["status"]) == ["error", "ok"]
    assert df.drop_duplicates(subset=["key", "target"], keep="last")["median_us"].tolist() == [965.0]


def test_a_plan_bundle_can_carry_yardstick_kernels_from_the_profile_bundle(tmp_path):
    """``experiments/gpu/plans.py --yardstick``: a few kernels of the profile bundle timed with the plans, so plans
    timed on another box than the profile's (a fresh GPU box each call) say how that box differs."""
    import autoplace
    from autoplace.profile.remote import build_bundle, build_plan_bundle
    from experiments.gpu.plans import add_yardstick

    profile = tmp_path / "profile"
    build_bundle([zoo.get("mlp")], {"cpu0": "llvm"}, str(profile), copy_sizes=())
    plans = tmp_path / "plans"
    build_plan_bundle({("seed003", "all"): autoplace.place(zoo.seed003(), None, {}, {"cpu0": "llvm"})}, str(plans))
    assert add_yardstick(str(profile), str(plans), 2) == 2
    subprocess.run([sys.executable, str(plans / "runner.py"), str(plans), "--repeat", "2", "--min-repeat-ms", "1"],
                   check=True, timeout=300, cwd=str(tmp_path))
    records = [json.loads(line) for line in (plans / "records.jsonl").read_text().splitlines()]
    assert sorted(r["kind"] for r in records) == ["plan", "unit", "unit"]
    assert all(r["status"] == "ok" for r in records) and all(r["in_model_median_us"] > 0 for r in records
                                                             if r["kind"] == "unit")
    # a kernel with weights also with its weights flushed from every cache, as a local job times it
    from autoplace.profile.cache_state import WEIGHTS_COLD_TIMING

    with_weights = [r for r in records if r["kind"] == "unit" and r.get("weight_args")]
    assert with_weights and all(r["weights_cold_timing"] == WEIGHTS_COLD_TIMING and r["weights_cold_median_us"] > 0
                                for r in with_weights)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc to compile CUDA kernels")
def test_a_gpu_bundle_carries_cuda_machine_code_built_here(tmp_path):
    """Without a GPU driver here TVM would store each CUDA kernel as CUDA C, which the GPU box compiles when it
    loads it (~0.9 s a kernel on the H200 box); the bundle builder compiles it here (fatbin) against a stand-in
    driver, and this machine still has no CUDA device. ``AUTOPLACE_CUDA_SOURCE=1`` keeps TVM's way."""
    code = textwrap.dedent(f"""
        import json, os, tvm
        from autoplace import zoo
        from autoplace.profile.remote import build_bundle
        targets = {{"cpu": "llvm", "gpu": {{"kind": "cuda", "arch": "sm_90"}}}}
        manifest = build_bundle([zoo.get("seed003")], targets, {str(tmp_path / "b")!r}, copy_sizes=(4,), log=lambda *a: 0)
        files = [u["file"] for u in manifest["units"] if u["kind"] == "cuda"]
        blobs = [open(os.path.join({str(tmp_path / "b")!r}, f), "rb").read() for f in files]
        print(json.dumps(dict(code=manifest.get("cuda_code"), elf=[b[64:].count(b"\\x7fELF") for b in blobs],
                              source=[b.count(b"__global__") for b in blobs], exist=tvm.cuda(0).exist)))
        """)
    for env, machine_code in (({}, True), ({"AUTOPLACE_CUDA_SOURCE": "1"}, False)):
        if (tmp_path / "b").exists():
            shutil.rmtree(tmp_path / "b")
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                             env={**os.environ, **env})
        assert run.returncode == 0, run.stderr[-3000:]
        out = json.loads(run.stdout.strip().splitlines()[-1])
        assert out["exist"] is False and len(out["elf"]) == 1
        if machine_code:
            assert out["code"].startswith("machine code") and out["elf"] == [1] and out["source"] == [0]
        else:
            assert out["code"].startswith("CUDA C") and out["source"][0] > 0


def test_a_bundle_grows_by_appending_and_compiles_only_the_kinds_asked(tmp_path):
    """``build_bundle(append=True)`` adds kernels to a bundle (its items stay, probes are not repeated);
    ``kernel_kinds`` limits the models' kernels to some target kinds (GPU training data without CPU rounds). The CLI
    refuses a kind no target has."""
    from autoplace.profile.remote import build_bundle

    bundle = tmp_path / "b"
    first = build_bundle([zoo.get("seed003")], {"cpu": "llvm"}, str(bundle), copy_sizes=(), log=lambda *a: 0)
    grown = build_bundle([zoo.get("mlp")], {"cpu": "llvm"}, str(bundle), copy_sizes=(), append=True, log=lambda *a: 0)
    mlp_units = {u.key for u in extract_units(zoo.get("mlp"), "llvm")}
    assert {u["record"]["key"] for u in grown["units"]} == {u["record"]["key"] for u in first["units"]} | mlp_units
    assert len(grown["launch"]) == len(first["launch"]) and grown["stream"] == first["stream"]
    assert json.loads((bundle / "manifest.json").read_text())["units"] == grown["units"]
    none = build_bundle([zoo.get("mlp")], {"cpu": "llvm"}, str(tmp_path / "c"), copy_sizes=(), kernel_kinds={"cuda"},
                        log=lambda *a: 0)
    assert none["units"] == [] and none["launch"]  # no kernel of that kind; the probes of the targets still
    run = subprocess.run([sys.executable, "-m", "autoplace", "profile", "--zoo", "mlp", "--targets", '{"cpu": "llvm"}',
                          "--bundle", str(tmp_path / "d"), "--bundle-kinds", "cuda"], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode != 0 and "--bundle-kinds ['cuda']: no target of that kind" in run.stderr


def test_a_runner_that_died_on_an_item_skips_it_when_resumed(tmp_path):
    """A kernel that kills the process (a crash in the driver, say) must not kill every resumed run too: the runner
    keeps the item in flight in ``OUT.current``, and a runner that finds one without its record writes that record
    as failed and goes on with the rest."""
    from autoplace.profile.remote import build_bundle

    bundle = tmp_path / "bundle"
    manifest = build_bundle([zoo.get("seed003")], {"cpu0": "llvm"}, str(bundle), copy_sizes=())
    died = dict(manifest["units"][0]["record"], round=1)
    (bundle / "records.jsonl.current").write_text(json.dumps(died))
    subprocess.run([sys.executable, str(bundle / "runner.py"), str(bundle), "--repeat", "2", "--min-repeat-ms", "1"],
                   check=True, timeout=300, cwd=str(tmp_path))
    records = [json.loads(line) for line in (bundle / "records.jsonl").read_text().splitlines()]
    mine = [r for r in records if r["key"] == died["key"]]
    assert len(mine) == 1 and mine[0]["status"] == "error" and "died" in mine[0]["error"]
    assert len(records) > 1 and all(r["status"] == "ok" for r in records if r["key"] != died["key"])
    assert not (bundle / "records.jsonl.current").exists()  # a run that ends leaves no item in flight


def test_plan_bundle_times_placed_models_with_the_runner(tmp_path):
    """Placed models (weights on their devices) built here and timed by the standalone runner."""
    import autoplace
    from autoplace.profile.remote import build_plan_bundle

    two = {"cpu0": "llvm", "cpu1": "llvm"}
    plans = {("seed003", "split"): autoplace.place(zoo.seed003(), None, {"relax.add#1": "cpu1"}, two),
             ("mlp", "matmul-on-cpu1"): autoplace.place(zoo.mlp(), None, {"relax.matmul": "cpu1"}, two)}
    bundle = tmp_path / "bundle"
    build_plan_bundle(plans, str(bundle))
    subprocess.run([sys.executable, str(bundle / "runner.py"), str(bundle), "--repeat", "2", "--min-repeat-ms", "1"],
                   check=True, timeout=300, cwd=str(tmp_path))
    records = [json.loads(line) for line in (bundle / "records.jsonl").read_text().splitlines()]
    assert {r["key"] for r in records} == {"seed003:split", "mlp:matmul-on-cpu1"}
    assert all(r["status"] == "ok" and r["median_us"] > 0 for r in records), records


def test_tvm_runs_cpu_kernels_on_every_physical_core_unless_the_user_says(tmp_path):
    """TVM's own default is half the logical CPUs on x86 (1 of 2 on a 2-vCPU VM); ``import autoplace`` makes it
    the physical cores, and a thread count the user set wins."""
    from autoplace.backend.cpu_threads import physical_cores

    code = ("import os, autoplace; from autoplace.backend.cpu_threads import runtime_threads; "
            "print(os.environ.get('TVM_NUM_THREADS'), runtime_threads())")
    env = {k: v for k, v in os.environ.items() if k not in ("TVM_NUM_THREADS", "OMP_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    cores = physical_cores()
    assert 1 <= cores <= len(os.sched_getaffinity(0))
    assert out.stdout.split() == [str(cores), str(cores)]
    out = subprocess.run([sys.executable, "-c", code], env=dict(env, OMP_NUM_THREADS="1"), capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == "1"


def test_rounds_time_every_kernel_and_model_again_and_keep_the_median(tmp_path):
    """``rounds=2``: each kernel and model is timed twice (the second time without compiling), the newest
    record keeps both rounds' medians, how slow the machine ran in each (the canary), the median of the
    fastest ones, and the thread count; a job asking for 3 adds the third round only; ``rounds=0`` measures nothing."""
    import numpy as np

    from autoplace.backend.cpu_threads import runtime_threads
    from autoplace.errors import ProfilingError
    from autoplace.profile import profile_models
    from autoplace.profile.job import fastest_rounds

    def timed(path):
        return path.read_text().splitlines()

    store = ProfileStore(str(tmp_path / "p"))
    with pytest.raises(ProfilingError, match="rounds=0"):
        profile_models([zoo.get("mlp")], {"cpu": "llvm"}, store, rounds=0, progress=False)
    assert not os.path.exists(tmp_path / "p" / "records.jsonl")
    summary = profile_models([zoo.get("mlp")], {"cpu": "llvm"}, store, copies=False, rounds=2, progress=False)
    newest = store.newest_good()
    units = [r for (kind, _, _), r in newest.items() if kind == "unit"]
    assert len(units) == summary["units_unique"] == 3
    for record in [*units, newest[("model", "mlp", "llvm")]]:
        assert record["rounds"] == 2 and len(record["round_medians_us"]) == 2
        assert len(record["round_slowdowns"]) == 2 and record["host_slowdown"] == min(record["round_slowdowns"])
        fastest = fastest_rounds(record["round_medians_us"])
        assert record["median_us"] == pytest.approx(float(np.median(fastest)))
        assert record["min_us"] <= min(record["round_medians_us"]) <= max(record["round_medians_us"]) <= \
            record["max_us"]
        assert record["threads"] == runtime_threads()
    records = store.records()
    assert (records["canary_us"] > 0).all() and (records["host_slowdown"] >= 1).all()
    assert records["host_slowdown"].min() == 1.0  # against the fastest canary of the folder
    lines = len(timed(tmp_path / "p" / "records.jsonl"))
    assert lines == 2 * (3 + 1)  # round 1 and round 2 of 3 kernels and 1 model, nothing else
    profile_models([zoo.get("mlp")], {"cpu": "llvm"}, store, copies=False, rounds=3, progress=False)
    assert len(timed(tmp_path / "p" / "records.jsonl")) == lines + 4
    assert all(r["rounds"] == 3 for r in store.newest_good().values())


def test_max_rounds_time_again_only_what_no_other_round_confirms(tmp_path):
    """A record is confirmed when another round agrees with its fastest within 10%, warm and in-model alike;
    ``max_rounds`` adds rounds to the unconfirmed kernels and models only, up to that many rounds in all, and the
    summary counts those still unconfirmed; a ``max_rounds`` below ``rounds`` is refused before anything runs."""
    from autoplace.errors import ProfilingError
    from autoplace.profile import profile_models
    from autoplace.profile.job import confirmed

    assert confirmed(dict(median_us=10.0, round_medians_us=[10.0, 10.9, 30.0]))
    assert not confirmed(dict(median_us=10.0, round_medians_us=[10.0, 11.5, 30.0]))
    assert not confirmed(dict(median_us=10.0))  # one round
    assert not confirmed(dict(median_us=10.0, round_medians_us=[10.0, 10.2], in_model_median_us=20.0,
                              round_in_model_medians_us=[20.0, 30.0]))
    assert confirmed(dict(median_us=10.0, round_medians_us=[10.0, 10.2], in_model_median_us=20.0,
                          round_in_model_medians_us=[21.0, 20.0]))
    # a model whose two rounds agree, but more slowly than its kernels ran in context in the same runs
    model = dict(kind="model", median_us=9757.0, round_medians_us=[9726.0, 9788.0], in_context_us=[3500.0, 3520.0])
    assert not confirmed(model) and confirmed(dict(model, in_context_us=[4000.0, 4000.0]))
    # rounds that agree, but every one read while the host-speed canary ran slow (over 1.15x its fastest)
    slow = dict(median_us=447.0, round_medians_us=[447.0, 452.0, 419.0], round_slowdowns=[1.62, 1.64, 1.45])
    assert not confirmed(slow)
    assert confirmed(dict(slow, round_slowdowns=[1.62, 1.10, 1.45]))  # one of the agreeing rounds calm
    assert confirmed(dict(slow, round_slowdowns=None))  # timed before the canary: nothing says it ran slow
    # a whole model's rounds count as calm only within CALM (1.05x), the bound its samples are kept by: on the
    # Zen 3 mobilenetv2-base's rounds at 1.13-1.42x read 2237-2389 us, agreeing, and 1417-1535 us at 1.02-1.03x
    shaky_model = dict(kind="model", median_us=2243.6, round_medians_us=[2237.1, 2848.4, 2243.6, 2389.1],
                       round_slowdowns=[1.35, 1.42, 1.28, 1.13])
    assert not confirmed(shaky_model) and confirmed(dict(shaky_model, kind="unit"))
    assert confirmed(dict(shaky_model, round_slowdowns=[1.35, 1.42, 1.28, 1.04]))
    calm_after = dict(slow, round_medians_us=[447.0, 452.0, 419.0, 282.0, 299.0],
                      round_slowdowns=[1.62, 1.64, 1.45, 1.13, 1.08])
    assert confirmed(calm_after)  # the calm rounds are the fastest and agree
    assert not confirmed(dict(calm_after, round_slowdowns=[1.02, 1.0, 1.05, 1.3, 1.2]))  # ... unless they ran slow
    # in-model rounds that began later are matched with the newest canary readings
    assert not confirmed(dict(median_us=10.0, round_medians_us=[10.0, 10.2, 10.1], round_slowdowns=[1.0, 1.5, 1.6],
                              in_model_median_us=20.0, round_in_model_medians_us=[20.0, 20.5]))

    store = ProfileStore(str(tmp_path / "p"))
    with pytest.raises(ProfilingError, match="max_rounds=2 with rounds=3"):
        profile_models([zoo.get("mlp")], {"cpu": "llvm"}, store, rounds=3, max_rounds=2, progress=False)
    assert not os.path.exists(tmp_path / "p" / "records.jsonl")
    profile_models([zoo.get("mlp")], {"cpu": "llvm"}, store, copies=False, rounds=2, progress=False)
    # Make every record confirmed but one kernel's in-model time (rounds 10 and 20 us apart).
    newest = store.newest_good()
    units = sorted(tag for tag in newest if tag[0] == "unit")
    shaky = units[0]
    for tag, record in newest.items():
        fixed = dict(record, round_medians_us=[record["median_us"]] * 2, round_slowdowns=[1.0, 1.0])
        if "in_model_median_us" in record:
            fixed["round_in_model_medians_us"] = [10.0, 20.0] if tag == shaky else [record["in_model_median_us"]] * 2
        store.append(fixed)
    assert [confirmed(r) for r in store.newest_good().values()].count(False) == 1
    lines = len(store.records())
    summary = profile_models([zoo.get("mlp")], {"cpu": "llvm"}, store, copies=False, rounds=2, max_rounds=3,
                             progress=False)
    after = store.newest_good()
    assert len(store.records()) == lines + 1  # the one unconfirmed kernel, timed a third time
    assert after[shaky]["rounds"] == 3 and after[shaky]["round_in_model_medians_us"][:2] == [10.0, 20.0]
    assert all(after[tag]["rounds"] == 2 for tag in after if tag != shaky)
    assert summary["unconfirmed"] == (0 if confirmed(after[shaky]) else 1)
    profile_models([zoo.get("mlp")], {"cpu": "llvm"}, store, copies=False, rounds=2, max_rounds=3, progress=False)
    assert len(store.records()) == lines + 1  # it had its 3 rounds



def test_a_re_timed_kernel_far_from_its_previous_jobs_reading_is_reported(tmp_path):
    """A job can read a kernel slow in every round (its rounds then confirm each other): ``--redo unit`` says
    which re-timed kernels moved 1.5x or more from their previous job's record, either way."""
    from autoplace.profile import profile_models
    from autoplace.profile.job import moved_readings

    old = {("unit", k, "llvm"): dict(median_us=us, cpu_schedule=6) for k, us in (("a", 1.0), ("b", 2.3), ("c", 1.0))}
    new = {("unit", "a", "llvm"): dict(median_us=1.4, cpu_schedule=6), ("unit", "b", "llvm"): dict(median_us=0.9,
           cpu_schedule=6), ("unit", "c", "llvm"): dict(median_us=2.0, cpu_schedule=5)}
    assert moved_readings(old, new) == {("unit", "b", "llvm"): (2.3, 0.9)}  # c: another schedule, not compared
    assert moved_readings(old, {**new, ("unit", "a", "llvm"): dict(median_us=1.5, cpu_schedule=6)}) == {
        ("unit", "a", "llvm"): (1.0, 1.5), ("unit", "b", "llvm"): (2.3, 0.9)}

    store = ProfileStore(str(tmp_path / "p"))
    profile_models([zoo.get("mlp")], {"cpu": "llvm"}, store, copies=False, end_to_end=False, progress=False)
    record = next(r for t, r in store.newest_good().items() if t[0] == "unit")
    store.append({**record, "median_us": 50.0 * record["median_us"]})  # as a job in a slow mode would leave it
    lines = []
    summary = profile_models([zoo.get("mlp")], {"cpu": "llvm"}, store, copies=False, end_to_end=False,
                             progress=False, redo=("unit",), log=lines.append)
    assert summary["moved"] >= 1
    said = [line for line in lines if "re-timed kernels read 1.5x or more apart" in line]
    assert len(said) == 1 and "--rounds N" in said[0] and f"mlp:{record['func_name']}" in said[0], lines

def test_rounds_more_than_10_percent_slower_than_the_fastest_are_left_out(tmp_path):
    """A round whose median is more than 10% above the fastest round's does not count, whatever the canary
    read (it does not see every slowdown); the canary's readings are kept; ``remerge_rounds`` brings records
    merged under an older rule to this one by appending, without timing anything."""
    from autoplace.profile.job import merge_rounds, remerge_rounds

    first = dict(kind="unit", key="k", median_us=10.0, min_us=9.0, max_us=11.0, samples=7, host_slowdown=1.02)
    second = merge_rounds(first, dict(median_us=14.0, min_us=13.0, max_us=15.0, samples=7, host_slowdown=1.01))
    assert second["median_us"] == 10.0 and second["host_slowdown"] == 1.01
    third = merge_rounds(second, dict(median_us=10.4, min_us=10.0, max_us=11.0, samples=7, host_slowdown=1.05))
    assert third["median_us"] == pytest.approx(10.2) and third["round_slowdowns"] == [1.02, 1.01, 1.05]
    assert third["round_medians_us"] == [10.0, 14.0, 10.4] and third["max_us"] == 15.0 and third["samples"] == 21
    old = dict(kind="unit", key="k", median_us=10.0, min_us=9.0, max_us=11.0, samples=7)
    merged = merge_rounds(merge_rounds(old, dict(median_us=14.0, min_us=13.0, max_us=15.0, host_slowdown=1.4)),
                          dict(median_us=10.5, min_us=10.0, max_us=11.0, host_slowdown=1.0))
    assert merged["median_us"] == 10.25 and "host_slowdown" not in merged and "round_slowdowns" not in merged

    store = ProfileStore(str(tmp_path / "p"))
    base = dict(target="llvm", status="ok", min_us=9.0, max_us=15.0)
    store.append(dict(base, kind="unit", key="a", median_us=12.0, round_medians_us=[10.0, 14.0, 12.0], rounds=3))
    store.append(dict(base, kind="unit", key="b", median_us=10.2, round_medians_us=[10.0, 10.4], rounds=2))
    store.append(dict(base, kind="model", key="m", median_us=11.0))
    assert remerge_rounds(store) == 1 and remerge_rounds(store) == 0
    newest = store.newest_good()
    assert newest[("unit", "a", "llvm")]["median_us"] == 10.0 and newest[("unit", "b", "llvm")]["median_us"] == 10.2
    assert len(store.records()) == 4


def test_cpu_kernels_of_older_schedules_are_not_training_data(tmp_path):
    """Records carry the CPU schedules' version; a job marks the kernels the current rules still make (same
    TIR, so the timing holds) without timing them, and the cost model trains on current-version CPU kernels
    only: a kernel the rules no longer make (one that ran in parallel, say) is left out."""
    from autoplace.backend.cpu_schedules import SCHEDULE_VERSION
    from autoplace.cost_model import training_units
    from autoplace.profile import extract_units, profile_models
    from autoplace.profile.cache_state import IN_MODEL_TIMING

    keys = sorted({u.key for u in extract_units(zoo.get("mlp"), "llvm")})
    store = ProfileStore(str(tmp_path / "p"))
    old = dict(kind="unit", target="llvm", status="ok", median_us=2.0, cpu_schedule=SCHEDULE_VERSION - 1,
               in_model_timing=IN_MODEL_TIMING, in_model_median_us=2.0)
    for key in keys + ["llvm-no-longer-made"]:
        store.append(dict(old, key=key))
    assert len(training_units(store.records())) == len(keys) + 1  # no current-version kernel yet: all kept
    # ... but of a profile last run two versions back, only the kernels of its newest version (what its last run
    # timed or marked), not every version mixed
    older = ProfileStore(str(tmp_path / "r"))
    older.append(dict(old, key="llvm-made-two-versions-back", cpu_schedule=SCHEDULE_VERSION - 2))
    older.append(dict(old, key="llvm-made-one-version-back"))
    assert list(training_units(older.records())["key"]) == ["llvm-made-one-version-back"]
    summary = profile_models([zoo.get("mlp")], {"cpu": "llvm"}, store, copies=False, end_to_end=False,
                             progress=False)
    assert summary["measured"] == 0
    newest = store.newest_good()
    assert all(newest[("unit", k, "llvm")]["cpu_schedule"] == SCHEDULE_VERSION for k in keys)
    assert all(newest[("unit", k, "llvm")]["median_us"] == 2.0 for k in keys)
    # ... with whether each runs in parallel (mlp's largest, 8x128x128, is 131K multiply-adds: one thread),
    # the rule that scheduled it and its vector lanes (the 10-wide classifier: 5 lanes with AVX2, the others
    # 8; with AVX-512 10 and 16)
    from autoplace.backend.cpu_schedules import cpu_target, vector_bits

    lanes = vector_bits(cpu_target("llvm")) // 32
    assert {newest[("unit", k, "llvm")]["parallel"] for k in keys} == {False}
    assert {newest[("unit", k, "llvm")]["cpu_rule"] for k in keys} == {"Contraction"}
    assert sorted(newest[("unit", k, "llvm")]["vector_width"] for k in keys) == (
        [10, 16, 16] if lanes == 16 else [5, lanes, lanes])
    assert sorted(training_units(store.records())["key"]) == keys
    # A kernel measured now carries the version.
    fresh = ProfileStore(str(tmp_path / "q"))
    profile_models([zoo.get("mlp")], {"cpu": "llvm"}, fresh, copies=False, end_to_end=False, progress=False)
    assert {r["cpu_schedule"] for r in fresh.newest_good().values()} == {SCHEDULE_VERSION}
    assert all(isinstance(r["parallel"], bool) for r in fresh.newest_good().values())


def test_kernels_a_zen_now_compiles_without_scatters_are_timed_again_with_their_models(tmp_path, monkeypatch):
    """ZEN_LLVM_FEATURES change a kernel's code, not its key (its TIR): a record made before ZEN_FEATURES_VERSION
    is kept only where LLVM's default build of the kernel had no scatter (nor, for a record of version 12, which
    refused gathers too, a gather). A kernel that had one is timed again, and so is every model that launches it;
    the others are marked current without timing."""
    from autoplace.backend.cpu_schedules import SCHEDULE_VERSION, ZEN_FEATURES_VERSION
    from autoplace.profile import extract_units, job, profile_models
    from autoplace.profile.cache_state import IN_MODEL_TIMING
    from autoplace.profile.in_context import IN_CONTEXT_TIMING
    from autoplace.profile.units import unit_key

    model = zoo.get("mlp")
    keys = [u.key for u in extract_units(model, "llvm")]
    scattered, gathered, plain = sorted(set(keys))  # mlp: three kernels
    checked = []

    def compiled(func):  # (gathers, scatters) of LLVM's default build
        checked.append(unit_key(func, "llvm"))
        return checked[-1] in (gathered, plain), checked[-1] == scattered

    monkeypatch.setattr(job, "gathers_and_scatters_without_zen_features", compiled)
    store = ProfileStore(str(tmp_path / "p"))
    old = dict(kind="unit", target="llvm", status="ok", median_us=2.0, cpu_schedule=11,
               in_model_timing=IN_MODEL_TIMING, in_model_median_us=2.0)
    for key in (scattered, gathered):  # timed before the features: a gather alone changes nothing
        store.append(dict(old, key=key))
    store.append(dict(old, key=plain, cpu_schedule=12))  # ... but version 12 built without gathers too
    store.append(dict(kind="model", key=model.name, target="llvm", status="ok", median_us=1e6, unit_keys=keys,
                      in_context_timing=IN_CONTEXT_TIMING, in_context_us=[1.0] * len(keys)))
    summary = profile_models([model], {"cpu": "llvm"}, store, copies=False, progress=False)
    newest = store.newest_good()
    assert sorted(checked) == sorted(set(keys)) and ZEN_FEATURES_VERSION > 12  # each old kernel compiled once
    assert newest[("unit", scattered, "llvm")]["median_us"] != 2.0  # timed again
    assert newest[("unit", plain, "llvm")]["median_us"] != 2.0
    assert newest[("unit", gathered, "llvm")]["median_us"] == 2.0  # kept, marked current
    assert {newest[("unit", k, "llvm")]["cpu_schedule"] for k in keys} == {SCHEDULE_VERSION}
    assert newest[("model", model.name, "llvm")]["median_us"] < 1e6  # its model too
    assert summary["measured"] >= 2
    # the records are current now: nothing is compiled or timed again
    checked.clear()
    again = profile_models([model], {"cpu": "llvm"}, store, copies=False, progress=False)
    assert checked == [] and again["measured"] == 0


def test_cpu_kernels_are_timed_warm_and_in_model_and_old_records_are_timed_again(tmp_path):
    """A CPU kernel is also timed in-model (L2 evicted, its activation inputs read back: about as slow as warm
    or slower); the rounds of both are merged alike; a job times again the kernels whose records predate the
    in-model timing."""
    import numpy as np

    from autoplace.profile import profile_models
    from autoplace.profile.cache_state import IN_MODEL_TIMING, WEIGHTS_COLD_TIMING, usable_l2_bytes
    from autoplace.profile.job import fastest_rounds

    store = ProfileStore(str(tmp_path / "p"))
    # mlp: 1-3 us kernels (warm only); mlp-base: 13 us to 2 ms matmuls with 0.04-16 MB of weights
    models = [zoo.get("mlp"), zoo.parse("mlp-base")]
    keys = {u.key for m in models for u in extract_units(m, "llvm")}
    old = dict(kind="unit", target="llvm", status="ok", median_us=2.0)  # timed before in-model timing existed
    for key in keys:
        store.append(dict(old, key=key))
    summary = profile_models(models, {"cpu": "llvm"}, store, copies=False, end_to_end=False, rounds=2,
                             progress=False)
    assert summary["measured"] == len(keys)
    newest = [r for (kind, _, _), r in store.newest_good().items() if kind == "unit"]
    assert len(newest) == len(keys)
    for record in newest:
        # the L2 of the CPUs this process had at import, whatever CPU TVM's pool pinned its thread to since
        assert record["in_model_timing"] == IN_MODEL_TIMING and record["l2_bytes"] == usable_l2_bytes()
        assert len(record["round_in_model_medians_us"]) == 2
        assert record["in_model_median_us"] == pytest.approx(
            float(np.median(fastest_rounds(record["round_in_model_medians_us"]))))
        # About as slow as warm or slower, within what a shared host does: on a 2-core Xeon (family 6 model 207,
        # 2026-11-26) mlp-base's matmuls read 0.45-0.66x warm in-model in some runs (warm 4.5 ms, in-model 2.5 ms),
        # and at the session's start commit too: the host, not the timing code.
        assert 0.4 * record["median_us"] < record["in_model_median_us"] < 6 * record["median_us"] + 5
        # a kernel with weights timed a third time, its weights flushed from every cache (rounds merged alike)
        if record["weight_args"]:
            assert record["weights_cold_timing"] == WEIGHTS_COLD_TIMING
            assert len(record["round_weights_cold_medians_us"]) == 2 and record["weights_cold_min_us"] > 0
            assert record["weights_cold_median_us"] == pytest.approx(
                float(np.median(fastest_rounds(record["round_weights_cold_medians_us"]))))
        else:
            assert "weights_cold_median_us" not in record
    assert sum(bool(r["weight_args"]) for r in newest) >= 2
    assert profile_models(models, {"cpu": "llvm"}, store, copies=False, end_to_end=False, progress=False,
                          rounds=2)["measured"] == 0  # nothing left to time
    # a kernel with weights whose record lacks the weights-cold timing (profiled before session 44) is timed again
    with_weights = next(r for r in newest if r["weight_args"])
    store.append({k: v for k, v in with_weights.items() if not k.startswith(("weights_cold", "round_weights_cold"))})
    assert profile_models(models, {"cpu": "llvm"}, store, copies=False, end_to_end=False, progress=False,
                          rounds=2)["measured"] == 1
    # ... going on with its rounds: the warm and in-model ones of before stay, two weights-cold ones begin, each
    # with the in-model round timed beside it
    again = store.newest_good()[("unit", with_weights["key"], "llvm")]
    assert again["round_medians_us"][:2] == with_weights["round_medians_us"] and again["rounds"] == 4
    assert again["round_in_model_medians_us"][:2] == with_weights["round_in_model_medians_us"]
    paired, cold = again["round_weights_cold_in_model_us"], again["round_weights_cold_medians_us"]
    assert len(cold) == 2 and paired == again["round_in_model_medians_us"][2:]
    assert again["weights_cold_median_us"] == pytest.approx(again["in_model_median_us"] * float(
        np.median(fastest_rounds(cold))) / float(np.median(fastest_rounds(paired))))


def test_weights_cold_rounds_read_in_a_slow_phase_scale_the_calm_in_model_time():
    """A kernel timed warm and in-model in calm rounds, then weights-cold in a later job while the host ran 1.5x
    slow: its weights-cold time is its calm in-model time times what flushing the weights added within the later
    rounds (there 180 / 150 us), not the slow rounds' 180 us."""
    from autoplace.profile.cache_state import IN_MODEL_TIMING, WEIGHTS_COLD_TIMING
    from autoplace.profile.job import merge_rounds

    calm = dict(kind="unit", key="k", target="llvm", status="ok", median_us=90.0, round_medians_us=[90.0, 91.0],
                min_us=88.0, max_us=95.0, rounds=2, in_model_median_us=100.0, round_in_model_medians_us=[100.0, 101.0],
                in_model_min_us=98.0, in_model_timing=IN_MODEL_TIMING)

    def slow_round(in_model_us, cold_us):
        return dict(median_us=135.0, min_us=130.0, max_us=140.0, in_model_median_us=in_model_us, in_model_min_us=140.0,
                    in_model_timing=IN_MODEL_TIMING, weights_cold_median_us=cold_us, weights_cold_min_us=170.0,
                    weights_cold_timing=WEIGHTS_COLD_TIMING)

    once = merge_rounds(calm, slow_round(150.0, 180.0))
    assert once["in_model_median_us"] == pytest.approx(100.5)  # the calm rounds
    assert once["round_weights_cold_in_model_us"] == [150.0]
    assert once["weights_cold_median_us"] == pytest.approx(100.5 * 180.0 / 150.0)
    twice = merge_rounds(once, slow_round(152.0, 240.0))  # a round slow for the flush alone: not the fastest
    assert twice["round_weights_cold_medians_us"] == [180.0, 240.0]
    assert twice["weights_cold_median_us"] == pytest.approx(100.5 * 180.0 / 151.0)
    # a record timed all three ways in the same rounds: the weights-cold rounds' own median, as before
    both = merge_rounds(slow_round(150.0, 180.0) | dict(kind="unit", key="k", status="ok"), slow_round(160.0, 195.0))
    assert both["weights_cold_median_us"] == pytest.approx(187.5)


def test_cost_tables_price_models_larger_than_the_l2_in_model():
    """A model that touches more bytes per call than the L2 that timed its kernels is priced with the kernels'
    in-model times, measured or (scaled by its op class's measured ratio) predicted, paying the share of their
    excess over the warm times that the L2 cannot hold (``1 - L2 / touched bytes``; all of it with
    ``in_model=True``); a small one warm, and so is a model of one kernel."""
    import pandas as pd

    from autoplace.cost_model import CostTable
    from autoplace.profile.cache_state import IN_MODEL_TIMING, in_model_share, touched_bytes
    from autoplace.profile.in_context import IN_CONTEXT_TIMING

    class Warm:  # a cost model that prices every kernel at 20 us (warm)
        def predict(self, records, target=None):
            return [20.0] * len(records)

        def unseen_ops(self, records, target=None):
            return [[] for _ in records]

    def unit(key, us, in_model_us, weight_bytes, bytes_out=1000, **extra):
        return dict(kind="unit", key=key, target="llvm", status="ok", median_us=us, in_model_median_us=in_model_us,
                    in_model_timing=IN_MODEL_TIMING, l2_bytes=1 << 20, weight_bytes=weight_bytes, bytes_out=bytes_out,
                    anchor_op="relax.matmul", ops=["relax.matmul"], **extra)

    records = [unit("a", 10.0, 15.0, 600_000), unit("b", 2.0, 2.0, 1000), unit("c", 40.0, 60.0, 0)]
    table = CostTable(pd.DataFrame(records), model=Warm())
    assert table.l2_bytes_ == {"llvm": 1 << 20}
    # a (10 us) and c (40 us) in bins of their own; b (2 us) in a third
    assert table.in_model_factor_ == {("llvm", None, 2): 1.5, ("llvm", None, 3): 1.5, ("llvm", None, 0): 1.0}
    assert table.in_model_factor("llvm", "matmul", 20.0) == 1.5 and table.in_model_factor("llvm", "matmul", 500) == 1
    small = [records[0], records[1], records[1]]
    big = small + [dict(records[0], key="a2", weight_bytes=600_000)]  # a2: unmeasured, 1.2 MB of weights in all
    assert touched_bytes(small) == 601_000 + 3000 and touched_bytes(big) == 1_201_000 + 4000
    warm = table.latencies(small, "llvm")
    assert list(warm["latency_us"]) == [10.0, 2.0, 2.0] and not warm["in_model"].any()
    assert in_model_share(small, 1 << 20) == table.in_model_share(small, "llvm") == 0.0
    share = 1 - (1 << 20) / 1_205_000  # 0.13: big outgrows the L2 by 15%
    assert table.in_model_share(big, "llvm") == pytest.approx(share)
    cold = table.latencies(big, "llvm")
    assert cold["latency_us"].tolist() == pytest.approx([10 + 5 * share, 2.0, 2.0, 20 + 10 * share])
    assert cold["in_model"].all() and cold["in_model_share"].tolist() == pytest.approx([share] * 4)
    assert list(cold["source"]) == ["measured"] * 3 + ["predicted"]
    assert list(table.latencies(big, "llvm", in_model=True)["latency_us"]) == [15.0, 2.0, 2.0, 30.0]
    assert list(table.latencies(big, "llvm", in_model=False)["latency_us"]) == [10.0, 2.0, 2.0, 20.0]
    # A model of one kernel finds its data where the kernel's warm timing leaves it, however large.
    alone = [dict(records[2], weight_bytes=4 << 20)] * 2
    assert list(table.latencies(alone, "llvm")["latency_us"]) == [40.0, 40.0]
    share = 1 - (1 << 20) / ((4 << 20) + 1000 + 3 * 1000)  # 0.75: c's weights, b's, three outputs
    assert table.latencies(alone + [records[1]], "llvm")["latency_us"].tolist() == pytest.approx(
        [40 + 20 * share] * 2 + [2.0])
    # A model whose kernels were timed inside it (a record with the same kernels in the same launch order) is
    # priced by those times, in-model or not; another order, or in_context=False, is priced as before.
    timed = CostTable(pd.DataFrame(records + [dict(kind="model", key="m", target="llvm", status="ok", median_us=60.0,
                                                   unit_keys=["a", "b", "b", "a2"], in_context_us=[12, 3, 2.5, 31],
                                                   in_context_timing=IN_CONTEXT_TIMING)]),
                      model=Warm())
    ctx = timed.latencies(big, "llvm")
    assert list(ctx["latency_us"]) == [12, 3, 2.5, 31] and ctx["in_context"].all() and not ctx["in_model"].any()
    assert list(ctx["source"]) == ["measured"] * 4 and list(ctx["band_hi_us"]) == [12, 3, 2.5, 31]
    share = 1 - (1 << 20) / 1_205_000
    assert timed.latencies(big[::-1], "llvm")["latency_us"].tolist() == pytest.approx(
        [20 + 10 * share, 2.0, 2.0, 10 + 5 * share])
    assert list(timed.latencies(big, "llvm", in_model=True, in_context=False)["latency_us"]) == [15.0, 2.0, 2.0, 30.0]
    assert timed.in_context_tried(big, "llvm") and not timed.in_context_tried(big[::-1], "llvm")
    # Several records of one model's kernels (a profile's, then measure="auto"'s in the user's folder) are rounds of
    # one timing: the rounds within 10% of the fastest sum count, so a newer record timed in a slow phase (the
    # Zen 5's demo, session 50: 2436 us against the profile's 2001) no longer overrides a calm one ...
    def context(times, rounds=None, **extra):
        return dict(kind="context", key="ctx", target="llvm", status="ok", unit_keys=["a", "b", "b", "a2"],
                    in_context_us=times, in_context_timing=IN_CONTEXT_TIMING,
                    **({"round_in_context_us": rounds} if rounds else {}), **extra)

    calm = [[12, 3, 2.5, 31], [13, 3, 2.5, 31]]
    slow = context([16, 4, 3, 41], [[16, 4, 3, 41]] * 3, measured_at="2026-11-29T20:48:49+00:00")
    pooled = CostTable(pd.DataFrame(records + [context([12.5, 3, 2.5, 31], calm, measured_at="t0"), slow]),
                       model=Warm())
    assert pooled.in_context_times(big, "llvm") == [12.5, 3, 2.5, 31]  # the two calm rounds, not the three slow
    # ... a round counts once (a record read twice, a job's record repeating the rounds of the one before) ...
    first, second = context([10, 3, 2.5, 31], measured_at="t0"), context([11, 3, 2.5, 31], measured_at="t1")
    twice = CostTable(pd.DataFrame(records + [first, second, first, first]), model=Warm())
    assert twice.in_context_times(big, "llvm") == [10.5, 3, 2.5, 31]
    # ... and measure="always" (in_context_fresh) drops the rounds before it: the user asked for the times of now.
    fresh = CostTable(pd.DataFrame(records + [context([12.5, 3, 2.5, 31], calm, measured_at="t0"),
                                              dict(slow, in_context_fresh=True, measured_at="t1")]), model=Warm())
    assert fresh.in_context_times(big, "llvm") == [16, 4, 3, 41]
    # A model whose build could not be matched to its kernels is priced as before, and not timed again.
    failed = CostTable(pd.DataFrame(records + [dict(kind="context", key="c", target="llvm", status="error",
                                                    unit_keys=["a", "b", "b", "a2"], in_context_error="no match",
                                                    in_context_timing=IN_CONTEXT_TIMING)]), model=Warm())
    assert failed.in_context_tried(big, "llvm") and failed.in_context_times(big, "llvm") is None
    assert failed.latencies(big, "llvm")["latency_us"].tolist() == pytest.approx(
        [10 + 5 * share, 2.0, 2.0, 20 + 10 * share])
    # A profile without in-model timings prices everything warm.
    plain = CostTable(pd.DataFrame([{k: v for k, v in r.items() if not k.startswith(("in_model", "l2"))}
                                    for r in records]), model=Warm())
    assert list(plain.latencies(big, "llvm")["latency_us"]) == [10.0, 2.0, 2.0, 20.0]


def test_model_records_time_every_kernel_in_context_and_older_ones_are_timed_again(tmp_path):
    """A model record also carries each kernel's time inside the model's runs (the VM's instrument hook): one per
    launch, in launch order, together about the end-to-end latency; rounds merged; a job times again the
    models whose record predates it."""
    import numpy as np

    from autoplace.profile import profile_models
    from autoplace.profile.in_context import IN_CONTEXT_TIMING

    store = ProfileStore(str(tmp_path / "p"))
    model = zoo.parse("mlp-base")  # 3 matmul kernels, about 3 ms
    keys = [u.key for u in extract_units(model, "llvm")]
    store.append(dict(kind="model", key=model.name, target="llvm", status="ok", median_us=5.0, unit_keys=keys))
    profile_models([model], {"cpu": "llvm"}, store, copies=False, rounds=2, progress=False)
    record = store.newest_good()[("model", model.name, "llvm")]
    assert record["in_context_timing"] == IN_CONTEXT_TIMING and record["unit_keys"] == keys
    assert record["median_us"] > 100 and record["rounds"] == 2  # timed again, in two rounds
    assert len(record["in_context_us"]) == len(keys) and all(t > 0 for t in record["in_context_us"])
    assert [len(r) for r in record["round_in_context_us"]] == [len(keys)] * 2
    assert record["in_context_us"] == pytest.approx(
        list(np.median(record["round_in_context_us"], axis=0)) if max(map(sum, record["round_in_context_us"]))
        <= 1.1 * min(map(sum, record["round_in_context_us"])) else record["in_context_us"])
    # about the end-to-end latency: within 2x, not 30% (the two are timed seconds apart; on a loaded 2-core host
    # one phase read 1.43x the other, 6400 vs 4478 us); a sum of every run, or of the hook's own cost, is further off
    assert 0.5 * record["median_us"] < sum(record["in_context_us"]) < 2.0 * record["median_us"]
    # at least one run kept (how many depends on how many samples the host-speed canary found calm: 2 in a slow
    # phase of session 20's host, 5 or more on a calm one)
    assert record["in_context_runs"] >= 1 and record["in_context_hook_us"] > 0
    # each kernel's time includes the VM's calls that serve it (its output's allocation): never less
    assert all(t >= k for t, k in zip(record["in_context_us"], record["in_context_kernel_us"]))
    # the build also timed without the hook in the same samples: each round's, and about the end-to-end latency
    assert len(record["round_in_context_wall_us"]) == 2 and all(w > 0 for w in record["round_in_context_wall_us"])
    assert 0.5 * record["median_us"] < record["in_context_wall_us"] < 2.0 * record["median_us"]


def test_a_model_whose_record_launches_other_kernels_than_the_current_build_is_timed_again(tmp_path):
    """A legalization or schedule change gives some kernels new keys (schedule version 9: odd-row
    convolutions, global average pools); a model record naming the old keys times the old build, so the job times
    the model again; one naming the current kernels is left alone."""
    from autoplace.profile import profile_models
    from autoplace.profile.in_context import IN_CONTEXT_TIMING

    store = ProfileStore(str(tmp_path / "p"))
    model = zoo.parse("mlp")
    keys = [u.key for u in extract_units(model, "llvm")]
    old = dict(kind="model", key=model.name, target="llvm", status="ok", median_us=5.0,
               in_context_timing=IN_CONTEXT_TIMING, in_context_us=[1.0] * len(keys))
    store.append(dict(old, unit_keys=["llvm-0000000000000000"] + keys[1:]))
    profile_models([model], {"cpu": "llvm"}, store, copies=False, progress=False)
    record = store.newest_good()[("model", model.name, "llvm")]
    assert record["unit_keys"] == keys and record["median_us"] != 5.0 and record["in_context_us"] != [1.0] * len(keys)
    store.append(dict(old, unit_keys=keys))  # the current kernels: done
    profile_models([model], {"cpu": "llvm"}, store, copies=False, progress=False)
    assert store.newest_good()[("model", model.name, "llvm")]["median_us"] == 5.0


def test_a_job_says_when_its_models_ran_on_a_slower_host_than_the_folders_kernels(tmp_path):
    """End-to-end records timed while the canary read 1.3x, against kernels timed at 1.0x, would read 30% above the
    kernels' sums: the job's log says so and what to run; within 10% it says nothing."""
    from autoplace.profile.job import host_state_warning

    store = ProfileStore(str(tmp_path / "p"))
    for i, slow in enumerate((1.0, 1.02, 0.99)):
        store.append(dict(kind="unit", key=f"k{i}", target="llvm", status="ok", median_us=1.0, host_slowdown=slow))
    store.append(dict(kind="model", key="m", target="llvm", status="ok", median_us=3.0, host_slowdown=1.3))
    store.append(dict(kind="model", key="calm", target="llvm", status="ok", median_us=3.0, host_slowdown=1.05))
    warning = host_state_warning(store, {("model", "m", "llvm")})
    assert "1.30x" in warning and "1.00x" in warning and "+30%" in warning and "--redo model" in warning
    assert host_state_warning(store, {("model", "calm", "llvm")}) == ""


def test_a_model_timed_in_context_slower_than_its_kernels_allow_gets_more_rounds_then_no_record(tmp_path, monkeypatch):
    """measure='auto' times a model in context in rounds (the fastest sums kept); times above what the kernels'
    own times allow (a slow phase of the host the canary does not see) get more rounds for the patience, then no
    record at all, with a warning, so the next call times the model again."""
    import numpy as np

    from autoplace.graph import op_graph
    from autoplace.profile.in_context import CEILING_RATIO, in_context_ceiling_us
    from autoplace.profile.job import measure_in_context

    assert in_context_ceiling_us([10.0, 20.0]) == pytest.approx(CEILING_RATIO * 30 + 2 * 1.0)
    assert in_context_ceiling_us([10.0, float("nan")]) is None and in_context_ceiling_us([]) is None
    model = zoo.parse("mlp")
    units = extract_units(model, "llvm")
    graph = op_graph(model)
    store = ProfileStore(str(tmp_path / "p"))
    plausible = {"llvm": [1e3] * len(units)}  # kernels of a millisecond: any reading of this model is plausible
    records = measure_in_context(model, graph, {"llvm": units}, {"cpu": "llvm"}, store, rounds=2,
                                 kernel_us=plausible, progress=False)
    record = records["llvm"]
    assert record["in_context_rounds"] == 2 and len(record["round_in_context_us"]) == 2
    sums = [sum(r) for r in record["round_in_context_us"]]
    kept = [r for r, s in zip(record["round_in_context_us"], sums) if s <= 1.1 * min(sums)]
    assert record["in_context_us"] == pytest.approx(list(np.median(kept, axis=0)))
    # A ceiling below any reading (kernels of a picosecond would still allow a microsecond per launch, which a
    # loaded host's hook-cost estimate can net a tiny model's readings down to): rounds go on for the patience,
    # then no record.
    from autoplace.profile import in_context, job

    monkeypatch.setattr(in_context, "in_context_ceiling_us", lambda kernel_us: -1.0)
    # (and the cores read together: on a loaded host every round can read them apart, which ends in no record too,
    # with its own warning)
    monkeypatch.setattr(job, "_apart_among_fastest", lambda *args, **kwargs: False)
    store = ProfileStore(str(tmp_path / "q"))
    started = time.perf_counter()
    with pytest.warns(UserWarning, match=r"more than their own times allow .* the next call times them again"):
        records = measure_in_context(model, graph, {"llvm": units}, {"cpu": "llvm"}, store, rounds=1,
                                     kernel_us={"llvm": [1e-6] * len(units)}, patience_s=1.5, progress=False)
    assert records == {} and time.perf_counter() - started >= 1.5
    assert store.records().empty or "context" not in set(store.records()["kind"])


def test_in_context_calls_are_matched_to_the_units_in_launch_order():
    """The VM's calls of one run, its allocation builtins skipped, are the units' kernels in order; a unit the VM
    build made a view is its reshape builtin; any other call sequence is refused."""
    from types import SimpleNamespace

    from autoplace.profile.in_context import align_calls, context_key

    units = [SimpleNamespace(func_name=n) for n in ("matmul", "reshape1", "fused_add_relu")]
    calls = ["vm.builtin.check_tensor_info", "vm.builtin.alloc_storage", "vm.builtin.alloc_tensor", "matmul",
             "vm.builtin.null_value", "vm.builtin.reshape", "vm.builtin.alloc_tensor", "fused_add_relu"]
    assert align_calls(calls, units) == [3, 5, 7]
    with pytest.raises(ValueError, match="2 kernels for 3 units"):
        align_calls(calls[:-1], units)
    with pytest.raises(ValueError, match="'softmax' where the units have 'fused_add_relu'"):
        align_calls(calls[:-1] + ["softmax"], units)
    assert context_key(["a", "b"], "llvm") != context_key(["b", "a"], "llvm") != context_key(["b", "a"], "cuda")


def test_end_to_end_samples_timed_while_the_host_ran_slow_are_left_out():
    """With the canary, each end-to-end sample follows a canary reading; samples after a slow reading (a
    scripted host: every other second sample runs 2x slow, as the canary says) do not count, and a host
    that never calms down gives up after ``patience_s`` with what it has, saying how slow it ran."""
    import itertools

    from autoplace.profile.host_speed import HostSpeed
    from autoplace.profile.job import time_end_to_end

    class Host:  # the canary and the model slow down together
        def __init__(self, pattern):
            self.slow = itertools.cycle(pattern)
            self.now = 1.0

        def canary_us(self):
            self.now = next(self.slow)
            return 100.0 * self.now

    class Runner:
        def __init__(self, host):
            self.host = host

        def time_us(self, inputs, *, number=1, repeat=10):
            return [1000.0 * self.host.now] * repeat

    host = Host([1.0, 2.0, 2.0, 1.05])
    speed = HostSpeed(100.0, best_sharing_us=10.0)
    speed._time_us, speed._sharing_time_us = host.canary_us, lambda: 10.0  # the cores never apart
    timing = time_end_to_end(Runner(host), [], "cuda", repeat=5, speed=speed)
    assert timing["status"] == "ok" and timing["calm_samples"] == 5 and timing["samples"] == 9
    assert timing["median_us"] == 1000.0 and timing["max_us"] == 2000.0  # every sample is in min/max
    assert timing["host_slowdown"] == 1.0 and timing["canary_us"] == 100.0

    slow = Host([1.5, 1.8])
    speed = HostSpeed(100.0, best_sharing_us=10.0)
    speed._time_us, speed._sharing_time_us = slow.canary_us, lambda: 10.0
    timing = time_end_to_end(Runner(slow), [], "cuda", repeat=3, speed=speed, patience_s=0.0)
    assert timing["samples"] == 3 and timing["calm_samples"] == 2 and timing["median_us"] == 1500.0
    assert timing["host_slowdown"] == pytest.approx(1.5)
    assert "host_slowdown" not in time_end_to_end(Runner(slow), [], "cuda", repeat=3)  # no canary: plain median


def test_a_slow_phase_is_not_waited_out_on_every_call():
    """Once a call gave up waiting for calm samples, the next ones wait ``slow_phase_patience_s`` instead of
    ``patience_s`` (a slow phase lasts minutes), and the first call that finds calm samples restores it."""
    import time

    from autoplace.profile.host_speed import HostSpeed

    host = dict(canary_us=150.0)
    speed = HostSpeed(100.0, slow_phase_patience_s=0.0, best_sharing_us=10.0)
    speed._time_us, speed._sharing_time_us = (lambda: host["canary_us"]), (lambda: 10.0)

    def sample():
        time.sleep(0.005)
        return 1.0

    first = speed.calm_samples(sample, 3, patience_s=0.1)
    assert len(first["all_us"]) > 10 and speed.in_slow_phase  # waited out its patience
    second = speed.calm_samples(sample, 3, patience_s=0.1)
    assert len(second["all_us"]) == 3 and speed.in_slow_phase  # gave up at once
    host["canary_us"] = 100.0
    calm = speed.calm_samples(sample, 3, patience_s=0.1)
    assert len(calm["all_us"]) == 3 and not speed.in_slow_phase
    host["canary_us"] = 150.0
    assert len(speed.calm_samples(sample, 3, patience_s=0.1)["all_us"]) > 10  # full patience again



def test_samples_timed_while_the_cores_ran_apart_are_left_out_though_the_matmul_canary_reads_calm():
    """The Zen 5's slow phase (session 49): models 1.3-1.6x slow, the matmul canary calm, the sharing canary (each
    thread reads what another core wrote) 4.5x its fastest. Such a reading is slow (its ratio), a job's report counts
    it, and a model's samples after it are left out; a reading under APART is the matmul's alone."""
    from autoplace.profile.host_speed import APART, SLOW, HostSpeed, _sharing_canary_runner

    host = dict(sharing_us=46.0, model_us=1500.0)
    speed = HostSpeed(100.0, best_sharing_us=10.0)
    speed._time_us, speed._sharing_time_us = (lambda: 100.0), (lambda: host["sharing_us"])
    assert speed.slowdown() == pytest.approx(4.6) and speed.apart and speed.fields()["sharing_canary_us"] == 46.0
    host["sharing_us"] = 1.2 * 10.0  # noise of the fast phase: not apart
    assert speed.slowdown() == 1.0 and not speed.apart and 1.2 < APART
    assert "2 with the cores apart" in speed.report()  # fields() read it again

    pattern = iter([46.0, 46.0, 10.0, 46.0, 10.0, 10.0] + [10.0] * 20)

    def sample():  # the model runs slow while the cores are apart
        return 1500.0 if host["sharing_us"] > APART * 10.0 else 1000.0

    def sharing():
        host["sharing_us"] = next(pattern)
        return host["sharing_us"]

    speed._sharing_time_us = sharing
    calm = speed.calm_samples(sample, 3, patience_s=10.0)
    assert calm["kept_us"] == [1000.0] * 3 and len(calm["all_us"]) == 6 and calm["host_slowdown"] == 1.0
    assert calm["kept_index"] == [2, 4, 5] and not speed.in_slow_phase and not calm["apart"]
    # apart all along: it gives up with what it has, saying how slow
    host_apart = HostSpeed(100.0, best_sharing_us=10.0)
    host_apart._time_us, host_apart._sharing_time_us = (lambda: 100.0), (lambda: 46.0)
    given_up = host_apart.calm_samples(lambda: 1500.0, 3, patience_s=0.0)
    assert given_up["host_slowdown"] == pytest.approx(4.6) and 4.6 > SLOW and host_apart.in_slow_phase
    assert given_up["apart"]  # every sample kept was read with the cores apart
    # the real canary runs and reads a time
    assert _sharing_canary_runner(nbytes=1 << 16)() > 0



def test_a_job_waits_for_a_slow_host_to_calm_down_within_its_budget(monkeypatch):
    """Rounds of a small model's kernels take seconds, a slow phase minutes: before timing again what only slow
    readings have, a job waits for the canaries to read calm, CALM_WAIT_S in all, and says how long it waited."""
    import itertools

    from autoplace.profile import host_speed
    from autoplace.profile.host_speed import HostSpeed

    monkeypatch.setattr(host_speed, "CALM_WAIT_S", 0.5)
    readings = itertools.chain([46.0, 46.0, 46.0], itertools.repeat(10.0))  # the cores apart for three readings
    speed = HostSpeed(100.0, best_sharing_us=10.0)
    speed._time_us, speed._sharing_time_us = (lambda: 100.0), (lambda: next(readings))
    waited = speed.wait_calm(poll_s=0.01)
    assert 0.015 <= waited < 0.4 and speed.slowdown() == 1.0 and not speed.apart
    assert speed.wait_calm() == pytest.approx(0.0, abs=0.01)  # calm now: no wait
    speed._sharing_time_us = lambda: 46.0  # apart for good: the budget ends the wait ...
    assert speed.wait_calm(poll_s=0.01) <= 0.5 and speed.waited_s == pytest.approx(0.5, abs=0.05)
    assert speed.wait_calm(poll_s=0.01) == pytest.approx(0.0, abs=0.01)  # ... for the whole job
    assert "with the cores apart" in speed.report() and speed.apart
    # a canary of its own budget (an experiment timing plans can wait minutes, a profile job CALM_WAIT_S)
    patient = HostSpeed(100.0, best_sharing_us=10.0, wait_budget_s=0.2)
    patient._time_us, patient._sharing_time_us = (lambda: 100.0), (lambda: 46.0)
    assert 0.15 <= patient.wait_calm(poll_s=0.01) <= 0.3 and patient.waited_s < host_speed.CALM_WAIT_S


def test_a_model_timed_in_context_only_while_the_cores_ran_apart_gets_no_record(tmp_path, monkeypatch):
    """The Zen 5's slow phase outlasts a model's in-context rounds and the wait for calm (session 49: cnn-base and
    t5-encoder-base priced 17-22% over their calm times): when every round among the fastest was read with the cores
    apart, the kind gets no record (a warning; its kernels are priced by their own times, the next call times it
    again). A calm round among the fastest keeps the record."""
    import pandas as pd

    from autoplace.graph import op_graph
    from autoplace.profile import host_speed
    from autoplace.profile.job import measure_in_context

    host = dict(sharing_us=46.0)
    monkeypatch.setattr(host_speed, "_canary_runner", lambda: (lambda: 100.0))
    monkeypatch.setattr(host_speed, "_sharing_canary_runner", lambda: (lambda: host["sharing_us"]))
    canaries = pd.DataFrame([dict(canary_us=100.0, sharing_canary_us=10.0)])  # this machine's fastest readings
    model = zoo.parse("mlp")
    units = extract_units(model, "llvm")
    graph = op_graph(model)
    kernels = {"llvm": [1e3] * len(units)}  # kernels of a millisecond: no ceiling in the way
    store = ProfileStore(str(tmp_path / "apart"))
    with pytest.warns(UserWarning, match=r"only while the host's cores ran apart .* the next call times them again"):
        records = measure_in_context(model, graph, {"llvm": units}, {"cpu": "llvm"}, store, rounds=2,
                                     kernel_us=kernels, patience_s=0.5, progress=False, canary_records=canaries)
    assert records == {} and (store.records().empty or "context" not in set(store.records()["kind"]))
    host["sharing_us"] = 11.0  # the cores together again
    store = ProfileStore(str(tmp_path / "together"))
    records = measure_in_context(model, graph, {"llvm": units}, {"cpu": "llvm"}, store, rounds=2,
                                 kernel_us=kernels, patience_s=0.5, progress=False, canary_records=canaries)
    assert records["llvm"]["in_context_rounds"] >= 2 and records["llvm"]["in_context_apart"] is False


def test_kernels_timed_on_another_thread_count_are_measured_again():
    from autoplace.backend.cpu_threads import runtime_threads
    from autoplace.cost_model import CostTable
    from autoplace.optimizer import measured_on_this_machine

    table = CostTable([dict(kind="unit", key="a", target="llvm", status="ok", median_us=1.0,
                            threads=runtime_threads() + 1),
                       dict(kind="unit", key="b", target="llvm", status="ok", median_us=1.0,
                            threads=runtime_threads()),
                       dict(kind="unit", key="c", target="llvm", status="ok", median_us=1.0)])
    assert set(measured_on_this_machine(table).measured_) == {("b", "llvm"), ("c", "llvm")}


def test_a_profile_timed_on_other_threads_warns(tmp_path, monkeypatch):
    from autoplace.backend.cpu_threads import runtime_threads
    from autoplace.profile import find_profiles
    from autoplace.profile.hardware import hardware_metadata

    meta = hardware_metadata()
    monkeypatch.setenv("AUTOPLACE_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "profiles"
    store = ProfileStore(str(root / meta["hardware_id"]), metadata=dict(meta, cpu_threads=runtime_threads() + 1))
    store.append(dict(kind="unit", key="a", target="llvm", status="ok", median_us=1.0))
    with pytest.warns(UserWarning, match=f"on {runtime_threads() + 1} threads, but TVM runs {runtime_threads()}"):
        assert find_profiles({"llvm"}, root=str(root)) == [str(root / meta["hardware_id"])]
    (root / meta["hardware_id"] / "metadata.json").write_text(json.dumps(dict(meta)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        find_profiles({"llvm"}, root=str(root))


def test_a_cuda_kernel_dlights_matmul_rule_fails_on_gets_the_other_rules_not_a_failed_model(monkeypatch):
    """MobileNetV2 fuses a 1x1 conv2d, its bias, ReLU6 and the next depthwise layer's TF-style padding into one
    kernel; dlight's matmul rule asserts on it ("consumers of the cache-write stage that are not properly inlined"),
    which failed the whole model's CUDA build (mobilenetv2-base, session 38). Each CUDA kernel is scheduled alone and
    that one gets the rules after the matmul rule."""
    import torch
    from tvm.s_tir import dlight

    from autoplace import load_model
    from autoplace.profile.units import extract_units
    from autoplace.targets import TargetSet

    failed, apply = [], dlight.ApplyDefaultSchedule

    class Watched:
        def __init__(self, *rules):
            self.schedule = apply(*rules)

        def __call__(self, mod):
            try:
                return self.schedule(mod)
            except Exception:
                failed.append([g.name_hint for g in mod.get_global_vars()])
                raise

    monkeypatch.setattr(dlight, "ApplyDefaultSchedule", Watched)
    net = torch.nn.Sequential(torch.nn.Conv2d(16, 32, 1), torch.nn.ReLU6(), torch.nn.ZeroPad2d((0, 1, 0, 1)),
                              torch.nn.Conv2d(32, 32, 3, stride=2, groups=32))
    model = load_model(net.eval(), example_inputs=(torch.randn(1, 16, 14, 14),))
    units = extract_units(model, TargetSet({"gpu": {"kind": "cuda", "arch": "sm_90"}})["gpu"].target)
    assert failed == [["fused_conv2d_add_cuda_tir_clip_cuda_pad_cuda"]]  # the matmul rule, on that kernel alone
    assert len(units) == 2


def test_a_kernel_whose_printed_script_binds_a_variable_twice_still_compiles_for_profiling():
    """detect's box decoding (strided slices, two sigmoids' ``exp_x`` lets, a concatenation) prints as TVMScript that
    TVM's parser refused as ill-formed ("multiple definitions of variable exp_x"), so the profiler and every bundle
    failed it (session 41's box: the one CPU kernel of detect-base never timed). Parsed without that check it
    compiles and computes what the kernel built straight from its PrimFunc computes."""
    import tvm

    from autoplace.profile import extract_units
    from autoplace.profile.measure import compile_kernel

    units = [u for u in extract_units(zoo.get("detect"), "llvm")
             if "exp" in u.func_name and "strided_slice" in u.func_name and "concatenate" in u.func_name]
    assert units
    unit = units[0]
    with pytest.raises(Exception, match="multiple definitions"):
        tvm.script.from_source(unit.prim_func.script(show_meta=True))
    lib = compile_kernel(unit.prim_func.script(show_meta=True), json.dumps({"kind": "llvm"}))
    direct = tvm.tirx.build(unit.prim_func.with_attr("global_symbol", "main"), target=unit.prim_func.attrs["target"])
    rng = np.random.default_rng(0)
    outs = []
    for module in (lib, direct):
        args = [tvm.runtime.tensor(rng.standard_normal(shape).astype(dtype)) if i < len(unit.arg_shapes) - unit.num_outputs
                else tvm.runtime.empty(shape, dtype, tvm.cpu())
                for i, (shape, dtype) in enumerate(zip(unit.arg_shapes, unit.arg_dtypes))]
        rng = np.random.default_rng(0)
        module["main"](*args)
        outs.append([a.numpy() for a in args[len(args) - unit.num_outputs:]])
    for a, b in zip(*outs):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_a_weights_cold_timing_that_fails_leaves_the_kernel_timed_and_says_why(monkeypatch):
    """Without TVM's cache flush (a runtime built without it) the weights-cold timing fails alone: its fields say why
    and carry the timing's version (a job does not try it again), and nothing else of the kernel is lost."""
    import numpy as np
    import tvm
    from tvm import te

    from autoplace.profile import cache_state, remote_runner
    from autoplace.profile.cache_state import WEIGHTS_COLD_TIMING

    a = te.placeholder((1024,), name="a")
    w = te.placeholder((1024,), name="w")
    out = te.compute((1024,), lambda i: a[i] * w[i], name="out")
    lib = tvm.tirx.build(tvm.IRModule({"main": te.create_prim_func([a, w, out]).with_attr("global_symbol", "main")}),
                         target="llvm")
    args = [tvm.runtime.tensor(np.ones(1024, "float32")) for _ in range(3)]
    cache_state.register_in_model_preproc([0])
    fields = remote_runner.weights_cold_fields(lib, tvm.cpu(), args,
                                               remote_runner.register_weights_cold_preproc(tvm, [1]), 3)
    assert fields["weights_cold_timing"] == WEIGHTS_COLD_TIMING and fields["weights_cold_median_us"] > 0
    monkeypatch.setattr(remote_runner, "CACHE_FLUSH", "no.such.flush")
    fields = remote_runner.weights_cold_fields(lib, tvm.cpu(), args,
                                               remote_runner.register_weights_cold_preproc(tvm, [1]), 3)
    assert fields["weights_cold_timing"] == WEIGHTS_COLD_TIMING and "weights_cold_median_us" not in fields
    assert "no.such.flush" in fields["weights_cold_error"]
