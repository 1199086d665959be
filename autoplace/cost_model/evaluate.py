"""Leave-one-model-out evaluation of cost models, and learning curves, from profile records alone.

Splits
------
A zoo model and its size variants (``cnn``, ``cnn-base``, ``bert_base``...) form a *family*
(:func:`family`); a fold holds out a whole family, since variants share kernels (same key) and
would leak them into training. Each fold trains two models:

* **pure**: on every kernel that does not occur in the held-out family. Every kernel of the held-out
  models is predicted: the model never saw any of them.
* **lookup-first**: on every kernel of the other models (a kernel the held-out model shares with
  them is in their profile). A :class:`~autoplace.cost_model.table.CostTable` over those records
  answers kernels it has measured with the measurement and predicts the rest, which is what
  placing a never-profiled model does.

With ``bands=True`` the pure model of each fold is also calibrated (:meth:`CostModel.calibrate`) on
that fold's training records alone (nested: a second leave-one-family-out over the families left), and
every held-out kernel's error band is checked: does its measured latency fall inside? The held-out
model's end-to-end band is the kernels' bands combined by each rule of
:data:`autoplace.cost_model.table.BAND_COMBINES`, checked against its measured end-to-end latency.
:func:`family_residuals` is the leave-one-family-out residual computation calibration uses.

Metrics (per held-out model and target)
---------------------------------------
Over the model's distinct kernels: MAPE, MdAPE (absolute percentage errors) and the Spearman rank
correlation of predicted vs measured latency. End to end, against the model's ``kind="model"``
record (its latency built entirely on that target): predicted latency = VM invocation overhead +
launches x launch overhead + sum over the kernels it launches (with repeats) of their latency
(:func:`end_to_end_us`). The *oracle* uses measured kernel latencies in the same sum: its error is
the part no kernel cost model can remove (measurement noise, effects between kernels).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd

from .cost_model import NEVER_HELD_OUT, create, record_op_class, training_units
from .features import op_class
from .table import (
    BAND_COMBINES,
    MEASURED,
    PREDICTED,
    CostTable,
    in_model_times,
    plan_band,
    weights_cold_times,
)
from .train import in_model_training_records


def family(model_name: str) -> str:
    """The family of a zoo model: the name before the first ``-`` or ``_``.

    ``"cnn-base"`` -> ``"cnn"``, ``"bert_base"`` -> ``"bert"``.
    """
    return re.split(r"[-_]", str(model_name))[0]


def model_runs(records: pd.DataFrame, target: str) -> pd.DataFrame:
    """The last good ``kind="model"`` record of each model on a target kind (key = model name)."""
    if "kind" not in records:
        return pd.DataFrame()
    runs = records[(records["kind"] == "model") & (records["target"] == target)]
    if "status" in runs:
        runs = runs[runs["status"] == "ok"]
    return runs.drop_duplicates(subset=["key"], keep="last").set_index("key")


def model_unit_keys(records: pd.DataFrame, target: str) -> dict:
    """``{model name: [unit keys it launches, in order, with repeats]}`` on a target kind.

    From the model's ``kind="model"`` record where there is one; else the distinct kernels whose
    unit records name the model (each counted once).
    """
    out = {}
    units = records[(records["kind"] == "unit") & (records["target"] == target)]
    if "model" in units:  # records made by hand may name no model
        for name, group in units.groupby("model"):
            out[str(name)] = list(dict.fromkeys(group["key"]))
    for name, run in model_runs(records, target).iterrows():
        keys = run.get("unit_keys")
        if isinstance(keys, list) and keys:
            out[str(name)] = [str(k) for k in keys]
    return out


def end_to_end_us(table: CostTable, unit_latency_us: dict, keys: list, target_label: str, *,
                  num_args: int = 1, output_bytes: int = 0, num_inputs: int = 1) -> float:
    """Predicted latency of a model built entirely on one device, in microseconds.

    ``invoke + len(keys) * launch + sum(unit_latency_us[k] for k in keys)``, where ``launch`` is the
    VM's cost of one kernel call (``kind="launch"`` record) and ``invoke`` its cost of one call of
    ``main`` with ``num_args`` arguments (``num_inputs`` of them inputs) returning ``output_bytes``
    (:meth:`CostTable.invoke_us`).
    """
    launch = table.launch_us(target_label, default=0.0)
    return (
        table.invoke_us(target_label, default=0.0, num_args=num_args, output_bytes=output_bytes,
                        num_inputs=num_inputs)
        + len(keys) * launch
        + sum(unit_latency_us[k] for k in keys)
    )


def _ape(pred, meas) -> np.ndarray:
    pred, meas = np.asarray(pred, float), np.asarray(meas, float)
    return np.abs(pred - meas) / meas


def _spearman(a, b) -> float:
    from scipy.stats import spearmanr

    if len(a) < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return math.nan
    return float(spearmanr(a, b).statistic)


def _side_records(records: pd.DataFrame) -> pd.DataFrame:
    return records[records["kind"].isin(["launch", "copy", "copy_fit"])]


# -- fits shared between nested calibrations -------------------------------------------------------------
#: ``{fingerprint: [fitted model, uses left]}`` while :func:`shared_fits` is active, else None.
_SHARED_FITS: dict | None = None
_SHARED_LOCK = threading.Lock()
#: Counts of the fits :func:`shared_fits` served from the store and made (read after the ``with`` block).
SHARED_FIT_COUNTS = {"reused": 0, "fitted": 0}


@contextlib.contextmanager
def shared_fits():
    """Within the block, :func:`family_residuals` reuses a fit on the very same training records.

    The nested calibration of :func:`leave_one_family_out` (``bands=True``) fits, in the fold holding out family
    A, one model per other family B on everything but A and B, and the fold holding out B fits the same model for
    A: the same records in the same order, hence (seeded) the same model. With the store the second fold predicts
    with the first fold's fit, which halves the band evaluation's fits and changes none of its numbers. A fit is
    dropped once both folds have used it. Fits are matched by the model's class and parameters, the provenance
    passed to ``fit`` and a hash of the training records' columns (keys, latencies, every scalar field).
    """
    global _SHARED_FITS
    previous, _SHARED_FITS = _SHARED_FITS, {}
    SHARED_FIT_COUNTS.update(reused=0, fitted=0)
    try:
        yield
    finally:
        _SHARED_FITS = previous


def _records_hash(df: pd.DataFrame) -> int:
    """A hash of ``df``'s rows in order over its scalar columns (list-valued ones, such as shapes, follow the key)."""
    scalar = [c for c in df.columns if not df[c].map(lambda v: isinstance(v, (list, tuple, dict, np.ndarray))).any()]
    hashed = pd.util.hash_pandas_object(df[scalar].astype(str), index=False)
    return hash((tuple(scalar), hashed.to_numpy().tobytes()))


