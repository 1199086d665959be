"""The CPU schedule rules (autoplace.backend.cpu_schedules): every kernel scheduled, same numbers.

Each case legalizes and fuses a small Relax graph the way :func:`autoplace.backend.lower` does, schedules
its kernels for this machine's CPU and checks the scheduled kernel against TVM's unscheduled one (and
against numpy where that is easy) on random inputs. Shapes are small and odd on purpose: sizes that no
tile divides, batch and broadcast matmuls, grouped / depthwise / strided convolutions.
"""

from __future__ import annotations

import shutil
from unittest import mock

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import relax, te

from autoplace.backend import cpu_schedules as cs
from autoplace.backend.cpu_schedules import RULE_ATTR, cpu_legalize_map, cpu_target, schedule_prim_func
from autoplace.backend.strided_loads import STRIDED_LOADS_ATTR, TIR_PIPELINE

R = relax.op
TARGET = cpu_target("llvm")


def _prim_funcs(make, shapes, dtypes=None):
    """Legalize (with the CPU math overrides) and fuse ``make(*vars)``; its PrimFuncs, targeted at TARGET."""
    dtypes = dtypes or ["float32"] * len(shapes)
    bb = relax.BlockBuilder()
    params = [relax.Var(f"x{i}", relax.TensorType(s, d)) for i, (s, d) in enumerate(zip(shapes, dtypes))]
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(make(*params))
        bb.emit_func_output(out)
    with TARGET:  # scans and sorts (cumsum) become kernels here, as in a build; LegalizeOps leaves them alone
        mod = relax.backend.DispatchSortScan()(bb.get())
    mod = relax.transform.LegalizeOps(cpu_legalize_map("llvm"))(mod)
    mod = relax.transform.AnnotateTIROpPattern()(mod)
    mod = relax.transform.FuseOps()(mod)
    mod = relax.transform.FuseTIR()(mod)
    return [(gv.name_hint, f.with_attr("target", TARGET)) for gv, f in mod.functions_items()
            if isinstance(f, tvm.tirx.PrimFunc)]


def _run(func, args):
    func = func.with_attr("global_symbol", "main").without_attr("target")
    lib = tvm.tirx.build(tvm.IRModule({"main": func}), target=TARGET, pipeline=TIR_PIPELINE)
    dev = tvm.cpu()
    tensors = [tvm.runtime.tensor(a, dev) for a in args]
    lib["main"](*tensors)
    return tensors[-1].numpy()


def _random_args(func, seed=0):
    rng = np.random.default_rng(seed)
    args = []
    for p in func.params:
        shape = [int(x) for x in p.ty.shape]
        dtype = str(p.ty.dtype)
        if dtype.startswith("float"):
            args.append(rng.standard_normal(shape).astype(dtype))
        else:
            args.append(rng.integers(0, 2, shape).astype(dtype))
    args[-1] = np.zeros_like(args[-1])
    return args


def check(make, shapes, rules=None, reference=None, rtol=1e-5, atol=1e-5, dtypes=None):
    """Every kernel of ``make`` is scheduled (by one of ``rules`` when given) and computes what the
    unscheduled kernel computes; ``reference(*inputs)`` (numpy) checks single-kernel graphs too."""
    funcs = _prim_funcs(make, shapes, dtypes)
    used = []
    for name, func in funcs:
        scheduled, rule = schedule_prim_func(func, TARGET)
        assert rule != "none", f"{name}: no rule applied"
        assert str(scheduled.attrs[RULE_ATTR]) == rule
        used.append(rule)
        args = _random_args(func)
        want = _run(func, args)
        got = _run(scheduled, args)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=f"{name} ({rule})")
        if reference is not None and len(funcs) == 1:
            np.testing.assert_allclose(got, reference(*args[:-1]), rtol=1e-4, atol=1e-4, err_msg=name)
    if rules is not None:
        assert set(used) <= set(rules), used
    return used


# ---------------------------------------------------------------------------------------------- matmul

@pytest.mark.parametrize("m,k,n", [(7, 13, 5), (33, 65, 17), (1, 128, 10), (64, 300, 257), (16, 40, 512),
                                   (48, 96, 1024), (128, 64, 56)])
def test_matmul(m, k, n):
    check(R.matmul, [(m, k), (k, n)], rules={"Contraction"}, reference=lambda a, b: a @ b)


@pytest.mark.parametrize("a,b", [((3, 33, 17), (3, 17, 40)), ((2, 3, 8, 16), (16, 24)),
                                 ((4, 16, 64), (4, 64, 16))])
def test_batch_and_broadcast_matmul(a, b):
    check(R.matmul, [a, b], rules={"Contraction"}, reference=np.matmul)


def test_matmul_bias_relu_epilogue_fused_into_the_tile():
    used = check(lambda x, w, b: R.nn.relu(R.add(R.matmul(x, w), b)), [(20, 24), (24, 40), (40,)],
                 reference=lambda x, w, b: np.maximum(x @ w + b, 0))
    assert used == ["Contraction"]


@pytest.mark.parametrize("m", [71, 94, 197])
def test_rows_no_tile_divides_are_padded_to_a_register_tile(m):
    """71 rows (prime), 94 (2 x 47), 197 (ViT's tokens): no divisor worth a register tile, so the rows are
    padded (a padded copy of the input, a tile of several rows, the output cropped): right numbers, no
    write past the output, with and without an epilogue."""
    check(R.matmul, [(m, 40), (40, 48)], rules={"Contraction"}, reference=lambda a, b: a @ b)
    check(lambda x, w, b: R.nn.relu(R.add(R.matmul(x, w), b)), [(m, 24), (24, 32), (32,)],
          rules={"Contraction"}, reference=lambda x, w, b: np.maximum(x @ w + b, 0))
    (_, func), = _prim_funcs(R.matmul, [(m, 40), (40, 48)])
    scheduled, _ = schedule_prim_func(func, TARGET)
    script = scheduled.script()
    assert f"x0_pad = T.sblock_alloc_buffer((T.int64({-(-m // 8) * 8}), T.int64(40)))" in script  # padded rows
    assert "T.unroll(" in script


