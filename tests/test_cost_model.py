"""Cost model: features, fit/predict/save/load, lookup-first costs, evaluation, ``autoplace train``.

Synthetic profiles keep these fast and independent of any profiling job; the committed CPU profile
is used only where present.
"""

import json
import math
import os
import warnings

import numpy as np
import pandas as pd
import pytest

from autoplace.cost_model import (
    MEASURED,
    PREDICTED,
    PREDICTED_UNSEEN_OP,
    UNSUPPORTED,
    CostModelVersionError,
    CostTable,
    RooflineCostModel,
    UnknownTargetError,
    XGBCostModel,
    create,
    feature_names,
    features_from_unit,
    load,
    op_class,
    record_features,
)
from autoplace.cost_model.evaluate import family, leave_one_family_out, summarize
from autoplace.cost_model.features import ops_from_func_name, work
from autoplace.cost_model.stream_floor import stream_ceiling_us, streams_simply
from autoplace.cost_model.table import MIN_OVERHEAD_RUNS
from autoplace.profile import ForeignProfileWarning

HW = "test-hw-2c"
TVM = "0.27.0.post1"
PROFILE = os.path.join(os.path.dirname(__file__), "..", "profiles", "amd-epyc-2c")
FAST = dict(n_estimators=60, random_state=0)


def _unit(
    key,
    model,
    ops,
    shapes,
    us,
    *,
    anchor_attrs=None,
    anchor_shapes=None,
    flops=None,
    status="ok",
    target="llvm",
    func_name=None,
    hw=HW,
):
    out_elems = math.prod(shapes[-1])
    return dict(
        kind="unit",
        key=key,
        target=target,
        model=model,
        func_name=func_name or "_".join(o.split(".")[-1] for o in ops),
        ops=ops,
        anchor_op=ops[0],
        anchor_attrs=anchor_attrs or {},
        anchor_input_shapes=anchor_shapes or shapes[:-1],
        arg_shapes=shapes,
        arg_dtypes=["float32"] * len(shapes),
        num_outputs=1,
        flops=float(flops if flops is not None else out_elems),
        bytes_in=4 * sum(math.prod(s) for s in shapes[:-1]),
        bytes_out=4 * out_elems,
        status=status,
        median_us=us if status == "ok" else None,
        hardware_id=hw,
        tvm_version=TVM,
    )


def _read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def synthetic_records(hw=HW, seed=0) -> pd.DataFrame:
    """Matmuls, convolutions, elementwise and layout kernels of five fake models (two families of two
    sizes), with latencies from a simple law plus noise, and launch / copy records."""
    rng = np.random.default_rng(seed)
    rows = []
    models = {"alpha": 1, "alpha-base": 4, "beta": 2, "beta-base": 8, "gamma": 3}
    for m, scale in models.items():
        for i, n in enumerate([8 * scale, 16 * scale, 24 * scale]):
            k = 2 * n
            flops = 2.0 * n * n * k
            rows.append(
                _unit(
                    f"llvm-mm-{m}-{i}",
                    m,
                    ["relax.matmul", "relax.add"],
                    [[n, k], [k, n], [n], [n, n]],
                    flops * 3e-4 * rng.uniform(0.9, 1.1),
                    anchor_shapes=[[n, k], [k, n]],
                    flops=flops,
                )
            )
            c, h = 4 * scale + i, 8 + 4 * i
            wflops = 2.0 * c * c * 9 * h * h
            rows.append(
                _unit(
                    f"llvm-conv-{m}-{i}",
                    m,
                    ["relax.nn.conv2d", "relax.nn.relu"],
                    [[1, c, h, h], [c, c, 3, 3], [1, c, h, h]],
                    wflops * 2e-4 * rng.uniform(0.9, 1.1),
                    anchor_attrs=dict(
                        strides=[1, 1],
                        padding=[1, 1, 1, 1],
                        dilation=[1, 1],
                        groups=1,
                        data_layout="NCHW",
                        kernel_layout="OIHW",
                    ),
                    anchor_shapes=[[1, c, h, h], [c, c, 3, 3]],
                    flops=wflops,
                )
            )
            e = 256 * scale * (i + 1)
            rows.append(
                _unit(
                    f"llvm-add-{m}-{i}",
                    m,
                    ["relax.add", "relax.nn.relu"],
                    [[e], [e], [e]],
                    e * 1e-3 * rng.uniform(0.9, 1.1),
                )
            )
            rows.append(
                _unit(
                    f"llvm-tr-{m}-{i}",
                    m,
                    ["relax.permute_dims"],
                    [[n, k], [k, n]],
                    n * k * 2e-3 * rng.uniform(0.9, 1.1),
                    anchor_attrs={"axes": [1, 0]},
                )
            )
    rows.append(_unit("llvm-shared", "alpha", ["relax.reshape"], [[4, 4], [16]], 0.05))
    rows.append(
        _unit(
            "llvm-broken",
            "gamma",
            ["relax.nn.conv2d"],
            [[1, 3, 8, 8], [3, 3, 3, 3], [1, 3, 8, 8]],
            None,
            status="error",
        )
    )
    for m in models:
        keys = [r["key"] for r in rows if r.get("model") == m and r["status"] == "ok"]
        if m == "beta":
            keys.append("llvm-shared")  # a kernel beta shares with alpha
        us = sum(r["median_us"] for r in rows if r["key"] in keys)
        rows.append(
            dict(
                kind="model",
                key=m,
                target="llvm",
                status="ok",
                median_us=1.02 * us,
                unit_keys=keys,
                hardware_id=hw,
                tvm_version=TVM,
            )
        )
    for label in ("llvm:0", "llvm:1"):
        rows.append(
            dict(
                kind="launch",
                key="vm_call",
                target=label,
                status="ok",
                median_us=0.2,
                single_call_us=0.75,
                hardware_id=hw,
                tvm_version=TVM,
            )
        )
    rows.append(
        dict(
            kind="copy_fit",
            key="fit",
            target="llvm:0->llvm:1",
            status="ok",
            alpha_us=0.6,
            us_per_byte=3e-5,
            hardware_id=hw,
            tvm_version=TVM,
        )
    )
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def records():
    return synthetic_records()


@pytest.fixture(scope="module")
def model(records):
    return XGBCostModel(**FAST).fit(records, hardware_id=HW, tvm_version=TVM)


def _units(df):
    return df[(df["kind"] == "unit") & (df["status"] == "ok")]


# -- features ------------------------------------------------------------------------------------------
def test_features_have_every_name_and_are_finite_or_nan(records):
    names = feature_names()
    for _, rec in _units(records).iterrows():
        feats = record_features(rec)
        assert list(feats) == names
        assert all(isinstance(v, float) for v in feats.values())
        assert all(np.isfinite(v) or np.isnan(v) for v in feats.values())


def test_schedule_features_of_a_dot_product_describe_its_lanes_not_a_register_tile():
    from autoplace.cost_model.features import _schedule_features

    head = dict(target="llvm", anchor_op="relax.nn.conv2d", anchor_input_shapes=[[1, 160, 1, 1], [1280, 160, 1, 1]],
                anchor_attrs={"strides": [1, 1], "padding": [0, 0, 0, 0], "groups": 1})
    now = _schedule_features(head, 32)  # a kernel of schedule version 15 (DotProduct): 8 lanes of 160
    assert now["sched_lane_use_512"] == 0.5 and now["sched_lane_use_256"] == 1.0 and now["sched_rows_512"] == 1.0
    before = _schedule_features({**head, "cpu_schedule": 14}, 32)  # timed when it ran one lane at a time
    assert before["sched_lane_use_512"] == 1 / 16
    # a 2x2 map timed before version 16 ran a register tile of 2-lane rows; since, dot products in 16 lanes, 4 channels
    # x 4 positions a tile (8 vector loads for 16 multiply-adds); a matmul by one column is a dot product
    tiny = {**head, "anchor_input_shapes": [[1, 160, 2, 2], [1280, 160, 1, 1]]}
    assert _schedule_features({**tiny, "cpu_schedule": 15}, 32)["sched_lane_use_512"] == 2 / 16
    lanes = _schedule_features(tiny, 32)
    assert lanes["sched_lane_use_512"] == 1.0 and lanes["sched_loads_512"] == 0.5 and lanes["sched_rows_512"] == 16
    assert lanes["sched_lane_use_256"] == 1.0 and lanes["sched_rows_256"] == 8  # AVX2: 2 channels x 4 positions
    v16 = _schedule_features({**tiny, "cpu_schedule": 16}, 32)  # 16 lanes in two AVX2 registers: 1 x 4 a tile
    assert v16["sched_rows_256"] == 4 and v16["sched_rows_512"] == 16
    # a 4x4 map: ConvLanes on AVX-512 only; AVX2 keeps the register tile of 4-lane rows
    wide = _schedule_features({**head, "anchor_input_shapes": [[1, 384, 4, 4], [64, 384, 1, 1]]}, 32)
    assert wide["sched_lane_use_512"] == 1.0 and wide["sched_lane_use_256"] == 4 / 8
    # ... of 2^20 multiply-adds or more, on AVX2 too since version 17 (2 x 4 tiles of 8 lanes)
    big = {**head, "anchor_input_shapes": [[1, 1152, 4, 4], [128, 1152, 1, 1]]}
    assert _schedule_features(big, 32)["sched_rows_256"] == 8
    assert _schedule_features({**big, "cpu_schedule": 16}, 32)["sched_lane_use_256"] == 4 / 8
    column = dict(target="llvm", anchor_op="relax.matmul", anchor_input_shapes=[[6, 300], [300, 1]])
    assert _schedule_features(column, 32)["sched_rows_512"] == 1.0
    assert now["sched_v_stride"] == 1.0
    # a 1x1 at stride 2 over a 2x2 map reads channels 4 apart: laid out along them first with work for two threads
    strided = {**head, "anchor_attrs": {**head["anchor_attrs"], "strides": [2, 2]}}
    big = _schedule_features({**strided, "anchor_input_shapes": [[1, 128, 2, 2], [256, 128, 1, 1]]}, 32)
    small = _schedule_features({**strided, "anchor_input_shapes": [[1, 32, 2, 2], [64, 32, 1, 1]]}, 32)
    assert big["sched_v_stride"] == 1.0 and small["sched_v_stride"] == 4.0 and small["sched_rows_512"] == 1.0