def _fit_shared(make, train: pd.DataFrame, **fit_provenance):
    """``make().fit(train, **fit_provenance)``, or the same fit from the :func:`shared_fits` store."""
    model = make()
    if _SHARED_FITS is None:
        return model.fit(train, **fit_provenance)
    key = (type(model).__name__, repr(sorted(model.get_params().items())), repr(sorted(fit_provenance.items())),
           _records_hash(train), getattr(model, "prior_holdout", None))
    with _SHARED_LOCK:
        entry = _SHARED_FITS.get(key)
        if entry is not None:
            entry[1] -= 1
            if entry[1] <= 0:
                del _SHARED_FITS[key]
            SHARED_FIT_COUNTS["reused"] += 1
            return entry[0]
    fitted = model.fit(train, **fit_provenance)
    with _SHARED_LOCK:
        _SHARED_FITS[key] = [fitted, 1]  # the one other fold that holds out the same two families
        SHARED_FIT_COUNTS["fitted"] += 1
    return fitted


def family_residuals(
    records: pd.DataFrame,
    model="xgb",
    *,
    never_held_out=NEVER_HELD_OUT,
    quiet: bool = True,
    hardware_id: str | None = None,
    tvm_version: str | None = None,
    n_jobs: int | None = None,
    **params,
) -> pd.DataFrame:
    """Leave-one-family-out residuals of a cost model: what calibrates its error band.

    Each model family of ``records`` (:func:`family`; those in ``never_held_out`` excepted) is held out in
    turn: a fresh model is fitted on every kernel (of every target kind, as the saved model is) that no
    model of the family launches, and predicts the family's distinct measured kernels. The families' fits are
    independent and run in ``n_jobs`` threads (XGBoost trains without Python's lock: on the Xeon f6m207's
    profile, 9.2 s of a 12.5 s fit), the same residuals in the same order as one after the other.

    Parameters
    ----------
    records : pandas.DataFrame
        Profile records: units, and ``kind="model"`` records (which kernels each model launches).
    model : str or callable
        Cost-model name for :func:`autoplace.cost_model.create` (with ``**params``), or a callable
        returning a fresh unfitted model.
    never_held_out : tuple of str
        Training-only families.
    quiet : bool
        Silence the foreign-profile warnings of the fits.
    hardware_id, tvm_version : str, optional
        Passed to every ``fit`` (the provenance the models are for).
    n_jobs : int, optional
        Families fitted at once (default: this machine's CPUs, :func:`os.cpu_count`).

    Returns
    -------
    pandas.DataFrame
        One row per (held-out family, target, kernel): ``target``, ``family``, ``key``, ``op_class``
        (:func:`~autoplace.cost_model.cost_model.record_op_class`), ``measured_us``, ``predicted_us``,
        ``residual`` (``log(measured / predicted)``), ``unseen`` (it fuses an op the fit never saw),
        ``train_records``.
    """
    make = model if callable(model) else (lambda: create(model, **params))
    columns = ["target", "family", "key", "op_class", "measured_us", "predicted_us", "residual", "unseen",
               "train_records"]
    units = training_units(records)
    if units.empty:
        return pd.DataFrame(columns=columns)
    kinds = sorted(units["target"].astype(str).unique())
    keys_of = {kind: model_unit_keys(records, kind) for kind in kinds}
    families = sorted({family(m) for kind in kinds for m in keys_of[kind]} - set(never_held_out))
    tags = list(zip(units["target"].astype(str), units["key"].astype(str)))

    def held_out(fam) -> list:
        held = {(kind, k) for kind in kinds for m, ks in keys_of[kind].items() if family(m) == fam for k in ks}
        in_fam = np.array([tag in held for tag in tags], dtype=bool)
        train, test = units[~in_fam], units[in_fam]
        if train.empty or test.empty:
            return []
        fitted = _fit_shared(lambda: make().hold_out_of_prior({k for _, k in held}, [fam]), train,
                             hardware_id=hardware_id, tvm_version=tvm_version)
        rows = []
        for kind, part in test.groupby("target"):
            pred = fitted.predict(part, target=str(kind))
            unseen = fitted.unseen_ops(part, target=str(kind))
            for (_, rec), p, ops in zip(part.iterrows(), pred, unseen):
                meas = float(rec["median_us"])
                rows.append(dict(target=str(kind), family=fam, key=str(rec["key"]), op_class=record_op_class(rec),
                                 measured_us=meas, predicted_us=float(p), residual=math.log(meas / float(p)),
                                 unseen=bool(ops), train_records=len(train)))
        return rows

    with warnings.catch_warnings():  # (the filter is the process's: the threads see it too)
        if quiet:
            warnings.simplefilter("ignore")
        parts = _in_threads(held_out, families, _workers(n_jobs, len(families)))
    return pd.DataFrame([row for part in parts for row in part], columns=columns)


