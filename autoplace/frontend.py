"""Read a model into the one form the rest of autoplace works on: a :class:`Model`.

Accepted inputs: a Relax ``IRModule`` (TVMScript or ``relax.BlockBuilder``), a ``torch.nn.Module``
(with example inputs) or ``torch.export.ExportedProgram``, an ONNX ``ModelProto`` or ``.onnx`` path,
or a ``.py``/``.tvmscript`` file holding TVMScript. Weights are function parameters of ``main`` after
its ``num_input`` model inputs, and ``params`` holds their values (as returned by
``relax.frontend.detach_params``).

Normalisation makes ``main`` easy to place:

* every constant tensor in ``main`` becomes a weight parameter (the VM would otherwise copy all
  constants to device 0 at init, apache/tvm#17884, and a kernel on another device would read them there),
  except a scalar operand of an elementwise binary op whose other operand depends on a model input or
  weight (``x * 0.5``, ``x ** 3``): ``LegalizeOps`` makes that an immediate of the kernel, so it never
  reaches the VM, and the kernel need not load it from memory (``x ** 3`` read from memory is a ``powf``
  call per element; inline it is ``x * x * x``). A chain that starts from ``arange`` alone has no
  device until it reads a weight, so its scalars stay weights;
* every binding variable gets a unique name, so a node of the graph view is named by its variable
  exactly as it prints in TVMScript;
* shapes must be static (placement costs depend on them).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import tvm
import tvm_ffi
from tvm import relax

from ._relax import rebuild
from .errors import ModelError


@dataclass
class Model:
    """A normalised Relax model: ``main(*inputs, *weights)`` plus the weight values.

    Attributes
    ----------
    mod : tvm.IRModule
        The normalised module (``main`` has attribute ``num_input``).
    params : list of numpy.ndarray
        Weight values, in the order ``main`` takes them after the model inputs.
    name : str
        A short name for reports.
    """

    mod: tvm.IRModule
    params: list = field(default_factory=list)
    name: str = "model"

    @property
    def main(self) -> relax.Function:
        return self.mod["main"]

    @property
    def num_input(self) -> int:
        return int(self.main.attrs["num_input"])

    @property
    def input_vars(self) -> list:
        return list(self.main.params[: self.num_input])

    @property
    def weight_vars(self) -> list:
        return list(self.main.params[self.num_input :])

    def input_specs(self) -> list[tuple[str, tuple[int, ...], str]]:
        """``(name, shape, dtype)`` of every model input."""
        return [(v.name, _static_shape(v.ty, v.name), str(v.ty.dtype)) for v in self.input_vars]

    def random_inputs(self, seed: int = 0) -> list[np.ndarray]:
        """Inputs drawn at random (integers in [0, 2) for int dtypes, so they index anything)."""
        rng = np.random.default_rng(seed)
        out = []
        for _, shape, dtype in self.input_specs():
            if dtype.startswith(("int", "uint")):
                out.append(rng.integers(0, 2, size=shape).astype(dtype))
            elif dtype == "bool":
                out.append(rng.integers(0, 2, size=shape).astype(bool))
            else:
                out.append(rng.standard_normal(shape).astype(dtype))
        return out

    @property
    def weight_nbytes(self) -> int:
        return int(sum(np.asarray(p).nbytes for p in self.params))


def _static_shape(ty, what: str) -> tuple[int, ...]:
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        raise ModelError(f"{what}: expected a tensor of known shape, got {ty}")
    dims = []
    for dim in ty.shape.values:
        if not isinstance(dim, tvm.tirx.IntImm):
            raise ModelError(
                f"{what} has a dynamic shape {ty.shape}: autoplace places models with static shapes. "
                "Export the model with fixed input shapes (e.g. no torch.export.Dim), or bind the symbolic "
                "dimensions with relax.transform.BindSymbolicVars before placing."
            )
        dims.append(int(dim))
    return tuple(dims)


def _to_numpy(value) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "numpy"):
        return value.numpy()
    return np.asarray(value)


def load_model(model, params=None, *, example_inputs=None, name: str | None = None, shapes=None) -> Model:
    """Import and normalise a model.

    Parameters
    ----------
    model : tvm.IRModule, torch.nn.Module, torch.export.ExportedProgram, onnx.ModelProto, str or Model
        The model. A string is a path to an ``.onnx`` file or a Python/TVMScript file that defines an
        ``IRModule`` class decorated with ``@I.ir_module``.
    params : list, dict or None
        Weight values for an ``IRModule``: a list in ``main``'s parameter order, ``{"main": [...]}``
        as ``detach_params`` returns, or ``{param_name: value}``. ``None``: ``main`` has no weight
        parameters (or its ``num_input`` attribute says how many of its parameters are inputs, and the
        rest must then be given).
    example_inputs : tuple of torch.Tensor, optional
        Needed for a ``torch.nn.Module``.
    name : str, optional
    shapes : dict, optional
        ``{symbolic dimension: size}`` for a model with symbolic dimensions (a ``torch.export`` program
        exported with ``torch.export.Dim``, an ONNX model or file with named dims, a Relax module or TVMScript
        file with ``T.int64`` variables), e.g. ``{"seq_len": 128}``; keys are the ``Dim`` names or the names
        the variables print with. Bound with ``relax.transform.BindSymbolicVars`` (see :func:`autoplace.repairs.bind_shapes`).

    Right after the import, the repairs of :mod:`autoplace.repairs` rewrite known frontend defects.

    Returns
    -------
    Model

    Raises
    ------
    ModelError
        If the module has no ``main``, shapes are dynamic and not bound by ``shapes``, weights are missing,
        or an import fails.
    """
    if isinstance(model, Model):
        return model
    from . import repairs

    dim_names = {}
    if isinstance(model, (str, os.PathLike)):
        mod, params, name = _read_path(str(model), params, name)
    elif _is_torch(model):
        mod, params = _from_torch(model, example_inputs)
        name = name or type(model).__name__
        dim_names = repairs.torch_dim_names(model) if not isinstance(model, sys.modules["torch"].nn.Module) else {}
    elif type(model).__module__.startswith("onnx"):
        mod, params = _from_onnx(model)
        name = name or "onnx_model"
    elif isinstance(model, tvm.IRModule):
        mod = model
    else:
        raise ModelError(
            f"cannot read a model of type {type(model).__name__}: give a Relax IRModule, a torch.nn.Module "
            "(with example_inputs), a torch.export.ExportedProgram, an onnx.ModelProto or a path"
        )
    mod, _ = repairs.apply(mod)
    if "main" in [gv.name_hint for gv in mod.get_global_vars()]:
        mod = repairs.bind_shapes(mod, shapes, dim_names)
    return normalize(mod, params, name=name or "model")


def _is_torch(model) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(model, (torch.nn.Module, torch.export.ExportedProgram))


#: File suffixes :func:`load_model` reads: ONNX, and Python/TVMScript files holding an ``IRModule``.
MODEL_SUFFIXES = (".onnx", ".py", ".tvmscript")
_WHAT_TO_GIVE = "give an .onnx file, or a .py/.tvmscript file that defines a TVMScript IRModule (@I.ir_module)"


def check_model_path(path) -> str:
    """Refuse a model path that cannot be a model file, without reading it; returns the path as a string.

    Raises
    ------
    ModelError
        A missing file, a folder, a suffix autoplace does not read (see :data:`MODEL_SUFFIXES`), an
        empty or unreadable file.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise ModelError(f"no such model file: {path}; {_WHAT_TO_GIVE}")
    if os.path.isdir(path):
        raise ModelError(f"{path} is a folder, not a model file: {_WHAT_TO_GIVE}")
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in MODEL_SUFFIXES:
        raise ModelError(f"{path}: autoplace does not read {suffix or 'files without a suffix'} files as models; "
                         f"{_WHAT_TO_GIVE}")
    if not os.access(path, os.R_OK):
        raise ModelError(f"{path}: no permission to read it")
    if os.path.getsize(path) == 0:
        raise ModelError(f"{path} is empty: {_WHAT_TO_GIVE}")
    return path


