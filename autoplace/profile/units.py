"""Profiling units: the fused kernels a build actually runs, and which op nodes each one covers.

A model placed entirely on one target and lowered by :func:`autoplace.backend.lower` calls one
kernel per fusion group. Each ``call_tir`` is a **unit**: its PrimFunc (with the target it is compiled
for), its argument shapes and the op nodes of :func:`autoplace.graph.op_graph` it computes. Units with
structurally equal PrimFuncs on the same target kind share a ``key`` (repeated layers are measured
once). Fusion groups come from ``FuseOps``, which does not depend on the target, so the groups of
one model are the same on every target and a placement that keeps each group on one device builds
into exactly these kernels.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

import networkx as nx
import tvm
import tvm_ffi
from tvm import relax

from ..backend.pipeline import lower
from ..emit import annotate
from ..frontend import load_model
from ..graph import op_graph, resolve_assignment
from ..graph.view import _flat_tensors, _shape
from ..targets import TargetSet

_CALL_TIR = tvm.ir.Op.get("relax.call_tir")
#: ``{unit key: read access}`` of the kernels analysed in this process (:attr:`Unit.read_access`).
_READ_ACCESS: dict = {}


@dataclass
class Unit:
    """One kernel launch of a lowered model on one target."""

    key: str  # hash of the PrimFunc's structure and the target kind
    target_kind: str
    func_name: str
    prim_func: object = field(repr=False)  # tvm.tirx.PrimFunc with its "target" attribute
    arg_shapes: list = field(default_factory=list)  # inputs then outputs
    arg_dtypes: list = field(default_factory=list)
    num_outputs: int = 1
    nodes: list = field(default_factory=list)  # op nodes of the op graph this launch computes
    ops: list = field(default_factory=list)  # their op names, in program order
    weight_args: list = field(default_factory=list)  # indices of the arguments that are model weights
    unscheduled: object = field(default=None, repr=False)  # the PrimFunc before scheduling (None: not kept)

    @property
    def read_access(self) -> dict | None:
        """How the kernel reads each input as it writes its output in order (:func:`~.access.read_access`:
        ``read_strides``, ``read_runs``); None when not analysed."""
        if self.unscheduled is None:
            return None
        if self.key not in _READ_ACCESS:  # a model repeats its layers' kernels: analyse each once
            from .access import read_access

            _READ_ACCESS[self.key] = read_access(self.unscheduled, self.num_outputs)
        return _READ_ACCESS[self.key]

    @property
    def read_strides(self) -> list | None:
        """Per input, its read index's step per output step (:func:`~.access.read_access`); None: not analysed."""
        return (self.read_access or {}).get("read_strides")

    @property
    def read_runs(self) -> list | None:
        """Per input, the output elements written per contiguous run of its reads (:func:`~.access.read_access`)."""
        return (self.read_access or {}).get("read_runs")

    @property
    def weight_bytes(self) -> int:
        """Bytes of model weights the kernel reads (each call reads them again; activations are fresh)."""
        return sum(_nbytes(self.arg_shapes[i], self.arg_dtypes[i]) for i in self.weight_args)

    @property
    def nbytes_in(self) -> int:
        return sum(_nbytes(s, d) for s, d in zip(self.arg_shapes[: -self.num_outputs], self.arg_dtypes))

    @property
    def nbytes_out(self) -> int:
        n = self.num_outputs
        return sum(_nbytes(s, d) for s, d in zip(self.arg_shapes[-n:], self.arg_dtypes[-n:]))


