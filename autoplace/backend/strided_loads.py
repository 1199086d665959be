"""Vector loads at a small constant stride, lowered as contiguous loads and one shuffle.

A stride-2 convolution or pool vectorised along its output row reads every other input pixel: after TVM's
``VectorizeLoop`` the load is ``buf[Ramp(base, 2, L)]``, and TVM 0.27's LLVM code generator lowers any load whose
lanes are not adjacent to one scalar load and one insert per lane (``vinsertps`` on x86). This module rewrites
such a load of ``L`` lanes ``s`` elements apart (``s`` up to :data:`MAX_STRIDE`) as ``s`` contiguous ``L``-lane
loads over the lanes' span and a shuffle keeping every ``s``-th element, which LLVM lowers to permutes
(``vpermt2ps``). The last contiguous load ends at the last lane read, so nothing past the original span is read.

Measured on the Intel Xeon f6m207 (AVX-512; ``experiments/strided_loads.py``), same kernels built both ways and
timed interleaved (``strided_loads_kernels.csv``): 19 convolution and pool kernels 0.98-5.4x (mobilenetv2's
strided depthwise convolutions 5.4x, resnet's 7x7 stem 2.2x, cnn-base's stride-2 convolutions 1.9-2.5x, the
stride-4 patch embeddings 1.4-1.6x, a 3x3 stride-2 max pool 3.1x; one 3x3 stride-2 convolution 0.98x). On layout kernels (transposes) the same rewrite was
mixed (0.44-3x), so only kernels of the :class:`~autoplace.backend.cpu_schedules.Contraction` and
:class:`~autoplace.backend.cpu_schedules.Pool` rules get it.

The rewrite runs after TVM's own TIR pipeline (:data:`TIR_PIPELINE`, given to every CPU build) on the kernels
marked :data:`STRIDED_LOADS_ATTR` at scheduling time (:func:`strided_vector_loads` reads the scheduled TIR): a
kernel lowered this way differs in its TIR, hence in its profile key, from the same kernel lowered without.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import s_tir, tirx

#: Largest distance between the lanes of a vector load that is rewritten: a load of stride ``s`` becomes ``s``
#: contiguous loads, which stops paying against one scalar load per lane as ``s`` nears the lane count.
MAX_STRIDE = 4
#: PrimFunc attribute the schedule rules set on a kernel whose vector loads are rewritten (its value: the
#: strides found); the pass leaves every other function alone.
STRIDED_LOADS_ATTR = "autoplace.strided_loads"
#: Name of the TIR pipeline every CPU build uses: TVM's default one, then :func:`shuffle_strided_loads`.
TIR_PIPELINE = "autoplace"


def _rewritable(stride: int, lanes: int) -> bool:
    return 2 <= stride <= MAX_STRIDE and lanes >= 2 * stride


def _substitute(expr, mapping: dict):
    return tvm_ffi.structural_map(expr, (tvm.ir.expr.Var, lambda v: mapping.get(v, v)))


def strided_vector_loads(func: tirx.PrimFunc) -> list[int]:
    """Strides (2 to :data:`MAX_STRIDE`) at which the vectorised loops of the scheduled ``func`` read a buffer:
    for each vectorised loop of constant extent, each load of the blocks inside it whose flat offset grows by a
    constant from one iteration of the loop to the next. Sorted, without repeats; empty when there is none."""
    analyzer = tvm.sym.Analyzer()
    strides = set()

    def visit_loop(loop):
        if loop.kind != tirx.ForKind.VECTORIZED or not isinstance(loop.extent, tirx.IntImm):
            return
        lanes, var = int(loop.extent.value), loop.loop_var
        step = {var: var + tirx.const(1, str(var.ty.dtype))}

        def visit_realize(realize):
            block = realize.block
            bound = {iv.var: value for iv, value in zip(block.iter_vars, realize.iter_values)}
            loads = []
            for body in (block.body, block.init):
                if body is not None:
                    tvm_ffi.structural_walk(body, (tvm.ir.expr.TensorLoad, loads.append), order="post")
            for load in loads:
                offset = _substitute(load.source.offset_of(list(load.indices))[0], bound)
                delta = analyzer.simplify(_substitute(offset, step) - offset)
                if isinstance(delta, tirx.IntImm) and _rewritable(int(delta.value), lanes):
                    strides.add(int(delta.value))

        tvm_ffi.structural_walk(loop.body, (s_tir.SBlockRealize, visit_realize), order="post")

    tvm_ffi.structural_walk(func.body, (tirx.For, visit_loop), order="post")
    return sorted(strides)


def mark_strided_loads(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with :data:`STRIDED_LOADS_ATTR` set when it has strided vector loads to rewrite."""
    strides = strided_vector_loads(func)
    return func.with_attr(STRIDED_LOADS_ATTR, strides) if strides else func


def _shuffled(load):
    """``load`` (a flat TIR load) as contiguous loads and a shuffle when its lanes are a small stride apart."""
    if len(load.indices) != 1 or not isinstance(load.indices[0], tirx.Ramp):
        return load
    ramp = load.indices[0]
    if not isinstance(ramp.stride, tirx.IntImm) or not isinstance(ramp.lanes, int | tirx.IntImm):
        return load
    stride, lanes = int(ramp.stride.value), int(ramp.lanes)
    if not _rewritable(stride, lanes):
        return load
    dtype = str(ramp.base.ty.dtype)
    # Loads 0..s-2 cover [i*L, (i+1)*L) of the span; the last one ends at the last lane, s*(L-1).
    starts = [i * lanes for i in range(stride - 1)] + [stride * (lanes - 1) + 1 - lanes]
    vectors = [tirx.BufferLoad(load.source, [tirx.Ramp(ramp.base + tirx.const(start, dtype) if start else ramp.base,
                                                        tirx.const(1, dtype), lanes)]) for start in starts]
    picks = []
    for lane in range(lanes):
        at = stride * lane  # offset of this lane in the span
        picks.append(at if at < (stride - 1) * lanes else (stride - 1) * lanes + at - starts[-1])
    return tirx.Shuffle(vectors, [tirx.const(p, "int32") for p in picks])


@tvm.tirx.transform.prim_func_pass(opt_level=0, name="ShuffleStridedLoads")
def shuffle_strided_loads(func, _mod, _ctx):
    """Rewrite the strided vector loads of CPU kernels marked :data:`STRIDED_LOADS_ATTR` (see the module)."""
    attrs = func.attrs
    if attrs is None or STRIDED_LOADS_ATTR not in attrs:
        return func
    target = attrs.get("target")
    if target is not None and target.kind.name != "llvm":
        return func
    return tvm_ffi.structural_map(func, (tvm.ir.expr.TensorLoad, _shuffled))


def _pipeline():
    lower, finalize_host, finalize_device = tvm.tirx.get_tir_pipeline("default")
    return tvm.transform.Sequential([lower, shuffle_strided_loads]), finalize_host, finalize_device


tvm.tirx.compilation_pipeline.register_tir_pipeline(TIR_PIPELINE, _pipeline)