def test_op_names_from_kernel_names_and_classes():
    assert ops_from_func_name("fused_softmax_llvm_broadcast_to5_llvm") == [
        "relax.nn.softmax",
        "relax.broadcast_to",
    ]
    assert ops_from_func_name("fused_batch_norm1_add1_relu1") == [
        "relax.nn.batch_norm",
        "relax.add",
        "relax.nn.relu",
    ]
    assert ops_from_func_name("conv2d3") == ["relax.nn.conv2d"]
    assert ops_from_func_name("transpose5_llvm") == ["relax.permute_dims"]
    assert op_class("relax.nn.conv2d") == "conv" and op_class("relax.matmul") == "matmul"
    assert op_class("relax.nn.gelu") == "transcendental" and op_class("relax.brand_new_op") == "other"


def test_power_of_two_strides_overflow_the_cache_sets():
    # Transposing a 128x128 float32 matrix reads down columns 512 bytes apart: 128 lines in 8 of the
    # 64 L1 sets (8 ways each) -> 2x overflow; 120x120 (480 bytes apart) spreads over all sets.
    def transpose(n):
        return record_features(
            _unit("k", "m", ["relax.permute_dims"], [[n, n], [n, n]], 1.0, anchor_attrs={"axes": [1, 0]})
        )

    assert transpose(128)["mem_l1_over"] == pytest.approx(1.0)
    assert transpose(120)["mem_l1_over"] == 0.0
    assert transpose(64)["mem_l1_over"] == 0.0  # 64 lines fit in 8 sets x 8 ways


def test_work_counts_transcendental_ops_higher():
    add = _unit("a", "m", ["relax.add"], [[100], [100], [100]], 1.0)
    gelu = _unit("g", "m", ["relax.nn.gelu"], [[100], [100]], 1.0)
    assert work(add) == pytest.approx(300.0)  # streaming: 1 add per element, but 3 words moved
    assert work(gelu) > 5 * work(add)  # 20 operations per element besides its words


def test_work_of_data_movement_counts_what_it_writes_not_the_table():
    lookup = _unit("t", "m", ["relax.take"], [[1000, 64], [16], [16, 64]], 0.05, flops=0)
    small_table = _unit("t2", "m", ["relax.take"], [[20, 64], [16], [16, 64]], 0.05, flops=0)
    assert work(lookup) == pytest.approx(work(small_table), rel=0.02)  # the rows read, not the table
    matmul = _unit("mm", "m", ["relax.matmul"], [[64, 64], [64, 64], [64, 64]], 1.0, flops=2 * 64**3)
    assert work(matmul) == pytest.approx(2 * 64**3)  # compute-bound: the FLOPs, not the bytes


# -- fit / predict / save / load -----------------------------------------------------------------------
def test_fit_returns_self_and_predicts_positive_latencies(records):
    est = XGBCostModel(**FAST)
    assert est.fit(records, hardware_id=HW, tvm_version=TVM) is est
    pred = est.predict(_units(records))
    assert pred.shape == (len(_units(records)),)
    assert np.all(np.isfinite(pred)) and np.all(pred > 0)
    # In-sample the model follows the measurements closely (log error).
    meas = _units(records)["median_us"].to_numpy(float)
    assert np.median(np.abs(np.log(pred / meas))) < 0.2
    assert est.target_kinds_ == ["llvm"] and est.hardware_id_ == HW and est.tvm_version_ == TVM


def test_the_base_margin_starts_from_each_targets_call_floor(records, tmp_path):
    # the floor is the 5% quantile of the target kind's training latencies; a kernel of next to no work starts
    # from it (not from its tiny work term), a large one from its work; saved and loaded with the model; a model
    # saved before it (no "call_floor_us") and call_floor=None have none
    est = XGBCostModel(**FAST).fit(records, hardware_id=HW, tvm_version=TVM)
    floor = float(np.quantile(_units(records)["median_us"].astype(float), 0.05))
    assert est.call_floor_us_ == {"llvm": pytest.approx(floor)}
    tiny = _unit("tiny", "m", ["relax.add"], [[1], [1], [1]], 0.01)
    big = _unit("big", "m", ["relax.matmul"], [[512, 512], [512, 512], [512, 512]], 100.0, flops=2 * 512**3)
    margin = np.exp(est._margin([tiny, big], ["llvm", "llvm"]))
    assert floor <= margin[0] < 1.01 * floor + work(tiny) * np.exp(est.offset_)
    assert margin[1] == pytest.approx(work(big) * np.exp(est.offset_), rel=1e-3)
    again = load(est.save(str(tmp_path / "floored.json")))
    assert again.call_floor_us_ == est.call_floor_us_
    np.testing.assert_array_equal(again.predict(_units(records)), est.predict(_units(records)))
    data = _read_json(str(tmp_path / "floored.json"))
    del data["state"]["call_floor_us"]
    (tmp_path / "before.json").write_text(json.dumps(data))
    assert load(str(tmp_path / "before.json")).call_floor_us_ == {}
    assert XGBCostModel(**FAST, call_floor=None).fit(records, hardware_id=HW, tvm_version=TVM).call_floor_us_ == {}


@pytest.mark.parametrize("kind", ["xgb", "roofline"])
def test_save_load_round_trip_gives_identical_predictions(records, tmp_path, kind):
    est = create(kind, random_state=0).fit(records, hardware_id=HW, tvm_version=TVM)
    path = est.save(str(tmp_path / "cost_model.json"))
    again = load(path)
    assert type(again) is type(est) and again.get_params() == est.get_params()
    units = _units(records)
    np.testing.assert_array_equal(again.predict(units), est.predict(units))
    assert again.hardware_id_ == HW and again.target_kinds_ == ["llvm"]
    data = _read_json(path)
    assert data["format_version"] >= 1 and data["hardware_id"] == HW and data["target_kinds"] == ["llvm"]


def _donor_folder(tmp_path) -> str:
    """Another machine's profile folder (``donor-hw-2c``): every kernel of the synthetic records."""
    from autoplace.profile import ProfileStore

    donor = "donor-hw-2c"
    meta = {"hardware_id": donor, "tvm_version": TVM, "cpu_model": "test", "cpu_cores": 2, "gpus": []}
    store = ProfileStore(str(tmp_path / donor), metadata=meta)
    for rec in synthetic_records().to_dict(orient="records"):
        rec = {k: v for k, v in rec.items() if not (isinstance(v, float) and math.isnan(v))}
        store.append(dict(rec, hardware_id=donor))
    return store.path


