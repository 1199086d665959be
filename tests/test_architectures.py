"""The architecture suite (issue 12): every common architecture places, builds, runs and matches PyTorch.

Property test over :data:`autoplace.architectures.SUITE` (small sizes): optimized over two CPU vdevices and
under random placements over three, through ``torch.export`` and, where one of PyTorch's ONNX exporters
gives a model TVM reads, through ONNX as well, compared with PyTorch's own output (rtol 1e-4). Plus one test
per repair of :mod:`autoplace.repairs` that fails without it, the "cannot compile" error, and symbolic
shapes bound with ``shapes=``.
"""

import os

import numpy as np
import pytest
import torch
import tvm
from tvm import relax

import autoplace
from autoplace import architectures, repairs, zoo
from experiments.architectures import (
    THREE,
    TWO,
    max_error,
    onnx_load,
    optimized_error,
    random_errors,
    reference,
)

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")


# -- every architecture, through torch.export --------------------------------------------------------------


@pytest.mark.parametrize("name", architectures.SUITE)
def test_architecture_optimized_and_random_placements_match_pytorch(name):
    """Property: optimize over two CPU vdevices and two random placements over three build, run and match
    PyTorch. The decoder LLMs (llama, qwen2, mistral, gpt2) are the ones TVM 0.27 could not compile at all."""
    inputs, expected = reference(name)
    model = zoo.get(name)  # through the zoo, as `--zoo NAME` reads it
    assert model.name == name
    optimized_error(model, inputs, expected)
    random_errors(model, inputs, expected, 2, f"{name}/small/3")


# -- every architecture, through ONNX ----------------------------------------------------------------------


def _onnx_exporter(name):
    """The exporter to test ``name`` with, and None or the reason the ONNX path is expected to fail."""
    paths = architectures.ONNX_PATHS[name]
    available = [e for e in architectures.EXPORTERS if e != "dynamo" or architectures.has_dynamo_exporter()]
    working = [e for e in available if paths[e] is None]
    if working:
        return working[0], None
    if any(reason is None for reason in paths.values()):
        pytest.skip(f"{name}'s ONNX path needs the dynamo exporter, which needs onnxscript "
                    "(pip install onnxscript)")
    exporter = available[0]
    return exporter, paths[exporter]


@pytest.mark.parametrize("name", architectures.SUITE)
def test_architecture_through_onnx_matches_pytorch(name, request):
    """Through PyTorch's ONNX exporter and TVM's ONNX importer: optimize over two CPU vdevices and one random
    placement over three match PyTorch. Where no exporter works (autoplace.architectures.ONNX_PATHS says
    why) the test runs anyway and must fail: a strict xfail, so that a fix shows up as XPASS. Priced from the
    profiles and the cost model (``measure="never"``): the torch path above measures the kernels, mostly the same
    ones, and this test checks the import and the build."""
    exporter, reason = _onnx_exporter(name)
    if reason is not None:
        request.applymarker(pytest.mark.xfail(strict=True, reason=f"{exporter} ONNX path: {reason}"))
    inputs, expected = reference(name)
    model = onnx_load(name, "small", exporter)
    optimized_error(model, inputs, expected, measure="never")
    random_errors(model, inputs, expected, 1, f"{name}/small/onnx-{exporter}")


def test_onnx_paths_table_covers_every_exporter():
    for name, paths in architectures.ONNX_PATHS.items():
        assert set(paths) == set(architectures.EXPORTERS), name
        assert all(reason is None or len(reason) > 20 for reason in paths.values()), name


# -- repairs -----------------------------------------------------------------------------------------------


def _without(monkeypatch, name):
    """Take one repair out of autoplace.repairs.REPAIRS for this test."""
    monkeypatch.setattr(repairs, "REPAIRS", tuple(r for r in repairs.REPAIRS if r.name != name))


class _CumsumOfBool(torch.nn.Module):
    def forward(self, x):
        return (x > 0).cumsum(-1) * x  # bool cumsum (int64 in PyTorch) times a float