def _fit_in_model(make, train_units: pd.DataFrame, *, quiet: bool, runs: pd.DataFrame | None = None,
                  calibrate_with=None, weights_line: dict | None = None, **calibrate_options):
    """A model of the in-model times of ``train_units`` (:func:`~autoplace.cost_model.train.in_model_records`:
    in-context times where the end-to-end records ``runs`` of the training families have them), calibrated on them
    and the end-to-end records ``calibrate_with`` when given; None when too few were timed so
    (:func:`~autoplace.cost_model.train.in_model_training_records`, as ``autoplace train`` decides)."""
    timed, _ = in_model_training_records(train_units if runs is None else pd.concat([train_units, runs],
                                                                                    ignore_index=True),
                                         weights_line=weights_line)
    timed = timed[timed["kind"] == "unit"] if "kind" in timed else timed
    if timed.empty:
        return None
    with warnings.catch_warnings():
        if quiet:
            warnings.simplefilter("ignore")
        fit = make().fit(timed)
        if calibrate_with is not None:
            fit.calibrate(pd.concat([timed, calibrate_with], ignore_index=True), **calibrate_options)
    return fit


def leave_one_family_out(
    records: pd.DataFrame,
    model="xgb",
    *,
    target: str | None = None,
    train_filter=None,
    quiet: bool = True,
    never_held_out=NEVER_HELD_OUT,
    bands: bool = False,
    band_options: dict | None = None,
    n_jobs: int | None = None,
    share_fits: bool = True,
    **params,
) -> dict:
    """Hold out each model family in turn, train on the rest, predict the held-out kernels.

    Families in ``never_held_out`` (the single-kernel shape sweep of ``experiments/op_sweep.py``, the stride grid
    ``zoo.regime_grid`` and the op-family set ``ops-*``) are training data only: the evaluation is about models
    users bring.

    Parameters
    ----------
    records : pandas.DataFrame
        Profile records (units, models, launches).
    model : str or callable
        Cost-model name for :func:`autoplace.cost_model.create` (with ``**params``), or a callable
        returning a fresh unfitted model.
    target : str, optional
        Target kind to evaluate (default: every kind with unit records).
    train_filter : callable, optional
        ``train_filter(train_units_df, fold_index) -> smaller df``: to subsample training records
        (learning curves).
    quiet : bool
        Silence the foreign-profile warnings of training (the evaluation is about accuracy).
    bands : bool
        Also calibrate each fold's pure model on that fold's training records (nested leave-one-family-out)
        and check the error bands on the held-out kernels and end to end (see the module notes).
    band_options : dict, optional
        Keyword arguments of :meth:`CostModel.calibrate` (``conformal``, ``min_residuals``, ...).
    n_jobs : int, optional
        Folds run at once, in threads (default: this machine's CPUs); the rows come out as one after the other
        gives them (each fold's fits are seeded).
    share_fits : bool
        With ``bands``: let the nested calibrations reuse each other's fits on the same records (:func:`shared_fits`:
        half the fits, the same numbers).

    Returns
    -------
    dict
        ``"models"``: one row per held-out model and target (metrics, see the module notes);
        ``"units"``: one row per held-out (model, kernel) with measured and predicted latencies.
        With ``bands``: kernel rows add ``pure_lo_us``, ``pure_hi_us``, ``residual`` and ``in_band``;
        model rows add ``band_kernels`` / ``band_coverage`` (distinct kernels with a known band / the share
        of them inside it) and, per rule ``how`` of :data:`~autoplace.cost_model.table.BAND_COMBINES`,
        ``e2e_band_lo_us_<how>``, ``e2e_band_hi_us_<how>`` and ``e2e_in_band_<how>``.
    """
    make = model if callable(model) else (lambda: create(model, **params))
    units_all = training_units(records)
    kinds = [target] if target else sorted(units_all["target"].unique()) if not units_all.empty else []
    model_rows, unit_rows = [], []
    for kind in kinds:
        units = units_all[units_all["target"] == kind]
        measured = dict(zip(units["key"], units["median_us"].astype(float)))
        measured_in_model, _ = in_model_times(units)
        measured_cold = weights_cold_times(units)
        keys_of = model_unit_keys(records, kind)
        runs = model_runs(records, kind)
        label = f"{kind}:0"
        families = sorted({family(m) for m in keys_of} - set(never_held_out))
        workers = _workers(n_jobs, len(families))
        # folds in threads: each fold's calibration fits its families one after the other
        calibration = dict(band_options or {}, **({"n_jobs": 1} if workers > 1 else {}))

        def one_fold(fold: int, fam: str, kind=kind, units=units, measured=measured,
                     measured_in_model=measured_in_model, measured_cold=measured_cold, keys_of=keys_of, runs=runs,
                     label=label, calibration=calibration) -> tuple:
            """The held-out family ``fam``'s model and kernel rows."""
            model_rows, unit_rows = [], []
            held = [m for m in keys_of if family(m) == fam]
            fam_keys = {k for m in held for k in keys_of[m]}
            other_keys = {k for m, ks in keys_of.items() if family(m) != fam for k in ks}
            pure_train = units[~units["key"].isin(fam_keys)]
            look_train = units[units["key"].isin(other_keys) | ~units["key"].isin(fam_keys)]
            if train_filter is not None:
                pure_train = train_filter(pure_train, fold)
                look_train = train_filter(look_train, fold)
            if pure_train.empty:
                return [], []
            # a model with a prior keeps the held-out family out of the donor's training too (hold_out_of_prior)
            make_pure = lambda: make().hold_out_of_prior(fam_keys, [fam])
            make_look = lambda: make().hold_out_of_prior(fam_keys - other_keys, [fam])
            pure = make_pure().fit(pure_train)
            if bands:  # nested: the band is learnt from the fold's training families alone
                runs_left = records[(records["kind"] == "model") & (records["target"] == kind)]
                runs_left = runs_left[runs_left["key"].map(family) != fam]
                pure.calibrate(pd.concat([pure_train, runs_left], ignore_index=True),
                               never_held_out=never_held_out, **calibration)
            look = make_look().fit(look_train) if len(look_train) != len(pure_train) else pure
            side = _side_records(records)
            # The VM overheads are refitted to the training families' end-to-end records only.
            runs_other = records[(records["kind"] == "model") & (records["target"] == kind)]
            runs_other = runs_other[runs_other["key"].map(family) != fam]
            table = CostTable(pd.concat([look_train, side, runs_other], ignore_index=True), model=look)
            in_model_fits: dict = {}  # the fold's models of in-model times, fitted when a held model needs one
            for name in sorted(held):
                keys = [k for k in keys_of[name] if k in measured]
                distinct = list(dict.fromkeys(keys))
                if not distinct:
                    continue
                recs = units.set_index("key").loc[distinct].reset_index()
                pred_pure = dict(zip(distinct, pure.predict(recs, target=kind)))
                unseen = dict(zip(distinct, pure.unseen_ops(recs, target=kind)))
                # Priced as optimize() prices the whole model: in-model when it outgrows the L2 (cache_state).
                row_of = {k: r for k, (_, r) in zip(distinct, recs.iterrows())}
                in_model = table.runs_in_model([row_of[k] for k in keys], kind)
                # ... and weights-cold when its bytes per call outgrow the line the training models set
                cold = in_model and table.runs_weights_cold([row_of[k] for k in keys], kind)
                # ... paying the share of the in-model excess its L2 cannot hold (all of it weights-cold)
                share = 1.0 if cold else table.in_model_share([row_of[k] for k in keys], kind) if in_model else 0.0
                if in_model and not in_model_fits:
                    in_model_fits["pure"] = _fit_in_model(make_pure, pure_train, quiet=quiet, runs=runs_other,
                                                          calibrate_with=runs_left if bands else None,
                                                          weights_line=table.weights_line_,
                                                          never_held_out=never_held_out, **calibration)
                    in_model_fits["look"] = (_fit_in_model(make_look, look_train, quiet=quiet, runs=runs_other,
                                                           weights_line=table.weights_line_)
                                             if len(look_train) != len(pure_train) else in_model_fits["pure"])
                pure_in = in_model_fits.get("pure") if in_model else None
                if in_model:
                    table.in_model_model = in_model_fits["look"]
                look_df = table.latencies(recs, kind, in_model=in_model, in_model_share=share, in_context=False,
                                          weights_cold=cold)
                pred_look = dict(zip(distinct, look_df["latency_us"]))
                source = dict(zip(distinct, look_df["source"]))
                meas = np.array([measured[k] for k in distinct])
                pp = np.array([pred_pure[k] for k in distinct])
                pl = np.array([pred_look[k] for k in distinct])
                counts = pd.Series(keys).value_counts()
                if bands:
                    lo_f, hi_f = pure.band_factors(recs, target=kind, predicted=pp,
                                                   unseen=[unseen[k] for k in distinct])
                    band_lo = dict(zip(distinct, pp * lo_f))
                    band_hi = dict(zip(distinct, pp * hi_f))
                    class_of = dict(zip(distinct, (record_op_class(r) for _, r in recs.iterrows())))
                row = dict(
                    target=kind,
                    model=name,
                    family=fam,
                    kernels=len(keys),
                    distinct=len(distinct),
                    train_records=len(pure_train),
                    mape=float(np.mean(_ape(pp, meas))),
                    mdape=float(np.median(_ape(pp, meas))),
                    spearman=_spearman(pp, meas),
                    lookup_measured=int(sum(source[k] == MEASURED for k in distinct)),
                    lookup_mape=float(np.mean(_ape(pl, meas))),
                    lookup_mdape=float(np.median(_ape(pl, meas))),
                    lookup_spearman=_spearman(pl, meas),
                    unseen_op_kernels=int(sum(bool(unseen[k]) for k in distinct)),
                )
                # End to end, kernels as the model runs them: in a model larger than the L2, the in-model times
                # (measured, and predicted by the fold's model of them, or scaled warm predictions without one).
                e2e_pred_pure, e2e_band_lo, e2e_band_hi = dict(pred_pure), {}, {}
                if bands:
                    e2e_band_lo, e2e_band_hi = dict(band_lo), dict(band_hi)
                if in_model and pure_in is not None:
                    pi = pure_in.predict(recs, target=kind)
                    e2e_pred_pure = dict(zip(distinct, pi))
                    if bands:
                        lo_i, hi_i = pure_in.band_factors(recs, target=kind, predicted=pi,
                                                          unseen=pure_in.unseen_ops(recs, target=kind))
                        e2e_band_lo, e2e_band_hi = dict(zip(distinct, pi * lo_i)), dict(zip(distinct, pi * hi_i))
                elif in_model:
                    factor = {k: table.in_model_factor(kind, record_op_class(row_of[k]), pred_pure[k])
                              for k in distinct}
                    e2e_pred_pure = {k: pred_pure[k] * factor[k] for k in distinct}
                    if bands:
                        e2e_band_lo = {k: band_lo[k] * factor[k] for k in distinct}
                        e2e_band_hi = {k: band_hi[k] * factor[k] for k in distinct}
                if in_model and share < 1.0:  # the share of the excess over the warm prices it pays, bands alike
                    e2e_pred_pure = {k: pred_pure[k] + share * (v - pred_pure[k]) for k, v in e2e_pred_pure.items()}
                    if bands:
                        e2e_band_lo = {k: band_lo[k] + share * (v - band_lo[k]) for k, v in e2e_band_lo.items()}
                        e2e_band_hi = {k: band_hi[k] + share * (v - band_hi[k]) for k, v in e2e_band_hi.items()}
                e2e_measured = {k: measured[k] + share * (measured_in_model.get(k, measured[k]) - measured[k])
                                for k in distinct}
                if cold:  # the weights' memory time: measured where timed (oracle), else as the table adds it
                    extra = {k: table.weights_cold_extra_us(kind, row_of[k]) for k in distinct}
                    e2e_measured = {k: measured_cold.get(k, e2e_measured[k] + extra[k]) for k in distinct}
                    for k in distinct:
                        e2e_pred_pure[k] += extra[k]
                        if bands:
                            e2e_band_lo[k] += extra[k]
                            e2e_band_hi[k] += extra[k]
                row["in_model"] = bool(in_model)
                row["in_model_share"] = float(share)
                row["weights_cold"] = bool(cold)
                row["weights_per_call_mb"] = table.weights_per_call([row_of[k] for k in keys]) / 1e6
                row["bytes_per_call_mb"] = table.bytes_per_call([row_of[k] for k in keys]) / 1e6
                if name in runs.index:
                    e2e = float(runs.loc[name, "median_us"])
                    call = {}  # the model record's main signature, where the profiler stored it
                    for column in ("num_args", "num_inputs", "output_bytes"):
                        value = runs.loc[name].get(column) if column in runs.columns else None
                        if value is not None and pd.notna(value):
                            call[column] = int(value)
                    oracle = end_to_end_us(table, e2e_measured, keys, label, **call)
                    e2e_pure = end_to_end_us(table, e2e_pred_pure, keys, label, **call)
                    e2e_look = end_to_end_us(table, pred_look, keys, label, **call)
                    row.update(
                        e2e_measured_us=e2e,
                        e2e_oracle_us=oracle,
                        e2e_pure_us=e2e_pure,
                        e2e_lookup_us=e2e_look,
                        e2e_oracle_err=oracle / e2e - 1,
                        e2e_pure_err=e2e_pure / e2e - 1,
                        e2e_lookup_err=e2e_look / e2e - 1,
                        e2e_pure_vs_oracle_err=e2e_pure / oracle - 1,
                    )
                if bands:
                    known = [k for k in distinct if np.isfinite(band_lo[k])]
                    inside = [band_lo[k] <= measured[k] <= band_hi[k] for k in known]
                    row.update(band_kernels=len(known), band_coverage=float(np.mean(inside)) if known else math.nan)
                    if name in runs.index:
                        fixed = e2e_pure - sum(e2e_pred_pure[k] for k in keys)  # VM invocation + launches
                        rows = pd.DataFrame(dict(
                            key=keys, latency_us=[e2e_pred_pure[k] for k in keys],
                            band_lo_us=[e2e_band_lo[k] for k in keys],
                            band_hi_us=[e2e_band_hi[k] for k in keys],
                            source=PREDICTED, op_class=[class_of[k] for k in keys]))
                        for how in BAND_COMBINES:
                            band = plan_band(rows, fixed_us=fixed, how=how)
                            row[f"e2e_band_lo_us_{how}"] = band["band_lo_us"]
                            row[f"e2e_band_hi_us_{how}"] = band["band_hi_us"]
                            row[f"e2e_in_band_{how}"] = (
                                bool(band["band_lo_us"] <= e2e <= band["band_hi_us"])
                                if band["band_known"] else math.nan)
                model_rows.append(row)
                by_key = units.set_index("key")
                for k in distinct:
                    rec = by_key.loc[k]
                    unit_rows.append(
                        dict(
                            target=kind,
                            model=name,
                            family=fam,
                            key=k,
                            func_name=rec["func_name"],
                            anchor_op=rec["anchor_op"],
                            op_class=op_class(rec["anchor_op"]),
                            count=int(counts[k]),
                            measured_us=measured[k],
                            pure_us=pred_pure[k],
                            lookup_us=pred_look[k],
                            source=source[k],
                            unseen_ops=",".join(unseen[k]),
                            pure_ape=abs(pred_pure[k] / measured[k] - 1),
                        )
                    )
                    if bands:
                        unit_rows[-1].update(
                            band_class=class_of[k],
                            pure_lo_us=band_lo[k],
                            pure_hi_us=band_hi[k],
                            residual=math.log(measured[k] / pred_pure[k]),
                            in_band=bool(band_lo[k] <= measured[k] <= band_hi[k])
                            if np.isfinite(band_lo[k]) else math.nan,
                        )
            return model_rows, unit_rows

        # (the filter is the process's: the threads see it too); the nested calibrations share their fits
        with warnings.catch_warnings(), shared_fits() if bands and share_fits else contextlib.nullcontext():
            if quiet:
                warnings.simplefilter("ignore")
            folds = _in_threads(one_fold, list(enumerate(families)), workers, star=True)
        for fold_models, fold_units in folds:
            model_rows += fold_models
            unit_rows += fold_units
    return {"models": pd.DataFrame(model_rows), "units": pd.DataFrame(unit_rows)}