def test_a_prior_carries_what_the_donor_timed_and_this_profile_did_not(tmp_path):
    """This machine runs every kernel 2x the donor's time and never timed a convolution; with the donor's folder
    as prior the convolutions are priced about 2x the donor's times, without it they are a guess. The donor's
    fitted model is saved inside the model; holding kernels out of the prior keeps them out of the donor's fit."""
    donor_path = _donor_folder(tmp_path)
    records = synthetic_records()
    units = records["kind"] == "unit"
    records.loc[units, "median_us"] = 2.0 * records.loc[units, "median_us"]
    convs = records["key"].astype(str).str.startswith("llvm-conv-")
    truth = _units(records[convs])
    train = records[~convs]
    with_prior = XGBCostModel(**FAST, prior=donor_path).fit(train, hardware_id=HW, tvm_version=TVM)
    plain = XGBCostModel(**FAST).fit(train, hardware_id=HW, tvm_version=TVM)
    measured = truth["median_us"].to_numpy()
    err_prior = np.abs(with_prior.predict(truth) / measured - 1)
    err_plain = np.abs(plain.predict(truth) / measured - 1)
    assert np.median(err_prior) < 0.2 < np.median(err_plain)
    assert with_prior.prior_.hardware_id_ == "donor-hw-2c" and set(with_prior.prior_offset_) == {"llvm"}
    assert abs(with_prior.prior_offset_["llvm"] - math.log(2.0)) < 0.15
    path = with_prior.save(str(tmp_path / "cost_model.json"))
    again = load(path)
    np.testing.assert_array_equal(again.predict(truth), with_prior.predict(truth))
    assert again.prior == donor_path and again.prior_.n_records_ == with_prior.prior_.n_records_
    held = XGBCostModel(**FAST, prior=donor_path).hold_out_of_prior(truth["key"], ["gamma"])
    held.fit(train, hardware_id=HW, tvm_version=TVM)
    gamma = records["model"].astype(str).eq("gamma") & units & records["status"].eq("ok")
    assert held.prior_.n_records_ == with_prior.prior_.n_records_ - len(truth) - (gamma & ~convs).sum()
    assert np.median(np.abs(held.predict(truth) / measured - 1)) > np.median(err_prior)


def test_a_prior_that_is_no_profile_is_refused_and_one_without_the_kind_is_not_used(tmp_path, records):
    from autoplace.errors import AutoplaceError

    with pytest.raises(AutoplaceError, match="no profile there.*another machine's profile"):
        XGBCostModel(**FAST, prior=str(tmp_path / "nowhere")).fit(records, hardware_id=HW, tvm_version=TVM)
    cuda = records.copy()
    cuda.loc[cuda["kind"] == "unit", "target"] = "cuda"
    with pytest.warns(UserWarning, match=r"no usable kernel records of \['cuda'\].*trained without the prior"):
        fitted = XGBCostModel(**FAST, prior=_donor_folder(tmp_path)).fit(cuda, hardware_id=HW, tvm_version=TVM)
    assert fitted.prior_ is None and fitted.prior_offset_ == {}
    np.testing.assert_allclose(fitted.predict(_units(cuda)),
                               XGBCostModel(**FAST).fit(cuda, hardware_id=HW, tvm_version=TVM).predict(_units(cuda)))


def test_load_refuses_other_format_or_feature_versions(model, tmp_path):
    path = model.save(str(tmp_path / "m.json"))
    for field in ("format_version", "feature_version"):
        data = _read_json(path)
        data[field] = 999
        bad = tmp_path / f"bad_{field}.json"
        bad.write_text(json.dumps(data))
        with pytest.raises(CostModelVersionError, match="retrain"):
            XGBCostModel.load(str(bad))
    (tmp_path / "other.json").write_text(json.dumps({"hello": 1}))
    with pytest.raises(CostModelVersionError, match="not an autoplace cost model"):
        load(str(tmp_path / "other.json"))


def test_training_on_a_profile_from_other_hardware_warns(records):
    with pytest.warns(ForeignProfileWarning, match="other-machine"):
        XGBCostModel(**FAST).fit(records, hardware_id="other-machine", tvm_version=TVM)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ForeignProfileWarning)
        XGBCostModel(**FAST).fit(records, hardware_id=HW, tvm_version=TVM)  # same hardware: silent
    with pytest.warns(ForeignProfileWarning, match="TVM"):
        XGBCostModel(**FAST).fit(records, hardware_id=HW, tvm_version="0.1")


def test_unseen_op_type_gets_a_finite_positive_flagged_prediction(model, records):
    new = _unit("llvm-new", "user", ["relax.nn.brand_new_op"], [[64, 64], [64, 64]], None, status="ok")
    pred = model.predict([new])
    assert pred.shape == (1,) and np.isfinite(pred[0]) and pred[0] > 0
    assert model.unseen_ops([new]) == [["relax.nn.brand_new_op"]]
    table = CostTable(records, model=model)
    latency, source = table.unit_latency_us(new, "llvm")
    assert np.isfinite(latency) and latency > 0 and source == PREDICTED_UNSEEN_OP
    # A record with almost nothing known still gets a finite, positive price.
    bare = dict(key="x", target="llvm", ops=["relax.mystery"], arg_shapes=[[3], [3]])
    assert np.isfinite(model.predict([bare])[0]) and model.predict([bare])[0] > 0


def test_predicting_for_an_unprofiled_target_raises(model, records):
    with pytest.raises(UnknownTargetError, match="cuda"):
        model.predict(_units(records).head(2), target="cuda")


def _streaming_records(l2_bytes=1 << 20):
    """Adds within an L2 of ``l2_bytes`` at 200 GB/s and past it at 50 GB/s, plus a gather; the kernels of
    three fused ops are small ones only, so the trees have no example of such a chain past the L2."""
    rows = []
    for i, elems in enumerate(np.geomspace(1 << 10, 1 << 22, 25).astype(int)):
        ops, shapes = ["relax.add"], [[int(elems)]] * 3
        if elems < 1 << 15 and i % 2:
            ops, shapes = ["relax.add", "relax.add", "relax.subtract"], [[int(elems)]] * 4
        nbytes = 4 * elems * len(shapes)
        rows.append(_unit(f"llvm-s{i}", f"stream{i}", ops, shapes,
                          nbytes / (200e3 if nbytes <= l2_bytes else 50e3), flops=elems * (len(ops))))
        rows[-1]["l2_bytes"] = l2_bytes
    table = _unit("llvm-take", "gather", ["relax.take"], [[1 << 20, 64], [16], [16, 64]], 0.1)
    return pd.DataFrame(rows + [dict(table, l2_bytes=l2_bytes)])


def test_streaming_kernels_past_the_l2_are_priced_no_faster_than_measured_bandwidth(tmp_path):
    records = _streaming_records()
    chain = _unit("llvm-chain", "user", ["relax.add", "relax.add", "relax.subtract"], [[3 << 19]] * 4, None)
    nbytes = chain["bytes_in"] + chain["bytes_out"]  # 6 MB, past the 1 MB L2
    floored = XGBCostModel(**FAST).fit(records, hardware_id=HW, tvm_version=TVM)
    free = XGBCostModel(**FAST, stream_floor=False).fit(records, hardware_id=HW, tvm_version=TVM)
    assert set(floored.stream_floor_) == {"llvm"} and free.stream_floor_ == {}
    envelope = floored.stream_floor_["llvm"]
    assert envelope["l2_bytes"] == 1 << 20 and max(envelope["gb_s"]) == pytest.approx(50.0)
    assert free.predict([chain])[0] < nbytes / 50e3  # the trees alone price the chain too fast
    assert floored.predict([chain])[0] == pytest.approx(nbytes / 50e3)
    # Within the L2, for a gather (it reads 16 rows, not the table), past the largest kernel, on a profile
    # without l2_bytes: no floor.
    small = _unit("llvm-small", "user", ["relax.add", "relax.add", "relax.subtract"], [[4096]] * 4, None)
    gather = _unit("llvm-g", "user", ["relax.take"], [[1 << 21, 64], [16], [16, 64]], None)
    huge = _unit("llvm-huge", "user", ["relax.add"], [[1 << 26]] * 3, None)
    for unit in (small, gather, huge):
        assert floored.predict([unit])[0] == pytest.approx(free.predict([unit])[0])
    assert XGBCostModel(**FAST).fit(records.drop(columns="l2_bytes"), hardware_id=HW,
                                    tvm_version=TVM).stream_floor_ == {}
    # Saved and loaded, the floor stays; a model saved before it (no entry) loads without one.
    path = floored.save(str(tmp_path / "m.json"))
    assert load(path).predict([chain])[0] == pytest.approx(floored.predict([chain])[0])
    data = _read_json(path)
    del data["state"]["stream_floor"]
    assert XGBCostModel.from_dict(data).stream_floor_ == {}



