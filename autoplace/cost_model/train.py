"""Train a cost model from a profile folder and save it next to the profile (``autoplace train``)."""

from __future__ import annotations

import os

import numpy as np

from ..errors import AutoplaceError
from .cost_model import CostModel, create

#: File name of the trained model inside a profile folder.
MODEL_FILE = "cost_model.json"
#: File name of the model of in-model kernel times (:func:`in_model_records`) beside it.
IN_MODEL_FILE = "cost_model_in_model.json"
#: Share of a target kind's measured kernels that must carry an in-model time before a model of those times is
#: fitted (:func:`in_model_coverage`). Fitted on a few hundred small op-family kernels alone (the Zen 3 profile of
#: session 20, 459 of its 1253 kernels timed in-model), XGBoost priced bert-base's 400 us matmuls 1.9x and
#: mlp-base 1.7x their in-model times: it had never seen a large compute-bound kernel timed so. Below the share,
#: such models are priced warm, scaled by the in-model factors of the kernels that were timed.
IN_MODEL_MIN_COVERAGE = 0.75


def default_model_path(profile_dir: str) -> str:
    """``<profile dir>/cost_model.json``: where a model trained on that profile is saved."""
    return os.path.join(profile_dir, MODEL_FILE)


def in_model_path(model_path: str) -> str:
    """Where the in-model times' model trained with the model saved at ``model_path`` goes
    (``cost_model.json`` -> ``cost_model_in_model.json``)."""
    root, ext = os.path.splitext(model_path)
    return (os.path.join(os.path.dirname(model_path), IN_MODEL_FILE) if os.path.basename(model_path) == MODEL_FILE
            else f"{root}_in_model{ext or '.json'}")


def in_model_records(records, weights_line: dict | None = None):
    """``records`` with every unit record timed in-model (:mod:`autoplace.profile.cache_state`) priced at its
    in-model time (``median_us`` := ``in_model_median_us``) and the unit records without one left out: what the
    model of in-model times trains on. Other records are kept (they say which kernels each model launches).

    A kernel that the profile also timed in context, inside a model that runs in-model (:func:`in_context_times`),
    is priced at that time instead: it is the time the in-model timing stands in for, measured. On the AMD Zen 3 the
    two part by a host-dependent 10-20%: three of four base models' kernels summed 4-10% above their end-to-end time
    in-model in session 20's records, 10-22% below it in session 23's; in context 1-7% below it, then within 1%.

    ``weights_line``: ``{kind: bytes}``, the bytes per call above which a model is priced weights-cold
    (:attr:`~autoplace.cost_model.table.CostTable.weights_line_`; default: the line a table of ``records`` learns).
    In such a model a kernel's in-context time includes reading its weights from memory, which the cost table adds
    to the in-model price itself: :func:`in_context_times` takes it out."""
    import pandas as pd

    df = records if isinstance(records, pd.DataFrame) else pd.DataFrame(list(records))
    if weights_line is None:
        weights_line = fitted_weights_line(df)
    if "in_model_median_us" not in df:
        return df[df["kind"] != "unit"] if "kind" in df else df.iloc[:0]
    in_model = pd.to_numeric(df["in_model_median_us"], errors="coerce")
    units = df["kind"] == "unit"
    df = df[~units | (in_model > 0)].copy()
    timed = df["kind"] == "unit"
    df.loc[timed, "median_us"] = in_model[df.index[timed]]
    in_context = in_context_times(df, weights_line=weights_line)
    if in_context:
        measured = pd.Series([in_context.get((str(t), str(k)), np.nan) for t, k in zip(df["target"], df["key"])],
                             index=df.index)
        use = timed & measured.notna()
        df.loc[use, "median_us"] = measured[use]
    return df


def fitted_weights_line(records) -> dict:
    """The weights line (:attr:`~autoplace.cost_model.table.CostTable.weights_line_`) a table of ``records`` learns;
    ``{}`` without weights-cold timings (no table is built then)."""
    import pandas as pd

    df = records if isinstance(records, pd.DataFrame) else pd.DataFrame(list(records))
    if "weights_cold_median_us" not in df or not (pd.to_numeric(df["weights_cold_median_us"], errors="coerce") > 0).any():
        return {}
    from .table import CostTable

    return dict(CostTable(df).weights_line_)


