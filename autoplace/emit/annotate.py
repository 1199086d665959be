"""Emit a placement as standard Relax device annotations.

Given ``{node: target}`` for the op nodes of :func:`autoplace.graph.op_graph`, :func:`annotate`
rewrites ``main`` so that

* every tensor type carries its vdevice (``R.Tensor(..., vdevice="cuda:0")``) and the module's
  ``vdevice`` global info lists the targets in :class:`~autoplace.targets.TargetSet` order;
* a tensor read on a device other than its producer's gets exactly one ``R.to_vdevice`` per
  destination device, bound once and reused by every consumer there. This is the case TVM's own
  ``RealizeVDevice`` cannot handle (seed 003: ``(a+b)-(b+c)`` with the adds on different devices);
* a weight used on several devices becomes one parameter per device (``w``, ``w__gpu``), so it is
  uploaded once at load time and never copied per inference;
* model inputs arrive on their input node's target (the host by default) and the outputs are
  copied to the output node's target (the host by default).

The result passes ``RealizeVDevice`` and builds with the stock recipe as well as with
:func:`autoplace.backend.build`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import networkx as nx
import tvm
from tvm import relax

from ..frontend import Model, _Names
from ..targets import TargetSet


@dataclass
class AnnotatedModule:
    """The emitted module and what is needed to run it.

    Attributes
    ----------
    mod : tvm.IRModule
        ``main(*inputs, *weights)`` with vdevices on every tensor.
    params : list of numpy.ndarray
        Weight values in the order ``main`` takes them after the inputs.
    param_targets : list of str
        The target each of those weights lives on.
    input_targets : list of str
        Where each model input must be given.
    copies : list of dict
        One entry per ``to_vdevice`` emitted: ``var``, ``source``, ``src``, ``dst``, ``nbytes``.
    """

    mod: tvm.IRModule
    params: list
    param_targets: list
    input_targets: list
    copies: list = field(default_factory=list)


def _with_vdevice(ty, vdevice):
    """``ty`` with every tensor in it placed on ``vdevice``."""
    if isinstance(ty, relax.TensorType):
        shape = ty.shape if ty.shape is not None else None
        if shape is None:
            return relax.TensorType(ndim=ty.ndim, dtype=ty.dtype, vdevice=vdevice)
        return relax.TensorType(shape, ty.dtype, vdevice)
    if isinstance(ty, tvm.ir.TupleType):
        return tvm.ir.TupleType([_with_vdevice(f, vdevice) for f in ty.fields])
    return ty


def _tensor_bytes(ty) -> int:
    from ..graph.view import type_nbytes

    return type_nbytes(ty)


class _Emitter:
    def __init__(self, model: Model, graph: nx.DiGraph, assignment: dict, targets: TargetSet):
        self.model = model
        self.graph = graph
        self.assignment = assignment
        self.targets = targets
        # Where each (new) tensor var lives; tuples map to a list of their fields' locations.
        self.location: dict = {}
        self.var_map: dict = {}
        self.weight_copies: dict = {}  # original weight var -> {target: new param var}
        self.weight_index: dict = {}
        self.weight_alias: dict = {}  # binding var -> the weight parameter it renames
        self.copy_cache: dict = {}
        self.bindings: list = []
        self.copies: list = []
        self._name = _Names()  # unique variable names, as the frontend makes them
        self.names = self._name.used

    # -- locations --------------------------------------------------------------------------------
    def _copy(self, var, dst: str, dataflow: bool):
        key = (var, dst)
        if key in self.copy_cache:
            return self.copy_cache[key]
        src = self.location[var]
        target = self.targets[dst]
        new = (relax.DataflowVar if dataflow else relax.Var)(
            self._name(f"{var.name}_to_{dst}"), _with_vdevice(var.ty, target.vdevice)
        )
        self.bindings.append(relax.VarBinding(new, relax.op.to_vdevice(var, target.vdevice)))
        self.location[new] = dst
        self.copy_cache[key] = new
        self.copies.append(
            dict(var=new.name, source=var.name, src=src, dst=dst, nbytes=_tensor_bytes(var.ty))
        )
        return new

    def _weight_on(self, original, dst: str):
        copies = self.weight_copies.setdefault(original, {})
        if dst not in copies:
            name = original.name if not copies else f"{original.name}__{dst}"
            copies[dst] = relax.Var(self._name(name), _with_vdevice(original.ty, self.targets[dst].vdevice))
            self.location[copies[dst]] = dst
        return copies[dst]

    def on(self, expr, dst: str, dataflow: bool):
        """``expr`` (an argument, in original vars) rewritten so every tensor it reads is on ``dst``."""
        if isinstance(expr, relax.Var):
            expr = self.weight_alias.get(expr, expr)
            if expr in self.weight_index:
                return self._weight_on(expr, dst)
            new = self.var_map[expr]
            loc = self.location.get(new)
            if isinstance(loc, list):  # a tuple value: move its fields
                if all(_all_on(f, dst) for f in loc):
                    return new
                return relax.Tuple(
                    [self._field_on(relax.TupleGetItem(new, i), f, dst, dataflow) for i, f in enumerate(loc)]
                )
            if loc is None or loc == dst:
                return new
            return self._copy(new, dst, dataflow)
        if isinstance(expr, relax.Tuple):
            return relax.Tuple([self.on(f, dst, dataflow) for f in expr.fields])
        if isinstance(expr, relax.TupleGetItem):
            base = self.on_tuple_field(expr)
            return self._field_on(*base, dst, dataflow)
        return expr

    def on_tuple_field(self, expr):
        """(new expression, location) of ``tuple[index]`` without moving anything."""
        base = expr.tuple_value
        if isinstance(base, relax.Var) and base in self.weight_index:
            raise NotImplementedError("tuple-valued weights are not supported")
        new_base = self.var_map[base] if isinstance(base, relax.Var) else self.on(base, None, False)
        loc = self.location.get(new_base)
        field_loc = loc[expr.index] if isinstance(loc, list) else loc
        return relax.TupleGetItem(new_base, expr.index), field_loc

    def _field_on(self, expr, loc, dst, dataflow):
        if loc is None or loc == dst:
            return expr
        if isinstance(loc, list):
            return relax.Tuple(
                [self._field_on(relax.TupleGetItem(expr, i), f, dst, dataflow) for i, f in enumerate(loc)]
            )
        # Bind the field to a variable first, so that the copy is cached and shared.
        key = ("field", expr.tuple_value, expr.index)
        if key not in self.copy_cache:
            var = (relax.DataflowVar if dataflow else relax.Var)(self._name("field"), _field_type(expr))
            self.bindings.append(relax.VarBinding(var, expr))
            self.location[var] = loc
            self.copy_cache[key] = var
        return self._copy(self.copy_cache[key], dst, dataflow)

    def location_of(self, expr):
        if isinstance(expr, relax.Var) and self.weight_alias.get(expr, expr) in self.weight_index:
            return self.targets.host.name
        if isinstance(expr, relax.Var):
            return self.location.get(self.var_map.get(expr, expr))
        if isinstance(expr, relax.Tuple):
            return [self.location_of(f) for f in expr.fields]
        if isinstance(expr, relax.TupleGetItem):
            return self.on_tuple_field(expr)[1]
        return None

    # -- the rewrite ------------------------------------------------------------------------------
    def emit(self) -> AnnotatedModule:
        model, targets = self.model, self.targets
        host = targets.host.name
        main = model.main
        inputs = model.input_vars
        weights = model.weight_vars
        for var in inputs:
            self.names.add(var.name)
        new_inputs, input_targets = [], []
        for var in inputs:
            dst = self.assignment.get(var.name, host)
            new = relax.Var(var.name, _with_vdevice(var.ty, targets[dst].vdevice))
            self.var_map[var] = new
            self.location[new] = dst
            new_inputs.append(new)
            input_targets.append(dst)
        for i, var in enumerate(weights):
            self.weight_index[var] = i
        body = main.body
        new_blocks = []
        for block in body.blocks:
            dataflow = isinstance(block, relax.DataflowBlock)
            self.bindings = []
            self.copy_cache = {k: v for k, v in self.copy_cache.items() if not isinstance(v, relax.DataflowVar)}
            for binding in block.bindings:
                self._binding(binding, dataflow)
            new_blocks.append((dataflow, self.bindings))
        # Outputs go to the output node's target.
        out_dst = self.assignment.get("output", host)
        if not new_blocks:
            new_blocks.append((False, []))
        dataflow, self.bindings = new_blocks[-1]
        result = self.on(body.body, out_dst, dataflow=False)
        new_blocks[-1] = (dataflow, self.bindings)
        blocks = [
            (relax.DataflowBlock if df else relax.BindingBlock)(bindings) for df, bindings in new_blocks if bindings
        ]
        # Parameters: inputs, then every weight on every device that uses it (unused: on the host).
        new_weights, values, param_targets = [], [], []
        for var, value in zip(weights, model.params):
            copies = self.weight_copies.get(var) or {host: self._weight_on(var, host)}
            for dst in [t for t in targets if t in copies]:
                new_weights.append(copies[dst])
                values.append(value)
                param_targets.append(dst)
        func = relax.Function(new_inputs + new_weights, relax.SeqExpr(blocks, result), _type_of(result), main.is_pure,
                              main.attrs)
        func = func.with_attr("num_input", len(new_inputs))
        mod = tvm.IRModule({gv: f for gv, f in model.mod.functions.items() if gv.name_hint != "main"})
        mod["main"] = func
        mod.update_global_info("vdevice", targets.vdevices)
        mod = relax.transform.Normalize()(mod)
        return AnnotatedModule(mod, values, param_targets, input_targets, self.copies)

    def _binding(self, binding, dataflow: bool):
        var, value = binding.var, binding.value
        node = self.graph.nodes[var.name]
        kind = node["kind"]
        var_cls = type(var)
        if kind == "op":
            dst = self.assignment[var.name]
            vdevice = self.targets[dst].vdevice
            args = [self.on(a, dst, dataflow) for a in value.args]
            ty_args = [_with_vdevice(t, vdevice) for t in value.ty_args] if value.ty_args else value.ty_args
            new_value = relax.Call(value.op, args, value.attrs, ty_args)
            new = var_cls(var.name, _with_vdevice(var.ty, vdevice))
            self.location[new] = _nested(var.ty, dst)
        elif kind == "getitem":
            new_value, loc = self.on_tuple_field(value)
            new = var_cls(var.name, _retype(var.ty, loc, self.targets))
            self.location[new] = loc
        elif kind == "alias" and self.weight_alias.get(value, value) in self.weight_index:
            # ``x = weight``: x is that weight, placed wherever x is used.
            self.weight_alias[var] = self.weight_alias.get(value, value)
            self.names.add(var.name)
            return
        else:  # tuple / alias: fields stay where they are
            new_value = _rebuild_struct(self, value)
            loc = self.location_of(value)
            new = var_cls(var.name, _retype(var.ty, loc, self.targets))
            self.location[new] = loc
        self.names.add(var.name)
        self.var_map[var] = new
        self.bindings.append(relax.VarBinding(new, new_value))


def _rebuild_struct(emitter, expr):
    if isinstance(expr, relax.Var):
        expr = emitter.weight_alias.get(expr, expr)
        if expr in emitter.weight_index:
            return emitter._weight_on(expr, emitter.targets.host.name)
        return emitter.var_map[expr]
    if isinstance(expr, relax.Tuple):
        return relax.Tuple([_rebuild_struct(emitter, f) for f in expr.fields])
    if isinstance(expr, relax.TupleGetItem):
        return emitter.on_tuple_field(expr)[0]
    return expr


def _nested(ty, dst):
    if isinstance(ty, tvm.ir.TupleType):
        return [_nested(f, dst) for f in ty.fields]
    return dst


def _retype(ty, loc, targets):
    if isinstance(ty, tvm.ir.TupleType):
        locs = loc if isinstance(loc, list) else [loc] * len(ty.fields)
        return tvm.ir.TupleType([_retype(f, l, targets) for f, l in zip(ty.fields, locs)])
    if loc is None or isinstance(loc, list):
        return ty
    return _with_vdevice(ty, targets[loc].vdevice)


def _all_on(loc, dst) -> bool:
    if isinstance(loc, list):
        return all(_all_on(f, dst) for f in loc)
    return loc is None or loc == dst


def _type_of(expr):
    if isinstance(expr, relax.Tuple):
        return tvm.ir.TupleType([_type_of(f) for f in expr.fields])
    if isinstance(expr, relax.TupleGetItem):
        return _type_of(expr.tuple_value).fields[expr.index]
    return expr.ty


def _field_type(expr):
    return _type_of(expr.tuple_value).fields[expr.index]


def annotate(model: Model, graph: nx.DiGraph, assignment: dict, targets: TargetSet) -> AnnotatedModule:
    """Emit ``assignment`` (a complete ``{node: target}`` for op nodes; inputs and the output node
    default to the host) as an annotated Relax module. See the module docstring."""
    return _Emitter(model, graph, assignment, targets).emit()