def test_kernels_that_only_stream_past_the_l2_are_priced_no_slower_than_their_neighbours_streamed():
    # Single adds past a 1 MB L2 stream at 50 GB/s; the only three-op chains trained on are small ones at
    # 2 GB/s and exp kernels past the L2 at 5 GB/s, so the trees price a large chain far too slowly.
    l2 = 1 << 20
    rows = []
    for i, elems in enumerate(np.geomspace(1 << 10, 1 << 22, 25).astype(int)):
        shapes = [[int(elems)]] * 3
        nbytes = 12 * int(elems)
        rows.append(dict(_unit(f"llvm-a{i}", f"add{i}", ["relax.add"], shapes,
                               nbytes / (200e3 if nbytes <= l2 else 50e3)), l2_bytes=l2))
        if nbytes <= l2:
            rows.append(dict(_unit(f"llvm-c{i}", f"chain{i}", ["relax.add", "relax.add", "relax.subtract"],
                                   [[int(elems)]] * 4, 16 * int(elems) / 2e3, flops=3 * int(elems)), l2_bytes=l2))
        else:
            rows.append(dict(_unit(f"llvm-e{i}", f"exp{i}", ["relax.exp", "relax.exp", "relax.exp"],
                                   [[int(elems)]] * 2, 8 * int(elems) / 5e3, flops=3 * int(elems)), l2_bytes=l2))
    records = pd.DataFrame(rows)
    bounded = XGBCostModel(**FAST).fit(records, hardware_id=HW, tvm_version=TVM)
    free = XGBCostModel(**FAST, stream_floor=False).fit(records, hardware_id=HW, tvm_version=TVM)
    chain = _unit("llvm-chain", "user", ["relax.add", "relax.add", "relax.subtract"], [[1 << 20]] * 4, None,
                  flops=3 << 20)
    nbytes = chain["bytes_in"] + chain["bytes_out"]  # 16 MB, past the L2, single adds of 6-24 MB near it
    assert free.predict([chain])[0] > 2 * nbytes / 50e3  # the trees alone: slower than any add near it
    assert bounded.predict([chain])[0] == pytest.approx(nbytes / 50e3, rel=1e-3)
    # A transcendental kernel, one within the L2 and one past every streaming-only kernel: no ceiling.
    exp = _unit("llvm-exp", "user", ["relax.exp", "relax.exp", "relax.exp"], [[1 << 20]] * 2, None, flops=3 << 20)
    small = _unit("llvm-small", "user", ["relax.add", "relax.add", "relax.subtract"], [[4096]] * 4, None)
    huge = _unit("llvm-huge", "user", ["relax.add", "relax.add", "relax.subtract"], [[1 << 25]] * 4, None)
    for unit in (exp, small, huge):
        assert bounded.predict([unit])[0] == pytest.approx(free.predict([unit])[0], rel=1e-6)
    assert not streams_simply(exp) and streams_simply(chain)
    # A model saved before the ceiling (its table has no simple_* lists) prices as the trees and floor did.
    old = {k: {n: v for n, v in e.items() if not n.startswith("simple")} for k, e in bounded.stream_floor_.items()}
    assert stream_ceiling_us(old, [chain], ["llvm"])[0] == 0.0

# -- lookup-first costs ----------------------------------------------------------------------------
def test_cost_table_measured_first_then_predicted(model, records):
    table = CostTable(records, model=model)
    units = _units(records)
    rec = units.iloc[0]
    assert table.unit_latency_us(rec, "llvm") == (float(rec["median_us"]), MEASURED)
    novel = dict(rec)
    novel["key"] = "llvm-never-measured"
    latency, source = table.unit_latency_us(novel, "llvm")
    assert source == PREDICTED and latency == pytest.approx(float(model.predict([novel])[0]))
    broken = records[records["key"] == "llvm-broken"].iloc[0]
    assert table.unit_latency_us(broken, "llvm") == (math.inf, UNSUPPORTED)
    frame = table.latencies(units)
    assert (frame["source"] == MEASURED).all()
    np.testing.assert_allclose(frame["latency_us"], units["median_us"].astype(float))
    with pytest.raises(KeyError, match="no cost model"):
        CostTable(records).unit_latency_us(novel, "llvm")
    # End to end on one device: invoke + launches + kernels (a kernel launched twice counts twice).
    launched = [units.iloc[0], units.iloc[1], units.iloc[0]]
    expected = 0.55 + 3 * 0.2 + sum(float(u["median_us"]) for u in launched)
    assert table.end_to_end_us(launched, "llvm:0") == pytest.approx(expected)


def test_cost_table_launch_and_copy_costs(records):
    table = CostTable(records)
    assert table.launch_us("llvm:0") == pytest.approx(0.2)
    assert table.launch_us("llvm:7") == pytest.approx(0.2)  # same kind: mean of its devices
    assert table.invoke_us("llvm:0") == pytest.approx(0.55)
    with pytest.raises(KeyError):
        table.launch_us("cuda:0")
    assert table.launch_us("cuda:0", default=0.0) == 0.0
    assert table.copy_cost("llvm:0", "llvm:1") == (0.6, 3e-5)
    assert table.copy_cost("llvm:0", "llvm:0") == (0.0, 0.0)
    assert table.copy_us("llvm:0", "llvm:1", 1e6) == pytest.approx(0.6 + 30.0)
    assert table.copy_cost("llvm:2", "llvm:3") == (0.6, 3e-5)  # same kinds: fit of that kind pair
    with pytest.raises(KeyError, match="llvm:0->cuda:0"):
        table.copy_cost("llvm:0", "cuda:0")


def test_cost_table_prices_copies_between_their_measured_sizes(records):
    """A pair whose copies the profile measured size by size is priced between those sizes (each size's median over
    its records), not by the fit: the fit stays what ``copy_cost`` unpacks to."""
    rows = [dict(kind="copy", key=str(n), target="llvm:1->llvm:0", status="ok", nbytes=n, median_us=us)
            for n, us in ((4096, 1.0), (1 << 20, 40.0), (1 << 20, 60.0), (4 << 20, 400.0))]
    rows.append(dict(kind="copy_fit", key="fit", target="llvm:1->llvm:0", status="ok", alpha_us=0.5, us_per_byte=5e-5))
    table = CostTable(pd.concat([records, pd.DataFrame(rows)], ignore_index=True))
    assert table.copy_cost("llvm:1", "llvm:0") == (0.5, 5e-5)
    assert table.copy_us("llvm:1", "llvm:0", 1 << 20) == pytest.approx(50.0)  # median of the two records
    assert table.copy_us("llvm:1", "llvm:0", 2.5 * (1 << 20)) == pytest.approx(225.0)
    assert table.copy_us("llvm:0", "llvm:1", 1e6) == pytest.approx(0.6 + 30.0)  # no sizes measured: the fit


def test_a_measured_gpu_to_cpu_hand_off_reaches_the_solver_through_the_copy_cost(records, tmp_path):
    """The hand-off probes' timings (``experiments/gpu/handoff_probes.py``: the mixed plan less its parts, per size,
    median over sizes) become one ``kind="handoff"`` record; the cost table gives it to every GPU -> CPU copy cost
    (each device pair of those kinds) and to no other direction."""
    import json

    from experiments.gpu.handoff_probes import handoff_record

    medians = {"handoff-64x2048:gpu>cpu": 300.0, "relu-64x2048:all:gpu": 200.0, "handoff-64x2048:all:cpu": 60.0,
               "relu-64x2048:all:cpu": 20.0, "handoff-4x64:gpu>cpu": 90.0, "relu-4x64:all:gpu": 50.0,
               "handoff-4x64:all:cpu": 5.0, "relu-4x64:all:cpu": 3.0}
    path = tmp_path / "plan_records.jsonl"
    with open(path, "w") as f:
        f.writelines(json.dumps(dict(kind="plan", key=key, status="ok", round=r + 1, median_us=us * jitter,
                                     hardware_id="box", tvm_version="0.27")) + "\n"
                     for key, us in medians.items() for r, jitter in enumerate((1.0, 1.1, 0.9)))
    record = handoff_record(str(path))
    assert record["handoff_us_by_size"] == pytest.approx({"64x2048": 60.0, "4x64": 38.0})
    assert record["handoff_us"] == pytest.approx(49.0) and record["rounds"] == 3 and record["target"] == "cuda->llvm"
    fits = pd.DataFrame([dict(kind="copy_fit", key="fit", target=t, status="ok", alpha_us=10.0, us_per_byte=1e-4)
                         for t in ("llvm:0->cuda:0", "cuda:0->llvm:0")])
    table = CostTable(pd.concat([records, fits, pd.DataFrame([record])], ignore_index=True))
    assert table.copy_cost("cuda:0", "llvm:0").handoff_us == pytest.approx(49.0)
    assert table.copy_cost("cuda:1", "llvm:0").handoff_us == pytest.approx(49.0)  # same kinds, no fit of its own
    assert table.copy_cost("llvm:0", "cuda:0").handoff_us == 0.0
    assert CostTable(pd.concat([records, fits], ignore_index=True)).copy_cost("cuda:0", "llvm:0").handoff_us == 0.0


