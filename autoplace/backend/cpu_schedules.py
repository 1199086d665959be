"""CPU schedules for the kernels autoplace builds: ``tvm.s_tir.dlight`` schedule rules for ``llvm`` targets.

TVM's default llvm pipeline schedules nothing (a (128, 768) @ (768, 3072) matmul took 1.36 s on two
cores), and ``dlight.cpu`` has only ``GEMV`` and ``Reduction``. These rules fill the gap the way dlight's
GPU rules do for CUDA: each looks at one PrimFunc, returns a :class:`tvm.s_tir.Schedule` when it applies
and ``None`` when it does not, and :func:`schedule_cpu_kernels` applies them in order to every kernel whose
``target`` is ``llvm`` (:func:`autoplace.backend.lower` calls it, so the profiled kernel is the shipped
kernel). A rule that raises, or whose schedule does not go through TVM's block lowering
(:func:`lowers`), is skipped for the next one, finally for the unscheduled kernel (rule ``"none"``): a
schedule never makes a build fail.

``Pool``
    max and average pooling windows: the window taps outside a vector of the output row, the padding
    and the average's divide as elementwise blocks (adaptive pools go to ``Contraction``).
``Contraction``
    one reduction block that accumulates along the output's innermost axis: matmul, batched matmul,
    conv1d/conv2d (1x1, strided, grouped, depthwise), adaptive pooling, column reductions. Register tile of
    ``ut`` rows (an output axis the vector operand does not depend on: matmul rows, conv output
    channels) by ``nv`` vectors of the output's innermost axis, accumulated in a local buffer
    (registers once unrolled) over the whole reduction, tiles in one parallel loop, the elementwise
    epilogue (bias, ReLU, GELU, residual add...) applied to the tile as it is stored. A matrix operand
    with rows 1 KiB or more apart is first copied panel by panel (packed) into contiguous memory.
``ConvLanes``
    a convolution whose output map has 16 elements a channel or fewer (4x4 and 2x2 maps), legalized as dot products
    along its input channels and taps: output channels x map positions a tile, 16 partial sums each in a register,
    added up as the tile is stored with its epilogue.
``dlight.cpu.GEMV``
    TVM's own rule for matrix-vector products that read the matrix along the reduction.
``RowReduction``
    softmax, layer / RMS norm, mean and other reductions: each block's rows in parallel, a reduction along
    the rows' innermost axes accumulated in vector lanes (``rfactor``; rows no vector divides in full vectors
    and a scalar tail), other loops left to LLVM's vectoriser.
``Injective``
    elementwise, broadcast, reshape, concatenate...: producers inlined, each remaining block's outer
    loops fused and run in parallel, its innermost loop vectorised; transposes in tiles staged
    through a local buffer.

Loops run in parallel only where a block has the work to pay for waking a second thread
(:data:`PARALLEL_MIN_WORK`, per rule); smaller kernels run on one.

Tile sizes come from the target's vector width and the loop extents (factors that divide them, so
few tiles need a predicate). :func:`cpu_target` gives an ``llvm`` target without ``mcpu`` this
machine's CPU: without it LLVM emits SSE2 only (no AVX, no FMA). :func:`cpu_legalize_map` legalizes
exp, softmax, sigmoid, SiLU, erf, GELU and tanh as polynomials that stay in vector registers (LLVM
calls ``expf`` / ``erff`` once per lane otherwise), a stride-1 convolution whose rows no vector divides
over its flattened map (``Contraction`` then tiles it as a matmul's columns), a convolution onto a 4x4 or 2x2 map
as dot products (``ConvLanes``), and a global average pool as a mean.
"""

from __future__ import annotations

import math

import tvm
import tvm_ffi
from tvm import s_tir, te, tirx, topi
from tvm.s_tir import dlight as dl
from tvm.s_tir.dlight.cpu.base import CPUScheduleRule
from tvm.target import Target

from .strided_loads import mark_strided_loads

#: The PrimFunc attribute that records which rule scheduled a kernel ("none": left unscheduled).
RULE_ATTR = "autoplace.cpu_schedule"
#: Vector registers of x86-64 by vector width (AVX-512: 32 zmm; AVX2 and SSE: 16 ymm / xmm), and how many
#: of them a register tile may use as accumulators (the rest hold the vector operand and a broadcast).
_REGISTERS = {512: 32, 256: 16, 128: 16}
_ACCUMULATORS = {512: 24, 256: 12, 128: 12}
#: Vector registers up to which a tile of narrow vectors holds at most :attr:`Contraction.NARROW_MAX_ROWS` rows:
#: AVX2's 16 (measured there). AVX-512's 32 keep 12: on the Intel Xeon f6m167 (AVX-512) the cap ran the 21
#: kernels it would change at a median 1.04-1.40x their 12-row time by tile (MobileNetV2-base's contractions 1.125x;
#: ``experiments/register_rows.py --variants default regs=32``, session 61).
NARROW_ROWS_REGISTERS = 16
#: Work below which a block runs on one thread, by rule: multiply-adds of a contraction, elements of an
#: elementwise or layout block, loop iterations of a row reduction. Waking TVM's second worker and joining it
#: costs ~4 us: a kernel of under a microsecond took 5x longer in parallel, and two threads paid off only from
#: about 6 us of single-thread work (``experiments/parallel_threshold.py``, 874 builds of 16 zoo models on the
#: Zen 3: matmuls and convolutions from 2^18 multiply-adds, elementwise blocks from 2^15 elements, row
#: reductions from 2^14 iterations; pooling windows from 2^17 output elements x taps).
PARALLEL_MIN_WORK = {"contraction": 1 << 18, "injective": 1 << 15, "reduction": 1 << 14, "pool": 1 << 17}
#: Version of the kernels these rules make; bump it when a change makes some kernel run differently. Profile
#: records carry it (``cpu_schedule``), and the cost model trains on the CPU kernels of the newest version a
#: profile has only (:func:`autoplace.cost_model.training_units`): a kernel the rules no longer make is not what a
#: build runs; a profile job marks the kernels a new version leaves as they were and times the rest.
#: 2: parallel loops only from :data:`PARALLEL_MIN_WORK` (was 4096 output elements for every rule).
#: 3: max / average pools by :class:`Pool` (were register-tiled by :class:`Contraction`).
#: 4: row reductions accumulated in vector lanes by :class:`RowReduction` (were one scalar add at a time).
#: 5: convolution rows of 9-32 with no vector divisor in one odd-width vector (were a scalar predicated tail).
#: 6: transposes read through fused reshapes tiled (attention's key transpose); an epilogue that writes past a
#:    contraction's output (a fused padding) computed at the root (per tile it left the border unwritten).
#: 7: strided vector loads of convolutions and pools lowered as contiguous loads + a shuffle
#:    (:mod:`autoplace.backend.strided_loads`; were one scalar load per lane).
#: 8: (session 34, replaced within the hour by 9) 1x1 convolutions only, flattened through an inlined reshape.
#: 9: stride-1 convolutions on rows no vector divides over their flattened map (:data:`FLATTEN_ODD_ROW_CONV`;
#:    were one odd-width vector a row, 4-29x slower) and ``adaptive_avg_pool2d`` to 1x1 as a mean (was a scalar
#:    loop, up to 7x slower): both legalized differently, so those kernels have new keys and are timed as new.
#: 10: row reductions of rows no vector width divides (a 197-key softmax, a mean over 17x17) accumulated in full
#:    vectors, the last partial one scalar (:data:`ODD_ROW_REDUCTION`; were one scalar add at a time); elementwise
#:    and pool rows longer than four vectors that no width divides (197, 73) in full vectors and a scalar tail
#:    (:data:`ODD_ROW_PARTITION`; were scalar).
#: 11: parallel loops of kernels no rule schedules (TOPI's cumsum) serial below :data:`UNSCHEDULED_PARALLEL_MIN_WORK`
#:    output elements (:data:`SERIAL_SMALL_UNSCHEDULED`; were parallel whatever the work: a 2x64 cumsum 2.9 us).
#: 12: row reductions accumulated in at most as many lanes as they take vector steps along the row, rows no width
#:    divides included (:data:`LANES_UP_TO_STEPS`, :data:`ODD_LANES_UP_TO_STEPS`: a row of 32 in 4 lanes, of 49 in
#:    4; were 16 lanes for 32, scalar for 49), and the elementwise blocks of a row-reduction kernel over rows of
#:    one vector or less vectorised along the row (:data:`SHORT_ROW_VECTORS`); an AMD Zen's kernels compiled with
#:    :data:`ZEN_LLVM_FEATURES` (LLVM no longer vectorises their scalar loops across rows with gathers and scatters;
#:    same TIR, so a job times again the kernels whose code that changes: :data:`ZEN_FEATURES_VERSION`).
#: 13: ``prefer-no-scatter`` only (version 12 also had ``prefer-no-gather``, which slowed convolutions on odd rows).
#: 14: on AVX2 (16 vector registers), a contraction tile whose vector fills half a register or less holds at most 8
#:    rows (:attr:`Contraction.NARROW_MAX_ROWS`; was 12: 96-, 192-, 384-channel convolutions on 2x2 and 4x4 maps,
#:    MobileNetV2's 1x1 ones there); AVX-512 kernels are unchanged.
#: 15: contractions of one output element a row whose reduction has one loop longer than 1 (1x1 convolutions over
#:    1x1 maps: MobileNet heads, squeeze-excitation; matmuls by one column) accumulated along the reduction in
#:    vector lanes by :class:`DotProduct` (:data:`UNIT_ROW_DOT_PRODUCTS`; were one scalar multiply-add at a time).
#: 16: convolutions whose output map has 16 elements a channel or fewer (4x4 and 2x2 maps: a ResNet's and MobileNetV2's
#:    last stages) as dot products along the reduction in 16 lanes, an output-channel x map-position tile of partial
#:    sums in registers (:data:`TINY_MAP_LANES_CONV`, :class:`ConvLanes`; were vectors of the 2- or 4-wide output row).
#: 17: on AVX2 such a convolution's outputs accumulate in one vector of 8 lanes (were 16 lanes in two registers), so a
#:    tile holds 2 output channels x 4 positions (was 1 x 4), and 4x4 maps of 2^20 multiply-adds or more are such dot
#:    products there too (:data:`ONE_VECTOR_CONV_LANES`, :data:`NARROW_WIDE_MAP_MIN_WORK`); AVX-512 kernels unchanged.
SCHEDULE_VERSION = 17
#: The loop annotation that has TVM's ``LoopPartition`` split a loop's last, partial steps off (it partitions
#: only annotated loops in the default pipeline): a loop over vectors whose last vector is partial then runs its
#: full ones without a predicate, as vectors (TVM leaves a predicated vector loop scalar).
PARTITION_HINT = "pragma_loop_partition_hint"
#: Elementwise and pool rows longer than four vectors that no vector width divides (a 197-wide attention row, a
#: 73-wide pooled map): full vectors and the partial last one scalar (:data:`PARTITION_HINT`), the loop over
#: vectors left out of the parallel loop it would be fused into; False: a predicated tail, scalar (version 9).
ODD_ROW_PARTITION = True
#: Rules whose kernels get their strided vector loads rewritten (:mod:`~autoplace.backend.strided_loads`).
STRIDED_LOAD_RULES = ("Contraction", "Pool")


# ----------------------------------------------------------------------------------------------------
# Targets
# ----------------------------------------------------------------------------------------------------

def host_cpu() -> str:
    """The LLVM name of this machine's CPU (``"znver5"``, ``"skylake-avx512"``...)."""
    return str(tvm.target.codegen.llvm_get_system_cpu())


#: LLVM tuning features every CPU kernel for an AMD Zen (``mcpu`` ``znver*``) is compiled with (schedule version 13):
#: LLVM's loop vectoriser otherwise vectorises loops TVM left scalar (a norm's rows, fully unrolled) *across* rows,
#: writing lanes a row apart with AVX-512 scatters, which Zen runs microcoded. ``experiments/llvm_scatter.py`` builds
#: every distinct kernel of the zoo and the suite (604) three ways on the Zen 5 (session 55) and times those whose code
#: differs, side by side: with ``prefer-no-scatter`` a small llama's RMS norm over 8x32 ran 5.2x faster (0.26 ->
#: 0.05 us), swin-base's patch merging 7.6x, convnext-base's convolutions on 4x4 and 2x2 maps 1.6-1.7x, none slower
#: beyond the noise (0.99x among 11 convolutions of the op families). ``prefer-no-gather`` as well (schedule version
#: 12) gained more on some (mobilenetv2's 1x1 convolutions on 1x1 maps 2.0-2.2x, vit's softmax over 2x17x17 1.6x) but
#: made convolutions whose rows no vector divides, which LLVM reads with gathers, up to 2.3x slower (a 3x3 convolution
#: over 32x29x29 38 -> 88 us, Wav2Vec-style 1D convolutions 1.3x): it is not used. Nor per kernel (session 56, commit
#: 82515cd: row reductions, elementwise kernels and convolutions onto 1x1 maps without gathers, the other convolutions
#: with them): mobilenetv2's 1x1-map convolutions ran 2.0-2.2x faster warm and alone, but 16 models built both ways
#: ran 0.99-1.02x as fast side by side (in a model those weights arrive from L3, not L1). A target whose ``mattr``
#: names the feature itself (``-prefer-no-scatter``) keeps its own choice.
ZEN_LLVM_FEATURES = ("+prefer-no-scatter",)


#: Schedule version from which a Zen's kernels are compiled with the current :data:`ZEN_LLVM_FEATURES`: a kernel timed
#: under an older one keeps its record only where :func:`gathers_and_scatters_without_zen_features` says the features
#: leave its code as it was (a profile key is the kernel's TIR, which they do not change): a kernel with scatters is
#: timed again, and one of version 12 (compiled with ``prefer-no-gather`` too) with gathers.
ZEN_FEATURES_VERSION = 13