@pytest.mark.parametrize("n", [17, 197])
def test_output_rows_no_vector_divides_are_padded(n):
    """Attention over ViT's tokens, (12, n, 64) @ (12, 64, n): no divisor of n worth a vector, so the
    columns (and rows) are padded rather than left to a scalar predicated tail: right numbers, vector
    lanes in the scheduled kernel."""
    check(R.matmul, [(12, n, 64), (12, 64, n)], rules={"Contraction"}, reference=np.matmul)
    check(lambda x, w, b: R.nn.relu(R.add(R.matmul(x, w), b)), [(n, 24), (24, n), (n,)],
          rules={"Contraction"}, reference=lambda x, w, b: np.maximum(x @ w + b, 0))
    (_, func), = _prim_funcs(R.matmul, [(12, n, 64), (12, 64, n)])
    scheduled, _ = schedule_prim_func(func, TARGET)
    script = scheduled.script()
    padded = -(-n // 8) * 8
    assert f"T.int64({padded})" in script and "T.vectorized(" in script


def test_epilogue_that_reads_a_value_twice():
    # GELU reads its input twice (x * (0.5 + erf(x / sqrt 2) / 2)): the bias add is recomputed, not lost.
    from scipy.special import erf

    def gelu(v):
        return v * 0.5 * (1 + erf(v / np.sqrt(2)))

    used = check(lambda x, w, b: R.nn.gelu(R.add(R.matmul(x, w), b)), [(16, 24), (24, 48), (48,)],
                 reference=lambda x, w, b: gelu(x @ w + b))
    assert used == ["Contraction"]
    used = check(lambda x, w, b: R.nn.gelu(R.add(R.nn.conv1d(x, w, padding=1), b)),
                 [(1, 8, 20), (16, 8, 3), (1, 16, 1)])
    assert used == ["Contraction"]


def test_dense_with_transposed_weight():
    # Linear layers arrive as permute_dims + matmul: two kernels, a transpose and a matmul.
    used = check(lambda x, w: R.matmul(x, R.permute_dims(w)), [(9, 40), (33, 40)])
    assert sorted(used) == ["Contraction", "Injective"]


def test_large_row_stride_matmul_packs_the_panel():
    (_name, func), = _prim_funcs(R.matmul, [(32, 64), (64, 1024)])
    scheduled, rule = schedule_prim_func(func, TARGET)
    assert rule == "Contraction"
    assert "x1_global" in scheduled.script()  # the packed panel of B
    args = _random_args(func)
    np.testing.assert_allclose(_run(scheduled, args), args[0] @ args[1], rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------------------------- conv2d

def _conv_ref(x, w, stride, pad, groups):
    n, _c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    out = np.zeros((n, o, oh, ow), np.float64)
    per = o // groups
    for g in range(groups):
        xs = xp[:, g * cg:(g + 1) * cg]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride]
                weights = w[g * per:(g + 1) * per, :, i, j]
                out[:, g * per:(g + 1) * per] += np.einsum("nchw,oc->nohw", patch, weights)
    return out


@pytest.mark.parametrize("n,c,h,o,k,stride,pad,groups", [
    (1, 8, 13, 16, 3, 1, 1, 1),   # 3x3, odd size
    (1, 8, 14, 16, 3, 2, 1, 1),   # strided
    (2, 6, 9, 10, 1, 1, 0, 1),    # 1x1, batch 2
    (1, 8, 11, 8, 3, 1, 1, 8),    # depthwise
    (1, 8, 10, 12, 3, 1, 1, 2),   # grouped
    (1, 3, 12, 5, 5, 1, 0, 1),    # 5x5, no padding
    (1, 16, 56, 8, 3, 1, 1, 1),   # rows of 56: a vector narrower than a register
    (1, 8, 17, 12, 3, 1, 1, 1),   # rows of 17 (no vector divides them): one 17-lane vector
    (1, 4, 26, 8, 3, 1, 1, 4),    # rows of 26, depthwise
    (1, 32, 17, 24, 1, 1, 0, 1),  # 1x1 on rows of 17: over the flattened map, 289 -> 304 columns
    (2, 16, 19, 8, 1, 1, 0, 1),   # the same, batch 2, rows of 19
    (1, 16, 19, 8, 5, 1, 2, 1),   # 5x5 on rows of 19, flattened with its padding (23-wide rows, 4 dropped)
    (1, 16, 21, 8, 3, 1, 0, 1),   # 3x3 unpadded: output rows of 19
    (1, 20, 2, 96, 3, 1, 1, 1),   # 96 channels on a 2x2 map (a reduction of 180: no ConvLanes): 2-lane vectors
    (1, 40, 4, 48, 1, 1, 0, 1),   # a 1x1 onto 48 channels of a 4x4 map: 4-lane vectors
])
def test_conv2d(n, c, h, o, k, stride, pad, groups):
    check(lambda x, w: R.nn.conv2d(x, w, strides=stride, padding=pad, groups=groups),
          [(n, c, h, h), (o, c // groups, k, k)], rules={"Contraction"},
          reference=lambda x, w: _conv_ref(x, w, stride, pad, groups))


@pytest.mark.parametrize("make,shapes", [
    # a MobileNet head: 1x1 convolution over a 1x1 map, bias, ReLU6 (160 channels: no width divides them evenly
    # into 16 lanes, so 8 lanes)
    (lambda x, w, b: R.clip(R.add(R.nn.conv2d(x, w), b), 0.0, 6.0), [(1, 160, 1, 1), (1280, 160, 1, 1), (1, 1280, 1, 1)]),
    (lambda x, w: R.nn.conv2d(x, w), [(2, 37, 1, 1), (24, 37, 1, 1)]),  # batch 2, a reduction no vector divides
    (lambda x, w: R.nn.conv2d(x, w, strides=2), [(1, 64, 1, 1), (40, 64, 1, 1)]),  # strided: the same one element
    (lambda x, w: R.matmul(x, w), [(6, 300), (300, 1)]),  # a matmul by one column
    (lambda x, w: R.nn.conv2d(x, w, groups=4), [(1, 64, 1, 1), (32, 16, 1, 1)]),  # grouped: 16 channels a group
])
def test_a_contraction_of_one_output_element_a_row_is_a_dot_product_in_vector_lanes(make, shapes):
    # was one scalar multiply-add at a time (Contraction vectorises along output rows: here they are 1 long)
    assert check(make, shapes, rtol=1e-4, atol=1e-4)[0] == "DotProduct"
    (name, func), = [f for f in _prim_funcs(make, shapes) if "conv2d" in f[0] or "matmul" in f[0]]
    scheduled, _ = schedule_prim_func(func, TARGET)
    assert cs.vectorized_row_reduction(scheduled) and cs.vector_width(scheduled) >= 4, name


@pytest.mark.parametrize("make,shapes,wide", [
    # a ResNet's last stage on a 2x2 map: 3x3, bias, ReLU; with the residual add
    (lambda x, w, b: R.nn.relu(R.add(R.nn.conv2d(x, w, padding=1), b)),
     [(1, 128, 2, 2), (128, 128, 3, 3), (1, 128, 1, 1)], False),
    (lambda x, w, b, r: R.nn.relu(R.add(R.add(R.nn.conv2d(x, w, padding=1), b), r)),
     [(1, 128, 2, 2), (128, 128, 3, 3), (1, 128, 1, 1), (1, 128, 2, 2)], False),
    (lambda x, w: R.nn.conv2d(x, w, strides=2, padding=1), [(1, 64, 4, 4), (128, 64, 3, 3)], False),  # 4x4 -> 2x2
    (lambda x, w: R.nn.conv2d(x, w, strides=2), [(1, 64, 4, 4), (128, 64, 1, 1)], False),  # the strided 1x1 shortcut
    # MobileNetV2's 2x2 stage: expansion with ReLU6, projection; a map of 1x4, batch 2, channels no tile of 4 divides
    (lambda x, w, b: R.clip(R.add(R.nn.conv2d(x, w), b), 0.0, 6.0),
     [(1, 160, 2, 2), (960, 160, 1, 1), (1, 960, 1, 1)], False),
    (lambda x, w: R.nn.conv2d(x, w), [(1, 960, 2, 2), (160, 960, 1, 1)], False),
    (lambda x, w: R.nn.conv2d(x, w), [(2, 64, 1, 4), (30, 64, 1, 1)], False),
    (lambda x, w: R.nn.conv2d(x, w, padding=(0, 1, 1, 0)), [(1, 32, 2, 2), (24, 32, 2, 2)], False),  # uneven padding
    # 4x4 maps with a reduction of 8 vector steps or more (AVX-512 only): MobileNetV2's projections, a ResNet's 3x3
    (lambda x, w, b, r: R.add(R.add(R.nn.conv2d(x, w), b), r),
     [(1, 384, 4, 4), (64, 384, 1, 1), (1, 64, 1, 1), (1, 64, 4, 4)], True),
    (lambda x, w: R.nn.relu(R.nn.conv2d(x, w, padding=1)), [(1, 64, 4, 4), (64, 64, 3, 3)], True),
    (lambda x, w: R.nn.conv2d(x, w, strides=2, padding=1), [(1, 32, 8, 8), (64, 32, 3, 3)], True),  # 8x8 -> 4x4
    # 4x4 maps of 2^20 multiply-adds or more: on AVX2 too (outputs in one 8-lane vector, schedule version 17)
    (lambda x, w: R.nn.relu(R.nn.conv2d(x, w, padding=1)), [(1, 128, 4, 4), (128, 128, 3, 3)], False),
    (lambda x, w: R.nn.conv2d(x, w, strides=2), [(1, 256, 8, 8), (512, 256, 1, 1)], False),  # a 1x1 shortcut
])
def test_convolutions_on_tiny_maps_are_dot_products_in_vector_lanes(make, shapes, wide):
    # A 2x2 or 4x4 output map gave Contraction rows of 2 or 4 lanes to vectorise; ConvLanes accumulates each output
    # along its input channels and taps in 16 lanes on AVX-512, 8 on AVX2 (Zen 5: 2x2 1.5-4.4x, 4x4 1.1-2.0x; Zen 3:
    # 2x2 1.03-2.02x over 16 lanes in two registers; experiments/tiny_map_convs.py)
    bits = cs.vector_bits(TARGET)
    if wide and bits < cs.WIDE_MAP_MIN_BITS:  # 4x4 maps of under 2^20 multiply-adds on AVX-512 only
        assert check(make, shapes, rtol=1e-4, atol=1e-4) == ["Contraction"]
        return
    assert check(make, shapes, rtol=1e-4, atol=1e-4) == ["ConvLanes"]
    (name, func), = [f for f in _prim_funcs(make, shapes) if "conv2d" in f[0]]
    assert {"im2col", "conv2d_lanes"} <= _legalized_blocks(make, shapes)
    lanes = cs.conv_lanes(bits)
    assert _vector_loops_of(schedule_prim_func(func, TARGET)[0], "conv2d_lanes_update") == {lanes}, name
    assert lanes == (8 if bits == 256 else cs.CONV_LANES)


def test_only_tiny_maps_with_a_long_enough_reduction_are_dot_products(monkeypatch):
    keep = [(lambda x, w: R.nn.conv2d(x, w, padding=1), [(1, 64, 8, 8), (64, 64, 3, 3)]),  # an 8x8 map: 64 outputs
            (lambda x, w: R.nn.conv2d(x, w), [(1, 96, 4, 4), (576, 96, 1, 1)]),  # a 4x4 map needs 8 steps: 6
            (lambda x, w: R.nn.conv2d(x, w, padding=1), [(1, 16, 4, 4), (16, 16, 3, 3)]),  # and 2^17 multiply-adds
            (lambda x, w: R.nn.conv2d(x, w), [(1, 24, 2, 2), (64, 24, 1, 1)]),  # 24: 3 steps of 8 lanes
            (lambda x, w: R.nn.conv2d(x, w), [(1, 36, 2, 2), (64, 36, 1, 1)]),  # no multiple of 8
            (lambda x, w: R.nn.conv2d(x, w, groups=4, padding=1), [(1, 64, 2, 2), (64, 16, 3, 3)]),  # grouped
            (lambda x, w: R.nn.conv2d(x, w), [(1, 64, 1, 1), (64, 64, 1, 1)])]  # a 1x1 map: DotProduct's
    for make, shp in keep:
        assert "conv2d_lanes" not in _legalized_blocks(make, shp), shp
    make, shapes = lambda x, w: R.nn.conv2d(x, w, padding=1), [(1, 128, 2, 2), (128, 128, 3, 3)]
    monkeypatch.setattr(cs, "TINY_MAP_LANES_CONV", False)  # version 15: rows of 2 lanes
    assert "conv2d_lanes" not in _legalized_blocks(make, shapes)
    assert check(make, shapes) == ["Contraction"]
    monkeypatch.undo()
    assert cs.SCHEDULE_VERSION >= 17
    # AVX-512: 4 channels x 4 positions of 16-lane partial sums; AVX2: 2 x 4 of 8 lanes (3 x 4 would take all 16
    # registers), 1 x 4 of 16 lanes in two registers each (version 16)
    assert cs.conv_lanes(512) == 16 and cs.conv_lanes(256) == 8
    assert cs.conv_lanes_tile(128, 4, 512) == (4, 4) and cs.conv_lanes_tile(128, 4, 256) == (2, 4)
    assert cs.conv_lanes_tile(48, 4, 256) == (2, 4) and cs.conv_lanes_tile(128, 4, 256, lanes=16) == (1, 4)
    assert cs.conv_lanes_tile(30, 4, 512) == (3, 4) and cs.conv_lanes_tile(160, 2, 512) == (4, 2)
    assert cs.conv_lanes_tile(64, 16, 512) == (4, 4)  # a 4x4 map: 4 of its positions a tile
    # 4x4 maps on AVX-512 from 2^17 multiply-adds, on AVX2 from 2^20 and only in 8 lanes; 2x2 maps on both
    assert cs.conv_lanes_apply(384, 16, 64, 512) and not cs.conv_lanes_apply(384, 16, 64, 256)
    assert cs.conv_lanes_apply(1152, 16, 128, 256) and not cs.conv_lanes_apply(1152, 16, 128, 256, lanes=16)
    assert cs.conv_lanes_apply(384, 4, 64, 256) and cs.conv_lanes_apply(40, 4, 64, 256)
    assert not cs.conv_lanes_apply(40, 4, 64, 512) and not cs.conv_lanes_apply(40, 4, 64, 256, lanes=16)
    monkeypatch.setattr(cs, "ONE_VECTOR_CONV_LANES", False)  # version 16: 16 lanes everywhere
    assert cs.conv_lanes(256) == 16 and cs.conv_lanes_tile(128, 4, 256) == (1, 4)
    assert not cs.conv_lanes_apply(1152, 16, 128, 256)


def _reads_along_last_axis(func, block: str) -> dict:
    """``{buffer: whether the first axis that block's reduced loops (longer than 1) index is the buffer's last}`` for
    each buffer ``block`` reads."""
    import tvm_ffi
    from tvm import s_tir

    found = {}

    def visit(b):
        if str(b.name_hint) != block:
            return
        reduced = [iv.var for iv in b.iter_vars
                   if iv.iter_type == tvm.tirx.IterVar.CommReduce and int(iv.dom.extent) > 1]
        for read in b.reads:
            uses = [any(v.same_as(r) for r in reduced for v in cs._vars_in(rng.min)) for rng in read.region]
            found[str(read.source.name)] = any(uses) and uses.index(True) == len(uses) - 1

    tvm_ffi.structural_walk(func.body, (s_tir.SBlock, visit), order="post")
    return found


def test_a_dot_product_reading_its_input_with_a_stride_reads_it_laid_out_along_the_reduction():
    # A 1x1 stride-2 convolution over a 2x2 map reads input channels 4 floats apart: with work for two threads it
    # reads them from a copy with the channels last (Zen 3: 2.6-3.5x faster), on one thread strided as before.
    make = lambda x, w: R.nn.conv2d(x, w, strides=2)
    for shapes, laid_out in (([(1, 128, 2, 2), (256, 128, 1, 1)], True), ([(1, 32, 2, 2), (64, 32, 1, 1)], False)):
        assert check(make, shapes, rtol=1e-4, atol=1e-4) == ["DotProduct"]
        (_, func), = _prim_funcs(make, shapes)
        scheduled, _ = schedule_prim_func(func, TARGET)
        reads = _reads_along_last_axis(scheduled, "conv2d_nchw_rf")
        assert reads["pad_temp"] is laid_out, reads
    saved = cs.COMPACT_STRIDED_DOT_OPERANDS
    cs.COMPACT_STRIDED_DOT_OPERANDS = False
    try:
        (_, func), = _prim_funcs(make, [(1, 128, 2, 2), (256, 128, 1, 1)])
        assert not _reads_along_last_axis(schedule_prim_func(func, TARGET)[0], "conv2d_nchw_rf")["pad_temp"]
    finally:
        cs.COMPACT_STRIDED_DOT_OPERANDS = saved


def test_contractions_with_rows_or_taps_stay_register_tiles():
    # a 2x2 map (rows of 2) and a 3x3 kernel on a 1x1 map (a reduction over channels and taps) are not dot products
    # (a reduction of 36: no multiple of 8 or 16 lanes for ConvLanes)
    assert check(lambda x, w: R.nn.conv2d(x, w), [(1, 36, 2, 2), (32, 36, 1, 1)]) == ["Contraction"]
    assert check(lambda x, w: R.nn.conv2d(x, w, padding=1), [(1, 16, 1, 1), (32, 16, 3, 3)]) == ["Contraction"]
    # a mean kept as a column (an RMS norm's) is a row reduction of one buffer, not a dot product
    assert "DotProduct" not in check(lambda x: R.mean(R.multiply(x, x), axis=-1, keepdims=True), [(7, 64)])
    assert cs.SCHEDULE_VERSION >= 15


def test_a_tile_of_vectors_of_half_a_register_or_less_holds_at_most_eight_rows_with_16_registers():
    # On the AMD Zen 3 (AVX2) 8 rows of 2- or 4-lane vectors ran 0.81x the time of 10-12 (experiments/register_rows.py)
    rule = cs.Contraction()
    avx2 = dict(max_lanes=8, budget=cs._ACCUMULATORS[256], registers=cs._REGISTERS[256], odd=True)
    avx512 = dict(max_lanes=16, budget=cs._ACCUMULATORS[512], registers=cs._REGISTERS[512], odd=True)
    assert [rule.tile_plan(2, 96, **avx2)[k] for k in ("lanes", "nv", "ut")] == [2, 1, 8]  # 96 channels, 2x2 map
    assert rule.tile_plan(4, 96, **avx2)["ut"] == 8
    assert rule.tile_plan(4, 160, **avx2)["ut"] == 8  # was 10
    assert rule.tile_plan(8, 96, **avx2)["ut"] == 12  # a full register: 12 rows stay (8 ran 1.03-1.06x slower)
    assert rule.tile_plan(1, 96, **avx2)["ut"] == 12  # one lane (a 1x1 map): 12 rows stay
    assert rule.tile_plan(250, 250, **avx2)["ut"] == 10  # 5 lanes of 8: more than half a register
    assert rule.tile_plan(2, 96, **avx512)["ut"] == 12  # 32 registers: not measured, unchanged
    assert rule.tile_plan(2, 96, max_lanes=8, budget=12)["ut"] == 12  # no register count given: unchanged
    assert cs.SCHEDULE_VERSION >= 14


def test_conv2d_bias_relu():
    used = check(lambda x, w, b: R.nn.relu(R.add(R.nn.conv2d(x, w, padding=1), b)),
                 [(1, 4, 10, 10), (8, 4, 3, 3), (1, 8, 1, 1)])
    assert used == ["Contraction"]


def _legalized_blocks(make, shapes) -> set:
    """Names of the blocks ``make``'s kernels legalize to."""
    import tvm_ffi
    from tvm import s_tir

    names = set()
    for _, func in _prim_funcs(make, shapes):
        tvm_ffi.structural_walk(func.body, (s_tir.SBlock, lambda b: names.add(str(b.name_hint))), order="post")
    return names


def _vector_loops_of(func, block: str) -> set:
    """Lanes of the vectorised loops around the block named ``block``."""
    import tvm_ffi
    from tvm import s_tir

    lanes = set()

    def visit(loop):
        if loop.kind == tvm.tirx.ForKind.VECTORIZED:
            names = []
            tvm_ffi.structural_walk(loop.body, (s_tir.SBlock, lambda b: names.append(str(b.name_hint))), order="post")
            if block in names:
                lanes.add(int(loop.extent.value))

    tvm_ffi.structural_walk(func.body, (tvm.tirx.For, visit), order="post")
    return lanes


def test_stride_1_convolutions_on_rows_no_vector_divides_run_over_the_flattened_map(monkeypatch):
    # rows of 17: no vector of 4 to 16 lanes tiles them; the flattened padded map (17 rows of 19) is computed in
    # whole vectors, the 2 columns between rows dropped
    lanes = cs.vector_bits(TARGET) // 32
    for k, pad in ((1, 0), (3, 1)):
        conv = (lambda x, w, b, pad=pad: R.nn.relu(R.add(R.nn.conv2d(x, w, padding=pad), b)))
        shapes = [(1, 64, 17, 17), (48, 64, k, k), (1, 48, 1, 1)]
        check(conv, shapes, rules={"Contraction"})
        (_, func), = _prim_funcs(conv, shapes)
        assert "conv2d_flat" in _legalized_blocks(conv, shapes)
        assert _vector_loops_of(schedule_prim_func(func, TARGET)[0], "conv2d_flat_update") == {lanes}
        monkeypatch.setattr(cs, "FLATTEN_ODD_ROW_CONV", False)  # as before: one 17-wide odd vector per row
        (_, before), = _prim_funcs(conv, shapes)
        assert _vector_loops_of(schedule_prim_func(before, TARGET)[0], "conv2d_nchw_update") == {17}
        monkeypatch.undo()
    # TF-style padding (more at the bottom and right), as ONNX exports of TF models carry it
    check(lambda x, w: R.nn.conv2d(x, w, padding=(0, 0, 1, 1)), [(1, 16, 17, 17), (8, 16, 2, 2)],
          rules={"Contraction"}, reference=None)
    assert "conv2d_flat" in _legalized_blocks(lambda x, w: R.nn.conv2d(x, w, padding=(0, 0, 1, 1)),
                                              [(1, 16, 17, 17), (8, 16, 2, 2)])
    # only stride 1, one group, odd rows, enough input channels: the rest legalize as before
    keep = [(lambda x, w: R.nn.conv2d(x, w), [(1, 64, 16, 16), (48, 64, 1, 1)]),           # rows a vector tiles
            (lambda x, w: R.nn.conv2d(x, w, padding=1), [(1, 64, 13, 13), (48, 64, 3, 3)]),  # rows of 13: 13 lanes
            (lambda x, w: R.nn.conv2d(x, w, strides=2), [(1, 64, 35, 35), (48, 64, 1, 1)]),  # strided
            (lambda x, w: R.nn.conv2d(x, w, padding=1, groups=64), [(1, 64, 17, 17), (64, 1, 3, 3)]),  # depthwise
            (lambda x, w: R.nn.conv2d(x, w), [(1, 3, 17, 17), (48, 3, 1, 1)])]               # 3 channels
    for make, shp in keep:
        assert "conv2d_flat" not in _legalized_blocks(make, shp), shp
    assert not cs.odd_conv_row(16) and not cs.odd_conv_row(13) and not cs.odd_conv_row(56)
    assert cs.odd_conv_row(17) and cs.odd_conv_row(38) and cs.odd_conv_row(149)


def test_adaptive_average_pool_to_one_is_a_mean_in_vector_lanes():
    # nn.AdaptiveAvgPool2d(1): TVM's adaptive pool is a scalar loop on one thread; as a mean, a row reduction
    x = np.random.default_rng(0).standard_normal((1, 8, 13, 13)).astype("float32")
    assert _vectorized(lambda x: R.nn.adaptive_avg_pool2d(x, 1), [(1, 8, 56, 56)]) == [("RowReduction", True)]
    check(lambda x: R.nn.adaptive_avg_pool2d(x, (1, 1)), [(1, 8, 13, 13)],
          reference=lambda a: a.mean(axis=(2, 3), keepdims=True))
    assert check(lambda x: R.nn.adaptive_avg_pool2d(x, 1), [x.shape],
                 reference=lambda a: a.mean(axis=(2, 3), keepdims=True))
    # another output size is TVM's adaptive pool, as before
    assert "adaptive_pool_sum" in _legalized_blocks(lambda x: R.nn.adaptive_avg_pool2d(x, 2), [(1, 8, 12, 12)])


def test_pooling():
    check(lambda x: R.nn.max_pool2d(x, (3, 3), (1, 1), (1, 1)), [(1, 6, 11, 11)], rules={"Pool"})
    check(lambda x: R.nn.avg_pool2d(x, (2, 2), (2, 2)), [(1, 6, 12, 12)], rules={"Pool"})
    # stride 2 with padding (ResNet's stem), an average that counts the padding out, an odd row, a ceil-mode edge
    check(lambda x: R.nn.max_pool2d(x, (3, 3), (2, 2), (1, 1)), [(1, 4, 15, 15)], rules={"Pool"})
    check(lambda x: R.nn.avg_pool2d(x, (3, 3), (2, 2), (1, 1)), [(1, 4, 16, 16)], rules={"Pool"})
    check(lambda x: R.nn.max_pool2d(x, (2, 2), (2, 2), ceil_mode=True), [(1, 3, 9, 9)])
    check(lambda x: R.mean(x, axis=[2, 3]), [(1, 6, 9, 9)])
    # rows in parallel only with enough window work (PARALLEL_MIN_WORK["pool"])
    assert _parallel(lambda x: R.nn.max_pool2d(x, (3, 3), (1, 1), (1, 1)), [(1, 32, 16, 16)]) == [("Pool", False)]
    assert _parallel(lambda x: R.nn.max_pool2d(x, (3, 3), (1, 1), (1, 1)), [(1, 64, 32, 32)]) == [("Pool", True)]


# ---------------------------------------------------------------------------------------------- strided loads

def _lowered_loads(func, pipeline):
    """``[(stride, lanes)]`` of the vector loads left in ``func`` lowered by TIR ``pipeline``, and its shuffles."""
    import tvm_ffi

    mod = tvm.tirx.transform.BindTarget(tvm.target.Target(TARGET, host=TARGET))(
        tvm.IRModule({"main": func.with_attr("global_symbol", "main").without_attr("target")}))
    lower, _, _ = tvm.tirx.get_tir_pipeline(pipeline)
    loads, shuffles = [], []

    def load(expr):
        if len(expr.indices) == 1 and isinstance(expr.indices[0], tvm.tirx.Ramp):
            ramp = expr.indices[0]
            if isinstance(ramp.stride, tvm.tirx.IntImm):
                loads.append((int(ramp.stride.value), int(ramp.lanes)))

    body = lower(mod)["main"].body
    tvm_ffi.structural_walk(body, (tvm.ir.expr.TensorLoad, load), order="post")
    tvm_ffi.structural_walk(body, (tvm.tirx.Shuffle, shuffles.append), order="post")
    return loads, shuffles


STRIDED = [  # (make, shapes, rule, strides the scheduled kernel reads its vectors at)
    (lambda x: R.nn.max_pool2d(x, (3, 3), (2, 2), (1, 1)), [(1, 4, 32, 32)], "Pool", [2]),
    (lambda x: R.nn.avg_pool2d(x, (2, 2), (2, 2)), [(1, 3, 64, 64)], "Pool", [2]),
    (lambda x: R.nn.max_pool2d(x, (3, 3), (1, 1), (1, 1)), [(1, 4, 32, 32)], "Pool", []),
    (lambda x, w: R.nn.conv2d(x, w, strides=2, padding=3), [(1, 3, 64, 64), (16, 3, 7, 7)], "Contraction", [2]),
    (lambda x, w: R.nn.conv2d(x, w, strides=2, padding=1, groups=32), [(1, 32, 32, 32), (32, 1, 3, 3)],
     "Contraction", [2]),
    (lambda x, w: R.nn.conv2d(x, w, strides=4), [(1, 3, 64, 64), (16, 3, 4, 4)], "Contraction", [4]),
    (lambda x, w: R.nn.conv2d(x, w, strides=3), [(1, 4, 51, 51), (8, 4, 3, 3)], "Contraction", [3]),
    (lambda x, w: R.nn.conv2d(x, w, padding=1), [(1, 8, 32, 32), (16, 8, 3, 3)], "Contraction", []),
]


@pytest.mark.parametrize("make,shapes,rule,strides", STRIDED)
def test_strided_vector_loads_become_contiguous_loads_and_a_shuffle(make, shapes, rule, strides):
    """A kernel whose vectors read every 2nd-4th element is marked when scheduled; autoplace's TIR pipeline
    leaves no such load in it (TVM's default one would lower each to a scalar load per lane), and it computes
    what the unscheduled kernel computes. A kernel without such loads is neither marked nor changed."""
    assert check(make, shapes, rules={rule}) == [rule]
    ((_, func),) = _prim_funcs(make, shapes)
    scheduled, _ = schedule_prim_func(func, TARGET)
    marked = list(scheduled.attrs[STRIDED_LOADS_ATTR]) if STRIDED_LOADS_ATTR in scheduled.attrs else []
    assert marked == strides
    before, _ = _lowered_loads(scheduled, "default")
    # the marker reads the scheduled TIR; it names exactly the strides TVM's lowering leaves for the pass
    assert sorted({s for s, lanes in before if 2 <= s <= 4 and lanes >= 2 * s}) == strides
    after, shuffles = _lowered_loads(scheduled, TIR_PIPELINE)
    assert not [(s, lanes) for s, lanes in after if 2 <= s <= 4 and lanes >= 2 * s]
    assert bool(shuffles) == bool(strides)


@pytest.mark.parametrize("stride", [2, 3, 4])
@pytest.mark.parametrize("lanes", [8, 9, 16])
def test_a_strided_load_is_rebuilt_from_the_lanes_it_covers(stride, lanes):
    """The shuffle picks element ``stride * j`` of the span for lane ``j``, and its contiguous loads read only
    the span the strided load read (``0 .. stride * (lanes - 1)`` from its base): never past the buffer."""
    from autoplace.backend.strided_loads import _shuffled

    buf = tvm.tirx.decl_buffer((1024,), "float32", "buf")
    base = tvm.tirx.Var("base", "int32")
    load = tvm.tirx.BufferLoad(buf, [tvm.tirx.Ramp(base, tvm.tirx.const(stride, "int32"), lanes)])
    shuffle = _shuffled(load)
    assert isinstance(shuffle, tvm.tirx.Shuffle)
    analyzer = tvm.sym.Analyzer()
    offsets = []
    for vector in shuffle.vectors:
        ramp = vector.indices[0]
        assert int(ramp.stride.value) == 1 and int(ramp.lanes) == lanes
        start = int(analyzer.simplify(ramp.base - base).value)
        offsets += [start + i for i in range(lanes)]
    assert min(offsets) == 0 and max(offsets) == stride * (lanes - 1)
    assert [offsets[int(i.value)] for i in shuffle.indices] == [stride * j for j in range(lanes)]


def test_the_strided_load_marker_is_part_of_a_kernels_profile_key():
    """A kernel lowered with shuffles is another kernel than the same TIR lowered with scalar loads: its
    profile key differs, so records timed before the rewrite are not taken for it."""
    from autoplace.profile.units import unit_key

    ((_, func),) = _prim_funcs(*STRIDED[0][:2])
    scheduled, _ = schedule_prim_func(func, TARGET)
    assert unit_key(scheduled, "llvm") != unit_key(scheduled.without_attr(STRIDED_LOADS_ATTR), "llvm")


# ---------------------------------------------------------------------------------------------- reductions

@pytest.mark.parametrize("shape,axis", [((4, 33), -1), ((2, 5, 7), 1), ((1, 4, 16, 16), -1)])
def test_softmax(shape, axis):
    def softmax(x):
        e = np.exp(x - x.max(axis, keepdims=True))
        return e / e.sum(axis, keepdims=True)

    check(lambda x: R.nn.softmax(x, axis), [shape], reference=softmax)


def test_norms_and_reductions():
    check(lambda x, g, b: R.nn.layer_norm(x, g, b, axes=[-1]), [(5, 37), (37,), (37,)])
    check(lambda x, g, b: R.nn.layer_norm(x, g, b, axes=[-1]), [(1, 16, 64), (64,), (64,)])
    check(lambda x, g: R.nn.rms_norm(x, g, axes=[-1]), [(6, 40), (40,)])
    check(lambda x: R.sum(x, axis=[1]), [(9, 31)])
    check(lambda x: R.max(x, axis=[0]), [(9, 31)])


def _vectorized(make, shapes):
    """``[(rule, whether a row reduction accumulates in vector lanes)]`` of ``make``'s kernels, each checked
    against the unscheduled kernel."""
    check(make, shapes, rtol=1e-4, atol=1e-4)
    return [(rule, cs.vectorized_row_reduction(f))
            for f, rule in (schedule_prim_func(func, TARGET) for _, func in _prim_funcs(make, shapes))]


@pytest.mark.parametrize("make,shape", [(lambda x: R.nn.softmax(x, axis=-1), (15, 16)),
                                        (lambda x: R.nn.softmax(x, axis=-1), (3, 4, 16)),
                                        (lambda x: R.nn.layer_norm(x, relax.const(np.ones(16, "float32")),
                                                                   relax.const(np.zeros(16, "float32")), [-1]),
                                         (8, 16))])
@pytest.mark.skipif(cs.vector_bits(TARGET) < 512, reason="rows of 16 float32 are short (one vector) only "
                    "with 512-bit vectors; this CPU's are narrower, so they are vectorised anyway")
def test_short_rows_of_a_row_reduction_kernel_are_vectorised_by_the_schedule(make, shape):
    # schedule version 12 (SHORT_ROW_VECTORS): the elementwise blocks' rows of one vector or less are vectorised
    # loops, and the kernel computes the same numbers; version 11 left them to LLVM
    # (rows of 16 also accumulate their reductions in 4 lanes: more vector loops on than off, not none off)
    (_name, func), = _prim_funcs(make, [shape])
    assert check(make, [shape], rules={"RowReduction"}) == ["RowReduction"]
    vector_loops = schedule_prim_func(func, TARGET)[0].script().count("T.vectorized")
    with mock.patch.object(cs, "SHORT_ROW_VECTORS", False):
        assert schedule_prim_func(func, TARGET)[0].script().count("T.vectorized") < vector_loops


def test_row_reductions_accumulate_in_vector_lanes():
    # LLVM does not reorder a float sum: a row left to it ran one scalar add at a time (0.5-0.7 ns per element).
    assert _vectorized(lambda x: R.sum(x, axis=[1]), [(46, 256)]) == [("RowReduction", True)]
    assert _vectorized(lambda x: R.max(x, axis=[-1]), [(5, 96)]) == [("RowReduction", True)]
    # a global average pool's H x W (the last two loops fused: 16 lanes over 3136), a norm's statistics
    assert _vectorized(lambda x: R.mean(x, axis=[2, 3]), [(1, 8, 56, 56)]) == [("RowReduction", True)]
    assert _vectorized(lambda x, g, b: R.nn.layer_norm(x, g, b, axes=[-1]), [(4, 768), (768,), (768,)]) == [
        ("RowReduction", True)]
    assert _vectorized(lambda x, g, b: R.nn.group_norm(x, g, b, num_groups=4, channel_axis=1, axes=[2, 3]),
                       [(1, 16, 44, 44), (16,), (16,)]) == [("RowReduction", True)]
    # rows shorter than two vectors stay scalar
    assert _vectorized(lambda x: R.sum(x, axis=[1]), [(9, 12)]) == [("RowReduction", False)]


def test_rows_no_vector_divides_reduce_in_full_vectors_and_a_scalar_tail():
    # schedule version 10: a ViT's 197 tokens, a mean over 17x17 (the two loops fused: 289 contiguous), a row of
    # 97, a max (its init is -inf, not 0), a layer norm: full vectors, the last partial one's elements one at a time
    # (the kernel, its shapes, the elements a row)
    cases = [(lambda x: R.nn.softmax(x, axis=-1), [(3, 197)], 197), (lambda x: R.mean(x, axis=[2, 3]), [(1, 6, 17, 17)], 289),
             (lambda x: R.sum(x, axis=[-1]), [(4, 97)], 97), (lambda x: R.max(x, axis=[-1]), [(5, 197)], 197),
             (lambda x, g, b: R.nn.layer_norm(x, g, b, axes=[-1]), [(3, 101), (101,), (101,)], 101)]
    lanes = cs.vector_bits(TARGET) // 32
    for make, shapes, row in cases:
        assert _vectorized(make, shapes) == [("RowReduction", True)], shapes
        (_, func), = _prim_funcs(make, shapes)
        scheduled, _ = schedule_prim_func(func, TARGET)
        # the partitioned loop counts as a vector (version 12: at most as many lanes as full steps along the row)
        lanes_of_row = cs.odd_row_reduction_width([row], lanes, cs.RowReduction.ACCUMULATORS)[0]
        assert lanes_of_row >= 4 and cs.vector_width(scheduled) == lanes_of_row, shapes
        loops = []
        tvm_ffi.structural_walk(scheduled.body, (tvm.tirx.For, loops.append), order="post")
        assert any(cs.PARTITION_HINT in loop.annotations for loop in loops), shapes
    # with the switch off, version 9's scalar loop (what experiments/row_reduction.py compares against)
    with mock.patch.object(cs, "ODD_ROW_REDUCTION", False):
        assert _vectorized(lambda x: R.nn.softmax(x, axis=-1), [(3, 197)]) == [("RowReduction", False)]


def test_long_rows_no_vector_divides_run_in_full_vectors_and_a_scalar_tail():
    # schedule version 10: an elementwise row of 197 (attention scores), a max pool's output row of 73 (Inception-v3's
    # 147x147 stem pool) and an average pool's of 35 with AVX2: full vectors, their loop partitioned by TVM so the
    # last, partial one runs alone (was a predicated tail TVM left scalar); numbers checked against the unscheduled
    lanes = cs.vector_bits(TARGET) // 32
    cases = [(lambda x: R.sigmoid(x), [(2, 3, 197)], "Injective"),
             (lambda x: R.nn.max_pool2d(x, (3, 3), (2, 2)), [(1, 3, 147, 147)], "Pool"),
             (lambda x: R.nn.avg_pool2d(x, (3, 3), (1, 1), (1, 1)), [(1, 4, 35, 35)], "Pool")]
    for make, shapes, rule in cases:
        check(make, shapes, rules={rule, "Injective"})
        row = shapes[0][-1] if rule == "Injective" else (shapes[0][-1] - 3) // (2 if shapes[0][-1] == 147 else 1) + 1
        if row <= 4 * lanes:
            continue  # one odd-width vector, as before
        (_, func), = _prim_funcs(make, shapes)
        scheduled, got = schedule_prim_func(func, TARGET)
        loops = []
        tvm_ffi.structural_walk(scheduled.body, (tvm.tirx.For, loops.append), order="post")
        assert got == rule and cs.vector_width(scheduled) == lanes, (shapes, got)
        assert any(cs.PARTITION_HINT in loop.annotations for loop in loops), shapes
    with mock.patch.object(cs, "ODD_ROW_PARTITION", False):  # version 9: scalar
        (_, func), = _prim_funcs(lambda x: R.sigmoid(x), [(2, 3, 197)])
        assert cs.vector_width(schedule_prim_func(func, TARGET)[0]) == 0


def test_a_kernel_of_64_bit_integers_on_odd_rows_is_scheduled_unnarrowed():
    # TVM will not narrow the indices of a kernel with int64 data (token ids): its row of 149 keeps a predicated
    # tail, and the kernel still schedules and computes (it raised in the first version 10)
    x = te.placeholder((149,), "int64", name="x")
    func = te.create_prim_func([x, te.compute((1, 1, 149, 1), lambda a, b, i, c: x[i] + 1, name="expand_dims")])
    scheduled, rule = schedule_prim_func(func, TARGET)
    assert rule == "Injective"
    lib = tvm.tirx.build(tvm.IRModule({"main": scheduled.with_attr("global_symbol", "main")}), target=TARGET,
                         pipeline=TIR_PIPELINE)
    data = np.arange(149, dtype="int64")
    out = tvm.runtime.tensor(np.zeros((1, 1, 149, 1), "int64"))
    lib["main"](tvm.runtime.tensor(data), out)
    np.testing.assert_array_equal(out.numpy().reshape(-1), data + 1)


def _rf_rows_in_parallel(make, shapes) -> bool:
    """Whether the partial results of the one kernel's vectorised row reduction (its ``_rf`` block) are computed
    under a parallel loop."""
    (_, func), = _prim_funcs(make, shapes)
    scheduled, _ = schedule_prim_func(func, TARGET)
    found = []

    def visit(loop):
        if loop.kind == tvm.tirx.ForKind.PARALLEL:
            tvm_ffi.structural_walk(loop.body, (tvm.s_tir.SBlock, lambda b: found.append(str(b.name_hint))),
                                    order="post")

    tvm_ffi.structural_walk(scheduled.body, (tvm.tirx.For, visit), order="post")
    return any(name.endswith("_rf") for name in found)


def test_partial_results_of_a_large_row_reduction_run_in_parallel():
    # schedule version 10: the rfactor block does nearly all the work (until 9 its rows ran on one thread); a
    # vector step counts as RF_VECTOR_STEP_WORK loop iterations against the threshold
    check(lambda x: R.max(x, axis=[-1]), [(2364, 197)])
    assert _rf_rows_in_parallel(lambda x: R.max(x, axis=[-1]), [(2364, 197)])
    assert _rf_rows_in_parallel(lambda x: R.sum(x, axis=[-1]), [(1024, 256)])
    assert not _rf_rows_in_parallel(lambda x: R.sum(x, axis=[-1]), [(16, 256)])  # 4096 elements: one thread
    with mock.patch.object(cs, "PARALLEL_RF_ROWS", False):
        assert not _rf_rows_in_parallel(lambda x: R.sum(x, axis=[-1]), [(1024, 256)])


@pytest.mark.parametrize("extents,width,fused", [([197], 8, 1), ([17, 17], 16, 2), ([49], 4, 1), ([1500], 16, 1),
                                                 ([3, 5], 0, 1), ([30], 4, 1), ([4, 7, 7], 4, 2), ([240], 8, 1)])
def test_odd_row_reduction_width(extents, width, fused):
    # 8 float lanes, 2 accumulators: the last two loops fused where there are two; at most as many lanes as full
    # steps along the row (version 12: 197 in 8 lanes, 289 in 16, 49 in 4), none under 16 elements (15)
    assert cs.odd_row_reduction_width(extents, 8, 2) == (width, fused)


@pytest.mark.parametrize("extents,width,fused", [([197], 8, 1), ([17, 17], 8, 2), ([49], 8, 1), ([1500], 16, 1),
                                                 ([3, 5], 0, 1), ([30], 0, 1), ([4, 7, 7], 8, 2)])
def test_odd_row_reduction_width_of_version_11(extents, width, fused):
    # two vectors from 32 steps of them (1500), none under four vectors (a row of 30)
    with mock.patch.object(cs, "ODD_LANES_UP_TO_STEPS", False):
        assert cs.odd_row_reduction_width(extents, 8, 2) == (width, fused)


def test_a_zens_kernels_are_compiled_without_llvms_scatters():
    # ZEN_LLVM_FEATURES on every AMD Zen target, named or this machine's; a target's own choice stands;
    # other CPUs get none; a target that has them is returned as it is
    def mattr(target):
        return [str(a) for a in cpu_target(target).attrs.get("mattr") or []]

    assert mattr({"kind": "llvm", "mcpu": "znver4"}) == list(cs.ZEN_LLVM_FEATURES)
    assert mattr({"kind": "llvm", "mcpu": "skylake-avx512"}) == []
    assert mattr({"kind": "llvm", "mcpu": "znver5", "mattr": ["-prefer-no-scatter"]}) == ["-prefer-no-scatter"]
    assert mattr({"kind": "llvm", "mcpu": "znver5", "mattr": ["+avx512f"]}) == ["+avx512f", "+prefer-no-scatter"]
    zen = cpu_target({"kind": "llvm", "mcpu": "znver3"})
    assert cpu_target(zen) is zen


def _rms_norm(x, squared, weight):
    return R.multiply(weight, R.multiply(x, R.rsqrt(R.add(R.mean(squared, axis=[-1], keepdims=True),
                                                          relax.const(1e-6, "float32")))))


@pytest.mark.skipif(not (str(TARGET.attrs.get("mcpu")).startswith("znver") and cs.vector_bits(TARGET) == 512),
                    reason="LLVM vectorises these rows with AVX-512 gathers and scatters; a Zen with AVX-512 only")
def test_llvm_vectorises_a_norms_short_rows_across_rows_with_scatters_unless_told_not_to():
    # an RMS norm over 8 rows of 32 (a small llama's): LLVM's default build for the Zen reads and writes lanes a row
    # apart (64 gathers and 64 scatters: 0.26 us on the Zen 5, 0.05 without scatters); the kernel as built has no
    # scatter and computes the same numbers; a layer norm over the same rows had neither to begin with
    shapes = [(1, 8, 32), (1, 8, 32), (32,)]
    (_, func), = _prim_funcs(_rms_norm, shapes)
    scheduled, rule = schedule_prim_func(func, TARGET)
    assert rule == "RowReduction" and cs.gathers_and_scatters_without_zen_features(scheduled) == (True, True)
    lib = tvm.tirx.build(tvm.IRModule({"main": scheduled.with_attr("global_symbol", "main").without_attr("target")}),
                         target=TARGET, pipeline=TIR_PIPELINE)
    ops = {line.split()[0] for line in lib.inspect_source("asm").splitlines() if line.startswith("\t")}
    assert not any(op.startswith("vscatter") for op in ops)
    check(_rms_norm, [(1, 8, 32), (1, 8, 32), (32,)], rules={"RowReduction"})
    (_, norm), = _prim_funcs(lambda x, g, b: R.nn.layer_norm(x, g, b, axes=[-1]), [(8, 32), (32,), (32,)])
    assert cs.gathers_and_scatters_without_zen_features(schedule_prim_func(norm, TARGET)[0]) == (False, False)


def test_vector_width_says_which_kernels_run_scalar():
    # an injective row of 64 in full vectors (8 lanes with AVX2, 16 with AVX-512); a padded row of 33 (no
    # divisor from 4 to 8): with AVX2 longer than four registers, a predicated tail loop TVM leaves scalar, with
    # AVX-512 one 33-lane vector; a row of 18 in one 18-lane vector (LLVM splits it into registers)
    widths = {}
    for shape, pad in (((4, 64), 0), ((1, 3, 32, 32), 1), ((1, 8, 16, 16), 2)):
        make = (lambda x: R.sigmoid(x)) if not pad else (lambda x, p=pad: R.nn.pad(x, [0, 0, 0, 0, 0, p, 0, p]))
        (_, func), = _prim_funcs(make, [shape])
        scheduled, rule = schedule_prim_func(func, TARGET)
        widths[shape[-1] + pad] = (rule, cs.vector_width(scheduled))
    lanes = cs.vector_bits(TARGET) // 32
    assert widths == {64: ("Injective", lanes), 33: ("Injective", 33 if 33 <= 4 * lanes else lanes),
                      18: ("Injective", 18)}  # 33 with AVX2: 4 full vectors, the last partial one scalar
    # a convolution's rows of 17 (its columns cannot be padded) in one odd-width vector, not a scalar tail
    (_, func), = _prim_funcs(lambda x, w: R.nn.conv2d(x, w, padding=1), [(1, 8, 17, 17), (8, 8, 3, 3)])
    scheduled, rule = schedule_prim_func(func, TARGET)
    assert rule == "Contraction" and cs.vector_width(scheduled) >= 17  # (its padded copy of the input: 19)


@pytest.mark.parametrize("run,row,width", [(256, 256, 16), (512, 512, 16), (32, 32, 4), (3136, 3136, 16), (44, 7744, 4),
                                           (56, 56, 4), (64, 64, 8), (197, 197, 0), (20, 20, 4), (12, 12, 0), (8, 8, 0),
                                           (24, 24, 4), (48, 96, 8)])
def test_row_reduction_width(run, row, width):
    # 8 float lanes, 2 accumulators (version 12): at most as many lanes as vector steps along the row (256 in 16,
    # 32 in 4, 64 in 8), halved until they divide the run (44 of a 7744-element row: 4); under 16 elements scalar
    assert cs.row_reduction_width(run, 8, 2, row) == width


@pytest.mark.parametrize("run,row,width", [(256, 256, 8), (512, 512, 16), (32, 32, 8), (3136, 3136, 16), (44, 7744, 4),
                                           (56, 56, 8), (197, 197, 0), (20, 20, 4), (12, 12, 0), (8, 8, 0)])
def test_row_reduction_width_of_version_11(run, row, width):
    # two vectors only where the row has 32 steps of them and they divide the run; rows under two vectors scalar
    with mock.patch.object(cs, "LANES_UP_TO_STEPS", False):
        assert cs.row_reduction_width(run, 8, 2, row) == width


# ---------------------------------------------------------------------------------------------- injective

@pytest.mark.parametrize("shape,axes", [((48, 80), None), ((4, 16, 24), [1, 0, 2]), ((4, 16, 24), [2, 0, 1]),
                                        ((7, 9), None)])
def test_transpose(shape, axes):
    check(lambda x: R.permute_dims(x, axes), [shape], rules={"Injective"},
          reference=lambda x: np.transpose(x, axes))


def test_transpose_through_fused_reshapes_is_tiled():
    """Attention's key, (tokens, heads * dim) -> (heads, dim, tokens), reaches the kernel as reshapes and
    transposes fused into one block with div/mod read indices: still a transpose, staged in tiles (a local
    copy of the input) once the tensor is large enough; small ones stay a plain vectorised copy."""
    def key_transpose(x):
        t = R.permute_dims(R.reshape(x, (1, x.ty.shape[0], 4, 64)), [0, 2, 1, 3])
        return R.reshape(R.permute_dims(t, [0, 1, 3, 2]), (4, 64, x.ty.shape[0]))

    for tokens, tiled in ((128, True), (16, False)):
        check(key_transpose, [(tokens, 256)], rules={"Injective"},
              reference=lambda x: x.reshape(-1, 4, 64).transpose(1, 2, 0))
        ((_, func),) = _prim_funcs(key_transpose, [(tokens, 256)])
        scheduled, _ = schedule_prim_func(func, TARGET)
        assert ('scope="local"' in scheduled.script()) == tiled


def test_elementwise_broadcast_and_layout():
    check(lambda a, b: R.add(a, b), [(7, 1), (1, 9)], rules={"Injective"}, reference=lambda a, b: a + b)
    check(lambda a, b: R.concat([a, b], axis=1), [(3, 5, 7), (3, 2, 7)], rules={"Injective"})
    check(lambda a: R.reshape(a, (6, 35)), [(3, 2, 5, 7)], rules={"Injective"})
    check(lambda a, i: R.take(a, i, axis=0), [(10, 24), (5,)], dtypes=["float32", "int64"],
          rules={"Injective"})
    check(lambda a: R.multiply(a, relax.const(2.0, "float32")), [(1000,)], rules={"Injective"})


@pytest.mark.parametrize("op", ["exp", "sigmoid", "silu", "erf", "tanh", "gelu", "gelu_tanh"])
def test_vector_math(op):
    from scipy.special import erf

    make = {"exp": R.exp, "sigmoid": R.sigmoid, "silu": R.nn.silu, "erf": R.erf, "tanh": R.tanh,
            "gelu": R.nn.gelu, "gelu_tanh": R.nn.gelu_tanh}[op]
    ref = {"exp": np.exp, "sigmoid": lambda v: 1 / (1 + np.exp(-v)), "silu": lambda v: v / (1 + np.exp(-v)),
           "erf": erf, "tanh": np.tanh, "gelu": lambda v: v * 0.5 * (1 + erf(v / np.sqrt(2))),
           "gelu_tanh": lambda v: 0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v ** 3)))}[op]
    (_name, func), = _prim_funcs(make, [(3, 50)])
    scheduled, rule = schedule_prim_func(func, TARGET)
    assert rule == "Injective"
    x = np.linspace(-12, 12, 150, dtype="float32").reshape(3, 50)
    got = _run(scheduled, [x, np.zeros_like(x)])
    np.testing.assert_allclose(got, ref(x.astype("float64")), rtol=2e-6, atol=2e-6)
    # No scalar libm call is left in the kernel: exp/erf/tanh are polynomials in vector registers.
    kernel = scheduled.with_attr("global_symbol", "main").without_attr("target")
    lib = tvm.tirx.build(tvm.IRModule({"main": kernel}), target=TARGET)
    ll = lib.inspect_source("ll")
    assert "@expf" not in ll and "@erff" not in ll and "llvm.exp." not in ll
    assert "powf" not in ll and "llvm.pow." not in ll


