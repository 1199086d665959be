"""Single-op models of the op families users' models contain: cost-model training data beyond the zoo.

The zoo (five architectures) and the stride grid (:func:`autoplace.zoo.regime_grid`: matmul and conv2d)
leave most of what the PyTorch and ONNX frontends emit unmeasured: transcendental activations, norms,
data movement, convolutions with other kernels, strides and groups, pooling, attention's batched
matmuls. :func:`op_family_models` builds one small Relax model per (family, size): the op alone, or
with the epilogue it is usually fused with (bias + ReLU after a convolution, the scale after
``Q @ K^T``), at 2-5 sizes per family drawn log-uniformly (stratified, seeded) from a few KB to a few
MB of data, plus the shapes attention uses (``batch * heads``, ``seq``, ``head_dim``). A tiny tier
(:data:`TINY_COUNTS`, names ending ``-tiny``) adds 1-32 models per family of 64-4096 elements on rows of
8-128 (:data:`TINY_ELEMS`, :data:`TINY_WIDTHS`): one token of a decode step, test-sized models, the 1x1-5x5
maps of a CNN's last stages, where loop overheads and rows that fill part of a vector decide a kernel's time.

Every model is named ``ops-<family>-<shape>`` (``ops-gelu-96x768``, ``ops-conv2d_k5s2dw-64x28x28-64``):
the evaluation's :func:`autoplace.cost_model.evaluate.family` reads them all as family ``ops``.
The list is the same on every machine for a given seed, so a new machine is profiled with::

    autoplace profile --zoo ops --no-copies --no-end-to-end

Sizes are capped so that even a naive (unscheduled) CPU kernel stays near or under 0.2 s:
:data:`MAX_MACS` multiply-adds for convolutions and matmuls, :data:`MAX_ELEMENTWISE_ELEMS` for elementwise
ops, :data:`MAX_ELEMS` elements elsewhere.

Where the PyTorch frontend decomposes an op (``F.silu`` -> ``sigmoid * x``, ``F.softplus`` ->
``log(1 + exp(x))``-style ops, ``nn.RMSNorm`` -> ``power``/``mean``/``rsqrt``) and the ONNX frontend or
a Relax author emits the op itself (``relax.op.nn.silu``), the family alternates between both forms, so
the cost model sees the kernels both produce.
"""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np

from .frontend import Model, load_model

#: ``{family: group}`` in build order. Every family has at least two models.
FAMILIES = {
    # elementwise, transcendental
    "sigmoid": "elementwise",
    "tanh": "elementwise",
    "exp": "elementwise",
    "erf": "elementwise",
    "gelu": "elementwise",
    "gelu_tanh": "elementwise",
    "silu": "elementwise",
    "softplus": "elementwise",
    "sin": "elementwise",
    "cos": "elementwise",
    "log": "elementwise",
    "power": "elementwise",
    "add": "elementwise",
    # sums of two or three whole activations past the caches (residual streams, CNN feature maps, branches)
    "residual": "elementwise",
    # a decoder block's own fused kernels, as the PyTorch frontend emits them: the gated MLP activation
    # (SwiGLU / GeGLU: act(gate) * up between reshapes) and rotary position embeddings (q * cos + rotate_half(q)
    # * sin: a head split, two strided slices, a negation and a concatenation)
    "glu": "decoder",
    "rotary": "decoder",
    # the cos / sin tables of rotary embeddings, from the position ids on every call
    "rotary_table": "decoder",
    # grouped-query attention's repeat_kv: key / value heads broadcast to the query heads (expand + reshape)
    "gqa_repeat": "decoder",
    # reductions and norms
    "mean": "reduction",
    "sum": "reduction",
    "max": "reduction",
    "softmax": "reduction",
    "layer_norm": "reduction",
    "rms_norm": "reduction",
    "group_norm": "reduction",
    # data movement
    "transpose": "movement",
    "concat": "movement",
    "split": "movement",
    "strided_slice": "movement",
    "take": "movement",
    # advanced indexing (x[idx0, idx1] with broadcast index tensors): Hugging Face decoders' causal mask
    "index_tensor": "movement",
    "embedding": "movement",
    "cumsum": "movement",
    "where": "movement",
    "pad": "movement",
    # the bookkeeping kernels of a decode step or a short prompt: chains of 1-9 slices, concatenations, compares,
    # casts, adds and reshapes over 4-64 int64 or float32 elements (position ids from a mask, cache positions, a
    # causal mask's rows), which a call's fixed cost decides, not their ops (session 37: the Zen 4's cost model had
    # priced llama's 8-element position-id chain of eight ops at twice its 8 ns from larger kernels of as many ops)
    "small_chain": "movement",
    # a channels-last block's own kernels on small maps (ConvNeXt, and any NCHW model that normalises over channels):
    # NCHW <-> NHWC permutes, a layer norm over rows of 8-96 channels, and the layer scale + residual kernel (the
    # NHWC branch times gamma, permuted back and added to the NCHW stream, sometimes permuted again for the next
    # block). Rows shorter than a vector or two, which LLVM vectorises erratically; on the Zen 4 the cost model had
    # priced convnext's 64x8 layer-scale kernel 2.0-2.3x high and its transposes 0.67x (session 38)
    "channels_last": "movement",
    # 2x2 space-to-depth by four ``::2`` strided slices and a concatenation, one fused kernel: the patch merging of
    # hierarchical vision transformers (Swin: ``(1, H*W, C)`` tokens viewed as ``(1, H, W, C)``, sliced, concatenated
    # over channels to ``(1, H*W/4, 4C)``; with the block's residual add fused in front) and YOLOv5's Focus layer
    # (NCHW, over channels). On the Zen 4 the cost model had priced swin-base's two at 0.09x of their 11-31 us:
    # nothing like them had been profiled (session 40)
    "space_to_depth": "movement",
    # a shifted-window attention's scores as Swin's blocks finish them before the softmax, one fused kernel: the
    # ``(windows * heads, S, S)`` product reshaped, scaled, plus the relative-position bias (gathered from its table,
    # permuted to heads first) and, in shifted blocks, the window mask the PyTorch frontend computes on every call
    # (region ids from compares of two aranges, partitioned into windows like the map, pairwise differences, two
    # wheres): 30-40 ops over int64 and float32. On the Zen 4 the cost model had priced swin-base's 0.40-0.49x
    # (session 40)
    "window_attn_bias": "elementwise",
    # Swin's window partition and its reverse, one fused reshape-transpose-reshape kernel each: tokens ``(1, H*W, C)``
    # (after the zero pad Hugging Face's ``maybe_pad`` applies) or a ``(1, H, W, C)`` map cut into ``(windows, w*w,
    # C)``, and windows' rows put back as the map. Each input row is read in order (read stride 1, like a copy) but
    # only for a window's row, ``w * C`` elements, before the read jumps to the next map row: on the Zen 5 swin-base's
    # ``(1, 16, 16, 48) -> (16, 16, 48)`` takes 1.43 us where the plain reshape beside it takes 0.32, and the cost
    # model, which had seen no such kernel, priced the partitions at 0.35-0.5x (session 54)
    "window_partition": "movement",
    # convolutions (family name carries kernel, stride and grouping: conv2d_k3s2dw)
    **{f"conv2d_k{k}s{s}{g}": "conv" for k in (1, 3, 5, 7) for s in (1, 2) for g in ("g1", "dw", "gr")},
    "conv1d": "conv",
    # 1D convolutions as audio and sequence models run them, on lengths of whole vectors or half ones (64-3000; the
    # waveform's 4000-16000 samples): Whisper's
    # front (k3 + bias + GELU, then k3 stride 2), wav2vec2 / HuBERT's feature encoder (k10 stride 5 over the raw
    # waveform, k2 stride 2, + GELU), a text CNN's k5 + ReLU, a pointwise k1; ``conv1d``'s six odd lengths had taught
    # the cost model the scalar-tail speed (4 GMAC/s), and it priced whisper-encoder-base's (60 GMAC/s) 2.4-4.5x
    # (Zen 4, session 40)
    "conv1d_seq": "conv",
    # an explicit pad, then a convolution without padding: TF-style "same" padding (asymmetric at stride 2) as
    # Hugging Face's MobileNet / EfficientNet ports compute it; fused, the pad is a block of its own before the
    # window loops, where a convolution's own padding is a bounds check on every tap
    "conv2d_tfpad": "conv",
    # a CNN's stages as torchvision's ResNets, VGG, Inception run them: 3x3 and 1x1 convolutions and max pools
    # on 112/56/28/14/7 feature maps with 32-256 channels
    "cnn_stage": "conv",
    # the same on power-of-two maps (64/32/16/8/4, 128 for the narrowest) with power-of-two channels, as CIFAR
    # ResNets, U-Nets, GAN and diffusion CNNs and every vision model of the architecture suite run them: rows the
    # vector tile divides, faster per FLOP than the odd maps of cnn_stage (Zen 3: 130-160 GFLOP/s vs 90-100)
    "cnn_pow2": "conv",
    # the first convolution over an image's 3 channels: ResNet's 7x7 stride 2, MobileNet's 3x3 stride 2, a
    # CIFAR net's 3x3, the patch embeddings of ViT / Swin / ConvNeXt (a k x k window at stride k)
    "conv_stem": "conv",
    # 1x1 convolutions on 1x1-4x4 maps: squeeze-excitation blocks and the last stages and classifier heads
    # of MobileNet/EfficientNet-style CNNs (a matrix-vector product in a convolution's layout)
    "conv_head": "conv",
    # the same stages on power-of-two maps with the channel counts that are not powers of two (24, 48, 96,
    # 192...: MobileNet/EfficientNet/RegNet widths, ResNets at width 0.75 or 1.5): the vector divides the rows,
    # the register tile does not always divide the channels
    "cnn_pow2_mixed": "conv",
    # an inverted-residual block's 1x1 convolutions on the 2x2-4x4 maps of a small-image MobileNet (CIFAR-size
    # inputs, the last stages of larger ones): expand (+ ReLU6, + the next depthwise convolution's TF pad) and
    # project (+ the residual add); rows of 2-4 pixels, output channels 12 at a time in the register tile
    "conv_small_maps": "conv",
    # the same blocks at the widths of the last stages of a full-width MobileNet / EfficientNet / MnasNet (80-384
    # channels, expanded 6x: 0.1-3.5 MB of weights read once per call, past the L2): conv_small_maps stops at 221 KB
    # and conv_head's 1x1 maps stream weights at half the rate of 2x2 ones (Zen 5: 14 GB/s, 25), so the cost model
    # priced mobilenetv2-base's 160 -> 960 expansions on 2x2 maps 1.32x their 25.6 us (session 53). None of the
    # architecture suite's shapes is drawn (:data:`WIDE_SMALL_MAP_CHANNELS`)
    "conv_wide_small_maps": "conv",
    # a basic residual block's 3x3 convolutions (and its 1x1 stride-2 shortcut) giving 1x1, 2x2 and 4x4 maps with
    # 32-512 channels: the last stages of a ResNet on 32x32-64x64 images, where ``cnn_pow2``'s smallest map is 8
    "cnn_tiny_maps": "conv",
    # the convolutions of the toy and test-sized CNNs users try first (MNIST / CIFAR notebooks, a tiny ResNet, two
    # branches and a gate): 4-24 channels on 4x4-32x32 maps, 3x3 and 5x5 at stride 1, 3x3 and 1x1 at stride 2
    # widening 2x; a few taps and channels per output pixel, so loop and padding overheads and stride-2 reads weigh
    # as much as the multiply-adds. Held out leaving one architecture out, the Zen 5 had priced the zoo cnn's stride-2
    # 8 -> 16 3x3 onto 8x8 14% under its 1.70 us (session 56): besides the zoo's own, the training data had no
    # stride-2 3x3 convolution of fewer than 16 input channels
    "conv_narrow": "conv",
    # ConvNeXt-style downsampling onto 1x1-4x4 maps: a 2x2 window at stride 2 (and a 4x4 one at stride 4) widening
    # the channels, + bias; since CPU schedule 16 the 2x2 and 4x4 outputs are ConvLanes dot products over channels
    # and taps. Held out leaving ConvNeXt out, the Zen 5 priced convnext-base's two such kernels +55% and +60%
    # (session 67): the training data's ConvLanes convolutions all had 1x1 or 3x3 taps (``cnn_tiny_maps``)
    "conv_downsample_tiny_maps": "conv",
    # stride-1 convolutions (with bias + ReLU) on maps whose rows no vector divides (17, 19, 23, 29, 38: Inception-v3's
    # 17x17 stage with its 1x7 / 7x1 pairs, YOLO's 19x19 / 38x38 heads): since CPU schedule 9 computed over the
    # flattened map, 4-29x faster than in rows (experiments/conv_rows.py), so unlike any other odd-row convolution
    "conv_odd_rows": "conv",
    # an inverted-residual block's 3x3 depthwise convolutions (+ bias + ReLU6) on the TF-padded power-of-two maps of a
    # MobileNet / EfficientNet (2x2-32x32 outputs, stride 1 and 2), some with the zero-width pad Hugging Face's
    # MobileNetV2 puts before the next 1x1 convolution: whole 8- or 16-wide output rows, one channel's tile held in
    # registers; on the Zen 4 the cost model had priced mobilenetv2's 8x8 and 16x16 ones 1.8-2.8x high from
    # the odd-width maps of conv2d_tfpad and conv2d_k3s1dw (session 37)
    "conv_dw_pow2": "conv",
    # a ConvNeXt block's 7x7 depthwise convolution (+ bias), and 5x5 / 3x3 ones, on the 2x2-16x16 maps of its late
    # stages (ConvNeXt on small images, or at 224 pixels its 7x7 and 14x14 stages) with 32-768 channels: a window
    # wider than the map, most taps in the padding; on the Zen 4 the cost model had priced convnext-base's 7x7 ones
    # on 4x4 and 2x2 maps 0.62x and 0.41x from larger maps (session 40)
    "conv_dw_tiny_maps": "conv",
    # pooling
    "max_pool2d": "pool",
    "avg_pool2d": "pool",
    "adaptive_avg_pool2d": "pool",
    # a CNN's global average pool before its classifier, over the last stage's map, in the two forms the
    # PyTorch frontend emits: ``x.mean((2, 3))`` (a row reduction) and ``nn.AdaptiveAvgPool2d(1)`` (a pool)
    "global_pool": "pool",
    # batched matmul as attention runs it
    "attn_qk": "matmul",
    "attn_av": "matmul",
    # a vision transformer's tokens (patches + a class token: 17, 50, 197...): rows the register tile
    # does not divide, in linear layers and in attention over them
    "linear": "matmul",
    "attn_tokens": "matmul",
}