def _read_path(path: str, params, name) -> tuple:
    """``(module, weights, name)`` of a model file, not yet repaired, bound or normalised: an ONNX file's
    weights are its initializers, a TVMScript file's those given (``params``)."""
    check_model_path(path)
    base = os.path.splitext(os.path.basename(path))[0]
    if path.lower().endswith(".onnx"):
        try:
            import onnx
        except ImportError:
            raise ModelError("reading .onnx files needs onnx: pip install 'autoplace[frontends]'") from None
        try:
            proto = onnx.load(path)
        except Exception as err:
            raise ModelError(f"{path} is not a readable ONNX file: {err}") from None
        mod, params = _from_onnx(proto, path)
        return mod, params, name or base
    import runpy

    from tvm.script import ir as I
    from tvm.script import relax as R
    from tvm.script import tirx as T

    try:
        # A .py file, or TVMScript as printed by mod.script() (its imports are comments: give the names).
        namespace = runpy.run_path(path, init_globals={"I": I, "R": R, "T": T, "tvm": tvm})
    except Exception as err:
        raise ModelError(f"{path}: cannot run it as TVMScript/Python: {type(err).__name__}: {err}") from None
    modules = [v for k, v in namespace.items() if isinstance(v, tvm.IRModule) and not k.startswith("_")]
    if not modules:
        raise ModelError(f"{path} defines no IRModule: decorate a class with @I.ir_module (or assign one)")
    mod = next((v for k, v in namespace.items() if k in ("Module", "mod") and isinstance(v, tvm.IRModule)),
               modules[0])
    return mod, params, name or base