@pytest.mark.parametrize("exponent", [1.0, 2.0, 3.0, 4.0, 2.5])
def test_power_by_a_constant(exponent):
    """``x ** 2`` (RMS norm), ``x ** 3`` (GPT-2's GELU) are multiplications, not a ``powf`` per element;
    another exponent keeps TVM's ``pow``. Same numbers either way."""
    (_name, func), = _prim_funcs(lambda a: R.power(a, relax.const(exponent, "float32")), [(4, 60)])
    scheduled, _ = schedule_prim_func(func, TARGET)
    x = np.linspace(0.1, 3.0, 240, dtype="float32").reshape(4, 60)
    np.testing.assert_allclose(_run(scheduled, [x, np.zeros_like(x)]), x.astype("float64") ** exponent,
                               rtol=2e-6)
    ll = tvm.tirx.build(tvm.IRModule({"main": scheduled.with_attr("global_symbol", "main").without_attr("target")}),
                        target=TARGET).inspect_source("ll")
    assert ("powf" in ll or "llvm.pow." in ll) == (exponent == 2.5)


def test_exp_edges():
    (_name, func), = _prim_funcs(R.exp, [(12,)])
    scheduled, _ = schedule_prim_func(func, TARGET)
    x = np.array([0, 1, -1, 88.5, 88.72, 89, -87.3, -88, -110, np.inf, -np.inf, np.nan], "float32")
    got = _run(scheduled, [x, np.zeros_like(x)])
    want = np.exp(x.astype("float64"))
    want = np.where(want < np.finfo(np.float32).tiny, 0, want)  # flushed below the normal range
    with np.errstate(over="ignore"):
        np.testing.assert_allclose(got, want.astype("float32"), rtol=3e-7)


