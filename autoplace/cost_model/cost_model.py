"""The cost-model interface: profile records in, predicted kernel latencies (microseconds) out.

A cost model learns from the ``kind="unit"`` records of a profile (see
:mod:`autoplace.profile`) and predicts the latency of any unit record, measured or not, including
records made for kernels of models never profiled (:func:`features_from_unit`). Implementations:
``"xgb"`` (:class:`~autoplace.cost_model.xgb_model.XGBCostModel`, the default) and ``"roofline"``
(:class:`~autoplace.cost_model.roofline_model.RooflineCostModel`, a per-op-class baseline and the
fake for tests). :func:`create` turns a name into a model; :func:`load` reads any saved model.

Error bands
-----------
:meth:`CostModel.calibrate` (run by :func:`autoplace.cost_model.train` and ``autoplace train``) says how
far off a prediction for a model never profiled tends to be: it holds out each model family of the
training profile in turn (the families of :func:`autoplace.cost_model.evaluate.family`; the training-only
sets of :data:`NEVER_HELD_OUT` never), fits the same model on the rest and records every held-out
kernel's residual ``log(measured / predicted)``. The band table it stores (:func:`band_table`, saved
with the model) holds, per target kind, a scale line (how the typical error shrinks with the kernel's
predicted latency) and, per anchor op class (:func:`record_op_class`), the 10th and 90th percentiles of
the residuals divided by that scale: a prediction ``p`` has the nominal 80% band ``[p * lo, p * hi]``
with factors ``lo <= 1 <= hi`` (typically) from :meth:`CostModel.band_factors`. A class with fewer than
:data:`BAND_MIN_RESIDUALS` residuals uses its target's percentiles over all classes. A model without a
band table (saved before bands existed, or never calibrated) reports its bands as unknown (NaN).
"""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pandas as pd

from ..errors import AutoplaceError, CostModelVersionError, UnknownTargetError
from ..targets import kind_of_label
from .features import as_records, unit_ops

#: Format of saved models. Bump when the JSON layout changes; :func:`load` refuses other versions.
#: (The optional ``"bands"`` entry came without a bump: files without it load, with unknown bands.)
FORMAT_VERSION = 1

#: Layout of the band table (:func:`band_table`) inside a saved model; a table of another layout is read as
#: no table (bands unknown), so a model file never fails to load over its band.
BAND_TABLE_VERSION = 1
#: Nominal coverage of a calibrated band: the 10th to 90th percentile of the held-out residuals.
BAND_NOMINAL = 0.8
#: An op class with fewer held-out residuals than this uses its target's band over all classes.
BAND_MIN_RESIDUALS = 10
#: Families that are training data only and never held out (calibration and evaluation): the random
#: shape sweep (``experiments/op_sweep.py``), the stride grid (``grid-*``) and the op-family set (``ops-*``).
NEVER_HELD_OUT = ("sweep", "grid", "ops")