def _from_torch(model, example_inputs):
    import torch
    from tvm.relax.frontend.torch import from_exported_program

    if isinstance(model, torch.export.ExportedProgram):
        program = model
    elif isinstance(model, torch.nn.Module):
        if example_inputs is None:
            raise ModelError("a torch.nn.Module needs example_inputs (a tuple of tensors) to be exported")
        if not isinstance(example_inputs, tuple):
            example_inputs = (example_inputs,)
        try:
            program = torch.export.export(model.eval(), example_inputs)
        except Exception as err:
            raise ModelError(f"torch.export failed for {type(model).__name__}: {err}") from None
    else:
        raise ModelError(f"cannot read torch object {type(model).__name__}")
    try:
        with torch.no_grad():
            mod = from_exported_program(program, keep_params_as_input=True)
    except Exception as err:
        raise ModelError(f"TVM's PyTorch importer failed: {str(err).strip().splitlines()[-1]}") from None
    mod, params = relax.frontend.detach_params(mod)
    return mod, params


def _from_onnx(proto, path: str = "the ONNX model"):
    from tvm.relax.frontend.onnx import from_onnx

    try:
        # Initializers as constants: shape operands (e.g. the Expand of grouped-query attention) fold
        # to static shapes; normalisation then lifts the remaining weight constants to parameters.
        mod = from_onnx(proto, keep_params_in_input=False)
    except Exception as err:
        last = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
        raise ModelError(
            f"TVM's ONNX importer failed on {path}: {last}. Check the opset (onnx.version_converter) and that "
            "every input has a static shape."
        ) from None
    return relax.frontend.detach_params(mod)


#: Ops :func:`fold_weight_transforms` computes once when their input is a weight: they move or
#: relabel the weight's elements (or change its dtype), so the folded weight is no larger than the original.
WEIGHT_LAYOUT_OPS = frozenset(
    f"relax.{name}" for name in ("permute_dims", "reshape", "expand_dims", "squeeze", "flatten", "astype")
)

#: Elementwise arithmetic :func:`fold_weight_transforms` computes once when every tensor it reads is a
#: weight and the result is no larger than the largest of them (a BatchNorm folded into its convolution,
#: :func:`fold_batch_norms`, scales the weight by ``gamma / sqrt(var + eps)``).
WEIGHT_ARITHMETIC_OPS = frozenset(
    f"relax.{name}" for name in ("add", "subtract", "multiply", "divide", "sqrt", "rsqrt", "negative")
)


