"""The op graph view: names, attributes, tuples, constants, several outputs."""

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import relax as R

import autoplace
import autoplace.errors
from autoplace import zoo


def _split_module():
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 6), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            parts = bb.emit(relax.op.split(x, 2, axis=1))
            left = bb.emit(relax.TupleGetItem(parts, 0))
            right = bb.emit(relax.TupleGetItem(parts, 1))
            prod = bb.emit(relax.op.multiply(left, right))
            both = bb.emit(relax.Tuple([prod, left]))
            cat = bb.emit(relax.op.concat(both, axis=1))
            scaled = bb.emit(relax.op.add(cat, relax.const(np.full((4, 6), 2.0, "float32"))))
            out = bb.emit_output(relax.Tuple([scaled, right]))
        bb.emit_func_output(out)
    return bb.get()


def test_nodes_edges_and_attributes():
    graph = autoplace.op_graph(_split_module())
    assert graph.graph["inputs"] == ["x"]
    # The constant became a weight parameter (and so a weight node).
    assert len(graph.graph["weights"]) == 1
    weight = graph.graph["weights"][0]
    assert graph.nodes[weight]["weight_bytes"] == 4 * 6 * 4
    ops = {d["instance"]: n for n, d in graph.nodes(data=True) if d.get("kind") == "op"}
    assert set(ops) == {"relax.split#0", "relax.multiply#0", "relax.concat#0", "relax.add#0"}
    split = graph.nodes[ops["relax.split#0"]]
    assert split["output_shapes"] == [(4, 3), (4, 3)] and split["output_bytes"] == 96
    assert split["attrs"]["axis"] == 1
    getitems = [n for n, d in graph.nodes(data=True) if d.get("kind") == "getitem"]
    assert len(getitems) == 2
    # Edges from the split to each getitem carry that field's bytes and its index.
    for g in getitems:
        data = graph.edges[ops["relax.split#0"], g]
        assert data["nbytes"] == 48 and data["tensor"] == graph.nodes[g]["index"]
    concat = graph.nodes[ops["relax.concat#0"]]
    assert concat["input_shapes"] == [(4, 3), (4, 3)]
    assert graph.nodes[ops["relax.multiply#0"]]["flops"] == 12
    assert graph.in_degree("output") == 1 and graph.nodes["output"]["output_bytes"] == 4 * 6 * 4 + 48


def test_node_names_are_the_printed_variable_names():
    model = autoplace.load_model(_split_module())
    graph = autoplace.op_graph(model)
    printed = model.mod.script(show_meta=False)
    for node in graph.graph["order"]:
        assert f"{node}: " in printed or f"{node} = " in printed


def test_matmul_and_conv_flops():
    mlp = autoplace.op_graph(zoo.mlp())
    mm = next(d for _, d in mlp.nodes(data=True) if d.get("op") == "relax.matmul")
    (m, k), (_, n) = mm["input_shapes"]
    assert mm["flops"] == 2 * m * k * n
    cnn = autoplace.op_graph(zoo.cnn())
    conv = next(d for _, d in cnn.nodes(data=True) if d.get("op") == "relax.nn.conv2d")
    (_, cin, _, _), (_, _, kh, kw) = conv["input_shapes"]
    assert conv["flops"] == 2 * np.prod(conv["output_shapes"][0]) * cin * kh * kw


def test_bindings_outside_dataflow_and_several_outputs_place_and_run():
    @tvm.script.ir_module
    class Module:
        @R.function
        def main(x: R.Tensor((3, 3), "float32"), y: R.Tensor((3, 3), "float32")):
            a = R.add(x, y)
            with R.dataflow():
                b = R.multiply(a, x)
                c = R.subtract(b, y)
                R.output(b, c)
            d = R.exp(c)
            return (d, b)

    graph = autoplace.op_graph(Module)
    assert graph.nodes["a"]["dataflow"] is False and graph.nodes["b"]["dataflow"] is True
    placement = autoplace.place(Module, None, {"b": "cpu1", "d": "cpu1"}, {"cpu0": "llvm", "cpu1": "llvm"})
    xv = np.random.default_rng(0).standard_normal((3, 3)).astype("float32")
    yv = np.ones((3, 3), "float32")
    d, b = placement.run(xv, yv)
    np.testing.assert_allclose(b, (xv + yv) * xv, rtol=1e-6)
    np.testing.assert_allclose(d, np.exp((xv + yv) * xv - yv), rtol=1e-5)


def test_instances_and_op_names_select_nodes():
    from autoplace.graph import select_nodes

    graph = autoplace.op_graph(zoo.cnn())
    convs = select_nodes(graph, "relax.nn.conv2d")
    assert len(convs) > 2
    assert select_nodes(graph, "relax.nn.conv2d#0") == [convs[0]]
    assert select_nodes(graph, "conv2d") == convs


# -- the kernel-level graph -----------------------------------------------------------------------


class _TenPerOp:
    """Fake costs: 10 us per op a kernel computes, 1 us per launch (numbers to check by hand)."""

    def latencies(self, units, kind, graph=None):
        import pandas as pd

        return pd.DataFrame({"latency_us": [10.0 * len(u.nodes) for u in units], "source": ["measured"] * len(units)})

    def launch_us(self, label):
        return 1.0