class CostModel:
    """Interface of a cost model (scikit-learn style: parameters in ``__init__``, ``fit`` returns self).

    Subclasses implement :meth:`_fit`, :meth:`_predict_log` and the (de)serialisation hooks
    :meth:`_state` / :meth:`_from_state`; this class does the record handling shared by all of
    them: selecting good unit records, the hardware check, op vocabularies, unseen-op flags, the
    target check and saving to / loading from JSON.
    """

    #: Name written in saved files and accepted by :func:`create`.
    kind = "abstract"

    # -- scikit-learn style parameters ---------------------------------------------------------------
    def get_params(self) -> dict:
        import inspect

        names = [p for p in inspect.signature(type(self).__init__).parameters if p != "self"]
        return {name: getattr(self, name) for name in names}

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({params})"

    # -- fitting -------------------------------------------------------------------------------------
    def fit(self, records, *, hardware_id: str | None = None, tvm_version: str | None = None):
        """Learn from the unit records of a profile.

        Parameters
        ----------
        records : pandas.DataFrame or list of dict
            Profile records (:meth:`autoplace.profile.ProfileStore.records`); rows other than
            ``kind="unit"`` with ``status="ok"`` and a positive ``median_us`` are ignored.
        hardware_id : str, optional
            The machine the model is for (default: this machine). Records measured on other
            hardware are used but warned about (:class:`autoplace.profile.ForeignProfileWarning`).
        tvm_version : str, optional
            The TVM version the model is for (default: the installed one); checked the same way.

        Returns
        -------
        self
        """
        units = training_units(records)
        if units.empty:
            raise AutoplaceError(
                "no usable unit records (kind='unit', status='ok', median_us > 0) to train on; "
                "profile some models first (autoplace profile --zoo ...)"
            )
        self.hardware_id_, self.tvm_version_ = check_provenance(units, hardware_id, tvm_version)
        self.target_kinds_ = sorted(str(t) for t in units["target"].unique())
        self.op_vocab_ = {
            t: sorted({op for ops in units.loc[units["target"] == t, "ops_all"] for op in ops})
            for t in self.target_kinds_
        }
        self.n_records_ = len(units)
        self.bands_ = None  # a new fit is not calibrated: calibrate(records) learns its band
        self.residuals_ = None
        self._fit(units)
        return self

    def _fit(self, units: pd.DataFrame) -> None:
        raise NotImplementedError

    def hold_out_of_prior(self, keys=(), families=()):
        """Keep these kernels (keys) and every record profiled for these model families (:func:`~autoplace.cost_model.
        evaluate.family`) out of the donor's training in the next :meth:`fit` (a model with a ``prior``; no effect
        on others), on top of what was held out before: an evaluation fold's held-out family is in no machine's
        profile, as a user's new model is in none. Returns self."""
        held_keys, held_families = getattr(self, "prior_holdout", (frozenset(), frozenset()))
        self.prior_holdout = (held_keys | frozenset(str(k) for k in keys),
                              held_families | frozenset(str(f) for f in families))
        return self

    # -- predicting ----------------------------------------------------------------------------------
    def _check_fitted(self) -> None:
        if not hasattr(self, "target_kinds_"):
            raise AutoplaceError(
                f"this {type(self).__name__} is not fitted yet: call fit(records) or load a saved one"
            )

    def _prepare(self, units, target: str | None) -> tuple[list, list[str]]:
        self._check_fitted()
        recs = as_records(units)
        targets = [
            str(target) if target is not None else str(_target_of(r, self.target_kinds_)) for r in recs
        ]
        unknown = sorted(set(targets) - set(self.target_kinds_))
        if unknown:
            raise UnknownTargetError(
                f"the cost model was trained on {self.target_kinds_} profiles and cannot price kernels on "
                f"{unknown}: profile that target (autoplace profile --targets ...) and retrain"
            )
        return recs, targets

    def predict(self, units, target: str | None = None) -> np.ndarray:
        """Predicted latency of each unit, in microseconds (finite and positive).

        Parameters
        ----------
        units : pandas.DataFrame, dict, list of dict, or autoplace.profile.Unit / list of them
            Unit records (measured or not: timing fields are ignored).
        target : str, optional
            Target kind for every unit (default: each record's ``target``).

        Returns
        -------
        numpy.ndarray of float, shape (n_units,)
        """
        recs, targets = self._prepare(units, target)
        if not recs:
            return np.zeros(0)
        log_us = np.asarray(self._predict_log(recs, targets), dtype=float)
        log_us = np.where(np.isfinite(log_us), log_us, math.log(1.0))
        return np.exp(np.clip(log_us, math.log(1e-4), math.log(1e10)))

    def _predict_log(self, recs: list, targets: list[str]) -> np.ndarray:
        raise NotImplementedError

    def unseen_ops(self, units, target: str | None = None) -> list[list[str]]:
        """For each unit, the ops it fuses that no training record of its target had."""
        recs, targets = self._prepare(units, target)
        out = []
        for rec, tgt in zip(recs, targets):
            vocab = set(self.op_vocab_.get(tgt, ()))
            out.append(sorted({op for op in unit_ops(rec) if op not in vocab}))
        return out

    # -- error bands ---------------------------------------------------------------------------------
    def calibrate(
        self,
        records,
        *,
        nominal: float = BAND_NOMINAL,
        min_residuals: int = BAND_MIN_RESIDUALS,
        never_held_out=NEVER_HELD_OUT,
        conformal: bool = True,
        size_scale: bool = True,
        quiet: bool = True,
        n_jobs: int | None = None,
    ):
        """Learn the error band of this (fitted) model from leave-one-family-out residuals.

        For each model family of ``records`` (families in ``never_held_out`` excepted) a fresh model with
        this one's parameters is fitted on the kernels no model of that family launches, and predicts the
        family's kernels; :func:`band_table` turns the residuals ``log(measured / predicted)`` into the
        band table (``bands_``, saved with the model). Costs one fit per family.

        Parameters
        ----------
        records : pandas.DataFrame or list of dict
            The profile records the model was fitted on, ``kind="model"`` records included (they say
            which kernels each model launches).
        nominal : float
            Nominal coverage of the band (0.8: the residuals' 10th to 90th percentile).
        min_residuals : int
            Op classes with fewer residuals use the target's band over all classes.
        never_held_out : tuple of str
            Training-only families.
        conformal : bool
            Widen the quantile levels by the split-conformal sample-size correction (see :func:`band_table`).
        size_scale : bool
            Let the band's width follow the kernel's size (see :func:`band_table`); False: one band per class.
        quiet : bool
            Silence the foreign-profile warnings of the calibration fits.
        n_jobs : int, optional
            Families fitted at once, in threads (default: this machine's CPUs).

        Returns
        -------
        self
            With ``bands_`` (None when no family could be held out: bands unknown) and ``residuals_``
            (one row per held-out kernel, see :func:`autoplace.cost_model.evaluate.family_residuals`).
        """
        from .evaluate import family_residuals

        self._check_fitted()
        params = self.get_params()
        df = records if isinstance(records, pd.DataFrame) else pd.DataFrame(list(records))
        if "target" in df and "kind" in df:
            df = df[(df["kind"] != "unit") | df["target"].isin(self.target_kinds_)]
        held = getattr(self, "prior_holdout", ((), ()))
        res = family_residuals(
            df,
            lambda: type(self)(**params).hold_out_of_prior(*held),
            never_held_out=never_held_out,
            quiet=quiet,
            n_jobs=n_jobs,
            hardware_id=self.hardware_id_,
            tvm_version=self.tvm_version_,
        )
        self.residuals_ = res
        self.bands_ = band_table(res, nominal=nominal, min_residuals=min_residuals, conformal=conformal,
                                 size_scale=size_scale)
        return self

    def band_factors(self, units, target: str | None = None, *, predicted=None,
                     unseen=None) -> tuple[np.ndarray, np.ndarray]:
        """Multiplicative error band of each unit's prediction: ``(lo, hi)``, arrays of shape (n_units,).

        A prediction ``p`` has the band ``[p * lo, p * hi]`` at the table's nominal coverage
        (``bands_["nominal"]``): ``lo = exp(z_lo * s)``, ``hi = exp(z_hi * s)`` with the normalised
        quantiles ``z`` of the unit's target kind and anchor op class (the target's over all classes where
        the class had too few residuals) and the scale ``s`` of a kernel of ``p`` microseconds (see
        :func:`band_table`). A unit fusing an op no training record had (``unseen``, default
        :meth:`unseen_ops`) gets the wider of its class's and its target's quantiles. NaN where unknown: the
        model has no band table (never calibrated, or saved before bands existed), one of another layout
        (:data:`BAND_TABLE_VERSION`) or none for the unit's target.

        Parameters
        ----------
        units, target
            As :meth:`predict`.
        predicted : array-like, optional
            The units' predicted latencies (default: :meth:`predict`).
        unseen : list of list of str, optional
            The units' unseen ops (default: :meth:`unseen_ops`).
        """
        recs, targets = self._prepare(units, target)
        lo, hi = np.full(len(recs), np.nan), np.full(len(recs), np.nan)
        bands = getattr(self, "bands_", None)
        if not bands or not recs or bands.get("version") != BAND_TABLE_VERSION:
            return lo, hi
        predicted = self.predict(recs, target) if predicted is None else np.asarray(predicted, dtype=float)
        if unseen is None:
            unseen = self.unseen_ops(recs, target)
        min_n = int(bands.get("min_residuals", BAND_MIN_RESIDUALS))
        for i, (rec, tgt) in enumerate(zip(recs, targets)):
            table = bands.get("targets", {}).get(tgt)
            if not table or not table.get("all"):
                continue
            every = table["all"]
            entry = table.get("classes", {}).get(record_op_class(rec))
            if not entry or int(entry.get("n", 0)) < min_n:
                entry = every
            z_lo, z_hi = float(entry["z_lo"]), float(entry["z_hi"])
            if unseen[i]:
                z_lo, z_hi = min(z_lo, float(every["z_lo"])), max(z_hi, float(every["z_hi"]))
            scale = _band_scale(table["scale"], predicted[i])
            lo[i], hi[i] = math.exp(z_lo * scale), math.exp(z_hi * scale)
        return lo, hi

    # -- saving --------------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """Everything a saved model holds, as JSON-ready data."""
        from . import features

        self._check_fitted()
        return {
            "format": "autoplace.cost_model",
            "format_version": FORMAT_VERSION,
            "feature_version": features.FEATURE_VERSION,
            "kind": self.kind,
            "params": self.get_params(),
            "hardware_id": self.hardware_id_,
            "tvm_version": self.tvm_version_,
            "target_kinds": self.target_kinds_,
            "op_vocab": self.op_vocab_,
            "n_records": self.n_records_,
            "state": self._state(),
            "bands": getattr(self, "bands_", None),
        }

    def save(self, path: str) -> str:
        """Write the model to a JSON file (written whole, then renamed into place); returns ``path``."""
        import os

        data = self.to_dict()
        folder = os.path.dirname(os.path.abspath(path))
        os.makedirs(folder, exist_ok=True)
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, separators=(",", ":"))
        os.replace(tmp, path)
        return path

    @classmethod
    def from_dict(cls, data: dict):
        """The model a :meth:`to_dict` made (version-checked)."""
        import inspect

        _check_versions(data)
        params = dict(data["params"])
        for name, par in inspect.signature(cls.__init__).parameters.items():
            if isinstance(par.default, tuple) and isinstance(params.get(name), list):
                params[name] = tuple(params[name])  # JSON has no tuples
        model = cls(**params)
        model.hardware_id_ = data["hardware_id"]
        model.tvm_version_ = data["tvm_version"]
        model.target_kinds_ = list(data["target_kinds"])
        model.op_vocab_ = {k: list(v) for k, v in data["op_vocab"].items()}
        model.n_records_ = int(data["n_records"])
        model._from_state(data["state"])
        model.bands_ = data.get("bands")  # None in files saved before bands existed: unknown
        return model

    @classmethod
    def load(cls, path: str):
        """Read a model saved by :meth:`save` (any kind when called on :class:`CostModel`)."""
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        _check_versions(data, path)
        impl = _registry()[data["kind"]] if cls is CostModel else cls
        if impl.kind != data["kind"]:
            raise CostModelVersionError(
                f"{path}: holds a {data['kind']!r} cost model, not a {impl.kind!r} one"
            )
        return impl.from_dict(data)

    def _state(self) -> dict:
        raise NotImplementedError

    def _from_state(self, state: dict) -> None:
        raise NotImplementedError


