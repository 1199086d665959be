"""Error bands of the cost model: calibration, save/load, lookup-first bands, plan-level bands.

Synthetic profiles (as in ``test_cost_model.py``) keep these fast: a few seconds in all.
"""

import json
import math
import warnings

import numpy as np
import pandas as pd
import pytest
from test_cost_model import FAST, HW, TVM, _read_json, _unit, synthetic_records

from autoplace.cost_model import (
    FORMAT_VERSION,
    MEASURED,
    PREDICTED,
    UNSUPPORTED,
    CostTable,
    RooflineCostModel,
    XGBCostModel,
    load,
)
from autoplace.cost_model.cost_model import BAND_NOMINAL, band_table, record_op_class
from autoplace.cost_model.evaluate import SHARED_FIT_COUNTS, family, family_residuals, leave_one_family_out
from autoplace.cost_model.table import (
    BAND_COMBINE,
    BAND_COMBINES,
    LATENCY_COLUMNS,
    bands_overlap,
    describe_band,
    plan_band,
)
from autoplace.profile import ForeignProfileWarning


def _units(df):
    return df[(df["kind"] == "unit") & (df["status"] == "ok")]


def _with_grid(records: pd.DataFrame) -> pd.DataFrame:
    """The synthetic profile plus two stride-grid kernels (family ``grid``: training data, never held out)."""
    grid = [
        _unit(f"llvm-grid-{n}", f"grid-matmul-{n}", ["relax.matmul"], [[n, n], [n, n], [n, n]],
              2.0 * n**3 * 3e-4, anchor_shapes=[[n, n], [n, n]], flops=2.0 * n**3)
        for n in (32, 96)
    ]
    return pd.concat([records, pd.DataFrame(grid)], ignore_index=True)


@pytest.fixture(scope="module")
def records():
    return _with_grid(synthetic_records())


@pytest.fixture(scope="module")
def calibrated(records):
    return XGBCostModel(**FAST).fit(records, hardware_id=HW, tvm_version=TVM).calibrate(records)


def _novel(records, key="llvm-never-measured"):
    rec = dict(_units(records).iloc[0])
    rec["key"] = key
    return rec


# -- calibration -------------------------------------------------------------------------------------------
def test_calibration_holds_out_each_model_family_but_never_the_grid(calibrated, records):
    res = calibrated.residuals_
    assert set(res["family"]) == {"alpha", "beta", "gamma"}  # grid-* never held out
    units = _units(records)
    alpha_keys = set(units.loc[units["model"].map(family) == "alpha", "key"])
    assert set(res.loc[res["family"] == "alpha", "key"]) == alpha_keys
    # The alpha fold trained on everything but alpha's kernels (beta's copy of the shared kernel too).
    assert (res.loc[res["family"] == "alpha", "train_records"] == len(units) - len(alpha_keys)).all()
    np.testing.assert_allclose(res["residual"], np.log(res["measured_us"] / res["predicted_us"]))
    bands = calibrated.bands_
    assert bands["nominal"] == BAND_NOMINAL and bands["quantiles"] == [0.1, 0.9]
    table = bands["targets"]["llvm"]
    assert table["families"] == ["alpha", "beta", "gamma"]
    assert table["all"]["n"] == len(res) and table["all"]["z_lo"] < table["all"]["z_hi"]
    assert sum(entry["n"] for entry in table["classes"].values()) == len(res)


def test_band_table_falls_back_to_the_targets_band_for_thin_classes():
    rng = np.random.default_rng(0)
    res = pd.DataFrame(dict(target="llvm", family=[f"f{i % 4}" for i in range(60)],
                            op_class=["matmul"] * 40 + ["pool"] * 20, predicted_us=100.0,
                            residual=np.r_[rng.normal(0, 0.1, 40), rng.normal(1.0, 0.1, 20)]))
    table = band_table(res, min_residuals=30, size_scale=False)
    model = RooflineCostModel()
    model.bands_, model.target_kinds_, model.op_vocab_ = table, ["llvm"], {"llvm": []}
    mm = dict(key="a", target="llvm", anchor_op="relax.matmul", ops=["relax.matmul"])
    pool = dict(key="b", target="llvm", anchor_op="relax.nn.max_pool2d", ops=["relax.nn.max_pool2d"])
    lo, hi = model.band_factors([mm, pool], predicted=[100.0, 100.0], unseen=[[], []])
    classes, every = table["targets"]["llvm"]["classes"], table["targets"]["llvm"]["all"]
    assert (lo[0], hi[0]) == pytest.approx((math.exp(classes["matmul"]["z_lo"]), math.exp(classes["matmul"]["z_hi"])))
    # pool has 20 < 30 residuals: the band over all classes, not its own (which sits near e^1).
    assert (lo[1], hi[1]) == pytest.approx((math.exp(every["z_lo"]), math.exp(every["z_hi"])))
    # An op no training record had: the wider of the class band and the target's band.
    lo_u, hi_u = model.band_factors([mm], predicted=[100.0], unseen=[["relax.brand_new"]])
    assert lo_u[0] <= lo[0] and hi_u[0] >= hi[0] and hi_u[0] == pytest.approx(math.exp(every["z_hi"]))