# ------------------------------------------------------------------------------------------ two threads

def _parallel(make, shapes):
    """Whether each kernel of ``make`` runs a parallel loop once scheduled, by rule."""
    out = []
    for _, func in _prim_funcs(make, shapes):
        scheduled, rule = schedule_prim_func(func, TARGET)
        out.append((rule, "T.parallel" in scheduled.script()))
    return out


@pytest.mark.parametrize("make,small,large,rule", [
    # 2^15 vs 2^19 multiply-adds (a 64x64 output is a single register tile with AVX-512: nothing to split)
    (R.matmul, [(16, 32), (32, 64)], [(64, 64), (64, 128)], "Contraction"),
    (R.sigmoid, [(8, 512)], [(64, 512)], "Injective"),  # 2^12 vs 2^15 elements
    (lambda x: R.nn.softmax(x, axis=-1), [(8, 256)], [(64, 256)], "RowReduction"),  # 2^11 vs 2^14 iterations
])
def test_only_kernels_with_enough_work_for_two_threads_run_in_parallel(make, small, large, rule):
    # A parallel region costs more than a small kernel's work (experiments/parallel_threshold.py).
    assert _parallel(make, small) == [(rule, False)]
    assert _parallel(make, large) == [(rule, True)]
    # A matmul's work counts its reduction: 128 outputs of a 4096-long dot product are worth two threads (two
    # register tiles even with AVX-512's 16 lanes; 64 outputs are one tile there, which is not split).
    if rule == "Contraction":
        assert _parallel(R.matmul, [(1, 4096), (4096, 128)]) == [(rule, True)]
    check(make, large, rules={rule})