def _check_versions(data: dict, path: str = "the saved cost model") -> None:
    from . import features

    if not isinstance(data, dict) or data.get("format") != "autoplace.cost_model":
        raise CostModelVersionError(f"{path}: not an autoplace cost model file")
    if data.get("format_version") != FORMAT_VERSION:
        raise CostModelVersionError(
            f"{path}: written in cost-model format version {data.get('format_version')}, this autoplace "
            f"reads version {FORMAT_VERSION}; retrain it: autoplace train --profile <profile dir>"
        )
    if data.get("feature_version") != features.FEATURE_VERSION:
        raise CostModelVersionError(
            f"{path}: uses feature version {data.get('feature_version')}, this autoplace computes version "
            f"{features.FEATURE_VERSION}; retrain it: autoplace train --profile <profile dir>"
        )
    if data.get("kind") not in _registry():
        raise CostModelVersionError(
            f"{path}: unknown cost model kind {data.get('kind')!r}; known: {sorted(_registry())}"
        )


def _target_of(record, kinds) -> str:
    try:
        value = record["target"]
    except (KeyError, IndexError, TypeError):
        value = None
    if value is None or (isinstance(value, float) and math.isnan(value)):
        value = getattr(record, "target_kind", None)
    if value is None and len(kinds) == 1:
        return kinds[0]
    return kind_of_label(value)


