"""Gradient-boosted trees (XGBoost) on unit features, predicting log latency.

The trees do not predict the log latency itself but its excess over a work term:
``log(latency_us) = log(floor + work * exp(offset)) + trees(features)`` where ``work`` is the unit's FLOP
estimate (data movement ops count one per element, transcendental ops more: see
:func:`autoplace.cost_model.features.work`) and ``floor`` about what the cheapest calls of a kernel cost on its
target (the 5% quantile of the training latencies of that target kind: 9 ns on the Zen 5's CPU, 3.5 us on the
H200's GPU; the trees correct it down for the few kernels below it).
Trees cannot extrapolate, and a held-out model often has kernels larger than any trained one; with the
work term as the base margin the trees only learn the time per unit of work (which depends on op class,
access pattern and cache fit, and stays in range), and a kernel twice the size predicts twice the time
(once it is well above the floor). The floor keeps the trees from having to learn, for the smallest
kernels, that their time does not shrink with their work: without it, leaving one architecture out, the
kernels of small transformers (5-150 ns, half of them under 15) ranked at Spearman 0.92-0.95.
"""

from __future__ import annotations

import threading

import numpy as np
import pandas as pd

from .cost_model import CostModel
from .features import feature_names, record_features, unit_ops
from .features import work as _work
from .stream_floor import fit_stream_floor, stream_bounds_us

#: Features whose growth can only slow a kernel down (per unit of work), with ``monotone=True``.
MONOTONE = {"mem_l1_over": 1, "mem_l2_over": 1, "mem_level": 1}


