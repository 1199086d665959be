"""Reading models: ONNX files, TVMScript files, torch modules, and the errors users meet."""

import shutil

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper

import autoplace
from autoplace import ModelError


def _onnx_model(path):
    w = numpy_helper.from_array(np.arange(12, dtype="float32").reshape(4, 3) / 10, name="w")
    b = numpy_helper.from_array(np.ones(3, dtype="float32"), name="b")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Add", ["y", "b"], ["z"]),
         helper.make_node("Relu", ["z"], ["out"])],
        "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 3])], initializer=[w, b],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)
    return numpy_helper.to_array(w), numpy_helper.to_array(b)


def test_onnx_file_places_and_runs(tmp_path):
    path = str(tmp_path / "tiny.onnx")
    w, b = _onnx_model(path)
    placement = autoplace.place(path, None, {"relax.nn.relu": "cpu1"}, {"cpu0": "llvm", "cpu1": "llvm"})
    assert placement.model.name == "tiny" and len(placement.params) == 2
    x = np.random.default_rng(0).standard_normal((2, 4)).astype("float32")
    np.testing.assert_allclose(placement.run(x), np.maximum(x @ w + b, 0), rtol=1e-5)


def test_model_files_with_symbolic_dimensions_are_placed_for_the_sizes_given(tmp_path):
    """``shapes=`` binds a file's symbolic dimensions as it binds a model object's: an ONNX ``dim_param`` and a
    TVMScript ``T.int64`` variable; unbound, the error names them and shows the call and the CLI flag."""
    w = np.arange(12, dtype="float32").reshape(4, 3) / 10
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Relu", ["y"], ["out"])], "dyn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", 3])],
        initializer=[numpy_helper.from_array(w, name="w")])
    onnx_path = str(tmp_path / "dyn.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), onnx_path)
    with pytest.raises(ModelError, match=r"'batch'.*shapes=\{'batch': 128\}.*--shape batch=128"):
        autoplace.load_model(onnx_path)
    two = {"cpu0": "llvm", "cpu1": "llvm"}
    placement = autoplace.place(onnx_path, None, {"relax.nn.relu": "cpu1"}, two, shapes={"batch": 5})
    x = np.random.default_rng(0).standard_normal((5, 4)).astype("float32")
    np.testing.assert_allclose(placement.run(x), np.maximum(x @ w, 0), rtol=1e-5)

    script = tmp_path / "dyn.py"
    script.write_text("""
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 3), "float32")):
        with R.dataflow():
            y = R.add(x, x)
            R.output(y)
        return y
""")
    model = autoplace.load_model(str(script), shapes={"n": 7})
    assert [shape for _, shape, _ in model.input_specs()] == [(7, 3)]
    with pytest.raises(ModelError, match=r"shapes names \['m'\].*'n'"):
        autoplace.load_model(str(script), shapes={"m": 7})


def test_onnx_file_that_fails_to_import(tmp_path):
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"this is not a protobuf")
    with pytest.raises(ModelError, match="not a readable ONNX file"):
        autoplace.load_model(str(bad))
    graph = helper.make_graph([helper.make_node("NoSuchOp", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "odd.onnx"))
    with pytest.raises(ModelError, match="ONNX importer failed.*opset"):
        autoplace.load_model(str(tmp_path / "odd.onnx"))


def test_tvmscript_file(tmp_path):
    source = '''
from tvm.script import ir as I, relax as R

@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((3,), "float32"), y: R.Tensor((3,), "float32")):
        with R.dataflow():
            z = R.add(x, y)
            w = R.multiply(z, x)
            R.output(w)
        return w
'''
    path = tmp_path / "model.py"
    path.write_text(source)
    placement = autoplace.place(str(path), None, {"w": "cpu1"}, {"cpu0": "llvm", "cpu1": "llvm"})
    x, y = np.arange(3, dtype="float32"), np.ones(3, "float32")
    np.testing.assert_allclose(placement.run(x, y), (x + y) * x)


def test_missing_file_and_wrong_type():
    with pytest.raises(ModelError, match="no such model file"):
        autoplace.load_model("/nonexistent/model.onnx")
    with pytest.raises(ModelError, match="cannot read a model of type int"):
        autoplace.load_model(3)


def _ops(model) -> list:
    return [b.value.op.name for block in model.main.body.blocks for b in block.bindings
            if hasattr(b.value, "op") and hasattr(b.value.op, "name")]


def test_weight_transposes_are_computed_once_at_import():
    """torch's Linear imports as matmul(x, permute_dims(W)): the transpose of a weight is done at import
    (named after the weight), never at run time; the numbers stay PyTorch's."""
    import torch

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x = torch.randn(2, 8)
    model = autoplace.load_model(net, example_inputs=(x,))
    unfolded = autoplace.frontend.normalize(*_unnormalized(net, x), fold_weights=False)
    assert _ops(unfolded).count("relax.permute_dims") == 2
    assert "relax.permute_dims" not in _ops(model)
    names = [v.name for v in model.weight_vars]
    assert sorted(n for n in names if n.endswith("_permute_dims")) == ["p_0_weight_permute_dims",
                                                                        "p_2_weight_permute_dims"]
    assert not any(n.endswith("_weight") for n in names)  # the untransposed weights are not kept
    weights = dict(zip(names, model.params))
    np.testing.assert_array_equal(weights["p_0_weight_permute_dims"], net[0].weight.detach().numpy().T)
    assert model.weight_nbytes == unfolded.weight_nbytes
    placement = autoplace.place(model, None, {"relax.nn.relu": "cpu1"}, {"cpu0": "llvm", "cpu1": "llvm"})
    (out,) = placement.run(x.numpy())  # torch export returns a tuple
    np.testing.assert_allclose(out, net(x).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_scalar_operands_stay_inline_and_compute_without_pow():
    """Scalar constants of elementwise ops (GPT-2's ``0.5 * x * (1 + tanh(c * (x + 0.044715 * x ** 3)))``)
    are not weights: they become immediates of the kernel, so ``x ** 3`` is ``x * x * x``, not a ``powf``
    read from memory; the numbers stay PyTorch's, on one device and split over two."""
    import torch

    class NewGELU(torch.nn.Module):
        def forward(self, x):
            return 0.5 * x * (1.0 + torch.tanh(0.7978845608 * (x + 0.044715 * torch.pow(x, 3.0))))

    net = torch.nn.Sequential(torch.nn.Linear(8, 16), NewGELU(), torch.nn.Linear(16, 4))
    x = torch.randn(2, 8)
    model = autoplace.load_model(net, example_inputs=(x,))
    assert all(np.ndim(w) > 0 for w in model.params), [np.shape(w) for w in model.params]
    assert len(model.params) == 4  # two weights, two biases
    want = net(x).detach().numpy()
    targets = {"cpu0": "llvm", "cpu1": "llvm"}
    for pins in ({}, {"relax.tanh": "cpu1", "relax.power": "cpu1"}):
        placement = autoplace.place(model, None, pins, targets)
        (out,) = placement.run(x.numpy())
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
    lowered = autoplace.backend.lower(autoplace.place(model, None, {}, targets).mod)
    kernels = [f.script() for _, f in lowered.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    assert kernels and not any("T.pow(" in k for k in kernels)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc to compile CUDA kernels")
def test_scalar_operands_of_cuda_kernels_compile():
    """GPT-2 with every op on a GPU: the inline scalars of its GELU, attention scale and masks become
    immediates of CUDA kernels; no constant is left for the VM to put on the CPU (apache/tvm#17884)."""
    from autoplace import zoo
    from autoplace.backend import build, lower

    model = zoo.get("gpt2")
    targets = {"cpu": "llvm", "gpu": {"kind": "cuda", "arch": "sm_90"}}
    assignment = {n: "gpu" for n in autoplace.op_graph(model).graph["order"]}
    placement = autoplace.place(model, None, assignment, targets)
    lowered = lower(placement.mod)
    kernels = [f for _, f in lowered.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    assert any(f.attrs["target"].kind.name == "cuda" and "0.0447" in f.script() for f in kernels)
    constants = []
    tvm.relax.analysis.post_order_visit(lowered["main"], lambda e: constants.append(e) if isinstance(e, tvm.ir.Constant)
                                        and isinstance(e.ty, tvm.relax.TensorType) and e.ty.ndim == 0 else None)
    assert not constants, [c.ty for c in constants]  # (arange's folded vectors are copied, see restore_vdevices)
    build(placement.mod)  # compiles the CUDA kernels with nvcc; running them needs a GPU


def test_a_detector_with_its_top_k_lowers_for_a_gpu_and_runs_on_the_cpu():
    """``zoo.get("detect")``: a model whose post-processing sorts (``topk``). TVM's GPU sort reads
    Target.current() while ``DispatchSortScan`` runs, which failed without one ("Target context required"): the
    lowering gives it the module's GPU target. On the CPU it returns the 10 best anchors, best first."""
    from autoplace import zoo
    from autoplace.backend import lower
    from autoplace.profile.units import extract_units

    model = zoo.parse("detect")
    graph = autoplace.op_graph(model)
    assert "relax.topk" in {d.get("op") for _, d in graph.nodes(data=True)}
    targets = {"cpu": "llvm", "gpu": {"kind": "cuda", "arch": "sm_90"}}
    ops = {d["op"] for _, d in graph.nodes(data=True) if d.get("kind") == "op"}
    mixed = autoplace.place(model, None, {**{op: "gpu" for op in ops}, "relax.topk": "cpu"}, targets)
    lowered = lower(mixed.mod)
    kinds = {f.attrs["target"].kind.name for _, f in lowered.functions_items() if isinstance(f, tvm.tirx.PrimFunc)}
    assert kinds == {"llvm", "cuda"}
    gpu_units = extract_units(model, tvm.target.Target(targets["gpu"]), graph=graph)
    assert any("relax.topk" in u.ops for u in gpu_units)  # the sort as a CUDA kernel, for the profiler
    image = model.random_inputs(seed=0)
    (out,) = autoplace.place(model, None, {}, {"cpu": "llvm"}).run(*image)
    assert out.shape == (1, 10, 5) and np.isfinite(out).all()
    scores = out[0, :, 4]
    assert (np.diff(scores) <= 1e-6).all() and ((scores > 0) & (scores < 1)).all()  # top-k: sorted sigmoids


def _unnormalized(net, x):
    import torch
    from tvm.relax.frontend import detach_params
    from tvm.relax.frontend.torch import from_exported_program

    mod, params = detach_params(from_exported_program(torch.export.export(net, (x,)), keep_params_as_input=True))
    return mod, params


def test_only_layout_changes_of_weights_are_folded():
    """Tensors the model makes at run time (zeros, broadcasts of a weight) stay run-time work: folding them
    would store large tensors; a weight used twice is stored once."""
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 3), "float32"))
    w = relax.Var("w", relax.TensorType((3, 3), "float32"))
    b = relax.Var("b", relax.TensorType((3,), "float32"))
    with bb.function("main", [x, w, b], attrs={"num_input": 1}):
        with bb.dataflow():
            wt = bb.emit(relax.op.permute_dims(w))
            bias = bb.emit(relax.op.broadcast_to(b, relax.ShapeExpr([4, 3])))
            zeros = bb.emit(relax.op.zeros(relax.ShapeExpr([4, 3]), "float32"))
            y = bb.emit(relax.op.add(relax.op.add(relax.op.matmul(x, wt), bias), zeros))
            out = bb.emit_output(relax.op.matmul(y, w))
        bb.emit_func_output(out)
    wv = np.arange(9, dtype="float32").reshape(3, 3)
    bv = np.ones(3, "float32")
    model = autoplace.load_model(bb.get(), [wv, bv])
    ops = _ops(model)
    assert "relax.permute_dims" not in ops
    assert {"relax.broadcast_to", "relax.zeros"} <= set(ops)
    assert [v.name for v in model.weight_vars] == ["w", "b", "w_permute_dims"]
    xv = np.random.default_rng(0).standard_normal((4, 3)).astype("float32")
    placement = autoplace.place(model, None, None, {"cpu": "llvm"})
    np.testing.assert_allclose(placement.run(xv), (xv @ wv.T + bv) @ wv, rtol=1e-5)


def test_batch_norms_after_convolutions_are_folded_into_them():
    """An inference BatchNorm after a convolution (ResNet, MobileNet) is folded into the convolution's
    weight and a bias at import (TVM's FoldBatchnormToConv2D, then computed once): the build runs no
    normalisation kernel, and the numbers stay PyTorch's, with trained statistics, depthwise convs
    included, a convolution with a bias of its own too, on one device and split over two. The explicit padding
    after ReLU6 (MobileNetV2's "same" padding) then fuses into the first convolution's kernel, which must write
    the border too. A biased convolution whose output is also read elsewhere keeps its BatchNorm."""
    import torch

    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8), torch.nn.ReLU6(),
        torch.nn.ZeroPad2d((0, 1, 0, 1)),
        torch.nn.Conv2d(8, 8, 2, groups=8, bias=False), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.Conv2d(8, 4, 1, bias=True), torch.nn.BatchNorm2d(4),  # a conv with a bias: its mean shifted
    )
    for module in net:
        if isinstance(module, torch.nn.BatchNorm2d):
            module.running_mean.uniform_(-1, 1)
            module.running_var.uniform_(0.5, 2)
            module.weight.data.uniform_(0.5, 2)
            module.bias.data.uniform_(-1, 1)
    net.eval()
    x = torch.randn(1, 3, 8, 8)
    model = autoplace.load_model(net, example_inputs=(x,))
    unfolded = autoplace.frontend.normalize(*_unnormalized(net, x), fold_weights=False)
    assert _ops(unfolded).count("relax.nn.batch_norm") == 3
    assert _ops(model).count("relax.nn.batch_norm") == 0
    names = [v.name for v in model.weight_vars]
    assert sum(n.endswith("_weight_multiply") for n in names) == 3
    expected = net(x).detach().numpy()
    (out,) = autoplace.place(model, None, {}, {"cpu0": "llvm"}).run(x.numpy())
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)
    placement = autoplace.place(model, None, {"relax.nn.relu": "cpu1"}, {"cpu0": "llvm", "cpu1": "llvm"})
    (out,) = placement.run(x.numpy())
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)

    class ReadTwice(torch.nn.Module):  # conv + bias read by the BatchNorm and by the sum: nothing to fold into
        def __init__(self):
            super().__init__()
            self.conv, self.bn = torch.nn.Conv2d(3, 4, 3, bias=True), torch.nn.BatchNorm2d(4)

        def forward(self, x):
            y = self.conv(x)
            return self.bn(y) + y

    twice = ReadTwice().eval()
    model = autoplace.load_model(twice, example_inputs=(x,))
    assert _ops(model).count("relax.nn.batch_norm") == 1
    (out,) = autoplace.place(model, None, {}, {"cpu0": "llvm"}).run(x.numpy())
    np.testing.assert_allclose(out, twice(x).detach().numpy(), rtol=1e-4, atol=1e-5)