def test_cumsum_bool_repair_makes_the_model_compile_and_match(monkeypatch):
    x = torch.randn(2, 6)
    expected = _CumsumOfBool()(x).numpy()
    model = autoplace.load_model(_CumsumOfBool(), example_inputs=(x,))
    placement = autoplace.place(model, None, {"relax.cumsum": "cpu1"}, TWO)
    max_error(placement.run(x.numpy()), expected)
    repairs.check_compiles(model)
    # Without the repair TVM keeps the cumsum bool and cannot compile the model, even on one device; the
    # error names the kernel and points to the list of repairs.
    _without(monkeypatch, "cumsum-bool")
    unrepaired = autoplace.load_model(_CumsumOfBool(), example_inputs=(x,))
    expected_error = r"even on one device.*kernel 'cumsum.*op cumsum.*bool.*README"
    with pytest.raises(autoplace.ModelError, match=expected_error):
        repairs.check_compiles(unrepaired)
    # What a failed placed build is told: this model cannot compile at all; the repaired one can.
    assert "kernel 'cumsum" in str(repairs.diagnose_build_failure(unrepaired, RuntimeError("placed build")))
    assert repairs.diagnose_build_failure(model, RuntimeError("placed build")) is None


def test_cumsum_bool_repair_keeps_int64_as_pytorch_does():
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((3, 4), "bool"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.cumsum(x, axis=1))
        bb.emit_func_output(out)
    mod, applied = repairs.apply(bb.get())
    assert applied == {"cumsum-bool": 1}
    assert mod["main"].ret_ty.dtype == "int64"
    assert repairs.apply(mod)[1] == {}  # applied once: nothing left to repair


def _arange_into_expand_dims():
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 1), "int64"))
    with bb.function("main", [x]):
        with bb.dataflow():
            positions = bb.emit(relax.op.arange(0, 1, 1, "int64"))
            column = bb.emit(relax.op.expand_dims(positions, 1))
            out = bb.emit_output(relax.op.add(column, x))
        bb.emit_func_output(out)
    return bb.get()


def test_arange_into_reshape_repair_builds_a_copied_reshape(monkeypatch):
    """An arange read by expand_dims, the result copied to another device (the position ids of every decoder
    under most placements): TVM's RewriteDataflowReshape breaks the build unless the arange is evaluated."""
    x = np.full((1, 1), 5, "int64")
    placement = autoplace.place(_arange_into_expand_dims(), None, {"relax.add": "cpu1"}, TWO)
    np.testing.assert_array_equal(placement.run(x), [[5]])
    _without(monkeypatch, "arange-into-reshape")
    unrepaired = autoplace.place(_arange_into_expand_dims(), None, {"relax.add": "cpu1"}, TWO)
    with pytest.raises(Exception, match="is not defined"):
        unrepaired.run(x)


