"""Reading models: ONNX files, TVMScript files, torch modules, and the errors users meet."""

import numpy as np
import onnx
import pytest
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