def _zen_features(config: dict) -> list:
    """The :data:`ZEN_LLVM_FEATURES` an ``llvm`` target ``config`` (its export) lacks: none unless its ``mcpu``
    is an AMD Zen."""
    if not str(config.get("mcpu") or "").startswith("znver"):
        return []
    named = {str(a).lstrip("+-") for a in config.get("mattr") or []}
    return [f for f in ZEN_LLVM_FEATURES if f.lstrip("+-") not in named]


def cpu_target(target):
    """``target`` with this machine's CPU as ``mcpu`` when it is an ``llvm`` target that names none, and the
    :data:`ZEN_LLVM_FEATURES` when that CPU is an AMD Zen.

    ``Target("llvm")`` compiles for generic x86-64 (SSE2, no FMA): scheduled kernels then run 4 lanes
    wide without fused multiply-adds. A target that names its ``mcpu`` (cross-compiling) keeps it.
    """
    if target is None:
        return None
    target = target if isinstance(target, Target) else Target(target)
    if target.kind.name != "llvm":
        return target
    config = {k: v for k, v in dict(target.export()).items() if k not in ("keys", "tag", "host")}
    if not target.attrs.get("mcpu"):
        config["mcpu"] = host_cpu()
    extra = _zen_features(config)
    if target.attrs.get("mcpu") and not extra:
        return target
    if extra:
        config["mattr"] = [str(a) for a in config.get("mattr") or []] + extra
    if target.host is not None:
        return Target(config, host=target.host)
    return Target(config)


def gathers_and_scatters_without_zen_features(func: tirx.PrimFunc) -> tuple[bool, bool]:
    """``(gathers, scatters)``: whether LLVM's build of the scheduled CPU kernel ``func`` without
    :data:`ZEN_LLVM_FEATURES` has vector gathers, scatters. Only a kernel with scatters compiles differently with
    ``prefer-no-scatter`` (LLVM's cost model then vectorises its loops another way or not at all); with
    ``prefer-no-gather`` as well (schedule version 12), 25 of the 27 kernels of the zoo and the suite whose code changed
    had one or the other, the other two (mobilenetv2 convolutions) ran within 2% of their old times
    (``experiments/llvm_scatter.py``). ``(False, False)`` for a kernel whose target is no Zen's. Compiles the kernel
    (about 0.1 s)."""
    target = func.attrs.get("target") if func.attrs else None
    if target is None or target.kind.name != "llvm" or not str(target.attrs.get("mcpu") or "").startswith("znver"):
        return False, False
    from .strided_loads import TIR_PIPELINE

    config = {k: v for k, v in dict(target.export()).items() if k not in ("keys", "tag", "host")}
    config["mattr"] = [str(a) for a in config.get("mattr") or [] if str(a) not in ZEN_LLVM_FEATURES]
    main = func.with_attr("global_symbol", "main").without_attr("target")
    asm = tvm.tirx.build(tvm.IRModule({"main": main}), target=Target(config), pipeline=TIR_PIPELINE).inspect_source("asm")
    ops = {line.split()[0] for line in asm.splitlines() if line.startswith("\t") and not line.startswith("\t.")}
    return (any(op.startswith(("vgather", "vpgather")) for op in ops),
            any(op.startswith(("vscatter", "vpscatter")) for op in ops))


def vector_bits(target: Target) -> int:
    """SIMD register width the target compiles for: 512 with AVX-512, 256 with AVX/AVX2, else 128 (SSE, Neon,
    generic x86-64).

    Read from the CPU's features: TVM 0.27's ``llvm_get_vector_width`` answers 512 for every x86 CPU
    (``znver3``, ``haswell``, ``x86-64`` alike), and an AVX2 kernel tiled for 512-bit registers spills
    (a (128,768)@(768,3072) matmul ran 2.6x slower on a Zen 3).
    """
    if target.kind.name != "llvm":
        return 128
    if not target.attrs.get("mcpu"):
        return 128
    try:
        features = set(tvm.target.codegen.llvm_get_cpu_features(target))
    except Exception:  # an LLVM that does not know the CPU
        return 128
    if "avx512f" in features:
        return 512
    return 256 if "avx" in features else 128


# ----------------------------------------------------------------------------------------------------
# Vectorisable math for the CPU
# ----------------------------------------------------------------------------------------------------
# LLVM has no vector exp or erf: ``llvm.exp.v16f32`` becomes 16 calls of ``expf`` and TVM lowers erf to
# ``erff``, one call per lane. The legalizations below compute them with polynomials the vectoriser
# keeps in SIMD registers: exp as Cephes' expf (range reduction by ln 2 in two parts, degree-6
# polynomial, exact 2^n by exponent bits; about 1 ulp), erf and tanh as TVM's ``fast_erf`` /
# ``fast_tanh`` (relative error below 5e-7 measured). Only float32 calls on an llvm device use them.

_LOG2E = 1.44269504088896341
_LN2_HI, _LN2_LO = 0.693359375, -2.12194440e-4
_EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1,
             5.0000001201e-1)
_EXP_MAX, _EXP_MIN = 88.72283905206835, -87.33654475055310  # exp overflows / leaves the normal range


def exp_f32(x):
    """``exp(x)`` for a float32 TIR expression, as a polynomial the vectoriser keeps in registers.

    Intermediate values are bound with ``Let`` so that the expression stays a straight line (a plain
    expression tree would repeat ``x`` and the range reduction dozens of times).
    """
    f32, i32 = "float32", "int32"

    def c(v):
        return tirx.const(v, f32)

    xv, nv, rv = tirx.Var("exp_x", f32), tirx.Var("exp_n", f32), tirx.Var("exp_r", f32)
    p = c(_EXP_POLY[0])
    for coef in _EXP_POLY[1:]:
        p = p * rv + c(coef)
    y = p * rv * rv + rv + c(1.0)
    # y * 2^n with n in [-126, 128], as 2^a * 2^b (a + b = n, both normal) from their exponent bits.
    ni = nv.astype(i32)
    half = tirx.shift_right(ni, tirx.const(1, i32))

    def pow2(e):
        return tirx.reinterpret(f32, tirx.shift_left(e + tirx.const(127, i32), tirx.const(23, i32)))

    y = y * pow2(half) * pow2(ni - half)
    y = tirx.Select(xv > c(_EXP_MAX), c(float("inf")), y)
    y = tirx.Select(xv < c(_EXP_MIN), c(0.0), y)
    y = tirx.Select(tirx.isnan(xv), xv, y)
    # r = x - n ln2 (in two parts, exact), n = round(x / ln2), x clamped to where 2^n is a normal number.
    xc = tirx.max(tirx.min(xv, c(_EXP_MAX)), c(_EXP_MIN))
    body = tirx.Let(rv, xc - nv * c(_LN2_HI) - nv * c(_LN2_LO), y)
    body = tirx.Let(nv, tirx.floor(xc * c(_LOG2E) + c(0.5)), body)
    return tirx.Let(xv, x, body)


def _te_exp(x):
    return te.compute(x.shape, lambda *i: exp_f32(x(*i)), name="compute")


def _te_sigmoid(x):
    one = tirx.const(1.0, "float32")
    return te.compute(x.shape, lambda *i: one / (one + exp_f32(-x(*i))), name="compute")


def _te_silu(x):
    one = tirx.const(1.0, "float32")
    return te.compute(x.shape, lambda *i: x(*i) * (one / (one + exp_f32(-x(*i)))), name="T_multiply")


def _te_gelu(x):
    half = tirx.const(0.5, "float32")
    erf = topi.fast_erf(topi.multiply(x, tirx.const(0.5**0.5, "float32")))
    return topi.multiply(x, topi.add(half, topi.multiply(erf, half)))


def _te_integer_power(x, exponent: int):
    """``x ** exponent`` as multiplications (``topi.power`` calls ``powf`` once per element, ~15x slower)."""

    def power(value):
        out = value
        for _ in range(exponent - 1):
            out = out * value
        return out

    return te.compute(x.shape, lambda *i: power(x(*i)), name="T_power")


#: Constant exponents :func:`cpu_legalize_map` computes by multiplication.
_MULTIPLIED_EXPONENTS = (1, 2, 3, 4)


def _multiplied_exponent(expr) -> int | None:
    """The exponent of ``power(x, expr)`` when ``expr`` is a scalar constant in :data:`_MULTIPLIED_EXPONENTS`."""
    if not isinstance(expr, tvm.ir.Constant) or len(expr.ty.shape) != 0:
        return None
    value = float(expr.value.numpy())
    return int(value) if value in _MULTIPLIED_EXPONENTS else None


def _te_gelu_tanh(x):
    f32 = "float32"
    inner = topi.multiply(tirx.const((2 / 3.141592653589793) ** 0.5, f32),
                          topi.add(x, topi.multiply(tirx.const(0.044715, f32), _te_integer_power(x, 3))))
    half_x = topi.multiply(tirx.const(0.5, f32), x)
    return topi.multiply(half_x, topi.add(tirx.const(1.0, f32), topi.fast_tanh(inner)))


def _te_softmax(x, axis):
    """``topi.nn.softmax`` with :func:`exp_f32` (same four blocks: max, exp, sum, normalise)."""
    shape = x.shape
    axis = axis + len(shape) if axis < 0 else axis
    k1 = te.reduce_axis((0, shape[axis]), name="k")
    k2 = te.reduce_axis((0, shape[axis]), name="k")
    reduced = tuple(d for i, d in enumerate(shape) if i != axis)

    def full(idx, k):
        return idx[:axis] + (k,) + idx[axis:]

    def rest(idx):
        return tuple(v for i, v in enumerate(idx) if i != axis)

    maxelem = te.compute(reduced, lambda *i: te.max(x[full(i, k1)], axis=k1), name="T_softmax_maxelem")
    exp = te.compute(shape, lambda *i: exp_f32(x[i] - maxelem[rest(i)]), name="T_softmax_exp")
    expsum = te.compute(reduced, lambda *i: te.sum(exp[full(i, k2)], axis=k2), name="T_softmax_expsum")
    return te.compute(shape, lambda *i: exp[i] / expsum[rest(i)], name="T_softmax_norm", attrs={"axis": axis})


#: Legalize a stride-1 convolution whose output rows no vector divides (17, 19, 38...) over its flattened map
#: (:func:`_te_conv2d_flat`, schedule version 9); False: TVM's ``conv2d_nchw``, as before
#: (``experiments/conv_rows.py`` compares the two).
FLATTEN_ODD_ROW_CONV = True
#: Input channels below which the flattened form is not used (a 1x1 3 -> 64 on 17x17 ran 8.7 us against 5.5: the
#: padded copy of the input costs more than the few multiply-adds it speeds up).
FLATTEN_MIN_CHANNELS = 16
#: The flattened output is computed in whole vectors of up to this many float32 lanes (AVX-512's; a multiple of
#: AVX2's 8).
FLAT_LANES = 16


def odd_conv_row(width: int) -> bool:
    """Whether a convolution's output row of ``width`` has no divisor from 4 to 16 and is longer than 16: no
    vector of 4 to 16 lanes tiles it, so :class:`Contraction` runs it as one odd-width vector or a scalar tail
    (a 1x1 192->192 convolution on 17x17 at 3 GMAC/s, a 3x3 one at 6)."""
    return width > 16 and not any(width % d == 0 for d in range(4, 17))


def _padding4(padding) -> tuple[int, int, int, int]:
    """``(top, left, bottom, right)`` of a conv2d's ``padding`` attribute (1, 2 or 4 values)."""
    pad = [int(v) for v in padding]
    if len(pad) == 1:
        return (pad[0],) * 4
    if len(pad) == 2:
        return (pad[0], pad[1], pad[0], pad[1])
    return tuple(pad)


def _static_shape(expr) -> list | None:
    """The shape of a Relax tensor expression as ints, or None when symbolic or unknown."""
    try:
        return [int(v) for v in expr.ty.shape]
    except (TypeError, AttributeError):
        return None


def _flattenable_conv(call) -> bool:
    """A float32 NCHW / OIHW conv2d with stride 1, dilation 1, one group, static shapes, at least
    :data:`FLATTEN_MIN_CHANNELS` input channels, and output rows :func:`odd_conv_row` says no vector tiles."""
    attrs = call.attrs
    data, kernel = call.args
    x_shape, w_shape = _static_shape(data), _static_shape(kernel)
    if x_shape is None or w_shape is None or len(x_shape) != 4 or len(w_shape) != 4:
        return False
    _, left, _, right = _padding4(attrs.padding)
    return (str(attrs.data_layout) == "NCHW" and str(attrs.kernel_layout) == "OIHW"
            and str(attrs.out_layout) == "NCHW" and int(attrs.groups) == 1
            and [int(v) for v in attrs.strides] == [1, 1] and [int(v) for v in attrs.dilation] == [1, 1]
            and str(data.ty.dtype) == str(kernel.ty.dtype) == "float32"
            and str(attrs.out_dtype) in ("", "None", "void", "float32") and x_shape[1] >= FLATTEN_MIN_CHANNELS
            and odd_conv_row(x_shape[3] + left + right - w_shape[3] + 1))