def test_a_device_kernel_overlaps_the_vms_call_and_a_group_fused_otherwise_costs_its_parts():
    """On the host a kernel costs its time plus the VM's call; on a CUDA device the call overlaps the kernel
    before it, so the larger of the two (H200 box: the sum priced all-GPU bert-base 59% high). A group the
    device computes with other kernels inside it costs their sum; one a device kernel crosses is unsupported."""
    from types import SimpleNamespace

    from autoplace.graph import unit_graph
    from autoplace.graph.unit_graph import _exact_cover
    from autoplace.profile.units import units_by_kind

    class FiveUsCalls(_TenPerOp):
        def launch_us(self, label):
            return 5.0

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 8), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.nn.relu(x))
        bb.emit_func_output(out)
    model = autoplace.load_model(bb.get())
    graph = autoplace.op_graph(model)
    targets = autoplace.TargetSet({"cpu": "llvm", "gpu": {"kind": "cuda", "arch": "sm_90"}})
    units = unit_graph(graph, units_by_kind(model, graph, targets), FiveUsCalls(), targets)
    (relu,) = [n for n, d in units.graph.nodes(data=True) if d.get("kind") == "unit"]
    assert units.graph.nodes[relu]["latency_us"] == {"cpu": 15.0, "gpu": 10.0}

    def unit(*nodes):
        return SimpleNamespace(nodes=list(nodes))

    inside = [unit("a", "b"), unit("c"), unit("d", "e")]
    assert _exact_cover(["a", "b", "c", "x"], inside, computed={"a", "b", "c", "d", "e"}) == inside[:2]  # x folded
    assert _exact_cover(["a", "b", "c", "d"], inside, computed={"a", "b", "c", "d", "e"}) == []  # (d, e) crosses
    assert _exact_cover(["a", "b", "c", "y"], inside[:2], computed={"a", "b", "c", "y"}) == []  # y computed elsewhere
    assert _exact_cover(["c"], inside, computed={"c"}) == []


def test_unit_graph_of_a_small_module_exactly():
    """x -> matmul(x, w) -> relu -> softmax, and sum(x), returned as a tuple: FuseOps puts matmul+relu in one
    kernel; the solver's graph has three kernels, the input and the output, with the tensors' exact bytes."""
    from autoplace.graph import unit_graph
    from autoplace.profile.units import units_by_kind

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 8), "float32"))
    w = relax.Var("w", relax.TensorType((8, 16), "float32"))
    with bb.function("main", [x, w], attrs={"num_input": 1}):
        with bb.dataflow():
            a = bb.emit(relax.op.matmul(x, w))
            b = bb.emit(relax.op.nn.relu(a))
            c = bb.emit(relax.op.nn.softmax(b))
            d = bb.emit(relax.op.sum(x, axis=[1]))
            out = bb.emit_output(relax.Tuple([c, d]))
        bb.emit_func_output(out)
    model = autoplace.load_model(bb.get(), [np.ones((8, 16), "float32")])
    graph = autoplace.op_graph(model)
    targets = autoplace.TargetSet({"cpu0": "llvm", "cpu1": "llvm"})
    units = unit_graph(graph, units_by_kind(model, graph, targets), _TenPerOp(), targets)

    assert units.members == {"lv1": ["lv", "lv1"], "lv2": ["lv2"], "lv3": ["lv3"]}
    assert units.owner == {"lv": "lv1", "lv1": "lv1", "lv2": "lv2", "lv3": "lv3"}
    nodes = units.graph.nodes
    assert set(nodes) == {"x", "lv1", "lv2", "lv3", "output"}
    assert nodes["x"]["pinned"] == nodes["output"]["pinned"] == "cpu0"
    assert nodes["lv1"]["latency_us"] == {"cpu0": 21.0, "cpu1": 21.0}  # two ops + one launch
    assert nodes["lv2"]["latency_us"] == {"cpu0": 11.0, "cpu1": 11.0}
    assert nodes["lv1"]["weight_bytes"] == 8 * 16 * 4 and nodes["lv2"]["weight_bytes"] == 0
    edges = {(u, v): d["nbytes"] for u, v, d in units.graph.edges(data=True)}
    assert edges == {("x", "lv1"): 4 * 8 * 4, ("x", "lv3"): 4 * 8 * 4, ("lv1", "lv2"): 4 * 16 * 4,
                     ("lv2", "output"): 4 * 16 * 4, ("lv3", "output"): 4 * 4}
    # A pin on one op pins its kernel; a plan over kernels means a target for every op.
    assert units.unit_pins(graph, {"relax.nn.relu": "cpu1"}, targets) == {"lv1": "cpu1"}
    plan = {"x": "cpu0", "lv1": "cpu1", "lv2": "cpu1", "lv3": "cpu0", "output": "cpu0"}
    assert units.op_assignment(plan, graph) == {"x": "cpu0", "lv": "cpu1", "lv1": "cpu1", "lv2": "cpu1",
                                                "lv3": "cpu0", "output": "cpu0"}
    with pytest.raises(autoplace.errors.InfeasiblePlacementError, match="contradictory pins"):
        units.unit_pins(graph, {"lv": "cpu0", "lv1": "cpu1"}, targets)