def fold_weight_transforms(main: relax.Function, num_input: int, weights: list) -> dict:
    """The layout changes of weights in ``main``, computed once, here: ``{binding var: (constant, name)}``.

    Importers leave work on the weights in ``main``: ``torch.nn.Linear`` becomes ``matmul(x,
    permute_dims(W))``, so every call would transpose every weight again (measured on the 2-core EPYC: the
    1024-wide MLP ran 2x faster without, BERT-base 1.35x). Each binding applying one of
    :data:`WEIGHT_LAYOUT_OPS` to a weight (or to an already folded one) is computed by TVM (``LegalizeOps``
    then ``FoldConstant``) and named after the weight (``fc1_weight`` -> ``fc1_weight_permute_dims``).
    Nothing else is folded: folding e.g. ``zeros`` or ``broadcast_to`` would store tensors the model creates
    cheaply at run time. :func:`_rebuild` replaces the bindings by new weight parameters holding the values.
    """
    known = {var: (relax.const(np.ascontiguousarray(w)), var.name)
             for var, w in zip(main.params[num_input:], weights)}
    folded: dict = {}

    def fold(call: relax.Call):
        if not (isinstance(call.op, tvm.ir.Op) and call.op.name in WEIGHT_LAYOUT_OPS | WEIGHT_ARITHMETIC_OPS):
            return None
        tensors = [a for a in call.args if isinstance(a.ty, relax.TensorType)]
        # Tensor constants of main are weights too (``_rebuild`` lifts them).
        if not tensors or not all(isinstance(a, relax.Var) and a in known or _is_tensor_constant(a)
                                  for a in tensors):
            return None
        if call.op.name in WEIGHT_ARITHMETIC_OPS and _num_elements(call.ty) > max(
                _num_elements(a.ty) for a in tensors):
            return None  # a broadcast that would store a larger tensor than the model reads
        args = [known[a][0] if isinstance(a, relax.Var) and a in known else a for a in call.args]
        bb = relax.BlockBuilder()
        with bb.function("main", []):
            bb.emit_func_output(bb.emit(relax.Call(call.op, args, call.attrs, call.ty_args)))
        body = tvm.transform.Sequential([relax.transform.LegalizeOps(), relax.transform.FoldConstant()])(
            bb.get())["main"].body
        values = [body.body] + [b.value for block in body.blocks for b in block.bindings]
        constant = next((v for v in values if _is_tensor_constant(v)), None)
        if constant is None:
            return None
        named = [known[a][1] for a in tensors if isinstance(a, relax.Var)]
        return constant, f"{named[0] if named else 'const'}_{call.op.name.removeprefix('relax.')}"

    for block in (main.body.blocks if isinstance(main.body, relax.SeqExpr) else []):
        for binding in block.bindings:
            if isinstance(binding, relax.VarBinding) and isinstance(binding.value, relax.Call):
                result = fold(binding.value)
                if result is not None:
                    known[binding.var] = folded[binding.var] = result
    return folded


def _num_elements(ty) -> int:
    return int(np.prod([int(d) for d in ty.shape])) if isinstance(ty, relax.TensorType) and ty.shape else 1


def fold_batch_norms(main: relax.Function, num_input: int, weights: list) -> relax.Function:
    """``main`` with every inference BatchNorm that follows a convolution of a weight folded into it.

    ``conv2d(x, W) -> batch_norm(gamma, beta, mean, var)`` becomes ``conv2d(x, W * s) + (beta - mean * s)``
    with ``s = gamma / sqrt(var + eps)``, by TVM's ``FoldBatchnormToConv2D``; the new weight and bias are
    then computed once by :func:`fold_weight_transforms`. The convolution's kernel then adds a bias
    instead of a second kernel normalising its output (what every deployment of a CNN does). TVM's pass
    matches constants only, so the weights are bound as constants for it and turned back into
    parameters after.
    """
    batch_norm = tvm.ir.Op.get("relax.nn.batch_norm")
    calls = [b.value for block in getattr(main.body, "blocks", []) for b in block.bindings
             if isinstance(b.value, relax.Call) and b.value.op.same_as(batch_norm)]
    if not calls:
        return main
    as_constant = {var: relax.const(np.ascontiguousarray(w))
                   for var, w in zip(main.params[num_input:], weights)}
    # The pass returns copies of the constants: map them back by value (equal values, either weight).
    as_weight = {tvm_ffi.structural_hash(constant): var for var, constant in as_constant.items()}

    def substitute(func: relax.Function, leaf) -> relax.Function:
        blocks = []
        for block in func.body.blocks:
            bindings = [relax.VarBinding(b.var, rebuild(b.value, leaf))
                        if isinstance(b, relax.VarBinding) else b for b in block.bindings]
            blocks.append(type(block)(bindings))
        body = relax.SeqExpr(blocks, rebuild(func.body.body, leaf))
        return relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs)

    def weight_of(expr):
        if not _is_tensor_constant(expr):
            return expr
        var = as_weight.get(tvm_ffi.structural_hash(expr))
        return var if var is not None and tvm_ffi.structural_equal(expr, as_constant[var]) else expr

    bound = tvm.IRModule({"main": _bias_into_batch_norm_mean(substitute(main, lambda e: as_constant.get(e, e)))})
    rewritten = relax.transform.Normalize()(relax.transform.FoldBatchnormToConv2D()(bound))["main"]
    left = sum(1 for block in rewritten.body.blocks for b in block.bindings
               if isinstance(b.value, relax.Call) and b.value.op.same_as(batch_norm))
    if left == len(calls):
        return main
    return relax.transform.Normalize()(tvm.IRModule({"main": substitute(rewritten, weight_of)}))["main"]