def test_hand_off_probes_of_three_sizes_or_more_give_a_line_in_the_tensors_bytes(records, tmp_path):
    """With the six sizes of ``--sizes line`` the record holds a line (Theil-Sen: one noisy size moves it little):
    ``handoff_us`` its intercept, ``handoff_us_per_byte`` its slope; the cost table gives both, the newest record
    of a pair over older ones."""
    import json

    from experiments.gpu.handoff_probes import SIZES_LINE, handoff_record

    medians = {}
    for n, k in SIZES_LINE:  # hand-off = 2 us + 4e-5 us per byte of the copied input, but 64x1024's is noisy
        extra = 2.0 + 4e-5 * 4 * n * k + (30.0 if (n, k) == (64, 1024) else 0.0)
        medians.update({f"handoff-{n}x{k}:gpu>cpu": 100.0 + 10.0 + extra, f"relu-{n}x{k}:all:gpu": 100.0,
                        f"handoff-{n}x{k}:all:cpu": 15.0, f"relu-{n}x{k}:all:cpu": 5.0})
    path = tmp_path / "plan_records.jsonl"
    with open(path, "w") as f:
        f.writelines(json.dumps(dict(kind="plan", key=key, status="ok", round=1, median_us=us, hardware_id="box",
                                     tvm_version="0.27")) + "\n" for key, us in medians.items())
    line = handoff_record(str(path), SIZES_LINE)
    assert line["handoff_us"] == pytest.approx(2.0, abs=1e-6)
    assert line["handoff_us_per_byte"] == pytest.approx(4e-5)
    older = dict(kind="handoff", key="gpu-to-cpu", target="cuda->llvm", status="ok", handoff_us=9.0)
    fits = pd.DataFrame([dict(kind="copy_fit", key="fit", target=t, status="ok", alpha_us=10.0, us_per_byte=1e-4)
                         for t in ("llvm:0->cuda:0", "cuda:0->llvm:0")])
    cost = CostTable(pd.concat([records, fits, pd.DataFrame([older, line])], ignore_index=True)).copy_cost(
        "cuda:0", "llvm:0")
    assert (cost.handoff_us, cost.handoff_us_per_byte) == pytest.approx((2.0, 4e-5))


def test_cost_table_trains_a_named_model_and_loads_a_saved_one(records, model, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ForeignProfileWarning)
        table = CostTable(records, model="roofline")
    assert isinstance(table.model, RooflineCostModel)
    path = model.save(str(tmp_path / "cm.json"))
    assert isinstance(CostTable(records, model=path).model, XGBCostModel)


# -- evaluation ----------------------------------------------------------------------------------------
def test_family_groups_size_variants():
    assert family("cnn-base") == family("cnn") == "cnn"
    assert family("bert_base") == "bert" and family("seed003") == "seed003"


def test_leave_one_family_out_holds_out_whole_families(records):
    res = leave_one_family_out(records, "xgb", **FAST)
    models = res["models"].set_index("model")
    assert set(models.index) == {"alpha", "alpha-base", "beta", "beta-base", "gamma"}
    units = _units(records)
    # alpha and alpha-base are held out together: training never has any alpha-family kernel.
    alpha_keys = set(units.loc[units["model"].map(family) == "alpha", "key"])
    assert models.loc["alpha", "train_records"] == len(units) - len(alpha_keys)
    # beta shares one kernel with alpha: lookup-first finds it measured.
    assert models.loc["beta", "lookup_measured"] == 1
    assert models["spearman"].min() > 0.8
    assert np.all(np.isfinite(models["e2e_pure_err"]))
    # The oracle uses measured kernels: 2% below the fake end-to-end records, plus call overheads.
    assert models["e2e_oracle_err"].abs().max() < 0.03
    pooled = summarize(res)
    assert pooled.loc[0, "spearman"] > 0.9


def test_leave_one_family_out_keeps_the_held_out_family_out_of_the_prior_too(records, tmp_path, monkeypatch):
    """Each fold's fits (and the band's nested fits) train their donor without the fold's family: its kernels by
    key and every donor record profiled for it; a user's new model is in no machine's profile."""
    donor = _donor_folder(tmp_path)
    seen = []
    fit_prior = XGBCostModel._fit_prior

    def spy(self, units):
        fitted = fit_prior(self, units)
        seen.append((self.prior_holdout, set(fitted.op_vocab_) and fitted.n_records_))
        return fitted

    monkeypatch.setattr(XGBCostModel, "_fit_prior", spy)
    res = leave_one_family_out(records, "xgb", prior=donor, bands=True, **FAST)
    assert set(res["models"]["model"]) == {"alpha", "alpha-base", "beta", "beta-base", "gamma"}
    units = _units(records)
    keys_of = {f: set(units.loc[units["model"].map(family) == f, "key"]) for f in ("alpha", "beta", "gamma")}
    for (keys, families), donor_kernels in seen:
        assert families and families <= set(keys_of)  # no fit of a fold trains its donor on everything
        kept = ~units["key"].isin(keys) & ~units["model"].map(family).isin(families)
        assert donor_kernels == kept.sum() < len(units) - len(set().union(*(keys_of[f] for f in families))) + 1
    assert {frozenset(f) for (_, f), _ in seen} >= {frozenset([f]) for f in keys_of}  # the folds' own fits
    assert any(len(f) == 2 for (_, f), _ in seen)  # the nested calibration holds out both families


# -- Units from a real model, and ``autoplace train`` -----------------------------------------------------
def test_features_from_a_real_unit_match_its_profile_record():
    from autoplace import zoo
    from autoplace.graph import op_graph
    from autoplace.profile import extract_units
    from autoplace.profile.job import unit_record

    model = zoo.get("seed003")
    graph = op_graph(model)
    unit = extract_units(model, "llvm", graph=graph)[0]
    rec = features_from_unit(unit, graph)
    expected = unit_record(unit, graph, "", "llvm", {})
    expected.pop("measured_at")
    assert rec == expected
    assert record_features(rec) == record_features(expected)
    bare = features_from_unit(unit)  # without the graph: ops and shapes only
    assert bare["key"] == unit.key and bare["ops"] == unit.ops
    est = XGBCostModel(**FAST).fit(synthetic_records(), hardware_id=HW, tvm_version=TVM)
    table = CostTable(synthetic_records(), model=est)
    latency, source = table.unit_latency_us(unit, "llvm", graph=graph)
    assert np.isfinite(latency) and latency > 0 and source in (PREDICTED, PREDICTED_UNSEEN_OP)


def test_train_main_writes_the_model_next_to_the_profile(tmp_path, capsys):
    from autoplace.cost_model.cli import train_main
    from autoplace.profile import ProfileStore

    meta = {"hardware_id": HW, "tvm_version": TVM, "cpu_model": "test", "cpu_cores": 2, "gpus": []}
    store = ProfileStore(str(tmp_path / HW), metadata=meta)
    for rec in synthetic_records().to_dict(orient="records"):
        store.append({k: v for k, v in rec.items() if not (isinstance(v, float) and math.isnan(v))})
    with warnings.catch_warnings():  # another machine's folder trains that machine's model: nothing to warn of
        warnings.simplefilter("error", ForeignProfileWarning)
        assert train_main(["--profile", store.path]) == 0
    path = tmp_path / HW / "cost_model.json"
    assert path.exists()
    again = load(str(path))
    assert again.hardware_id_ == HW and "saved to" in capsys.readouterr().out


def test_train_main_starts_from_a_prior_and_refuses_a_bad_one(tmp_path, capsys):
    from autoplace.cost_model.cli import train_main
    from autoplace.errors import AutoplaceError
    from autoplace.profile import ProfileStore

    meta = {"hardware_id": HW, "tvm_version": TVM, "cpu_model": "test", "cpu_cores": 2, "gpus": []}
    store = ProfileStore(str(tmp_path / HW), metadata=meta)
    for rec in synthetic_records().to_dict(orient="records"):
        store.append({k: v for k, v in rec.items() if not (isinstance(v, float) and math.isnan(v))})
    donor = _donor_folder(tmp_path)
    for argv, message in ((["--prior", str(tmp_path / "nowhere")], "no profile there"),
                          (["--prior", store.path], "is the profile being trained"),
                          (["--prior", donor, "--model", "roofline"], "--model xgb only"),
                          (["--prior", donor, "--target", "cuda"], r"timed no kernel of a target kind.*\['llvm'\]")):
        with pytest.raises(AutoplaceError, match=message):
            train_main(["--profile", store.path, *argv])
    assert not (tmp_path / HW / "cost_model.json").exists()
    assert train_main(["--profile", store.path, "--prior", donor]) == 0
    assert "kernels of donor-hw-2c (--prior" in capsys.readouterr().out
    again = load(str(tmp_path / HW / "cost_model.json"))
    assert again.prior == donor and again.prior_.hardware_id_ == "donor-hw-2c" and again.hardware_id_ == HW


