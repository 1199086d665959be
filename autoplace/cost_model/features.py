"""Features of a fused kernel ("unit") for the cost model, computed from its profile record alone.

A unit is described by the record :func:`autoplace.profile.job.unit_record` makes (the same dict for a
measured kernel and for one never measured): the Relax ops it fuses, its argument shapes and
dtypes, the attributes and input shapes of its anchor (heaviest) op, a FLOP estimate and the bytes
it reads and writes. :func:`record_features` turns one such record into a flat ``{name: float}``
dict; names never depend on the data, so a record of an op type never seen still gets every
feature (its op class, sizes and access pattern), and the model can price it.

Feature groups
--------------
``size_*``
    log2 of FLOPs, bytes in/out, the largest argument, output elements; arithmetic intensity
    (log2 FLOPs per byte); numbers of arguments, outputs and fused ops; dtype width.
``cls_*`` / ``anchor_cls_*``
    counts of fused ops per op class (matmul, conv, pool, norm, softmax, reduce, transcendental,
    elementwise, layout, gather, cast, create, other) and a one-hot of the anchor's class. A class is
    decided by the op's name, so an op type the model never saw still falls in a class.
``mm_*``, ``conv_*``, ``pool_*``, ``red_*``, ``perm_*``, ``row_*``
    the anchor's geometry: matmul batch/M/N/K; convolution channels, image, kernel, stride,
    padding, dilation, groups (depthwise flag); pooling window; reduced length and whether the
    reduction runs along the innermost axis; whether a permutation moves the innermost axis; the
    row length of a norm/softmax.
``mem_*``
    the innermost loop's strided access stream of a naive (unscheduled) kernel, as TVM's
    legalization writes it: matmul reads ``B[k, j]`` down a column, an NCHW convolution walks input
    channels ``H*W`` elements apart, a transpose reads down columns. The stream's distinct cache
    lines, stride and 4 KiB pages, how far it overflows the cache sets it maps to (``mem_l1_over``,
    ``mem_l2_over``: log2 of the largest lines-per-set over the ways) for the set-associative
    geometry :data:`CACHE_LEVELS`, and the first level it overflows (``mem_level``). Power-of-two
    strides crowd few sets: on CPU profiles they explain 10x swings of time per FLOP between kernels
    of the same op type (a 128x128 transpose costs 5x more per element than a 64x128 one).

``op_*``, ``geo_*`` (and ``size_bytes_per_out``, ``size_work``)
    what carries an op family's cost to shapes and kernels it was never measured at, with the same
    meaning across op classes: inline transcendental evaluations and scalar C-library calls per output
    element of the fused kernel (:data:`TRANSCENDENTALS`: gelu 1, power 0; :data:`LIBM_CALLS`: sin 1,
    softplus's log 1), fused transpositions, scans; the anchor's
    window (conv ``kh*kw`` or ``k``, pool window, adaptive pools included), stride, spatial rank, groups
    and channels per group (convolutions and group norms), elements reduced per output element
    (matmul ``K``, conv ``Cin/groups * window``, pool window, reduced length, norm/softmax row),
    input elements per output element, rows gathered and the contiguous run each copies; bytes
    moved per output element and the work term (:func:`work`). These were added after feature
    version 1 without changing any earlier feature: a model saved with the earlier list still
    predicts (it reads only the features it was trained on).
``read_*``
    how a purely spatial (data-movement, elementwise) kernel reads its inputs as it writes its output in
    order: the largest index step per output step and the share of input elements read down columns
    (:data:`READ_FEATURES`, from the records' ``read_strides``; added without changing earlier features).

Notes
-----
Sizes enter as log2 (and the target is log latency), so features and errors are relative. Missing
values (a record without anchor attributes) are NaN, which XGBoost treats as missing.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

import numpy as np

#: Bump when a feature changes meaning: saved models record it and refuse to load across versions.
FEATURE_VERSION = 6

#: ``(name, line_bytes, sets, ways)`` of the cache levels the access-stream features map onto:
#: a typical x86 server core (32 KiB 8-way L1D, 512 KiB 8-way L2, 64-byte lines; the AMD EPYC (Zen 3)
#: of the reference profile has exactly these). They shape features only; the model learns what each
#: overflow costs on the profiled machine.
CACHE_LEVELS = (("l1", 64, 64, 8), ("l2", 64, 1024, 8))

#: Op classes, in feature order. An op's class comes from its short name (see :func:`op_class`).
OP_CLASSES = ("matmul", "conv", "pool", "norm", "softmax", "reduce", "transcendental", "elementwise", "layout", "gather", "cast", "create", "other")

_CLASS_OF = {}
for _cls, _names in {
    "matmul": "matmul linear dense batch_matmul einsum",
    "norm": "layer_norm batch_norm group_norm rms_norm instance_norm",
    "softmax": "softmax log_softmax",
    "reduce": "sum mean max min prod variance std argmax argmin cumsum cumprod",
    "transcendental": "exp log tanh sigmoid gelu gelu_tanh erf sqrt rsqrt sin cos tan power silu softplus "
    "log1p exp2 log2 log10 atan asin acos sinh cosh selu elu mish",
    "elementwise": "add subtract multiply divide floor_divide maximum minimum relu leakyrelu prelu where "
    "greater greater_equal less less_equal equal not_equal negative abs clip floor ceil round "
    "sign square logical_and logical_or logical_not bitwise_and bitwise_or mod floor_mod "
    "isnan isinf isfinite dropout relu6 hardswish hardsigmoid trunc",
    "layout": "reshape permute_dims transpose broadcast_to expand_dims squeeze flatten strided_slice "
    "dynamic_strided_slice concat concatenate split repeat tile flip pad layout_transform "
    "collapse_sum_like collapse_sum_to",
    "gather": "take gather_elements gather_nd scatter_elements scatter_nd index_tensor one_hot embedding",
    "cast": "astype cast",
    "create": "full full_like zeros zeros_like ones ones_like arange tril triu eye",
}.items():
    for _name in _names.split():
        _CLASS_OF[_name] = _cls

#: Prior cost per output element of ops of these classes, in simple operations (an add costs 1): what
#: the work term of a model adds for them (:func:`work`), so an op class no training record had is not
#: priced like a copy. Rough instruction counts of exp/erf/tanh (and softmax's exp, max, sum, divide).
EXTRA_WORK_PER_ELEMENT = {"transcendental": 20.0, "softmax": 12.0}
#: Work of one scalar C-library call per element (:data:`LIBM_CALLS`), in the same simple operations.
LIBM_WORK_PER_CALL = 80.0

#: Transcendental functions TVM 0.27's LLVM code generator evaluates inline, vectorised (exp as a polynomial,
#: and erf, tanh, sigmoid from it; sqrt and rsqrt as instructions), per output element of an op, as TVM's
#: legalization computes it: ``gelu`` is ``x * (0.5 + 0.5 * erf(x / sqrt 2))`` (1), ``gelu_tanh`` ``tanh`` of
#: a cubic (1: ``pow(x, 3)`` becomes multiplies), ``softplus`` ``log(1 + exp(x))`` (1, plus a libm ``log``),
#: ``softmax`` one ``exp``. Norms take one ``rsqrt`` per row, not per element (0). ``power`` counts 0: the
#: exponents models use are small integer constants (``x ** 2`` of RMS and T5 norms, ``x ** 3`` of tanh-GELU),
#: which LLVM turns into multiplies (``x ** 0.5`` into a square root); a fractional exponent is a ``powf``
#: call per element the record does not show (a Relax constant argument).
TRANSCENDENTALS = {
    **dict.fromkeys(
        ("exp", "exp2", "tanh", "sigmoid", "erf", "gelu", "gelu_tanh", "silu", "sqrt", "rsqrt", "sinh", "cosh",
         "elu", "selu", "softmax", "log_softmax", "softplus"),
        1.0,
    ),
    "mish": 2.0,
    "power": 0.0,
}
#: Scalar C-library calls per output element: TVM 0.27 lowers these to ``llvm.sin.v8f32``-style intrinsics
#: that x86 LLVM splits into one ``sinf`` / ``logf`` / ``atanf``... call per lane (read off the kernels'
#: assembly). On the Zen 3 one costs about four inline evaluations (RoPE's ``sin``: 2.5 ns per element on one
#: thread; ``exp``: 0.66 ns).
LIBM_CALLS = {
    **dict.fromkeys(
        ("log", "log1p", "log2", "log10", "sin", "cos", "tan", "asin", "acos", "atan", "asinh", "acosh",
         "atanh", "softplus", "mish"),
        1.0,
    ),
}
_SCANS = {"cumsum", "cumprod"}

#: Names TVM's legalization gives kernels (``fused_<name>N_llvm_...``) that differ from the Relax op.
_ALIASES = {
    "transpose": "permute_dims",
    "cast": "astype",
    "concatenate": "concat",
    "gather": "gather_elements",
    "T": None,
}
_NN_OPS = {"softmax", "log_softmax", "gelu", "gelu_tanh", "relu", "silu", "layer_norm", "batch_norm", "group_norm", "rms_norm", "instance_norm", "conv1d", "conv2d", "conv3d", "conv1d_transpose", "conv2d_transpose", "max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d", "dropout", "leakyrelu", "prelu", "pad", "softplus", "selu", "attention"}
_ND_NAME = re.compile(r"^(.*[123]d)\d*$")  # conv2d1 -> conv2d, max_pool2d -> max_pool2d
_TARGET_MARKERS = re.compile(r"_(llvm|cuda|rocm|metal|vulkan|opencl|c)(?=_|$)")


def short_name(op: str) -> str:
    """``"relax.nn.conv2d"`` -> ``"conv2d"``."""
    return str(op).rsplit(".", 1)[-1]


def op_class(op: str) -> str:
    """The class of an op (one of :data:`OP_CLASSES`) from its name; ``"other"`` when unknown."""
    name = short_name(op)
    if name in _CLASS_OF:
        return _CLASS_OF[name]
    if name.startswith("conv"):
        return "conv"
    if "pool" in name:
        return "pool"
    if name.endswith("_norm"):
        return "norm"
    return "other"


def _full_name(short: str) -> str:
    return f"relax.nn.{short}" if short in _NN_OPS else f"relax.{short}"


def ops_from_func_name(func_name: str) -> list[str]:
    """Relax op names read off a kernel's name (``fused_softmax_llvm_broadcast_to5_llvm`` ->
    ``["relax.nn.softmax", "relax.broadcast_to"]``); unknown pieces are dropped.

    The op list of a record can miss ops its kernel computes (an op whose inputs were folded);
    the kernel name, which TVM builds from every fused op, fills those in.
    """
    text = _TARGET_MARKERS.sub("", str(func_name or ""))
    text = text.removeprefix("fused_")
    pieces = [p for p in text.split("_") if p]
    known = set(_CLASS_OF) | _NN_OPS | set(_ALIASES)
    out, i = [], 0
    while i < len(pieces):
        for width in (3, 2, 1):
            if i + width > len(pieces):
                continue
            cand = "_".join(pieces[i : i + width])
            nd = _ND_NAME.match(cand)
            stripped = nd.group(1) if nd else cand.rstrip("0123456789")
            if stripped in known:
                name = _ALIASES.get(stripped, stripped)
                if name:
                    out.append(_full_name(name))
                i += width
                break
        else:
            i += 1
    return out


def unit_ops(record: Mapping) -> list[str]:
    """The ops of a unit: its ``ops`` list plus ops its kernel name shows that the list lacks."""
    ops = [str(o) for o in (_get(record, "ops") or [])]
    have = {short_name(o) for o in ops}
    for op in ops_from_func_name(_get(record, "func_name", "")):
        if short_name(op) not in have:
            ops.append(op)
            have.add(short_name(op))
    if not ops and _get(record, "anchor_op"):
        ops = [str(_get(record, "anchor_op"))]
    return ops


def _get(record: Mapping, name: str, default=None):
    try:
        value = record[name]
    except (KeyError, IndexError, TypeError):
        return default
    if value is None:
        return default
    if isinstance(value, float) and math.isnan(value):
        return default
    return value


def _log2(x) -> float:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return math.nan
    if math.isnan(x):
        return math.nan
    return math.log2(1.0 + max(x, 0.0))


def _bits(dtype: str) -> int:
    dtype = str(dtype)
    if dtype == "bool":
        return 8
    digits = "".join(c for c in dtype if c.isdigit())
    return int(digits) if digits else 32


def _prod(shape) -> int:
    return int(math.prod(int(d) for d in shape)) if shape is not None else 0


def _shapes(value) -> list[list[int]]:
    out = []
    for s in value or []:
        try:
            out.append([int(d) for d in s])
        except TypeError:
            out.append([])
    return out


def _pair(value, default=1) -> list[int]:
    if value is None:
        return [default, default]
    if isinstance(value, (int, float)):
        return [int(value), int(value)]
    value = [int(v) for v in value]
    return value if len(value) >= 2 else (value * 2 if value else [default, default])


# -- access-stream features ------------------------------------------------------------------------
def stream_lines(dims, elem_bytes: int, *, limit: int = 1 << 15) -> np.ndarray:
    """Distinct cache-line addresses (line index, 64-byte lines) of a nested strided access.

    Parameters
    ----------
    dims : list of (stride_elems, extent)
        Loops of the stream, outermost first; address = sum(index_i * stride_i) * elem_bytes.
    elem_bytes : int
    limit : int
        At most this many addresses are generated (the outer loops are cut).
    """
    addr = np.zeros(1, dtype=np.int64)
    for stride, extent in reversed(list(dims)):
        extent = max(1, int(extent))
        extent = min(extent, max(1, limit // max(1, addr.size)))
        addr = (np.arange(extent, dtype=np.int64)[:, None] * int(stride) + addr[None, :]).ravel()
    line = CACHE_LEVELS[0][1]
    return np.unique(addr * int(elem_bytes) // line)


def _stream_features(dims, elem_bytes: int) -> dict:
    """``mem_*`` features of the innermost strided stream (see the module notes)."""
    feats = {
        "mem_lines": 0.0,
        "mem_stride": 0.0,
        "mem_stride_pow2": 0.0,
        "mem_l1_over": 0.0,
        "mem_l2_over": 0.0,
        "mem_pages": 0.0,
        "mem_level": 0.0,
    }
    dims = [(int(s), int(e)) for s, e in dims if int(e) > 1]
    if not dims:
        return feats
    lines = stream_lines(dims, elem_bytes)
    stride_bytes = max(s for s, _ in dims) * elem_bytes
    feats["mem_lines"] = _log2(lines.size)
    feats["mem_stride"] = _log2(stride_bytes)
    feats["mem_stride_pow2"] = (
        float(min(20, (stride_bytes & -stride_bytes).bit_length() - 1)) if stride_bytes else 0.0
    )
    level = 0
    for i, (name, _line, sets, ways) in enumerate(CACHE_LEVELS):
        per_set = np.bincount(lines % sets, minlength=sets)
        feats[f"mem_{name}_over"] = math.log2(max(1.0, per_set.max() / ways))
        if per_set.max() > ways:
            level = i + 1
    # 4 KiB pages the stream touches (a hardware prefetcher does not cross pages).
    feats["mem_pages"] = _log2(np.unique(lines * CACHE_LEVELS[0][1] // 4096).size)
    feats["mem_level"] = float(level)
    return feats


# -- the anchor op's geometry ------------------------------------------------------------------------
def _matmul(a, b, eb) -> tuple[dict, list]:
    a = a if len(a) >= 2 else [1] + list(a)
    b = b if len(b) >= 2 else list(b) + [1]
    m, k, n = a[-2], a[-1], b[-1]
    batch = max(_prod(a[:-2]), _prod(b[:-2]), 1)
    f = {"mm_batch": _log2(batch), "mm_m": _log2(m), "mm_n": _log2(n), "mm_k": _log2(k)}
    # C[i, j] += A[i, k] * B[k, j]: the k loop reads B down a column (stride n).
    return f, [(n, k)]


def _conv_geometry(attrs, data, weight) -> dict | None:
    """A convolution's layouts, channels, window, strides, padding and output size (None when the layouts do
    not match the shapes)."""
    nd = len(data) - 2
    layout = str(attrs.get("data_layout") or ("NCHW" if nd == 2 else "NCW"))
    klayout = str(attrs.get("kernel_layout") or ("OIHW" if nd == 2 else "OIW"))
    if nd < 1 or len(layout) != len(data) or len(klayout) != len(weight):
        return None
    spatial = [data[i] for i, ch in enumerate(layout) if ch not in "NC"]
    ksp = [weight[i] for i, ch in enumerate(klayout) if ch not in "OI"]
    strides = list(attrs.get("strides") or [1] * nd)
    dil = list(attrs.get("dilation") or [1] * nd)
    pad = list(attrs.get("padding") or [0] * (2 * nd))
    pad = pad + [0] * (2 * nd - len(pad)) if len(pad) < 2 * nd else pad
    padded = [spatial[i] + pad[i] + pad[i + nd] for i in range(nd)]
    out = [(padded[i] - dil[i] * (ksp[i] - 1) - 1) // max(1, strides[i]) + 1 for i in range(nd)]
    return dict(nd=nd, layout=layout, c=data[layout.index("C")], cout=weight[klayout.index("O")],
                groups=int(attrs.get("groups", 1) or 1), spatial=spatial, ksp=ksp, strides=strides, dil=dil,
                pad=pad, padded=padded, out=out)


def _conv(attrs, shapes, eb) -> tuple[dict, list]:
    geo = _conv_geometry(attrs, shapes[0], shapes[1])
    if geo is None:
        return {}, []
    nd, layout, c, o, groups = geo["nd"], geo["layout"], geo["c"], geo["cout"], geo["groups"]
    spatial, ksp, strides, dil, pad, padded, out = (geo[k] for k in ("spatial", "ksp", "strides", "dil", "pad",
                                                                     "padded", "out"))
    h, w = (spatial + [1, 1])[:2] if nd >= 2 else (1, spatial[0])
    kh, kw = (ksp + [1, 1])[:2] if nd >= 2 else (1, ksp[0])
    oh, ow = (out + [1, 1])[:2] if nd >= 2 else (1, out[0])
    f = {
        "conv_cin": _log2(c),
        "conv_cout": _log2(o),
        "conv_h": _log2(h),
        "conv_w": _log2(w),
        "conv_oh": _log2(oh),
        "conv_ow": _log2(ow),
        "conv_kh": float(kh),
        "conv_kw": float(kw),
        "conv_stride": float(max(strides)),
        "conv_pad": float(sum(pad)),
        "conv_dilation": float(max(dil)),
        "conv_groups": _log2(groups),
        "conv_depthwise": float(groups > 1 and groups == c),
        "conv_cin_per_group": _log2(c // max(1, groups)),
        "conv_channels_last": float(layout.endswith("C")),
    }
    if layout.endswith("C"):  # NHWC: channels are contiguous
        return f, [(1, c // max(1, groups)), (padded[-1] * c if nd >= 1 else 1, kh)]
    # NCHW: for one output, loops rc (plane stride), ry (row stride), rx (contiguous).
    plane = _prod(padded)
    row = padded[-1]
    return f, [(plane, c // max(1, groups)), (row * dil[0], kh), (dil[-1], kw)]


def _pool(attrs, shape, eb) -> tuple[dict, list]:
    size = _pair(attrs.get("pool_size"))
    strides = _pair(attrs.get("strides"))
    pad = list(attrs.get("padding") or [0, 0, 0, 0])
    row = (shape[-1] + (pad[1] + pad[3] if len(pad) >= 4 else 0)) if shape else 1
    f = {"pool_window": float(math.prod(size)), "pool_stride": float(max(strides))}
    return f, [(row, size[0]), (1, size[-1])]


def _axes(value, rank) -> list[int]:
    if value is None:
        return list(range(rank))
    value = [value] if isinstance(value, (int, float)) else list(value)
    return sorted({int(a) % rank for a in value}) if rank else []


def _reduce(attrs, shape, eb) -> tuple[dict, list]:
    rank = len(shape)
    axes = _axes(attrs.get("axis", attrs.get("axes")), rank)
    length = _prod([shape[a] for a in axes]) if axes else 1
    inner = float(rank - 1 in axes) if rank else 1.0
    f = {"red_len": _log2(length), "red_inner": inner}
    if inner or not axes:
        return f, []
    a = max(axes)
    return f, [(_prod(shape[a + 1 :]), shape[a])]


def _permute(attrs, shape, eb) -> tuple[dict, list]:
    rank = len(shape)
    axes = attrs.get("axes")
    axes = list(range(rank))[::-1] if axes is None else [int(a) % max(1, rank) for a in axes]
    if not axes:
        return {"perm_moves_inner": 0.0}, []
    moves = float(axes[-1] != rank - 1)
    f = {"perm_moves_inner": moves}
    if not moves:
        return f, []
    # Output written in order; its innermost loop reads the input along axes[-1].
    return f, [(_prod(shape[axes[-1] + 1 :]), shape[axes[-1]])]


def _row(attrs, shape, eb) -> tuple[dict, list]:
    rank = len(shape)
    axes = _axes(attrs.get("axes", attrs.get("axis", -1)), rank)
    length = _prod([shape[a] for a in axes]) if axes else 1
    return {"row_len": _log2(length), "row_inner": float(bool(rank) and rank - 1 in axes)}, []


_GEOMETRY_FEATURES = (
    "mm_batch",
    "mm_m",
    "mm_n",
    "mm_k",
    "conv_cin",
    "conv_cout",
    "conv_h",
    "conv_w",
    "conv_oh",
    "conv_ow",
    "conv_kh",
    "conv_kw",
    "conv_stride",
    "conv_pad",
    "conv_dilation",
    "conv_groups",
    "conv_depthwise",
    "conv_cin_per_group",
    "conv_channels_last",
    "pool_window",
    "pool_stride",
    "red_len",
    "red_inner",
    "perm_moves_inner",
    "row_len",
    "row_inner",
    "gather_table",
    "concat_inputs",
)


def _geometry(record: Mapping, eb: int) -> tuple[dict, list]:
    op = str(_get(record, "anchor_op", ""))
    name = short_name(op)
    attrs = _get(record, "anchor_attrs", {}) or {}
    if not isinstance(attrs, Mapping):
        attrs = {}
    shapes = _shapes(_get(record, "anchor_input_shapes"))
    cls = op_class(op)
    try:
        if cls == "matmul" and len(shapes) >= 2:
            return _matmul(shapes[0], shapes[1], eb)
        if cls == "conv" and len(shapes) >= 2 and not name.endswith("transpose"):
            return _conv(attrs, shapes, eb)
        if cls == "pool" and shapes and "adaptive" not in name:
            return _pool(attrs, shapes[0], eb)
        if cls == "reduce" and shapes:
            return _reduce(attrs, shapes[0], eb)
        if name == "permute_dims" and shapes:
            return _permute(attrs, shapes[0], eb)
        if cls in ("norm", "softmax") and shapes:
            return _row(attrs, shapes[0], eb)
        if cls == "gather" and shapes:
            return {"gather_table": _log2(_prod(shapes[0]))}, []
        if name in ("concat", "concatenate"):
            return {"concat_inputs": float(len(shapes))}, []
    except (IndexError, ValueError, TypeError, ZeroDivisionError):
        pass
    return {}, []


# -- features that carry an op's cost to new shapes ---------------------------------------------------
#: Added after feature version 1 (at the end of :func:`feature_names`; no earlier feature changed).
TRANSFER_FEATURES = (
    "op_trans_per_elem",
    "op_libm_per_elem",
    "op_permutes",
    "op_scan",
    "geo_window",
    "geo_stride",
    "geo_ndim",
    "geo_groups",
    "geo_ch_per_group",
    "geo_cout_per_group",
    "geo_red_per_out",
    "geo_in_per_out",
    "geo_gather_rows",
    "geo_gather_row_len",
    "geo_pool_avg",
    "size_bytes_per_out",
    "size_work",
)

#: The CPU Contraction schedule's register tile of a matmul or convolution anchor
#: (:meth:`autoplace.backend.cpu_schedules.Contraction.tile_plan`), for 256- and 512-bit vectors (the
#: model learns which one the profiled machine has): useful lanes, loads per multiply-add, whether the
#: output's innermost axis is left to a scalar predicated tail, rows per tile; the share of padded rows
#: and of padded columns (matmul only: a convolution's columns are not padded); the stride of the vector operand along the output's innermost axis (strided conv: gathers).
#: Since feature version 4, whether that tile is one odd-width vector (a convolution row of 13-32 no vector
#: divides: 3-5x faster than the scalar tail it replaced, still 5-15x slower per multiply-add than full
#: vectors). Then what the CPU record says the scheduled kernel does: runs in parallel (``parallel``),
#: accumulates a row reduction in vector lanes (``vector_reduce``, since feature version 3). (Records also
#: carry ``cpu_rule`` and ``vector_width``; as features they made the leave-one-family-out errors worse.)
#: Added after :data:`TRANSFER_FEATURES` (no earlier feature changed).
SCHEDULE_FEATURES = (
    "sched_lane_use_256",
    "sched_loads_256",
    "sched_tail_256",
    "sched_rows_256",
    "sched_lane_use_512",
    "sched_loads_512",
    "sched_tail_512",
    "sched_rows_512",
    "sched_odd_256",
    "sched_odd_512",
    "sched_row_pad",
    "sched_col_pad",
    "sched_v_stride",
    "sched_parallel",
    "sched_vector_reduce",
)


def transcendentals_per_element(ops) -> float:
    """Transcendental evaluations per output element of a kernel fusing ``ops`` (:data:`TRANSCENDENTALS`)."""
    return float(sum(TRANSCENDENTALS.get(short_name(op), 0.0) for op in ops))


def libm_calls_per_element(ops) -> float:
    """Scalar C-library calls per output element of a kernel fusing ``ops`` (:data:`LIBM_CALLS`)."""
    return float(sum(LIBM_CALLS.get(short_name(op), 0.0) for op in ops))


def _window_geometry(name: str, cls: str, attrs: Mapping, shapes: list, out_shape: list) -> dict:
    """``geo_*`` of a convolution or pooling anchor: window, stride, rank, groups, reduced elements."""
    data = shapes[0]
    nd = max(1, len(data) - 2)
    if cls == "conv":
        layout = str(attrs.get("data_layout") or ("NCHW" if nd == 2 else "NCW" if nd == 1 else "NCDHW"))
        klayout = str(attrs.get("kernel_layout") or ("OIHW" if nd == 2 else "OIW" if nd == 1 else "OIDHW"))
        weight = shapes[1]
        if len(layout) != len(data) or len(klayout) != len(weight):
            return {}
        c = data[layout.index("C")]
        window = _prod([weight[i] for i, ch in enumerate(klayout) if ch not in "OI"])
        groups = int(attrs.get("groups", 1) or 1)
        cin_g = weight[klayout.index("I")]  # input channels each output reads (Cin / groups)
        cout = weight[klayout.index("O")]
        if name.endswith("transpose"):
            cout, cin_g = cin_g * groups, c // max(1, groups)
        return dict(geo_window=float(window), geo_stride=float(max(list(attrs.get("strides") or [1]))),
                    geo_ndim=float(nd), geo_groups=_log2(groups), geo_ch_per_group=_log2(c // max(1, groups)),
                    geo_cout_per_group=_log2(cout // max(1, groups)), geo_red_per_out=_log2(cin_g * window))
    layout = str(attrs.get("layout") or "NCHW")
    spatial = [i for i, ch in enumerate(layout) if ch not in "NC"] if len(layout) == len(data) else []
    if "adaptive" in name:
        # Adaptive pooling: each output averages a window of about in/out elements per spatial axis.
        if not out_shape or len(out_shape) != len(data) or not spatial:
            return {}
        per_axis = [math.ceil(data[i] / max(1, out_shape[i])) for i in spatial]
        window, stride = _prod(per_axis), max(data[i] // max(1, out_shape[i]) for i in spatial)
    else:
        size = list(attrs.get("pool_size") or [1])
        window, stride = _prod(size), max(list(attrs.get("strides") or [1]))
    return dict(geo_window=float(window), geo_stride=float(stride), geo_ndim=float(len(spatial) or nd),
                geo_red_per_out=_log2(window), geo_pool_avg=float("avg" in name))


def _transfer_features(record: Mapping, ops: list, out_shape: list, out_elems: int, moved: float) -> dict:
    """The :data:`TRANSFER_FEATURES` of a record (NaN where they do not apply)."""
    feats = dict(
        op_trans_per_elem=transcendentals_per_element(ops),
        op_libm_per_elem=libm_calls_per_element(ops),
        op_permutes=float(sum(short_name(op) in ("permute_dims", "transpose") for op in ops)),
        op_scan=float(any(short_name(op) in _SCANS for op in ops)),
        size_bytes_per_out=_log2(moved / max(1, out_elems)),
        size_work=_log2(work(record)),
    )
    op = str(_get(record, "anchor_op", ""))
    name, cls = short_name(op), op_class(op)
    attrs = _get(record, "anchor_attrs", {}) or {}
    attrs = attrs if isinstance(attrs, Mapping) else {}
    shapes = _shapes(_get(record, "anchor_input_shapes"))
    if not shapes or not shapes[0]:
        return feats
    data = shapes[0]
    try:
        if out_elems:
            feats["geo_in_per_out"] = math.log2(max(1, _prod(data)) / out_elems)
        if cls == "matmul" and len(shapes) >= 2:
            feats["geo_red_per_out"] = _log2(data[-1])
        elif cls in ("conv", "pool") and (len(shapes) >= 2 or cls == "pool"):
            feats.update(_window_geometry(name, cls, attrs, shapes, out_shape))
        elif name in _SCANS:
            feats["geo_red_per_out"] = _log2(1)  # one add per output along the scanned axis
        elif cls == "reduce":
            axes = _axes(attrs.get("axis", attrs.get("axes")), len(data))
            feats["geo_red_per_out"] = _log2(_prod([data[a] for a in axes]) if axes else 1)
        elif name == "group_norm":
            groups = int(attrs.get("num_groups", 1) or 1)
            c = data[int(attrs.get("channel_axis", 1)) % len(data)]
            axes = _axes(attrs.get("axes"), len(data))
            feats.update(geo_groups=_log2(groups), geo_ch_per_group=_log2(c // max(1, groups)),
                         geo_red_per_out=_log2(c // max(1, groups) * _prod([data[a] for a in axes])))
        elif cls in ("norm", "softmax"):
            axes = _axes(attrs.get("axes", attrs.get("axis", -1)), len(data))
            feats["geo_red_per_out"] = _log2(_prod([data[a] for a in axes]) if axes else 1)
        elif cls == "gather" and len(shapes) >= 2:
            axis = int(attrs.get("axis", 0) or 0) % len(data)
            feats.update(geo_gather_rows=_log2(_prod(shapes[1])), geo_red_per_out=_log2(1),
                         geo_gather_row_len=_log2(_prod(data[axis + 1 :])))
        elif cls in ("elementwise", "transcendental", "layout", "cast", "create"):
            feats["geo_red_per_out"] = _log2(1)
    except (IndexError, ValueError, TypeError, ZeroDivisionError, KeyError):
        pass
    return feats


def _tile_axes(record: Mapping) -> tuple[int, int, int] | None:
    """``(e_v, e_u, v_stride)`` of a matmul or convolution anchor as the Contraction schedule tiles it:
    the output's innermost extent (vector axis), the rows it tiles (an output axis the vector operand
    does not read: matmul ``M``, conv output channels; output rows where groups tie channels to the
    input), and the stride of the vector operand along v. None for other anchors."""
    op = str(_get(record, "anchor_op", ""))
    name, cls = short_name(op), op_class(op)
    shapes = _shapes(_get(record, "anchor_input_shapes"))
    if len(shapes) < 2 or not shapes[0] or not shapes[1]:
        return None
    if cls == "matmul":
        a, b = shapes[0], shapes[1]
        a = a if len(a) >= 2 else [1] + list(a)
        b = b if len(b) >= 2 else list(b) + [1]
        m, n, batch = a[-2], b[-1], max(_prod(a[:-2]), 1)
        return n, (m if m > 1 else batch), 1
    if cls != "conv" or name.endswith("transpose"):
        return None
    attrs = _get(record, "anchor_attrs", {}) or {}
    geo = _conv_geometry(attrs if isinstance(attrs, Mapping) else {}, shapes[0], shapes[1])
    if geo is None:
        return None
    out, cout, groups, nd = geo["out"], geo["cout"], geo["groups"], geo["nd"]
    if geo["layout"].endswith("C"):  # channels last: vectors along output channels, rows along the width
        return cout, out[-1], 1
    rows = cout if groups == 1 else (out[-2] if nd >= 2 else 1)
    return out[-1], rows, int(geo["strides"][-1])


def _dot_product_run(record: Mapping) -> tuple[int, int] | None:
    """``(reduction length, stride)`` of a matmul or convolution anchor that
    :class:`autoplace.backend.cpu_schedules.DotProduct` schedules (one output element a row, one reduced extent over
    1: a matmul by one column, a 1x1 convolution whose output map is 1x1), else None; None too for a record timed
    before schedule version 15 (its kernel ran scalar). The stride: elements between two the reduction reads of
    its input, 1 where the kernel lays them out along the reduction first
    (:data:`~autoplace.backend.cpu_schedules.COMPACT_STRIDED_DOT_OPERANDS`, with work for two threads)."""
    from ..backend import cpu_schedules

    version = _get(record, "cpu_schedule", None)
    if not cpu_schedules.UNIT_ROW_DOT_PRODUCTS or (isinstance(version, (int, float, np.integer, np.floating))
                                                   and np.isfinite(version) and version < 15):
        return None
    op = str(_get(record, "anchor_op", ""))
    shapes = _shapes(_get(record, "anchor_input_shapes"))
    if op_class(op) == "matmul":
        a, b = list(shapes[0]), list(shapes[1])
        n = b[-1] if len(b) >= 2 else 1
        return (a[-1], 1) if n == 1 and a[-1] > 1 else None
    if op_class(op) != "conv" or short_name(op).endswith("transpose"):
        return None
    attrs = _get(record, "anchor_attrs", {}) or {}
    geo = _conv_geometry(attrs if isinstance(attrs, Mapping) else {}, shapes[0], shapes[1])
    if geo is None or geo["layout"].endswith("C") or geo["out"][-1] != 1:
        return None
    reduced = [geo["c"] // max(geo["groups"], 1), *geo["ksp"]]
    longer = [e for e in reduced if e > 1]
    if len(longer) != 1:
        return None
    stride = int(np.prod(geo["padded"])) if longer[0] == reduced[0] else 1  # channels a padded map apart
    work = int(np.prod(shapes[0][:1])) * geo["cout"] * int(np.prod(geo["out"])) * longer[0]
    if stride > 1 and cpu_schedules.COMPACT_STRIDED_DOT_OPERANDS and work >= cpu_schedules.PARALLEL_MIN_WORK["reduction"]:
        stride = 1
    return longer[0], stride


def _conv_lanes_tile(record: Mapping) -> tuple[int, int, dict, dict] | None:
    """``(output channels, map positions, {vector bits: whether ConvLanes schedules it there}, {vector bits: lanes an
    output accumulates in})`` of a convolution anchor that :class:`autoplace.backend.cpu_schedules.ConvLanes`
    schedules on 256- or 512-bit vectors (:func:`~autoplace.backend.cpu_schedules.conv_lanes_apply`: one group, NCHW,
    a 4x4 or smaller output map), else None; None too for a record timed before schedule version 16 (its kernel ran
    in vectors of the output row). A version 16 record's outputs accumulated in 16 lanes on AVX2 too."""
    from ..backend import cpu_schedules

    version = _get(record, "cpu_schedule", None)
    known = isinstance(version, (int, float, np.integer, np.floating)) and np.isfinite(version)
    if known and version < 16:
        return None
    lanes = {bits: cpu_schedules.CONV_LANES if known and version < 17 else cpu_schedules.conv_lanes(bits)
             for bits in (256, 512)}
    op = str(_get(record, "anchor_op", ""))
    if op_class(op) != "conv" or short_name(op) != "conv2d":
        return None
    shapes = _shapes(_get(record, "anchor_input_shapes"))
    attrs = _get(record, "anchor_attrs", {}) or {}
    geo = _conv_geometry(attrs if isinstance(attrs, Mapping) else {}, shapes[0], shapes[1])
    if geo is None or geo["layout"] != "NCHW" or geo["groups"] != 1 or any(d != 1 for d in geo["dil"]):
        return None
    positions = int(np.prod(geo["out"]))
    applies = {bits: cpu_schedules.conv_lanes_apply(geo["c"] * int(np.prod(geo["ksp"])), positions, geo["cout"], bits,
                                                    lanes[bits])
               for bits in (256, 512)}
    return (geo["cout"], positions, applies, lanes) if any(applies.values()) else None


