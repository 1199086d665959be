"""The heterogeneous build: fuse within each device, schedule GPU kernels, compile once.

TVM's stock recipe for a module with several vdevices (``RealizeVDevice -> LegalizeOps ->
DefaultGPUSchedule -> tvm.compile``) does not fuse, and running ``FuseOps``/``FuseTIR`` on such a
module loses the ``target`` attribute ``LegalizeOps`` puts on each kernel, so a fused CPU kernel
can be compiled (and scheduled) for the GPU. :func:`lower` fuses and then gives every fused kernel
back the target of the vdevice its ``call_tir`` writes to. ``FuseOps`` never fuses across a
``to_vdevice`` (it is not a TIR call), so every fused kernel reads and writes one device only.

Kernels are scheduled per target in :func:`lower`: CUDA kernels with TVM's dlight GPU rules, ``llvm``
kernels with autoplace's dlight-style CPU rules (:mod:`.cpu_schedules`), compiled for this machine's CPU
(``mcpu``) when their target names none. The profiler times the kernels :func:`lower` returns, so the
profiled kernel is the shipped kernel, provided it is compiled for the target in its ``target``
attribute (which carries that ``mcpu``); :func:`single_device_build` applies the same CPU schedules.
"""

from __future__ import annotations

import contextlib

import numpy as np
import tvm
import tvm_ffi
from tvm import relax

from .._relax import rebuild
from .cpu_schedules import cpu_legalize_map, cpu_target, schedule_cpu_kernels
from .strided_loads import TIR_PIPELINE

_CALL_TIR = tvm.ir.Op.get("relax.call_tir")


def _call_targets(mod: tvm.IRModule) -> dict:
    """``{prim_func GlobalVar: set of target kinds-with-ids}`` from every call_tir in Relax functions."""
    found: dict = {}

    def visit(expr):
        if isinstance(expr, relax.Call) and expr.op.same_as(_CALL_TIR):
            callee = expr.args[0]
            ty = expr.ty
            vdevice = _first_vdevice(ty)
            found.setdefault(callee, []).append(vdevice)

    for _, func in mod.functions_items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return found


def _is_tensor_constant(expr) -> bool:
    return isinstance(expr, tvm.ir.Constant) and isinstance(expr.ty, relax.TensorType)


def _set_vdevice(ty, vdevice):
    return relax.TensorType(ty.shape, ty.dtype, vdevice)


def _first_vdevice(ty):
    if isinstance(ty, relax.TensorType):
        return ty.vdevice
    if isinstance(ty, tvm.ir.TupleType):
        for field in ty.fields:
            vdevice = _first_vdevice(field)
            if vdevice is not None:
                return vdevice
    return None


def _vdevice_types(func: relax.Function) -> dict:
    """``{binding var name: type}`` for every binding whose type carries a vdevice."""
    types = {}
    for block in func.body.blocks:
        for binding in block.bindings:
            if _first_vdevice(binding.var.ty) is not None:
                types[binding.var.name] = binding.var.ty
    return types


def _same_vdevice(a, b) -> bool:
    return a.target.kind.name == b.target.kind.name and int(a.vdevice_id) == int(b.vdevice_id)


