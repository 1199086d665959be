"""The Relax ``main`` function as a ``networkx.DiGraph``.

Nodes
-----
One node per model input (``kind="input"``), per weight parameter (``kind="weight"``), per binding of
``main`` (``kind="op"`` for an operator call, ``"tuple"``, ``"getitem"``, ``"alias"`` for the
structural bindings) and one ``"output"`` node for the returned value. A node is named by its binding
variable as it prints in TVMScript (the frontend makes those names unique). Attributes of an op node:

``op`` (``"relax.nn.conv2d"``), ``instance`` (``"relax.nn.conv2d#0"``: the first conv2d in program
order), ``attrs`` (dict of the operator attributes, JSON-friendly), ``input_shapes``/``input_dtypes``,
``output_shapes``/``output_dtypes`` (lists: one per tensor in the output), ``output_bytes``,
``flops`` (an estimate, see :func:`estimate_flops`), ``order`` (position in the program).

Edges
-----
``producer -> consumer`` for every tensor use, with ``nbytes`` (bytes that flow) and ``tensor`` (the
index of the tuple field for a tuple-valued producer, else ``None``). Several uses of one value by the
same consumer are one edge.
"""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import tvm
from tvm import relax

_BYTES = {}


def _dtype_bytes(dtype) -> int:
    key = str(dtype)
    if key not in _BYTES:
        _BYTES[key] = 1 if key == "bool" else max(1, np.dtype(key).itemsize) if key != "void" else 0
    return _BYTES[key]


def _shape(ty) -> tuple[int, ...]:
    return tuple(int(d) for d in ty.shape.values) if ty.shape is not None else ()


def tensor_nbytes(ty) -> int:
    """Bytes of a tensor type (0 for a non-tensor)."""
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        return 0
    return int(math.prod(_shape(ty))) * _dtype_bytes(ty.dtype)


def type_nbytes(ty) -> int:
    """Bytes of a tensor or (nested) tuple type."""
    if isinstance(ty, tvm.ir.TupleType):
        return sum(type_nbytes(f) for f in ty.fields)
    return tensor_nbytes(ty)


def _flat_tensors(ty) -> list:
    if isinstance(ty, tvm.ir.TupleType):
        out = []
        for field in ty.fields:
            out.extend(_flat_tensors(field))
        return out
    return [ty] if isinstance(ty, relax.TensorType) else []


def _jsonable(value):
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, (list, tuple, tvm.ir.Array)) or type(value).__name__ == "Array":
        return [_jsonable(v) for v in value]
    if type(value).__name__ == "IntImm":
        return int(value)
    if type(value).__name__ == "FloatImm":
        return float(value)
    return str(value)


def op_attrs(call) -> dict:
    """The attributes of an operator call as a plain dict."""
    attrs = call.attrs
    if attrs is None:
        return {}
    info = getattr(type(attrs), "__tvm_ffi_type_info__", None)
    if info is None:
        return {}
    return {f.name: _jsonable(getattr(attrs, f.name)) for f in info.fields}


#: Ops that move or create data without arithmetic (0 FLOPs in :func:`estimate_flops`).
_DATA_MOVEMENT_OPS = frozenset(f"relax.{name}" for name in (
    "reshape", "permute_dims", "broadcast_to", "expand_dims", "squeeze", "flatten", "strided_slice",
    "dynamic_strided_slice", "concat", "split", "repeat", "tile", "flip", "layout_transform", "take",
    "gather_elements", "gather_nd", "full", "full_like", "zeros", "zeros_like", "ones", "ones_like",
    "arange", "tril", "triu", "astype", "to_vdevice", "hint_on_device",
))


def estimate_flops(op: str, in_shapes: list, out_shapes: list, attrs: dict) -> float:
    """A FLOP estimate (multiply-add = 2) used as a cost-model feature and in reports.

    Notes
    -----
    Exact for matmul and convolutions (dense, no sparsity); elementwise and reduction ops count one
    operation per output (or input, for reductions) element, normalisations five, data movement
    (reshape, transpose, slicing, gather...) none, so a kernel's heaviest op (its anchor, the op whose
    geometry the cost model reads) is never a reshape fused before the arithmetic.
    """
    if op in _DATA_MOVEMENT_OPS:
        return 0.0
    out_elems = sum(math.prod(s) for s in out_shapes) if out_shapes else 0
    in_elems = sum(math.prod(s) for s in in_shapes) if in_shapes else 0
    if op in ("relax.matmul", "relax.linear") and in_shapes:
        k = in_shapes[0][-1] if in_shapes[0] else 1
        return 2.0 * out_elems * k
    if op.startswith("relax.nn.conv") and len(in_shapes) >= 2:
        weight = in_shapes[1]
        per_out = math.prod(weight[1:])  # (Cin/groups) * kernel window, for OIHW/OIW/OIDHW layouts
        if op.endswith("_transpose"):
            per_out = weight[0] // max(1, attrs.get("groups", 1) or 1) * math.prod(weight[2:])
        return 2.0 * out_elems * per_out
    if op in ("relax.nn.layer_norm", "relax.nn.group_norm", "relax.nn.batch_norm", "relax.nn.rms_norm",
              "relax.nn.softmax", "relax.nn.log_softmax"):
        return 5.0 * in_elems
    if op.startswith("relax.nn.") and "pool" in op:
        window = math.prod(attrs.get("pool_size") or [1])
        return float(out_elems * window)
    if op in ("relax.sum", "relax.mean", "relax.max", "relax.min", "relax.prod", "relax.variance", "relax.std"):
        return float(in_elems)
    return float(out_elems)