#: Largest multiply-add count of a convolution or matmul model (a naive CPU kernel runs 1-8 ns each).
MAX_MACS = 2.0e7
#: Largest output (or input) element count of the other models (float32: 4 MB).
MAX_ELEMS = 1 << 20
#: Largest element count of the elementwise models (float32: 16 MB): a base-size CNN's activations
#: (1x64x112x112 = 0.8M elements) and residual adds stream from memory, in and out together past a
#: server's L3 (32 MiB on the Zen 3); capped at :data:`MAX_ELEMS` a 1M-element add was priced 1.7x high.
MAX_ELEMENTWISE_ELEMS = 1 << 22

#: Row lengths (hidden sizes, vocabularies, images) the models draw from: powers of two and 3 * 2^k.
_WIDTHS = (64, 96, 128, 192, 256, 384, 512, 768, 1024, 2048, 3072)
_CHANNELS = (16, 24, 32, 48, 64, 96, 128, 192, 256)
#: Element counts of the tiny tier: a decode step's one-token activations, a test-sized model's tensors, the
#: last stages of a CNN (1x1-4x4 maps), where a kernel's loop overheads and odd row widths decide its time.
TINY_ELEMS = (64, 4096)
#: Row lengths of the tiny tier's tensors (a tiny model's hidden sizes and heads; a few lanes of a vector).
TINY_WIDTHS = (8, 16, 24, 32, 48, 64, 96, 128)
#: Models per family of the tiny tier (families not named here have none).
TINY_COUNTS = {
    **{f: 2 for f in ("sigmoid", "tanh", "exp", "erf", "gelu", "gelu_tanh", "silu", "softplus", "sin", "cos", "log",
                      "add", "sum", "max", "group_norm",
                      "transpose", "concat", "split", "strided_slice", "take", "index_tensor", "embedding", "cumsum", "where")},
    # a transformer block's own: its norms (RMSNorm in both forms), x ** 2, attention's softmax over rows of 8-128
    **{f: 4 for f in ("power", "mean")},
    # row reductions: two models per row width of TINY_WIDTHS (both RMSNorm forms, twice each), their sizes drawn
    # apart from the width: the time per row jumps where the row stops filling whole vectors (Zen 4, RMSNorm: 57
    # ns a row of 32, 17 a row of 64), and a fixed cost per call decides the time of a few rows
    "softmax": 16, "layer_norm": 16, "rms_norm": 32,
    "pad": 6,
    "glu": 4, "rotary": 4, "rotary_table": 4, "gqa_repeat": 4,
    "conv2d_tfpad": 4,
    **{f"conv2d_k{k}s{s}{g}": 1 for k in (1, 3, 5, 7) for s in (1, 2) for g in ("g1", "dw", "gr")},
}
_NAME = re.compile(r"^ops-(?P<family>[a-z0-9_]+)-")


def family_of(name: str) -> str | None:
    """The family of an ``ops-<family>-<shape>`` model name (``None`` for other names)."""
    match = _NAME.match(str(name))
    return match.group("family") if match else None


# -- helpers -----------------------------------------------------------------------------------------
def _spread(rng, lo: float, hi: float, n: int) -> list[float]:
    """``n`` values log-uniform in [lo, hi], one in each of ``n`` equal log-strata (ascending)."""
    a, b = math.log(lo), math.log(hi)
    return [math.exp(a + (i + rng.uniform()) / n * (b - a)) for i in range(n)]


def _sizes(rng, lo: float, hi: float, n: int, tiny: bool) -> list[float]:
    """``n`` element counts spread over ``[lo, hi]``, or over :data:`TINY_ELEMS` for the tiny tier."""
    return _spread(rng, *TINY_ELEMS, n) if tiny else _spread(rng, lo, hi, n)


def _conv_sizes(rng, n: int, tiny: bool) -> list[float]:
    """``n`` input element counts of convolution models: 4K-600K, or 256-8K for the tiny tier (MobileNet's last
    stages, 1x1-5x5 maps of 16-256 channels)."""
    return _spread(rng, 256, 8192, n) if tiny else _spread(rng, 4096, 600_000, n)


def _rows_cols(rng, elems: float, widths=_WIDTHS, tiny: bool = False) -> tuple[int, int]:
    widths = TINY_WIDTHS if tiny else widths
    cols = int(rng.choice([w for w in widths if w <= max(widths[0], elems / 2)]))
    return max(1, round(elems / cols)), cols


def _const(rng, shape, dtype="float32"):
    from tvm import relax

    return relax.const(rng.standard_normal(shape).astype(dtype) * 0.1, dtype)


def _dims(shape) -> str:
    return "x".join(str(int(d)) for d in shape)


def _model(name: str, inputs, body) -> Model:
    """A Relax model ``main(*inputs)`` whose dataflow block ``body(bb, *vars)`` fills; returns its output."""
    from tvm import relax

    bb = relax.BlockBuilder()
    params = [relax.Var(n, relax.TensorType(tuple(int(d) for d in s), dt)) for n, s, dt in inputs]
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(body(bb, *params))
        bb.emit_func_output(out)
    return load_model(bb.get(), name=name)


def _f32(*shapes) -> list:
    return [(f"x{i}", s, "float32") for i, s in enumerate(shapes)]


# -- elementwise ---------------------------------------------------------------------------------------
def _elementwise(rng, family: str, n: int, tiny: bool = False) -> list[Model]:
    from tvm import relax

    op = relax.op
    forms = {
        "sigmoid": [op.sigmoid],
        "tanh": [op.tanh],
        "exp": [op.exp],
        "erf": [op.erf],
        "gelu": [op.nn.gelu],
        "gelu_tanh": [op.nn.gelu_tanh],
        # the op itself (ONNX, Relax), and the form torch.export decomposes it into
        "silu": [op.nn.silu, lambda x: op.multiply(x, op.sigmoid(x))],
        "softplus": [op.nn.softplus, lambda x: op.log(op.add(op.exp(x), relax.const(1.0, "float32")))],
        # rotary position embeddings: sin / cos of the angles, times the rotated half
        "sin": [op.sin, lambda x: op.multiply(op.sin(x), x)],
        "cos": [op.cos, lambda x: op.multiply(op.cos(x), x)],
        "log": [lambda x: op.log(op.abs(x))],
        # x ** 2 of RMS / T5 norms and variances, x ** 3 of tanh-GELU: LLVM makes them multiplies
        "power": [lambda x: op.power(x, relax.const(2.0, "float32")),
                  lambda x: op.power(x, relax.const(3.0, "float32"))],
    }[family]
    # A scalar C-library call per element (sin, cos, log: features.LIBM_CALLS) costs ~2.5 ns: from RoPE's
    # few hundred angles of a small model up to 1M elements (a few ms).
    lo, hi = (256, MAX_ELEMS) if family in ("sin", "cos", "log") else (2048, MAX_ELEMENTWISE_ELEMS)
    models = []
    for i, elems in enumerate(_sizes(rng, lo, hi, n, tiny)):
        shape = _rows_cols(rng, elems, tiny=tiny)
        form = forms[i % len(forms)]
        if i % 3 == 2:  # with the bias add of the layer before (FFN: linear + bias -> activation)
            bias = _const(rng, shape[-1:])
            models.append(_model(f"ops-{family}-{_dims(shape)}-bias", _f32(shape),
                                 lambda bb, x, form=form, bias=bias: form(bb.emit(op.add(x, bias)))))
        else:
            models.append(_model(f"ops-{family}-{_dims(shape)}", _f32(shape),
                                 lambda bb, x, form=form: form(x)))
    return models


def _add(rng, n: int, tiny: bool = False) -> list[Model]:
    from tvm import relax

    models = []
    for i, elems in enumerate(_sizes(rng, 2048, MAX_ELEMENTWISE_ELEMS, n, tiny)):
        shape = _rows_cols(rng, elems, tiny=tiny)
        if i % 2:  # residual add of two activations
            models.append(_model(f"ops-add-{_dims(shape)}-res", _f32(shape, shape),
                                 lambda bb, x, y: relax.op.add(x, y)))
        else:  # bias add (broadcast along rows)
            bias = _const(rng, shape[-1:])
            models.append(_model(f"ops-add-{_dims(shape)}", _f32(shape),
                                 lambda bb, x, b=bias: relax.op.add(x, b)))
    return models


def _residual(rng, n: int) -> list[Model]:
    """Sums of whole activations, 256K to 4M elements: ``x + y``, and three fused (``x + y + z``)."""
    from tvm import relax

    op = relax.op
    models = []
    for i, elems in enumerate(_spread(rng, 1 << 18, MAX_ELEMENTWISE_ELEMS, n)):
        shape = _rows_cols(rng, elems)
        if i % 2:
            models.append(_model(f"ops-residual-{_dims(shape)}-3", _f32(shape, shape, shape),
                                 lambda bb, x, y, z: op.add(bb.emit(op.add(x, y)), z)))
        else:
            models.append(_model(f"ops-residual-{_dims(shape)}-2", _f32(shape, shape),
                                 lambda bb, x, y: op.add(x, y)))
    return models


# -- reductions and norms ------------------------------------------------------------------------------
def _reduce_shape(rng, elems: float, i: int, tiny: bool = False) -> tuple[tuple, list[int], str]:
    """Three patterns in turn: along the last axis, along the middle axis (stride = row), spatial (NCHW)."""
    pattern = i % 3
    if pattern == 0:
        rows, cols = _rows_cols(rng, elems, tiny=tiny)
        return (rows, cols), [1], "last"
    if pattern == 1:
        d = int(rng.choice((16, 32, 64) if tiny else (64, 128, 256, 768)))
        s = max(2, round(elems / d / 4))
        return (4, s, d), [1], "mid"
    c = int(rng.choice(_CHANNELS))
    hw = max(2, round(math.sqrt(elems / c)))
    return (1, c, hw, hw), [2, 3], "hw"


def _reduction(rng, family: str, n: int, tiny: bool = False) -> list[Model]:
    from tvm import relax

    fn = {"mean": relax.op.mean, "sum": relax.op.sum, "max": relax.op.max}[family]
    models = []
    for i, elems in enumerate(_sizes(rng, 4096, MAX_ELEMS, n, tiny)):
        shape, axes, tag = _reduce_shape(rng, elems, i, tiny)
        models.append(_model(f"ops-{family}-{_dims(shape)}-{tag}", _f32(shape),
                             lambda bb, x, axes=axes: fn(x, axis=axes, keepdims=True)))
    return models