def restore_vdevices(func: relax.Function, types: dict, first_vdevice=None) -> relax.Function:
    """Put back the vdevice that ``LegalizeOps`` drops from some ops' outputs (conv2d, pooling...
    in TVM 0.27): each ``call_tir`` gets its binding's annotated output type again, so its output is
    allocated on the right device and its kernel is compiled for the right target.

    ``LegalizeOps`` also folds some ops into constants (``arange`` with constant bounds). The VM puts
    every constant on the first device, so a constant read by a kernel on another device is copied
    there with one ``to_vdevice`` per (constant, device), bound before its first use.
    """
    var_map: dict = {}
    changed = False
    const_copies: dict = {}

    def subst(expr):
        return rebuild(expr, lambda leaf: var_map.get(leaf, leaf) if isinstance(leaf, relax.Var) else leaf)

    blocks = []
    for block in func.body.blocks:
        bindings = []
        for binding in block.bindings:
            var, value = binding.var, subst(binding.value)
            want = types.get(var.name)
            if (
                want is not None
                and isinstance(value, relax.Call)
                and value.op.same_as(_CALL_TIR)
                and _first_vdevice(var.ty) is None
            ):
                value = relax.Call(value.op, value.args, value.attrs, [want])
                new_var = type(var)(var.name, want)
                var_map[var] = new_var
                var = new_var
                changed = True
            if want is not None and _is_tensor_constant(value) and first_vdevice is not None:
                # An op folded into a constant by its legalizer: copy it from the first device.
                target_vdevice = _first_vdevice(want)
                if not _same_vdevice(target_vdevice, first_vdevice):
                    value = relax.op.to_vdevice(value, target_vdevice)
                    new_var = type(var)(var.name, want)
                    var_map[var] = new_var
                    var = new_var
                    changed = True
            out_vdevice = _first_vdevice(var.ty)
            if (
                first_vdevice is not None
                and out_vdevice is not None
                and isinstance(value, relax.Call)
                and value.op.same_as(_CALL_TIR)
                and not _same_vdevice(out_vdevice, first_vdevice)
            ):
                args = list(value.args[1].fields) if isinstance(value.args[1], relax.Tuple) else None
                if args is not None and any(_is_tensor_constant(a) for a in args):
                    new_args = []
                    for arg in args:
                        if _is_tensor_constant(arg):
                            key = (arg, int(out_vdevice.vdevice_id), out_vdevice.target.kind.name)
                            if key not in const_copies:
                                copy = relax.DataflowVar(f"const{len(const_copies)}_to_device",
                                                         _set_vdevice(arg.ty, out_vdevice))
                                if not isinstance(block, relax.DataflowBlock):
                                    copy = relax.Var(copy.name, copy.ty)
                                bindings.append(relax.VarBinding(copy, relax.op.to_vdevice(arg, out_vdevice)))
                                const_copies[key] = copy
                            arg = const_copies[key]
                        new_args.append(arg)
                    value = relax.Call(value.op, [value.args[0], relax.Tuple(new_args)] + list(value.args[2:]),
                                       value.attrs, value.ty_args)
                    changed = True
            bindings.append(relax.VarBinding(var, value))
        blocks.append(type(block)(bindings))
    if not changed:
        return func
    body = relax.SeqExpr(blocks, subst(func.body.body))
    return relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs)


def retarget_kernels(mod: tvm.IRModule) -> tvm.IRModule:
    """Give each PrimFunc the target of the vdevice its calls write to (see the module docstring).

    A kernel called on devices of different kinds is cloned, one copy per kind.
    """
    calls = _call_targets(mod)
    updates = {}
    for gvar, vdevices in calls.items():
        func = mod[gvar]
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        kinds = {str(v.target.kind.name): v.target for v in vdevices if v is not None}
        if len(kinds) > 1:
            raise NotImplementedError(
                f"kernel {gvar.name_hint} is called on targets {sorted(kinds)}; FuseTIR deduplicated it"
            )
        if not kinds:
            continue
        target = next(iter(kinds.values()))
        current = func.attrs.get("target") if func.attrs else None
        if current is None or current.kind.name != target.kind.name:
            updates[gvar] = func.with_attr("target", target)
    for gvar, func in updates.items():
        mod[gvar] = func
    return mod