def _conv_lanes_features(c_out: int, positions: int, lanes: Mapping | None = None, bits_list=(256, 512)) -> dict:
    """The :data:`SCHEDULE_FEATURES` (of ``bits_list``'s widths) of a :class:`autoplace.backend.cpu_schedules.ConvLanes`
    convolution whose outputs accumulate in ``lanes[bits]`` (default the current rules'): full vectors of partial
    sums, a tile of ``uo x up`` of them (:func:`~autoplace.backend.cpu_schedules.conv_lanes_tile`) reading ``uo + up``
    vectors a step."""
    from ..backend.cpu_schedules import conv_lanes_tile

    feats = dict(sched_row_pad=0.0, sched_col_pad=0.0, sched_v_stride=1.0)
    for bits in bits_list:
        uo, up = conv_lanes_tile(c_out, positions, bits, (lanes or {}).get(bits))
        feats[f"sched_lane_use_{bits}"] = 1.0
        feats[f"sched_loads_{bits}"] = (uo + up) / (uo * up)
        feats[f"sched_tail_{bits}"] = 0.0
        feats[f"sched_rows_{bits}"] = float(uo * up)
        feats[f"sched_odd_{bits}"] = 0.0
    return feats


def _dot_product_features(run: int, dtype_bits: int, stride: int = 1) -> dict:
    """The :data:`SCHEDULE_FEATURES` of a dot product of ``run`` elements per output, accumulated in the lanes
    :func:`autoplace.backend.cpu_schedules.row_reduction_width` gives it (two vector loads per vector multiply-add,
    one row a tile; scalar where it gives none), its input read ``stride`` elements apart."""
    from ..backend.cpu_schedules import RowReduction, row_reduction_width

    feats = dict(sched_row_pad=0.0, sched_col_pad=0.0, sched_v_stride=float(stride))
    for bits in (256, 512):
        lanes = max(bits // max(dtype_bits, 1), 1)
        width = row_reduction_width(run, lanes, RowReduction.ACCUMULATORS)
        used = min(width, lanes) / lanes if width else 1.0 / lanes
        feats[f"sched_lane_use_{bits}"] = used
        feats[f"sched_loads_{bits}"] = 2.0 / used
        feats[f"sched_tail_{bits}"] = 0.0 if width and run % width == 0 else 1.0
        feats[f"sched_rows_{bits}"] = 1.0
        feats[f"sched_odd_{bits}"] = 0.0
    return feats


def _schedule_features(record: Mapping, dtype_bits: int) -> dict:
    """The :data:`SCHEDULE_FEATURES` of a CPU record (NaN for other anchors and other targets)."""
    target = str(_get(record, "target", "llvm") or "llvm")
    if not target.startswith(("llvm", "cpu")):
        return {}
    name = short_name(str(_get(record, "anchor_op", "")))
    if name in ("max_pool2d", "avg_pool2d"):
        return _pool_lane_use(record, dtype_bits)
    try:
        axes = _tile_axes(record)
    except (IndexError, ValueError, TypeError, ZeroDivisionError, KeyError):
        return {}
    if axes is None or min(axes[:2]) < 1:
        return {}
    try:
        run = _dot_product_run(record)
    except (IndexError, ValueError, TypeError, ZeroDivisionError, KeyError):
        run = None
    if run is not None:
        return _dot_product_features(run[0], dtype_bits, stride=run[1])
    try:
        lanes_tile = _conv_lanes_tile(record) if dtype_bits == 32 else None
    except (IndexError, ValueError, TypeError, ZeroDivisionError, KeyError):
        lanes_tile = None
    if lanes_tile is not None and all(lanes_tile[2].values()):
        return _conv_lanes_features(lanes_tile[0], lanes_tile[1], lanes_tile[3])
    from ..backend.cpu_schedules import _ACCUMULATORS, _REGISTERS, Contraction

    e_v, e_u, v_stride = axes
    rule = Contraction()
    matmul = op_class(str(_get(record, "anchor_op", ""))) == "matmul"
    feats = dict(sched_row_pad=0.0, sched_col_pad=0.0, sched_v_stride=float(v_stride))

    def padded(extent):
        return -(-extent // rule.ROW_PAD) * rule.ROW_PAD

    pad_rows = rule.pads_rows(e_u)
    if pad_rows:
        feats["sched_row_pad"] = (padded(e_u) - e_u) / padded(e_u)
    lanes = max(512 // max(dtype_bits, 1), 1)  # (the padding decision at 256 bits differs for few widths)
    if matmul and rule.tile_plan(e_v, e_u, lanes, _ACCUMULATORS[512], _REGISTERS[512])["tail"]:
        feats["sched_col_pad"] = (padded(e_v) - e_v) / padded(e_v)
        e_v = padded(e_v)
    e_u = padded(e_u) if pad_rows else e_u
    for bits in (256, 512):
        plan = rule.tile_plan(e_v, e_u, max(bits // max(dtype_bits, 1), 1), _ACCUMULATORS[bits], _REGISTERS[bits],
                              odd=not matmul)
        feats[f"sched_lane_use_{bits}"] = plan["lane_use"]
        feats[f"sched_loads_{bits}"] = plan["loads_per_fma"]
        feats[f"sched_tail_{bits}"] = float(plan["tail"] or plan["odd"])  # no vector divides the row
        feats[f"sched_rows_{bits}"] = float(plan["ut"])
        feats[f"sched_odd_{bits}"] = float(plan["odd"])
    if lanes_tile is not None:  # a 4x4 map: ConvLanes on AVX-512, the register tile on AVX2
        lanes = _conv_lanes_features(lanes_tile[0], lanes_tile[1], lanes_tile[3],
                                     bits_list=[b for b, ok in lanes_tile[2].items() if ok])
        feats.update({k: v for k, v in lanes.items() if k.endswith(("_256", "_512"))})
    return feats


def _pool_lane_use(record: Mapping, dtype_bits: int) -> dict:
    """``sched_lane_use_*`` of a pooling kernel as :class:`autoplace.backend.cpu_schedules.Pool` vectorises it:
    vectors of :func:`~autoplace.backend.cpu_schedules._lanes` lanes along the output row (an 18-wide row: 18
    lanes over three 8-lane registers), scalar where they do not divide it (TVM leaves a predicated tail loop
    scalar: rows of 194 or 57); the share of register lanes the vector fills."""
    from ..backend.cpu_schedules import _lanes

    shapes = _shapes(_get(record, "arg_shapes"))
    n_out = int(_get(record, "num_outputs", 1) or 1)
    if len(shapes) <= n_out or not shapes[-n_out]:
        return {}
    row = int(shapes[-n_out][-1])
    feats = {}
    for bits in (256, 512):
        lanes = max(bits // max(dtype_bits, 1), 1)
        width = _lanes(row, lanes) if row >= 2 else 1
        width = width if width >= 1 and row % width == 0 else 1
        feats[f"sched_lane_use_{bits}"] = width / (-(-width // lanes) * lanes)
    return feats


# -- the feature dict ------------------------------------------------------------------------------
def feature_names() -> list[str]:
    """Names of :func:`record_features`, in a fixed order (independent of any data)."""
    names = [
        "size_flops",
        "size_bytes_in",
        "size_bytes_out",
        "size_bytes",
        "size_max_arg",
        "size_out_elems",
        "size_intensity",
        "size_args",
        "size_outputs",
        "size_ops",
        "size_distinct_ops",
        "size_out_rank",
        "size_out_inner",
        "size_in_inner",
        "size_bits",
        "size_int_args",
        "size_scalar_args",
        "size_broadcast_args",
    ]
    names += [f"cls_{c}" for c in OP_CLASSES]
    names += [f"anchor_cls_{c}" for c in OP_CLASSES]
    names += list(_GEOMETRY_FEATURES)
    names += [
        "mem_lines",
        "mem_stride",
        "mem_stride_pow2",
        "mem_l1_over",
        "mem_l2_over",
        "mem_pages",
        "mem_level",
    ]
    names += list(TRANSFER_FEATURES)
    names += list(SCHEDULE_FEATURES)
    names += list(READ_FEATURES)
    return names


#: How a data-movement kernel reads its inputs as it writes its output in order (the profiler's
#: ``read_strides``, :mod:`autoplace.profile.access`): the largest step of an input's index per output step,
#: log2(1 + elements) (0: broadcast, 1: in order, a row's length: down columns), and the share of input elements
#: read with a step other than 0 or 1. A fused reshape-transpose chain names the same ops and shapes whether it
#: copies rows in order (40-70 ps an element on the Zen 3) or reads down columns (180-340 ps). NaN for kernels
#: that are not purely spatial (matmul, convolution, reductions: other features describe their reads) and for
#: records profiled before the field existed. Added after :data:`SCHEDULE_FEATURES` (no earlier feature changed).
#: Then, from ``read_runs``, for the input with the most elements when it is read in order (stride 1) but not in one
#: run: log2 of the output elements written per contiguous run of its reads, and log2(1 + the runs it takes to write
#: the output). A stride of 1 does not tell a copy (one run) from a window partition read in window rows (swin's
#: ``(1, 16, 16, 48) -> (16, 16, 48)``: runs of 4 x 48, 4.4x the copy's time on the Zen 5). NaN for every other
#: kernel (copies, broadcasts, transposes read down columns: the strides say those) and without ``read_runs``:
#: given to every kernel, the run features let the trees split tiny kernels of the small decoders on them, whose
#: times are their calls' fixed cost (leaving llama out, its kernel Spearman fell from 0.960 to 0.942; session 54).
READ_FEATURES = ("read_stride", "read_strided_share", "read_run", "read_run_count")


def read_features(record: Mapping) -> dict:
    """The :data:`READ_FEATURES` of a record (NaN without ``read_strides`` / ``read_runs``)."""
    feats = dict.fromkeys(READ_FEATURES, math.nan)
    strides = _get(record, "read_strides", None)
    if strides is None or isinstance(strides, float) or not len(strides):
        return feats
    strides = [float(x) for x in strides]
    shapes = _shapes(_get(record, "arg_shapes"))
    sizes = [_prod(s) for s in shapes[: len(strides)]] or [1] * len(strides)
    total = sum(sizes) or 1
    strided = sum(n for n, x in zip(sizes, strides) if x not in (0.0, 1.0))
    feats.update(read_stride=_log2(max(strides)), read_strided_share=strided / total)
    runs = _get(record, "read_runs", None)
    if runs is not None and not isinstance(runs, float) and len(runs) == len(strides) == len(sizes):
        n_out = int(_get(record, "num_outputs", 1) or 1)
        out_elements = _prod(shapes[-n_out]) if len(shapes) > n_out else 0
        # the largest input (of those as large, the one read in the shortest runs)
        largest = max(range(len(strides)), key=lambda i: (sizes[i], -float(runs[i])))
        run = float(runs[largest])
        if strides[largest] == 1.0 and 1 <= run < out_elements:
            feats.update(read_run=math.log2(run), read_run_count=math.log2(1 + out_elements / run))
    return feats


def _nbytes(shape, dtype) -> int:
    return _prod(shape) * max(1, _bits(dtype) // 8)


def record_features(record: Mapping) -> dict:
    """Numeric features of one unit record (a dict, a pandas row, or anything indexable by name).

    Parameters
    ----------
    record : mapping
        A unit record (see :func:`autoplace.profile.job.unit_record`); only the description fields
        are read (``ops``, ``func_name``, ``anchor_op``, ``anchor_attrs``, ``anchor_input_shapes``,
        ``arg_shapes``, ``arg_dtypes``, ``num_outputs``, ``flops``, ``bytes_in``, ``bytes_out``).

    Returns
    -------
    dict
        ``{name: float}`` for every name of :func:`feature_names` (NaN where unknown).
    """
    feats = dict.fromkeys(feature_names(), math.nan)
    shapes = _shapes(_get(record, "arg_shapes"))
    dtypes = [str(d) for d in (_get(record, "arg_dtypes") or ["float32"] * len(shapes))]
    dtypes = (dtypes + ["float32"] * len(shapes))[: len(shapes)]
    n_out = int(_get(record, "num_outputs", 1) or 1) if shapes else 0
    ins, outs = shapes[: len(shapes) - n_out], shapes[len(shapes) - n_out :]
    arg_bytes = [_nbytes(s, d) for s, d in zip(shapes, dtypes)]
    bytes_in = float(_get(record, "bytes_in", sum(arg_bytes[: len(ins)])))
    bytes_out = float(_get(record, "bytes_out", sum(arg_bytes[len(ins) :])))
    out_elems = sum(_prod(s) for s in outs)
    flops = float(_get(record, "flops", out_elems))
    ops = unit_ops(record)
    out0 = outs[0] if outs else []
    in0 = ins[0] if ins else []
    feats.update(
        size_flops=_log2(flops),
        size_bytes_in=_log2(bytes_in),
        size_bytes_out=_log2(bytes_out),
        size_bytes=_log2(bytes_in + bytes_out),
        size_max_arg=_log2(max(arg_bytes, default=0)),
        size_out_elems=_log2(out_elems),
        size_intensity=math.log2((flops + 1.0) / (bytes_in + bytes_out + 1.0)),
        size_args=float(len(shapes)),
        size_outputs=float(n_out),
        size_ops=float(len(ops)),
        size_distinct_ops=float(len(set(ops))),
        size_out_rank=float(len(out0)),
        size_out_inner=_log2(out0[-1] if out0 else 1),
        size_in_inner=_log2(in0[-1] if in0 else 1),
        size_bits=float(max((_bits(d) for d in dtypes), default=32)),
        size_int_args=float(sum(not d.startswith(("float", "bfloat")) for d in dtypes)),
        size_scalar_args=float(sum(_prod(s) <= 1 for s in ins)),
        size_broadcast_args=float(sum(0 < _prod(s) < out_elems for s in ins)),
    )
    counts = dict.fromkeys(OP_CLASSES, 0)
    for op in ops:
        counts[op_class(op)] += 1
    for cls in OP_CLASSES:
        feats[f"cls_{cls}"] = float(counts[cls])
    anchor_cls = op_class(_get(record, "anchor_op", ops[0] if ops else ""))
    for cls in OP_CLASSES:
        feats[f"anchor_cls_{cls}"] = float(cls == anchor_cls)
    anchor_dtypes = dtypes[:1] or ["float32"]
    eb = max(1, _bits(anchor_dtypes[0]) // 8)
    geometry, stream = _geometry(record, eb)
    feats.update(geometry)
    feats.update(_stream_features(stream, eb))
    feats.update(_transfer_features(record, ops, out0, out_elems, bytes_in + bytes_out))
    feats.update(_schedule_features(record, _bits(anchor_dtypes[0])))
    parallel = _get(record, "parallel", None)
    if isinstance(parallel, (bool, np.bool_)):  # CPU records since schedule version 2 (NaN before)
        feats["sched_parallel"] = float(parallel)
    vector_reduce = _get(record, "vector_reduce", None)
    if isinstance(vector_reduce, (bool, np.bool_)):  # CPU records since schedule version 4 (NaN before)
        feats["sched_vector_reduce"] = float(vector_reduce)
    feats.update(read_features(record))
    return feats


def _extra_work_per_element(op: str) -> float:
    """:data:`EXTRA_WORK_PER_ELEMENT` of ``op``'s class; a transcendental op listed in :data:`TRANSCENDENTALS`
    or :data:`LIBM_CALLS` counts what those say it evaluates (``power``: nothing, ``sin``: one libm call)."""
    name, cls = short_name(op), op_class(op)
    if cls == "transcendental" and (name in TRANSCENDENTALS or name in LIBM_CALLS):
        return (EXTRA_WORK_PER_ELEMENT["transcendental"] * TRANSCENDENTALS.get(name, 0.0)
                + LIBM_WORK_PER_CALL * LIBM_CALLS.get(name, 0.0))
    return EXTRA_WORK_PER_ELEMENT.get(cls, 0.0)


#: Op classes whose kernels stream their operands once, doing an operation or a few per element: their
#: work is at least the 4-byte words they read and write (a roofline's memory side).
STREAMING_CLASSES = frozenset({"elementwise", "cast", "layout"})


def work(record: Mapping) -> float:
    """Work of a unit, in simple operations (>= 1): its FLOP estimate, at least the 4-byte words it reads
    and writes for the streaming op classes (:data:`STREAMING_CLASSES`); where it has no FLOPs, the words
    it writes and reads, counting no more read than written (feature versions 5 and 6); plus
    :data:`EXTRA_WORK_PER_ELEMENT` per output element for each transcendental or softmax op it fuses
    (:func:`_extra_work_per_element`: a libm call counts :data:`LIBM_WORK_PER_CALL`, ``power`` nothing).

    The models predict time per unit of work on top of this term (see
    :mod:`autoplace.cost_model.xgb_model`). An adaptive pooling kernel counts at least one operation per
    input element: the graph's FLOP estimate counts its outputs only (no ``pool_size`` attribute), which
    priced a global average pool of a 96x91x91 map 300x too cheap.
    """
    flops = _get(record, "flops", math.nan)
    try:
        flops = float(flops)
    except (TypeError, ValueError):
        flops = math.nan
    shapes = _shapes(_get(record, "arg_shapes"))
    if "adaptive" in short_name(_get(record, "anchor_op", "")) and math.isfinite(flops):
        anchor_in = _shapes(_get(record, "anchor_input_shapes"))
        flops = max(flops, float(_prod(anchor_in[0])) if anchor_in else 0.0)
    try:
        bytes_in, bytes_out = float(_get(record, "bytes_in", 0)), float(_get(record, "bytes_out", 0))
    except (TypeError, ValueError):
        bytes_in = bytes_out = math.nan
    if not math.isfinite(flops) or flops <= 0:
        # No arithmetic: the 4-byte words it moves, counting no more read than written: a gather or a
        # slice reads its output's rows, not the whole table (an embedding lookup of 16 rows of a
        # 1000-row table was priced 8x its 0.045 us).
        flops = (min(bytes_in, bytes_out) + bytes_out) / 4.0 if math.isfinite(bytes_in + bytes_out) else 1.0
    elif op_class(_get(record, "anchor_op", "")) in STREAMING_CLASSES and math.isfinite(bytes_in + bytes_out):
        flops = max(flops, (bytes_in + bytes_out) / 4.0)
    n_out = int(_get(record, "num_outputs", 1) or 1) if shapes else 0
    out_elems = sum(_prod(s) for s in shapes[len(shapes) - n_out :])
    extra = sum(_extra_work_per_element(op) for op in unit_ops(record))
    total = flops + extra * out_elems
    return max(1.0, total if math.isfinite(total) else 1.0)


def features_from_unit(unit, graph=None, target_kind: str | None = None, model_name: str = "") -> dict:
    """The record-like dict of a :class:`autoplace.profile.Unit` (no timing), ready for the model.

    Parameters
    ----------
    unit : autoplace.profile.Unit
    graph : networkx.DiGraph, optional
        The op graph the unit was extracted from (gives the anchor op, its attributes and FLOPs).
        Without it the record has the unit's ops and shapes only, and the anchor features are missing.
    target_kind : str, optional
        Default: the unit's own target kind.
    model_name : str

    Returns
    -------
    dict
        :func:`autoplace.profile.job.unit_record` without its timing: what :func:`record_features`,
        the models and :class:`CostTable` accept.
    """
    from ..profile.job import unit_record

    kind = target_kind or getattr(unit, "target_kind", None) or "llvm"
    record = unit_record(unit, graph, model_name, kind, {})
    record.pop("measured_at", None)
    return record


def as_records(units) -> list:
    """A list of record mappings from a DataFrame, one mapping, a list of mappings or of ``Unit``."""
    import pandas as pd

    if isinstance(units, pd.DataFrame):
        return [row for _, row in units.iterrows()]
    if isinstance(units, (Mapping, pd.Series)) or hasattr(units, "prim_func"):
        units = [units]
    return [features_from_unit(u) if hasattr(u, "prim_func") else u for u in units]