def _attention_shapes(rng, n: int, max_macs: float = MAX_MACS) -> list[tuple[int, int, int, int]]:
    """``(batch, heads, seq, head_dim)`` spread over ``batch*heads*seq*seq*head_dim`` multiply-adds."""
    shapes = []
    for macs in _spread(rng, 3e5, max_macs, n):
        d = int(rng.choice((32, 64, 64, 128)))
        heads = int(rng.choice((2, 4, 8, 12)))
        seq = max(8, int(math.sqrt(macs / heads / d)) // 8 * 8)
        shapes.append((1, heads, seq, d))
    return shapes


def _softmax_body(bb, x):
    from tvm import relax

    return relax.op.nn.softmax(x, -1)


def _softmax(rng, n: int, tiny: bool = False) -> list[Model]:
    models = []
    n_attn = 0 if tiny else (n + 1) // 2
    for i, (b, h, s, _) in enumerate(_attention_shapes(rng, n_attn)):
        shape = (b, h, s, s) if i % 2 else (b * h, s, s)  # torch emits 4D scores, ONNX often 3D
        models.append(_model(f"ops-softmax-{_dims(shape)}", _f32(shape), _softmax_body))
    sizes = _sizes(rng, 4096, MAX_ELEMS, n - n_attn, tiny)
    for i, elems in enumerate(rng.permutation(sizes) if tiny else sizes):  # tiny: the row count apart from the width
        # tiny: every row width in turn; else classifier logits and vocabularies too
        shape = _rows_cols(rng, elems, (TINY_WIDTHS[i % len(TINY_WIDTHS)],) if tiny else _WIDTHS + (1000, 4096))
        models.append(_model(f"ops-softmax-{_dims(shape)}", _f32(shape), _softmax_body))
    return models


def _norm(rng, family: str, n: int, tiny: bool = False) -> list[Model]:
    from tvm import relax

    op = relax.op
    models = []
    sizes = _sizes(rng, 4096, MAX_ELEMS, n, tiny)
    # tiny: the row count apart from the row width (a group norm's maps have no width to keep apart from)
    for i, elems in enumerate(rng.permutation(sizes) if tiny and family != "group_norm" else sizes):
        if family == "group_norm":
            c = int(rng.choice((32, 64, 128, 256)))
            groups = int(rng.choice([g for g in (8, 16, 32) if c % g == 0]))
            hw = max(2, round(math.sqrt(elems / c)))
            shape = (1, c, hw, hw)
            gamma, beta = _const(rng, (c,)), _const(rng, (c,))
            models.append(_model(
                f"ops-group_norm-{_dims(shape)}-g{groups}", _f32(shape),
                lambda bb, x, g=gamma, b=beta, groups=groups: op.nn.group_norm(x, g, b, groups, 1, [2, 3])))
            continue
        width = TINY_WIDTHS[(i // 2 if family == "rms_norm" else i) % len(TINY_WIDTHS)]  # tiny: every row width
        rows, hidden = _rows_cols(rng, elems, (width,) if tiny else (64, 128, 256, 384, 512, 768, 1024, 2048, 4096))
        shape = (rows, hidden) if i % 2 == 0 else (1, rows, hidden)
        gamma, beta = _const(rng, (hidden,)), _const(rng, (hidden,))
        if family == "layer_norm":
            body = lambda bb, x, g=gamma, b=beta: op.nn.layer_norm(x, g, b, [-1])
        elif i % 2 == 0:
            body = lambda bb, x, g=gamma: op.nn.rms_norm(x, g, [-1])
        else:  # as torch.export decomposes nn.RMSNorm: x * rsqrt(mean(x^2) + eps) * weight
            def body(bb, x, g=gamma):
                two, eps = relax.const(2.0, "float32"), relax.const(1e-6, "float32")
                ms = bb.emit(op.mean(op.power(x, two), axis=[-1], keepdims=True))
                return op.multiply(op.multiply(x, op.rsqrt(op.add(ms, eps))), g)
        tag = "" if family == "layer_norm" or i % 2 == 0 else "-decomposed"
        models.append(_model(f"ops-{family}-{_dims(shape)}{tag}", _f32(shape), body))
    return models


# -- data movement -------------------------------------------------------------------------------------
def _movement(rng, family: str, n: int, tiny: bool = False) -> list[Model]:
    from tvm import relax

    op = relax.op
    models = []
    for i, elems in enumerate(_sizes(rng, 2048, MAX_ELEMS, n, tiny)):
        if family == "transpose":
            if i % 2:  # (B, S, H, D) -> (B, H, S, D): splitting heads
                d = int(rng.choice((32, 64, 128)))
                h = int(rng.choice((2, 4, 8, 12)))
                shape, axes = (1, max(2, round(elems / h / d)), h, d), [0, 2, 1, 3]
            else:
                shape, axes = _rows_cols(rng, elems, tiny=tiny), [1, 0]
            models.append(_model(f"ops-transpose-{_dims(shape)}", _f32(shape),
                                 lambda bb, x, axes=axes: op.permute_dims(x, axes)))
        elif family == "concat":
            k = 2 + i % 3
            if i % 2:  # channels of NCHW feature maps (inception, U-Net skips)
                c = int(rng.choice(_CHANNELS))
                hw = max(2, round(math.sqrt(elems / k / c)))
                shapes, axis = [(1, c, hw, hw)] * k, 1
            else:
                rows, cols = _rows_cols(rng, elems / k, tiny=tiny)
                shapes, axis = [(rows, cols)] * k, 1
            models.append(_model(f"ops-concat-{k}x{_dims(shapes[0])}-a{axis}", _f32(*shapes),
                                 lambda bb, *xs, axis=axis: op.concat(list(xs), axis=axis)))
        elif family == "split":
            if i % 2:  # chunk of NCHW channels
                c = 2 * int(rng.choice(_CHANNELS))
                hw = max(2, round(math.sqrt(elems / c)))
                shape, parts, axis = (1, c, hw, hw), 2, 1
            else:  # fused QKV projection -> q, k, v
                rows, cols = _rows_cols(rng, elems / 3, (64, 128, 256, 512, 768, 1024), tiny=tiny)
                shape, parts, axis = (rows, 3 * cols), 3, 1
            models.append(_model(f"ops-split-{_dims(shape)}-{parts}", _f32(shape),
                                 lambda bb, x, parts=parts, axis=axis: op.split(x, parts, axis)))
        elif family == "strided_slice":
            rows, cols = _rows_cols(rng, elems, tiny=tiny)
            if i % 2:  # every other element of the rows (x[:, ::2])
                shape, args = (rows, cols), ([1], [0], [cols], [2])
                tag = "step2"
            else:  # a contiguous block of columns (x[:, a:b])
                shape, args = (rows, cols), ([1], [cols // 4], [cols // 4 + cols // 2], [1])
                tag = "half"
            models.append(_model(f"ops-strided_slice-{_dims(shape)}-{tag}", _f32(shape),
                                 lambda bb, x, args=args: op.strided_slice(x, *args)))
        elif family == "take":  # index_select along a row (axis 1) or of rows (axis 0)
            rows, cols = _rows_cols(rng, elems, tiny=tiny)
            axis = i % 2
            size = (rows, cols)[axis]
            idx = relax.const(rng.integers(0, size, size=max(1, size // 2)).astype("int64"), "int64")
            models.append(_model(f"ops-take-{rows}x{cols}-a{axis}", _f32((rows, cols)),
                                 lambda bb, x, idx=idx, axis=axis: op.take(x, idx, axis=axis)))
        elif family == "index_tensor":  # advanced indexing as Hugging Face decoders build their causal mask:
            # cache positions (1, tokens) gathered at a batch index and a column (or row) of token indices
            tokens = int(np.clip(round(elems / (16 if tiny else 64)), 4, 4096))
            column = i % 2 == 0

            def body(bb, x, tokens=tokens, column=column):
                batch = bb.emit(op.expand_dims(relax.const(np.zeros(1, "int64"), "int64"), [1, 2, 3]))  # (1, 1, 1, 1)
                pos = bb.emit(op.add(op.arange(0, tokens, 1, "int64"), relax.const(0, "int64")))
                at = bb.emit(op.expand_dims(pos, [0, 1, 3] if column else [0, 1, 2]))  # (1, 1, tokens, 1) or (1, 1, 1, tokens)
                return op.index_tensor(x, [batch, at])

            models.append(_model(f"ops-index_tensor-{tokens}-{'col' if column else 'row'}",
                                 [("positions", (1, tokens), "int64")], body))
        elif family == "embedding":  # ids (model input) look up rows of a table (weight)
            d = int(rng.choice((64, 128, 256, 512, 768)))
            tokens = max(1, round(elems / d))
            vocab = int(min(rng.choice((1000, 8192, 30522)), (4 << 20) // d))
            table = _const(rng, (vocab, d))
            models.append(_model(f"ops-embedding-{vocab}x{d}-{tokens}", [("ids", (1, tokens), "int64")],
                                 lambda bb, ids, t=table: op.take(t, ids, axis=0)))
        elif family == "cumsum":
            rows, cols = _rows_cols(rng, elems, (64, 128, 256, 512, 1024, 2048), tiny=tiny)
            axis = 1 if i % 2 == 0 else 0
            models.append(_model(f"ops-cumsum-{rows}x{cols}-a{axis}", _f32((rows, cols)),
                                 lambda bb, x, axis=axis: op.cumsum(x, axis=axis)))
        elif family == "pad":  # zero padding a convolution does not fuse (MobileNet's, "same" padding)
            if i % 3 == 2:  # causal padding of a sequence before a conv1d (k - 1 on the left)
                c = int(rng.choice(_CHANNELS))
                shape, width = (1, c, max(4, round(elems / c))), [0, 0, 0, 0, 2, 0]
                tag = "causal"
            else:  # (1, 1) around NCHW maps ("same" for 3x3), or (0, 1) (TF "same" for stride 2)
                c = int(rng.choice(_CHANNELS + (240, 384, 576)))
                hw = max(1, round(math.sqrt(elems / c)))
                shape = (1, c, hw, hw)
                width = [0, 0, 0, 0, 1, 1, 1, 1] if i % 3 == 0 else [0, 0, 0, 0, 0, 1, 0, 1]
                tag = "same" if i % 3 == 0 else "tf"
            models.append(_model(f"ops-pad-{_dims(shape)}-{tag}", _f32(shape),
                                 lambda bb, x, width=width: op.nn.pad(x, width)))
        elif family == "where":
            if i % 2:  # attention mask: scores where mask else -1e9 (mask broadcast over heads)
                heads = int(rng.choice((2, 4, 8, 12)))
                s = max(4, round(math.sqrt(elems / heads)))
                shape = (1, heads, s, s)
                inputs = [("x", shape, "float32"), ("mask", (1, 1, s, s), "bool")]
                models.append(_model(
                    f"ops-where-{_dims(shape)}-mask", inputs,
                    lambda bb, x, m: op.where(m, x, relax.const(-1e9, "float32"))))
            else:  # select between two tensors on a comparison (leaky / clamp patterns)
                shape = _rows_cols(rng, elems, tiny=tiny)
                models.append(_model(
                    f"ops-where-{_dims(shape)}", _f32(shape, shape),
                    lambda bb, x, y: op.where(op.greater(x, relax.const(0.0, "float32")), x, y)))
    if family == "pad":  # zero widths: Hugging Face's MobileNetV2 pads before each convolution, by 0 before its 1x1
        # ones (a plain copy, 2-4x faster per element than a pad that writes borders); drawn after the other models
        for elems in _sizes(rng, 2048, MAX_ELEMS, 2, tiny):
            c = int(rng.choice(_CHANNELS))
            hw = max(1, round(math.sqrt(elems / c)))
            shape = (1, c, hw, hw)
            models.append(_model(f"ops-pad-{_dims(shape)}-zero", _f32(shape),
                                 lambda bb, x: op.nn.pad(x, [0] * 8)))
    return models


# -- convolutions and pooling --------------------------------------------------------------------------
def _conv_geometry(rng, elems: float, k: int, s: int, grouping: str, max_macs: float = MAX_MACS, min_h: int | None = None):
    """``(C, H, Cout, groups)`` of an NCHW convolution with about ``elems`` input elements, maps of at least
    ``min_h`` (default: the kernel size) pixels a side."""
    min_h = k if min_h is None else min_h
    c = int(rng.choice(_CHANNELS))
    if grouping == "dw":
        groups, cout = c, c
    elif grouping == "gr":
        groups = int(rng.choice([g for g in (2, 4, 8, 32) if c % g == 0 and c // g >= 4] or [2]))
        cout = c
    else:
        groups, cout = 1, int(rng.choice([x for x in _CHANNELS if c // 2 <= x <= 2 * c]))
    h = max(min_h, round(math.sqrt(elems / c)))
    while True:
        oh = (h + 2 * (k // 2) - k) // s + 1
        macs = cout * (c // groups) * k * k * oh * oh
        if macs <= max_macs:
            return c, h, cout, groups
        if h > max(k, 4):
            h = max(k, min(h - 1, int(h * math.sqrt(max_macs / macs))))
        else:  # the image is already small: fewer channels (halving keeps the grouping)
            c, cout, groups = c // 2, cout // 2, max(1, groups // 2) if grouping != "g1" else 1


def _conv2d(rng, family: str, n: int, tiny: bool = False) -> list[Model]:
    from tvm import relax

    op = relax.op
    m = re.match(r"conv2d_k(\d)s(\d)(\w+)", family)
    k, s, grouping = int(m.group(1)), int(m.group(2)), m.group(3)
    models = []
    for i, elems in enumerate(_conv_sizes(rng, n, tiny)):
        # tiny: maps down to 1x1 (a 3x3 window larger than the map)
        c, h, cout, groups = _conv_geometry(rng, elems, k, s, grouping, min_h=1 if tiny else None)
        weight = _const(rng, (cout, c // groups, k, k))
        epilogue = i % 2 == 1
        bias = _const(rng, (1, cout, 1, 1))

        def body(bb, x, w=weight, b=bias, groups=groups, epilogue=epilogue):
            y = op.nn.conv2d(x, w, strides=s, padding=k // 2, groups=groups)
            if epilogue:  # conv + bias + ReLU: one fused kernel
                y = op.nn.relu(op.add(bb.emit(y), b))
            return y

        name = f"ops-{family}-{c}x{h}x{h}-{cout}" + ("-relu" if epilogue else "")
        models.append(_model(name, _f32((1, c, h, h)), body))
    return models


#: ``(kernel, stride, grouping)`` of the ``conv2d_tfpad`` models, in turn (depthwise first: MobileNet's).
TFPAD_CONVS = ((3, 1, "dw"), (3, 2, "dw"), (5, 1, "dw"), (3, 1, "g1"), (5, 2, "dw"), (3, 2, "g1"), (7, 1, "dw"),
               (1, 1, "g1"))


def _conv2d_tfpad(rng, n: int, tiny: bool = False) -> list[Model]:
    """MobileNet's inverted-residual front with TF-style padding: a 1x1 convolution + bias + ReLU6 widens the input
    to C channels, the pad TF computes for "same" (``k - 1`` split, the extra pixel after at stride 2), then a
    k x k convolution without padding (+ bias + ReLU6 every other model), :data:`TFPAD_CONVS` in turn. FuseOps puts
    the pad in the 1x1 convolution's epilogue: the k x k one reads a padded map, as in Hugging Face's MobileNetV2."""
    from tvm import relax

    op = relax.op
    models = []
    for i, elems in enumerate(_conv_sizes(rng, n, tiny)):
        k, s, grouping = TFPAD_CONVS[i % len(TFPAD_CONVS)]
        c, h, cout, groups = _conv_geometry(rng, elems, k, s, grouping, min_h=1 if tiny else None)
        cin = max(8, c // int(rng.choice((2, 4, 6))))  # expansion factor of the 1x1 convolution
        total = max(k - s, 0) if h % s == 0 else max(k - h % s, 0)  # TF: pad so that out = ceil(h / s)
        before, after = total // 2, total - total // 2
        width = [0, 0, 0, 0, before, after, before, after]
        expand, expand_bias = _const(rng, (c, cin, 1, 1)), _const(rng, (1, c, 1, 1))
        weight, bias = _const(rng, (cout, c // groups, k, k)), _const(rng, (1, cout, 1, 1))
        epilogue = i % 2 == 1

        def body(bb, x, e=expand, eb=expand_bias, w=weight, b=bias, groups=groups, s=s, width=width,
                 epilogue=epilogue):
            y = op.clip(op.add(bb.emit(op.nn.conv2d(x, e)), eb), 0.0, 6.0)
            y = op.nn.conv2d(bb.emit(op.nn.pad(bb.emit(y), width)), w, strides=s, groups=groups)
            if epilogue:  # conv + bias + ReLU6 (MobileNet's clip)
                y = op.clip(op.add(bb.emit(y), b), 0.0, 6.0)
            return y

        name = f"ops-conv2d_tfpad-k{k}s{s}{grouping}-{cin}x{h}x{h}-{c}-{cout}" + ("-relu6" if epilogue else "")
        models.append(_model(name, _f32((1, cin, h, h)), body))
    return models


#: ``(kernel, stride, grouping)`` of the conv1d models (temporal convs, wav2vec, ConvNeXt-style depthwise).
CONV1D = ((3, 1, "g1"), (1, 1, "g1"), (5, 2, "g1"), (7, 1, "dw"), (3, 2, "dw"), (3, 1, "gr"))


def _conv1d(rng) -> list[Model]:
    from tvm import relax

    models = []
    for (k, s, grouping), elems in zip(CONV1D, rng.permutation(_spread(rng, 4096, 600_000, len(CONV1D)))):
        c = int(rng.choice(_CHANNELS))
        groups = c if grouping == "dw" else (4 if grouping == "gr" and c % 4 == 0 else 1)
        cout = c if groups > 1 else int(rng.choice([x for x in _CHANNELS if c // 2 <= x <= 2 * c]))
        length = max(k, round(elems / c))
        macs = cout * (c // groups) * k * length / s
        length = max(k, int(length * min(1.0, MAX_MACS / macs)))
        weight = _const(rng, (cout, c // groups, k))
        models.append(_model(
            f"ops-conv1d-k{k}s{s}{grouping}-{c}x{length}-{cout}", _f32((1, c, length)),
            lambda bb, x, w=weight, s=s, k=k, g=groups: relax.op.nn.conv1d(x, w, s, k // 2, groups=g)))
    return models


#: ``(kernel, stride, padding, activation)`` of :data:`FAMILIES` ``conv1d_seq`` models, in turn.
CONV1D_SEQ_OPS = ((3, 1, 1, "gelu"), (3, 2, 1, "gelu"), (5, 1, 2, "relu"), (1, 1, 0, ""), (10, 5, 0, "gelu"),
                  (2, 2, 0, "gelu"))
#: Sequence lengths (output of a stride-1 convolution) and channel counts of ``conv1d_seq``.
CONV1D_SEQ_LENGTHS = (64, 128, 200, 256, 400, 512, 800, 1000, 1500)
CONV1D_SEQ_CHANNELS = (32, 64, 80, 128, 192, 256, 384, 512)
#: ``(input channels, length)`` of the architecture suite's Whispers (base: 80 and 256 x 500; small: 16 and 32 x
#: 32): not drawn, so that leaving Whisper out of the cost model's evaluation leaves its kernels out too.
CONV1D_SEQ_HELD_OUT = ((80, 500), (256, 500), (16, 32), (32, 32))


def _conv1d_seq(rng, n: int) -> list[Model]:
    """1D convolutions + bias (+ GELU or ReLU) over ``(1, channels, length)`` sequences, :data:`CONV1D_SEQ_OPS` in
    turn, at most :data:`CNN_STAGE_MAX_MACS` multiply-adds: channels from :data:`CONV1D_SEQ_CHANNELS` (a k10 stride-5
    convolution reads the raw waveform: 1 channel, 4000-16000 samples), output lengths from
    :data:`CONV1D_SEQ_LENGTHS` (a stride-2 one reads twice as many)."""
    from tvm import relax

    op = relax.op
    models = []
    for i in range(n):
        k, s, pad, act = CONV1D_SEQ_OPS[i % len(CONV1D_SEQ_OPS)]
        if k == 10:  # wav2vec2's first layer over the waveform
            cin, length = 1, int(rng.choice((4000, 8000, 16000)))
            cout = int(rng.choice((256, 512)))
        else:
            while True:
                cin = int(rng.choice(CONV1D_SEQ_CHANNELS))
                cout = cin if s == 2 else int(rng.choice(CONV1D_SEQ_CHANNELS))
                out = int(rng.choice(CONV1D_SEQ_LENGTHS))
                length = out * s
                if (cin, length) not in CONV1D_SEQ_HELD_OUT and cin * cout * k * out <= CNN_STAGE_MAX_MACS:
                    break
        weight, bias = _const(rng, (cout, cin, k)), _const(rng, (1, cout, 1))

        def body(bb, x, w=weight, b=bias, s=s, pad=pad, act=act):
            y = op.add(bb.emit(op.nn.conv1d(x, w, strides=s, padding=pad)), b)
            return {"gelu": op.nn.gelu, "relu": op.nn.relu}[act](bb.emit(y)) if act else y

        models.append(_model(f"ops-conv1d_seq-k{k}s{s}-{cin}x{length}-{cout}" + (f"-{act}" if act else ""),
                             _f32((1, cin, length)), body))
    return models


def _pool(rng, family: str, n: int) -> list[Model]:
    from tvm import relax

    nn = relax.op.nn
    configs = {
        "max_pool2d": [(3, 2, 1), (2, 2, 0), (3, 1, 1)],  # ResNet stem, VGG, inception branch
        "avg_pool2d": [(2, 2, 0), (3, 1, 1), (3, 2, 1)],
        "adaptive_avg_pool2d": [1, 7, 1],
    }[family]
    models = []
    # from the few thousand elements of a small CNN's pools (inception's 8x16x16 branch) up
    for i, elems in enumerate(_spread(rng, 2048, MAX_ELEMS, n)):
        c = int(rng.choice(_CHANNELS + (512,)))
        h = max(8, round(math.sqrt(elems / c)))
        if i % 2 == 0:  # CNN feature maps (224 -> 112, 56, 28...): rows the vector width divides
            h = max(16, round(h / 16) * 16)
        cfg = configs[i % len(configs)]
        if family == "adaptive_avg_pool2d":
            h = max(cfg, h // cfg * cfg)
            models.append(_model(f"ops-adaptive_avg_pool2d-{c}x{h}x{h}-o{cfg}", _f32((1, c, h, h)),
                                 lambda bb, x, o=cfg: nn.adaptive_avg_pool2d(x, o)))
            continue
        size, stride, _ = cfg
        fn = nn.max_pool2d if family == "max_pool2d" else nn.avg_pool2d
        models.append(_model(f"ops-{family}-{c}x{h}x{h}-k{size}s{stride}", _f32((1, c, h, h)),
                             lambda bb, x, fn=fn, cfg=cfg: fn(x, cfg[0], cfg[1], cfg[2])))
    return models


#: ``(kernel height, kernel width)`` of :data:`FAMILIES` ``conv_odd_rows``, in turn, and the maps (none of 4-16
#: lanes divides their rows).
CONV_ODD_ROWS_KERNELS = ((1, 1), (3, 3), (1, 7), (7, 1), (5, 5))
CONV_ODD_ROWS_MAPS = (17, 19, 38, 23, 29, 34)
#: Largest multiply-add count of a ``conv_odd_rows`` convolution with as many output channels as input ones (about
#: 1 ms on two Xeon f6m207 cores); one with twice as many does twice the work.
CONV_ODD_ROWS_MAX_MACS = 6.0e7


def _conv_odd_rows(rng, n: int) -> list[Model]:
    """Stride-1, one-group convolutions with bias + ReLU on maps no vector divides the rows of, "same" padding (the
    1x7 / 7x1 pairs of Inception-v3 pad one axis only); input channels drawn from what fits in
    :data:`CONV_ODD_ROWS_MAX_MACS`, output channels half, as many or twice as many."""
    from tvm import relax

    op = relax.op
    models = []
    for i in range(n):
        kh, kw = CONV_ODD_ROWS_KERNELS[i % len(CONV_ODD_ROWS_KERNELS)]
        h = CONV_ODD_ROWS_MAPS[i % len(CONV_ODD_ROWS_MAPS)]  # 5 kernels x 6 maps: no pair twice in 30 models
        fits = [c for c in (16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768)
                if c * c * kh * kw * h * h <= CONV_ODD_ROWS_MAX_MACS]
        c = int(rng.choice(fits[-3:] or [16]))
        cout = int(rng.choice((c // 2, c, 2 * c))) if c >= 32 else c
        weight, bias = _const(rng, (cout, c, kh, kw)), _const(rng, (1, cout, 1, 1))
        pad = (kh // 2, kw // 2, kh // 2, kw // 2)

        def body(bb, x, w=weight, b=bias, pad=pad):
            return op.nn.relu(op.add(bb.emit(op.nn.conv2d(x, w, padding=pad)), b))

        models.append(_model(f"ops-conv_odd_rows-{kh}x{kw}-{c}x{h}x{h}-{cout}-relu", _f32((1, c, h, h)), body))
    return models


#: Output maps of :data:`FAMILIES` ``conv_dw_pow2``, in turn with the strides (no (map, stride) twice in 10 models),
#: and its channel counts: MobileNetV2 / EfficientNet widths at depth multipliers 0.25-1 (6x the block's input).
DW_POW2_MAPS = (2, 4, 8, 16, 32)
DW_POW2_CHANNELS = (8, 16, 24, 48, 96, 144, 192, 240, 384, 576, 960)


def _conv_dw_pow2(rng, n: int) -> list[Model]:
    """3x3 depthwise convolutions without padding on maps TF-padded beforehand (the pad is fused into the
    previous 1x1 convolution: the kernel reads the padded map), giving :data:`DW_POW2_MAPS` outputs at stride 1
    (pad 1 + 1) and 2 (pad 0 + 1), + bias + ReLU6, the second ten followed by a zero-width pad as in
    Hugging Face's MobileNetV2; channels drawn from the :data:`DW_POW2_CHANNELS` that keep the output within
    640 KB (wide maps take the narrow ones)."""
    from tvm import relax

    op = relax.op
    models = []
    for i in range(n):
        out = DW_POW2_MAPS[i % len(DW_POW2_MAPS)]
        s = 1 + i % 2  # five maps: the other stride in the next round
        fits = [c for c in DW_POW2_CHANNELS if c * out * out <= 160_000]  # at most 640 KB out
        c = int(rng.choice(fits))
        h = out + 2 if s == 1 else 2 * out + 1  # the padded input
        weight, bias = _const(rng, (c, 1, 3, 3)), _const(rng, (1, c, 1, 1))
        zero_pad = (i // (2 * len(DW_POW2_MAPS))) % 2 == 1  # each (map, stride) with and without, in 20

        def body(bb, x, w=weight, b=bias, s=s, c=c, zero_pad=zero_pad):
            y = op.clip(op.add(bb.emit(op.nn.conv2d(x, w, strides=s, groups=c)), b), 0.0, 6.0)
            return op.nn.pad(bb.emit(y), [0] * 8) if zero_pad else y

        name = f"ops-conv_dw_pow2-k3s{s}-{c}x{h}x{h}-relu6" + ("-pad0" if zero_pad else "")
        models.append(_model(name, _f32((1, c, h, h)), body))
    return models


#: Ops a :data:`FAMILIES` ``small_chain`` link is drawn from (each keeps the tensor's shape and dtype).
SMALL_CHAIN_LINKS = ("add", "subtract", "roll", "not_equal", "maximum", "view", "slice_pad")


def _small_chain(rng, n: int) -> list[Model]:
    """Chains of 1-9 ops (:data:`SMALL_CHAIN_LINKS`: an add or subtract of a constant, a roll along the last axis
    as two strided slices and a concatenation, a compare cast back, a maximum, an expand_dims + reshape, a slice
    padded back) on ``(rows, cols)`` tensors of 4-64 elements, int64 and float32 in turn: one fused kernel each."""
    from tvm import relax

    op = relax.op
    models = []
    for i, elems in enumerate(_spread(rng, 4, 64, n)):
        rows = int(rng.choice([r for r in (1, 2, 4) if r * 2 <= elems] or [1]))
        cols = max(2, round(elems / rows))
        dtype = "int64" if i % 2 == 0 else "float32"
        links = [str(rng.choice(SMALL_CHAIN_LINKS)) for _ in range(1 + i % 5 + int(rng.integers(0, 5)))]

        def body(bb, x, links=links, dtype=dtype, rows=rows, cols=cols):
            one = relax.const(1, dtype)
            y = x
            for link in links:
                if link == "add":
                    y = op.add(y, one)
                elif link == "subtract":
                    y = op.subtract(y, one)
                elif link == "roll":
                    y = op.concat([op.strided_slice(y, [1], [1], [cols]), op.strided_slice(y, [1], [0], [1])], axis=1)
                elif link == "not_equal":
                    y = op.astype(op.not_equal(y, one), dtype)
                elif link == "maximum":
                    y = op.maximum(y, x)
                elif link == "view":
                    y = op.reshape(op.expand_dims(y, [0]), (rows, cols))
                else:  # slice_pad: the first cols - 1 columns, a zero column after them
                    y = op.concat([op.strided_slice(y, [1], [0], [cols - 1]),
                                   op.zeros((rows, 1), dtype)], axis=1)
            return y

        name = f"ops-small_chain-{rows}x{cols}-{dtype}-{'-'.join(links)}"
        models.append(_model(name, [("x", (rows, cols), dtype)], body))
    return models


#: Channels and map sides of :data:`FAMILIES` ``channels_last`` (pairs with at most :data:`CHANNELS_LAST_MAX_ELEMS`).
CHANNELS_LAST_CHANNELS = (8, 12, 16, 24, 32, 48, 64, 96)
CHANNELS_LAST_MAPS = (2, 4, 7, 8, 14, 16, 28)
CHANNELS_LAST_MAX_ELEMS = 1 << 15
#: ``(channels, map)`` of the architecture suite's ConvNeXts (small: 8 x 8x8, 16 x 4x4; base: 32 x 16x16, 64 x 8x8):
#: not drawn, so that leaving ConvNeXt out of the cost model's evaluation leaves its kernels out too.
CHANNELS_LAST_HELD_OUT = ((8, 8), (16, 4), (32, 16), (64, 8))
#: The kernels of a ``channels_last`` model, in turn.
CHANNELS_LAST_KINDS = ("to_nhwc", "layer_norm", "scale_residual", "scale_residual_nhwc", "to_nchw", "layer_norm_nchw")


def _channels_last(rng, n: int) -> list[Model]:
    """A channels-last block's kernels (:data:`CHANNELS_LAST_KINDS`) on ``(channels, map)`` pairs drawn from
    :data:`CHANNELS_LAST_CHANNELS` x :data:`CHANNELS_LAST_MAPS`: a permute NCHW -> NHWC or back, a layer norm over
    the channels of an NHWC map (or of an NCHW map permuted in the same kernel), and the layer scale + residual
    kernel as the PyTorch frontend fuses it (the ``(pixels, channels)`` branch reshaped to NHWC, times gamma,
    permuted to NCHW and added to the residual stream; ``_nhwc``: permuted back for the next block)."""
    from tvm import relax

    op = relax.op
    pairs = [(c, h) for c in CHANNELS_LAST_CHANNELS for h in CHANNELS_LAST_MAPS
             if c * h * h <= CHANNELS_LAST_MAX_ELEMS and (c, h) not in CHANNELS_LAST_HELD_OUT]
    order = rng.permutation(len(pairs))  # every model its own pair (while pairs last)
    models = []
    for i in range(n):
        kind = CHANNELS_LAST_KINDS[i % len(CHANNELS_LAST_KINDS)]
        c, h = pairs[int(order[i % len(pairs)])]
        gamma, beta = _const(rng, (c,)), _const(rng, (c,))
        if kind in ("to_nhwc", "to_nchw"):
            shape, axes = ((1, c, h, h), [0, 2, 3, 1]) if kind == "to_nhwc" else ((1, h, h, c), [0, 3, 1, 2])
            models.append(_model(f"ops-channels_last-{kind}-{_dims(shape)}", _f32(shape),
                                 lambda bb, x, axes=axes: op.permute_dims(x, axes)))
        elif kind == "layer_norm":
            models.append(_model(f"ops-channels_last-{kind}-{_dims((1, h, h, c))}", _f32((1, h, h, c)),
                                 lambda bb, x, g=gamma, b=beta: op.nn.layer_norm(x, g, b, axes=[-1])))
        elif kind == "layer_norm_nchw":  # ConvNeXt's downsampling norm: permute, normalise, permute back
            def body(bb, x, g=gamma, b=beta):
                y = bb.emit(op.nn.layer_norm(bb.emit(op.permute_dims(x, [0, 2, 3, 1])), g, b, axes=[-1]))
                return op.permute_dims(y, [0, 3, 1, 2])

            models.append(_model(f"ops-channels_last-{kind}-{_dims((1, c, h, h))}", _f32((1, c, h, h)), body))
        else:
            again = kind.endswith("_nhwc")

            def body(bb, y, x, g=gamma, c=c, h=h, again=again):
                scaled = bb.emit(op.multiply(bb.emit(op.reshape(y, (1, h, h, c))), g))
                out = bb.emit(op.add(x, bb.emit(op.permute_dims(scaled, [0, 3, 1, 2]))))
                return op.permute_dims(out, [0, 2, 3, 1]) if again else out

            models.append(_model(f"ops-channels_last-{kind}-{h * h}x{c}", _f32((h * h, c), (1, c, h, h)), body))
    return models


#: ``(channels, map)`` of :data:`FAMILIES` ``global_pool``: the last feature maps of torchvision's ResNets
#: (512 / 2048 x 7x7), MobileNetV2 (1280 x 7x7), ConvNeXt / Swin (768 x 7x7), EfficientNet-style and
#: Inception heads (384 x 14x14, 64 x 56x56), a CIFAR net's; on the Intel Xeon f6m207 the cost model had priced
#: inception-base's 64x56x56 mean 6.7x high, from smaller means and a scalar 1x1 adaptive pool (session 32).
GLOBAL_POOL_HEADS = ((64, 56), (32, 112), (96, 28), (128, 28), (256, 14), (384, 14), (512, 7), (768, 7), (1280, 7),
                     (2048, 7))


def _global_pool() -> list[Model]:
    from tvm import relax

    models = []
    for c, h in GLOBAL_POOL_HEADS:
        models.append(_model(f"ops-global_pool-mean-{c}x{h}x{h}", _f32((1, c, h, h)),
                             lambda bb, x: relax.op.mean(x, axis=[2, 3], keepdims=False)))
        models.append(_model(f"ops-global_pool-adaptive-{c}x{h}x{h}", _f32((1, c, h, h)),
                             lambda bb, x: relax.op.nn.adaptive_avg_pool2d(x, 1)))
    return models


#: ``(op, kernel, stride)`` of the CNN-stage models, in turn (1x1 stride 2: a ResNet shortcut that downsamples).
CNN_STAGE_OPS = (("conv", 3, 1), ("conv", 1, 1), ("max_pool", 3, 1), ("conv", 3, 2), ("conv", 1, 2), ("max_pool", 3, 2))
#: Largest multiply-add count of a CNN-stage convolution (scheduled: about 1 ms on two Zen 3 cores).
CNN_STAGE_MAX_MACS = 6.0e7


def _cnn_stage(rng, n: int) -> list[Model]:
    """Convolutions (with bias + ReLU) and max pools on the feature maps of an ImageNet CNN: at each map size,
    about as many channels as :data:`CNN_STAGE_MAX_MACS` allows (torchvision's widths, scaled down)."""
    from tvm import relax

    op = relax.op
    models = []
    for i in range(n):
        kind, k, s = CNN_STAGE_OPS[i % len(CNN_STAGE_OPS)]
        h = (112, 56, 28, 14, 7)[i % 5]  # with 6 ops in turn: no (op, size) twice in 30 models
        fits = [c for c in (16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)
                if c * c * k * k * (h // s) ** 2 <= CNN_STAGE_MAX_MACS]
        c = int(rng.choice(fits[-2:] or [16]))
        if kind == "max_pool":  # a pool's channels are those of the convolutions around it
            c = int(rng.choice((64, 128, 192, 256)))
            models.append(_model(f"ops-cnn_stage-maxpool{k}s{s}-{c}x{h}x{h}", _f32((1, c, h, h)),
                                 lambda bb, x, k=k, s=s: op.nn.max_pool2d(x, k, s, k // 2)))
            continue
        cout = c * s  # a strided convolution doubles the channels
        weight, bias = _const(rng, (cout, c, k, k)), _const(rng, (1, cout, 1, 1))

        def body(bb, x, w=weight, b=bias, k=k, s=s):
            return op.nn.relu(op.add(bb.emit(op.nn.conv2d(x, w, strides=s, padding=k // 2)), b))

        models.append(_model(f"ops-cnn_stage-conv{k}x{k}s{s}-{c}x{h}x{h}-{cout}-relu", _f32((1, c, h, h)), body))
    return models


#: ``(kernel, stride)`` of the power-of-two CNN-stage convolutions, in turn: a block's 3x3, the strided 3x3 that
#: halves the map and doubles the channels, the 1x1 shortcut beside it, a bottleneck's 1x1.
CNN_POW2_OPS = ((3, 1), (3, 2), (1, 2), (1, 1))
#: Map sizes of the power-of-two stages, in turn (with 4 ops: no (op, size) twice in 20 models).
CNN_POW2_MAPS = (64, 32, 16, 8, 128)


def _cnn_pow2(rng, n: int, *, family: str = "cnn_pow2", channels=(8, 16, 32, 64, 128, 256, 512),
              maps=CNN_POW2_MAPS, widest: int = 3, rotate: bool = False) -> list[Model]:
    """Convolutions (with bias + ReLU) of a CNN's stages on power-of-two maps (``maps`` in turn; with ``rotate``,
    shifted by one every round of them), at one of the ``widest`` channel counts of ``channels`` that
    :data:`CNN_STAGE_MAX_MACS` allows (power-of-two ones by default)."""
    from tvm import relax

    op = relax.op
    models = []
    for i in range(n):
        k, s = CNN_POW2_OPS[i % len(CNN_POW2_OPS)]
        h = maps[(i + i // len(maps) if rotate else i) % len(maps)]
        widen = s if s == 2 else int(rng.choice((1, 2))) if k == 1 else 1  # a bottleneck's 1x1 may widen 2x
        fits = [c for c in channels if widen * c * c * k * k * (h // s) ** 2 <= CNN_STAGE_MAX_MACS]
        c = int(rng.choice(fits[-widest:] or [channels[0]]))
        cout = widen * c
        weight, bias = _const(rng, (cout, c, k, k)), _const(rng, (1, cout, 1, 1))

        def body(bb, x, w=weight, b=bias, k=k, s=s):
            return op.nn.relu(op.add(bb.emit(op.nn.conv2d(x, w, strides=s, padding=k // 2)), b))

        models.append(_model(f"ops-{family}-conv{k}x{k}s{s}-{c}x{h}x{h}-{cout}-relu", _f32((1, c, h, h)), body))
    return models


#: Channel counts of :func:`_cnn_pow2_mixed`: multiples of 8 that are not powers of two.
MIXED_CHANNELS = (24, 40, 48, 80, 96, 112, 160, 192, 320)
#: Map sizes of the mixed-width stages, in turn (with 4 ops: no (op, size) twice in 16 models).
MIXED_MAPS = (64, 32, 16, 8)


def _cnn_pow2_mixed(rng, n: int) -> list[Model]:
    """:func:`_cnn_pow2`'s convolutions with channel counts from :data:`MIXED_CHANNELS`: the widest two that
    :data:`CNN_STAGE_MAX_MACS` allows at each map size."""
    return _cnn_pow2(rng, n, family="cnn_pow2_mixed", channels=MIXED_CHANNELS, maps=MIXED_MAPS, widest=2, rotate=True)


#: Output channels of :func:`_cnn_tiny_maps`: a ResNet's last stages at widths 0.25-1 and the mixed widths between.
TINY_MAP_CHANNELS = (32, 48, 64, 96, 128, 192, 256, 384, 512)
#: Output map sizes of :func:`_cnn_tiny_maps`: what a ResNet's last stage gives on 32x32-64x64 images.
TINY_MAP_OUTPUTS = (1, 2, 4)
#: ``(output channels, output map)`` of the architecture suite's ResNets on maps of 4 and less (base: 64 x 4x4,
#: 128 x 2x2; small: 16 x 4x4): not drawn, so that leaving ResNet out of the cost model's evaluation leaves its
#: kernels out too.
TINY_MAP_HELD_OUT = ((64, 4), (128, 2), (16, 4))
#: The convolutions of a basic residual block, in turn: ``(kernel, stride, tail)``.
TINY_MAP_OPS = ((3, 1, "-relu"), (3, 1, "-residual-relu"), (3, 2, "-relu"), (1, 2, ""))


def _block_model(rng, family: str, cin: int, cout: int, h: int, k: int, s: int, tail: str) -> Model:
    """``ops-<family>-conv<k>x<k>s<s>-<cin>x<H>x<H>-<cout><tail>``: :func:`_block_conv` onto an ``h`` x ``h`` map (its
    input ``h * s`` pixels wide), with seeded weights, bias and shortcut."""
    weight, bias = _const(rng, (cout, cin, k, k)), _const(rng, (1, cout, 1, 1))
    shortcut = _const(rng, (1, cout, h, h))
    h_in = h * s
    return _model(f"ops-{family}-conv{k}x{k}s{s}-{cin}x{h_in}x{h_in}-{cout}{tail}", _f32((1, cin, h_in, h_in)),
                  lambda bb, x: _block_conv(bb, x, weight, bias, shortcut, k, s, tail))


def _block_conv(bb, x, weight, bias, shortcut, k: int, s: int, tail: str):
    """A CNN block's k x k convolution at stride ``s`` (padding ``k // 2``) + bias, then its ``tail``: ``""``
    nothing, ``"-relu"``, ``"-residual-relu"`` (the shortcut added before the ReLU) or ``"-gate"`` (times its own
    sigmoid); FuseOps makes one kernel of it."""
    from tvm import relax

    op = relax.op
    y = op.add(bb.emit(op.nn.conv2d(x, weight, strides=s, padding=k // 2)), bias)
    if tail == "-residual-relu":
        y = op.add(bb.emit(y), shortcut)
    if tail == "-gate":
        y = bb.emit(y)
        return op.multiply(y, bb.emit(op.sigmoid(y)))
    return op.nn.relu(bb.emit(y)) if tail else y


def _cnn_tiny_maps(rng, n: int) -> list[Model]:
    """A basic residual block's convolutions whose outputs are 1x1, 2x2 or 4x4 maps (the last stages of a ResNet on
    small images), :data:`TINY_MAP_OPS` in turn: 3x3 + bias + ReLU, the same with the shortcut added before the
    ReLU, 3x3 stride 2 (widening 2x) + bias + ReLU, and the 1x1 stride-2 shortcut + bias. Rows of 1-4 pixels and
    taps mostly in the padding: on the Zen 4 resnet-base's 3x3 convolutions on 2x2 maps ran in about 0.6x of what
    the cost model had priced them at from ``cnn_pow2``'s maps of 8 and more (session 39). Each (op, map) gets
    eight widths since session 59 (four before): on the Zen 3 power-of-two widths ran 1.15-1.4x faster per flop than
    the 96/192/384 ones beside them, and with four widths a map's 3x3 convolutions had no power-of-two width above
    64 to learn that from (resnet-base's 128 x 2x2 ones priced 1.4x)."""
    widths = {h: [c for c in TINY_MAP_CHANNELS if (c, h) not in TINY_MAP_HELD_OUT] for h in TINY_MAP_OUTPUTS}
    orders = {h: rng.permutation(len(cs)) for h, cs in widths.items()}  # on each map, every model its own width
    drawn, on_map = set(), dict.fromkeys(TINY_MAP_OUTPUTS, 0)
    models = []
    for i in range(n):
        k, s, tail = TINY_MAP_OPS[i % len(TINY_MAP_OPS)]
        h = TINY_MAP_OUTPUTS[i // len(TINY_MAP_OPS) % len(TINY_MAP_OUTPUTS)]  # every (op, map) in turn
        # the next width in this map's order that this op has not had on it yet
        ring = [widths[h][int(j)] for j in np.roll(orders[h], -on_map[h])]
        on_map[h] += 1
        cout = next((c for c in ring if (k, s, tail, c, h) not in drawn), ring[0])
        drawn.add((k, s, tail, cout, h))
        cin = cout // 2 if s == 2 else cout
        models.append(_block_model(rng, "cnn_tiny_maps", cin, cout, h, k, s, tail))
    return models


#: Input channels of :func:`_conv_downsample_tiny_maps` (ConvNeXt's stages at widths 0.25-1.5 and between).
DOWNSAMPLE_CHANNELS = (16, 32, 48, 64, 96, 128, 192, 256)
#: Output maps and ``(kernel = stride)`` of :func:`_conv_downsample_tiny_maps`, in turn.
DOWNSAMPLE_OUTPUTS = (4, 2, 1)
DOWNSAMPLE_KERNELS = (2, 4)
#: ``(input channels, output map)`` of the architecture suite's ConvNeXts' downsamplings onto maps of 4 and less
#: (base: 64 -> 128 onto 4x4, 128 -> 256 onto 2x2; small: 8 -> 16 onto 4x4): not drawn (as :data:`TINY_MAP_HELD_OUT`).
DOWNSAMPLE_HELD_OUT = ((64, 4), (128, 2), (8, 4))


def _conv_downsample_tiny_maps(rng, n: int) -> list[Model]:
    """``ops-conv_downsample_tiny_maps-conv<k>x<k>s<k>-<cin>x<H>x<H>-<2 cin>``: a k x k convolution at stride k, no
    padding, doubling the channels, + bias, onto a 4x4, 2x2 or 1x1 map (its input k times as wide), each (map,
    kernel) in turn with the next of its widths in a seeded order."""
    from tvm import relax

    op = relax.op
    pairs = [(h, k) for k in DOWNSAMPLE_KERNELS for h in DOWNSAMPLE_OUTPUTS]
    widths = {(h, k): [c for c in DOWNSAMPLE_CHANNELS  # held-out shapes left out, and work over MAX_MACS
                       if (c, h) not in DOWNSAMPLE_HELD_OUT and 2 * c * h * h * c * k * k <= MAX_MACS]
              for h, k in pairs}
    orders = {pair: [widths[pair][int(j)] for j in rng.permutation(len(widths[pair]))] for pair in pairs}
    models = []
    for i in range(n):
        h, k = pairs[i % len(pairs)]
        cin = orders[(h, k)][i // len(pairs) % len(orders[(h, k)])]
        cout, h_in = 2 * cin, h * k
        weight, bias = _const(rng, (cout, cin, k, k)), _const(rng, (1, cout, 1, 1))
        models.append(_model(
            f"ops-conv_downsample_tiny_maps-conv{k}x{k}s{k}-{cin}x{h_in}x{h_in}-{cout}", _f32((1, cin, h_in, h_in)),
            lambda bb, x, weight=weight, bias=bias, k=k: op.add(bb.emit(op.nn.conv2d(x, weight, strides=k)), bias)))
    return models


#: Input channel counts of :func:`_conv_narrow` (a toy CNN's widths; stride 2 doubles them).
NARROW_CHANNELS = (4, 6, 8, 12, 16, 24)
#: Output map sizes of :func:`_conv_narrow`: a toy CNN's maps on 16x16-32x32 images, then on 64x64 ones.
NARROW_OUTPUTS = (4, 8, 16, 32)
#: ``(kernel, stride, tail)`` of :func:`_conv_narrow`, in turn: a basic residual block's (3x3 + bias + ReLU, the
#: same with the shortcut added before the ReLU, 3x3 stride 2 widening 2x + bias + ReLU, the 1x1 stride-2
#: shortcut + bias) and a 5x5 + bias gated by its own sigmoid (a two-branch CNN's gate, SiLU in its decomposed form).
NARROW_OPS = ((3, 1, "-relu"), (3, 1, "-residual-relu"), (3, 2, "-relu"), (1, 2, ""), (5, 1, "-gate"))
#: ``(input channels, input map, output channels, kernel, stride)`` of the zoo's convolutions with at most 24 input
#: channels (cnn, resnet, inception, resnet-base, mobilenetv2, convnext, at either size): not drawn, so that leaving
#: an architecture out of the cost model's evaluation leaves its kernels out too.
NARROW_HELD_OUT = ((8, 16, 8, 3, 1), (8, 16, 16, 3, 2), (8, 16, 16, 1, 2), (16, 8, 16, 3, 1),
                   (8, 8, 8, 3, 1), (8, 8, 16, 3, 2), (8, 8, 16, 1, 2), (16, 4, 16, 3, 1),
                   (16, 16, 16, 3, 1), (16, 16, 32, 3, 2), (16, 16, 32, 1, 2))


def _conv_narrow(rng, n: int) -> list[Model]:
    """Toy CNNs' convolutions, :data:`NARROW_OPS` in turn on each of :data:`NARROW_OUTPUTS` in turn, input widths from
    :data:`NARROW_CHANNELS` in a seeded order per map (no (op, width, map) twice, none of :data:`NARROW_HELD_OUT`)."""
    orders = {h: rng.permutation(len(NARROW_CHANNELS)) for h in NARROW_OUTPUTS}
    on_map, drawn, models = dict.fromkeys(NARROW_OUTPUTS, 0), set(), []
    for i in range(n):
        k, s, tail = NARROW_OPS[i % len(NARROW_OPS)]
        h = NARROW_OUTPUTS[i // len(NARROW_OPS) % len(NARROW_OUTPUTS)]
        ring = [NARROW_CHANNELS[int(j)] for j in np.roll(orders[h], -on_map[h])]
        on_map[h] += 1

        def fresh(c, k=k, s=s, tail=tail, h=h):
            return (k, s, tail, c, h) not in drawn and (c, h * s, c * s, k, s) not in NARROW_HELD_OUT

        cin = next(c for c in ring if fresh(c))
        drawn.add((k, s, tail, cin, h))
        cout = cin * s
        models.append(_block_model(rng, "conv_narrow", cin, cout, h, k, s, tail))
    return models


#: Kinds of :data:`FAMILIES` ``space_to_depth`` models, in turn: Swin's patch merging with the residual add fused in
#: front (``(H*W, C)`` branch + ``(1, H*W, C)`` stream), without it, and YOLOv5's Focus (NCHW).
SPACE_TO_DEPTH_KINDS = ("tokens_residual", "tokens", "nchw")
#: Map sizes (before merging) and channel counts of ``space_to_depth``: Swin's stages at 64-224 pixels and embedding
#: widths 16-192 (and 4C of the earlier merges), YOLO's images and early maps (3-64 channels).
SPACE_TO_DEPTH_MAPS = (4, 8, 14, 16, 28, 32, 56)
SPACE_TO_DEPTH_CHANNELS = (3, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384)
SPACE_TO_DEPTH_MAX_ELEMS = 1 << 18
#: ``(channels, map)`` of the architecture suite's Swins' patch merging (base: 48 x 16x16, 96 x 8x8; small: 16 x
#: 8x8): not drawn, so that leaving Swin out of the cost model's evaluation leaves its kernels out too.
SPACE_TO_DEPTH_HELD_OUT = ((48, 16), (96, 8), (16, 8))


def _space_to_depth(rng, n: int) -> list[Model]:
    """2x2 space-to-depth (:data:`SPACE_TO_DEPTH_KINDS` in turn) on ``(channels, map)`` pairs drawn from
    :data:`SPACE_TO_DEPTH_CHANNELS` x :data:`SPACE_TO_DEPTH_MAPS` (every model its own pair): the four
    ``x[.., a::2, b::2]`` views as the PyTorch frontend emits them (one ``strided_slice`` per axis, in Swin's order
    (0, 0), (1, 0), (0, 1), (1, 1)), concatenated over channels."""
    from tvm import relax

    op = relax.op
    pairs = [(c, h) for c in SPACE_TO_DEPTH_CHANNELS for h in SPACE_TO_DEPTH_MAPS
             if c * h * h <= SPACE_TO_DEPTH_MAX_ELEMS and (c, h) not in SPACE_TO_DEPTH_HELD_OUT]
    order = rng.permutation(len(pairs))
    models, drawn = [], 0

    def quarters(x, rows, cols, extent):
        """The four ``x[.., a::2, b::2]`` of axes ``rows`` and ``cols``, one strided slice per axis."""
        def view(t, axis, start):
            return op.strided_slice(t, axes=[axis], begin=[start], end=[extent], strides=[2])

        return [view(view(x, rows, a), cols, b) for a, b in ((0, 0), (1, 0), (0, 1), (1, 1))]

    for i in range(n):
        kind = SPACE_TO_DEPTH_KINDS[i % len(SPACE_TO_DEPTH_KINDS)]
        # the next pair in the order (tokens: a transformer's width, 12 channels and more)
        while True:
            c, h = pairs[int(order[drawn % len(pairs)])]
            drawn += 1
            if kind == "nchw" or c >= 12:
                break
        if kind == "nchw":  # YOLOv5's Focus: (1, C, H, W) -> (1, 4C, H/2, W/2)
            models.append(_model(f"ops-space_to_depth-{kind}-{c}x{h}x{h}", _f32((1, c, h, h)),
                                 lambda bb, x, h=h: op.concat(quarters(x, 2, 3, h), axis=1)))
            continue
        residual = kind == "tokens_residual"

        def body(bb, *args, c=c, h=h, residual=residual):
            if residual:  # the block's branch (rows of the last linear layer) added to the stream
                y, x = args
                x = bb.emit(op.add(bb.emit(op.reshape(y, (1, h * h, c))), x))
            else:
                (x,) = args
            grid = bb.emit(op.reshape(x, (1, h, h, c)))
            merged = bb.emit(op.concat(quarters(grid, 1, 2, h), axis=3))
            return op.reshape(merged, (1, h * h // 4, 4 * c))

        shapes = ((h * h, c), (1, h * h, c)) if residual else ((1, h * h, c),)
        models.append(_model(f"ops-space_to_depth-{kind}-{h * h}x{c}", _f32(*shapes), body))
    return models


#: ``(map side, window side)`` of :data:`FAMILIES` ``window_attn_bias`` (Swin at 64-224 pixels, windows of 2-8) and
#: its head counts.
WINDOW_MAPS = ((8, 2), (8, 4), (14, 7), (16, 4), (16, 8), (28, 7), (32, 4), (32, 8), (56, 7), (12, 4), (24, 4))
WINDOW_HEADS = (1, 2, 3, 4, 6, 8, 12)
#: Largest score count ``map**2 * window**2 * heads`` of a ``window_attn_bias`` model.
WINDOW_MAX_SCORES = 1 << 20
#: ``(map, window, heads)`` of the architecture suite's Swins (base: 16/4/3, 8/4/6, 4/4/12; small: 8/4/1, 4/4/2):
#: not drawn, so that leaving Swin out of the cost model's evaluation leaves its kernels out too.
WINDOW_HELD_OUT = ((16, 4, 3), (8, 4, 6), (4, 4, 12), (8, 4, 1), (4, 4, 2))


def _window_attn_bias(rng, n: int) -> list[Model]:
    """Swin's attention scores before the softmax (see :data:`FAMILIES`), shifted (with the mask) and plain blocks
    in turn, on ``(map, window)`` pairs of :data:`WINDOW_MAPS` with a head count of :data:`WINDOW_HEADS` (no
    :data:`WINDOW_HELD_OUT` triple), as Hugging Face's ``SwinModel`` computes them: region ids ``(i >= H - w) + (i >=
    H - w / 2)`` per row and column, ``3 * row + column``, partitioned into windows, pairwise differences, -100
    where they differ; the bias table gathered ahead (``(S*S, heads)``, a take of its own) is an input."""
    from tvm import relax

    op = relax.op
    triples = [(h, w, nh) for h, w in WINDOW_MAPS for nh in WINDOW_HEADS
               if h * h * w * w * nh <= WINDOW_MAX_SCORES and (h, w, nh) not in WINDOW_HELD_OUT]
    order = rng.permutation(len(triples))
    models = []
    for i in range(n):
        h, w, nh = triples[int(order[i % len(triples)])]
        shifted = i % 2 == 0
        windows, s = (h // w) ** 2, w * w
        scale = relax.const(0.25, "float32")  # 1 / sqrt(head_dim) of 16-wide heads

        def region(bb, w=w, h=h):
            """``(1, H, H, 1)`` region ids of the shifted map, as float32."""
            def ids():
                rows = bb.emit(op.arange(0, h, 1, dtype="int64"))
                edges = [op.astype(op.greater_equal(rows, relax.const(h - e, "int64")), "int64") for e in (w, w // 2)]
                return bb.emit(op.add(*edges))

            rows = op.multiply(op.expand_dims(ids(), [0, 2, 3]), relax.const(3, "int64"))
            return bb.emit(op.astype(op.add(rows, op.expand_dims(ids(), [0, 1, 3])), "float32"))

        def body(bb, scores, bias, h=h, w=w, nh=nh, windows=windows, s=s, scale=scale, shifted=shifted):
            table = bb.emit(op.expand_dims(op.permute_dims(op.reshape(bias, (s, s, nh)), [2, 0, 1]), [0]))
            if shifted:  # (1, nh, S, S) + (windows, 1, S, S)
                mapped = op.reshape(region(bb), (1, h // w, w, h // w, w, 1))
                mapped = bb.emit(op.reshape(op.permute_dims(mapped, [0, 1, 3, 2, 4, 5]), (windows, s)))
                diff = bb.emit(op.subtract(op.expand_dims(mapped, 1), op.expand_dims(mapped, 2)))
                mask = op.where(op.not_equal(diff, relax.const(0.0)), relax.const(-100.0), diff)
                mask = bb.emit(op.where(op.equal(diff, relax.const(0.0)), relax.const(0.0), mask))
                table = bb.emit(op.add(table, op.expand_dims(mask, [1])))
            out = bb.emit(op.multiply(op.reshape(scores, (windows, nh, s, s)), scale))
            return op.add(out, table)

        kind = "shifted" if shifted else "plain"
        models.append(_model(f"ops-window_attn_bias-{kind}-{h}x{h}-w{w}-h{nh}",
                             _f32((windows * nh, s, s), (s * s, nh)), body))
    return models


#: Kinds of :data:`FAMILIES` ``window_partition`` models, in turn: tokens padded (by zero rows, as Hugging Face's
#: Swin always pads) then partitioned, a map partitioned (a shifted block's rolled map), windows put back as the map,
#: tokens partitioned without the pad.
WINDOW_PARTITION_KINDS = ("tokens_pad", "map", "reverse", "tokens")
#: Map sides, window sides and channels of ``window_partition`` (a map a multiple of its window, and larger).
WINDOW_PARTITION_MAPS = (8, 12, 14, 16, 24, 28, 32, 56)
WINDOW_PARTITION_WINDOWS = (2, 4, 7, 8)
WINDOW_PARTITION_CHANNELS = (16, 24, 32, 48, 64, 96, 128, 192, 256, 384)
WINDOW_PARTITION_MAX_ELEMS = 1 << 18
#: ``(map, window, channels)`` of the architecture suite's Swins (base: 16/4/48, 8/4/96, 4/4/192; small: 8/4/16,
#: 4/4/32): not drawn, so that leaving Swin out of the cost model's evaluation leaves its kernels out too.
WINDOW_PARTITION_HELD_OUT = ((16, 4, 48), (8, 4, 96), (4, 4, 192), (8, 4, 16), (4, 4, 32))


def _window_partition(rng, n: int) -> list[Model]:
    """Swin's window partition or reverse (:data:`WINDOW_PARTITION_KINDS` in turn) on ``(map, window, channels)``
    triples of :data:`WINDOW_PARTITION_MAPS` x :data:`WINDOW_PARTITION_WINDOWS` x :data:`WINDOW_PARTITION_CHANNELS`
    (no :data:`WINDOW_PARTITION_HELD_OUT` triple), each model its own triple, as Hugging Face's ``SwinModel`` writes
    them: ``view(1, H/w, w, W/w, w, C).permute(0, 1, 3, 2, 4, 5).view(-1, w*w, C)`` and back."""
    from tvm import relax

    op = relax.op
    triples = [(h, w, c) for h in WINDOW_PARTITION_MAPS for w in WINDOW_PARTITION_WINDOWS
               for c in WINDOW_PARTITION_CHANNELS
               if h % w == 0 and h > w and h * h * c <= WINDOW_PARTITION_MAX_ELEMS
               and (h, w, c) not in WINDOW_PARTITION_HELD_OUT]
    order = rng.permutation(len(triples))
    models = []
    for i in range(n):
        h, w, c = triples[int(order[i % len(triples)])]
        kind = WINDOW_PARTITION_KINDS[i % len(WINDOW_PARTITION_KINDS)]
        windows = (h // w) ** 2

        def body(bb, x, h=h, w=w, c=c, kind=kind, windows=windows):
            if kind == "reverse":  # (windows * w * w, C) rows -> (1, H, W, C)
                grid = op.reshape(bb.emit(op.reshape(x, (windows, w, w, c))), (1, h // w, h // w, w, w, c))
                return op.reshape(bb.emit(op.permute_dims(bb.emit(grid), [0, 1, 3, 2, 4, 5])), (1, h, h, c))
            if kind != "map":  # tokens (1, H*W, C) viewed as the map
                x = bb.emit(op.reshape(x, (1, h, h, c)))
            if kind == "tokens_pad":
                x = bb.emit(op.nn.pad(x, [0] * 8))
            grid = bb.emit(op.reshape(x, (1, h // w, w, h // w, w, c)))
            return op.reshape(bb.emit(op.permute_dims(grid, [0, 1, 3, 2, 4, 5])), (windows, w * w, c))

        shape = {"reverse": (windows * w * w, c), "map": (1, h, h, c)}.get(kind, (1, h * h, c))
        models.append(_model(f"ops-window_partition-{kind}-{h}x{h}-w{w}-c{c}", _f32(shape), body))
    return models


#: ``(kernel, map)`` slots of :data:`FAMILIES` ``conv_dw_tiny_maps``: the kernels in turn on each map (7x7 twice:
#: ConvNeXt's), every (slot, map) once in 24 models.
DW_TINY_KERNELS = (7, 5, 7, 3)
DW_TINY_MAPS = (2, 4, 7, 8, 14, 16)
DW_TINY_CHANNELS = (32, 48, 64, 96, 128, 192, 256, 384, 512, 768)
DW_TINY_MAX_ELEMS = 1 << 17
#: ``(channels, map)`` of the architecture suite's ConvNeXts' depthwise convolutions (base: 32 x 16x16, 64 x 8x8,
#: 128 x 4x4, 256 x 2x2; small: 8 x 8x8, 16 x 4x4): not drawn, so that leaving ConvNeXt out of the cost model's
#: evaluation leaves its kernels out too.
DW_TINY_HELD_OUT = ((32, 16), (64, 8), (128, 4), (256, 2), (8, 8), (16, 4))


def _conv_dw_tiny_maps(rng, n: int) -> list[Model]:
    """Depthwise ``k x k`` convolutions, stride 1, "same" padding (``k // 2``), + bias, as ConvNeXt's blocks run them
    (:data:`DW_TINY_KERNELS` on each of :data:`DW_TINY_MAPS`); on each map every model its own channel count from
    :data:`DW_TINY_CHANNELS` (at most :data:`DW_TINY_MAX_ELEMS` elements, not :data:`DW_TINY_HELD_OUT`)."""
    from tvm import relax

    op = relax.op
    widths = {h: [c for c in DW_TINY_CHANNELS if c * h * h <= DW_TINY_MAX_ELEMS and (c, h) not in DW_TINY_HELD_OUT]
              for h in DW_TINY_MAPS}
    orders = {h: rng.permutation(len(cs)) for h, cs in widths.items()}
    models = []
    for i in range(n):
        k = DW_TINY_KERNELS[i % len(DW_TINY_KERNELS)]
        h = DW_TINY_MAPS[i // len(DW_TINY_KERNELS) % len(DW_TINY_MAPS)]
        turn = i % len(DW_TINY_KERNELS) + len(DW_TINY_KERNELS) * (i // (len(DW_TINY_KERNELS) * len(DW_TINY_MAPS)))
        c = widths[h][int(orders[h][turn % len(widths[h])])]
        weight, bias = _const(rng, (c, 1, k, k)), _const(rng, (1, c, 1, 1))

        def body(bb, x, w=weight, b=bias, k=k, c=c):
            return op.add(bb.emit(op.nn.conv2d(x, w, padding=k // 2, groups=c)), b)

        models.append(_model(f"ops-conv_dw_tiny_maps-k{k}-{c}x{h}x{h}", _f32((1, c, h, h)), body))
    return models


#: Block widths of a MobileNetV2 at depth multipliers 0.25-1 (input, before the 6x expansion).
SMALL_MAP_CHANNELS = (8, 16, 24, 32, 40, 64, 96)
#: Block widths of :func:`_conv_small_maps` for ``conv_wide_small_maps``: EfficientNet-B0's 80 and 112, MnasNet's and
#: wider MobileNets' 128-384; not the architecture suite's 96, 160 and 320, so that leaving MobileNetV2 out of the
#: cost model's evaluation leaves its convolutions out too.
WIDE_SMALL_MAP_CHANNELS = (80, 112, 128, 192, 256, 384)


def _conv_small_maps(rng, n: int, *, family: str = "conv_small_maps", channels=SMALL_MAP_CHANNELS) -> list[Model]:
    """An inverted-residual block's 1x1 convolutions on 2x2, 3x3 and 4x4 maps (no (map, width) twice; widths ``c``
    from ``channels``), in turn: expand ``c -> 6c`` + bias + ReLU6, the same with the next depthwise convolution's
    TF pad fused after it, project ``6c -> c'`` + bias, the same with the residual add (``c' = c``)."""
    from tvm import relax

    op = relax.op
    pairs = [(h, c) for h in (2, 3, 4) for c in channels]
    models = []
    for i, pick in enumerate(rng.permutation(len(pairs))[:n]):
        h, c = pairs[pick]
        expand, extra = i % 4 < 2, i % 2 == 1
        cin, cout = (c, 6 * c) if expand else (6 * c, c if extra else int(rng.choice(channels)))
        weight, bias = _const(rng, (cout, cin, 1, 1)), _const(rng, (1, cout, 1, 1))
        residual = _const(rng, (1, cout, h, h))

        def body(bb, x, w=weight, b=bias, r=residual, expand=expand, extra=extra):
            y = op.add(bb.emit(op.nn.conv2d(x, w)), b)
            if expand:
                y = op.clip(bb.emit(y), 0.0, 6.0)
                return op.nn.pad(bb.emit(y), [0, 0, 0, 0, 1, 1, 1, 1]) if extra else y
            return op.add(bb.emit(y), r) if extra else y

        tail = ("-relu6" + ("-pad" if extra else "")) if expand else ("-residual" if extra else "")
        models.append(_model(f"ops-{family}-1x1-{cin}x{h}x{h}-{cout}{tail}", _f32((1, cin, h, h)), body))
    return models


#: ``(kernel, stride, padding)`` of the stem convolutions, in turn: ResNet, MobileNet, a CIFAR net, patch
#: embeddings of 4 (Swin, ConvNeXt), 8 and 16 (ViT), a 5x5 stem.
STEM_CONVS = ((7, 2, 3), (3, 2, 1), (3, 1, 1), (4, 4, 0), (8, 8, 0), (16, 16, 0), (5, 2, 2))
#: Image sizes of the stem convolutions: ImageNet's 224, 128, 64 and CIFAR's 32.
STEM_MAPS = (224, 128, 64, 32)


def _conv_stem(rng, n: int) -> list[Model]:
    """A CNN's or vision transformer's first convolution: 3 input channels, 8-768 output channels, on 32-224
    pixel images (with bias; a CNN's stem also with ReLU), at most :data:`CNN_STAGE_MAX_MACS` multiply-adds."""
    from tvm import relax

    op = relax.op
    models = []
    for i in range(n):
        k, s, pad = STEM_CONVS[i % len(STEM_CONVS)]
        # each kernel on the next map every round of the kernels: every (kernel, map) once in 28 models
        h = STEM_MAPS[(i % len(STEM_CONVS) + i // len(STEM_CONVS)) % len(STEM_MAPS)]
        widths = (96, 192, 384, 768) if s == k else (8, 16, 24, 32, 48, 64)  # a patch embedding is the model's width
        oh = (h + 2 * pad - k) // s + 1
        fits = [c for c in widths if 3 * c * k * k * oh * oh <= CNN_STAGE_MAX_MACS] or [widths[0]]
        cout = int(rng.choice(fits))
        weight, bias = _const(rng, (cout, 3, k, k)), _const(rng, (1, cout, 1, 1))
        relu = s != k

        def body(bb, x, w=weight, b=bias, s=s, pad=pad, relu=relu):
            y = op.add(bb.emit(op.nn.conv2d(x, w, strides=s, padding=pad)), b)
            return op.nn.relu(bb.emit(y)) if relu else y

        name = f"ops-conv_stem-conv{k}x{k}s{s}-3x{h}x{h}-{cout}" + ("-relu" if relu else "")
        models.append(_model(name, _f32((1, 3, h, h)), body))
    return models


#: Channel widths of the late stages and heads of MobileNet/EfficientNet-style CNNs.
HEAD_CHANNELS = (24, 40, 64, 80, 96, 144, 160, 240, 320, 480, 576, 960, 1280)


def _conv_head(rng, n: int) -> list[Model]:
    """1x1 convolutions + bias + ReLU6 on 1x1, 2x2 and 4x4 maps, widening and narrowing in turn (a
    squeeze-excitation block narrows then widens; a classifier head widens to 1280): a row of 1-16 pixels,
    too short for a vector, and a weight read once per call. Only MobileNetV2 had such kernels (its 80 -> 1280
    head: 18 us on the Xeon, held out priced at 5.5)."""
    from tvm import relax

    op = relax.op
    models = []
    for i, cin in enumerate(rng.permutation(HEAD_CHANNELS[1:-1])[:n]):
        h, cin = (1, 2, 1, 4)[i % 4], int(cin)
        wider = [c for c in HEAD_CHANNELS if c > cin]
        narrower = [c for c in HEAD_CHANNELS if c < cin]
        cout = int(rng.choice(wider if i % 2 == 0 else narrower))
        weight, bias = _const(rng, (cout, cin, 1, 1)), _const(rng, (1, cout, 1, 1))

        def body(bb, x, w=weight, b=bias):
            return op.clip(op.add(bb.emit(op.nn.conv2d(x, w)), b), 0.0, 6.0)

        models.append(_model(f"ops-conv_head-1x1-{cin}x{h}x{h}-{cout}-relu6", _f32((1, cin, h, h)), body))
    return models


# -- a decoder block's fused kernels ----------------------------------------------------------------------
def _glu(rng, n: int, tiny: bool = False) -> list[Model]:
    """``act(gate) * up`` on ``(1, tokens, ffn)`` activations reshaped to rows and back, as torch.export gives
    Llama / Mistral / Qwen2 (SiLU in its decomposed form ``x * sigmoid(x)``) and GeGLU models (tanh-GELU)."""
    from tvm import relax

    op = relax.op
    acts = [lambda g: op.multiply(g, op.sigmoid(g)), op.nn.gelu_tanh, op.nn.silu]
    models = []
    for i, elems in enumerate(_sizes(rng, 2048, MAX_ELEMS, n, tiny)):
        rows, cols = _rows_cols(rng, elems, tiny=tiny)
        act = acts[i % len(acts)]

        def body(bb, gate, up, act=act, rows=rows, cols=cols):
            g = bb.emit(op.reshape(gate, (rows, cols)))
            u = bb.emit(op.reshape(up, (rows, cols)))
            return op.reshape(op.multiply(act(g), u), (1, rows, cols))

        models.append(_model(f"ops-glu-{rows}x{cols}-{('silu_x', 'gelu_tanh', 'silu')[i % len(acts)]}",
                             _f32((1, rows, cols), (1, rows, cols)), body))
    return models


def _rotary(rng, n: int, tiny: bool = False) -> list[Model]:
    """Rotary position embeddings on a projection's ``(1, tokens, heads * head_dim)`` output: split into heads,
    then ``q * cos + cat(-q[..., d/2:], q[..., :d/2]) * sin`` with ``(1, 1, tokens, head_dim)`` tables."""
    from tvm import relax

    op = relax.op
    models = []
    for elems in _sizes(rng, 4096, MAX_ELEMS, n, tiny):
        d = int(rng.choice((8, 16, 32) if tiny else (32, 64, 128)))
        heads = int(rng.choice((1, 2, 4) if tiny else (2, 4, 8, 12)))
        tokens = max(1, round(elems / (heads * d)))
        half = d // 2

        def body(bb, x, cos, sin, heads=heads, tokens=tokens, d=d, half=half):
            q = bb.emit(op.permute_dims(op.reshape(x, (1, tokens, heads, d)), [0, 2, 1, 3]))
            lo = op.strided_slice(q, axes=[3], begin=[0], end=[half])
            hi = op.strided_slice(q, axes=[3], begin=[half], end=[d])
            rotated = op.concat([op.negative(hi), lo], axis=3)
            return op.add(op.multiply(q, cos), op.multiply(rotated, sin))

        models.append(_model(f"ops-rotary-{tokens}x{heads}x{d}", _f32((1, tokens, heads * d), (1, 1, tokens, d),
                                                                     (1, 1, tokens, d)), body))
    return models


def _rotary_table(rng, n: int, tiny: bool = False) -> list[Model]:
    """The cos / sin tables rotary embeddings compute on every call from the position ids, as torch.export gives
    Llama / Mistral / Qwen2: HF's ``inv_freq[None, :, None] @ positions[:, None, :]`` (a reduction of length 1)
    reaches Relax as a broadcast product, ``freqs = positions[:, :, None].float() * inv_freq``, then ``emb =
    cat(freqs, freqs)``, ``cos(emb) * scale`` and ``sin(emb) * scale`` on ``(1, tokens, head_dim)``: three kernels,
    the first the fused ``expand_dims``, ``cast``, ``multiply`` and ``concatenate``."""
    from tvm import relax

    op = relax.op
    models = []
    for elems in _sizes(rng, 1024, 1 << 18, n, tiny):
        d = int(rng.choice((8, 16, 32) if tiny else (32, 64, 128)))
        tokens = max(1, round(elems / d))
        inv_freq = relax.const((10000.0 ** (-np.arange(0, d, 2) / d)).astype("float32"))
        scale = relax.const(1.0, "float32")

        def body(bb, positions, inv_freq=inv_freq, scale=scale):
            pos = bb.emit(op.astype(op.expand_dims(positions, 2), "float32"))  # (1, tokens, 1)
            freqs = bb.emit(op.multiply(pos, inv_freq))  # (1, tokens, d/2)
            emb = bb.emit(op.concat([freqs, freqs], axis=-1))
            return relax.Tuple([bb.emit(op.multiply(op.cos(emb), scale)), bb.emit(op.multiply(op.sin(emb), scale))])

        models.append(_model(f"ops-rotary_table-{tokens}x{d}", [("positions", (1, tokens), "int64")], body))
    return models


def _gqa_repeat(rng, n: int, tiny: bool = False) -> list[Model]:
    """Grouped-query attention's ``repeat_kv`` as torch.export gives Llama / Mistral / Qwen2: a key or value
    projection's ``(tokens, kv_heads * head_dim)`` output split into heads, ``x[:, :, None].expand(1, kv_heads, rep,
    tokens, head_dim).reshape(1, kv_heads * rep, tokens, head_dim)``, reshaped to the attention matmul's batch
    (values) or transposed for ``Q @ K^T`` (keys, every other model): layout ops only, fused into one kernel."""
    from tvm import relax

    op = relax.op
    models = []
    for i, elems in enumerate(_sizes(rng, 4096, MAX_ELEMS, n, tiny)):
        d = int(rng.choice((8, 16, 32) if tiny else (64, 128)))
        kv = int(rng.choice((1, 2) if tiny else (1, 2, 4, 8)))
        rep = int(rng.choice((2, 4) if tiny else (2, 4, 7, 8)))
        heads = kv * rep
        tokens = max(1, round(elems / (heads * d)))
        keys = i % 2 == 1

        def body(bb, x, kv=kv, rep=rep, tokens=tokens, d=d, keys=keys):
            split = bb.emit(op.permute_dims(op.reshape(x, (1, tokens, kv, d)), [0, 2, 1, 3]))  # (1, kv, tokens, d)
            wide = op.broadcast_to(op.expand_dims(split, 2), (1, kv, rep, tokens, d))
            y = op.reshape(wide, (1, kv * rep, tokens, d))
            if keys:
                return op.reshape(op.permute_dims(y, [0, 1, 3, 2]), (kv * rep, d, tokens))
            return op.reshape(y, (kv * rep, tokens, d))

        kind = "k" if keys else "v"
        models.append(_model(f"ops-gqa_repeat-{kind}-{tokens}x{kv}x{rep}x{d}", _f32((tokens, kv * d)), body))
    return models


# -- attention's batched matmuls -------------------------------------------------------------------------
def _attention(rng, family: str, n: int) -> list[Model]:
    from tvm import relax

    op = relax.op
    models = []
    for i, (b, h, s, d) in enumerate(_attention_shapes(rng, n)):
        lead = (b, h) if i % 2 else (b * h,)  # torch emits 4D (B, H, S, D), ONNX exports often 3D
        perm = list(range(len(lead))) + [len(lead) + 1, len(lead)]
        if family == "attn_qk":  # scores = (Q @ K^T) * 1/sqrt(d): a transpose kernel, then matmul + scale
            scale = relax.const(1.0 / math.sqrt(d), "float32")
            models.append(_model(
                f"ops-attn_qk-{_dims(lead)}x{s}x{d}", _f32(lead + (s, d), lead + (s, d)),
                lambda bb, q, k, perm=perm, scale=scale: op.multiply(
                    bb.emit(op.matmul(q, bb.emit(op.permute_dims(k, perm)))), scale)))
        else:  # context = P @ V
            models.append(_model(f"ops-attn_av-{_dims(lead)}x{s}x{d}", _f32(lead + (s, s), lead + (s, d)),
                                 lambda bb, p, v: op.matmul(p, v)))
    return models


#: Token counts of vision transformers and their like: patches of a square grid plus a class token
#: (4x4+1 ... 24x24+1), 50 of CLIP ViT-B/32, odd sequence lengths. None has a divisor from 4 to 12, so the
#: CPU register tile pads them (``Contraction.pads_rows``).
TOKENS = (17, 37, 50, 65, 101, 145, 197, 257, 577)


def _linear(rng, n: int) -> list[Model]:
    """``x[tokens, k] @ W[k, n] + b`` (every other with GELU, the MLP's first layer) from 10^4 multiply-adds."""
    from tvm import relax

    op = relax.op
    models = []
    for i, macs in enumerate(_spread(rng, 1e4, MAX_MACS, n)):
        tokens = int(rng.choice([t for t in TOKENS if t * 32 * 32 <= macs] or TOKENS[:1]))
        widths = np.array((16, 32) + _WIDTHS)
        side = math.sqrt(macs / tokens) * 2 ** rng.uniform(-1, 1)
        k = int(widths[np.abs(np.log(widths / side)).argmin()])
        n_out = int(widths[np.abs(np.log(widths * k * tokens / macs)).argmin()])
        weight, bias = _const(rng, (k, n_out)), _const(rng, (n_out,))
        gelu = i % 2 == 1

        def body(bb, x, w=weight, b=bias, gelu=gelu):
            y = op.add(bb.emit(op.matmul(x, w)), b)
            return op.nn.gelu(bb.emit(y)) if gelu else y

        models.append(_model(f"ops-linear-{tokens}x{k}-{n_out}" + ("-gelu" if gelu else ""), _f32((tokens, k)), body))
    return models


def _attention_tokens(rng, n: int) -> list[Model]:
    """Attention's two batched matmuls over :data:`TOKENS` (Q @ K^T, then P @ V), from 10^4 multiply-adds."""
    from tvm import relax

    op = relax.op
    models = []
    for i, macs in enumerate(_spread(rng, 1e4, MAX_MACS, n)):
        d = int(rng.choice((16, 32, 64)))
        heads = int(rng.choice((2, 3, 4, 6, 12)))
        tokens = max([t for t in TOKENS if heads * t * t * d <= macs] or TOKENS[:1])
        lead = (1, heads) if i % 2 else (heads,)
        if i % 2 == 0:
            perm = list(range(len(lead))) + [len(lead) + 1, len(lead)]
            models.append(_model(f"ops-attn_tokens-qk-{_dims(lead)}x{tokens}x{d}",
                                 _f32(lead + (tokens, d), lead + (tokens, d)),
                                 lambda bb, q, k, perm=perm: op.matmul(q, bb.emit(op.permute_dims(k, perm)))))
        else:
            models.append(_model(f"ops-attn_tokens-av-{_dims(lead)}x{tokens}x{d}",
                                 _f32(lead + (tokens, tokens), lead + (tokens, d)),
                                 lambda bb, p, v: op.matmul(p, v)))
    return models


# -- the list --------------------------------------------------------------------------------------------
#: Models per family (others: :data:`DEFAULT_COUNT`); conv2d families have 2 each (24 of them).
COUNTS = {"softmax": 5, "transpose": 5, "add": 5, "conv1d": len(CONV1D), "attn_qk": 4, "attn_av": 4, "max_pool2d": 6,
          "avg_pool2d": 6, "linear": 6, "attn_tokens": 6, "cnn_stage": 30, "cnn_pow2": 20, "cnn_pow2_mixed": 16, "conv_stem": 28,
          "conv_small_maps": 16, "conv_wide_small_maps": 16, "pad": 6, "glu": 6, "rotary": 6, "rotary_table": 6, "gqa_repeat": 6,
          "conv_head": 8, "conv2d_tfpad": 8, "conv_odd_rows": 21,
          "conv_dw_pow2": 20, "small_chain": 16, "channels_last": 24, "cnn_tiny_maps": 96, "conv_narrow": 40, "space_to_depth": 24,
          "conv_downsample_tiny_maps": 24,
          "conv_dw_tiny_maps": 24, "window_attn_bias": 16, "window_partition": 16,
          "conv1d_seq": 24}
DEFAULT_COUNT = 4


def op_family_models(seed: int = 0, families=None, tiny: bool = True) -> list[Model]:
    """Single-op models of every family in :data:`FAMILIES` (see the module notes).

    Parameters
    ----------
    seed : int
        Seeds the sizes and weights; the same seed gives the same models (names, shapes) everywhere.
    families : iterable of str, optional
        Only these families (default: all). Each family draws from its own seeded stream, so a
        family's models do not depend on which others are built.
    tiny : bool
        Also the tiny tier (:data:`TINY_COUNTS` models of the families there, :data:`TINY_ELEMS` elements,
        named ``...-tiny``), drawn from streams of their own: with or without it the other models are the same.

    Returns
    -------
    list of autoplace.Model
        Named ``ops-<family>-<shape>``, the tiny tier after the others.
    """
    chosen = list(FAMILIES) if families is None else list(families)
    unknown = [f for f in chosen if f not in FAMILIES]
    if unknown:
        raise ValueError(f"unknown op families {unknown}; known: {list(FAMILIES)}")
    models = [m for family in chosen for m in _family_models(seed, family)]
    if tiny:
        models += [dataclasses.replace(m, name=f"{m.name}-tiny")
                   for family in chosen if family in TINY_COUNTS for m in _family_models(seed, family, tiny=True)]
    return models


def _family_models(seed: int, family: str, tiny: bool = False) -> list[Model]:
    """The models of one family (its tiny tier with ``tiny``), from the family's own seeded stream."""
    # One stream per family (and tier): stable under adding or removing other families.
    stream = [seed, sum(ord(ch) * 131**i for i, ch in enumerate(family)) % (1 << 32)] + ([1] if tiny else [])
    rng = np.random.default_rng(stream)
    group = FAMILIES[family]
    # (the tiny tier's families, TINY_COUNTS, all take ``tiny``)
    count = TINY_COUNTS[family] if tiny else COUNTS.get(family, 2 if family.startswith("conv2d_") else DEFAULT_COUNT)
    if family == "glu":
        return _glu(rng, count, tiny=tiny)
    if family == "rotary":
        return _rotary(rng, count, tiny=tiny)
    if family == "rotary_table":
        return _rotary_table(rng, count, tiny=tiny)
    if family == "gqa_repeat":
        return _gqa_repeat(rng, count, tiny=tiny)
    if family == "add":
        return _add(rng, count, tiny=tiny)
    if family == "residual":
        return _residual(rng, count)
    if family == "small_chain":
        return _small_chain(rng, count)
    if family == "channels_last":
        return _channels_last(rng, count)
    if family == "space_to_depth":
        return _space_to_depth(rng, count)
    if family == "conv_dw_tiny_maps":
        return _conv_dw_tiny_maps(rng, count)
    if family == "window_attn_bias":
        return _window_attn_bias(rng, count)
    if family == "window_partition":
        return _window_partition(rng, count)
    if group == "elementwise":
        return _elementwise(rng, family, count, tiny=tiny)
    if family in ("mean", "sum", "max"):
        return _reduction(rng, family, count, tiny=tiny)
    if family == "softmax":
        return _softmax(rng, count, tiny=tiny)
    if group == "reduction":
        return _norm(rng, family, count, tiny=tiny)
    if group == "movement":
        return _movement(rng, family, count, tiny=tiny)
    if family == "conv1d":
        return _conv1d(rng)
    if family == "conv1d_seq":
        return _conv1d_seq(rng, count)
    if family == "conv2d_tfpad":
        return _conv2d_tfpad(rng, count, tiny=tiny)
    if family == "cnn_stage":
        return _cnn_stage(rng, count)
    if family == "cnn_pow2":
        return _cnn_pow2(rng, count)
    if family == "cnn_pow2_mixed":
        return _cnn_pow2_mixed(rng, count)
    if family == "conv_small_maps":
        return _conv_small_maps(rng, count)
    if family == "conv_wide_small_maps":
        return _conv_small_maps(rng, count, family=family, channels=WIDE_SMALL_MAP_CHANNELS)
    if family == "cnn_tiny_maps":
        return _cnn_tiny_maps(rng, count)
    if family == "conv_narrow":
        return _conv_narrow(rng, count)
    if family == "conv_downsample_tiny_maps":
        return _conv_downsample_tiny_maps(rng, count)
    if family == "conv_stem":
        return _conv_stem(rng, count)
    if family == "conv_head":
        return _conv_head(rng, count)
    if family == "conv_odd_rows":
        return _conv_odd_rows(rng, count)
    if family == "conv_dw_pow2":
        return _conv_dw_pow2(rng, count)
    if group == "conv":
        return _conv2d(rng, family, count, tiny=tiny)
    if family == "global_pool":
        return _global_pool()
    if group == "pool":
        return _pool(rng, family, count)
    if family == "linear":
        return _linear(rng, count)
    if family == "attn_tokens":
        return _attention_tokens(rng, count)
    return _attention(rng, family, count)