def _schedule_gpu_kernels(mod: tvm.IRModule) -> tvm.IRModule:
    """Apply TVM's default GPU schedules (dlight, as the CUDA pipeline does) to the CUDA kernels only.

    Each kernel is scheduled alone, and where a dlight rule fails on one, that kernel gets the rules after it instead
    of the whole model failing to build: the matmul rule asserts on a matmul whose epilogue it cannot inline (e.g.
    MobileNetV2's 1x1 conv2d + ReLU6 + the next layer's padding), the GEMV rule on a reduction it takes for a
    matrix-vector product but finds no reduction loop in after normalising (seen on an op-family kernel); the
    fallback rule is last and schedules any kernel.
    """
    from tvm.s_tir import dlight as dl

    def rule_sets():
        rules = [dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(), dl.gpu.Fallback()]
        for first in (0, 1, 2, len(rules) - 1):  # every rule; without the matmul rule; without GEMV too; fallback
            yield rules[first:]

    for gvar, func in list(mod.functions_items()):
        target = func.attrs.get("target") if isinstance(func, tvm.tirx.PrimFunc) and func.attrs else None
        if target is None or target.kind.name != "cuda":
            continue
        sub = tvm.IRModule({gvar: func})
        for rules in rule_sets():
            try:
                scheduled = dl.ApplyDefaultSchedule(*rules)(sub)
                break
            except Exception:  # dlight asserts in Python; TVM raises through its FFI
                if len(rules) == 1:
                    raise
        scheduled = tvm.s_tir.transform.DefaultGPUSchedule()(scheduled)
        mod[gvar] = scheduled[gvar]
    return mod


def _cpu_kernel_targets(mod: tvm.IRModule) -> tvm.IRModule:
    """Give every ``llvm`` kernel whose target names no ``mcpu`` this machine's CPU, and a Zen's kernels their LLVM
    features (:func:`cpu_target`)."""
    updates = {}
    for gvar, func in mod.functions_items():
        target = func.attrs.get("target") if isinstance(func, tvm.tirx.PrimFunc) and func.attrs else None
        if target is not None and target.kind.name == "llvm":
            full = cpu_target(target)
            if full is not target:
                updates[gvar] = func.with_attr("target", full)
    for gvar, func in updates.items():
        mod[gvar] = func
    return mod


def lower(mod: tvm.IRModule, *, fuse: bool = True, on_fused=None, schedule_cpu: bool = True,
          on_unscheduled=None) -> tvm.IRModule:
    """Relax-level lowering of an annotated module: legalize, fuse per device, schedule every kernel.

    The returned module holds the fused kernels exactly as :func:`build` compiles them; the profiler
    measures these same kernels.

    Parameters
    ----------
    on_fused : callable, optional
        Called with the module right after ``FuseOps`` (whose ``main`` binding variables are the
        ones of the lowered ``main``): the profiler reads which ops each kernel computes from it.
    schedule_cpu : bool
        Schedule ``llvm`` kernels (default). ``False`` keeps TVM's unscheduled CPU kernels (and their
        targets as given): the "before" of ``experiments/vs_pytorch.py``.
    on_unscheduled : callable, optional
        Called with the module whose kernels are fused but not yet scheduled (same kernel names as the
        returned module): the profiler reads how a kernel indexes its inputs from it
        (:mod:`autoplace.profile.access`), before a schedule splits and stages its loops.
    """
    types = _vdevice_types(mod["main"])  # before RealizeVDevice, which drops some (arange's)
    mod = relax.transform.RealizeVDevice()(mod)
    legalize = relax.transform.LegalizeOps(cpu_legalize_map() if schedule_cpu else None)
    vdevices = mod.global_infos.get("vdevice") if mod.global_infos else None
    # DispatchSortScan builds a GPU sort/top-k/scan with TVM's GPU sort, which reads Target.current() (its
    # thread count) and fails without one: give it the module's first GPU target (CPU calls do not read it).
    gpu = next((v.target for v in vdevices or [] if v.target.kind.name != "llvm"), None)
    with gpu if gpu is not None else contextlib.nullcontext():
        mod = tvm.transform.Sequential([relax.backend.DispatchSampling(), relax.backend.DispatchSortScan()])(mod)
    mod = legalize(mod)
    mod["main"] = restore_vdevices(mod["main"], types, vdevices[0] if vdevices else None)
    mod = relax.transform.Normalize()(mod)
    # No FoldConstant: a folded constant would be copied to device 0 by the VM (apache/tvm#17884).
    mod = relax.transform.AnnotateTIROpPattern()(mod)
    if fuse:
        mod = relax.transform.FuseOps()(mod)
        if on_fused is not None:
            on_fused(mod)
        mod = relax.transform.FuseTIR()(mod)
    elif on_fused is not None:
        on_fused(mod)
    mod = retarget_kernels(mod)
    mod = relax.transform.DeadCodeElimination()(mod)
    if on_unscheduled is not None:
        on_unscheduled(mod)
    if schedule_cpu:
        mod = schedule_cpu_kernels(_cpu_kernel_targets(mod))
    return _schedule_gpu_kernels(mod)


