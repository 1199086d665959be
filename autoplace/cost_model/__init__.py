"""Cost model: turn profiles into latency predictions for any kernel on any profiled target.

Data flow: profile records (:mod:`autoplace.profile`) -> features of each fused kernel
(:mod:`.features`) -> a model of log latency (:class:`XGBCostModel`, or the
:class:`RooflineCostModel` baseline) -> a lookup-first :class:`CostTable` (measured where the
profile has the kernel, predicted elsewhere, with copy and launch costs) for the placement problem.

Examples
--------
>>> from autoplace.profile import ProfileStore
>>> from autoplace.cost_model import XGBCostModel, CostTable
>>> records = ProfileStore("profiles/amd-epyc-2c").records()          # doctest: +SKIP
>>> model = XGBCostModel(random_state=0).fit(records)                 # doctest: +SKIP
>>> model.save("profiles/amd-epyc-2c/cost_model.json")                # doctest: +SKIP
>>> table = CostTable(records, model=model)                           # doctest: +SKIP
>>> table.unit_latency_us(unit, "llvm")                               # doctest: +SKIP
(12.3, 'predicted')
"""

from .cost_model import (
    FORMAT_VERSION,
    CostModel,
    CostModelVersionError,
    UnknownTargetError,
    create,
    load,
    training_units,
)
from .features import FEATURE_VERSION, feature_names, features_from_unit, op_class, record_features
from .roofline_model import RooflineCostModel
from .table import (
    MEASURED,
    PREDICTED,
    PREDICTED_UNSEEN_OP,
    UNSUPPORTED,
    CostTable,
    bands_overlap,
    describe_band,
    plan_band,
)
from .train import default_model_path, train
from .xgb_model import XGBCostModel

__all__ = [
    "FEATURE_VERSION",
    "FORMAT_VERSION",
    "MEASURED",
    "PREDICTED",
    "PREDICTED_UNSEEN_OP",
    "UNSUPPORTED",
    "CostModel",
    "CostModelVersionError",
    "CostTable",
    "RooflineCostModel",
    "UnknownTargetError",
    "XGBCostModel",
    "bands_overlap",
    "create",
    "default_model_path",
    "describe_band",
    "feature_names",
    "features_from_unit",
    "load",
    "op_class",
    "plan_band",
    "record_features",
    "train",
    "training_units",
]