def _te_conv2d_flat(data, kernel, padding):
    """A stride-1 convolution over its flattened padded map, in whole vectors.

    The padded input ``(C, H + top + bottom, W + left + right)`` is copied flat (``pad_temp``, zeros around and
    after it); output ``f`` of a channel is ``sum over c, dy, dx of pad_temp[c, f + dy * Wp + dx] * w[o, c, dy, dx]``,
    row ``y`` of the output being ``f`` in ``[y * Wp, y * Wp + Wo)`` (the ``Wp - Wo`` columns between rows are
    computed and dropped, 2 of 19 for a 3x3 on 17x17). So :class:`Contraction` tiles ``f``, a multiple of
    :data:`FLAT_LANES`, as it does a matmul's columns: a 1x1 192->192 on 17x17 ran 25x faster than in rows of 17,
    a 3x3 one 11x (``experiments/conv_rows.py``, Xeon f6m207)."""
    n, c_in, h, w = (int(v) for v in data.shape)
    c_out, _, kh, kw = (int(v) for v in kernel.shape)
    top, left, bottom, right = padding
    wp = w + left + right
    ho, wo = h + top + bottom - kh + 1, wp - kw + 1
    length = -(-ho * wp // FLAT_LANES) * FLAT_LANES
    zero = tirx.const(0.0, data.dtype)

    def padded(b, c, i):
        y, x = i // wp - top, i % wp - left
        inside = tirx.all(y >= 0, y < h, x >= 0, x < w)
        return tirx.if_then_else(inside, data[b, c, tirx.max(tirx.min(y, h - 1), 0), tirx.max(tirx.min(x, w - 1), 0)],
                                 zero)

    flat = te.compute((n, c_in, length + (kh - 1) * wp + kw - 1), padded, name="pad_temp")
    rc = te.reduce_axis((0, c_in), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    out = te.compute((n, c_out, length), lambda b, o, f: te.sum(
        flat[b, rc, f + ry * wp + rx] * kernel[o, rc, ry, rx], axis=[rc, ry, rx]), name="conv2d_flat")
    return te.compute((n, c_out, ho, wo), lambda b, o, y, x: out[b, o, y * wp + x], name="conv2d_nchw")


#: Legalize a convolution whose output map has :data:`TINY_MAP_MAX_OUTPUTS` elements a channel or fewer (the 4x4 and
#: 2x2 maps of a ResNet's or MobileNetV2's last stages) as dot products along its reduction (:func:`_te_conv2d_lanes`, schedule
#: version 16): :class:`ConvLanes` accumulates each output channel and map position in :func:`conv_lanes` lanes over
#: the input channels and taps, where :class:`Contraction` (vectors along the output row) used 2 or 4 of AVX-512's 16;
#: False: as before (``experiments/tiny_map_convs.py`` compares the two).
TINY_MAP_LANES_CONV = True
#: Output elements a channel up to which a convolution is a dot product per output (4x4, 2x2 and smaller maps; an
#: 8x8 map's ran 0.3x as fast as the row vectors in session 67's prototype on the Zen 5).
TINY_MAP_MAX_OUTPUTS = 16
#: Output elements a channel up to which a reduction of :data:`CONV_LANES_MIN_STEPS` vector steps is enough; a larger
#: map needs :data:`WIDE_MAP_MIN_STEPS` (on the Zen 5, 4x4 maps reducing over 64 or 96 elements, MobileNetV2's
#: expansions, ran 0.93-1.01x as fast as the row vectors, over 192-576 1.08-2.0x; 2x2 maps over 64-1152 1.5-4.4x).
TINY_MAP_SHORT_OUTPUTS = 4
WIDE_MAP_MIN_STEPS = 8
#: Multiply-adds a convolution onto a map of more than :data:`TINY_MAP_SHORT_OUTPUTS` needs at least: a small ResNet's
#: 16 -> 16 3x3 on 4x4 (37K, 1.5 us) ran 0.68x as fast as the row vectors, its copy of the input a large share.
WIDE_MAP_MIN_WORK = 1 << 17
#: Vector bits a machine needs for :class:`ConvLanes` on maps of more than :data:`TINY_MAP_SHORT_OUTPUTS` whatever
#: their work: AVX2 code (``mcpu=znver3`` on the Zen 5, a stand-in for its register count, not an AVX2 machine's
#: timings) ran 4x4 maps' stride-1 convolutions 0.64-0.95x as fast as the row vectors (a tile of 1 channel x 4
#: positions in 16 registers), 2x2 maps 1.5-3.0x (``experiments/tiny_map_convs.py --mcpu znver3``).
WIDE_MAP_MIN_BITS = 512
#: Multiply-adds a convolution onto a map of more than :data:`TINY_MAP_SHORT_OUTPUTS` needs on narrower vectors
#: whose outputs accumulate in one vector (:data:`ONE_VECTOR_CONV_LANES`): on the Zen 3 (AVX2, 2 x 4 tiles) the 4x4
#: maps' convolutions of 2^20 or more ran 1.07-2.29x as fast as the row vectors (19 kernels, median 1.30x), smaller
#: ones 0.56-1.59x (48- and 64-channel 3x3s the slowest).
NARROW_WIDE_MAP_MIN_WORK = 1 << 20
#: Lanes each output accumulates in: AVX-512's 16 float32 (on AVX2 :data:`NARROW_CONV_LANES`, :func:`conv_lanes`).
#: The reduction (input channels x taps) must be a multiple of them.
CONV_LANES = 16
#: Vector steps along the reduction an output needs at least (a shorter one adds its lanes up for little work).
CONV_LANES_MIN_STEPS = 4
#: On AVX2 (8 float32 lanes, 16 registers) an output accumulates in one vector of :data:`NARROW_CONV_LANES` lanes,
#: so that a :class:`ConvLanes` tile holds 2 output channels x 4 positions (schedule version 17); False: in
#: :data:`CONV_LANES` lanes, two registers a vector, a tile of 1 channel x 4 positions (version 16).
ONE_VECTOR_CONV_LANES = True
NARROW_CONV_LANES = 8


def conv_lanes(bits: int) -> int:
    """Lanes each output of a :class:`ConvLanes` convolution accumulates in on ``bits``-wide vectors."""
    if ONE_VECTOR_CONV_LANES and bits // 32 == NARROW_CONV_LANES:
        return NARROW_CONV_LANES
    return CONV_LANES


def _conv_out_map(call) -> tuple[int, int] | None:
    """The output map ``(Ho, Wo)`` of a conv2d call with static shapes, or None."""
    data, kernel = call.args
    x_shape, w_shape = _static_shape(data), _static_shape(kernel)
    if x_shape is None or w_shape is None or len(x_shape) != 4 or len(w_shape) != 4:
        return None
    top, left, bottom, right = _padding4(call.attrs.padding)
    sy, sx = (int(v) for v in call.attrs.strides)
    return ((x_shape[2] + top + bottom - w_shape[2]) // sy + 1, (x_shape[3] + left + right - w_shape[3]) // sx + 1)


def _tiny_map_conv(call) -> bool:
    """A float32 NCHW / OIHW conv2d with one group, dilation 1 and static shapes whose output map has 2 to
    :data:`TINY_MAP_MAX_OUTPUTS` elements a channel and whose reduction (input channels x taps) is a multiple of
    :func:`conv_lanes` at least :data:`CONV_LANES_MIN_STEPS` times (:data:`WIDE_MAP_MIN_STEPS` times, and enough
    work, for a map of more than :data:`TINY_MAP_SHORT_OUTPUTS`: :func:`conv_lanes_apply`; :data:`TINY_MAP_LANES_CONV`)."""
    attrs = call.attrs
    data, kernel = call.args
    out_map = _conv_out_map(call)
    if out_map is None:
        return False
    return (str(attrs.data_layout) == "NCHW" and str(attrs.kernel_layout) == "OIHW"
            and str(attrs.out_layout) == "NCHW" and int(attrs.groups) == 1
            and [int(v) for v in attrs.dilation] == [1, 1]
            and str(data.ty.dtype) == str(kernel.ty.dtype) == "float32"
            and str(attrs.out_dtype) in ("", "None", "void", "float32")
            and conv_lanes_apply(math.prod(_static_shape(kernel)[1:]), out_map[0] * out_map[1],
                                 _static_shape(kernel)[0], _call_vector_bits(call)))


def conv_lanes_apply(reduction: int, positions: int, c_out: int, bits: int, lanes: int | None = None) -> bool:
    """Whether a one-group float32 convolution onto ``c_out`` channels of ``positions`` elements, reducing over
    ``reduction`` elements an output (input channels x taps), is :func:`_te_conv2d_lanes`'s (:func:`_tiny_map_conv`)
    on ``bits``-wide vectors, its outputs accumulating in ``lanes`` (default :func:`conv_lanes`): maps of more than
    :data:`TINY_MAP_SHORT_OUTPUTS` with :data:`WIDE_MAP_MIN_WORK` multiply-adds on :data:`WIDE_MAP_MIN_BITS`, with
    :data:`NARROW_WIDE_MAP_MIN_WORK` on narrower vectors that hold an output's ``lanes``, else not at all."""
    lanes = lanes or conv_lanes(bits)
    wide = positions > TINY_MAP_SHORT_OUTPUTS
    steps = WIDE_MAP_MIN_STEPS if wide else CONV_LANES_MIN_STEPS
    if bits >= WIDE_MAP_MIN_BITS:
        wide_work = WIDE_MAP_MIN_WORK
    else:  # narrower vectors: only outputs in one vector each, and long enough
        wide_work = NARROW_WIDE_MAP_MIN_WORK if lanes == max(bits // 32, 1) else math.inf
    return (TINY_MAP_LANES_CONV and 2 <= positions <= TINY_MAP_MAX_OUTPUTS
            and reduction % lanes == 0 and reduction // lanes >= steps
            and (not wide or c_out * positions * reduction >= wide_work))


def conv_lanes_tile(c_out: int, positions: int, bits: int, lanes: int | None = None) -> tuple[int, int]:
    """``(uo, up)``: output channels and map positions of a :class:`ConvLanes` tile on ``bits``-wide vectors, each
    output's partial sums in ``lanes`` (default :func:`conv_lanes`). All positions up to 4; the most channels up to
    4 that divide ``c_out`` whose ``uo x up`` vectors of partial sums fit the accumulator budget, with one weight
    vector per channel, an input vector and one register to spare beside them (AVX-512: 4 x 4 in 16 of 32 registers;
    AVX2: 2 x 4 in one register a vector, 1 x 4 in two; 3 x 4, all 16 registers, ran 48-channel convolutions on
    the Zen 3 at 0.37-0.74x of 1 x 4 in two)."""
    max_lanes = max(bits // 32, 1)
    regs = -(-(lanes or conv_lanes(bits)) // max_lanes)
    budget, registers = _ACCUMULATORS.get(bits, 12), _REGISTERS.get(bits, 16)
    up = max(_divisors(positions, 4))
    fits = [d for d in _divisors(c_out, 4)
            if d * up * regs <= budget and (d * up + d + 1) * regs < registers]
    return max(fits or [1]), up


def _te_conv2d_lanes(data, kernel, strides, padding, lanes: int = CONV_LANES):
    """A convolution as one dot product per output element, along its reduction in ``lanes`` lanes.

    The reduction runs over ``k = (c, dy, dx)``, along which the OIHW weights of an output channel lie contiguous;
    the input is copied once a call into ``im2col[b, y, x, k]`` (the padded input at the taps of output ``(y, x)``:
    a few KiB for a 2x2 map), contiguous along ``k`` too. ``conv2d_lanes`` keeps ``lanes`` partial sums per
    output (lane ``l`` sums ``k = l, l + L, ...``); ``conv2d_nchw`` adds them up. :class:`ConvLanes` tiles the output
    channels by the map positions, every partial sum in a register."""
    n, c_in, h, w = (int(v) for v in data.shape)
    c_out, _, kh, kw = (int(v) for v in kernel.shape)
    top, left, bottom, right = padding
    sy, sx = strides
    ho, wo = (h + top + bottom - kh) // sy + 1, (w + left + right - kw) // sx + 1
    taps = kh * kw
    source = data
    if any(padding):
        zero = tirx.const(0.0, data.dtype)
        source = te.compute(
            (n, c_in, h + top + bottom, w + left + right),
            lambda b, c, i, j: tirx.if_then_else(
                tirx.all(i >= top, i < h + top, j >= left, j < w + left),
                data[b, c, tirx.max(tirx.min(i - top, h - 1), 0), tirx.max(tirx.min(j - left, w - 1), 0)], zero),
            name="pad_temp")
    im2col = te.compute((n, ho, wo, c_in * taps), lambda b, y, x, k: source[
        b, k // taps, y * sy + k % taps // kw, x * sx + k % kw], name="im2col")
    ko = te.reduce_axis((0, c_in * taps // lanes), name="ko")

    def weight(o, k):
        return kernel[o, k // taps, k % taps // kw, k % kw]

    partial = te.compute((n, c_out, ho, wo, lanes), lambda b, o, y, x, l: te.sum(
        weight(o, ko * lanes + l) * im2col[b, y, x, ko * lanes + l], axis=ko), name="conv2d_lanes")
    rl = te.reduce_axis((0, lanes), name="rl")
    return te.compute((n, c_out, ho, wo), lambda b, o, y, x: te.sum(partial[b, o, y, x, rl], axis=rl),
                      name="conv2d_nchw")


#: Legalize ``adaptive_avg_pool2d`` to 1x1 as a mean (schedule version 9); False: TVM's scalar adaptive pool, as
#: before (``experiments/conv_rows.py`` compares the two).
GLOBAL_POOL_AS_MEAN = True


def _global_avg_pool(call) -> bool:
    """``adaptive_avg_pool2d`` to one output per channel (``nn.AdaptiveAvgPool2d(1)``), float32, NCHW, static."""
    attrs = call.attrs
    size = attrs.output_size
    shape = _static_shape(call.args[0])
    return (shape is not None and size is not None and [int(v) for v in size] in ([1], [1, 1])
            and str(attrs.layout) == "NCHW" and str(attrs.out_layout) == "NCHW" and len(shape) == 4
            and str(call.args[0].ty.dtype) == "float32")


def _te_global_avg_pool(x):
    """The mean over each channel's map, as ``x.mean((2, 3), keepdim=True)`` computes it (a row reduction
    :class:`RowReduction` vectorises; TVM's adaptive pool is a scalar loop on one thread, up to 7x slower)."""
    h, w = int(x.shape[2]), int(x.shape[3])
    total = topi.sum(x, axis=[2, 3], keepdims=True)
    return topi.divide(total, tirx.const(float(h * w), "float32"))


def _call_target(call):
    """The target of the vdevice a call's output (else its first argument) is on, or None."""
    vdevice = getattr(call.ty, "vdevice", None)
    if vdevice is None and call.args:
        vdevice = getattr(call.args[0].ty, "vdevice", None)
    return None if vdevice is None else vdevice.target


def _call_vector_bits(call) -> int:
    """The vector width of the CPU a call runs on: its vdevice's llvm target, else this host's."""
    return vector_bits(cpu_target(_call_target(call) or "llvm"))


def _call_kind(call) -> str | None:
    target = _call_target(call)
    return None if target is None else str(target.kind.name)


def cpu_legalize_map(default_kind: str | None = None) -> dict:
    """``LegalizeOps`` overrides: exp, softmax, sigmoid, SiLU, erf, GELU, tanh as vectorisable math,
    ``power`` with a constant exponent of 1 to 4 (GPT-2's ``x ** 3``, RMS norm's ``x ** 2``) as multiplications,
    a stride-1 convolution on rows no vector divides over its flattened map (:func:`_flattenable_conv`), and
    an adaptive average pool to 1x1 as a mean (:func:`_global_avg_pool`).

    A call is legalized this way when its device is an llvm one (or it has none and ``default_kind``
    is ``"llvm"``, a single-device CPU build) and it computes float32; otherwise TVM's own
    legalization is used. The exponent must be a Relax constant (the frontend keeps scalar operands
    of elementwise ops inline for this, see :func:`autoplace.frontend.normalize`).
    """

    def legalized(op_name, applies, make, hint, operands=lambda call: call.args):
        """Legalize a call ``applies(call)`` accepts as ``make(call)(*operands(call))`` on llvm devices; TVM's
        legalization otherwise."""
        default = tvm.ir.Op.get(op_name).get_attr("FLegalize")

        def legalize(bb, call):
            kind = _call_kind(call) or default_kind
            if kind != "llvm" or not applies(call):
                return default(bb, call)
            return bb.call_te(make(call), *operands(call), primfunc_name_hint=hint)

        return legalize

    def float32(call) -> bool:
        return str(getattr(call.args[0].ty, "dtype", "")) == "float32"

    def override(op_name, make, hint):  # elementwise math of one float32 operand
        return legalized(op_name, float32, make, hint)

    def power_of(call):
        exponent = _multiplied_exponent(call.args[1])
        return lambda x: _te_integer_power(x, exponent)

    shaped = {
        "relax.power": legalized(
            "relax.power", lambda call: float32(call) and _multiplied_exponent(call.args[1]) is not None,
            power_of, "power",
            operands=lambda call: call.args[:1]),  # the exponent is unrolled, not an operand
    }
    if GLOBAL_POOL_AS_MEAN:
        shaped["relax.nn.adaptive_avg_pool2d"] = legalized("relax.nn.adaptive_avg_pool2d", _global_avg_pool,
                                                           lambda call: _te_global_avg_pool, "adaptive_pool_avg")
    if FLATTEN_ODD_ROW_CONV or TINY_MAP_LANES_CONV:
        def lanes_or_flat(call):
            if TINY_MAP_LANES_CONV and _tiny_map_conv(call):
                strides = tuple(int(v) for v in call.attrs.strides)
                lanes = conv_lanes(_call_vector_bits(call))
                return lambda data, kernel: _te_conv2d_lanes(data, kernel, strides, _padding4(call.attrs.padding),
                                                             lanes)
            return lambda data, kernel: _te_conv2d_flat(data, kernel, _padding4(call.attrs.padding))

        shaped["relax.nn.conv2d"] = legalized(
            "relax.nn.conv2d",
            lambda call: ((TINY_MAP_LANES_CONV and _tiny_map_conv(call))
                          or (FLATTEN_ODD_ROW_CONV and _flattenable_conv(call))),
            lanes_or_flat, "conv2d")
    return {
        **shaped,
        "relax.exp": override("relax.exp", lambda call: _te_exp, "exp"),
        "relax.sigmoid": override("relax.sigmoid", lambda call: _te_sigmoid, "sigmoid"),
        "relax.nn.silu": override("relax.nn.silu", lambda call: _te_silu, "silu"),
        "relax.erf": override("relax.erf", lambda call: topi.fast_erf, "erf"),
        "relax.tanh": override("relax.tanh", lambda call: topi.fast_tanh, "tanh"),
        "relax.nn.gelu": override("relax.nn.gelu", lambda call: _te_gelu, "gelu"),
        "relax.nn.gelu_tanh": override("relax.nn.gelu_tanh", lambda call: _te_gelu_tanh, "gelu_tanh"),
        "relax.nn.softmax": override(
            "relax.nn.softmax", lambda call: (lambda x: _te_softmax(x, int(call.attrs.axis))), "softmax"
        ),
    }


# ----------------------------------------------------------------------------------------------------
# IR helpers
# ----------------------------------------------------------------------------------------------------

def _root(sch: s_tir.Schedule):
    return sch.get_sblock(sch.mod["main"].body.block.name_hint)


def _vars_in(expr) -> set:
    found = set()
    tvm_ffi.structural_walk(expr, (tirx.Var, found.add), order="post")
    return found


def _has_if_then_else(stmt) -> bool:
    found = []

    def visit(node):
        if isinstance(node.op, tvm.ir.Op) and node.op.name.endswith("if_then_else"):
            found.append(node)

    tvm_ffi.structural_walk(stmt, (tvm.ir.Call, visit), order="post")
    return bool(found)


def _extent(sch: s_tir.Schedule, loop) -> int | None:
    ext = sch.get(loop).extent
    return int(ext.value) if isinstance(ext, tirx.IntImm) else None


def _trivially_bound(sch: s_tir.Schedule, block) -> bool:
    """One loop per block iterator, same extents, in order (what legalized kernels have)."""
    loops = sch.get_loops(block)
    iters = sch.get(block).iter_vars
    if len(loops) != len(iters):
        return False
    for loop, iv in zip(loops, iters):
        ext = _extent(sch, loop)
        dom = iv.dom.extent
        if ext is None or not isinstance(dom, tirx.IntImm) or ext != int(dom.value):
            return False
    return True


def _is_spatial(block_stmt) -> bool:
    return all(iv.iter_type == tirx.IterVar.DataPar for iv in block_stmt.iter_vars)


def _is_reduction(block_stmt) -> bool:
    kinds = {iv.iter_type for iv in block_stmt.iter_vars}
    return tirx.IterVar.CommReduce in kinds and kinds <= {tirx.IterVar.DataPar, tirx.IterVar.CommReduce}


def _divisors(n: int, limit: int) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def _lanes(extent: int, max_lanes: int) -> int:
    """Vector lanes for a loop: the widest power-of-two width (>= 4) that divides it; else the whole
    loop when it is at most four registers long (LLVM splits an odd-width vector into registers); else
    the widest divisor up to a register (10 for 250); else the full width with a predicated tail,
    which TVM does not vectorise (its loop stays scalar) unless the loop over vectors carries
    :data:`PARTITION_HINT` (:data:`ODD_ROW_PARTITION`: full vectors, then the last partial one scalar)."""
    lanes = max_lanes
    while lanes >= 4:
        if extent % lanes == 0:
            return lanes
        lanes //= 2
    if extent <= 4 * max_lanes:
        return extent
    widest = max(d for d in range(1, max_lanes + 1) if extent % d == 0)
    return widest if widest >= 4 else max_lanes


def _partition_partial_vector(sch: s_tir.Schedule, vectors, extent: int, width: int) -> bool:
    """Mark ``vectors``, the loop over ``width``-lane vectors of a row of ``extent``, with :data:`PARTITION_HINT`
    when its last vector is partial (:data:`ODD_ROW_PARTITION`); whether it did."""
    if not extent % width or not ODD_ROW_PARTITION:
        return False
    sch.annotate(vectors, PARTITION_HINT, 1)
    return True


def _vectorize_inner(sch: s_tir.Schedule, loop, lanes: int) -> None:
    """Vectorise ``loop`` (splitting it to ``lanes`` first when longer); length-1 loops are left alone."""
    ext = _extent(sch, loop)
    if ext is None or ext < 2:
        return
    width = _lanes(ext, lanes)
    if width < 2:
        return
    if ext > width:
        loop = sch.split(loop, factors=[None, width])[-1]
    sch.vectorize(loop)


def _parallel_outer(sch: s_tir.Schedule, loops: list, work: int, rule: str) -> None:
    """Fuse ``loops`` and make the fused loop parallel when the block has enough work for two threads
    (:data:`PARALLEL_MIN_WORK` of ``rule``)."""
    if not loops:
        return
    fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    if work >= PARALLEL_MIN_WORK[rule] and (_extent(sch, fused) or 0) > 1:
        sch.parallel(fused)


#: Recognise transposes read through the div/mod indices of fused reshapes (schedule version 6); False: only
#: plain ``in[..., j, i]`` reads, as before (``experiments/transpose_chains.py`` compares the two).
TRANSPOSE_THROUGH_RESHAPES = True
#: Elements below which such a transpose stays a vectorised copy.
TRANSPOSE_MIN_ELEMENTS = 1 << 13


def _transpose_axes(sch: s_tir.Schedule, block):
    """``(o, w, read index, plain)`` when the block writes along loop ``o`` but reads some input along loop ``w``
    (a transpose: ``out[..., i, j] = in[..., j, i]``), else None; ``plain``: the read's last index is ``w``
    itself (not found only after simplifying it)."""
    stmt = sch.get(block)
    if len(stmt.writes) != 1 or not _trivially_bound(sch, block):
        return None
    iters = [iv.var for iv in stmt.iter_vars]
    if not len(stmt.writes[0].region):
        return None
    out_last = stmt.writes[0].region[-1].min
    if not isinstance(out_last, tirx.Var):
        return None
    # A chain of fused reshapes and transposes reads through div/mod index expressions
    # (``in[(v2 // 128 + v1) // 64 ..., ...]``): simplified over the block's iterator ranges, they are the
    # plain ``in[s, h * 64 + d]`` of a transpose.
    analyzer = tvm.sym.Analyzer()
    for iv in stmt.iter_vars:
        analyzer.bind(iv.var, iv.dom)
    for index, rd in enumerate(stmt.reads):
        if not len(rd.region):
            continue
        region = [analyzer.simplify(rng.min) if TRANSPOSE_THROUGH_RESHAPES else rng.min for rng in rd.region]
        last = region[-1]
        if not TRANSPOSE_THROUGH_RESHAPES and not isinstance(last, tirx.Var):
            continue
        if any(x.same_as(out_last) for x in _vars_in(last)):
            continue
        # The iterator the read runs along contiguously: the last index grows by one with it.
        w_var = next((v for v in iters if any(x.same_as(v) for x in _vars_in(last))
                      and _is_one((tvm.sym.detect_linear_equation(last, [v]) or [None])[0])), None)
        if w_var is None:
            continue
        if any(x.same_as(out_last) for idx in region[:-1] for x in _vars_in(idx)):
            loops = sch.get_loops(block)
            o = next((lp for lp, v in zip(loops, iters) if v.same_as(out_last)), None)
            w = next((lp for lp, v in zip(loops, iters) if v.same_as(w_var)), None)
            if o is not None and w is not None:
                return o, w, index, isinstance(rd.region[-1].min, tirx.Var)
    return None


def _is_one(expr) -> bool:
    return isinstance(expr, tirx.IntImm) and int(expr.value) == 1


def _schedule_transpose_block(sch: s_tir.Schedule, block, lanes: int) -> bool:
    """Tile a transpose: ``rows`` input columns by ``vec`` output columns. The input tile is first
    copied to a local buffer with contiguous vector loads (``vec`` rows of ``rows`` elements), then
    written out a vector of ``vec`` output elements at a time, so every cache line read and written is
    used whole while it is in L1."""
    axes = _transpose_axes(sch, block)
    if axes is None:
        return False
    o, w, read_index, plain = axes
    e_o, e_w = _extent(sch, o), _extent(sch, w)
    vec = next((v for v in (8, 4, 2) if e_o % v == 0), 1)
    rows = next((r for r in (16, 8, 4, 2) if e_w % r == 0), 1)
    if vec < 2 or rows < 2:
        return False
    loops = sch.get_loops(block)
    work = 1
    for loop in loops:
        work *= _extent(sch, loop) or 1
    if not plain and (rows < 16 or work < TRANSPOSE_MIN_ELEMENTS):
        # Measured (experiments/transpose_chains.py): tiling a transpose of rows under 16 elements (T5's
        # (16384, 4) position-bias table: 4.4x slower) or of a small tensor (a 1024-element key: 1.4x) loses.
        return False
    others = [lp for lp in loops if not any(sch.get(lp).same_as(sch.get(x)) for x in (o, w))]
    w_o, w_i = sch.split(w, factors=[None, rows])
    o_o, o_i = sch.split(o, factors=[None, vec])
    sch.reorder(*others, w_o, o_o, o_i, w_i)
    outer = others + [w_o, o_o]
    fused = sch.fuse(*outer) if len(outer) > 1 else outer[0]
    if work >= PARALLEL_MIN_WORK["injective"] and (_extent(sch, fused) or 0) > 1:
        sch.parallel(fused)
    staged = sch.cache_read(block, read_index, "local")
    sch.compute_at(staged, fused, preserve_unit_loops=True)
    stage_loops = sch.get_loops(staged)[1:]
    if len(stage_loops) >= 2:
        sch.vectorize(stage_loops[-1])
        sch.unroll(stage_loops[-2])
    o_i, w_i = sch.get_loops(block)[-2:]
    sch.reorder(w_i, o_i)
    sch.vectorize(o_i)
    sch.unroll(w_i)
    return True


def _schedule_injective_block(sch: s_tir.Schedule, block, lanes: int) -> None:
    loops = sch.get_loops(block)
    if not loops:
        return
    extents = [_extent(sch, loop) for loop in loops]
    if any(e is None for e in extents):
        return
    if _schedule_transpose_block(sch, block, lanes):
        return
    work = 1
    for e in extents:
        work *= e
    # Drop trailing unit loops from the vector choice.
    inner_index = len(loops) - 1
    while inner_index > 0 and extents[inner_index] == 1:
        inner_index -= 1
    inner = loops[inner_index]
    ext = extents[inner_index]
    width = _lanes(ext, lanes)
    outer = list(loops[:inner_index])
    if width >= 2 and ext >= 2:
        if ext > width:
            io, ii = sch.split(inner, factors=[None, width])
            if not _partition_partial_vector(sch, io, ext, width):  # a partitioned loop is not fused
                outer.append(io)
            inner = ii
        sch.vectorize(inner)
    else:
        outer.append(inner)
    _parallel_outer(sch, outer, work, "injective")


def _attempt(primitive, *args, **kwargs) -> bool:
    """Apply a schedule primitive; False (and the schedule unchanged) when its preconditions fail."""
    try:
        primitive(*args, **kwargs)
    except Exception:  # TVM raises ScheduleError (and others) when a primitive does not apply
        return False
    return True


def _try_inline_all(sch: s_tir.Schedule, blocks: list) -> list:
    """Inline every block that can be (producers into consumers, then consumers into producers)."""
    remaining = list(blocks)
    progress = True
    while progress:
        progress = False
        for block in list(remaining):
            if _attempt(sch.compute_inline, block) or _attempt(sch.reverse_compute_inline, block):
                remaining.remove(block)
                progress = True
    return remaining


# ----------------------------------------------------------------------------------------------------
# Rules
# ----------------------------------------------------------------------------------------------------

class Contraction(CPUScheduleRule):
    """Register-tiled, vectorised, parallel schedule for one multiply-accumulate reduction block.

    Applies to kernels whose blocks are injective producers (padding, copies), exactly one reduction
    block whose output's innermost index is one of its spatial iterators ``v`` read contiguously by
    some input (matmul's ``B[k, j]``, conv2d's ``data[c, y + ry, x + rx]``), and injective epilogues.
    """

    #: Rows are padded to a multiple of this when their count has no divisor of at least 4 up to max_rows.
    ROW_PAD = 8
    #: Most rows of a tile whose vector fills half a register or less (the 2- and 4-wide output rows of a
    #: convolution on a 2x2 or 4x4 map) on a machine with :data:`NARROW_ROWS_REGISTERS` vector registers or fewer.
    #: On the AMD Zen 3 (AVX2) 8 rows ran such kernels 0.81x the time of 10 or 12 (median of the 24 kernels the rule
    #: changes, 0.51-1.14x; MobileNetV2-base's contraction kernels 0.90x, a 96-channel 3x3 convolution on a 2x2 map
    #: 0.80x); rows of a full register or of one lane ran 1.01-1.06x slower with 8 (``experiments/register_rows.py``,
    #: session 60).
    NARROW_MAX_ROWS = 8

    def __init__(self, max_rows: int = 12, max_vectors: int = 4):
        self.max_rows = max_rows
        self.max_vectors = max_vectors

    def most_rows(self, lanes: int, max_lanes: int, registers: int | None) -> int:
        """The most rows a tile of ``lanes``-wide vectors may hold (:attr:`NARROW_MAX_ROWS` for a vector of half a
        register or less on a machine with at most :data:`NARROW_ROWS_REGISTERS` registers, else ``max_rows``)."""
        narrow = registers is not None and registers <= NARROW_ROWS_REGISTERS and 1 < lanes <= max_lanes // 2
        return min(self.max_rows, self.NARROW_MAX_ROWS) if narrow else self.max_rows

    def pads_rows(self, e_u: int) -> bool:
        """Whether ``e_u`` rows are padded to a multiple of :attr:`ROW_PAD` (no divisor of at least 4
        up to ``max_rows``)."""
        return e_u > self.max_rows and max(_divisors(e_u, self.max_rows)) < 4

    def tile_plan(self, e_v: int, e_u: int, max_lanes: int, budget: int, registers: int | None = None,
                  odd: bool = False) -> dict:
        """The register tile for an output of ``e_v`` elements along v and ``e_u`` rows, and what it costs.

        Chunks of v that divide its extent are preferred (no predicated tail): ``nv`` full vectors, or
        one vector narrower than a register (14 of 16 lanes for a row of 56). Rows: a divisor of ``e_u`` up to
        :meth:`most_rows` (fewer for a vector of half a register or less with ``registers`` 16). The tile that
        needs the fewest loads per useful multiply-add, within ``budget`` accumulator registers, wins;
        with ``registers`` (the vector registers there are), its accumulators, its vector operand and
        one broadcast must fit in them (with 16: 4 rows x 3 vectors, not 3 x 4, which spills). With ``odd``,
        a row no divisor fits (13, 17, 26 of a convolution, whose columns cannot be padded) that fits in
        four registers is one odd-width vector (LLVM splits it into registers) instead of a scalar tail:
        4-5x faster on 13- to 27-wide convolution rows.

        Returns
        -------
        dict
            ``lanes``, ``nv``, ``ut``; ``lane_use`` (useful lanes of the vector registers the tile holds),
            ``loads_per_fma`` (loads per useful multiply-add), ``tail`` (True when no divisor of ``e_v``
            is worth a vector: a predicated tail TVM leaves scalar), ``odd`` (True when the row is one
            odd-width vector instead).
        """
        options = []
        for width in range(1, min(e_v, self.max_vectors * max_lanes) + 1):
            if e_v % width:
                continue
            if width % max_lanes == 0:
                lanes, nv = max_lanes, width // max_lanes
            elif width < max_lanes:
                lanes, nv = width, 1
            else:  # an odd width over several registers: LLVM splits it badly (spills)
                continue
            options.append((lanes, nv))
        tail = e_v > max_lanes and not any(lanes * nv >= 4 for lanes, nv in options)
        odd_row = tail and odd and e_v <= self.max_vectors * max_lanes
        if odd_row:
            options, tail = [(e_v, 1)], False
        if tail:
            # No divisor worth a vector: full vectors with a predicated tail (TVM leaves such a loop
            # scalar, so this is as slow as the unscheduled kernel, but the tile still gives locality).
            options.append((max_lanes, 1))
        best = None
        for lanes, nv in options:
            regs = nv * -(-lanes // max_lanes)
            used = lanes * nv / (regs * max_lanes)
            for ut in _divisors(e_u, self.most_rows(lanes, max_lanes, registers)) or [1]:
                if ut * regs > budget or (registers is not None and ut * regs + regs + 1 > registers):
                    continue
                cost = (ut + regs) / (ut * regs) / used  # loads per useful multiply-add
                if best is None or cost < best[0] - 1e-9:
                    best = (cost, lanes, nv, ut, used)
        cost, lanes, nv, ut, used = best
        return dict(lanes=lanes, nv=nv, ut=ut, lane_use=used, loads_per_fma=cost, tail=tail, odd=odd_row)

    @staticmethod
    def _pack_buffer(stmt, v_var, u_var, spatial, extent, ut):
        """The name of the vector operand to copy panel by panel, or None.

        Packing pays when that operand is a matrix read ``B[..., k, v]`` whose rows are far apart
        (a row of 1 KiB or more: every reduction step otherwise touches a new cache line set, often
        a new page) and each panel is reused by at least two row tiles.
        """
        if extent[u_var] // ut < 2:
            return None
        for rd in stmt.reads:
            region = rd.region
            if not len(region) or not region[-1].min.same_as(v_var):
                continue
            rows_ok = True
            for rng in region[:-1]:
                idx = rng.min
                if isinstance(idx, tirx.Var) and not idx.same_as(u_var):
                    continue
                if isinstance(idx, tirx.IntImm):
                    continue
                rows_ok = False
            row_bytes = int(rd.source.shape[-1]) * rd.source.dtype.bits // 8
            if rows_ok and row_bytes >= 1024:
                return rd.source.name
        return None

    def apply(self, func, target, _tunable, *, padded: bool = False):
        if not isinstance(func, tirx.PrimFunc) or not self.is_target_available(target):
            return None
        sch = s_tir.Schedule(func)
        blocks = sch.get_child_blocks(_root(sch))
        stmts = [sch.get(b) for b in blocks]
        reductions = [i for i, s in enumerate(stmts) if not _is_spatial(s)]
        if len(reductions) != 1 or not _is_reduction(stmts[reductions[0]]):
            return None
        r = reductions[0]
        block, stmt = blocks[r], stmts[r]
        if len(stmt.writes) != 1 or not len(stmt.writes[0].region) or not _trivially_bound(sch, block):
            return None
        iters = list(stmt.iter_vars)
        spatial = [iv.var for iv in iters if iv.iter_type == tirx.IterVar.DataPar]
        out_index = stmt.writes[0].region[-1].min
        if not isinstance(out_index, tirx.Var) or not any(out_index.same_as(v) for v in spatial):
            return None
        v_var = out_index
        # The operand read along v (vector loads) and the axis it does not depend on (broadcast loads).
        vector_reads = [
            rd for rd in stmt.reads
            if len(rd.region) and any(x.same_as(v_var) for x in _vars_in(rd.region[-1].min))
        ]
        if not vector_reads:
            return None
        shared = set()
        for rd in vector_reads:
            for rng in rd.region:
                shared |= {x for x in _vars_in(rng.min)}
        candidates = [v for v in spatial if not v.same_as(v_var) and not any(v.same_as(x) for x in shared)]
        pos = {iv.var: i for i, iv in enumerate(iters)}
        extent = {iv.var: int(iv.dom.extent.value) for iv in iters}
        candidates = [v for v in candidates if extent[v] > 1]
        if candidates:
            u_var = candidates[-1]
        else:
            before = [v for v in spatial if pos[v] < pos[v_var] and extent[v] > 1]
            u_var = before[-1] if before else None

        if UNIT_ROW_DOT_PRODUCTS and _dot_product_per_output(stmt):
            return None  # :class:`DotProduct`'s
        dtype_bits = stmt.writes[0].source.dtype.bits
        bits = vector_bits(target)
        max_lanes = max(bits // dtype_bits, 1)
        e_v = extent[v_var]
        e_u = extent[u_var] if u_var is not None else 1
        pad_rows = not padded and self.pads_rows(e_u)
        plan = self.tile_plan(e_v, e_u, max_lanes, _ACCUMULATORS.get(bits, 12), _REGISTERS.get(bits, 16))
        pad_columns = not padded and plan["tail"]
        if pad_rows or pad_columns:
            # Rows with no divisor worth a register tile (71, 197, 2 x 47...) would run one or two rows
            # per tile, 3-4x slower per FLOP (measured on (71, 2048) @ (2048, 2048)), and an output row
            # with no divisor worth a vector (17, 197: attention over ViT's tokens) would run scalar:
            # pad them to a multiple of ROW_PAD (TVM's pad_einsum: a padded copy of the inputs, a cropped
            # output) and schedule that. A convolution's columns cannot be padded this way (its input is
            # read at y + ry): then only its rows are.
            tries = [(pad_rows, pad_columns)] + ([(pad_rows, False)] if pad_rows and pad_columns else [])
            for rows, columns in tries:
                padding = [self.ROW_PAD if (rows and iv.var.same_as(u_var)) or (columns and iv.var.same_as(v_var))
                           else 1 for iv in iters]
                trial = s_tir.Schedule(func)
                if _attempt(trial.pad_einsum, trial.get_child_blocks(_root(trial))[r], padding):
                    return self.apply(trial.mod["main"], target, _tunable, padded=True)
        if plan["tail"]:  # columns that could not be padded (a convolution's): one odd-width vector if it fits
            plan = self.tile_plan(e_v, e_u, max_lanes, _ACCUMULATORS.get(bits, 12), _REGISTERS.get(bits, 16), odd=True)
        lanes, nv, ut = plan["lanes"], plan["nv"], plan["ut"]
        # Producers: inline plain copies; padding (a conditional) stays its own parallel block.
        for i in range(r):
            if not _has_if_then_else(stmts[i]):
                _attempt(sch.compute_inline, blocks[i])

        loops = sch.get_loops(block)
        loop_of = {iv.var: loop for iv, loop in zip(iters, loops)}
        reduce_loops = [loop_of[iv.var] for iv in iters if iv.iter_type == tirx.IterVar.CommReduce]
        v_outer, v_vec = sch.split(loop_of[v_var], factors=[None, lanes * nv])
        v_unroll, v_lane = sch.split(v_vec, factors=[nv, lanes])
        tile_outer = []
        if u_var is not None:
            u_outer, u_inner = sch.split(loop_of[u_var], factors=[None, ut])
        others = [loop_of[v] for v in spatial
                  if not v.same_as(v_var) and (u_var is None or not v.same_as(u_var))]
        pack = self._pack_buffer(stmt, v_var, u_var, spatial, extent, ut) if u_var is not None else None
        serial = []
        if u_var is not None and pack is not None:
            # Parallel over panels of v; the rows of one panel run in turn and share its packed copy.
            tile_outer, serial = others + [v_outer], [u_outer]
            inner = [u_inner, v_unroll, v_lane]
        elif u_var is not None:
            tile_outer = others + [v_outer, u_outer]
            inner = [u_inner, v_unroll, v_lane]
        else:
            tile_outer = others + [v_outer]
            inner = [v_unroll, v_lane]
        sch.reorder(*tile_outer, *serial, *reduce_loops, *inner)

        # Accumulate in a local tile; the epilogue runs on the tile as it is written back.
        acc_writeback = sch.cache_write(block, 0, "local")
        # Inline the epilogue into its last block first (a value read twice, as GELU reads x, is then
        # recomputed), then that block into the write-back. Inlining consumers one by one into the
        # write-back is unsafe: TVM 0.27's reverse_compute_inline does not check that the buffer it
        # stops writing has no other reader (it leaves a read of an undefined buffer).
        epilogue = list(blocks[r + 1:])
        if len(epilogue) > 1:
            epilogue = [b for b in epilogue[:-1] if not _attempt(sch.compute_inline, b)] + epilogue[-1:]
        # An epilogue that writes elements no output of the contraction maps to (the padding of the next
        # convolution fused after a ReLU: 4x4 -> 5x5) stays at the root: computed per tile, TVM 0.27 never
        # writes the border (measured: MobileNetV2 with folded BatchNorms returned garbage there).
        out_shape = [int(x) for x in stmt.writes[0].source.shape]
        at_root = [b for b in epilogue if _has_if_then_else(sch.get(b)) or any(
                   int(x) > n for x, n in zip(sch.get(b).writes[0].source.shape[::-1], out_shape[::-1]))]
        epilogue = [b for b in epilogue if b not in at_root]
        # Padded rows: the epilogue covers fewer rows than the tile, and TVM 0.27's reverse_compute_inline
        # would write the padding rows past the end of the output; it is computed per tile instead.
        if len(epilogue) == 1 and not at_root and not padded and _attempt(sch.reverse_compute_inline, epilogue[0]):
            epilogue = []
        leftover = epilogue  # computed per tile below instead
        work = 1  # multiply-adds: a long reduction over few outputs is still worth two threads
        for v in extent.values():
            work *= v
        fused = sch.fuse(*tile_outer) if len(tile_outer) > 1 else tile_outer[0]
        if work >= PARALLEL_MIN_WORK["contraction"] and (_extent(sch, fused) or 0) > 1:
            sch.parallel(fused)
        tile_loop = serial[-1] if serial else fused
        depth = 2 if serial else 1  # loops above a block computed at the tile loop
        sch.reverse_compute_at(acc_writeback, tile_loop, preserve_unit_loops=True)
        for epi in leftover:
            if not _attempt(sch.reverse_compute_at, epi, tile_loop, preserve_unit_loops=True):
                _schedule_injective_block(sch, epi, max_lanes)  # left at the root
                continue
            wb_loops = sch.get_loops(epi)[depth:]
            if wb_loops:
                _vectorize_inner(sch, wb_loops[-1], max_lanes)
        for epi in at_root:
            _schedule_injective_block(sch, epi, max_lanes)
        wb_loops = sch.get_loops(acc_writeback)[depth:]
        if wb_loops:
            _vectorize_inner(sch, wb_loops[-1], max_lanes)
        if pack is not None:
            # The panel of the vector operand this tile column reads, copied contiguously once per panel.
            reads = [rd.source.name for rd in sch.get(block).reads]
            packed = sch.cache_read(block, reads.index(pack), "global")
            sch.compute_at(packed, fused, preserve_unit_loops=True)
            pack_loops = sch.get_loops(packed)[1:]
            if pack_loops:
                _vectorize_inner(sch, pack_loops[-1], max_lanes)

        # Unrolled register tile, vector lanes innermost; the zeroing of the tile likewise.
        sch.vectorize(v_lane)
        sch.unroll(v_unroll)
        if u_var is not None:
            sch.unroll(u_inner)
        if reduce_loops:
            init = sch.decompose_reduction(block, reduce_loops[0])
            init_loops = sch.get_loops(init)[1:]
            if init_loops:
                sch.vectorize(init_loops[-1])
        # Producers left (padding): their own parallel, vectorised blocks.
        left = {str(sch.get(b).name_hint): b for b in sch.get_child_blocks(_root(sch))}
        for i in range(r):
            producer = left.get(str(stmts[i].name_hint))
            if producer is not None:
                _schedule_injective_block(sch, producer, max_lanes)
        return sch


class Pool(CPUScheduleRule):
    """Pooling windows (``max_pool2d``'s ``pool_max``, ``avg_pool2d``'s ``pool_sum``): the window loops moved
    outside the output row, so the row is one vector per window tap (strided loads at stride 2); the padding
    stays its own elementwise block, and the average's divide too; rows in parallel when the window work is
    worth two threads. Contraction's register tiles on pools ran 1-6 ns per output element, erratic by shape
    (a 24x194x194 3x3 max pool: 5.7 ns); adaptive pools (windows that vary with the output) are left to it."""

    POOL_BLOCKS = ("pool_max", "pool_sum")

    def apply(self, func, target, _tunable):
        if not isinstance(func, tirx.PrimFunc) or not self.is_target_available(target):
            return None
        sch = s_tir.Schedule(func)
        blocks = sch.get_child_blocks(_root(sch))
        reductions = [b for b in blocks if not _is_spatial(sch.get(b))]
        if len(reductions) != 1 or sch.get(reductions[0]).name_hint not in self.POOL_BLOCKS:
            return None
        pool = reductions[0]
        if not _trivially_bound(sch, pool):
            return None
        kinds = [iv.iter_type for iv in sch.get(pool).iter_vars]
        n_spatial = kinds.index(tirx.IterVar.CommReduce) if tirx.IterVar.CommReduce in kinds else len(kinds)
        if n_spatial < 2 or any(k != tirx.IterVar.CommReduce for k in kinds[n_spatial:]):
            return None
        loops = sch.get_loops(pool)
        extents = [_extent(sch, lp) for lp in loops]
        if any(e is None for e in extents):
            return None
        work = 1
        for e in extents:
            work *= e
        lanes = max(vector_bits(target) // 32, 1)
        rows, w, window = loops[: n_spatial - 1], loops[n_spatial - 1], loops[n_spatial:]
        fused = sch.fuse(*rows) if len(rows) > 1 else rows[0]
        width = _lanes(extents[n_spatial - 1], lanes)
        if width < 2:
            return None
        w_o, w_i = sch.split(w, factors=[None, width])
        _partition_partial_vector(sch, w_o, extents[n_spatial - 1], width)
        # The window outside the vector: each tap one (strided) vector load; the init runs at the first tap.
        sch.reorder(fused, w_o, *window, w_i)
        sch.vectorize(w_i)
        for loop in window:
            if (_extent(sch, loop) or 0) <= 8:
                sch.unroll(loop)
        if work >= PARALLEL_MIN_WORK["pool"] and (_extent(sch, fused) or 0) > 1:
            sch.parallel(fused)
        # Padding before, the average's divide (and a fused epilogue) after: elementwise blocks of their own.
        for block in sch.get_child_blocks(_root(sch)):
            if _is_spatial(sch.get(block)):
                _schedule_injective_block(sch, block, lanes)
        return sch


#: Steps along a row below which a row reduction accumulates in one vector, not several: two vectors made a
#: 3136-element mean 1.5x and a 768-long layer norm 1.3x faster, and rows of 32-256 slower.
ROW_STEPS_PER_EXTRA_VECTOR = 32
#: Accumulate a row reduction whose rows no vector width divides (197, 17x17 = 289, 49, 1500) in full vectors,
#: the last partial vector's elements one at a time (:func:`odd_row_reduction_width`; TVM's ``LoopPartition``
#: splits that last step off the vector loop); False: such rows are added one scalar at a time (version 9).
ODD_ROW_REDUCTION = True
#: A contraction with one output element per row (a 1x1 convolution over a 1x1 map, as a MobileNet's head and a
#: squeeze-excitation block run; a matmul by one column) whose reduction has one loop longer than 1 is a dot product
#: per output: :class:`Contraction` (which vectorises along the output row) declines it, and :class:`DotProduct`
#: accumulates it along the reduction in vector lanes as :class:`RowReduction` does a sum, the reduction's trailing
#: loops of one (the kernel's 1x1 taps) fused into it (schedule version 15). False (version 14): one scalar
#: multiply-add at a time, the weights streamed at 7-15 GB/s on the Zen 5, where a matmul of two rows by the same
#: weights reads them at 100-130; with it 24-175 GB/s, the 18 kernels it changes 2.6-14.7x faster, MobileNetV2 1.99x
#: (``experiments/dot_products.py``, session 62).
UNIT_ROW_DOT_PRODUCTS = True


def _lanes_up_to_steps(row: int, lanes: int, accumulators: int) -> int:
    """The widest power of two, up to ``accumulators`` vectors of ``lanes``, that leaves at least as many vector
    steps along a row of ``row`` elements as it has lanes (:data:`LANES_UP_TO_STEPS`)."""
    width = 1
    while width * 2 <= lanes * max(1, accumulators) and (width * 2) ** 2 <= row:
        width *= 2
    return width


def row_reduction_width(run: int, lanes: int, accumulators: int, row: int | None = None) -> int:
    """Lanes :class:`RowReduction` accumulates a row reduction in, for a contiguous run of ``run`` elements
    (the reduced loops it splits) in a row of ``row`` (all reduced elements; default ``run``); 0 when it stays
    scalar.

    Since schedule version 12 (:data:`LANES_UP_TO_STEPS`): the widest power of two up to ``accumulators``
    vectors that leaves at least as many vector steps along the row as it has lanes (the lanes are added up
    one scalar at a time at the end, a chain as long as the lanes), halved until it divides the run (a
    predicated tail would leave the loop scalar), at least 4 lanes: rows under 16 stay scalar. Version 11:
    the widest of ``accumulators`` vectors that divides the run and leaves :data:`ROW_STEPS_PER_EXTRA_VECTOR`
    steps for more than one vector, then one vector, down to half a vector; rows shorter than two vectors
    scalar."""
    row = run if row is None else row
    if LANES_UP_TO_STEPS:
        width = _lanes_up_to_steps(row, lanes, accumulators)
        while width >= 4 and run % width:
            width //= 2
        return width if width >= 4 else 0
    if row < 2 * lanes:
        return 0
    width = lanes * max(1, accumulators)
    while width > lanes and (run % width or row < ROW_STEPS_PER_EXTRA_VECTOR * width):
        width //= 2
    while width >= max(4, lanes // 2):
        if run % width == 0:
            return width
        width //= 2
    return 0


#: Row reductions accumulate in at most as many lanes as they take vector steps along the row (schedule version
#: 12, :func:`row_reduction_width`); False: version 11, a full vector from rows of two (a row of 32 in 16 lanes:
#: 2 steps, then 16 dependent scalar adds). On the Zen 5 (16 lanes, ``experiments/short_rows.py``) a max over
#: 512x32 ran 2.3x faster, softmax over 12x16x16 1.35x, over 8x32x32 1.2x, a layer norm over 128x128 1.25x.
LANES_UP_TO_STEPS = True


#: Run the rows of a vectorised row reduction's partial results (the ``rfactor`` block, its own loop nest) in
#: parallel like the rows that add them up, where the work is worth two threads (schedule version 10; until 9
#: that loop nest, which does nearly all the work, ran on one thread).
PARALLEL_RF_ROWS = True
#: Vectors a row no width divides needs before :data:`ODD_ROW_REDUCTION` applies: on the Zen 4 (16 lanes) a
#: 12x50x50 softmax (3 vectors and 2 elements a row) ran 1.1x slower in vectors than in scalar adds, a 192x49x49
#: one 1.05x faster; rows of 197 (12 vectors) 1.9x faster.
ODD_ROW_MIN_VECTORS = 4
#: What one vector step of those partial results counts as against ``PARALLEL_MIN_WORK["reduction"]`` (loop
#: iterations of a scalar row reduction): on the Zen 4 a 12x50x50 softmax's (1.9K vector steps a block) ran 1.3x
#: slower on two threads, a 2364x197 max (29K) 3.2x faster, a 197x768 layer norm (9.5K) 0.97-1.2x as fast
#: (within the noise of three runs).
RF_VECTOR_STEP_WORK = 2


#: Rows no vector width divides get the lanes of :data:`LANES_UP_TO_STEPS` too (at most as many as the full
#: steps along the row, at least 4: a row of 49 in 4 lanes, not scalar); False: version 11's
#: :data:`ODD_ROW_MIN_VECTORS`.
ODD_LANES_UP_TO_STEPS = True


def odd_row_reduction_width(extents: list[int], lanes: int, accumulators: int) -> tuple[int, int]:
    """``(lanes, loops fused)`` to accumulate a row reduction whose reduced loops have ``extents`` (innermost
    last) in full vectors when no vector width divides its rows (:func:`row_reduction_width` found none): the
    last two loops fused where there are two (a 17x17 mean: 289 contiguous elements, one partial vector, not
    17), else the innermost; more than one vector only as :func:`row_reduction_width` allows; ``(0, 1)`` when
    the run is shorter than :data:`ODD_ROW_MIN_VECTORS` vectors (it stays scalar)."""
    fused = 2 if len(extents) >= 2 else 1
    run = extents[-1] * (extents[-2] if fused == 2 else 1)
    if ODD_LANES_UP_TO_STEPS:
        width = _lanes_up_to_steps(run, lanes, accumulators)
        return (width, fused) if width >= 4 else (0, 1)
    if run < ODD_ROW_MIN_VECTORS * lanes:
        return 0, 1
    width = lanes * max(1, accumulators)
    while width > lanes and run < ROW_STEPS_PER_EXTRA_VECTOR * width:
        width //= 2
    return width, fused


def _vectorize_row_reduction(sch: s_tir.Schedule, block, lanes: int, accumulators: int) -> bool:
    """Accumulate a reduction block along its rows' innermost axes in vector lanes; whether it did.

    Applies when the reduction iterators are the block's innermost loops and some input is read along them
    as its trailing axes in order (``x[i, k]``, ``x[n, c, h, w]`` over ``h, w``). The innermost reduced loop,
    or the last two fused when that allows more lanes (a 56x56 mean: 16 lanes over 3136, not 8 over 56),
    is split into ``(ko, ki)`` with ``ki`` of :func:`row_reduction_width` lanes; ``rfactor`` makes a block
    that keeps ``ki`` partial results per row (vectorised: ``ki`` lanes of a load added into as many
    accumulators), and the original block adds them up. Three or more loops are not fused: the index
    arithmetic of a vector that crosses two row boundaries is left to gathers (a 4x44x44 group norm ran
    1.4x slower than the scalar loop). Rows no width divides (:data:`ODD_ROW_REDUCTION`) are split into full
    vectors and one partial step (:func:`odd_row_reduction_width`), whose loop carries :data:`PARTITION_HINT`:
    lowering splits the last step off, so the rest runs without a predicate, as vectors.
    """
    stmt = sch.get(block)
    kinds = [iv.iter_type for iv in stmt.iter_vars]
    n_lead = next((i for i, k in enumerate(kinds) if k != tirx.IterVar.DataPar), len(kinds))
    if n_lead == len(kinds) or any(k != tirx.IterVar.CommReduce for k in kinds[n_lead:]):
        return False
    reduced = [iv.var for iv in stmt.iter_vars[n_lead:]]
    streamed = any(
        len(rd.region) >= len(reduced)
        and all(rng.min.same_as(v) for rng, v in zip(list(rd.region)[-len(reduced):], reduced))
        for rd in stmt.reads
    )
    if not streamed:
        return False
    loops = sch.get_loops(block)
    extents = [_extent(sch, loop) or 0 for loop in loops[n_lead:]]
    if UNIT_ROW_DOT_PRODUCTS and len(extents) >= 2 and extents[-1] == 1 and any(e > 1 for e in extents):
        # Trailing reduced loops of one (a 1x1 convolution's taps after its channels): one loop with the last
        # longer one, which is then the row.
        last = max(i for i, e in enumerate(extents) if e > 1)
        sch.fuse(*loops[n_lead + last:])
        loops = sch.get_loops(block)
        extents = [_extent(sch, loop) or 0 for loop in loops[n_lead:]]
    row = 1
    for e in extents:
        row *= e
    width, fused = row_reduction_width(extents[-1], lanes, accumulators, row), 1
    if len(extents) >= 2:
        wider = row_reduction_width(extents[-1] * extents[-2], lanes, accumulators, row)
        if wider > width:
            width, fused = wider, 2
    if not width and ODD_ROW_REDUCTION:
        width, fused = odd_row_reduction_width(extents, lanes, accumulators)
    if not width:
        return False
    try:
        k = sch.fuse(*loops[-fused:]) if fused > 1 else loops[-1]
        run = _extent(sch, k) or 0
        _, ki = sch.split(k, factors=[None, width])
        rf = sch.rfactor(ki, n_lead)
        rf_loops = sch.get_loops(rf)
        if run % width:
            sch.annotate(rf_loops[-2], PARTITION_HINT, 1)  # the loop over vectors: its last one is partial
        sch.vectorize(rf_loops[-1])
        if PARALLEL_RF_ROWS:  # the rows of partial results (their own loop nest) in parallel too
            work = 1
            for loop in rf_loops:
                work *= _extent(sch, loop) or 1
            _parallel_outer(sch, rf_loops[:n_lead], work // width * RF_VECTOR_STEP_WORK, "reduction")
    except Exception:  # a reduction rfactor cannot split (tuple of non-commutative parts...): left scalar
        return False
    return True


def vectorized_row_reduction(func: tirx.PrimFunc) -> bool:
    """Whether ``func`` has a row reduction accumulated in vector lanes (a block :func:`_vectorize_row_reduction`
    made: ``rfactor`` names it ``<block>_rf``). Profile records carry it (``vector_reduce``)."""
    names = []
    tvm_ffi.structural_walk(func.body, (s_tir.SBlock, lambda b: names.append(b.name_hint)), order="post")
    return any(str(n).endswith("_rf") for n in names)


def vector_width(func: tirx.PrimFunc) -> int:
    """Lanes of the widest vectorised loop of ``func`` that runs as a vector: one whose blocks carry no
    predicate (TVM leaves a predicated vector loop scalar), or one inside a loop that carries
    :data:`PARTITION_HINT` (lowering splits the predicated last step off); 0 when there is none (the kernel
    runs scalar). Profile records carry it (``vector_width``): a convolution row of 33 or 194 runs scalar,
    one of 18 in 18 lanes."""
    widths = []
    partitioned = set()

    def visit_partitioned(loop):
        if PARTITION_HINT in loop.annotations:
            tvm_ffi.structural_walk(loop.body, (tirx.For, lambda inner: partitioned.add(inner)), order="post")

    tvm_ffi.structural_walk(func.body, (tirx.For, visit_partitioned), order="post")

    def visit(loop):
        if loop.kind != tirx.ForKind.VECTORIZED or not isinstance(loop.extent, tirx.IntImm):
            return
        if loop in partitioned:
            widths.append(int(loop.extent.value))
            return
        predicated = []
        tvm_ffi.structural_walk(loop.body, (s_tir.SBlockRealize, lambda r: predicated.append(
            not (isinstance(r.predicate, tirx.IntImm) and int(r.predicate.value) == 1))), order="post")
        if not any(predicated):
            widths.append(int(loop.extent.value))

    tvm_ffi.structural_walk(func.body, (tirx.For, visit), order="post")
    return max(widths, default=0)


#: The elementwise blocks of a row-reduction kernel (softmax's exp and divide, a norm's scale) over rows of at most
#: one vector, from :data:`SHORT_ROW_MIN_ELEMENTS`, that a power-of-two width of 4 or more divides (an 8x16 norm, a
#: Swin window's 16-token softmax): the row loop vectorised by the schedule. False (version 11): left to LLVM's vectoriser, which vectorises across rows instead, and with fewer rows than lanes does so with masked gathers.
#: Tried in session 37 on the Zen 4 (one run, min of 2 x 7 repeats): a layer norm over 8x16 0.169 -> 0.087 us, an
#: RMS norm over 8x16 0.145 -> 0.046, softmax 15x8 0.35 -> 0.27 (a 16x8 one takes 0.08 either way: the reductions
#: keep their gathers), 23x16 0.62 -> 0.40, 12x16x16 5.5 -> 3.4; 13 other shapes 0.95-1.02x as fast. On since schedule
#: version 12 (with :data:`LANES_UP_TO_STEPS`).
SHORT_ROW_VECTORS = True


#: Shortest row :data:`SHORT_ROW_VECTORS` vectorises. Session 55 on the Zen 5 (16 lanes; one-op modules timed on
#: and off in 5 interleaved rounds, min, less the ~0.55 us VM call): rows of 16 ran faster (a softmax over 64x16
#: 0.83 -> 0.37 us, a layer norm 0.95 -> 0.57), rows of 8 within +-0.05 us (softmax over 15x8 0.23 -> 0.18, over
#: 16x8 0.05 -> 0.10; convnext's layer norm over 1x8x8x8 0.12 -> 0.17 in ``experiments/short_rows.py``), rows of 4
#: slower (a layer norm over 64x4 0.38 -> 0.48).
SHORT_ROW_MIN_ELEMENTS = 16


def _vectorize_short_row(sch: s_tir.Schedule, loop, lanes: int) -> bool:
    """Vectorise ``loop`` (a block's last, spatial) when it is :data:`SHORT_ROW_MIN_ELEMENTS` to ``lanes`` long
    and a power-of-two width of 4 or more divides it (whole, or split at that width); whether it did."""
    extent = _extent(sch, loop) or 0
    width = _lanes(extent, lanes) if max(4, SHORT_ROW_MIN_ELEMENTS) <= extent <= lanes else 0
    if width < 4 or width & (width - 1) or extent % width:
        return False
    if width < extent:
        loop = sch.split(loop, factors=[None, width])[1]
    return _attempt(sch.vectorize, loop)


class RowReduction(CPUScheduleRule):
    """Kernels of reductions and injective blocks (softmax, layer norm, RMS norm, mean, sums...): each
    block's leading spatial loops fused and run in parallel. A reduction along the rows' innermost axes
    (the last axis; a global average pool's H and W) accumulates ``width`` lanes at a time in vector
    registers (:func:`_vectorize_row_reduction`: ``rfactor``; since version 10 rows no width divides too,
    their last partial vector one element at a time), then adds the lanes up; other blocks leave their
    innermost loop to LLVM's vectoriser.

    LLVM does not vectorise a float sum by itself (it may not reorder the additions): until schedule
    version 4 every row reduction ran one scalar add at a time, 0.5-0.7 ns per element, and the sums,
    means, maxima and norms of the op families run 2.5-18x faster with lanes (``experiments/
    row_reduction.py``). Nothing is inlined (softmax's exp would be computed twice)."""

    #: Vector registers accumulated side by side: an add's latency is several cycles, so one register
    #: would wait on itself (``experiments/row_reduction.py`` compares 1, 2 and 4).
    ACCUMULATORS = 2

    def __init__(self, accumulators: int | None = None):
        self.accumulators = self.ACCUMULATORS if accumulators is None else accumulators

    def apply(self, func, target, _tunable):
        if not isinstance(func, tirx.PrimFunc) or not self.is_target_available(target):
            return None
        sch = s_tir.Schedule(func)
        blocks = sch.get_child_blocks(_root(sch))
        if not any(not _is_spatial(sch.get(b)) for b in blocks):
            return None
        lanes = max(vector_bits(target) // 32, 1)
        for block in blocks:
            stmt = sch.get(block)
            if not _trivially_bound(sch, block):
                continue
            if self.accumulators and _is_reduction(stmt):
                _vectorize_row_reduction(sch, block, lanes, self.accumulators)
            loops = sch.get_loops(block)
            lead = []
            for loop, iv in zip(loops, stmt.iter_vars):
                if iv.iter_type != tirx.IterVar.DataPar:
                    break
                lead.append(loop)
            if len(lead) == len(loops) and len(lead) > 1:
                lead = lead[:-1]  # an injective block: its last loop stays for the vectoriser
                if SHORT_ROW_VECTORS:
                    _vectorize_short_row(sch, loops[-1], lanes)
            work = 1
            for loop in loops:
                work *= _extent(sch, loop) or 1
            if lead:
                _parallel_outer(sch, lead, work, "reduction")
        return sch


def _dot_product_per_output(stmt) -> bool:
    """Whether a reduction block is a multiply-accumulate of two buffers (a contraction, not a sum or a mean) that
    writes one element per output row (its output's last axis is 1 long) and reduces over one loop longer than 1
    (:data:`UNIT_ROW_DOT_PRODUCTS`)."""
    if len(stmt.writes) != 1:
        return False
    products = []
    tvm_ffi.structural_walk(stmt.body, (tirx.Mul, lambda node: products.append(node)), order="post")
    if not products or len({str(rd.source.name) for rd in stmt.reads} - {str(stmt.writes[0].source.name)}) < 2:
        return False
    shape = stmt.writes[0].source.shape
    reduced = [iv.dom.extent for iv in stmt.iter_vars if iv.iter_type == tirx.IterVar.CommReduce]
    return (bool(shape) and isinstance(shape[-1], tirx.IntImm) and int(shape[-1]) == 1
            and all(isinstance(e, tirx.IntImm) for e in reduced) and sum(int(e) > 1 for e in reduced) == 1)


#: A dot product whose operand is read with a stride along the reduction (a 1x1 convolution at stride 2 over a 2x2
#: map reads one input pixel of four, its channels 4 floats apart) reads it laid out with that axis last, written
#: so once a call, instead of strided vector loads for every output (:func:`_compact_strided_operands`), when it
#: has the work to run in parallel (``PARALLEL_MIN_WORK["reduction"]`` multiply-adds): on the Zen 3 the three
#: strided 1x1s of ``cnn_tiny_maps`` with 96-256 input channels ran 2.6-3.5x faster so, the five with 16-64 (run
#: on one thread) 0.79-0.90x (the copy costs more than their strided loads; ``experiments/dot_products.py
#: --compact-only``, session 63). False: strided loads always.
COMPACT_STRIDED_DOT_OPERANDS = True


def _axis_last(axis: int):
    """The index map that moves ``axis`` of a buffer after its others."""
    return lambda *idx: [*idx[:axis], *idx[axis + 1:], idx[axis]]


def _compact_strided_operands(sch: s_tir.Schedule, block) -> list[str]:
    """Lay out each operand that the reduction ``block`` reads with a stride along its one reduced loop longer
    than 1 (the reduced variable indexes an axis followed by axes longer than 1) with that axis last, so that the
    reduction reads it contiguously: the operand's producer in this kernel (a convolution's ``pad_temp``) writes
    it so, and an operand that is an argument is first copied (``cache_read``). The names of the operands laid
    out anew."""
    stmt = sch.get(block)
    reduced = [iv.var for iv in stmt.iter_vars
               if iv.iter_type == tirx.IterVar.CommReduce and int(iv.dom.extent) > 1]
    if len(reduced) != 1:
        return []
    written = {str(w.source.name) for w in stmt.writes}
    strided = []
    for index, read in enumerate(stmt.reads):
        if str(read.source.name) in written:
            continue
        axes = [i for i, rng in enumerate(read.region) if any(v.same_as(reduced[0]) for v in _vars_in(rng.min))]
        if len(axes) == 1 and any(int(d) > 1 for d in read.source.shape[axes[0] + 1:]):
            strided.append((index, axes[0]))
    laid_out = []
    allocated = {str(buf.name) for buf in sch.get(_root(sch)).alloc_buffers}
    for index, axis in strided:
        name = str(sch.get(block).reads[index].source.name)
        if name not in allocated:  # an argument of the kernel
            sch.cache_read(block, index, "global")
            name = str(sch.get(block).reads[index].source.name)
        sch.transform_layout(block, ("read", index), _axis_last(axis))
        laid_out.append(name)
    return laid_out


class DotProduct(RowReduction):
    """A contraction that is one dot product per output element (:data:`UNIT_ROW_DOT_PRODUCTS`: a 1x1 convolution
    over a 1x1 map, a matmul by one column), which :class:`Contraction` declines: accumulated along the reduction
    in vector lanes, as :class:`RowReduction` does a sum (TVM's ``dlight`` GEMV rule, next in line, vectorised such
    a convolution across output channels with strided loads of the weights, and took a minute to compile)."""

    def apply(self, func, target, _tunable):
        if not UNIT_ROW_DOT_PRODUCTS or not isinstance(func, tirx.PrimFunc):
            return None
        sch = s_tir.Schedule(func)
        reductions = [b for b in sch.get_child_blocks(_root(sch)) if not _is_spatial(sch.get(b))]
        stmt = sch.get(reductions[0]) if len(reductions) == 1 else None
        if stmt is None or not _is_reduction(stmt) or not _dot_product_per_output(stmt):
            return None
        work = math.prod(int(iv.dom.extent) for iv in stmt.iter_vars)
        # a layout the primitives refuse leaves the strided loads (GEMV, next in line, compiles for a minute)
        if (COMPACT_STRIDED_DOT_OPERANDS and work >= PARALLEL_MIN_WORK["reduction"]
                and _attempt(_compact_strided_operands, sch, reductions[0])):
            func = sch.mod["main"]
        return super().apply(func, target, _tunable)


class ConvLanes(CPUScheduleRule):
    """A convolution legalized as dot products per output (:func:`_te_conv2d_lanes`: blocks ``im2col``,
    ``conv2d_lanes``, ``conv2d_nchw``). A tile of ``uo`` output channels by ``up`` map positions (all of a 2x2
    map's 4) accumulates ``uo x up`` vectors of :func:`conv_lanes` partial sums in registers along the reduction,
    each weight vector read once for the ``up`` positions, each input vector once for the ``uo`` channels; the
    tile adds its lanes up and applies the elementwise epilogue (bias, residual add, ReLU) as it stores. Tiles run
    in parallel where the work pays for a second thread; the padded input and ``im2col`` are their own vectorised
    blocks."""

    def apply(self, func, target, _tunable):
        if not TINY_MAP_LANES_CONV or not isinstance(func, tirx.PrimFunc) or not self.is_target_available(target):
            return None
        sch = s_tir.Schedule(func)
        blocks = sch.get_child_blocks(_root(sch))
        names = [str(sch.get(b).name_hint) for b in blocks]
        if "conv2d_lanes" not in names or "im2col" not in names:
            return None
        at = names.index("conv2d_lanes")
        part, lane_sum = blocks[at], blocks[at + 1]
        if len(sch.get_consumers(part)) != 1 or str(sch.get(lane_sum).name_hint) != "conv2d_nchw":
            return None
        bits = vector_bits(target)
        max_lanes = max(bits // 32, 1)
        b, o, y, x, lane, ko = sch.get_loops(part)
        c_out, positions = _extent(sch, o), _extent(sch, y) * _extent(sch, x)
        uo, up = conv_lanes_tile(c_out, positions, bits, _extent(sch, lane))
        p = sch.fuse(y, x)
        oo, oi = sch.split(o, factors=[None, uo])
        po, pi = sch.split(p, factors=[None, up])
        sch.reorder(b, oo, po, ko, oi, pi, lane)
        # the lane sums and the epilogue per tile; an epilogue writing past the output (a fused padding) at the root
        out_shape = [int(v) for v in sch.get(lane_sum).writes[0].source.shape]
        sch.reverse_compute_at(lane_sum, po, preserve_unit_loops=True)
        tiled = [lane_sum]
        at_root = []
        for block in blocks[at + 2:]:
            stmt = sch.get(block)
            if (_has_if_then_else(stmt) or [int(v) for v in stmt.writes[0].source.shape] != out_shape
                    or not _attempt(sch.reverse_compute_at, block, po, preserve_unit_loops=True)):
                at_root.append(block)
            else:
                tiled.append(block)
        sch.set_scope(part, 0, "local")
        fused = sch.fuse(b, oo, po)
        work = c_out * positions * (_extent(sch, lane) or 1) * (_extent(sch, ko) or 1)
        if work >= PARALLEL_MIN_WORK["contraction"] and (_extent(sch, fused) or 0) > 1:
            sch.parallel(fused)
        sch.vectorize(lane)
        sch.unroll(oi)
        sch.unroll(pi)
        init = sch.decompose_reduction(part, ko)
        sch.vectorize(sch.get_loops(init)[-1])
        for block in tiled:  # unrolled: the partial sums are then registers, not a stack array
            for loop in sch.get_loops(block)[1:]:
                sch.unroll(loop)
        for block in at_root:
            _schedule_injective_block(sch, block, max_lanes)
        for block in blocks[:at]:  # the padded input, im2col
            _schedule_injective_block(sch, block, max_lanes)
        return sch


class Injective(CPUScheduleRule):
    """Elementwise / broadcast / layout kernels: inline what can be, then parallel + vectorised blocks."""

    def apply(self, func, target, _tunable):
        if not isinstance(func, tirx.PrimFunc) or not self.is_target_available(target):
            return None
        sch = s_tir.Schedule(func)
        blocks = sch.get_child_blocks(_root(sch))
        if not blocks or not all(_is_spatial(sch.get(b)) for b in blocks):
            return None
        lanes = max(vector_bits(target) // 32, 1)
        _try_inline_all(sch, blocks)
        for block in sch.get_child_blocks(_root(sch)):
            _schedule_injective_block(sch, block, lanes)
        return sch


def default_rules() -> list:
    """The CPU rules in the order they are tried."""
    return [Pool(), ConvLanes(), Contraction(), DotProduct(), dl.cpu.GEMV(), RowReduction(), Injective()]


# ----------------------------------------------------------------------------------------------------
# The pass
# ----------------------------------------------------------------------------------------------------

def _lowering_check():
    """The block-level part of ``tvm.tirx.build``'s lowering (no code generation): a schedule that
    leaves an ill-formed kernel fails here, in milliseconds, instead of failing the whole build."""
    from tvm.s_tir import transform as st

    return tvm.transform.Sequential([
        st.CanonicalizeLoop(), st.LowerInitBlock(), st.PlanAndUpdateBufferAllocationLocation(),
        st.ConvertBlocksToOpaque(), st.CompactBufferAllocation(), st.LowerMatchBuffer(), st.StmtSimplify(),
        st.LowerOpaqueBlock(), tirx.transform.FlattenBuffer(), tirx.transform.NarrowDataType(32),
        st.LoopPartition(), tirx.transform.VectorizeLoop(True), tirx.transform.StorageRewrite(),
        tirx.transform.UnrollLoop(), tirx.transform.StmtSimplify(),
    ])


def lowers(func: tirx.PrimFunc, target: Target) -> bool:
    """Whether ``func`` goes through TVM's block lowering for ``target`` (see :func:`_lowering_check`)."""
    try:
        with target:
            _lowering_check()(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}))
    except Exception:  # an ill-formed schedule; TVM raises InternalError / TVMError
        return False
    return True


def _has_partition_hint(func: tirx.PrimFunc) -> bool:
    hinted = []
    tvm_ffi.structural_walk(func.body, (tirx.For, lambda loop: hinted.append(PARTITION_HINT in loop.annotations)),
                            order="post")
    return any(hinted)


def _narrow_to_int32(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with 32-bit loop and buffer indices (``ForceNarrowIndexToInt32``, as dlight does for GPU
    kernels). A Relax kernel's are 64-bit, and TVM's ``NarrowDataType`` narrows the loops during lowering
    but not the loop an annotation (:data:`PARTITION_HINT`) names, so ``LoopPartition`` would not split it: a
    max over rows of 197 stayed scalar (197 us, 35 us narrowed first). A kernel TVM refuses to narrow (one with
    64-bit integer data: token ids) is kept as it is, its hinted loop a predicated tail as before version 10."""
    try:
        return tirx.transform.ForceNarrowIndexToInt32()(tvm.IRModule({"main": func}))["main"]
    except Exception:  # TVM raises InternalError for int64 buffers
        return func


def runs_in_parallel(func: tirx.PrimFunc) -> bool:
    """Whether ``func`` has a parallel loop (runs on TVM's thread pool): what :data:`PARALLEL_MIN_WORK`
    decided for a scheduled kernel. Profile records carry it (``parallel``) for the cost model."""
    kinds = []
    tvm_ffi.structural_walk(func.body, (tirx.For, lambda loop: kinds.append(loop.kind)), order="post")
    return any(kind == tirx.ForKind.PARALLEL for kind in kinds)


#: Kernels no rule schedules (TOPI's cumsum: a parallel loop over the rows it scans, written as loops, not blocks):
#: their parallel loops run serially when they write fewer than :data:`UNSCHEDULED_PARALLEL_MIN_WORK` output
#: elements (schedule version 11). False: parallel whatever the work, as TOPI writes them: on the Zen 4 a 2x64
#: cumsum took 0.8-2.9 us (a thread-pool wake), 0.07 us serial; a 1x8 one (a loop of one, run inline) 8 ns.
SERIAL_SMALL_UNSCHEDULED = True
#: Output elements from which such a kernel stays parallel: a scan is a chain of dependent scalar adds (0.8 ns each
#: on the Zen 4), so two threads pay off sooner than for a vectorised row reduction: a 5x512 cumsum ran in
#: 1.6 us on two threads, 2.0 us on one (session 37, the cumsum op family's models
#: timed both ways).
UNSCHEDULED_PARALLEL_MIN_WORK = 1 << 11


def _serial_when_small(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with its parallel loops serial when it writes fewer than :data:`UNSCHEDULED_PARALLEL_MIN_WORK`
    output elements (a scan's loop nest runs once per element it writes); a loop of one is always serial."""
    shape = list(getattr(func.params[-1].ty, "shape", None) or []) if func.params else []  # the output buffer
    static = bool(shape) and all(isinstance(d, tirx.IntImm) for d in shape)
    small = static and math.prod(int(d) for d in shape) < UNSCHEDULED_PARALLEL_MIN_WORK

    def serial(loop):
        if loop.kind != tirx.ForKind.PARALLEL or not isinstance(loop.extent, tirx.IntImm):
            return loop
        if int(loop.extent) > 1 and not small:
            return loop
        return tirx.For(loop.loop_var, loop.min, loop.extent, tirx.ForKind.SERIAL, loop.body, loop.thread_binding,
                        loop.annotations, loop.step, loop.span)

    return func.with_body(tvm_ffi.structural_map(func.body, (tirx.For, serial)))


def schedule_prim_func(func: tirx.PrimFunc, target: Target, rules=None) -> tuple[tirx.PrimFunc, str]:
    """``(scheduled func, rule name)``; ``(func, "none")`` when no rule applies or every rule failed.

    A rule that raises, or whose schedule does not lower (:func:`lowers`), is skipped for the next.
    """
    for rule in rules if rules is not None else default_rules():
        try:
            sch = rule.apply(func, target, False)
        except Exception:  # a rule that cannot handle this kernel: the next one is tried
            sch = None
        if sch is None:
            continue
        if isinstance(sch, (list, tuple)):
            sch = sch[0]
        out = sch.mod["main"]
        if _has_partition_hint(out):
            out = _narrow_to_int32(out)
        if not lowers(out, target):
            continue
        name = type(rule).__name__
        if name in STRIDED_LOAD_RULES:
            out = mark_strided_loads(out)
        return out.with_attr("tirx.is_scheduled", True).with_attr(RULE_ATTR, name), name
    if SERIAL_SMALL_UNSCHEDULED:
        func = _serial_when_small(func)
    return func.with_attr(RULE_ATTR, "none"), "none"


def schedule_cpu_kernels(mod: tvm.IRModule, rules=None, default_target=None) -> tvm.IRModule:
    """Schedule every unscheduled PrimFunc whose ``target`` is ``llvm`` (other kernels untouched).

    ``default_target`` is used for kernels that carry no ``target`` attribute (a single-device
    ``tvm.compile(mod, target)`` build); without it they are left alone.
    """
    updates = {}
    for gvar, func in mod.functions_items():
        if not isinstance(func, tirx.PrimFunc):
            continue
        target = func.attrs.get("target") if func.attrs is not None else None
        target = target if target is not None else default_target
        if target is None or target.kind.name != "llvm":
            continue
        if func.attrs is not None and (func.attrs.get("tirx.is_scheduled") or func.attrs.get(RULE_ATTR)):
            continue
        updates[gvar], _ = schedule_prim_func(func, target, rules)
    for gvar, func in updates.items():
        mod[gvar] = func
    return mod


def rule_counts(mod: tvm.IRModule) -> dict:
    """``{rule name: number of llvm kernels it scheduled}`` in a lowered module (``"none"``: fell back)."""
    counts: dict = {}
    for _, func in mod.functions_items():
        if isinstance(func, tirx.PrimFunc) and func.attrs is not None and RULE_ATTR in func.attrs:
            name = str(func.attrs[RULE_ATTR])
            counts[name] = counts.get(name, 0) + 1
    return counts