_ALLOC_TENSOR = tvm.ir.Op.get("relax.builtin.alloc_tensor")
_ALLOC_STORAGE = tvm.ir.Op.get("relax.memory.alloc_storage")
_TAG = "@autoplace-device"


def _rewrite_alloc_scopes(func: relax.Function, tag: bool) -> relax.Function:
    """Tag (or untag) the storage scope of every allocation with its device index.

    ``StaticPlanBlockMemory`` pools reusable storage by (scope, dtype) only, so a buffer freed on one
    device can be reused for a tensor on another (TVM 0.27: a kernel then receives an output on the
    wrong device, "Mismatched ...device_id"). Tagging the scope with the device index before planning
    keeps the pools apart; untagging afterwards restores the real scope.
    """
    blocks = []
    changed = False
    for block in func.body.blocks:
        bindings = []
        for binding in block.bindings:
            value = binding.value
            if isinstance(binding, relax.VarBinding) and isinstance(value, relax.Call):
                if tag and value.op.same_as(_ALLOC_TENSOR):
                    scope = str(value.args[3].value)
                    device_index = int(value.args[2].value)
                    args = list(value.args[:3]) + [tvm.ir.StringImm(f"{scope}{_TAG}{device_index}")]
                    value = relax.Call(value.op, args, value.attrs, value.ty_args, ret_ty=value.ty)
                    changed = True
                elif not tag and (value.op.same_as(_ALLOC_TENSOR) or value.op.same_as(_ALLOC_STORAGE)):
                    idx = 3 if value.op.same_as(_ALLOC_TENSOR) else 2
                    scope = str(value.args[idx].value)
                    if _TAG in scope:
                        args = list(value.args)
                        args[idx] = tvm.ir.StringImm(scope.split(_TAG)[0])
                        value = relax.Call(value.op, args, value.attrs, value.ty_args, ret_ty=value.ty)
                        changed = True
                if changed:
                    binding = relax.VarBinding(binding.var, value)
            bindings.append(binding)
        blocks.append(type(block)(bindings))
    if not changed:
        return func
    body = relax.SeqExpr(blocks, func.body.body)
    return relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs)


def _scope_pass(tag: bool):
    @tvm.transform.module_pass(opt_level=0, name="AutoplaceTagAllocScopes" if tag else "AutoplaceUntagAllocScopes")
    def _pass(mod, _ctx):
        for gvar, func in list(mod.functions_items()):
            if isinstance(func, relax.Function) and isinstance(func.body, relax.SeqExpr):
                mod[gvar] = _rewrite_alloc_scopes(func, tag)
        return mod

    return _pass


def _without_vdevice(ty):
    if isinstance(ty, relax.TensorType):
        return relax.TensorType(ty.shape, ty.dtype) if ty.vdevice is not None else ty
    if isinstance(ty, tvm.ir.TupleType):
        return tvm.ir.TupleType([_without_vdevice(f) for f in ty.fields])
    return ty


@tvm.transform.module_pass(opt_level=0, name="AutoplaceReturnTypeOfBody")
def _return_type_of_body(mod, _ctx):
    """Give ``main`` the return type its body yields when the two differ only by vdevice.

    After memory planning the returned tensor is an ``alloc_tensor`` without a vdevice, while the signature
    keeps the annotated one; ``VMShapeLower`` then checks the result's shape once more on every call (an extra
    ``vm.builtin.match_shape``, about 0.1 us: a 1 us model built through autoplace ran 1.10x the plain
    build). Which device holds the result is decided by the body, not by this annotation.
    """
    for gvar, func in list(mod.functions_items()):
        if not isinstance(func, relax.Function) or not isinstance(func.body, relax.SeqExpr):
            continue
        yielded = func.body.body.ty
        if func.ret_ty is None or tvm_ffi.structural_equal(func.ret_ty, yielded):
            continue
        if tvm_ffi.structural_equal(_without_vdevice(func.ret_ty), _without_vdevice(yielded)):
            mod[gvar] = relax.Function(func.params, func.body, yielded, func.is_pure, func.attrs)
    return mod


