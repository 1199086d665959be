"""Bad input never yields a silently wrong plan, a poisoned profile or a traceback (issue 16).

Every case of the CLI table runs the command line (``autoplace.cli.main``, what ``python -m autoplace``
runs) in a fresh, empty folder and must end with exit status 2, one ``autoplace: error:`` line that
names the input, nothing on stdout (no stage of work started) and nothing written: no output file, no
profile folder, no ``records.jsonl``. The cases marked ``silent`` exited 0 with a wrong result before
issue 16 (a repeated flag or a duplicate key dropped). The table runs in this process (one TVM import:
the refusals come before any model is built, so a case takes well under a second); the cases marked
``fresh`` run again as their own ``python -m autoplace`` process (about 4 s of CPU each, mostly importing
TVM), a few at a time. The API table checks the exception type and message of the same mistakes made
from Python.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
TWO = json.dumps({"cpu0": "llvm", "cpu1": "llvm"})
ERROR_LINE = re.compile(r"^autoplace( \w+)?: error: ")


@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple
    expect: tuple  # substrings of the error line: the input it names, and what to do
    silent: bool = False  # before issue 16: exit 0 with a wrong result
    fresh: bool = False  # also run as its own `python -m autoplace` process


def case(id, *argv, expect, silent=False, fresh=False) -> Case:
    return Case(id, tuple(argv), tuple([expect] if isinstance(expect, str) else expect), silent, fresh)


OPT = ("optimize", "--zoo", "mlp", "--targets", TWO, "--out", "{case}/out")
CMP = ("compare", "--zoo", "mlp", "--targets", TWO, "--out", "{case}/out")
PROFILE = ("profile", "--no-progress", "--dir", "{case}/profile")

CASES = [
    # -- repeated flags and duplicate keys: accumulate or refuse, never drop (silent before)
    case("memory-repeated-accumulates", *OPT, "--memory", "cpu0=2048", "--memory", "cpu1=1e9",
         expect=["'cpu0': 2048", "'cpu1': 1000000000", "raise memory_bytes"], silent=True, fresh=True),
    case("memory-same-target-twice", *OPT, "--memory", "cpu0=1e6", "--memory", "cpu0=2e6",
         expect=["'cpu0' two caps", "1000000 and 2000000"]),
    case("pin-repeated-accumulates", *OPT, "--pin", "lvX=cpu1", "--pin", "lv9=cpu0",
         expect=["--pin", "'lvX' names no node"], silent=True, fresh=True),
    case("pin-same-key-twice", *OPT, "--pin", "lv3=cpu1", "--pin", "lv3=cpu0",
         expect=["'lv3' twice", "'cpu1' and 'cpu0'"]),
    case("targets-json-duplicate-key", "optimize", "--zoo", "mlp", "--out", "{case}/out",
         "--targets", '{"cpu": "llvm", "cpu": "llvm"}',
         expect=["--targets names 'cpu' twice"], silent=True, fresh=True),
    case("targets-kv-duplicate-key", "optimize", "--zoo", "mlp", "--targets", "cpu=llvm,cpu=llvm",
         "--out", "{case}/out", expect=["--targets names 'cpu' twice"]),
    case("zoo-two-models-optimize", *OPT, "--zoo", "seed003",
         expect=["optimize places one model", "'mlp'", "'seed003'"], silent=True, fresh=True),
    case("zoo-two-models-one-flag", "optimize", "--zoo", "mlp", "seed003", "--out", "{case}/out",
         expect=["optimize places one model"], silent=True),
    case("zoo-and-file-optimize", "optimize", "{in}/double.py", "--zoo", "mlp", "--out", "{case}/out",
         expect=["optimize places one model", "'mlp'", "'double'"], silent=True),
    case("zoo-two-models-compare", *CMP, "--zoo", "seed003",
         expect=["compare places one model"], silent=True),
    case("profile-dir-and-out", "profile", "--zoo", "mlp", "--dir", "{case}/a", "--out", "{case}/b",
         expect=["--dir", "--out", "not both"], silent=True),
    case("merge-with-models", "profile", "--merge", "{in}/records.jsonl", "--zoo", "mlp", "--out", "{case}/p",
         expect=["--merge takes only a records file", "--zoo"]),
    # -- --targets
    case("targets-malformed-json", "optimize", "--zoo", "mlp", "--targets", '{"cpu0": "llvm",}',
         "--out", "{case}/out", expect=["--targets is not valid JSON", "column 17"], fresh=True),
    case("targets-kv-missing-kind", "optimize", "--zoo", "mlp", "--targets", "cpu=llvm,gpu",
         "--out", "{case}/out", expect=["'gpu' is not NAME=KIND"]),
    case("targets-empty-object", "optimize", "--zoo", "mlp", "--targets", "{}", "--out", "{case}/out",
         expect=["non-empty dict"]),
    case("targets-unknown-kind", "optimize", "--zoo", "mlp", "--targets", '{"cpu": "rocm"}',
         "--out", "{case}/out", expect=["unknown target kind 'rocm'"]),
    case("targets-empty-text", "optimize", "--zoo", "mlp", "--targets", " ", "--out", "{case}/out",
         expect=["--targets is empty"]),
    # -- --memory
    case("memory-no-equals", *OPT, "--memory", "cpu0", expect=["--memory takes TARGET=BYTES", "'cpu0'"]),
    case("memory-not-a-number", *OPT, "--memory", "cpu0=lots", expect=["'lots' is not a number of bytes"]),
    case("memory-infinite", *OPT, "--memory", "cpu0=inf", expect=["cpu0=inf", "finite number of bytes"]),
    case("memory-negative", *OPT, "--memory", "cpu0=-5", expect=["cpu0=-5", ">= 0"]),
    case("memory-unknown-target", *OPT, "--memory", "gpu=1e9", expect=["no target named 'gpu'", "cpu0"]),
    case("memory-swallows-model-file", "optimize", "--targets", TWO, "--out", "{case}/out",
         "--memory", "cpu0=1e9", "{in}/model.onnx",
         expect=["model.onnx", "put model files before the options"]),
    # -- --pin
    case("pin-no-equals", *OPT, "--pin", "lv3", expect=["--pin takes KEY=TARGET", "'lv3'"]),
    case("pin-unknown-target", *OPT, "--pin", "lv3=gpu", expect=["no target named 'gpu'"]),
    case("pin-names-a-weight", *OPT, "--pin", "p_0_bias=cpu1",
         expect=["'p_0_bias' names a weight", "['lv2']"]),
    case("pin-names-a-folded-weight", *OPT, "--pin", "p_0_weight=cpu1",
         expect=["'p_0_weight' names a weight", "'p_0_weight_permute_dims' now", "['lv1']"]),
    # -- models
    case("zoo-typo", "optimize", "--zoo", "mlpx", "--out", "{case}/out",
         expect=["no zoo model 'mlpx'", "'mlp'"], fresh=True),
    case("zoo-unknown-size", "optimize", "--zoo", "mlp-large", "--out", "{case}/out",
         expect=["no size 'large'", "mlp-base"]),
    case("zoo-grid-is-not-a-model", "optimize", "--zoo", "grid", "--out", "{case}/out",
         expect=["--zoo grid"]),
    case("zoo-ops-unknown-family", "profile", "--zoo", "ops:cnn_pow2,convv_stem", "--out", "{case}/p",
         expect=["unknown op families ['convv_stem']", "conv_stem"]),
    case("zoo-ops-no-family", "profile", "--zoo", "ops:", "--out", "{case}/p", expect=["--zoo ops:", "--zoo ops "]),
    case("no-model", "optimize", "--out", "{case}/out", expect=["no model given", "--zoo"]),
    case("file-missing", "optimize", "{in}/missing.onnx", "--out", "{case}/out",
         expect=["no such model file", "missing.onnx"]),
    case("file-txt", "optimize", "{in}/notes.txt", "--out", "{case}/out",
         expect=["notes.txt", "does not read .txt"], fresh=True),
    case("file-directory", "optimize", "{in}/adir", "--out", "{case}/out", expect=["adir is a folder"]),
    case("file-onnx-not-onnx", "optimize", "{in}/fake.onnx", "--out", "{case}/out",
         expect=["fake.onnx is not a readable ONNX file"]),
    case("file-onnx-empty", "optimize", "{in}/empty.onnx", "--out", "{case}/out",
         expect=["empty.onnx is empty"]),
    case("file-py-without-module", "optimize", "{in}/nomod.py", "--out", "{case}/out",
         expect=["nomod.py defines no IRModule"]),
    # -- --shape: the sizes of a model file's symbolic dimensions
    case("shape-missing-for-dynamic-file", "optimize", "{in}/dynamic.onnx", "--out", "{case}/out",
         expect=["symbolic dimensions 'batch'", "--shape batch=128"], fresh=True),
    case("shape-unknown-dimension", "optimize", "{in}/dynamic.onnx", "--shape", "seq=4", "--out", "{case}/out",
         expect=["shapes names ['seq']", "'batch'"]),
    case("shape-not-a-number", "optimize", "{in}/dynamic.onnx", "--shape", "batch=lots", "--out", "{case}/out",
         expect=["--shape batch=lots", "not a whole number"]),
    case("shape-zero", "optimize", "{in}/dynamic.onnx", "--shape", "batch=0", "--out", "{case}/out",
         expect=["--shape batch=0", ">= 1"]),
    case("shape-no-equals", "optimize", "{in}/dynamic.onnx", "--shape", "batch", "--out", "{case}/out",
         expect=["--shape takes NAME=SIZE", "'batch'"]),
    case("shape-same-dimension-twice", "optimize", "{in}/dynamic.onnx", "--shape", "batch=2", "--shape",
         "batch=3", "--out", "{case}/out", expect=["'batch' two sizes (2 and 3)"]),
    case("shape-for-a-zoo-model", *OPT, "--shape", "batch=2",
         expect=["--shape binds symbolic dimensions of model files", "drop --shape"]),
    # -- other optimize options
    case("method-unknown", *OPT, "--method", "fastest",
         expect=["--method 'fastest'", "all:cpu1"], fresh=True),
    case("method-unknown-target", *OPT, "--method", "all:gpu", expect=["--method 'all:gpu'"]),
    case("time-limit-zero", *OPT, "--time-limit", "0", expect=["--time-limit", "> 0"]),
    case("out-is-a-file", "optimize", "--zoo", "mlp", "--out", "{in}/afile",
         expect=["--out", "afile is a file"]),
    # -- compare: every option checked before the first plan is built
    case("manual-malformed-json", *CMP, "--manual", '{"x": ',
         expect=["--manual is not valid JSON", "column 7"]),
    case("manual-unknown-node", *CMP, "--manual", '{"x": {"lvX": "cpu1"}}',
         expect=["manual plan 'x'", "'lvX' names no node"], fresh=True),
    case("manual-unknown-target", *CMP, "--manual", '{"x": {"relax.matmul": "gpu"}}',
         expect=["manual plan 'x'", "'gpu' names no target"]),
    case("manual-not-an-object", *CMP, "--manual", '{"x": "cpu1"}', expect=["plan 'x' must be an object"]),
    case("manual-a-list", *CMP, "--manual", "[]", expect=["--manual must be a non-empty JSON object"]),
    case("manual-names-a-weight", *CMP, "--manual", '{"x": {"p_0_weight": "cpu1"}}',
         expect=["manual plan 'x'", "'p_0_weight' names a weight"]),
    case("compare-rounds-zero", *CMP, "--rounds", "0", expect=["--rounds", ">= 1"], fresh=True),
    case("compare-out-is-a-file", "compare", "--zoo", "mlp", "--out", "{in}/afile",
         expect=["afile is a file"]),
    # -- show: anything that is not a result file
    case("show-missing", "show", "{in}/none.result.json", expect=["no such result file", "none.result.json"]),
    case("show-text-file", "show", "{in}/notes.txt", "--out", "{case}/p.png",
         expect=["notes.txt is not a result"]),
    case("show-directory", "show", "{in}/adir", "--out", "{case}/p.png",
         expect=["adir is a folder"], fresh=True),
    case("show-other-json", "show", "{in}/list.json", "--out", "{case}/p.png",
         expect=["list.json is not a result file"]),
    case("show-picture-format", "show", "{in}/list.json", "--out", "{case}/p.xyz", expect=["p.xyz", ".xyz"]),
    # -- train
    case("train-no-profile", "train", "--profile", "{in}/noprofile", "--out", "{case}/m.json",
         expect=["no profile at", "noprofile"], fresh=True),
    case("train-empty-folder", "train", "--profile", "{in}/adir", "--out", "{case}/m.json",
         expect=["adir (--profile) holds no records.jsonl"]),
    case("train-profile-is-a-file", "train", "--profile", "{in}/afile", "--out", "{case}/m.json",
         expect=["afile is a file"]),
    case("train-unknown-kind", "train", "--profile", "{repo_profile}", "--target", "rocm",
         "--out", "{case}/m.json", expect=["--target 'rocm'"]),
    case("train-out-is-a-folder", "train", "--profile", "{repo_profile}", "--out", "{in}/adir",
         expect=["--out", "adir is a folder"]),
    case("train-unknown-option", "train", "--profiles", "x", expect=["--profiles"]),
    # -- demo
    case("demo-rounds-zero", "demo", "--model", "seed003", "--rounds", "0", "--out", "{case}/out",
         expect=["--rounds", ">= 1"], fresh=True),
    case("demo-zoo-typo", "demo", "--model", "cnn-bse", "--out", "{case}/out", expect=["no size 'bse'"]),
    case("demo-out-is-a-file", "demo", "--model", "seed003", "--out", "{in}/afile",
         expect=["afile is a file"]),
    # -- profile: options that cannot measure are refused before any model is loaded or anything written
    case("profile-repeat-zero", *PROFILE, "--zoo", "mlp", "--repeat", "0",
         expect=["repeat=0", "--repeat"], fresh=True),
    case("profile-timeout-too-short", *PROFILE, "--zoo", "mlp", "--timeout", "0.01",
         expect=["timeout_s=0.01", "--timeout"]),
    case("profile-negative-min-repeat", *PROFILE, "--zoo", "mlp", "--min-repeat-ms", "-1",
         expect=["min_repeat_ms=-1"]),
    case("profile-rounds-zero", *PROFILE, "--zoo", "mlp", "--rounds", "0", expect=["--rounds", ">= 1"]),
    case("profile-max-rounds-below-rounds", *PROFILE, "--zoo", "mlp", "--rounds", "3", "--max-rounds", "2",
         expect=["--max-rounds 2", "--rounds N <= it"]),
    case("profile-max-rounds-over-rpc", *PROFILE, "--zoo", "mlp", "--rounds", "3", "--max-rounds", "4", "--rpc",
         "127.0.0.1:9", "--rpc-key", "box", expect=["--max-rounds 4", "not --bundle or --rpc"]),
    case("profile-zoo-typo", *PROFILE, "--zoo", "mlp", "seed03",
         expect=["no zoo model 'seed03'", "'seed003'"]),
    case("profile-targets-bad", *PROFILE, "--zoo", "mlp", "--targets", "{cpu: llvm}",
         expect=["--targets is not valid JSON"]),
    case("profile-no-model", *PROFILE, expect=["no model given"]),
    case("profile-dir-is-a-file", "profile", "--zoo", "mlp", "--dir", "{in}/afile",
         expect=["afile is a file"]),
    case("profile-merge-missing", "profile", "--merge", "{in}/none.jsonl", "--out", "{case}/p",
         expect=["--merge", "none.jsonl does not exist"], fresh=True),
    case("profile-merge-no-metadata", "profile", "--merge", "{in}/nometa/records.jsonl", "--out", "{case}/p",
         expect=["no metadata.json beside it"]),
    case("profile-redo-unknown-kind", *PROFILE, "--zoo", "mlp", "--redo", "kernels",
         expect=["--redo", "kernels"]),
]


DOUBLE = """@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((2, 3), "float32")) -> R.Tensor((2, 3), "float32"):
        with R.dataflow():
            y = R.add(x, x)
            R.output(y)
        return y