@pytest.mark.parametrize("shape,axis,parallel", [((1, 8), 1, False), ((2, 64), 1, False), ((15, 64), 0, False),
                                                 ((5, 512), 1, True), ((621, 128), 1, True)])
def test_a_kernel_no_rule_schedules_runs_on_one_thread_unless_its_loops_are_worth_two(shape, axis, parallel):
    # TOPI's cumsum: loops, not blocks, with a parallel loop over the rows it scans (a 2x64 one took 0.8-2.9 us on
    # two threads, 0.07 us on one: session 37)
    (_name, func), = _prim_funcs(lambda x: R.cumsum(x, axis=axis), [shape])
    assert "T.parallel" in func.script()
    scheduled, rule = schedule_prim_func(func, TARGET)
    assert rule == "none" and cs.runs_in_parallel(scheduled) == parallel
    args = _random_args(func)
    np.testing.assert_allclose(_run(scheduled, args), np.cumsum(args[0], axis=axis), rtol=1e-4, atol=1e-4)
    with mock.patch.object(cs, "SERIAL_SMALL_UNSCHEDULED", False):  # as TOPI writes it
        assert cs.runs_in_parallel(schedule_prim_func(func, TARGET)[0])


# ---------------------------------------------------------------------------------------------- the pass

def test_cpu_target():
    t = cpu_target("llvm")
    assert t.kind.name == "llvm" and str(t.attrs["mcpu"]) == cs.host_cpu()
    assert str(cpu_target({"kind": "llvm", "mcpu": "x86-64"}).attrs["mcpu"]) == "x86-64"
    cuda = tvm.target.Target({"kind": "cuda", "arch": "sm_90"}, host="llvm")
    assert cpu_target(cuda).kind.name == "cuda"
    assert cs.vector_bits(tvm.target.Target("llvm")) == 128  # generic x86-64: SSE only
    # From the CPU's features (TVM's llvm_get_vector_width says 512 for every x86 CPU): AVX2 is 256 bits.
    widths = {cpu: cs.vector_bits(tvm.target.Target({"kind": "llvm", "mcpu": cpu}))
              for cpu in ("znver3", "haswell", "znver5", "skylake-avx512", "x86-64")}
    assert widths == {"znver3": 256, "haswell": 256, "znver5": 512, "skylake-avx512": 512, "x86-64": 128}