def test_train_also_fits_the_in_model_times_and_tables_price_large_models_with_them(tmp_path, capsys):
    """Where the profile timed kernels in-model, ``autoplace train`` saves a second model of those times beside
    the first; a table of the folder loads it and prices the unmeasured kernels of a model larger than the L2
    with it (here every kernel runs 1.5x slower in-model), of a smaller one with the warm model."""
    from autoplace.cost_model.cli import train_main
    from autoplace.cost_model.train import in_model_records
    from autoplace.profile import ProfileStore
    from autoplace.profile.cache_state import IN_MODEL_TIMING

    meta = {"hardware_id": HW, "tvm_version": TVM, "cpu_model": "test", "cpu_cores": 2, "gpus": []}
    store = ProfileStore(str(tmp_path / HW), metadata=meta)
    records = synthetic_records()
    held = records[records["key"].astype(str).str.contains("-gamma-")]  # priced, never measured
    for rec in records.drop(held.index).to_dict(orient="records"):
        rec = {k: v for k, v in rec.items() if not (isinstance(v, float) and math.isnan(v))}
        if rec["kind"] == "unit" and rec["status"] == "ok":
            rec.update(in_model_median_us=1.5 * rec["median_us"], in_model_timing=IN_MODEL_TIMING, l2_bytes=1 << 10)
        store.append(rec)
    timed = in_model_records(store.records())
    units = timed[timed["kind"] == "unit"]
    assert len(units) == ((store.records()["kind"] == "unit") & (store.records()["status"] == "ok")).sum()
    assert np.allclose(units["median_us"], 1.5 * store.records().loc[units.index, "median_us"])
    assert train_main(["--profile", store.path]) == 0
    assert "in-model times" in capsys.readouterr().out
    assert (tmp_path / HW / "cost_model_in_model.json").exists()
    table = CostTable.from_profile(store.path)
    assert table.in_model_model is not None and table.l2_bytes_ == {"llvm": 1 << 10}
    recs = [r for _, r in held[held["kind"] == "unit"].iterrows()]
    warm = table.latencies(recs, "llvm", in_model=False)["latency_us"].to_numpy()
    cold = table.latencies(recs, "llvm")  # these kernels touch more than 1 KB: in-model
    assert cold["in_model"].all() and set(cold["source"]) <= {PREDICTED, PREDICTED_UNSEEN_OP}
    assert 1.2 < float(np.median(cold["latency_us"].to_numpy() / warm)) < 1.9


def _in_context_unit(key, weight_bytes=0):
    """A unit record timed in-model (10 us warm, 12 in-model, 1 KB out) on a 1 MB L2."""
    from autoplace.profile.cache_state import IN_MODEL_TIMING

    return dict(kind="unit", status="ok", target="llvm", key=key, model="m", median_us=10.0,
                in_model_median_us=12.0, in_model_timing=IN_MODEL_TIMING, l2_bytes=1 << 20,
                weight_bytes=weight_bytes, bytes_out=1024)


def _in_context_run(model, keys, kernel_us):
    """An end-to-end record of ``model`` whose kernels ``keys`` were timed in context at ``kernel_us``."""
    from autoplace.profile.in_context import IN_CONTEXT_TIMING

    return dict(kind="model", status="ok", target="llvm", key=model, model=model, median_us=sum(kernel_us) + 5,
                unit_keys=keys, in_context_kernel_us=kernel_us, in_context_timing=IN_CONTEXT_TIMING)


def test_the_model_of_in_model_times_learns_the_in_context_times_of_models_larger_than_the_l2():
    """Where a model larger than the L2 was timed whole with its kernels in context, those times (the median over a
    kernel's launches) replace its kernels' in-model times in what the model of in-model times trains on; the kernels
    of a model that stays in the L2 keep their in-model times (their in-context times describe a warm cache)."""
    from autoplace.cost_model.train import in_context_times, in_model_records

    unit, run = _in_context_unit, _in_context_run
    records = pd.DataFrame([
        unit("big-a", 4 << 20), unit("big-b", 0), unit("big-c", 0), unit("small-a", 1024), unit("small-b", 0),
        unit("alone", 0),
        run("large", ["big-a", "big-b", "big-c", "big-a"], [20.0, 15.0, 9.0, 22.0]),  # 4 MB: past the 1 MB L2
        run("small", ["small-a", "small-b"], [30.0, 30.0]),  # stays in the L2
    ])
    assert in_context_times(records) == {("llvm", "big-a"): 21.0, ("llvm", "big-b"): 15.0, ("llvm", "big-c"): 9.0}
    timed = in_model_records(records)
    price = dict(zip(timed.loc[timed["kind"] == "unit", "key"], timed.loc[timed["kind"] == "unit", "median_us"]))
    assert price == {"big-a": 21.0, "big-b": 15.0, "big-c": 9.0, "small-a": 12.0, "small-b": 12.0, "alone": 12.0}
    # A kernel the records have no unit record of (a training fold left its family out) is not priced so.
    assert in_context_times(records[records["key"] != "big-b"]) == {("llvm", "big-a"): 21.0, ("llvm", "big-c"): 9.0}
    # In a model priced weights-cold (its 8 MB of weights per call above the line) a kernel with weights learns its
    # in-context time less what its weights-cold timing adds (the table adds that back): 21 - (17 - 12) = 16 us;
    # one with weights and no weights-cold timing is left out (its in-model time stays).
    assert in_context_times(records, weights_line={"llvm": 9 << 20}) == {
        ("llvm", "big-a"): 21.0, ("llvm", "big-b"): 15.0, ("llvm", "big-c"): 9.0}  # 8 MB: not above a 9 MB line
    cold = records.copy()
    cold.loc[cold["key"] == "big-a", "weights_cold_median_us"] = 17.0
    assert in_context_times(cold, weights_line={"llvm": 5 << 20}) == {
        ("llvm", "big-a"): 16.0, ("llvm", "big-b"): 15.0, ("llvm", "big-c"): 9.0}
    assert in_context_times(records, weights_line={"llvm": 5 << 20}) == {("llvm", "big-b"): 15.0, ("llvm", "big-c"): 9.0}


def test_a_measured_kernel_is_priced_by_its_times_in_context_in_the_profiles_other_models():
    """A measured kernel of a model that runs in-model is priced by its in-context time in the profile's other
    models that launch it (the median over them), not by its in-model time alone: the time it takes inside a model.
    Kernels no such model launched keep their in-model time; a model that stays in the L2 its warm one."""
    from autoplace.cost_model.train import in_context_times

    unit, run = _in_context_unit, _in_context_run
    records = pd.DataFrame([
        unit("a", 4 << 20), unit("b"), unit("c"), unit("d"),
        run("one", ["a", "b", "a"], [20.0, 15.0, 22.0]),  # 8 MB per call: past the 1 MB L2
        run("two", ["a", "b", "c"], [27.0, 19.0, 14.0]),
    ])
    # over the launches in each model (21 and 27 us), then over the models
    assert in_context_times(records) == {("llvm", "a"): 24.0, ("llvm", "b"): 17.0, ("llvm", "c"): 14.0}
    table = CostTable(records)
    assert table.in_context_elsewhere_ == {("a", "llvm"): 24.0, ("b", "llvm"): 17.0, ("c", "llvm"): 14.0}
    new = [unit("a", 4 << 20), unit("c"), unit("d"), unit("a", 4 << 20)]  # a model no record timed
    priced = table.latencies(new, "llvm", in_model=True)
    assert priced["in_model"].all() and not priced["in_context"].any()
    assert priced["latency_us"].tolist() == [24.0, 14.0, 12.0, 24.0]  # d: no other model launched it
    # by default a model pays the share of those times' excess over the warm ones that the L2 cannot hold
    share = 1 - (1 << 20) / ((4 << 20) + 4 * 1024)
    assert table.latencies(new, "llvm")["latency_us"].tolist() == pytest.approx(
        [10 + 14 * share, 10 + 4 * share, 10 + 2 * share, 10 + 14 * share])
    assert table.latencies(new, "llvm", in_model=False)["latency_us"].tolist() == [10.0] * 4


def test_train_fits_no_model_of_in_model_times_when_few_kernels_were_timed_so(tmp_path, capsys):
    """A profile most of whose kernels were measured before in-model timing existed: a model fitted on the few
    in-model times would price kernels it never saw timed so (Zen 3, session 20: bert-base's matmuls 1.9x their
    in-model times). ``autoplace train`` fits none, says how many were timed and what to run, and removes the one
    saved before; a table of the folder then scales the warm predictions by the in-model factors."""
    from autoplace.cost_model.cli import train_main
    from autoplace.cost_model.train import IN_MODEL_MIN_COVERAGE, in_model_coverage
    from autoplace.profile import ProfileStore
    from autoplace.profile.cache_state import IN_MODEL_TIMING

    meta = {"hardware_id": HW, "tvm_version": TVM, "cpu_model": "test", "cpu_cores": 2, "gpus": []}
    store = ProfileStore(str(tmp_path / HW), metadata=meta)
    records = synthetic_records()
    held = records[records["key"].astype(str).str.contains("-gamma-")]
    timed = 0
    for i, rec in enumerate(records.drop(held.index).to_dict(orient="records")):
        rec = {k: v for k, v in rec.items() if not (isinstance(v, float) and math.isnan(v))}
        if rec["kind"] == "unit" and rec["status"] == "ok" and i % 3 == 0:  # a third timed in-model
            rec.update(in_model_median_us=1.5 * rec["median_us"], in_model_timing=IN_MODEL_TIMING, l2_bytes=1 << 10)
            timed += 1
        store.append(rec)
    (timed_in_model, measured), = in_model_coverage(store.records()).values()
    assert timed_in_model == timed and 0 < timed < IN_MODEL_MIN_COVERAGE * measured
    stale = tmp_path / HW / "cost_model_in_model.json"
    stale.write_text("{}")
    assert train_main(["--profile", store.path]) == 0
    out = capsys.readouterr().out
    assert f"only {timed} of {measured} llvm kernels were timed in-model" in out and "autoplace profile" in out
    assert not stale.exists()
    table = CostTable.from_profile(store.path)
    assert table.in_model_model is None and table.l2_bytes_ == {"llvm": 1 << 10}
    recs = [r for _, r in held[held["kind"] == "unit"].iterrows()]
    warm = table.latencies(recs, "llvm", in_model=False)["latency_us"].to_numpy()
    cold = table.latencies(recs, "llvm")
    assert cold["in_model"].all() and np.allclose(cold["latency_us"].to_numpy() / warm, 1.5, rtol=0.05)