"""


def _dynamic_onnx(path: Path) -> None:
    """An ONNX model whose batch dimension is symbolic (``dim_param`` "batch")."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((4, 3), dtype="float32"), name="w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "dynamic",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])], initializer=[w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def _inputs(folder: Path) -> Path:
    """The wrong files users point at (read-only for the cases: every case writes in its own folder)."""
    folder.mkdir(parents=True, exist_ok=True)
    _dynamic_onnx(folder / "dynamic.onnx")  # a good model, once its batch size is given
    (folder / "notes.txt").write_text("hello\n")
    (folder / "fake.onnx").write_text("not an onnx model\n")
    (folder / "empty.onnx").write_bytes(b"")
    (folder / "model.onnx").write_text("placeholder\n")
    (folder / "nomod.py").write_text("x = 1\n")
    (folder / "double.py").write_text(DOUBLE)  # a good model: wrong only next to another one
    (folder / "afile").write_text("a file, not a folder\n")
    (folder / "list.json").write_text("[1, 2]\n")
    (folder / "records.jsonl").write_text("")
    (folder / "adir").mkdir(exist_ok=True)  # an empty folder
    (folder / "nometa").mkdir(exist_ok=True)
    (folder / "nometa" / "records.jsonl").write_text("")  # a records file with no metadata.json beside it
    return folder


def _repo_profile() -> str:
    found = sorted((REPO / "profiles").glob("*/records.jsonl"))
    return str(found[0].parent) if found else str(REPO / "profiles" / "none")


def _written(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    return _inputs(tmp_path_factory.mktemp("inputs"))


def _argv(c: Case, inputs: Path, folder: Path) -> list[str]:
    names = {"{in}": str(inputs), "{case}": str(folder), "{repo_profile}": _repo_profile()}
    return [re.sub(r"\{\w+\}", lambda m: names[m.group(0)], a) for a in c.argv]


def _check_refusal(c: Case, returncode, stdout: str, stderr: str, folder: Path) -> None:
    assert returncode == 2, f"exit {returncode}\nstdout: {stdout[-1500:]}\nstderr: {stderr[-3000:]}"
    assert "Traceback" not in stderr, stderr[-3000:]
    lines = [line for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if ERROR_LINE.match(line)]
    assert len(errors) == 1 and errors[0] == lines[-1], stderr[-3000:]
    for text in c.expect:
        assert text in errors[0], f"{text!r} not in {errors[0]!r}"
    assert stdout.strip() == "", f"work started before the refusal:\n{stdout[-1500:]}"
    assert _written(folder) == [], "a refused input left files (output, profile folder or records)"


def test_case_ids_are_unique():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_cli_refuses_bad_input(case, inputs, tmp_path, monkeypatch, capfd):
    """The command line in this process, in an empty folder of its own (relative defaults land there)."""
    from autoplace.cli import main

    folder = tmp_path / "case"
    folder.mkdir()
    monkeypatch.chdir(folder)
    monkeypatch.delenv("AUTOPLACE_PROFILES", raising=False)
    try:
        returncode = main(_argv(case, inputs, folder))
    except SystemExit as exit_:  # argparse's own errors
        returncode = exit_.code
    out, err = capfd.readouterr()
    _check_refusal(case, returncode, out, err, folder)


@pytest.fixture(scope="module")
def fresh_runs(request, inputs, tmp_path_factory):
    """Every selected ``fresh`` case as its own ``python -m autoplace`` process, a few at a time:
    ``{id: (CompletedProcess, its folder)}``."""
    here = Path(request.module.__file__)
    wanted = {item.callspec.params["case"].id for item in request.session.items
              if Path(item.path) == here and item.originalname == "test_cli_process_refuses_bad_input"}
    env = dict(os.environ, MPLBACKEND="Agg", TVM_NUM_THREADS="1")
    env.pop("AUTOPLACE_PROFILES", None)

    def run(c: Case):
        folder = tmp_path_factory.mktemp(c.id)
        proc = subprocess.run([sys.executable, "-m", "autoplace", *_argv(c, inputs, folder)],
                              capture_output=True, text=True, env=env, cwd=folder, timeout=300)
        return c.id, (proc, folder)

    with cf.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return dict(pool.map(run, [c for c in CASES if c.fresh and c.id in wanted]))


@pytest.mark.parametrize("case", [c for c in CASES if c.fresh], ids=lambda c: c.id)
def test_cli_process_refuses_bad_input(case, fresh_runs):
    """The same, as the user runs it: its own process, exit status and stderr as the shell sees them."""
    proc, folder = fresh_runs[case.id]
    _check_refusal(case, proc.returncode, proc.stdout, proc.stderr, folder)


# ------------------------------------------------------------------------------------- what still works


def test_repeated_pins_all_apply(tmp_path):
    """Two --pin flags: both pins hold (before issue 16 only the last one did)."""
    env = dict(os.environ, MPLBACKEND="Agg", TVM_NUM_THREADS="1")
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "autoplace", "optimize", "--zoo", "mlp", "--targets", TWO,
                           "--pin", "lv5=cpu1", "--pin", "lv1=cpu0", "--out", str(out)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assignment = json.loads((out / "mlp.result.json").read_text())["assignment"]
    assert assignment["lv5"] == "cpu1" and assignment["lv1"] == "cpu0"


def test_option_parsers_accumulate_and_accept_equal_repeats():
    from autoplace.cli import _memory, _pins, build_parser, target_spec

    parse = build_parser().parse_args
    args = parse(["profile", "--zoo", "mlp", "--zoo", "cnn", "--redo", "unit", "--redo", "model"])
    assert args.zoo == ["mlp", "cnn"] and args.redo == ["unit", "model"]
    args = parse(["optimize", "--pin", "a=x", "b=y", "--pin", "c=x", "--memory", "x=1", "--memory", "y=2"])
    assert args.pin == ["a=x", "b=y", "c=x"] and args.memory == ["x=1", "y=2"]

    targets = ["cpu0", "cpu1"]
    assert _memory(["cpu0=2048", "cpu1=1e9,cpu0=2048"], targets) == {"cpu0": 2048, "cpu1": 10**9}
    assert _pins(["lv3=cpu1", "lv9=cpu0", "lv3=cpu1"], targets) == {"lv3": "cpu1", "lv9": "cpu0"}
    assert target_spec(None) is None  # TargetSet's default, autoplace.targets.DEFAULT_TARGETS
    assert target_spec("cpu0=llvm, cpu1=llvm,") == {"cpu0": "llvm", "cpu1": "llvm"}
    assert target_spec('{"cpu": "llvm"}') == {"cpu": "llvm"}


# -------------------------------------------------------------------------------------------- Python API


@pytest.fixture(scope="module")
def mlp():
    from autoplace import zoo

    return zoo.get("mlp")


@pytest.fixture(scope="module")
def seed003_result():
    import autoplace
    from autoplace import zoo

    return autoplace.optimize(zoo.get("seed003"), None, {"cpu0": "llvm", "cpu1": "llvm"})


@pytest.fixture(scope="module")
def int32_placement():
    """``x + x`` on an int32 (4,) input: inputs of other integer dtypes are cast only when they fit."""
    from tvm import relax

    import autoplace

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4,), "int32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.add(x, x))
        bb.emit_func_output(y)
    return autoplace.place(bb.get(), None, None, {"cpu": "llvm"})


def _no_optimize(*args, **kwargs):
    raise AssertionError("compare() started optimizing before checking its options")


@dataclass(frozen=True)
class ApiCase:
    id: str
    call: object  # call(c) with c: the fixtures below and the input files
    error: str  # class name in autoplace.errors
    expect: tuple


def api(id, call, error, *expect) -> ApiCase:
    return ApiCase(id, call, error, expect)


M2 = {"cpu0": "llvm", "cpu1": "llvm"}
API = [
    api("zoo-typo", lambda c: c.zoo.parse("mlpx"), "ModelError", "'mlpx'", "'mlp'"),
    api("zoo-size", lambda c: c.zoo.get("cnn", "large"), "ModelError", "'large'"),
    api("zoo-spec-size", lambda c: c.zoo.parse("cnn-huge"), "ModelError", "'huge'", "cnn-base"),
    api("load-missing", lambda c: c.ap.load_model(c.file("no.onnx")), "ModelError", "no such model file"),
    api("load-txt", lambda c: c.ap.load_model(c.file("notes.txt")), "ModelError", "notes.txt", ".txt"),
    api("load-directory", lambda c: c.ap.load_model(c.file("adir")), "ModelError", "adir is a folder"),
    api("load-empty-onnx", lambda c: c.ap.load_model(c.file("empty.onnx")), "ModelError", "is empty"),
    api("load-fake-onnx", lambda c: c.ap.load_model(c.file("fake.onnx")), "ModelError", "not a readable"),
    api("place-weight-key", lambda c: c.ap.place(c.mlp, None, {"p_0_weight": "cpu1"}, M2), "AssignmentError",
        "'p_0_weight' names a weight", "['lv1']"),
    api("place-not-a-dict", lambda c: c.ap.place(c.mlp, None, "cpu1", M2), "AssignmentError",
        "dict", "'cpu1'"),
    api("place-non-string-key", lambda c: c.ap.place(c.mlp, None, {3: "cpu1"}, M2), "AssignmentError",
        "key 3"),
    api("place-unknown-target", lambda c: c.ap.place(c.mlp, None, {"lv3": "gpu"}, M2), "AssignmentError",
        "'gpu'", "cpu0"),
    api("optimize-weight-pin", lambda c: c.ap.optimize(c.mlp, None, M2, pins={"p_0_weight": "cpu1"}),
        "AssignmentError", "p_0_weight", "names a weight"),
    api("compare-manual-unknown-node", lambda c: c.ap.compare(c.mlp, None, M2, manual={"x": {"lvX": "cpu1"}}),
        "AssignmentError", "manual plan 'x'", "'lvX'"),
    api("compare-manual-weight", lambda c: c.ap.compare(c.mlp, None, M2, manual={"x": {"p_0_bias": "cpu1"}}),
        "AssignmentError", "'p_0_bias' names a weight"),
    api("compare-manual-not-a-dict", lambda c: c.ap.compare(c.mlp, None, M2, manual=[("x", {})]),
        "AssignmentError", "manual must be a dict"),
    api("compare-rounds-zero", lambda c: c.ap.compare(c.mlp, None, M2, rounds=0), "AutoplaceError",
        "rounds=0"),
    api("run-wrong-shape", lambda c: c.seed003.run(*c.f32((4, 7), (5, 7), (5, 7))), "AutoplaceError",
        "input 'a'", "(4, 7)", "(5, 7)", "float32"),
    api("run-wrong-count", lambda c: c.seed003.run(*c.f32((5, 7))), "AutoplaceError",
        "takes 3 input", "got 1"),
    api("run-float-for-int", lambda c: c.int32.run(np.ones(4, "float32")), "AutoplaceError",
        "input 'x'", "float32", "int32", "drop fractions", "astype"),
    api("run-int-out-of-range", lambda c: c.int32.run(np.full(4, 2**40, "int64")), "AutoplaceError",
        "input 'x'", "do not fit int32"),
    api("run-ragged-list", lambda c: c.int32.run([[1, 2], [3]]), "AutoplaceError", "input 'x'"),
    api("kernel-timer-repeat-zero", lambda c: c.KernelTimer(repeat=0), "ProfilingError", "repeat=0"),
]


class _Context:
    """What the API cases call: the package, the zoo, loaded models and placements, the input files."""

    def __init__(self, inputs, mlp, seed003, int32):
        import autoplace
        from autoplace import zoo
        from autoplace.profile import KernelTimer

        self.ap, self.zoo, self.KernelTimer = autoplace, zoo, KernelTimer
        self.inputs, self.mlp, self.seed003, self.int32 = inputs, mlp, seed003, int32

    def file(self, name: str) -> str:
        return str(self.inputs / name)

    @staticmethod
    def f32(*shapes):
        return [np.zeros(shape, "float32") for shape in shapes]


def test_api_case_ids_are_unique():
    assert len({c.id for c in API}) == len(API)


@pytest.mark.parametrize("case", API, ids=lambda c: c.id)
def test_api_refuses_bad_input(case, inputs, mlp, seed003_result, int32_placement, monkeypatch):
    import autoplace.comparison
    from autoplace import errors

    monkeypatch.setattr(autoplace.comparison, "optimize", _no_optimize)  # compare checks before it solves
    with pytest.raises(getattr(errors, case.error)) as info:
        case.call(_Context(inputs, mlp, seed003_result, int32_placement))
    message = str(info.value)
    for text in case.expect:
        assert text in message, f"{text!r} not in {message!r}"
    assert "\n" not in message.strip() and "Check failed" not in message


def test_run_casts_lists_and_wider_dtypes_when_safe(seed003_result, int32_placement):
    from autoplace import zoo

    inputs = zoo.get("seed003").random_inputs(seed=0)
    expected = seed003_result.run(*inputs)
    np.testing.assert_array_equal(seed003_result.run(*[x.astype("float64") for x in inputs]), expected)
    np.testing.assert_array_equal(seed003_result.run(*[x.tolist() for x in inputs]), expected)
    np.testing.assert_array_equal(int32_placement.run(np.arange(4, dtype="int64")), [0, 2, 4, 6])
    np.testing.assert_array_equal(int32_placement.run([1, 2, 3, 4]), [2, 4, 6, 8])


def test_runner_with_input_specs_checks_before_calling(seed003_result):
    """Told the signature (``input_specs``), the runner refuses a wrong input without calling TVM."""
    from autoplace.backend import Runner
    from autoplace.errors import AutoplaceError

    placed = seed003_result.placement
    a = placed.annotated
    runner = Runner(placed.build(), placed.targets, a.params, a.param_targets, a.input_targets,
                    input_specs=placed.model.input_specs())
    good = placed.model.random_inputs(seed=0)
    np.testing.assert_array_equal(runner(*good), seed003_result.run(*good))
    with pytest.raises(AutoplaceError, match=r"input 'c' \(input 2\) has shape \(7, 5\)"):
        runner(good[0], good[1], good[2].T)


def test_demo_refuses_bad_options_before_any_work(tmp_path):
    from autoplace.demo import run_demo
    from autoplace.errors import AutoplaceError

    with pytest.raises(AutoplaceError, match="rounds=0"):
        run_demo("seed003", str(tmp_path / "out"), rounds=0)
    with pytest.raises(AutoplaceError, match="'seed03'"):
        run_demo("seed03", str(tmp_path / "out"), rounds=1)
    assert not (tmp_path / "out").exists()


def test_api_memory_cap_that_is_not_a_number_names_the_target():
    import autoplace
    from autoplace import zoo

    with pytest.raises(autoplace.errors.PlacementError, match=r"memory_bytes\['cpu0'\] = 'abc' is not a number"):
        autoplace.optimize(zoo.parse("mlp"), None, M2, memory_bytes={"cpu0": "abc"})


def test_a_split_margin_that_is_no_fraction_is_refused_before_any_work():
    """``min_split_gain`` is a fraction of the plan's predicted latency: 3 (meant as 3%) or -0.1 would keep or drop
    every split silently, so both are refused with the fix, in Python and on the command line."""
    import subprocess
    import sys

    import autoplace
    from autoplace import zoo
    from autoplace.errors import AutoplaceError

    for bad in (3, -0.1, float("nan")):
        with pytest.raises(AutoplaceError, match=r"min_split_gain.*fraction in \[0, 1\)"):
            autoplace.optimize(zoo.get("seed003"), None, {"cpu0": "llvm", "cpu1": "llvm"}, min_split_gain=bad)
    run = subprocess.run([sys.executable, "-m", "autoplace", "optimize", "--zoo", "seed003", "--targets",
                          '{"cpu0": "llvm", "cpu1": "llvm"}', "--min-split-gain", "3"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 2 and "not a fraction in [0, 1)" in run.stderr