def _bias_into_batch_norm_mean(func: relax.Function) -> relax.Function:
    """``batch_norm(conv2d(x, W) + b, gamma, beta, mean, var)`` as ``batch_norm(conv2d(x, W), gamma, beta, mean - b,
    var)`` where ``b`` is a per-channel constant that nothing else reads (a torch ``Conv2d(bias=True)`` before a
    ``BatchNorm2d``): the same values, ``(y + b - mean) * s + beta``, in the form ``FoldBatchnormToConv2D``
    matches, so the bias folds into the convolution's weight and bias as well."""
    batch_norm, add, conv2d = (tvm.ir.Op.get(f"relax.{name}") for name in ("nn.batch_norm", "add", "nn.conv2d"))
    if not isinstance(func.body, relax.SeqExpr):
        return func
    bindings = [b for block in func.body.blocks for b in block.bindings if isinstance(b, relax.VarBinding)]
    value_of = {b.var: b.value for b in bindings}
    uses: dict = {}
    for expr in [b.value for b in bindings] + [func.body.body]:
        for var in relax.analysis.free_vars(expr):
            uses[var] = uses.get(var, 0) + 1

    reshapes = [tvm.ir.Op.get(f"relax.{name}") for name in ("reshape", "expand_dims")]

    def per_channel(expr, channels: int):
        """The values of a bias of one value per channel: a constant, or one reshaped (torch's bias view)."""
        shape = [int(d) for d in expr.ty.shape] if isinstance(expr.ty, relax.TensorType) and expr.ty.shape else None
        if shape not in ([channels], [1, channels, 1, 1]):
            return None
        bound = value_of.get(expr) if isinstance(expr, relax.Var) else None
        if isinstance(bound, relax.Call) and any(bound.op.same_as(op) for op in reshapes):
            expr = bound.args[0]
        if not _is_tensor_constant(expr) or expr.value.numpy().size != channels:
            return None
        return expr.value.numpy().reshape(channels)

    new_values = {}
    for b in bindings:
        call = b.value
        if not (isinstance(call, relax.Call) and call.op.same_as(batch_norm) and int(call.attrs.axis) == 1):
            continue
        summed = call.args[0]
        inner = value_of.get(summed) if isinstance(summed, relax.Var) else None
        if not (isinstance(inner, relax.Call) and inner.op.same_as(add) and uses.get(summed) == 1):
            continue
        conv, bias = inner.args
        if not (isinstance(conv, relax.Var) and isinstance(value_of.get(conv), relax.Call)
                and value_of[conv].op.same_as(conv2d) and _is_tensor_constant(call.args[3])):
            continue
        mean = call.args[3].value.numpy()
        per_channel_bias = per_channel(bias, mean.size)
        if per_channel_bias is None:
            continue
        shifted = relax.const((mean - per_channel_bias).astype(mean.dtype))
        new_values[b.var] = relax.Call(call.op, [conv, *call.args[1:3], shifted, call.args[4]], call.attrs,
                                       call.ty_args)
    if not new_values:
        return func
    blocks = [type(block)([relax.VarBinding(b.var, new_values.get(b.var, b.value)) if isinstance(b, relax.VarBinding)
                           else b for b in block.bindings]) for block in func.body.blocks]
    func = relax.Function(func.params, relax.SeqExpr(blocks, func.body.body), func.ret_ty, func.is_pure, func.attrs)
    return relax.transform.DeadCodeElimination()(tvm.IRModule({"main": func}))["main"]