def training_units(records) -> pd.DataFrame:
    """The usable unit records: ``kind="unit"``, ``status="ok"``, positive finite ``median_us``; the
    last record of each ``(key, target)`` wins; CPU kernels of the newest CPU schedule version the profile has
    only (:func:`_current_cpu_schedule`). Adds ``ops_all`` (ops incl. those the kernel name shows).
    """
    df = records if isinstance(records, pd.DataFrame) else pd.DataFrame(list(records))
    if df.empty or "kind" not in df:
        return pd.DataFrame()
    df = df[df["kind"] == "unit"]
    if "status" in df:
        df = df[df["status"] == "ok"]
    if "median_us" not in df:
        return pd.DataFrame()
    us = pd.to_numeric(df["median_us"], errors="coerce")
    df = df[np.isfinite(us) & (us > 0)]
    df = df.drop_duplicates(subset=["key", "target"], keep="last").reset_index(drop=True)
    df = _current_cpu_schedule(df)
    df["ops_all"] = [unit_ops(r) for _, r in df.iterrows()]
    return df


def _current_cpu_schedule(units: pd.DataFrame) -> pd.DataFrame:
    """Without the CPU kernels of older CPU schedules than the newest the profile has (``cpu_schedule``, see
    :data:`autoplace.backend.cpu_schedules.SCHEDULE_VERSION`): the same shapes, run as the rules now make them,
    cost differently (a small kernel no longer pays for a second thread), and a kernel the rules no longer
    make is not what a build runs. The newest the profile has, not the current one: a profile made before the
    current version (another machine's, not yet re-run there) keeps the kernels its last run retagged or
    timed, not every version mixed. A profile with no version at all (made before schedule versions) is kept
    whole."""
    if "cpu_schedule" not in units:
        return units
    cpu = units["target"] == "llvm"
    version = pd.to_numeric(units["cpu_schedule"], errors="coerce")
    newest = version[cpu].max()
    if not np.isfinite(newest):
        return units
    return units[~cpu | (version == newest)].reset_index(drop=True)


