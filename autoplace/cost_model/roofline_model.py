"""A baseline cost model: per (target, anchor op class) power law of latency in work.

``log(latency_us) = a + b * log(work)`` fitted by least squares for each target kind and anchor op
class (matmul, conv, ...; see :data:`autoplace.cost_model.features.OP_CLASSES`), falling back to
the target's fit over all classes where a class has fewer than ``min_records`` records. It needs
no optional package, trains in milliseconds and is what the XGBoost model is compared with in the
evaluation (and a cheap stand-in in tests).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .cost_model import CostModel
from .features import op_class
from .features import work as _work


def _anchor_class(rec) -> str:
    try:
        return op_class(rec["anchor_op"])
    except (KeyError, TypeError, IndexError):
        return "other"


def _fit_line(x: np.ndarray, y: np.ndarray, slope_prior: float = 1.0) -> tuple[float, float]:
    """Least squares ``y = a + b x`` with a weak pull of ``b`` towards ``slope_prior`` (one-point safe)."""
    n = len(x)
    lam = 1.0
    xm, ym = x.mean(), y.mean()
    sxx = float(((x - xm) ** 2).sum())
    sxy = float(((x - xm) * (y - ym)).sum())
    b = (sxy + lam * slope_prior) / (sxx + lam) if n else slope_prior
    return float(ym - b * xm), float(b)


class RooflineCostModel(CostModel):
    """Per-op-class power law of latency in work (FLOPs).

    Parameters
    ----------
    min_records : int
        Classes with fewer training records use the target's all-class fit.
    random_state : int
        Unused (the fit is deterministic); kept for a uniform interface.

    Attributes
    ----------
    coefs_ : dict
        ``{"<target>/<class>": (a, b)}`` and ``{"<target>/*": (a, b)}``.
    """

    kind = "roofline"

    def __init__(self, min_records: int = 3, random_state: int = 0):
        self.min_records = min_records
        self.random_state = random_state

    def _fit(self, units: pd.DataFrame) -> None:
        x = np.log([_work(r) for _, r in units.iterrows()])
        y = np.log(units["median_us"].to_numpy(dtype=float))
        classes = np.array([_anchor_class(r) for _, r in units.iterrows()])
        targets = units["target"].astype(str).to_numpy()
        self.coefs_ = {}
        for tgt in self.target_kinds_:
            on = targets == tgt
            self.coefs_[f"{tgt}/*"] = _fit_line(x[on], y[on])
            for cls in sorted(set(classes[on])):
                sel = on & (classes == cls)
                if sel.sum() >= self.min_records:
                    self.coefs_[f"{tgt}/{cls}"] = _fit_line(x[sel], y[sel])

    def _predict_log(self, recs: list, targets: list[str]) -> np.ndarray:
        out = np.empty(len(recs))
        for i, (rec, tgt) in enumerate(zip(recs, targets)):
            a, b = self.coefs_.get(f"{tgt}/{_anchor_class(rec)}", self.coefs_[f"{tgt}/*"])
            out[i] = a + b * math.log(_work(rec))
        return out

    def _state(self) -> dict:
        return {"coefs": {k: list(v) for k, v in self.coefs_.items()}}

    def _from_state(self, state: dict) -> None:
        self.coefs_ = {k: (float(v[0]), float(v[1])) for k, v in state["coefs"].items()}