def _workers(n_jobs: int | None, tasks: int) -> int:
    """Threads for ``tasks`` independent fits: ``n_jobs``, by default this machine's CPUs, at most one a task."""
    return max(1, min(tasks, n_jobs or os.cpu_count() or 1))


def _in_threads(fn, items: list, workers: int, *, star: bool = False) -> list:
    """``[fn(item)]`` (``fn(*item)`` with ``star``) in order; in ``workers`` threads when more than one (each call
    fits its own models: XGBoost trains outside Python's lock)."""
    call = (lambda item: fn(*item)) if star else fn
    if workers == 1:
        return [call(item) for item in items]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(call, items))


def summarize(result: dict) -> pd.DataFrame:
    """Pooled metrics per target: all held-out kernels together, and the worst / mean e2e errors."""
    rows = []
    units, models = result["units"], result["models"]
    for kind, group in units.groupby("target"):
        m = models[models["target"] == kind]
        row = dict(
            target=kind,
            kernels=len(group),
            mape=float(group["pure_ape"].mean()),
            mdape=float(group["pure_ape"].median()),
            spearman=_spearman(group["pure_us"], group["measured_us"]),
            min_model_spearman=float(m["spearman"].min()),
        )
        for col in ("e2e_pure_err", "e2e_lookup_err", "e2e_oracle_err", "e2e_pure_vs_oracle_err"):
            if col in m:
                row[f"max_abs_{col}"] = float(m[col].abs().max())
                row[f"mean_abs_{col}"] = float(m[col].abs().mean())
        rows.append(row)
    return pd.DataFrame(rows)