def record_op_class(record) -> str:
    """The op class (:func:`autoplace.cost_model.features.op_class`) of a unit record's anchor op (else of
    its first op; ``"other"`` when it names none): what band tables and the evaluation group by."""
    from .features import op_class

    try:
        anchor = record["anchor_op"]
    except (KeyError, IndexError, TypeError):
        anchor = None
    if not isinstance(anchor, str) or not anchor:
        ops = unit_ops(record)
        anchor = ops[0] if ops else ""
    return op_class(anchor) if anchor else "other"


def _band_quantiles(values: np.ndarray, nominal: float, conformal: bool = True) -> tuple[float, float]:
    """The values' ``(1 - nominal) / 2`` and ``(1 + nominal) / 2`` quantiles.

    ``conformal``: with the split-conformal sample-size correction (levels widened by ``(n + 1) / n``,
    taken at the nearest value outward): with ``n`` exchangeable values a new one falls inside with
    probability at least ``nominal``, where the plain (interpolated) sample quantiles cover less for small
    ``n``. Otherwise the plain quantiles.
    """
    v = np.sort(np.asarray(values, dtype=float))
    n = len(v)
    tail = (1.0 - nominal) / 2.0
    if not conformal:
        return float(np.quantile(v, tail)), float(np.quantile(v, 1.0 - tail))
    hi_level = min(1.0, (1.0 - tail) * (n + 1) / n)
    return float(np.quantile(v, 1.0 - hi_level, method="lower")), float(np.quantile(v, hi_level, method="higher"))


