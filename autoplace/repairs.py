"""Repairs of what TVM gets wrong in a model as imported, in one place, applied to every model as it is read.

:func:`autoplace.load_model` calls :func:`apply` right after the import (torch.export, ONNX, or a Relax
module given directly), before anything else sees the module. Each repair rewrites one known TVM 0.27
defect away, keeping what the source framework computes; each has a test that fails without it
(``tests/test_architectures.py``) and is listed in the README under "TVM 0.27 problems".

==========================  ============================================================================
repair                      what TVM 0.27 gets wrong, and the rewrite
==========================  ============================================================================
``cumsum-bool``             *Frontend defect.* ``cumsum`` of a ``bool`` tensor keeps the result ``bool``
                            (PyTorch and NumPy return ``int64``), and LLVM code generation cannot add
                            bools (``CodeGenLLVM::CreateAdd``: ``t.MatchesCode(kDLFloat)``). Every decoder
                            language model of ``transformers`` 5 does this in its causal-mask code.
                            Rewritten to ``cumsum(astype(x, "int64"), dtype="int64")``.
``arange-into-reshape``     *Build defect, worked around at import.* ``LegalizeOps`` folds an ``arange``
                            of constant bounds into an inline constant; when a reshape-like op
                            (``expand_dims``, ``reshape``, ``squeeze``, ``flatten``) reads it,
                            ``RewriteDataflowReshape`` turns that kernel into a ``reshape`` of the
                            constant that has lost its vdevice and leaves its users on an undefined
                            variable ("Var lvN is not defined" in ``VMCodeGen``) whenever the result is
                            copied to another device (the position ids of Llama, Qwen2, Mistral, GPT-2
                            and T5 under most placements). Such an ``arange`` is evaluated at import:
                            it becomes a constant, which normalisation makes a (tiny) weight.
``static-shape-to-tensor``  *Importer output autoplace cannot place.* TVM's ONNX importer turns ONNX's
                            ``Shape`` into ``shape_to_tensor(shape_of(w))`` even when the shape is static
                            (OPT's and T5's embedding tables); a ``Shape`` value is not a tensor and cannot
                            be copied to another device (``to_vdevice`` refuses it). Folded into the
                            constant tensor it always is (static shapes are required anyway).
==========================  ============================================================================


When a model does not compile even on one device, :func:`check_compiles` (or :func:`explain`, given the
error a build raised) finds the kernel that fails and raises a :class:`~autoplace.errors.ModelError` naming
it, the op it computes and the Relax binding that calls it, and pointing to this list.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from .errors import ModelError

#: Where a user reads the list of repairs (the message of every "does not compile" error names it).
REPAIR_LIST = "the README's 'TVM 0.27 problems' list and autoplace/repairs.py"


@dataclass(frozen=True)
class Repair:
    """One defect and its rewrite.

    ``rewrite(call, context) -> new expression or None`` is asked about every call of ``op`` (the call as
    it is in the function given to ``prepare``, its arguments already repaired); ``prepare(func) ->
    context`` looks at the whole function first (None: the context is None).
    """

    name: str
    op: str
    description: str
    rewrite: Callable
    prepare: Callable | None = None


def _cumsum_bool(call: relax.Call, _context):
    data = call.args[0]
    if not isinstance(data.ty, relax.TensorType) or data.ty.dtype != "bool":
        return None
    attrs = call.attrs
    dtype = str(attrs.dtype) if attrs.dtype is not None and str(attrs.dtype) not in ("", "void") else "int64"
    if dtype == "bool":
        dtype = "int64"
    return relax.op.cumsum(relax.op.astype(data, dtype), axis=attrs.axis, dtype=dtype,
                           exclusive=attrs.exclusive)


_RESHAPE_LIKE = ("relax.reshape", "relax.expand_dims", "relax.squeeze", "relax.flatten")


def _aranges_read_by_reshapes(func: relax.Function) -> list:
    """The ``arange`` calls (as bound in ``func``) whose result a reshape-like op reads."""
    aranges, read = {}, set()
    for block in func.body.blocks if isinstance(func.body, relax.SeqExpr) else []:
        for binding in block.bindings:
            value = getattr(binding, "value", None)
            if not isinstance(value, relax.Call) or not isinstance(value.op, tvm.ir.Op):
                continue
            if value.op.name == "relax.arange":
                aranges[binding.var] = value
            elif value.op.name in _RESHAPE_LIKE and value.args and isinstance(value.args[0], relax.Var):
                read.add(value.args[0])
    return [call for var, call in aranges.items() if var in read]


def _arange_into_reshape(call: relax.Call, flagged):
    if not any(call.same_as(c) for c in flagged or ()):
        return None
    bounds = []
    for arg in call.args[:3]:
        value = arg  # PrimValue and IntImm are one type in TVM 0.27
        if not isinstance(value, tvm.tirx.IntImm):
            return None  # symbolic or float bounds: left to TVM
        bounds.append(int(value.value))
    dtype = str(call.attrs.dtype)
    if not dtype.startswith(("int", "uint")):
        return None
    return relax.const(np.arange(*bounds, dtype=dtype), dtype)


def _static_shape_to_tensor(call: relax.Call, _context):
    arg = call.args[0]
    values = getattr(arg.ty, "values", None) if isinstance(arg.ty, relax.ShapeType) else None
    if values is None or not all(isinstance(v, tvm.tirx.IntImm) for v in values):
        return None
    return relax.const(np.array([int(v) for v in values], dtype="int64"), "int64")


#: Every repair, in the order they are tried on each call.
REPAIRS = (
    Repair("cumsum-bool", "relax.cumsum",
           "cumsum of a bool tensor: TVM keeps bool (PyTorch gives int64) and LLVM cannot add bools; "
           "cast to int64 first", _cumsum_bool),
    Repair("arange-into-reshape", "relax.arange",
           "an arange of constant bounds read by a reshape-like op: LegalizeOps folds it into an inline "
           "constant and RewriteDataflowReshape then loses the reshape's vdevice; evaluated at import",
           _arange_into_reshape, _aranges_read_by_reshapes),
    Repair("static-shape-to-tensor", "relax.shape_to_tensor",
           "a shape known when the model is imported, turned into a tensor at run time (the ONNX importer's "
           "Shape op: shape_to_tensor(shape_of(w))): the Shape value cannot be copied between devices; "
           "folded into a constant", _static_shape_to_tensor),
)


@mutator
class _Rewriter(PyExprMutator):
    """Applies repairs to every call; types downstream of a rewritten call are inferred again."""

    def __init__(self, repairs, contexts, mod=None):
        super().__init__(mod)
        self.by_op: dict = {}
        for repair in repairs:
            self.by_op.setdefault(repair.op, []).append(repair)
        self.contexts = contexts
        self.applied: dict = {}

    def visit_call_(self, call):
        original = call
        call = super().visit_call_(call)
        if isinstance(call.op, tvm.ir.Op):
            for repair in self.by_op.get(call.op.name, ()):
                context = self.contexts.get(repair.name)
                new = repair.rewrite(original if repair.prepare is not None else call, context)
                if new is not None:
                    self.applied[repair.name] = self.applied.get(repair.name, 0) + 1
                    return new
        return call


def apply(mod: tvm.IRModule, repairs=None) -> tuple[tvm.IRModule, dict]:
    """Apply ``repairs`` (default: :data:`REPAIRS`, looked up at each call) to every Relax function.

    Returns
    -------
    (tvm.IRModule, dict)
        The repaired module (``mod`` itself when nothing applied) and ``{repair name: times applied}``.
    """
    repairs = REPAIRS if repairs is None else repairs
    applied: dict = {}
    updates = {}
    for gv, func in mod.functions_items():
        if not isinstance(func, relax.Function):
            continue
        contexts = {r.name: r.prepare(func) for r in repairs if r.prepare is not None}
        rewriter = _Rewriter(repairs, contexts, mod)
        new = rewriter.visit_expr(func)
        if rewriter.applied:
            updates[gv] = new
            for name, count in rewriter.applied.items():
                applied[name] = applied.get(name, 0) + count
    if not updates:
        return mod, {}
    new_mod = tvm.IRModule({gv: updates.get(gv, f) for gv, f in mod.functions_items()}, attrs=mod.attrs,
                           global_infos=mod.global_infos)
    # A rewrite can leave a binding unused (the shape_of under a folded shape_to_tensor): drop those.
    new_mod = relax.transform.DeadCodeElimination([gv.name_hint for gv in updates])(new_mod)
    return relax.transform.Normalize()(new_mod), applied


# ---------------------------------------------------------------------------------------------- diagnosis


def _first_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    return lines[-1].rstrip(":").rstrip() if lines else type(err).__name__


def _kernel_callers(mod: tvm.IRModule) -> dict:
    """``{PrimFunc name: [(binding name, argument dtypes)]}`` over the call_tir bindings of ``main``."""
    call_tir = tvm.ir.Op.get("relax.call_tir")
    callers: dict = {}
    main = mod["main"]
    for block in main.body.blocks:
        for binding in block.bindings:
            value = getattr(binding, "value", None)
            if isinstance(value, relax.Call) and value.op.same_as(call_tir):
                args = value.args[1].fields if isinstance(value.args[1], relax.Tuple) else []
                dtypes = [str(a.ty.dtype) for a in args
                          if isinstance(getattr(a, "ty", None), relax.TensorType)]
                callers.setdefault(value.args[0].name_hint, []).append((binding.var.name, dtypes))
    return callers


def _failing_kernels(mod: tvm.IRModule, target) -> tuple[list, str | None]:
    """Legalize ``mod`` (no fusion) and compile each kernel alone: ``([(kernel, callers, error)], stage)``;
    ``stage`` names the step that failed before any kernel could be tried (legalization), else None."""
    try:
        with target:  # the first lowering steps of tvm.compile's default pipeline (and of autoplace's build)
            lowered = tvm.transform.Sequential([relax.backend.DispatchSampling(),
                                                relax.backend.DispatchSortScan(),
                                                relax.transform.LegalizeOps()])(mod)
    except Exception as err:  # an op without a legalization: the message names it
        return [], f"legalizing its Relax ops failed: {_first_line(err)}"
    callers = _kernel_callers(lowered)
    failing = []
    for gv, func in lowered.functions_items():
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        try:
            tvm.compile(tvm.IRModule({gv: func.with_attr("global_symbol", gv.name_hint)}), target=target)
        except Exception as err:
            failing.append((gv.name_hint, callers.get(gv.name_hint, []), _first_line(err)))
    return failing, None


def explain(mod: tvm.IRModule, err: BaseException, target="llvm") -> ModelError:
    """The :class:`ModelError` for a model that TVM failed to build with ``err``: which kernel fails, the op
    and bindings it computes, and where the list of repairs is. Compiles each kernel alone to find it."""
    target = tvm.target.Target(target) if isinstance(target, (str, dict)) else target
    failing, stage = _failing_kernels(mod, target)
    where = f"TVM cannot compile this model even on one device ({target.kind.name}): "
    if stage is not None:
        detail = stage
    elif failing:
        parts = []
        for kernel, calls, message in failing[:3]:
            bindings = ", ".join(f"{name} ({'/'.join(dtypes) or 'no tensor'} inputs)"
                                 for name, dtypes in calls[:3])
            parts.append(f"kernel {kernel!r} (op {_op_of(kernel)}; called by "
                         f"{bindings or 'no binding of main'}) fails: {message}")
        more = f" and {len(failing) - 3} more kernels" if len(failing) > 3 else ""
        detail = "; ".join(parts) + more
    else:
        detail = f"every kernel compiles alone, the whole build fails: {_first_line(err)}"
    return ModelError(
        f"{where}{detail}. This is a TVM defect, not a placement problem: see {REPAIR_LIST} for the frontend "
        "defects autoplace repairs (add a repair there for a new one)"
    )


def _op_of(kernel: str) -> str:
    """``"cumsum1"`` -> ``"cumsum"``: legalized kernels are named after their op (plus a counter)."""
    return kernel.rstrip("0123456789").rstrip("_") or kernel


def diagnose_build_failure(model, err: BaseException, target="llvm") -> ModelError | None:
    """For a placed build that failed with ``err``: the :class:`ModelError` of :func:`explain` when the model
    does not compile even on one device with plain ``tvm.compile`` (raise it instead of ``err``), else None
    (the failure is the placed build's own: re-raise ``err``). Meant for ``Placement.build``::

        try:
            executable = build(self.mod, fuse=self.fuse)
        except Exception as err:
            diagnosis = repairs.diagnose_build_failure(self.model, err)
            if diagnosis is None:
                raise
            raise diagnosis from None
    """
    mod = model.mod if hasattr(model, "mod") and not isinstance(model, tvm.IRModule) else model
    target = tvm.target.Target(target) if isinstance(target, (str, dict)) else target
    try:
        tvm.compile(mod, target=target)
    except Exception as single:
        return explain(mod, single, target)
    return None


def check_compiles(model, target="llvm"):
    """Build ``model`` (a :class:`~autoplace.Model` or IRModule) for one device with plain ``tvm.compile``;
    return the executable, or raise the :class:`ModelError` of :func:`explain` if TVM cannot build it."""
    mod = model.mod if hasattr(model, "mod") and not isinstance(model, tvm.IRModule) else model
    target = tvm.target.Target(target) if isinstance(target, (str, dict)) else target
    try:
        return tvm.compile(mod, target=target)
    except Exception as err:
        raise explain(mod, err, target) from None


# ---------------------------------------------------------------------------------------- symbolic dimensions


def torch_dim_names(program) -> dict:
    """``{torch symbol: torch.export.Dim name}`` of an ``ExportedProgram``'s symbolic dimensions.

    TVM's importer names a symbolic dimension after torch's internal symbol (``s27``), not the ``Dim`` the
    user exported with (``seq_len``); torch keeps the ``Dim`` names only in its shape environment (a private
    structure, read best-effort: an empty dict if it moved). Also gives ``{symbol: "input_ids.shape[1]"}``
    descriptions under the key ``(symbol, "where")``.
    """
    names: dict = {}
    try:
        placeholders = [n for n in program.graph.nodes if n.op == "placeholder"]
        user_inputs = set(program.graph_signature.user_inputs)
        shape_env = None
        for node in placeholders:
            value = node.meta.get("val")
            for index, dim in enumerate(getattr(value, "shape", ())):
                node_ = getattr(dim, "node", None)
                if node_ is None:
                    continue
                symbol = str(dim)
                shape_env = shape_env or getattr(node_, "shape_env", None)
                if node.name in user_inputs:
                    names.setdefault((symbol, "where"), f"{node.name}.shape[{index}]")
        if shape_env is not None:
            debug = getattr(shape_env, "source_name_to_debug_name", {}) or {}
            for symbol, sources in getattr(shape_env, "var_to_sources", {}).items():
                for source in sources:
                    source_name = source.name() if callable(source.name) else source.name
                    if source_name in debug:
                        names[str(symbol)] = debug[source_name]
                        break
    except Exception:  # private torch structures: never fail an import over a name
        return {k: v for k, v in names.items() if isinstance(k, tuple)}
    return names


def _unique(variables) -> list:
    out = []
    for var in variables:
        if not any(var.same_as(seen) for seen in out):
            out.append(var)
    return out


def input_symbolic_vars(mod: tvm.IRModule) -> list:
    """The symbolic dimensions of ``main``'s parameters (what a user binds), in order of appearance."""
    found = []
    for param in mod["main"].params:
        ty = param.ty
        if isinstance(ty, relax.TensorType) and ty.shape is not None:
            for dim in ty.shape.values:
                if not isinstance(dim, tvm.tirx.IntImm):
                    found.extend(tvm.tirx.analysis.undefined_vars(dim))
    return _unique(found)


def symbolic_vars(mod: tvm.IRModule) -> list:
    """Every symbolic dimension of ``main``: its parameters' first, then those defined inside it."""
    main = mod["main"]
    return _unique(input_symbolic_vars(mod) + list(relax.analysis.defined_symbolic_vars(main))
                   + list(relax.analysis.free_symbolic_vars(main)))


def _runtime_shape_bindings(mod: tvm.IRModule) -> list[str]:
    """Names of ``main``'s ``match_cast`` bindings: where an importer left a shape known only at run time."""
    main = mod["main"]
    blocks = main.body.blocks if isinstance(main.body, relax.SeqExpr) else []
    return [b.var.name for block in blocks for b in block.bindings if isinstance(b, relax.MatchCast)]


def bind_shapes(mod: tvm.IRModule, shapes=None, dim_names=None) -> tvm.IRModule:
    """Bind ``main``'s symbolic dimensions to the sizes in ``shapes`` (``relax.transform.BindSymbolicVars``).

    ``shapes`` keys are the names the symbolic variables print with in TVMScript (``seq_len``, ``s27``),
    or, for a module imported from a ``torch.export`` program, the ``torch.export.Dim`` names (``dim_names``,
    from :func:`torch_dim_names`). Raises a :class:`ModelError` that lists every symbolic dimension and shows
    the call that binds them when one is left unbound, or when ``shapes`` names one the module does not have;
    and one that says so when shapes stay symbolic inside ``main`` after binding (an importer that could
    not work a shape out before run time: binding the inputs cannot help).
    """
    dim_names = dim_names or {}
    variables = input_symbolic_vars(mod)
    shapes = dict(shapes or {})
    if variables or shapes:
        mod = _bind_inputs(mod, variables, shapes, dim_names)
    left = symbolic_vars(mod)
    if left:
        names = sorted({v.name for v in left})
        shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
        where = _runtime_shape_bindings(mod)
        more = " ..." if len(where) > 4 else ""
        at = f" (bound by match_cast at {', '.join(where[:4])}{more})" if where else ""
        raise ModelError(
            f"TVM's importer left {len(left)} shape variable(s) inside main that are only known at run time: "
            f"{shown}{at}. autoplace places models with static shapes, and binding the inputs' sizes does "
            f"not fix these. For ONNX, an initializer used as a shape (Expand, Reshape) that the importer "
            f"kept as a parameter does this: see {REPAIR_LIST}"
        )
    return mod


def _bind_inputs(mod, variables, shapes, dim_names) -> tvm.IRModule:
    aliases: dict = {}  # user-facing name -> the variables it binds (TVM may give two the same name)
    for var in variables:
        aliases.setdefault(var.name, []).append(var)
        if var.name in dim_names:
            aliases.setdefault(dim_names[var.name], []).append(var)

    def listing() -> str:
        parts = []
        for var in variables:
            alias = dim_names.get(var.name)
            where = dim_names.get((var.name, "where"))
            label = f"{alias!r} (printed {var.name})" if alias and alias != var.name else repr(var.name)
            parts.append(label + (f" = {where}" if where else ""))
        return ", ".join(parts)

    def example() -> str:
        return "{" + ", ".join(f"{dim_names.get(v.name, v.name)!r}: 128" for v in variables) + "}"

    def cli_example() -> str:
        return "--shape " + " ".join(f"{dim_names.get(v.name, v.name)}=128" for v in variables)

    unknown = [k for k in shapes if str(k) not in aliases]
    if unknown:
        have = f"its symbolic dimensions are {listing()}" if variables else "it has no symbolic dimensions"
        raise ModelError(f"shapes names {unknown}, which the model does not have: {have}")
    binding: dict = {}
    for key, value in shapes.items():
        try:
            size = int(value)
        except (TypeError, ValueError):
            raise ModelError(f"shapes[{key!r}] must be an integer size, not {value!r}") from None
        if size < 1:
            raise ModelError(f"shapes[{key!r}] must be a positive size, not {size}")
        for var in aliases[str(key)]:
            binding[var] = size
    missing = [v for v in variables if not any(v.same_as(b) for b in binding)]
    if missing:
        raise ModelError(
            f"the model has a dynamic shape, symbolic dimensions {listing()}, and autoplace places models "
            f"with static shapes (costs depend on them). Bind them to the sizes to place for: "
            f"autoplace.optimize(model, ..., shapes={example()}) (also autoplace.place and "
            f"autoplace.load_model; on the command line {cli_example()}), or export with fixed shapes"
        )
    try:
        bound_mod = relax.transform.BindSymbolicVars(binding)(mod)
        bound_mod = relax.transform.CanonicalizeBindings()(bound_mod)
        simplifier = _SimplifyPrimArgs(bound_mod)
        bound_mod["main"] = simplifier.visit_expr(bound_mod["main"])
        bound_mod = relax.transform.Normalize()(bound_mod)
    except Exception as err:
        sizes = {v.name: n for v, n in binding.items()}
        raise ModelError(f"binding symbolic dimensions {sizes} failed in TVM: {_first_line(err)}") from None
    return bound_mod


def _is_prim_expression(expr) -> bool:
    """A TIR expression other than a literal (``T.Add(1, 12)``, left in op arguments by BindSymbolicVars)."""
    literal = isinstance(expr, (tvm.tirx.IntImm, tvm.tirx.FloatImm))
    return type(expr).__module__ == "tvm.ir.prim.expr" and not literal


@mutator
class _SimplifyPrimArgs(PyExprMutator):
    """Folds the TIR arithmetic that binding leaves in op arguments (``strided_slice(x, end=(1 + 12,))``)
    into literals, so that every argument is a tensor, a tuple of them or a literal."""

    def __init__(self, mod=None):
        super().__init__(mod)
        from tvm.sym.analyzer import Analyzer

        self.analyzer = Analyzer()

    def _fold(self, expr):
        if isinstance(expr, relax.Tuple):
            fields = [self._fold(f) for f in expr.fields]
            return expr if all(a.same_as(b) for a, b in zip(fields, expr.fields)) else relax.Tuple(fields)
        if _is_prim_expression(expr):
            return self.analyzer.simplify(expr)
        return expr

    def visit_call_(self, call):
        call = super().visit_call_(call)
        args = [self._fold(a) for a in call.args]
        if all(a.same_as(b) for a, b in zip(args, call.args)):
            return call
        return relax.Call(call.op, args, call.attrs, call.ty_args)