def _param_list(main: relax.Function, params) -> tuple[int, list]:
    """Return (num_input, weight values in order) from whatever form ``params`` came in."""
    names = [p.name for p in main.params]
    if isinstance(params, Mapping) and "main" in params and not isinstance(params["main"], np.ndarray):
        params = list(params["main"])
    if params is None or (isinstance(params, (Sequence, Mapping)) and len(params) == 0):
        num_input = int(main.attrs["num_input"]) if main.attrs and "num_input" in main.attrs else len(names)
        if num_input != len(names):
            raise ModelError(
                f"main takes weights {names[num_input:]} but no params were given: pass params "
                "(the second value of relax.frontend.detach_params)"
            )
        return num_input, []
    if isinstance(params, Mapping):
        missing = [n for n in params if n not in names]
        if missing:
            raise ModelError(f"params name {missing}, which are not parameters of main; its parameters are {names}")
        num_input = min(names.index(n) for n in params)
        expected = names[num_input:]
        absent = [n for n in expected if n not in params]
        if absent:
            raise ModelError(f"weights {absent} of main have no value in params")
        return num_input, [_to_numpy(params[n]) for n in expected]
    values = [_to_numpy(p) for p in params]
    num_input = len(names) - len(values)
    if num_input < 0:
        raise ModelError(f"{len(values)} params given but main has only {len(names)} parameters")
    return num_input, values


def normalize(mod: tvm.IRModule, params=None, *, name: str = "model", fold_weights: bool = True) -> Model:
    """Normalise a Relax module and its weights into a :class:`Model` (see the module docstring)."""
    if not isinstance(mod, tvm.IRModule):
        raise ModelError(f"expected a tvm.IRModule, got {type(mod).__name__}")
    names = [gv.name_hint for gv in mod.get_global_vars()]
    if "main" not in names:
        raise ModelError(
            f"the module has no function 'main' (it has {names}); autoplace places the function named main: "
            "rename your entry function to main"
        )
    main = mod["main"]
    if not isinstance(main, relax.Function):
        raise ModelError("'main' is not a Relax function; autoplace places Relax functions, not TIR PrimFuncs")
    num_input, weights = _param_list(main, params)
    for var, value in zip(main.params[num_input:], weights):
        shape = _static_shape(var.ty, f"weight {var.name}")
        if tuple(value.shape) != shape:
            raise ModelError(f"weight {var.name} has shape {value.shape} but main expects {shape}")
    for var in main.params:
        _static_shape(var.ty, f"parameter {var.name}")
    if fold_weights and weights:
        main = fold_batch_norms(main, num_input, weights)
    folded = fold_weight_transforms(main, num_input, weights) if fold_weights and weights else {}
    new_main, weights = _rebuild(main, num_input, weights, folded)
    new_mod = tvm.IRModule({gv: f for gv, f in mod.functions.items() if gv.name_hint != "main"})
    new_mod["main"] = new_main
    if mod.global_infos:
        for key, value in mod.global_infos.items():
            new_mod.update_global_info(key, value)
    new_mod = relax.transform.Normalize()(new_mod)
    return Model(new_mod, weights, name)


class _Names:
    """Unique variable names, in the style the TVMScript printer uses (``lv``, ``lv_1``, ...)."""

    def __init__(self):
        self.used: set[str] = set()

    def __call__(self, hint: str) -> str:
        hint = hint or "v"
        name, k = hint, 0
        while name in self.used:
            k += 1
            name = f"{hint}_{k}"
        self.used.add(name)
        return name