# -- the committed CPU profile, where present ------------------------------------------------------------
@pytest.fixture(scope="module")
def committed_records():
    from autoplace.profile import ProfileStore

    if not os.path.exists(os.path.join(PROFILE, "records.jsonl")):
        pytest.skip("no committed CPU profile")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ProfileStore(PROFILE).records()


def test_committed_cpu_profile_ranks_held_out_kernels(committed_records):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = leave_one_family_out(committed_records, "xgb", n_estimators=200, random_state=0)
    assert summarize(res)["spearman"].min() > 0.9


def test_committed_cpu_profile_predicts_held_out_mlp_end_to_end_thanks_to_the_stride_grid(committed_records):
    """mlp-base's matmuls: a size regime only the stride grid visits when mlp is held out."""
    records = committed_records
    grid = records["model"].astype(str).str.startswith("grid-")
    assert grid.any(), "the committed profile lost its stride grid"
    errors = {}
    for name, recs in (("grid", records), ("no grid", records[~grid])):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = leave_one_family_out(recs, "xgb", target="llvm", random_state=0)
        errors[name] = res["models"].set_index("model").loc["mlp-base", "e2e_pure_err"]
    assert abs(errors["grid"]) < 0.2, errors
    assert abs(errors["no grid"]) > abs(errors["grid"]), errors


def _overhead_records(runs: int, invoke=0.5, launch=0.3, per_arg=0.1):
    """Kernels of known latency and ``runs`` end-to-end records that take ``invoke + calls * launch +
    (args - 1) * per_arg`` more than their kernels; the probes say otherwise (0.55, 0.2, 0.2 per argument)."""
    rng = np.random.default_rng(0)
    rows = [dict(kind="unit", key=f"k{i}", target="llvm", status="ok", median_us=float(us))
            for i, us in enumerate(rng.uniform(0.05, 1.0, size=12))]
    for r in range(runs):
        calls, args = int(rng.integers(1, 40)), int(rng.integers(1, 50))
        keys = [f"k{int(i)}" for i in rng.integers(0, 12, size=calls)]
        kernels = sum(rows[int(k[1:])]["median_us"] for k in keys)
        e2e = kernels + invoke + calls * launch + (args - 1) * per_arg
        rows.append(dict(kind="model", key=f"m{r}", target="llvm", status="ok", median_us=e2e * rng.normal(1, 0.003),
                         unit_keys=keys, num_args=args, output_bytes=0))
    rows.append(dict(kind="launch", key="vm_call", target="llvm:0", status="ok", median_us=0.2,
                     single_call_us=0.75, per_arg_us=0.2, alloc_us_per_byte=0.0))
    return pd.DataFrame(rows)


def test_vm_overheads_are_refitted_to_end_to_end_records():
    table = CostTable(_overhead_records(30))
    assert table.launch_us("llvm:0") == pytest.approx(0.3, rel=0.1)
    assert table.invoke_us("llvm:0", num_args=11) == pytest.approx(0.5 + 10 * 0.1, rel=0.1)
    fit = table.overhead_fit_["llvm:0"]
    assert fit["runs"] == 30 and fit["probe"]["per_arg_us"] == 0.2
    # Too few end-to-end records: the probes stand.
    few = CostTable(_overhead_records(MIN_OVERHEAD_RUNS - 1))
    assert few.launch_us("llvm:0") == pytest.approx(0.2) and few.invoke_us("llvm:0", num_args=11) == pytest.approx(2.55)
    assert few.overhead_fit_ == {}


def test_an_input_of_main_is_priced_at_the_probes_cost_and_a_weight_at_the_fitted_one():
    """The VM checks each input of ``main`` at several times a weight's cost (Zen 5: 0.17-0.19 us against
    0.028-0.037, experiments/vm_argument_cost.py). The probe's ``main`` takes inputs (0.2 us each here); the end-to-end
    records of models with 1-3 inputs and many weights (0.03 us each) fit the weights' cost alone, and a model of
    three inputs (seed003) is priced with two inputs' worth, not two weights'. Records that do not say how many of
    their arguments are inputs count one."""
    records = _overhead_records(30, per_arg=0.03)
    models = records["kind"] == "model"
    inputs = np.resize([1, 1, 2, 3], int(models.sum()))
    records.loc[models, "num_inputs"] = inputs
    records.loc[models, "num_args"] = np.maximum(records.loc[models, "num_args"], inputs)
    records.loc[models, "median_us"] += (inputs - 1) * (0.2 - 0.03)  # each input after the first: the probe's cost
    table = CostTable(records)
    fit = table.overhead_fit_["llvm:0"]
    assert fit["per_input_us"] == pytest.approx(0.2) and fit["per_arg_us"] == pytest.approx(0.03, abs=0.01)
    seed003 = table.invoke_us("llvm:0", num_args=3, num_inputs=3)
    assert seed003 == pytest.approx(fit["invoke_us"] + 2 * 0.2, rel=0.02)
    assert table.invoke_us("llvm:0", num_args=3) == pytest.approx(fit["invoke_us"] + 2 * fit["per_arg_us"])
    assert seed003 - table.invoke_us("llvm:0", num_args=3) > 0.3  # two inputs, not two weights
    # num_inputs beyond num_args (a record or a caller that counts otherwise) is capped there
    assert table.invoke_us("llvm:0", num_args=2, num_inputs=5) == pytest.approx(fit["invoke_us"] + 0.2)


def test_the_probe_of_a_kind_is_the_fastest_of_its_devices_newest_probes():
    """The Zen 3's profile kept a one-round probe of its second CPU device (``llvm:1``, 0.325 us an input) that
    ``--redo launch`` never timed again beside ``llvm:0``'s newest five-round one (0.159): their mean priced
    seed003's inputs 0.16 us dear. Each device's newest probe counts (not the one last in the file), and the kind's
    probe is the fastest of them, field by field."""
    records = _overhead_records(30, per_arg=0.03)
    models = records["kind"] == "model"
    records.loc[models, "num_inputs"] = 3
    records.loc[models, "num_args"] = np.maximum(records.loc[models, "num_args"], 3)
    launch = records[records["kind"] == "launch"].iloc[0].to_dict()
    stale = [dict(launch, target="llvm:1", per_arg_us=0.325, single_call_us=0.79, median_us=0.27,
                  measured_at="2026-11-24T00:59:48+00:00"),
             dict(launch, per_arg_us=0.25, single_call_us=1.35, measured_at="2026-11-24T00:59:46+00:00")]
    records = records[records["kind"] != "launch"]
    newest = dict(launch, measured_at="2026-12-01T00:30:57+00:00")  # 0.2 us an input, first in the file
    table = CostTable(pd.concat([pd.DataFrame([newest] + stale), records], ignore_index=True))
    probe = table.overhead_fit_["llvm:0"]["probe"]
    assert probe["per_arg_us"] == pytest.approx(0.2)  # llvm:0's newest (not its older 0.25), not the mean with 0.325
    assert probe["launch_us"] == pytest.approx(0.2) and probe["invoke_us"] == pytest.approx(0.52)  # 0.79 - 0.27
    assert table.overhead_fit_["llvm:1"]["per_input_us"] == pytest.approx(0.2)


def test_vm_overheads_besides_kernels_timed_in_context_are_fitted_apart():
    """Model records that also carry their kernels' in-context times (each kernel here 1.25x its warm time, the
    VM's overhead besides them 2 us + 0.05 us per launch) give a second fit, used with ``in_context=True``."""
    from autoplace.profile.in_context import IN_CONTEXT_TIMING

    records = _overhead_records(30)
    warm = dict(zip(records["key"], records["median_us"]))
    models = records["kind"] == "model"
    records["in_context_us"] = None
    records.loc[models, "in_context_us"] = pd.Series([[1.25 * warm[k] for k in keys]
                                                      for keys in records.loc[models, "unit_keys"]],
                                                     index=records.index[models])
    records.loc[models, "median_us"] = [sum(ic) + 2.0 + 0.05 * len(ic) for ic in records.loc[models, "in_context_us"]]
    records["in_context_timing"] = IN_CONTEXT_TIMING
    table = CostTable(records)
    assert table.overhead_fit_in_context_["llvm:0"]["runs"] == 30
    assert table.launch_us("llvm:0", in_context=True) == pytest.approx(0.05, abs=0.01)
    assert table.invoke_us("llvm:0", in_context=True) == pytest.approx(2.0, rel=0.05)
    assert table.launch_us("llvm:0") > 0.1  # the warm fit absorbs what warm times miss
    assert CostTable(_overhead_records(30)).overhead_fit_in_context_ == {}  # no in-context times: no such fit


