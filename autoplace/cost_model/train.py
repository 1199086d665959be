"""Train a cost model from a profile folder and save it next to the profile (``autoplace train``)."""

from __future__ import annotations

import os

from ..errors import AutoplaceError
from .cost_model import CostModel, create

#: File name of the trained model inside a profile folder.
MODEL_FILE = "cost_model.json"


def default_model_path(profile_dir: str) -> str:
    """``<profile dir>/cost_model.json``: where a model trained on that profile is saved."""
    return os.path.join(profile_dir, MODEL_FILE)


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
    fitted.path_ = None
    if save:
        fitted.path_ = fitted.save(out or default_model_path(store.path))
    return fitted