class XGBCostModel(CostModel):
    """XGBoost regression of log kernel latency; one model for all targets, the target kind a feature.

    Parameters
    ----------
    n_estimators : int
        Boosting rounds.
    learning_rate : float
    max_depth : int
        Depth of each tree. 5 since session 26: on the Zen 3's records, leaving one architecture out, depth 5
        ranked every held-out model's kernels at Spearman >= 0.95 (21 of 21; depth 4: 20, depth 6: 19) with the
        same end-to-end errors (``experiments/cost_model_eval.py``; experiments/RESULTS.md, session 26).
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
    num_parallel_tree : int
        Trees per round, each on its own row/column sample, averaged (a boosted random forest). One
        tree per round let the seed of the sampling alone move a held-out model's end-to-end
        prediction by up to 16 points (seed003-base +2.5% to +18.4% over 5 seeds); four hold it
        within 2 (session 13, ``experiments/cost_model_eval.py --seeds 5``), for 3x the fitting time.
    monotone : bool
        Constrain the predicted time per work not to decrease as the cache-overflow features grow
        (:data:`MONOTONE`).
    weight_by_time : float
        Weight each training kernel by ``(1 + ln latency_us) ** weight_by_time`` (0: all equal): the
        long kernels, which decide a model's end-to-end latency, count more.
    drop_features : tuple of str
        Leave out features whose names start with these prefixes (ablations, e.g. ``("mem_",)``).
    call_floor : float or None
        Quantile of each target kind's training latencies taken as about what the cheapest calls of a kernel cost
        there (the ``floor`` of the base margin, see the module notes); ``None``: no floor (as in models saved
        before it). Session 56 on the Zen 5, leaving one architecture out (one fold each, seeds 0 and 1): the small
        roberta's kernels ranked at Spearman 0.92-0.93 without a floor, 0.95-0.96 at the 1% quantile (6 ns),
        0.96-0.97 at the 5% (9 ns); t5-encoder's 0.94-0.96, 0.94-0.97, 0.96-0.97; llama's 0.95, 0.97, 0.97.
    stream_floor : bool
        Price a kernel that streams its operands past the L2 at no less than its bytes over the fastest
        bandwidth a training kernel at least as large streamed at, and one that only streams (no transcendental)
        at no more than its bytes over the slowest bandwidth of training kernels near its size that only
        stream (:mod:`autoplace.cost_model.stream_floor`).
    prior : str, optional
        A profile folder of another machine (the *donor*). The trees then start not from the work term but from
        a model trained on the donor's records (this class, these parameters, no prior) plus a constant per target
        kind, and learn this machine's ratio to it: what the donor timed and this profile did not (op families of a
        newer profile, say) carries over. Leaving one architecture out on the Xeon f6m167 (733 CPU kernels) with
        the Xeon f6m207 (1122) as donor, 17 of 21 held-out models ranked at Spearman >= 0.95, against 11 without
        (session 72, ``experiments/donor_prior.py``). Kernels of a target kind the donor never timed keep the work
        term. A model of in-model times (:func:`~autoplace.cost_model.train.in_model_records`) gets a donor of the
        donor's in-model times. Evaluation folds keep their held-out families out of the donor too
        (:meth:`hold_out_of_prior`). The donor's fitted model is saved inside this one.
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
    call_floor_us_ : dict
        ``{target kind: floor of the base margin in microseconds}`` (empty without ``call_floor`` or in models
        saved before it).
    hardware_id_, tvm_version_ : str
        Where the training records were measured.
    stream_floor_ : dict
        The streaming-bandwidth envelope per target kind (:func:`~autoplace.cost_model.stream_floor.fit_stream_floor`;
        empty without ``stream_floor`` or in models saved before it).
    prior_ : XGBCostModel or None
        The donor's fitted model (with ``prior``), else None.
    prior_offset_ : dict
        ``{target kind: mean of log(latency_us) - donor's log prediction in training}`` for the kinds the donor
        prices.

    Examples
    --------
    >>> from autoplace.profile import ProfileStore
    >>> records = ProfileStore("profiles/amd-epyc-2c").records()
    >>> model = XGBCostModel(random_state=0).fit(records)
    >>> model.predict(records[records.kind == "unit"].head(3))  # doctest: +SKIP
    array([  1.7,  44.1,  17.9])
    """

    kind = "xgb"

    def __init__(
        self,
        n_estimators: int = 600,
        learning_rate: float = 0.05,
        max_depth: int = 5,
        min_child_weight: float = 1.0,
        subsample: float = 0.8,
        colsample_bytree: float = 0.8,
        reg_lambda: float = 1.0,
        base_margin: str | None = "work",
        op_features: bool = False,
        num_parallel_tree: int = 4,
        monotone: bool = False,
        weight_by_time: float = 1.0,
        drop_features: tuple = (),
        call_floor: float | None = 0.05,
        stream_floor: bool = True,
        prior: str | None = None,
        random_state: int = 0,
        n_jobs: int = 1,
    ):
        self.n_estimators = n_estimators
        self.learning_rate = learning_rate
        self.max_depth = max_depth
        self.min_child_weight = min_child_weight
        self.subsample = subsample
        self.colsample_bytree = colsample_bytree
        self.reg_lambda = reg_lambda
        self.base_margin = base_margin
        self.op_features = op_features
        self.num_parallel_tree = num_parallel_tree
        self.monotone = monotone
        self.weight_by_time = weight_by_time
        self.drop_features = drop_features
        self.call_floor = call_floor
        self.stream_floor = stream_floor
        self.prior = prior
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

    def _margin(self, recs: list, targets: list[str]) -> np.ndarray:
        if self.base_margin is None:
            return self._prior_margin(recs, targets, np.full(len(recs), self.offset_))
        if self.base_margin != "work":
            raise ValueError(f"base_margin must be 'work' or None, not {self.base_margin!r}")
        floor_us = np.array([float(self.call_floor_us_.get(str(t), 0.0)) for t in targets])
        margin = np.log(floor_us + np.array([_work(r) for r in recs], dtype=float) * np.exp(self.offset_))
        return self._prior_margin(recs, targets, margin)

    def _prior_margin(self, recs: list, targets: list[str], margin: np.ndarray) -> np.ndarray:
        """``margin`` with the rows of the target kinds the donor prices (:attr:`prior_offset_`) replaced by the
        donor's log prediction plus that kind's offset."""
        prior = getattr(self, "prior_", None)
        offsets = getattr(self, "prior_offset_", None) or {}
        rows = [i for i, t in enumerate(targets) if str(t) in offsets]
        if prior is None or not rows:
            return margin
        margin = np.array(margin, dtype=float)
        donor = prior._predict_log([recs[i] for i in rows], [str(targets[i]) for i in rows])
        margin[rows] = donor + np.array([offsets[str(targets[i])] for i in rows])
        return margin

    # -- fitting -------------------------------------------------------------------------------------
    def _fit(self, units: pd.DataFrame) -> None:
        import xgboost as xgb

        self.ops_ = (
            sorted({op for t in self.target_kinds_ for op in self.op_vocab_[t]}) if self.op_features else []
        )
        names = (
            feature_names() + [f"target={t}" for t in self.target_kinds_] + [f"op:{op}" for op in self.ops_]
        )
        drop = tuple(self.drop_features or ())
        self.feature_names_ = [n for n in names if not (drop and n.startswith(drop))]
        recs = [row for _, row in units.iterrows()]
        targets = [str(t) for t in units["target"]]
        y = np.log(units["median_us"].to_numpy(dtype=float))
        x = self._matrix(recs, targets)
        if self.base_margin == "work":
            self.offset_ = float(np.mean(y - np.log([_work(r) for r in recs])))
        else:
            self.offset_ = float(np.mean(y))
        self.call_floor_us_ = {} if self.call_floor is None else {
            str(kind): float(np.quantile(units.loc[units["target"] == kind, "median_us"].astype(float), self.call_floor))
            for kind in self.target_kinds_ if (units["target"] == kind).any()}
        self.prior_, self.prior_offset_ = None, {}
        if self.prior:
            self.prior_ = self._fit_prior(units)
            donor = self.prior_._predict_log(recs, targets) if self.prior_ is not None else None
            for kind in self.prior_.target_kinds_ if self.prior_ is not None else []:
                mine = np.array([t == kind for t in targets])
                if mine.any():
                    self.prior_offset_[kind] = float(np.mean(y[mine] - donor[mine]))
        # Long kernels decide end-to-end latency: weight each record by (1 + ln latency_us)^weight_by_time.
        weight = (1.0 + np.maximum(y, 0.0)) ** self.weight_by_time if self.weight_by_time else None
        dtrain = xgb.DMatrix(
            x, label=y, weight=weight, base_margin=self._margin(recs, targets), feature_names=self._xgb_names()
        )
        params = {
            "objective": "reg:squarederror",
            "eta": self.learning_rate,
            "max_depth": self.max_depth,
            "min_child_weight": self.min_child_weight,
            "subsample": self.subsample,
            "colsample_bytree": self.colsample_bytree,
            "lambda": self.reg_lambda,
            "seed": self.random_state,
            "nthread": self.n_jobs,
            "tree_method": "exact",
            "base_score": 0.0,
            "num_parallel_tree": self.num_parallel_tree,
        }
        if self.monotone:
            params["monotone_constraints"] = (
                "(" + ",".join(str(MONOTONE.get(n, 0)) for n in self.feature_names_) + ")"
            )
        self.booster_ = xgb.train(params, dtrain, num_boost_round=self.n_estimators)
        self.stream_floor_ = fit_stream_floor(units) if self.stream_floor else {}

    def _fit_prior(self, units: pd.DataFrame):
        """The donor's model for a fit on ``units``: this class with these parameters and no prior, trained on the
        donor profile's records (:attr:`prior`) less what :meth:`hold_out_of_prior` named, on their in-model times
        when ``units`` are in-model times (most of them priced at their ``in_model_median_us``); None, with a
        warning, when the donor has no kernel of ``units``' target kinds."""
        import warnings

        from .cost_model import training_units
        from .train import in_model_training_records

        donor = prior_records(self.prior)
        keys, families = getattr(self, "prior_holdout", (frozenset(), frozenset()))
        if keys or families:
            from .evaluate import family

            of_family = donor["model"].astype(str).map(family) if "model" in donor else pd.Series("", index=donor.index)
            held = of_family.isin(families) | ((donor["kind"] == "unit") & donor["key"].astype(str).isin(keys))
            donor = donor[~held]
        if _in_model_times(units):
            donor, _ = in_model_training_records(donor)
        donor_units = training_units(donor)
        kinds = sorted(set(units["target"].astype(str)))
        if not donor_units.empty:
            donor_units = donor_units[donor_units["target"].isin(kinds)]
        if donor_units.empty:  # (an evaluation of one target kind the donor never timed, say)
            warnings.warn(f"prior={self.prior!r}: that profile has no usable kernel records of {kinds} (timed on the "
                          "machine its metadata.json names, status ok): trained without the prior", stacklevel=3)
            return None
        params = dict(self.get_params(), prior=None)
        with warnings.catch_warnings():  # the donor's records are another machine's, by design
            warnings.simplefilter("ignore")
            return type(self)(**params).fit(donor_units, hardware_id=str(donor_units["hardware_id"].iloc[0])
                                            if "hardware_id" in donor_units else None)

    def _xgb_names(self) -> list[str]:
        # XGBoost forbids [, ] and < in feature names.
        return [n.replace("[", "(").replace("]", ")").replace("<", "lt") for n in self.feature_names_]

    def _predict_log(self, recs: list, targets: list[str]) -> np.ndarray:
        import xgboost as xgb

        x = self._matrix(recs, targets)
        dmat = xgb.DMatrix(x, base_margin=self._margin(recs, targets), feature_names=self._xgb_names())
        log_us = self.booster_.predict(dmat, output_margin=True).astype(float)
        floor_us, ceiling_us = stream_bounds_us(getattr(self, "stream_floor_", {}), recs, targets)
        log_us = np.where(ceiling_us > 0, np.minimum(log_us, np.log(np.maximum(ceiling_us, 1e-12))), log_us)
        return np.where(floor_us > 0, np.maximum(log_us, np.log(np.maximum(floor_us, 1e-12))), log_us)

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
            "call_floor_us": self.call_floor_us_,
            "stream_floor": self.stream_floor_,
            "prior": self.prior_.to_dict() if getattr(self, "prior_", None) is not None else None,
            "prior_offset": getattr(self, "prior_offset_", {}),
            "booster": json.loads(bytes(self.booster_.save_raw(raw_format="json")).decode("utf-8")),
        }

    def _from_state(self, state: dict) -> None:
        import json

        import xgboost as xgb

        self.feature_names_ = list(state["feature_names"])
        self.ops_ = [n[len("op:") :] for n in self.feature_names_ if n.startswith("op:")]
        self.offset_ = float(state["offset"])
        self.call_floor_us_ = state.get("call_floor_us") or {}  # absent in models saved before it: no floor
        self.stream_floor_ = state.get("stream_floor") or {}  # absent in models saved before it: no floor
        self.prior_ = type(self).from_dict(state["prior"]) if state.get("prior") else None
        self.prior_offset_ = dict(state.get("prior_offset") or {})
        booster = xgb.Booster()
        booster.load_model(bytearray(json.dumps(state["booster"]).encode("utf-8")))
        self.booster_ = booster


