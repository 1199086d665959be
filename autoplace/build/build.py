"""The heterogeneous build: fuse within each device, schedule GPU kernels, compile once.

TVM's stock recipe for a module with several vdevices (``RealizeVDevice -> LegalizeOps ->
DefaultGPUSchedule -> tvm.compile``) does not fuse, and running ``FuseOps``/``FuseTIR`` on such a
module loses the ``target`` attribute ``LegalizeOps`` puts on each kernel, so a fused CPU kernel
can be compiled (and scheduled) for the GPU. :func:`lower` fuses and then gives every fused kernel
back the target of the vdevice its ``call_tir`` writes to. ``FuseOps`` never fuses across a
``to_vdevice`` (it is not a TIR call), so every fused kernel reads and writes one device only.
"""

from __future__ import annotations

import tvm
from tvm import relax

from ..targets import TargetSet

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


def _first_vdevice(ty):
    if isinstance(ty, relax.TensorType):
        return ty.vdevice
    if isinstance(ty, tvm.ir.TupleType):
        for field in ty.fields:
            vdevice = _first_vdevice(field)
            if vdevice is not None:
                return vdevice
    return None


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
    """Apply TVM's default GPU schedules (dlight, as the CUDA pipeline does) to the CUDA kernels only."""
    from tvm.s_tir import dlight as dl

    gpu = {}
    for gvar, func in mod.functions_items():
        if isinstance(func, tvm.tirx.PrimFunc) and func.attrs and "target" in func.attrs:
            if func.attrs["target"].kind.name == "cuda":
                gpu[gvar] = func
    if not gpu:
        return mod
    sub = tvm.IRModule(gpu)
    sub = dl.ApplyDefaultSchedule(
        dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(), dl.gpu.Fallback()
    )(sub)
    sub = tvm.s_tir.transform.DefaultGPUSchedule()(sub)
    for gvar, func in sub.functions_items():
        mod[gvar] = func
    return mod


def lower(mod: tvm.IRModule, *, fuse: bool = True) -> tvm.IRModule:
    """Relax-level lowering of an annotated module: legalize, fuse per device, schedule GPU kernels.

    The returned module holds the fused kernels exactly as :func:`build` compiles them; the profiler
    measures these same kernels.
    """
    mod = relax.transform.RealizeVDevice()(mod)
    passes = [
        relax.backend.DispatchSampling(),
        relax.backend.DispatchSortScan(),
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
    ]
    if fuse:
        passes += [relax.transform.FuseOps(), relax.transform.FuseTIR()]
    mod = tvm.transform.Sequential(passes)(mod)
    mod = retarget_kernels(mod)
    mod = relax.transform.DeadCodeElimination()(mod)
    return _schedule_gpu_kernels(mod)


def build(mod: tvm.IRModule, targets: TargetSet | None = None, *, fuse: bool = True):
    """Compile an annotated module into a Relax VM executable.

    Parameters
    ----------
    mod : tvm.IRModule
        A module whose ``vdevice`` global info lists the targets (as :func:`autoplace.emit.annotate` writes).
    targets : TargetSet, optional
        Unused for compilation (the vdevices say it all); accepted for symmetry with the runner.
    fuse : bool
        Fuse ops within each device (default). ``False`` compiles one kernel per op.
    """
    return tvm.compile(lower(mod, fuse=fuse))


def stock_build(mod: tvm.IRModule):
    """TVM's own recipe for multi-vdevice modules (no fusion), as in tests/python/relax/test_vm_multi_device.py."""
    mod = relax.transform.RealizeVDevice()(mod)
    mod = relax.transform.LegalizeOps()(mod)
    mod = tvm.s_tir.transform.DefaultGPUSchedule()(mod)
    return tvm.compile(mod)