def _shape_of_weight():
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2,), "int64"))
    w = relax.Var("w", relax.TensorType((3, 4), "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            shape = bb.emit(relax.op.shape_of(w))
            dims = bb.emit(relax.op.shape_to_tensor(shape))
            out = bb.emit_output(relax.op.add(dims, x))
        bb.emit_func_output(out)
    return bb.get()


def test_static_shape_to_tensor_repair_places_an_onnx_shape_op(monkeypatch):
    """ONNX's Shape of a weight, as TVM's ONNX importer writes it (OPT, T5): with the shape_to_tensor on
    another device than the shape_of, the placement copies a Shape value, which to_vdevice refuses."""
    w = np.zeros((3, 4), "float32")
    assignment = {"relax.shape_of": "cpu0", "relax.shape_to_tensor": "cpu1", "relax.add": "cpu1"}
    placement = autoplace.place(_shape_of_weight(), [w], assignment, TWO)
    np.testing.assert_array_equal(placement.run(np.array([10, 20], "int64")), [13, 24])
    _without(monkeypatch, "static-shape-to-tensor")
    with pytest.raises(Exception, match="to_vdevice.*requires argument 0 .* to be a tensor"):
        autoplace.place(_shape_of_weight(), [w], assignment, TWO).run(np.array([10, 20], "int64"))


def test_every_repair_is_listed_in_the_readme():
    with open(README, encoding="utf-8") as f:
        text = f.read()
    missing = [r.name for r in repairs.REPAIRS if f"`{r.name}`" not in text]
    assert not missing, (f"README's 'TVM 0.27 problems' list must name every repair of autoplace/repairs.py "
                         f"(as `name`): missing {missing}")


def test_model_tvm_cannot_compile_names_the_failing_kernel():
    """A module straight from a frontend (no repairs): the error says it fails even on one device, names the
    kernel, the op and the binding, and points to the list of repairs, instead of a bare TVM trace."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, 5), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            mask = bb.emit(relax.op.greater(x, relax.const(0.0, "float32")))
            counts = bb.emit(relax.op.cumsum(mask, axis=1))
            out = bb.emit_output(relax.op.multiply(relax.op.astype(counts, "float32"), x))
        bb.emit_func_output(out)
    with pytest.raises(autoplace.ModelError) as info:
        repairs.check_compiles(bb.get())
    message = str(info.value)
    assert "cannot compile this model even on one device" in message
    assert "kernel 'cumsum" in message and "lv1 (bool inputs)" in message
    assert "README" in message and "repairs" in message


# -- symbolic shapes ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def llama_with_symbolic_seq_len():
    net, (ids,) = architectures.torch_model("llama")
    seq_len = torch.export.Dim("seq_len", min=2, max=64)
    return net, torch.export.export(net, (ids,), dynamic_shapes={"input_ids": {1: seq_len}})


def test_symbolic_seq_len_bound_by_its_dim_name_optimizes_and_matches(llama_with_symbolic_seq_len):
    net, program = llama_with_symbolic_seq_len
    ids = torch.randint(0, 128, (1, 12), generator=torch.Generator().manual_seed(3))
    result = autoplace.optimize(program, targets=TWO, shapes={"seq_len": 12})
    with torch.no_grad():
        expected = net(ids).numpy()
    max_error(result.run(ids.numpy()), expected)
    # The same program placed at another length, by hand over three devices.
    ids = ids[:, :5]
    placement = autoplace.place(program, None, {"relax.matmul": "cpu2", "relax.cumsum": "cpu1"}, THREE,
                                shapes={"seq_len": 5})
    with torch.no_grad():
        max_error(placement.run(ids.numpy()), net(ids).numpy())


def test_symbolic_dims_without_binding_list_them_and_show_the_call(llama_with_symbolic_seq_len):
    _, program = llama_with_symbolic_seq_len
    expected_error = r"'seq_len'.*input_ids.shape\[1\].*shapes=\{'seq_len': 128\}"
    with pytest.raises(autoplace.ModelError, match=expected_error):
        autoplace.optimize(program, targets=TWO)
    with pytest.raises(autoplace.ModelError, match=r"shapes names \['seq'\].*'seq_len'"):
        autoplace.load_model(program, shapes={"seq": 8})


def test_symbolic_relax_module_bound_by_variable_name():
    from tvm.script import relax as R

    @R.function
    def main(x: R.Tensor(("n", 4), "float32"), w: R.Tensor((4, 3), "float32")):
        R.func_attr({"num_input": 1})
        with R.dataflow():
            y = R.nn.relu(R.matmul(x, w))
            R.output(y)
        return y

    mod = tvm.IRModule({"main": main})
    w = np.random.default_rng(0).standard_normal((4, 3)).astype("float32")
    x = np.random.default_rng(1).standard_normal((6, 4)).astype("float32")
    with pytest.raises(autoplace.ModelError, match=r"'n'.*shapes=\{'n': 128\}"):
        autoplace.load_model(mod, [w])
    placement = autoplace.place(mod, [w], {"relax.nn.relu": "cpu1"}, TWO, shapes={"n": 6})
    np.testing.assert_allclose(placement.run(x), np.maximum(x @ w, 0), rtol=1e-5)
    with pytest.raises(autoplace.ModelError, match="positive size"):
        autoplace.load_model(mod, [w], shapes={"n": 0})


# -- names -------------------------------------------------------------------------------------------------


def test_suite_names_parse_with_their_dashes():
    assert architectures.split_spec("t5-encoder") == ("t5-encoder", "small")
    assert architectures.split_spec("whisper-encoder-base") == ("whisper-encoder", "base")
    assert architectures.split_spec("cnn-base") is None
    assert zoo.check_spec("llama-base") == ("llama", "base")
    assert zoo.check_spec("cnn-base") == ("cnn", "base")
    with pytest.raises(autoplace.ModelError, match="no architecture"):
        architectures.get("llama2")