@pytest.mark.parametrize("bits", [256, 512])
def test_register_tile_fits_the_vector_registers(bits):
    """Accumulators, the vector operand and a broadcast fit in the registers (16 ymm with AVX2: a 3 x 4 tile
    of 12 accumulators spills, 4 x 3 does not)."""
    rule, lanes = cs.Contraction(), bits // 32
    for e_v in (8, 16, 24, 48, 56, 96, 768, 3072):
        for e_u in (1, 3, 4, 6, 12, 128, 197):
            plan = rule.tile_plan(e_v, e_u, lanes, cs._ACCUMULATORS[bits], cs._REGISTERS[bits])
            regs = plan["nv"] * -(-plan["lanes"] // lanes)
            assert plan["ut"] * regs + regs + 1 <= cs._REGISTERS[bits], (e_v, e_u, plan)
    assert rule.tile_plan(3072, 3, 8, 12, 16)["nv"] <= 3  # was 3 rows x 4 vectors (17 registers)


def test_a_rule_that_fails_falls_back_to_the_next_and_finally_to_the_unscheduled_kernel():
    class Broken(cs.Contraction):
        def apply(self, func, target, tunable):
            raise RuntimeError("broken rule")

    (_name, func), = _prim_funcs(R.matmul, [(8, 8), (8, 8)])
    scheduled, rule = schedule_prim_func(func, TARGET, rules=[Broken(), cs.Injective()])
    assert rule == "none" and str(scheduled.attrs[RULE_ATTR]) == "none"
    args = _random_args(func)
    np.testing.assert_allclose(_run(scheduled, args), args[0] @ args[1], rtol=1e-5)
    scheduled, rule = schedule_prim_func(func, TARGET, rules=[Broken(), cs.Contraction()])
    assert rule == "Contraction"


def test_a_schedule_that_does_not_lower_is_rejected():
    class InlineEveryConsumer(cs.Contraction):
        """Inlines each consumer into the write-back in turn: ill-formed when a value is read twice."""

        def apply(self, func, target, tunable):
            sch = tvm.s_tir.Schedule(func)
            blocks = sch.get_child_blocks(cs._root(sch))
            reduction = next(b for b in blocks if not cs._is_spatial(sch.get(b)))
            sch.cache_write(reduction, 0, "local")
            for block in blocks[blocks.index(reduction) + 1:]:
                sch.reverse_compute_inline(block)
            return sch

    (_name, func), = _prim_funcs(lambda x, w: R.nn.gelu(R.matmul(x, w)), [(8, 8), (8, 8)])
    bad = InlineEveryConsumer().apply(func, TARGET, False).mod["main"]
    assert not cs.lowers(bad, TARGET)
    _scheduled, rule = schedule_prim_func(func, TARGET, rules=[InlineEveryConsumer(), cs.Contraction()])
    assert rule == "Contraction"


def test_only_llvm_kernels_are_scheduled():
    funcs = _prim_funcs(R.matmul, [(8, 8), (8, 8)])
    cuda = tvm.target.Target({"kind": "cuda", "arch": "sm_90"}, host="llvm")
    mod = tvm.IRModule({"cpu": funcs[0][1], "gpu": funcs[0][1].with_attr("target", cuda)})
    out = cs.schedule_cpu_kernels(mod)
    assert str(out["cpu"].attrs[RULE_ATTR]) == "Contraction"
    assert RULE_ATTR not in out["gpu"].attrs
    assert cs.rule_counts(out) == {"Contraction": 1}


def test_zoo_models_every_kernel_scheduled_and_same_numbers():
    import autoplace
    from autoplace import zoo
    from autoplace.backend import Runner, lower, single_device_build

    for name in ("mlp", "cnn", "bert", "inception"):
        model = zoo.get(name)
        placement = autoplace.place(model, None, None, {"cpu": "llvm"})
        counts = cs.rule_counts(lower(placement.mod))
        assert "none" not in counts, (name, counts)
        inputs = model.random_inputs()
        host = autoplace.TargetSet({"cpu": "llvm"})
        plain = Runner(single_device_build(model.mod, schedule_cpu=False), host, model.params,
                       ["cpu"] * len(model.params), ["cpu"] * len(inputs))
        np.testing.assert_allclose(placement.run(*inputs), plain(*inputs), rtol=1e-5, atol=1e-5, err_msg=name)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc to compile CUDA kernels")
def test_cuda_kernels_keep_the_dlight_gpu_rules_and_compile():
    import autoplace
    from autoplace import zoo
    from autoplace.backend import build, lower

    model = zoo.get("bert")
    targets = {"cpu": "llvm", "gpu": {"kind": "cuda", "arch": "sm_90"}}
    placement = autoplace.place(model, None, {"relax.matmul": "gpu", "relax.nn.softmax": "gpu"}, targets)
    lowered = lower(placement.mod)
    kinds = {}
    for _, func in lowered.functions_items():
        if isinstance(func, tvm.tirx.PrimFunc):
            kind = func.attrs["target"].kind.name
            kinds[kind] = kinds.get(kind, 0) + 1
            if kind == "cuda":
                assert RULE_ATTR not in func.attrs and func.attrs.get("tirx.is_scheduled")
            else:
                assert str(func.attrs[RULE_ATTR]) != "none"
    assert kinds.get("cuda") and kinds.get("llvm")
    build(placement.mod)  # compiles the CUDA kernels with nvcc; running them needs a GPU