def in_context_times(records, weights_line: dict | None = None) -> dict:
    """``{(target kind, kernel key): us}``: the median time of each kernel timed in context
    (:mod:`autoplace.profile.in_context`, ``in_context_kernel_us`` of an end-to-end record timed the current way,
    :data:`~autoplace.profile.in_context.IN_CONTEXT_TIMING`, as :class:`~autoplace.cost_model.table.CostTable` reads
    them; the newest of each model) in the models that run in-model
    (:func:`~autoplace.profile.cache_state.model_runs_in_model`: more bytes per call than the L2 of the cores that
    timed the kernels, more than one kernel): over its launches in each model, then over the models that launch
    it (bert-base and roberta-base share most kernels). Kernels of models that stay in the L2 are left out: their
    in-context times describe a warm cache, not the in-model one. Only kernels with a unit record count (a training
    fold lacks those of the family it keeps out).

    In a model priced weights-cold (its bytes per call above ``weights_line``, ``{kind: bytes}``), a kernel with
    weights gets its in-context time less what its weights-cold timing adds to its in-model one (the weights'
    memory time, which the cost table adds to in-model prices in such a model); one with weights and no
    weights-cold timing is left out."""
    import pandas as pd

    from ..profile.cache_state import bytes_per_call, finite_or_zero, model_runs_in_model
    from ..profile.in_context import IN_CONTEXT_TIMING
    from .table import in_model_times, weights_cold_times

    df = records if isinstance(records, pd.DataFrame) else pd.DataFrame(list(records))
    if not {"kind", "unit_keys", "in_context_kernel_us", "in_context_timing"} <= set(df.columns):
        return {}
    runs = df[(df["kind"] == "model") & (df["in_context_timing"] == IN_CONTEXT_TIMING)]
    runs = runs.drop_duplicates(subset=["target", "key"], keep="last")
    units = df[df["kind"] == "unit"].drop_duplicates(subset=["key", "target"], keep="last")
    per_model: dict = {}  # (target kind, kernel key) -> [us in each model that launches it]
    of_target: dict = {}  # target -> (unit rows by key, in-model times, L2 bytes, weights-cold times), read once
    for _, run in runs.iterrows():
        if run["target"] not in of_target:
            mine = units[units["target"] == run["target"]]
            in_model, l2_bytes = in_model_times(mine)
            of_target[run["target"]] = (mine.set_index(mine["key"].astype(str)), in_model, l2_bytes,
                                        weights_cold_times(mine))
        rows, in_model, l2_bytes, weights_cold = of_target[run["target"]]
        launches = [(str(k), float(us)) for k, us in zip(run["unit_keys"], run["in_context_kernel_us"])
                    if str(k) in rows.index]
        if not launches or not model_runs_in_model([rows.loc[k] for k, _ in launches], l2_bytes):
            continue
        weights = {k: finite_or_zero(rows.loc[k].get("weight_bytes")) for k, _ in launches}
        line = (weights_line or {}).get(str(run["target"]))
        cold = line is not None and bytes_per_call([rows.loc[k] for k, _ in launches]) > line
        for key in dict.fromkeys(k for k, _ in launches):
            us = float(np.median([us for k, us in launches if k == key]))
            if cold and weights[key] > 0:
                if key not in weights_cold or key not in in_model:
                    continue
                us = max(0.0, us - max(0.0, weights_cold[key] - in_model[key]))
            per_model.setdefault((str(run["target"]), key), []).append(us)
    return {tag: float(np.median(times)) for tag, times in per_model.items()}


def in_model_coverage(records) -> dict:
    """``{target kind: (kernels timed in-model, kernels measured)}`` over the kernels a cost model trains on
    (:func:`~autoplace.cost_model.cost_model.training_units`: the newest record of each, CPU kernels of the current
    schedules), for the kinds that have any in-model time (CPU kinds; a GPU is never timed in-model)."""
    import pandas as pd

    from .cost_model import training_units

    units = training_units(records)
    if units.empty or "in_model_median_us" not in units:
        return {}
    timed = pd.to_numeric(units["in_model_median_us"], errors="coerce") > 0
    coverage = {}
    for kind, group in units.groupby("target"):
        n_timed = int(timed[group.index].sum())
        if n_timed:
            coverage[str(kind)] = (n_timed, len(group))
    return coverage