def _memory_planning() -> list:
    """The first passes of :func:`vm_pipeline`: up to device-aware static memory planning."""
    return [
        relax.transform.RewriteDataflowReshape(),
        relax.transform.ToNonDataflow(),
        relax.transform.RemovePurityChecking(),
        relax.transform.CallTIRRewrite(),
        _scope_pass(tag=True),
        relax.transform.StaticPlanBlockMemory(),
        _scope_pass(tag=False),
    ]


def vm_pipeline() -> tvm.transform.Pass:
    """TVM's default Relax build pipeline with device-aware static memory planning."""
    return tvm.transform.Sequential(
        [
            *_memory_planning(),
            relax.transform.RewriteCUDAGraph(),
            relax.transform.LowerAllocTensor(),
            relax.transform.KillAfterLastUse(),
            relax.transform.LowerRuntimeBuiltin(),
            relax.transform.ComputePrimValue(),
            _return_type_of_body,
            relax.transform.VMShapeLower(),
            relax.transform.AttachGlobalSymbol(),
        ]
    )


_TO_VDEVICE = tvm.ir.Op.get("relax.to_vdevice")


def planned_allocations(mod: tvm.IRModule, *, fuse: bool = True) -> dict:
    """Bytes of activation memory :func:`build` gives each device of an annotated module, by vdevice index.

    Lowered as :func:`build` lowers it, then planned by TVM's ``StaticPlanBlockMemory`` (as :func:`vm_pipeline`
    does): every storage it allocates, each tensor it leaves to the runtime (the model's outputs), and the buffers of
    the ``to_vdevice`` copies, which the runtime allocates when a copy runs and returns to the device's pool after
    its last use (``KillAfterLastUse``), where a later copy of the same size takes it again: per size, as many
    buffers as copies of that size are live at once. Weights and inputs are not in it. Compiles no kernel, but
    schedules them (a second for a base model).
    """
    planned = tvm.transform.Sequential(_memory_planning())(lower(mod, fuse=fuse))
    per_device: dict[int, int] = {}

    def add(index, nbytes):
        per_device[int(index)] = per_device.get(int(index), 0) + int(nbytes)

    def tensor_bytes(ty):
        return int(tvm.DataType(ty.dtype).bits) // 8 * int(np.prod([int(x) for x in ty.shape.values]))

    vdevices = list(mod.global_infos.get("vdevice", []))
    main = planned["main"]
    bindings = [b for block in main.body.blocks for b in block.bindings]
    copies, last_use = {}, {}  # copy var -> (device, bytes, position); var -> last position that reads it
    for position, binding in enumerate(bindings):
        value = binding.value
        for var in relax.analysis.free_vars(value):
            last_use[var] = position
        if not isinstance(value, relax.Call) or not isinstance(value.op, tvm.ir.Op):
            continue
        if value.op.same_as(_ALLOC_STORAGE):  # (size in bytes, device index, scope, dtype)
            add(value.args[1].value, int(value.args[0].values[0]))
        elif value.op.same_as(_ALLOC_TENSOR):  # (shape, dtype, device index, scope)
            add(value.args[2].value, tensor_bytes(value.ty))
        elif value.op.same_as(_TO_VDEVICE):
            target = value.attrs.dst_vdevice
            index = next(i for i, v in enumerate(vdevices)  # (VDevice.same_as recurses forever in TVM 0.27)
                         if int(v.vdevice_id) == int(target.vdevice_id) and v.target.kind.name == target.target.kind.name)
            copies[binding.var] = (index, tensor_bytes(value.ty), position)
    for var in relax.analysis.free_vars(main.body.body):  # returned: held to the end
        last_use[var] = len(bindings)
    pools: dict[tuple, list] = {}  # (device, bytes) -> [(position, +1 taken / -1 returned)]
    for var, (index, nbytes, position) in copies.items():
        pools.setdefault((index, nbytes), []).extend([(position, 1), (last_use.get(var, position) + 1, -1)])
    for (index, nbytes), events in pools.items():
        held = most = 0
        for _, change in sorted(events, key=lambda e: (e[0], e[1])):  # a buffer returned before one is taken
            held += change
            most = max(most, held)
        add(index, most * nbytes)
    return per_device