#: Smallest band scale (log units): the line of :func:`band_table` never makes a band narrower than this.
BAND_SCALE_FLOOR = 0.05


def _band_scale(scale: dict, predicted_us: float) -> float:
    """The typical |log error| of a prediction of ``predicted_us`` (the band table's ``scale`` line)."""
    x = math.log10(max(float(predicted_us), 1e-9)) if np.isfinite(predicted_us) else 0.0
    x = min(max(x, float(scale["log10_us_min"])), float(scale["log10_us_max"]))
    return max(float(scale["intercept"]) + float(scale["slope"]) * x, float(scale["floor"]))


def band_table(residuals: pd.DataFrame, *, nominal: float = BAND_NOMINAL,
               min_residuals: int = BAND_MIN_RESIDUALS, conformal: bool = True,
               size_scale: bool = True) -> dict | None:
    """The band table of a cost model from held-out residuals (JSON-ready; None when there are none).

    How wrong a prediction tends to be depends on the kernel's size (on the reference CPU profile, the
    held-out |log error| of kernels under 10 us is about four times that of kernels over 10 ms) and on its op
    class (some classes are biased). So the residuals ``r = log(measured / predicted)`` are first divided by
    a scale ``s(p) = max(intercept + slope * log10(p), floor)``, a least-squares line of ``|r|`` over
    ``log10`` of the predicted microseconds ``p`` (``log10 p`` clamped to the residuals' range, so the line
    never extrapolates; ``floor`` = :data:`BAND_SCALE_FLOOR`); the quantiles of the normalised residuals
    ``z = r / s(p)`` are then taken per op class (:func:`_band_quantiles`, conformal by default). A
    prediction ``p`` of a class with quantiles ``z_lo, z_hi`` has the band ``[p exp(z_lo s(p)), p exp(z_hi
    s(p))]``. ``size_scale=False``: ``s = 1`` (one band per class, whatever the size).

    Parameters
    ----------
    residuals : pandas.DataFrame
        One row per held-out kernel: ``target``, ``family``, ``op_class``, ``predicted_us`` and ``residual``,
        as :func:`autoplace.cost_model.evaluate.family_residuals` makes.
    nominal : float
        Nominal coverage of the band.
    min_residuals : int
        Classes with fewer residuals fall back to the target's quantiles over all classes.
    conformal : bool
        Split-conformal quantile levels (see :func:`_band_quantiles`); False: plain sample quantiles.
    size_scale : bool
        Normalise by the size line (above); False: ``s = 1``.

    Returns
    -------
    dict
        ``{"version", "nominal", "quantiles", "method", "group_by", "min_residuals", "size_scale", "targets": {kind:
        {"scale": {"intercept", "slope", "log10_us_min", "log10_us_max", "floor"}, "all": entry, "classes":
        {op class: entry}, "families": [held-out families]}}}`` where an entry is ``{"z_lo", "z_hi", "n",
        "median"}`` (``median``: the median factor ``measured / predicted``). Every class is stored with
        its count; :meth:`CostModel.band_factors` uses a class entry only where ``n >= min_residuals``.
    """
    if residuals is None or len(residuals) == 0:
        return None
    r = residuals[np.isfinite(residuals["residual"].astype(float))]
    if r.empty:
        return None

    def entry(z, raw) -> dict:
        z_lo, z_hi = _band_quantiles(z, nominal, conformal)
        return {"z_lo": z_lo, "z_hi": z_hi, "n": len(z), "median": float(np.exp(np.median(raw)))}

    targets = {}
    for kind, group in r.groupby("target"):
        res = group["residual"].to_numpy(float)
        x = np.log10(np.maximum(group["predicted_us"].to_numpy(float), 1e-9))
        scale = {"intercept": 1.0, "slope": 0.0, "log10_us_min": float(x.min()), "log10_us_max": float(x.max()),
                 "floor": BAND_SCALE_FLOOR if size_scale else 1.0}
        if size_scale:
            if len(group) >= 3 and np.ptp(x) > 0:
                slope, intercept = np.polyfit(x, np.abs(res), 1)
            else:
                slope, intercept = 0.0, float(np.mean(np.abs(res)))
            scale.update(intercept=float(intercept), slope=float(slope))
        z = res / np.array([_band_scale(scale, 10.0**v) for v in x])
        cls = group["op_class"].astype(str).to_numpy()
        targets[str(kind)] = {
            "scale": scale,
            "all": entry(z, res),
            "classes": {str(c): entry(z[cls == c], res[cls == c]) for c in sorted(set(cls))},
            "families": sorted(str(f) for f in group["family"].unique()),
        }
    tail = round((1.0 - nominal) / 2.0, 6)
    return {
        "version": BAND_TABLE_VERSION,
        "nominal": float(nominal),
        "quantiles": [tail, round(1.0 - tail, 6)],
        "method": "leave-one-family-out residuals log(measured/predicted)"
        + (", normalised by a size line" if size_scale else "")
        + (", split-conformal quantiles" if conformal else ", sample quantiles"),
        "group_by": "target kind, anchor op class",
        "min_residuals": int(min_residuals),
        "size_scale": bool(size_scale),
        "targets": targets,
    }