def in_model_training_records(records, min_coverage: float = IN_MODEL_MIN_COVERAGE,
                              weights_line: dict | None = None):
    """:func:`in_model_records` of the target kinds whose kernels were timed in-model nearly all
    (:data:`IN_MODEL_MIN_COVERAGE`), and ``{kind: (timed, measured)}`` of the kinds left out for too few."""
    import pandas as pd

    df = records if isinstance(records, pd.DataFrame) else pd.DataFrame(list(records))
    coverage = in_model_coverage(df)
    short = {kind: c for kind, c in coverage.items() if c[0] < min_coverage * c[1]}
    timed = in_model_records(df, weights_line=weights_line)
    if short:
        timed = timed[(timed["kind"] != "unit") | ~timed["target"].astype(str).isin(short)]
    return timed, short


def train(
    profile,
    out: str | None = None,
    *,
    target: str | list | None = None,
    model: str | CostModel = "xgb",
    save: bool = True,
    allow_foreign: bool = False,
    hardware_id: str | None = None,
    calibrate: bool = True,
    **params,
) -> CostModel:
    """Fit a cost model on a profile, calibrate its error band and save it.

    Parameters
    ----------
    profile : str or ProfileStore
        A profile folder (``profiles/<hardware id>``) or store.
    out : str, optional
        Where to save (default: :func:`default_model_path` of the profile folder).
    target : str or list of str, optional
        Train on these target kinds only (default: every kind in the profile).
    model : str or CostModel
        ``"xgb"`` (default), ``"roofline"`` or an unfitted instance.
    save : bool
        Write the model to ``out``.
    allow_foreign : bool
        Also use records of the folder measured on other hardware / TVM versions (warned about).
    hardware_id : str, optional
        The machine the model is for (default: the one the folder's ``metadata.json`` names, else this one);
        records of other hardware warn.
    calibrate : bool
        Also learn the model's error band (:meth:`CostModel.calibrate`: leave-one-family-out residuals
        on the same records, one more fit per model family in the profile), saved with the model. Without
        it the saved model's bands are unknown (NaN).
    **params
        Parameters of the model (e.g. ``random_state=0``).

    Returns
    -------
    CostModel
        The fitted model; ``model.path_`` is where it was saved (None when not saved), ``model.bands_``
        its band table (None when not calibrated, or when the profile has no model family to hold out).
        Where the profile timed kernels in-model, ``model.in_model_`` is a second model of the same kind fitted
        (and calibrated) on those times (:func:`in_model_records`), saved beside it (:func:`in_model_path`);
        else None, and a saved one from before is removed. Only target kinds with an in-model time for at least
        :data:`IN_MODEL_MIN_COVERAGE` of their kernels take part; ``model.in_model_short_`` is
        ``{kind: (timed, measured)}`` of those left out.
    """
    from ..profile import ProfileStore

    store = ProfileStore(profile) if isinstance(profile, (str, os.PathLike)) else profile
    records = store.records(allow_foreign=allow_foreign)
    if records.empty:
        raise AutoplaceError(f"{store.path}: no profile records; run autoplace profile first")
    if target is not None:
        kinds = [target] if isinstance(target, str) else list(target)
        units = records["kind"] == "unit"
        records = records[~units | records["target"].isin(kinds)]
        if not (records["kind"] == "unit").any():
            raise AutoplaceError(f"{store.path}: no unit records for target {kinds}")
    if hardware_id is None:  # the machine the folder describes (another machine's folder trains its model)
        stored = store.stored_metadata() if hasattr(store, "stored_metadata") else None
        hardware_id = (stored or {}).get("hardware_id")
    fitted = create(model, **params).fit(records, hardware_id=hardware_id)
    if calibrate:
        fitted.calibrate(records)
    fitted.in_model_ = None
    timed, fitted.in_model_short_ = in_model_training_records(records)
    if (timed["kind"] == "unit").any():
        fitted.in_model_ = create(model, **params) if isinstance(model, str) else type(model)(**model.get_params())
        fitted.in_model_.fit(timed, hardware_id=hardware_id)
        fitted.in_model_.path_ = None
        if calibrate:
            fitted.in_model_.calibrate(timed)
    fitted.path_ = None
    if save:
        fitted.path_ = fitted.save(out or default_model_path(store.path))
        if fitted.in_model_ is not None:
            fitted.in_model_.path_ = fitted.in_model_.save(in_model_path(fitted.path_))
        elif os.path.exists(in_model_path(fitted.path_)):  # trained on records that no longer qualify
            os.remove(in_model_path(fitted.path_))
    return fitted