def _nbytes(shape, dtype) -> int:
    bits = 8 if dtype == "bool" else int("".join(c for c in dtype if c.isdigit()) or 32)
    return math.prod(shape) * max(1, bits // 8)


def unit_key(prim_func, target_kind: str) -> str:
    """A stable key for a kernel: structural hash of the PrimFunc (target attribute removed) + kind."""
    func = prim_func.without_attr("target") if prim_func.attrs and "target" in prim_func.attrs else prim_func
    func = func.without_attr("global_symbol") if func.attrs and "global_symbol" in func.attrs else func
    digest = hashlib.sha1(f"{tvm_ffi.structural_hash(func)}:{target_kind}".encode()).hexdigest()[:16]
    return f"{target_kind}-{digest}"


class _GroupMapper:
    """Map each binding of the post-``FuseOps`` ``main`` to the op nodes it computes.

    ``FuseOps`` renames the variables of fused calls and shares one function between structurally
    equal groups, so names inside a fused function say nothing. Instead the function body is walked
    with its parameters bound to the original nodes its call reads, and each inner binding is matched
    to the unclaimed op-graph node whose inputs are exactly the nodes it reads.
    """

    def __init__(self, graph: nx.DiGraph, fused_mod: tvm.IRModule):
        self.graph = graph
        self.claimed: set = set()
        self.node_of: dict = {}  # main var -> node name, or list of names for a tuple
        self.groups: dict = {}  # main var -> [op nodes]
        for var in fused_mod["main"].params:
            self.node_of[var] = var.name
        for block in fused_mod["main"].body.blocks:
            for binding in block.bindings:
                self._binding(fused_mod, binding)

    def _nodes(self, expr, env) -> list:
        out = []
        for var in relax.analysis.free_vars(expr):
            node = env.get(var, var.name)
            out.extend(node if isinstance(node, list) else [node])
        return out

    def _source(self, node):
        """The node an alias chain (``lv27 = const5``) starts from; lowering reads it directly."""
        while node in self.graph and self.graph.nodes[node].get("kind") == "alias" and self.graph.in_degree(node) == 1:
            node = next(iter(self.graph.predecessors(node)))
        return node

    def _consumers(self, node) -> set:
        """The nodes reading ``node``, directly or through alias nodes."""
        out = set()
        for succ in self.graph.successors(node):
            out.update(self._consumers(succ) if self.graph.nodes[succ].get("kind") == "alias" else {succ})
        return out

    def _match(self, reads: list, hint: str | None = None) -> str | None:
        if hint is not None and hint in self.graph and hint not in self.claimed:
            self.claimed.add(hint)
            return hint
        want = {self._source(n) for n in reads}
        if want:
            candidates = set()
            for node in want:
                if node in self.graph:
                    candidates.update(self._consumers(node))
        else:
            candidates = {n for n in self.graph if self.graph.in_degree(n) == 0}
        free = [
            n for n in candidates
            if n not in self.claimed and self.graph.nodes[n].get("kind") not in ("input", "weight", "output", "alias")
        ]
        sources = {n: {self._source(p) for p in self.graph.predecessors(n)} for n in free}
        found = [n for n in free if sources[n] == want]
        if not found:  # an input was folded into a constant by legalization: match on what is left
            found = [n for n in free if sources[n] >= want]
        if not found:
            return None
        node = min(found, key=lambda n: self.graph.nodes[n]["order"])
        self.claimed.add(node)
        return node

    def _binding(self, fused_mod, binding):
        value = binding.value
        if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.GlobalVar):
            func = fused_mod[value.op]
            if isinstance(func, relax.Function):
                env = {}
                for param, arg in zip(func.params, value.args):
                    nodes = self._nodes(arg, self.node_of)
                    env[param] = nodes[0] if len(nodes) == 1 else nodes
                members = []
                inner = [b for blk in func.body.blocks for b in blk.bindings]
                for b in inner:
                    if isinstance(b.value, relax.Tuple):
                        env[b.var] = self._nodes(b.value, env)
                        continue
                    node = self._match(self._nodes(b.value, env))
                    env[b.var] = node if node is not None else b.var.name
                    if node is not None:
                        members.append(node)
                result = func.body.body
                self.node_of[binding.var] = env.get(result, self._nodes(result, env))
                self.groups[binding.var] = members
                return
        if isinstance(value, relax.Var) and value in self.groups:
            # An alias (``gv = lv``): the graph's alias node if it has one, and the aliased kernel's
            # ops, since later passes may bind the kernel call to this name instead.
            name = binding.var.name
            alias = name in self.graph and name not in self.claimed and self.graph.nodes[name].get("kind") == "alias"
            if alias:
                self.claimed.add(name)
            self.node_of[binding.var] = name if alias else self.node_of[value]
            self.groups[binding.var] = self.groups[value]
            return
        # Not fused: the binding keeps its original (unique) name.
        node = self._match(self._nodes(value, self.node_of), hint=binding.var.name)
        self.node_of[binding.var] = node if node is not None else binding.var.name
        self.groups[binding.var] = [node] if node is not None else []


def extract_units(model, target_spec="llvm", *, graph: nx.DiGraph | None = None) -> list[Unit]:
    """The kernel launches of ``model`` built entirely on one target, in program order.

    Parameters
    ----------
    model : autoplace.Model or anything load_model reads
    target_spec : target spec
        One target (``"llvm"``, ``"cuda"``, a dict or a Target).
    graph : networkx.DiGraph, optional
        The model's op graph (computed if not given).
    """
    model = load_model(model)
    graph = graph if graph is not None else op_graph(model)
    targets = TargetSet({"t": target_spec})
    annotated = annotate(model, graph, resolve_assignment(graph, None, targets, default="t"), targets)
    fused, unscheduled = [], []
    lowered = lower(annotated.mod, on_fused=fused.append, on_unscheduled=unscheduled.append)
    groups = _GroupMapper(graph, fused[0]).groups
    before_schedule = {gv.name_hint: func for gv, func in unscheduled[0].functions.items()}
    kind = targets["t"].kind
    main = lowered["main"]
    num_input = int(main.attrs["num_input"]) if main.attrs and "num_input" in main.attrs else len(main.params)
    weights = list(main.params[num_input:])
    units = []
    for block in main.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if not (isinstance(value, relax.Call) and value.op.same_as(_CALL_TIR)):
                continue
            gvar = value.args[0]
            func = lowered[gvar]
            in_types, weight_args = [], []
            for arg in value.args[1].fields:
                flat = _flat_tensors(arg.ty)
                if len(flat) == 1 and any(arg.same_as(w) for w in weights):
                    weight_args.append(len(in_types))
                in_types.extend(flat)
            out_types = _flat_tensors(binding.var.ty)
            members = groups.get(binding.var, [])
            nodes = [n for n in members if graph.nodes[n].get("kind") == "op"]
            nodes.sort(key=lambda n: graph.nodes[n]["order"])
            types = in_types + out_types
            units.append(
                Unit(
                    key=unit_key(func, kind),
                    target_kind=kind,
                    func_name=gvar.name_hint,
                    prim_func=func,
                    arg_shapes=[_shape(t) for t in types],
                    arg_dtypes=[str(t.dtype) for t in types],
                    num_outputs=len(out_types),
                    nodes=nodes,
                    ops=[graph.nodes[n]["op"] for n in nodes],
                    weight_args=weight_args,
                    unscheduled=before_schedule.get(gvar.name_hint),
                )
            )
    return units


def units_by_kind(model, graph: nx.DiGraph, targets: TargetSet) -> dict[str, list[Unit]]:
    """``{target kind: extract_units(...)}`` for every kind in ``targets`` (each kind lowered once)."""
    out: dict[str, list[Unit]] = {}
    for name in targets:
        if targets[name].kind not in out:
            out[targets[name].kind] = extract_units(model, targets[name].target, graph=graph)
    return out