def build(mod: tvm.IRModule, *, fuse: bool = True, schedule_cpu: bool = True):
    """Compile an annotated module into a Relax VM executable.

    Parameters
    ----------
    mod : tvm.IRModule
        A module whose ``vdevice`` global info lists the targets (as :func:`autoplace.emit.annotate` writes).
    fuse : bool
        Fuse ops within each device (default). ``False`` compiles one kernel per op.
    schedule_cpu : bool
        Schedule the CPU kernels (default); ``False`` builds TVM's unscheduled CPU kernels.
    """
    return tvm.compile(lower(mod, fuse=fuse, schedule_cpu=schedule_cpu), relax_pipeline=vm_pipeline(),
                       tir_pipeline=TIR_PIPELINE)


def stock_build(mod: tvm.IRModule):
    """TVM's own recipe for multi-vdevice modules (no fusion), as in tests/python/relax/test_vm_multi_device.py.

    Note: its memory planner can hand a buffer freed on one device to a tensor on another (see
    :func:`_rewrite_alloc_scopes`); :func:`build` does not have that bug.
    """
    mod = relax.transform.RealizeVDevice()(mod)
    mod = relax.transform.LegalizeOps()(mod)
    mod = tvm.s_tir.transform.DefaultGPUSchedule()(mod)
    return tvm.compile(mod)


def _cpu_pipeline(target: tvm.target.Target) -> tvm.transform.Pass:
    """TVM's default CPU pipeline (``cpu_generic``) with autoplace's vectorisable math legalizations and
    its CPU schedules applied right after fusion."""
    from tvm.relax.backend.cpu_generic import pipeline as cpu

    @tvm.transform.module_pass(opt_level=0, name="AutoplaceScheduleCPUKernels")
    def _schedule(mod, _ctx):
        return schedule_cpu_kernels(mod, default_target=target)

    @tvm.transform.module_pass(opt_level=0, name="AutoplaceCPUPipeline")
    def _pipeline(mod, _ctx):
        legalize = [
            relax.transform.LegalizeOps(cpu_legalize_map(default_kind="llvm")),
            relax.transform.AnnotateTIROpPattern(),
            relax.transform.FoldConstant(),
            relax.transform.FuseOps(),
            relax.transform.FuseTIR(),
            _schedule,
        ]
        with target:
            seq = tvm.transform.Sequential(
                cpu.library_dispatch_passes(target) + legalize + cpu.dataflow_lower_passes(target)
                + cpu.finalize_passes(target)
            )
            return seq(mod)

    return _pipeline


def single_device_build(mod: tvm.IRModule, target="llvm", *, schedule_cpu: bool = True):
    """The plain single-device build a user would write: ``tvm.compile(mod, target)``.

    The reference for correctness (placed builds must match it) and for speed (an all-on-one-device
    placement built by :func:`build` must be as fast). For an ``llvm`` target it applies the same CPU
    schedules as :func:`build` and compiles for this machine's CPU when the target names no ``mcpu``
    (TVM's default CPU pipeline plus the schedule pass); ``schedule_cpu=False`` is plain
    ``tvm.compile(mod, target)``.
    """
    if isinstance(target, (str, dict)):
        target = tvm.target.Target(target)
    if not schedule_cpu or target.kind.name != "llvm":
        return tvm.compile(mod, target=target)
    target = cpu_target(target)
    return tvm.compile(mod, target=target, relax_pipeline=_cpu_pipeline(target), tir_pipeline=TIR_PIPELINE)