def by_op_class(result: dict) -> pd.DataFrame:
    """Where the error is: per target and anchor op class, pooled over held-out kernels.

    ``time_share`` is the class's share of the held-out models' measured kernel time (kernels
    weighted by launches); ``signed_time_err`` its predicted minus measured time over all kernel time.
    """
    units = result["units"]
    if units.empty:
        return pd.DataFrame()
    rows = []
    for kind, group in units.groupby("target"):
        total = float((group["measured_us"] * group["count"]).sum())
        for cls, g in group.groupby("op_class"):
            meas = float((g["measured_us"] * g["count"]).sum())
            pred = float((g["pure_us"] * g["count"]).sum())
            rows.append(
                dict(
                    target=kind,
                    op_class=cls,
                    kernels=len(g),
                    mape=float(g["pure_ape"].mean()),
                    mdape=float(g["pure_ape"].median()),
                    spearman=_spearman(g["pure_us"], g["measured_us"]),
                    time_share=meas / total,
                    signed_time_err=(pred - meas) / total,
                )
            )
    return pd.DataFrame(rows).sort_values(["target", "time_share"], ascending=[True, False])


def learning_curve(
    records: pd.DataFrame,
    model="xgb",
    *,
    fractions=(0.1, 0.2, 0.35, 0.5, 0.75, 1.0),
    repeats: int = 3,
    random_state: int = 0,
    target: str | None = None,
    **params,
) -> pd.DataFrame:
    """Accuracy vs number of profiled records: leave-one-family-out with training subsampled.

    Each fold's training records are subsampled to ``fraction`` of their number (at least 3),
    ``repeats`` times with different seeds.

    Returns
    -------
    pandas.DataFrame
        One row per (target, fraction, repeat): mean training records over folds, pooled MdAPE,
        MAPE and Spearman over held-out kernels, mean and max absolute e2e error (pure model).
    """
    rows = []
    for fraction in fractions:
        for rep in range(repeats if fraction < 1.0 else 1):
            seed = random_state + 1000 * rep + int(fraction * 100)

            def sub(df, fold, fraction=fraction, seed=seed):
                if fraction >= 1.0:
                    return df
                n = max(3, round(fraction * len(df)))
                return df.sample(n=min(n, len(df)), random_state=seed + fold)

            res = leave_one_family_out(records, model, target=target, train_filter=sub, **params)
            for _, s in summarize(res).iterrows():
                m = res["models"][res["models"]["target"] == s["target"]]
                rows.append(
                    dict(
                        target=s["target"],
                        fraction=fraction,
                        repeat=rep,
                        train_records=float(m["train_records"].mean()),
                        mdape=s["mdape"],
                        mape=s["mape"],
                        spearman=s["spearman"],
                        min_model_spearman=s["min_model_spearman"],
                        mean_abs_e2e_err=s.get("mean_abs_e2e_pure_err", math.nan),
                        max_abs_e2e_err=s.get("max_abs_e2e_pure_err", math.nan),
                        mean_abs_e2e_vs_oracle_err=s.get("mean_abs_e2e_pure_vs_oracle_err", math.nan),
                        max_abs_e2e_vs_oracle_err=s.get("max_abs_e2e_pure_vs_oracle_err", math.nan),
                    )
                )
    return pd.DataFrame(rows)