def test_bands_narrow_with_kernel_size_when_small_kernels_err_more():
    rng = np.random.default_rng(1)
    predicted = np.repeat([1.0, 1e5], 200)
    residual = rng.normal(0, 1, 400) * np.where(predicted < 10, 0.8, 0.1)
    res = pd.DataFrame(dict(target="llvm", family="f", op_class="matmul", predicted_us=predicted, residual=residual))
    model = RooflineCostModel()
    model.bands_, model.target_kinds_, model.op_vocab_ = band_table(res), ["llvm"], {"llvm": []}
    rec = dict(key="a", target="llvm", anchor_op="relax.matmul", ops=["relax.matmul"])
    lo, hi = model.band_factors([rec, rec], predicted=[1.0, 1e5], unseen=[[], []])
    assert hi[0] > 2.0 and hi[1] < 1.3 and lo[0] < 0.5 and 0.8 < lo[1] < 1.0 < hi[1]
    # Each size's own residuals fall inside its band about 80% of the time.
    for size, l_, h_ in ((1.0, lo[0], hi[0]), (1e5, lo[1], hi[1])):
        r = residual[predicted == size]
        assert 0.7 <= np.mean((np.log(l_) <= r) & (r <= np.log(h_))) <= 0.92


def test_band_table_round_trips_through_save_and_load(calibrated, records, tmp_path):
    path = calibrated.save(str(tmp_path / "cost_model.json"))
    data = _read_json(path)
    assert data["format_version"] == FORMAT_VERSION == 1 and data["bands"] == calibrated.bands_
    again = load(path)
    assert again.bands_ == calibrated.bands_
    units = pd.concat([_units(records), pd.DataFrame([_novel(records)])], ignore_index=True)
    lo, hi = calibrated.band_factors(units)
    np.testing.assert_array_equal(again.band_factors(units), (lo, hi))
    assert np.all(np.isfinite(lo)) and np.all(lo < hi)


def test_train_calibrates_and_saves_the_band(tmp_path):
    from autoplace.cost_model.train import train
    from autoplace.profile import ProfileStore

    meta = {"hardware_id": HW, "tvm_version": TVM, "cpu_model": "test", "cpu_cores": 2, "gpus": []}
    store = ProfileStore(str(tmp_path / HW), metadata=meta)
    for rec in synthetic_records().to_dict(orient="records"):
        store.append({k: v for k, v in rec.items() if not (isinstance(v, float) and math.isnan(v))})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ForeignProfileWarning)
        model = train(store.path, model="roofline", hardware_id=HW)
        bare = train(store.path, out=str(tmp_path / "bare.json"), model="roofline", hardware_id=HW,
                     calibrate=False)
    assert load(model.path_).bands_["targets"]["llvm"]["families"] == ["alpha", "beta", "gamma"]
    assert bare.bands_ is None and load(bare.path_).bands_ is None
    # Refitting drops a band learnt for the old fit.
    assert model.fit(synthetic_records(), hardware_id=HW, tvm_version=TVM).bands_ is None


# -- lookup-first costs carry their band -----------------------------------------------------------------
def test_measured_kernels_have_zero_width_bands_and_predicted_ones_a_band(calibrated, records):
    table = CostTable(records, model=calibrated)
    units = _units(records)
    frame = table.latencies(units)
    assert list(frame.columns) == LATENCY_COLUMNS
    assert (frame["source"] == MEASURED).all()
    np.testing.assert_array_equal(frame["band_lo_us"], frame["latency_us"])
    np.testing.assert_array_equal(frame["band_hi_us"], frame["latency_us"])
    novel = _novel(records)
    broken = records[records["key"] == "llvm-broken"].iloc[0]
    frame = table.latencies([novel, broken], "llvm")
    pred, bad = frame.iloc[0], frame.iloc[1]
    lo, hi = calibrated.band_factors([novel], "llvm")
    assert pred["source"] == PREDICTED and pred["op_class"] == record_op_class(novel) == "matmul"
    assert pred["band_lo_us"] == pytest.approx(pred["latency_us"] * lo[0])
    assert pred["band_hi_us"] == pytest.approx(pred["latency_us"] * hi[0])
    assert bad["source"] == UNSUPPORTED and bad["band_lo_us"] == bad["band_hi_us"] == math.inf
    assert table.band_nominal == BAND_NOMINAL