def check_provenance(units: pd.DataFrame, hardware_id: str | None = None, tvm_version: str | None = None):
    """Warn when records come from other hardware or TVM versions than the model is for.

    Returns
    -------
    (hardware_id, tvm_version) : the most common values among the records (the model's provenance).
    """
    from ..profile import ForeignProfileWarning

    def common(col):
        if col not in units or units[col].isna().all():
            return None
        return str(units[col].dropna().astype(str).value_counts().index[0])

    rec_hw, rec_tvm = common("hardware_id"), common("tvm_version")
    if hardware_id is None:
        from ..profile import hardware_metadata

        hardware_id = hardware_metadata()["hardware_id"]
    if tvm_version is None:
        import tvm

        tvm_version = tvm.__version__
    found_hw = sorted(set(units["hardware_id"].dropna().astype(str))) if "hardware_id" in units else []
    found_tvm = sorted(set(units["tvm_version"].dropna().astype(str))) if "tvm_version" in units else []
    if found_hw and found_hw != [hardware_id]:
        warnings.warn(
            f"training a cost model for {hardware_id!r} on records measured on {found_hw}: its predictions "
            f"describe that hardware, not this one. Profile this machine (autoplace profile) to fix it.",
            ForeignProfileWarning,
            stacklevel=3,
        )
    if found_tvm and found_tvm != [tvm_version]:
        warnings.warn(
            f"training a cost model for TVM {tvm_version} on records measured with TVM {found_tvm}: kernels "
            "may be lowered differently. Re-profile with this TVM to fix it.",
            ForeignProfileWarning,
            stacklevel=3,
        )
    return rec_hw, rec_tvm


def _registry() -> dict:
    from .roofline_model import RooflineCostModel
    from .xgb_model import XGBCostModel

    return {"xgb": XGBCostModel, "roofline": RooflineCostModel}


def create(kind: str | CostModel = "xgb", **params) -> CostModel:
    """A cost model from its name (``"xgb"``, ``"roofline"``) and parameters; an instance passes through."""
    if isinstance(kind, CostModel):
        return kind
    registry = _registry()
    if kind not in registry:
        raise AutoplaceError(f"unknown cost model {kind!r}; choose one of {sorted(registry)}")
    return registry[kind](**params)


def load(path: str) -> CostModel:
    """Read any saved cost model (see :meth:`CostModel.save`); raises :class:`CostModelVersionError`
    for files of another format or feature version."""
    return CostModel.load(path)