def test_in_context_times_are_priced_as_shares_of_the_builds_time_without_the_hook():
    """A ``context`` record that also timed its build without the instrument hook (``in_context_wall_us``) prices
    its kernels as shares of that time: scaled to add up to it less the VM's overhead besides in-context times, so
    the model built on that target is priced at the latency it ran at, whatever error the hook's cost estimate
    left in the kernels' readings. Rounds merge as the times do (the walls of the fastest rounds); a record
    without the wall keeps its readings as they are."""
    from autoplace.profile.in_context import IN_CONTEXT_TIMING, context_key

    keys = ["k0", "k1", "k2"]
    base = _overhead_records(30)  # the in-context fit below: 2 us + 0.05 us a launch
    models = base["kind"] == "model"
    warm = dict(zip(base["key"], base["median_us"]))
    base["in_context_us"] = None
    base.loc[models, "in_context_us"] = pd.Series([[1.25 * warm[k] for k in ks] for ks in base.loc[models, "unit_keys"]],
                                                  index=base.index[models])
    base.loc[models, "median_us"] = [sum(ic) + 2.0 + 0.05 * len(ic) for ic in base.loc[models, "in_context_us"]]
    base["in_context_timing"] = IN_CONTEXT_TIMING

    def context(times, wall=None, rounds=None, walls=None):
        rec = dict(kind="context", key=context_key(keys, "llvm"), target="llvm", status="ok", model="new",
                   unit_keys=keys, in_context_us=times, in_context_timing=IN_CONTEXT_TIMING)
        if wall is not None:
            rec["in_context_wall_us"] = wall
        if rounds is not None:
            rec.update(round_in_context_us=rounds, round_in_context_wall_us=walls)
        return rec

    units = [dict(kind="unit", key=k, target="llvm", status="ok") for k in keys]
    plain = CostTable(pd.concat([base, pd.DataFrame([context([10.0, 20.0, 30.0])])], ignore_index=True))
    assert plain.latencies(units, "llvm")["latency_us"].tolist() == pytest.approx([10.0, 20.0, 30.0])
    # read with the hook's cost underestimated: 60 us of readings, the build ran 50.0 without the hook
    table = CostTable(pd.concat([base, pd.DataFrame([context([10.0, 20.0, 30.0], wall=50.0)])], ignore_index=True))
    fixed = table.invoke_us("llvm:0", in_context=True) + 3 * table.launch_us("llvm:0", in_context=True)
    assert fixed == pytest.approx(2.15, rel=0.05)
    priced = table.latencies(units, "llvm")
    assert priced["in_context"].all()
    assert priced["latency_us"].tolist() == pytest.approx([(50.0 - fixed) * s for s in (1 / 6, 2 / 6, 3 / 6)])
    assert table.end_to_end_us(units, "llvm:0") == pytest.approx(50.0)
    # rounds: the fastest sums (60 and 63; 90 is a slow phase) and their walls (50 and 54: 52), one without a wall
    rounds = [[10.0, 20.0, 30.0], [30.0, 30.0, 30.0], [11.0, 21.0, 31.0]]
    merged = CostTable(pd.concat([base, pd.DataFrame([context(rounds[-1], 54.0, rounds, [50.0, 80.0, 54.0])])],
                                 ignore_index=True))
    assert merged.in_context_wall_[("llvm", tuple(keys))] == pytest.approx(52.0)
    assert merged.end_to_end_us(units, "llvm:0") == pytest.approx(52.0)
    older = CostTable(pd.concat([base, pd.DataFrame([context(rounds[-1], None, rounds, [None, None, 54.0])])],
                                ignore_index=True))
    assert older.end_to_end_us(units, "llvm:0") == pytest.approx(54.0)


def test_models_whose_weights_outgrow_the_caches_are_priced_with_their_weights_from_memory(tmp_path):
    """Kernels with weights are also timed with their weights flushed from every cache (``weights_cold_*``). A table
    learns from its models with end-to-end records which weights per call the host's caches keep (here: models of
    1 and 2 MB of weights run at their in-model sums, of 10 and 20 MB at their weights-cold sums): a model above
    that line is priced weights-cold, its measured kernels by those times, an unmeasured one by its in-model price
    plus its weights over the measured kernels' memory time per byte; a model below it stays in-model. The line is in
    bytes per call (every launch's weights and output): activations evict weights as weights do."""
    from autoplace.profile.cache_state import IN_MODEL_TIMING, WEIGHTS_COLD_TIMING

    mb = 1 << 20

    def unit(key, weight_mb, cold=True):
        rec = dict(kind="unit", status="ok", target="llvm", key=key, median_us=100.0, in_model_median_us=110.0,
                   in_model_timing=IN_MODEL_TIMING, l2_bytes=mb, weight_bytes=weight_mb * mb, bytes_out=4096,
                   flops=4.0 * weight_mb * mb, weight_args=[1] if weight_mb else [])
        if weight_mb and cold:  # 10 us more per MB read from memory
            rec.update(weights_cold_median_us=110.0 + 10.0 * weight_mb, weights_cold_timing=WEIGHTS_COLD_TIMING)
        return rec

    def run(name, keys, e2e_us):
        return dict(kind="model", status="ok", target="llvm", key=name, model=name, median_us=e2e_us, unit_keys=keys)

    units = [unit(f"w{m}", m) for m in (1, 2, 5, 10)] + [unit("act", 0)]
    runs = [run("one", ["w1", "act"], 220.0),  # 1 MB: in-model sum 220, weights-cold 230
            run("two", ["w2", "act"], 221.0),  # 2 MB: 220 / 240
            run("ten", ["w5", "w5", "act"], 430.0),  # 10 MB: 330 / 430
            run("twenty", ["w10", "w10", "act"], 535.0)]  # 20 MB: 330 / 530
    table = CostTable(pd.DataFrame(units + runs))
    assert table.measured_weights_cold_[("w5", "llvm")] == 160.0 and ("act", "llvm") not in table.measured_weights_cold_
    # between the 2 and the 10 MB model: their bytes per call, weights and every launch's output
    assert table.weights_line_["llvm"] == pytest.approx(math.sqrt((2 * mb + 2 * 4096) * (10 * mb + 3 * 4096)))
    assert table.weights_cold_per_byte_[("llvm", None)] == pytest.approx(10.0 / mb)
    big = [unit("w10", 10), unit("w10", 10), unit("w5", 5), unit("act", 0)]
    assert table.runs_weights_cold(big, "llvm") and not table.runs_weights_cold([unit("w2", 2), unit("act", 0)], "llvm")
    # what passes through the caches between two calls evicts the weights, activations too: the same 2 MB of weights
    # beside 9 MB of outputs per call is priced weights-cold
    assert table.runs_weights_cold([unit("w2", 2), dict(unit("act", 0), key="wide", bytes_out=9 * mb)], "llvm")
    priced = table.latencies(big, "llvm")
    assert priced["weights_cold"].all() and list(priced["latency_us"]) == [210.0, 210.0, 160.0, 110.0]
    small = table.latencies([unit("w2", 2), unit("act", 0)], "llvm")
    # in-model, paying the share of the 10 us in-model excess its 1 MB L2 cannot hold of its 2 MB: about half
    share = 1 - mb / (2 * mb + 2 * 4096)
    assert not small["weights_cold"].any() and small["latency_us"].tolist() == pytest.approx([100 + 10 * share] * 2)
    # a kernel the profile timed in-model only: its weights' memory time from the other kernels' (10 us per MB)
    untimed = unit("w8", 8, cold=False)
    table = CostTable(pd.DataFrame(units + runs + [untimed]))
    assert table.latencies([untimed, untimed, unit("act", 0)], "llvm")["latency_us"].tolist() == pytest.approx(
        [190.0, 190.0, 110.0])
    # measure="auto" bounds a model's in-context times by its kernels' own: the weights-cold ones in such a model
    from autoplace.optimizer import _own_kernel_us
    from autoplace.profile import ProfileStore

    class Launch(dict):
        key = property(lambda self: self["key"])

    store = ProfileStore(str(tmp_path / "empty"))
    own = _own_kernel_us({"llvm": [Launch(u) for u in big]}, table, store)
    assert own == {"llvm": [210.0, 210.0, 160.0, 110.0]}
    assert _own_kernel_us({"llvm": [Launch(unit("w2", 2)), Launch(unit("act", 0))]}, table, store) == {
        "llvm": [110.0, 110.0]}
    # without weights-cold timings (a profile timed before them) nothing is priced so
    plain = [{k: v for k, v in u.items() if not k.startswith("weights_cold")} for u in units]
    table = CostTable(pd.DataFrame(plain + runs))
    assert not table.weights_line_ and not table.latencies(big, "llvm")["weights_cold"].any()