def test_a_cost_table_trained_from_a_model_name_is_calibrated(records):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ForeignProfileWarning)
        table = CostTable(records, model="roofline")
        frame = table.latencies([_novel(records)], "llvm")
        assert np.isfinite(frame["band_lo_us"]).all() and (frame["band_lo_us"] < frame["band_hi_us"]).all()
        # Records that name no model (nor any family to hold out): trained, no band, bands unknown.
        bare = _units(records).drop(columns=["model"])
        table = CostTable(bare, model="roofline")
        assert table.model.bands_ is None and math.isnan(table.latencies([_novel(records)], "llvm")["band_hi_us"][0])
        single = _units(records)[_units(records)["model"] == "gamma"]  # one family: nothing left to train on
        assert CostTable(single, model="roofline").model.bands_ is None


def test_an_old_model_json_without_bands_loads_and_reports_unknown_bands(calibrated, records, tmp_path):
    path = calibrated.save(str(tmp_path / "new.json"))
    data = _read_json(path)
    del data["bands"]  # what every model saved before bands existed looks like
    old = tmp_path / "old.json"
    old.write_text(json.dumps(data))
    model = load(str(old))
    assert model.bands_ is None
    np.testing.assert_array_equal(model.predict(_units(records)), calibrated.predict(_units(records)))
    lo, hi = model.band_factors(_units(records))
    assert np.isnan(lo).all() and np.isnan(hi).all()
    table = CostTable(records, model=str(old))
    assert math.isnan(table.band_nominal)
    units = list(_units(records).head(3).to_dict(orient="records")) + [_novel(records)]
    frame = table.latencies(units, "llvm")
    assert frame["band_lo_us"].iloc[:3].tolist() == frame["latency_us"].iloc[:3].tolist()  # measured: exact
    assert math.isnan(frame["band_lo_us"].iloc[3]) and math.isnan(frame["band_hi_us"].iloc[3])
    band = table.end_to_end_band(units, "llvm:0")
    assert not band["band_known"] and math.isnan(band["band_lo_us"]) and math.isnan(band["rel_hi"])
    assert band["latency_us"] == pytest.approx(table.end_to_end_us(units, "llvm:0"))
    assert "band unknown" in describe_band(band) and "1 of 4 kernels predicted" in describe_band(band)
    # A band table of another layout (a later autoplace's) reads as unknown too, never as a crash.
    data["bands"] = dict(calibrated.bands_, version=99)
    old.write_text(json.dumps(data))
    assert np.isnan(load(str(old)).band_factors(_units(records))[0]).all()


# -- plan-level bands ------------------------------------------------------------------------------------
def test_plan_band_adds_kernel_bands_by_each_rule():
    rows = [  # (latency, lo, hi, source, op_class, key)
        (10.0, 8.0, 13.0, PREDICTED, "matmul", "a"),
        (10.0, 8.0, 13.0, PREDICTED, "matmul", "a"),  # a second launch of kernel a
        (20.0, 15.0, 24.0, PREDICTED, "matmul", "b"),
        (5.0, 4.0, 7.0, PREDICTED, "layout", "c"),
        (7.0, math.nan, math.nan, MEASURED, "conv", "d"),  # measured: exact whatever its band says
    ]
    total = 1.0 + 10 + 10 + 20 + 5 + 7
    correlated = plan_band(rows, fixed_us=1.0, how="correlated")
    assert correlated["latency_us"] == pytest.approx(total)
    assert correlated["band_lo_us"] == pytest.approx(1.0 + 8 + 8 + 15 + 4 + 7)
    assert correlated["band_hi_us"] == pytest.approx(1.0 + 13 + 13 + 24 + 7 + 7)
    cls = plan_band(rows, fixed_us=1.0, how="class")  # matmul (a, a, b) and layout (c) groups
    assert cls["band_lo_us"] == pytest.approx(total - math.hypot(2 + 2 + 5, 1))
    assert cls["band_hi_us"] == pytest.approx(total + math.hypot(3 + 3 + 4, 2))
    ind = plan_band(rows, fixed_us=1.0, how="independent")  # a's two launches still add up linearly
    assert ind["band_lo_us"] == pytest.approx(total - math.sqrt(4**2 + 5**2 + 1**2))
    assert ind["band_hi_us"] == pytest.approx(total + math.sqrt(6**2 + 4**2 + 2**2))
    assert correlated["band_lo_us"] < cls["band_lo_us"] < ind["band_lo_us"] < total < ind["band_hi_us"]
    assert (ind["kernels"], ind["measured"], ind["predicted"], ind["unknown_band"]) == (5, 1, 4, 0)
    assert (ind["distinct_kernels"], ind["distinct_predicted"]) == (4, 3)
    assert plan_band(rows)["how"] == BAND_COMBINE in BAND_COMBINES
    # One group (a single kernel, or everything correlated): exactly the sum of band ends, even off-centre.
    shifted = plan_band([(10.0, 11.0, 14.0, PREDICTED, "x", "k")], how="independent")
    assert (shifted["band_lo_us"], shifted["band_hi_us"]) == pytest.approx((11.0, 14.0))
    with pytest.raises(ValueError, match="how"):
        plan_band(rows, how="sideways")