def op_graph(model) -> nx.DiGraph:
    """Build the op-level graph view of a model.

    Parameters
    ----------
    model : autoplace.Model, or anything :func:`autoplace.load_model` reads

    Returns
    -------
    networkx.DiGraph
        See the module docstring for node and edge attributes. ``graph.graph`` holds ``name``,
        ``inputs``, ``weights``, ``outputs`` (node names) and ``order`` (op nodes in program order).
    """
    from ..frontend import load_model

    model = load_model(model)
    main = model.main
    graph = nx.DiGraph(name=model.name)
    num_input = model.num_input
    var_node: dict = {}
    inputs, weights = [], []
    for i, var in enumerate(main.params):
        kind = "input" if i < num_input else "weight"
        nbytes = tensor_nbytes(var.ty)
        graph.add_node(
            var.name,
            kind=kind,
            shape=_shape(var.ty),
            dtype=str(var.ty.dtype),
            output_bytes=nbytes,
            weight_bytes=nbytes if kind == "weight" else 0,
            order=-1,
        )
        var_node[var] = (var.name, None)
        (inputs if kind == "input" else weights).append(var.name)

    counts: dict[str, int] = {}
    order: list[str] = []
    # A tuple binding's fields stay where their producers put them, so edges of tuple/getitem nodes
    # carry the field's own bytes.

    def uses(expr) -> list[tuple[str, int | None, int]]:
        """(producer node, tensor key, nbytes) for every tensor an argument expression reads."""
        out = []
        if isinstance(expr, relax.Var):
            node, key = var_node[expr]
            out.append((node, key, type_nbytes(expr.ty)))
        elif isinstance(expr, relax.Tuple):
            for field in expr.fields:
                out.extend(uses(field))
        elif isinstance(expr, relax.TupleGetItem):
            base = uses(expr.tuple_value)
            fields = expr.tuple_value.ty.fields
            nbytes = type_nbytes(fields[expr.index])
            out.extend((node, expr.index if key is None else key, nbytes) for node, key, _ in base)
        return out

    blocks = main.body.blocks if isinstance(main.body, relax.SeqExpr) else []
    for block in blocks:
        for binding in block.bindings:
            name = binding.var.name
            value = binding.value
            ty = binding.var.ty
            out_tensors = _flat_tensors(ty)
            attrs = dict(
                output_shapes=[_shape(t) for t in out_tensors],
                output_dtypes=[str(t.dtype) for t in out_tensors],
                output_bytes=type_nbytes(ty),
                order=len(order),
                dataflow=isinstance(block, relax.DataflowBlock),
            )
            if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
                op = value.op.name
                instance = f"{op}#{counts.get(op, 0)}"
                counts[op] = counts.get(op, 0) + 1
                args = [a for a in value.args]
                tensor_args = [a for a in args if isinstance(a.ty, (relax.TensorType, tvm.ir.TupleType))]
                in_types = []
                for a in tensor_args:
                    in_types.extend(_flat_tensors(a.ty))
                in_shapes = [_shape(t) for t in in_types]
                call_attrs = op_attrs(value)
                attrs.update(
                    kind="op",
                    op=op,
                    instance=instance,
                    attrs=call_attrs,
                    input_shapes=in_shapes,
                    input_dtypes=[str(t.dtype) for t in in_types],
                    flops=estimate_flops(op, in_shapes, attrs["output_shapes"], call_attrs),
                )
                sources = [u for a in args for u in uses(a)]
            elif isinstance(value, relax.Call):
                # A call of a global function (call_tir of a PrimFunc, a subfunction...): placed as a unit.
                callee = value.op.name_hint if isinstance(value.op, tvm.ir.GlobalVar) else str(value.op)
                instance = f"{callee}#{counts.get(callee, 0)}"
                counts[callee] = counts.get(callee, 0) + 1
                attrs.update(kind="op", op=callee, instance=instance, attrs={}, input_shapes=[], input_dtypes=[],
                             flops=float(sum(math.prod(s) for s in attrs["output_shapes"])))
                sources = [u for a in value.args for u in uses(a)]
            elif isinstance(value, relax.Tuple):
                attrs.update(kind="tuple", op="tuple")
                sources = uses(value)
            elif isinstance(value, relax.TupleGetItem):
                attrs.update(kind="getitem", op="getitem", index=int(value.index))
                sources = uses(value)
            elif isinstance(value, relax.Var):
                attrs.update(kind="alias", op="alias")
                sources = uses(value)
            else:
                raise TypeError(f"binding {name}: unsupported value {type(value).__name__}")
            graph.add_node(name, **attrs)
            order.append(name)
            for src, key, nbytes in sources:
                if graph.has_edge(src, name):
                    continue
                graph.add_edge(src, name, nbytes=nbytes, tensor=key)
            var_node[binding.var] = (name, None)

    result = main.body.body if isinstance(main.body, relax.SeqExpr) else main.body
    graph.add_node("output", kind="output", op="output", order=len(order), output_bytes=type_nbytes(result.ty))
    outputs = []
    for src, key, nbytes in uses(result):
        if not graph.has_edge(src, "output"):
            graph.add_edge(src, "output", nbytes=nbytes, tensor=key)
        outputs.append(src)
    graph.graph.update(name=model.name, inputs=inputs, weights=weights, outputs=outputs, order=order)
    return graph