def _rebuild(main: relax.Function, num_input: int, weights: list, folded: dict | None = None
             ) -> tuple[relax.Function, list[np.ndarray]]:
    """Re-emit ``main`` with unique names, returning it and its weight values.

    Tensor constants become trailing weight parameters (one per distinct constant); each binding of
    ``folded`` (``{var: (constant, name)}``, see :func:`fold_weight_transforms`) is dropped and its uses read
    a new weight parameter of that name; a weight no longer used is dropped.
    """
    folded = folded or {}
    names = _Names()
    var_map: dict = {}
    new_params = []
    for var in main.params:
        new = relax.Var(names(var.name), var.ty)
        var_map[var] = new
        new_params.append(new)
    lifted_vars: list = []
    lifted_values: list[np.ndarray] = []
    lifted_of: dict = {}  # constant -> its weight parameter (a constant used twice is stored once)
    # Variables that depend on a parameter: after emission their types carry a vdevice. A chain that
    # starts from ``arange`` alone gets one only from a weight it reads, so its scalars stay weights.
    on_device: set = set(new_params)

    def lift(constant, hint: str):
        if constant not in lifted_of:
            value = constant.value.numpy()
            var = relax.Var(names(hint), relax.TensorType(value.shape, str(value.dtype)))
            lifted_vars.append(var)
            lifted_values.append(value)
            lifted_of[constant] = var
            on_device.add(var)
        return lifted_of[constant]

    def leaf(expr):
        if isinstance(expr, relax.Var) and expr in folded:
            return lift(*folded[expr])
        if isinstance(expr, relax.Var):
            if expr not in var_map:
                raise ModelError(f"variable {expr.name} is used before it is bound")
            return var_map[expr]
        if _is_tensor_constant(expr):
            return lift(expr, f"const{len(lifted_vars)}")
        if isinstance(expr, (tvm.ir.Constant, relax.ShapeExpr, relax.ExternFunc, tvm.ir.GlobalVar)):
            return expr
        raise ModelError(
            f"main contains a {type(expr).__name__} expression, which autoplace cannot place "
            "(control flow and nested functions are not supported): inline or remove it"
        )

    def subst(expr):
        if isinstance(expr, relax.Call) and _inlines_scalar_operands(expr):
            # LegalizeOps turns a scalar constant second operand into an immediate, or else the first.
            lhs, rhs = (a if _is_scalar_constant(a) else subst(a) for a in expr.args)
            keep_rhs = _is_scalar_constant(rhs) and lhs in on_device
            keep_lhs = _is_scalar_constant(lhs) and rhs in on_device
            args = [lhs if keep_lhs or not _is_scalar_constant(lhs) else leaf(lhs),
                    rhs if keep_rhs or not _is_scalar_constant(rhs) else leaf(rhs)]
            return relax.Call(expr.op, args, expr.attrs, expr.ty_args)
        return rebuild(expr, leaf)

    body = main.body
    if not isinstance(body, relax.SeqExpr):
        body = relax.SeqExpr([], body)
    # Which variables of a dataflow block are used after it (they must be block outputs).
    used_later: set = set()
    _collect_vars(body.body, used_later)
    for block in body.blocks:
        for binding in block.bindings:
            if isinstance(binding, relax.VarBinding):
                _collect_vars(binding.value, used_later)
    new_blocks = []
    for block in body.blocks:
        new_bindings = []
        for binding in block.bindings:
            if binding.var in folded:
                continue
            if not isinstance(binding, relax.VarBinding):
                raise ModelError(
                    f"main binds {binding.var.name} with a {type(binding).__name__} "
                    "(match_cast: dynamic shapes), which autoplace does not support"
                )
            value = subst(binding.value)
            is_dataflow_var = isinstance(binding.var, relax.DataflowVar)
            new_name = names(binding.var.name)
            new_var = (relax.DataflowVar if is_dataflow_var else relax.Var)(new_name, binding.var.ty)
            var_map[binding.var] = new_var
            if any(v in on_device for v in relax.analysis.free_vars(value)):
                on_device.add(new_var)
            new_bindings.append(relax.VarBinding(new_var, value))
        if isinstance(block, relax.DataflowBlock):
            new_blocks.append(relax.DataflowBlock(new_bindings))
        else:
            new_blocks.append(relax.BindingBlock(new_bindings))
    new_body = relax.SeqExpr(new_blocks, subst(body.body))
    used = set(relax.analysis.free_vars(new_body))
    kept = [(var, value) for var, value in zip(new_params[num_input:], weights) if var in used or not folded]
    params = new_params[:num_input] + [var for var, _ in kept] + lifted_vars
    func = relax.Function(params, new_body, main.ret_ty, main.is_pure, main.attrs)
    func = func.with_attr("num_input", num_input)
    return func, [value for _, value in kept] + lifted_values


def _is_tensor_constant(expr) -> bool:
    return isinstance(expr, tvm.ir.Constant) and isinstance(expr.ty, relax.TensorType)


def _is_scalar_constant(expr) -> bool:
    return _is_tensor_constant(expr) and len(expr.ty.shape) == 0


#: Binary ops whose legalization (``relax.transform.legalize_ops.binary``) makes a scalar constant
#: operand an immediate of the kernel.
_SCALAR_IMMEDIATE_OPS = frozenset(
    f"relax.{name}" for name in (
        "add", "subtract", "multiply", "divide", "floor_divide", "power", "mod", "floor_mod",
        "maximum", "minimum", "equal", "not_equal", "greater", "greater_equal", "less", "less_equal",
    )
)


def _inlines_scalar_operands(call: relax.Call) -> bool:
    return (isinstance(call.op, tvm.ir.Op) and call.op.name in _SCALAR_IMMEDIATE_OPS
            and len(call.args) == 2)


def _collect_vars(expr, out: set) -> None:
    for var in relax.analysis.free_vars(expr) if not isinstance(expr, relax.Var) else [expr]:
        out.add(var)
