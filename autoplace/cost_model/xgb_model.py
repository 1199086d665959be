"""Gradient-boosted trees (XGBoost) on unit features, predicting log latency.

The trees do not predict the log latency itself but its excess over a work term:
``log(latency_us) = log(work) + offset + trees(features)`` where ``work`` is the unit's FLOP
estimate (data movement ops count one per element). Trees cannot extrapolate, and a held-out model
often has kernels larger than any trained one; with the work term as the base margin the trees
only learn the time per unit of work (which depends on op class, access pattern and cache fit,
and stays in range), and a kernel twice the size predicts twice the time.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .cost_model import CostModel
from .features import OP_CLASSES, feature_names, record_features, unit_ops

#: Features whose growth can only slow a kernel down (per unit of work), with ``monotone=True``.
MONOTONE = {"mem_l1_over": 1, "mem_l2_over": 1, "mem_level": 1}

#: Features of the linear part of ``base_margin="linear"``: op class and cache overflow.
LINEAR_FEATURES = tuple(f"anchor_cls_{c}" for c in OP_CLASSES) + (
    "cls_transcendental", "mem_l1_over", "mem_l2_over", "size_intensity")


def _work(rec) -> float:
    """FLOP estimate of a record, or bytes/4 where it has none."""
    try:
        flops = float(rec["flops"])
    except (KeyError, TypeError, ValueError, IndexError):
        flops = math.nan
    if not math.isfinite(flops) or flops <= 0:
        try:
            flops = (float(rec["bytes_in"]) + float(rec["bytes_out"])) / 4.0
        except (KeyError, TypeError, ValueError, IndexError):
            flops = 1.0
    return max(1.0, flops if math.isfinite(flops) else 1.0)


class XGBCostModel(CostModel):
    """XGBoost regression of log kernel latency; one model for all targets, the target kind a feature.

    Parameters
    ----------
    n_estimators : int
        Boosting rounds.
    learning_rate : float
    max_depth : int
    min_child_weight : float
    subsample : float
        Fraction of records each tree sees.
    colsample_bytree : float
        Fraction of features each tree sees.
    reg_lambda : float
        L2 penalty on leaf weights.
    base_margin : {"work", None}
        ``"work"``: trees learn log time per unit of work on top of ``log(work)`` (see the module
        notes); ``None``: trees learn log latency directly.
    op_features : bool
        Also count each exact op name seen in training (besides the op-class counts every record has).
    drop_features : tuple of str
        Leave out features whose names start with these prefixes (ablations, e.g. ``("mem_",)``).
    random_state : int
        Seed of the row/column sampling.
    n_jobs : int
        Threads XGBoost may use.

    Attributes
    ----------
    booster_ : xgboost.Booster
    feature_names_ : list of str
    target_kinds_ : list of str
        Target kinds (``"llvm"``, ``"cuda"``) the model can price.
    op_vocab_ : dict
        ``{target kind: ops seen in training}``; units with other ops are flagged as unseen.
    offset_ : float
        Mean of ``log(latency_us) - log(work)`` in training.
    hardware_id_, tvm_version_ : str
        Where the training records were measured.

    Examples
    --------
    >>> from autoplace.profile import ProfileStore
    >>> records = ProfileStore("profiles/amd-epyc-2c").records()
    >>> model = XGBCostModel(random_state=0).fit(records)
    >>> model.predict(records[records.kind == "unit"].head(3))  # doctest: +SKIP
    array([  1.7,  44.1,  17.9])
    """

    kind = "xgb"

    def __init__(self, n_estimators: int = 600, learning_rate: float = 0.05, max_depth: int = 4,
                 min_child_weight: float = 1.0, subsample: float = 0.8, colsample_bytree: float = 0.8,
                 reg_lambda: float = 1.0, base_margin: str | None = "work", op_features: bool = False,
                 linear_alpha: float = 1.0, monotone: bool = False, drop_features: tuple = (),
                 random_state: int = 0, n_jobs: int = 1):
        self.n_estimators = n_estimators
        self.learning_rate = learning_rate
        self.max_depth = max_depth
        self.min_child_weight = min_child_weight
        self.subsample = subsample
        self.colsample_bytree = colsample_bytree
        self.reg_lambda = reg_lambda
        self.base_margin = base_margin
        self.op_features = op_features
        self.linear_alpha = linear_alpha
        self.monotone = monotone
        self.drop_features = drop_features
        self.random_state = random_state
        self.n_jobs = n_jobs

    # -- features ------------------------------------------------------------------------------------
    def _matrix(self, recs: list, targets: list[str]) -> np.ndarray:
        names = self.feature_names_
        x = np.full((len(recs), len(names)), np.nan, dtype=np.float32)
        for i, (rec, tgt) in enumerate(zip(recs, targets)):
            feats = record_features(rec)
            for t in self.target_kinds_:
                feats[f"target={t}"] = float(tgt == t)
            if self.op_features:
                for op in self.ops_:
                    feats[f"op:{op}"] = 0.0
                for op in unit_ops(rec):
                    if f"op:{op}" in feats:
                        feats[f"op:{op}"] += 1.0
            x[i] = [feats.get(n, np.nan) for n in names]
        return x

    def _analytic_design(self, recs: list, x: np.ndarray) -> np.ndarray:
        """Per record: iterations x [one-hot anchor class..., L1-miss, L2-miss, log2 L2 overflow]."""
        col = {n: i for i, n in enumerate(self.feature_names_)}
        iters = np.array([_work(r) for r in recs])
        cls = np.nan_to_num(x[:, [col[f"anchor_cls_{c}"] for c in OP_CLASSES]].astype(float))
        per_iter = np.where(cls[:, OP_CLASSES.index("matmul")] + cls[:, OP_CLASSES.index("conv")] > 0, 2.0, 1.0)
        iters = iters / per_iter
        level = np.nan_to_num(x[:, col["mem_level"]].astype(float)) if "mem_level" in col else np.zeros(len(recs))
        over = np.nan_to_num(x[:, col["mem_l2_over"]].astype(float)) if "mem_l2_over" in col else np.zeros(len(recs))
        mem = np.stack([level >= 1, level >= 2, over], axis=1).astype(float)
        return iters[:, None] * np.concatenate([cls, mem], axis=1) * 1e-3

    def _fit_analytic(self, recs: list, x: np.ndarray, y_us: np.ndarray) -> None:
        from scipy.optimize import nnls

        a = self._analytic_design(recs, x)
        coef, _ = nnls(a / y_us[:, None], np.ones(len(y_us)))
        k = len(OP_CLASSES)
        seen = a[:, :k].sum(axis=0) > 0
        if seen.any():  # classes without training records take the mean of the seen ones
            coef[:k][~seen] = coef[:k][seen].mean()
        self.analytic_coef_ = coef.tolist()

    def _margin(self, recs: list, x: np.ndarray | None = None) -> np.ndarray:
        if self.base_margin is None:
            return np.full(len(recs), self.offset_)
        if self.base_margin == "analytic":
            pred = self._analytic_design(recs, x) @ np.asarray(self.analytic_coef_)
            return np.log(np.maximum(pred, 1e-3)) + self.offset_
        if self.base_margin not in ("work", "linear"):
            raise ValueError(f"base_margin must be 'work', 'linear', 'analytic' or None, not {self.base_margin!r}")
        margin = np.array([math.log(_work(r)) for r in recs]) + self.offset_
        if self.base_margin == "linear" and self.linear_coef_:
            margin = margin + self._linear_design(x) @ np.asarray(self.linear_coef_)
        return margin

    def _linear_design(self, x: np.ndarray) -> np.ndarray:
        cols = [self.feature_names_.index(n) for n in self.linear_features_]
        z = np.nan_to_num(x[:, cols].astype(float), nan=0.0)
        return (z - np.asarray(self.linear_mean_)) / np.asarray(self.linear_scale_)

    def _fit_linear(self, x: np.ndarray, resid: np.ndarray) -> None:
        """Ridge regression of log time per work on a few physical features (can extrapolate)."""
        self.linear_features_ = [n for n in LINEAR_FEATURES if n in self.feature_names_]
        self.linear_coef_, self.linear_mean_, self.linear_scale_ = [], [], []
        if self.base_margin != "linear" or not self.linear_features_:
            return
        cols = [self.feature_names_.index(n) for n in self.linear_features_]
        z = np.nan_to_num(x[:, cols].astype(float), nan=0.0)
        mean, scale = z.mean(axis=0), z.std(axis=0)
        scale[scale == 0] = 1.0
        self.linear_mean_, self.linear_scale_ = mean.tolist(), scale.tolist()
        zs = (z - mean) / scale
        a = zs.T @ zs + self.linear_alpha * len(z) / 100.0 * np.eye(zs.shape[1])
        self.linear_coef_ = np.linalg.solve(a, zs.T @ resid).tolist()

    # -- fitting -------------------------------------------------------------------------------------
    def _fit(self, units: pd.DataFrame) -> None:
        import xgboost as xgb

        self.ops_ = sorted({op for t in self.target_kinds_ for op in self.op_vocab_[t]}) if self.op_features else []
        names = (feature_names() + [f"target={t}" for t in self.target_kinds_] + [f"op:{op}" for op in self.ops_])
        drop = tuple(self.drop_features or ())
        self.feature_names_ = [n for n in names if not (drop and n.startswith(drop))]
        recs = [row for _, row in units.iterrows()]
        targets = [str(t) for t in units["target"]]
        y = np.log(units["median_us"].to_numpy(dtype=float))
        x = self._matrix(recs, targets)
        self.analytic_coef_ = []
        if self.base_margin in ("work", "linear"):
            self.offset_ = float(np.mean(y - np.log([_work(r) for r in recs])))
        elif self.base_margin == "analytic":
            self._fit_analytic(recs, x, np.exp(y))
            self.offset_ = 0.0
            self.offset_ = float(np.mean(y - self._margin(recs, x)))
        else:
            self.offset_ = float(np.mean(y))
        self.linear_coef_ = []
        self._fit_linear(x, y - self._margin(recs, x))
        dtrain = xgb.DMatrix(x, label=y, base_margin=self._margin(recs, x), feature_names=self._xgb_names())
        params = {
            "objective": "reg:squarederror", "eta": self.learning_rate, "max_depth": self.max_depth,
            "min_child_weight": self.min_child_weight, "subsample": self.subsample,
            "colsample_bytree": self.colsample_bytree, "lambda": self.reg_lambda, "seed": self.random_state,
            "nthread": self.n_jobs, "tree_method": "exact", "base_score": 0.0,
        }
        if self.monotone:
            params["monotone_constraints"] = "(" + ",".join(
                str(MONOTONE.get(n, 0)) for n in self.feature_names_) + ")"
        self.booster_ = xgb.train(params, dtrain, num_boost_round=self.n_estimators)

    def _xgb_names(self) -> list[str]:
        # XGBoost forbids [, ] and < in feature names.
        return [n.replace("[", "(").replace("]", ")").replace("<", "lt") for n in self.feature_names_]

    def _predict_log(self, recs: list, targets: list[str]) -> np.ndarray:
        import xgboost as xgb

        x = self._matrix(recs, targets)
        dmat = xgb.DMatrix(x, base_margin=self._margin(recs, x), feature_names=self._xgb_names())
        return self.booster_.predict(dmat, output_margin=True).astype(float)

    def feature_importance(self, importance_type: str = "gain") -> pd.Series:
        """Importance of each feature (XGBoost's ``gain`` by default), largest first."""
        self._check_fitted()
        scores = self.booster_.get_score(importance_type=importance_type)
        names = dict(zip(self._xgb_names(), self.feature_names_))
        return pd.Series({names.get(k, k): v for k, v in scores.items()}).sort_values(ascending=False)

    # -- saving --------------------------------------------------------------------------------------
    def _state(self) -> dict:
        import json

        return {
            "feature_names": self.feature_names_,
            "offset": self.offset_,
            "analytic": self.analytic_coef_,
            "linear": {"features": self.linear_features_, "coef": self.linear_coef_, "mean": self.linear_mean_,
                       "scale": self.linear_scale_},
            "booster": json.loads(bytes(self.booster_.save_raw(raw_format="json")).decode("utf-8")),
        }

    def _from_state(self, state: dict) -> None:
        import json

        import xgboost as xgb

        self.feature_names_ = list(state["feature_names"])
        self.ops_ = [n[len("op:"):] for n in self.feature_names_ if n.startswith("op:")]
        self.offset_ = float(state["offset"])
        self.analytic_coef_ = list(state["analytic"])
        lin = state["linear"]
        self.linear_features_, self.linear_coef_ = list(lin["features"]), list(lin["coef"])
        self.linear_mean_, self.linear_scale_ = list(lin["mean"]), list(lin["scale"])
        booster = xgb.Booster()
        booster.load_model(bytearray(json.dumps(state["booster"]).encode("utf-8")))
        self.booster_ = booster