def test_plan_band_of_measured_unknown_and_unsupported_kernels():
    measured = plan_band(pd.DataFrame(dict(latency_us=[3.0, 4.0], source=MEASURED, key=["a", "b"])), fixed_us=1.0)
    assert measured["band_known"] and measured["band_lo_us"] == measured["band_hi_us"] == 8.0
    assert describe_band(measured) == "measured 8 us (all 2 kernels measured)"
    unknown = plan_band([(3.0, math.nan, math.nan, PREDICTED), (4.0, 4.0, 4.0, MEASURED)])
    assert not unknown["band_known"] and unknown["unknown_band"] == 1 and math.isnan(unknown["band_hi_us"])
    assert bands_overlap(unknown, measured) is None
    inf = plan_band([(math.inf, math.inf, math.inf, UNSUPPORTED), (4.0, 3.0, 5.0, PREDICTED)])
    assert inf["latency_us"] == inf["band_hi_us"] == math.inf


def test_describe_band_and_overlaps():
    rows = [(360e3, 330e3, 390e3, PREDICTED, "matmul", "a"), (14e3, 14e3, 14e3, MEASURED, "conv", "b")]
    band = plan_band(rows, how="correlated", nominal=0.8)
    assert describe_band(band) == "predicted 374 ms (+-8% 80% band, 1 of 2 kernels predicted)"
    skew = plan_band([(100.0, 90.0, 150.0, PREDICTED)], nominal=0.8)
    assert describe_band(skew) == "predicted 100 us (-10%/+50% 80% band, 1 of 1 kernels predicted)"
    far = plan_band([(200.0, 180.0, 230.0, PREDICTED)])
    near = plan_band([(140.0, 120.0, 185.0, PREDICTED)])
    assert bands_overlap(skew, near) is True and bands_overlap(skew, far) is False


def test_end_to_end_band_of_measured_units_is_the_end_to_end_latency(calibrated, records):
    table = CostTable(records, model=calibrated)
    units = _units(records)
    launched = [units.iloc[0], units.iloc[1], units.iloc[0]]
    band = table.end_to_end_band(launched, "llvm:0")
    assert band["latency_us"] == pytest.approx(table.end_to_end_us(launched, "llvm:0"))
    assert band["band_lo_us"] == band["band_hi_us"] == pytest.approx(band["latency_us"])
    mixed = table.end_to_end_band(launched + [_novel(records)], "llvm:0")
    assert mixed["band_known"] and mixed["band_lo_us"] < mixed["latency_us"] < mixed["band_hi_us"]
    assert mixed["predicted"] == 1 and mixed["measured"] == 3


# -- calibrated coverage on synthetic data with known noise ----------------------------------------------
def noisy_records(families: int, per_family: int = 30, sigma: float = 0.3, seed: int = 0, start: int = 0):
    """Matmul and elementwise kernels of ``families`` one-model families whose latencies follow a power law
    in work times lognormal noise of ``sigma`` (log units): a roofline model is exactly right up to it."""
    rng = np.random.default_rng(seed)
    rows = []
    for f in range(start, start + families):
        for i in range(per_family):
            noise = math.exp(rng.normal(0.0, sigma))
            if i % 2:
                n = int(rng.integers(8, 256))
                flops = 2.0 * n * n * n
                rows.append(_unit(f"llvm-f{f}-{i}", f"fam{f}", ["relax.matmul"], [[n, n], [n, n], [n, n]],
                                  flops * 3e-4 * noise, anchor_shapes=[[n, n], [n, n]], flops=flops))
            else:
                e = int(rng.integers(64, 1 << 20))
                rows.append(_unit(f"llvm-f{f}-{i}", f"fam{f}", ["relax.add"], [[e], [e], [e]], e * 1e-3 * noise))
    return pd.DataFrame(rows)


