"""The cost-model interface: profile records in, predicted kernel latencies (microseconds) out.

A cost model learns from the ``kind="unit"`` records of a profile (see
:mod:`autoplace.profile`) and predicts the latency of any unit record, measured or not, including
records made for kernels of models never profiled (:func:`features_from_unit`). Implementations:
``"xgb"`` (:class:`~autoplace.cost_model.xgb_model.XGBCostModel`, the default) and ``"roofline"``
(:class:`~autoplace.cost_model.roofline_model.RooflineCostModel`, a per-op-class baseline and the
fake for tests). :func:`create` turns a name into a model; :func:`load` reads any saved model.
"""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pandas as pd

from ..errors import AutoplaceError
from ..targets import kind_of_label
from .features import as_records, unit_ops

#: Format of saved models. Bump when the JSON layout changes; :func:`load` refuses other versions.
FORMAT_VERSION = 1


class CostModelVersionError(AutoplaceError):
    """A saved cost model was written by another format or feature version (retrain it)."""


class UnknownTargetError(AutoplaceError):
    """A prediction was asked for a target kind the model has no profile of."""


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
        self._fit(units)
        return self

    def _fit(self, units: pd.DataFrame) -> None:
        raise NotImplementedError

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
    last record of each ``(key, target)`` wins. Adds ``ops_all`` (ops incl. those the kernel name shows).
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
    df["ops_all"] = [unit_ops(r) for _, r in df.iterrows()]
    return df


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