_PRIOR_RECORDS: dict = {}
_PRIOR_LOCK = threading.Lock()


def prior_records(folder: str) -> pd.DataFrame:
    """The records of the donor profile ``folder`` (:class:`~autoplace.profile.ProfileStore`: those of the machine
    its metadata names; read once per process and file version)."""
    import os
    import warnings

    from ..errors import AutoplaceError
    from ..profile import ProfileStore

    path = os.path.join(str(folder), "records.jsonl")
    if not os.path.isfile(path):
        raise AutoplaceError(f"prior={folder!r}: no profile there (no records.jsonl); give the folder of another "
                             "machine's profile, e.g. prior='profiles/intel-r-xeon-r-processor-f6m207-2c'")
    stat = os.stat(path)
    tag = (os.path.abspath(path), stat.st_mtime_ns, stat.st_size)
    with _PRIOR_LOCK:  # evaluation folds fit in threads
        if tag not in _PRIOR_RECORDS:
            _PRIOR_RECORDS.clear()
            with warnings.catch_warnings():  # another machine's folder, by design
                warnings.simplefilter("ignore")
                _PRIOR_RECORDS[tag] = ProfileStore(str(folder)).records()
        return _PRIOR_RECORDS[tag]


def _in_model_times(units: pd.DataFrame) -> bool:
    """Whether ``units`` are in-model times (:func:`~autoplace.cost_model.train.in_model_records`): most of the
    records with an in-model timing priced at it."""
    if "in_model_median_us" not in units:
        return False
    in_model = pd.to_numeric(units["in_model_median_us"], errors="coerce")
    timed = in_model > 0
    return bool(timed.any()) and bool((units.loc[timed, "median_us"].astype(float) == in_model[timed]).mean() > 0.5)