def test_coverage_on_synthetic_data_with_known_noise_is_near_nominal():
    train = noisy_records(12)
    test = noisy_records(6, seed=1, start=100)
    model = RooflineCostModel().fit(train, hardware_id=HW, tvm_version=TVM).calibrate(train)
    assert model.bands_["targets"]["llvm"]["all"]["n"] == len(train)  # every family held out once
    pred = model.predict(test)
    lo, hi = model.band_factors(test, predicted=pred)
    meas = test["median_us"].to_numpy(float)
    coverage = np.mean((pred * lo <= meas) & (meas <= pred * hi))
    assert 0.72 <= coverage <= 0.9, coverage
    # The noise is the same at every size: the band's width hardly changes with it.
    assert np.ptp(np.log(hi)) < 0.25
    # Kernels err independently here: the independent rule holds sums of kernels about as often as it
    # claims, the fully correlated one (the sum of band ends) nearly always.
    rng = np.random.default_rng(2)
    inside = {how: [] for how in BAND_COMBINES}
    for _ in range(200):
        pick = rng.choice(len(test), size=12, replace=False)
        rows = pd.DataFrame(dict(latency_us=pred[pick], band_lo_us=(pred * lo)[pick], band_hi_us=(pred * hi)[pick],
                                 source=PREDICTED, key=test["key"].to_numpy()[pick]))
        for how in BAND_COMBINES:
            band = plan_band(rows, how=how)
            inside[how].append(band["band_lo_us"] <= meas[pick].sum() <= band["band_hi_us"])
    assert 0.7 <= np.mean(inside["independent"]) <= 0.95
    assert np.mean(inside["correlated"]) > 0.97


def test_family_residuals_and_nested_band_evaluation(records):
    res = family_residuals(records, "roofline", hardware_id=HW, tvm_version=TVM)
    assert set(res["family"]) == {"alpha", "beta", "gamma"} and res["residual"].notna().all()
    # the families' fits run in threads: the same residuals, in the same order, as one after the other
    one = family_residuals(records, "xgb", hardware_id=HW, tvm_version=TVM, n_jobs=1, **FAST)
    three = family_residuals(records, "xgb", hardware_id=HW, tvm_version=TVM, n_jobs=3, **FAST)
    assert len(one) > 3 and list(one["family"].unique()) == sorted(set(one["family"]))
    pd.testing.assert_frame_equal(one, three)
    out = leave_one_family_out(records, "xgb", bands=True, n_jobs=3, **FAST)
    serial = leave_one_family_out(records, "xgb", bands=True, n_jobs=1, **FAST)  # folds in threads: same rows
    pd.testing.assert_frame_equal(out["models"], serial["models"])
    pd.testing.assert_frame_equal(out["units"], serial["units"])
    # the nested calibrations share their fits (fold alpha's fit without beta is fold beta's without alpha): the
    # same rows as when every fold fits its own
    assert SHARED_FIT_COUNTS["reused"] >= 3 and SHARED_FIT_COUNTS["reused"] <= SHARED_FIT_COUNTS["fitted"]
    unshared = leave_one_family_out(records, "xgb", bands=True, n_jobs=1, share_fits=False, **FAST)
    pd.testing.assert_frame_equal(out["models"], unshared["models"])
    pd.testing.assert_frame_equal(out["units"], unshared["units"])
    models, units = out["models"], out["units"]
    assert {"band_kernels", "band_coverage", f"e2e_in_band_{BAND_COMBINE}"} <= set(models.columns)
    assert {"pure_lo_us", "pure_hi_us", "in_band", "residual", "band_class"} <= set(units.columns)
    # Each fold's band was learnt without the held-out family: with two families left, every kernel has one.
    assert (models["band_kernels"] == models["distinct"]).all()
    assert units["in_band"].notna().all() and (units["pure_lo_us"] < units["pure_hi_us"]).all()
    inside = (units["pure_lo_us"] <= units["measured_us"]) & (units["measured_us"] <= units["pure_hi_us"])
    assert (units["in_band"] == inside).all()
    assert models["band_coverage"].between(0, 1).all()
