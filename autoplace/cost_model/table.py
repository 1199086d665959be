"""Costs for the placement problem, lookup first: measured where profiled, predicted elsewhere.

A :class:`CostTable` answers the three questions a placement needs, each in microseconds:

* what a kernel costs on a target kind (:meth:`CostTable.unit_latency_us`): the profile's
  measurement for that kernel (same unit ``key`` and target) when there is one, else the cost
  model's prediction; the answer says which (``source``);
* what one kernel launch costs on a device (:meth:`CostTable.launch_us`), from ``kind="launch"``
  records;
* what a copy between two devices costs (:meth:`CostTable.copy_cost`), from the profiler's
  ``latency_us = alpha_us + nbytes * us_per_byte`` fit (``kind="copy_fit"``) for that device pair.
"""

from __future__ import annotations

import math
import os
import warnings

import numpy as np
import pandas as pd

from ..targets import kind_of_label
from .cost_model import CostModel, create, load
from .features import as_records, features_from_unit

#: ``source`` of a latency: the profile's measurement of this very kernel.
MEASURED = "measured"
#: ``source`` of a latency: predicted by the cost model; every fused op was seen in training.
PREDICTED = "predicted"
#: ``source`` of a latency: predicted, but the kernel fuses an op no training record had (less sure).
PREDICTED_UNSEEN_OP = "predicted-unseen-op"
#: ``source`` of a latency: the profile recorded that this kernel fails on the target (``inf``).
UNSUPPORTED = "unsupported"


def _records_frame(records) -> pd.DataFrame:
    if isinstance(records, pd.DataFrame):
        return records
    if isinstance(records, str) or hasattr(records, "records"):
        from ..profile import ProfileStore

        store = ProfileStore(records) if isinstance(records, str) else records
        return store.records()
    return pd.DataFrame(list(records))


class CostTable:
    """Lookup-first unit costs, launch overheads and copy costs from one profile.

    Parameters
    ----------
    records : pandas.DataFrame, list of dict, ProfileStore or str
        The profile's records (a store or its folder is read with ``ProfileStore.records()``).
    model : CostModel, str or None
        Prices kernels the profile did not measure: a fitted model, the path of a saved one, a model
        name (``"xgb"``, ``"roofline"``: trained here on ``records``), or None (then asking for an
        unmeasured kernel raises ``KeyError``).

    Examples
    --------
    >>> table = CostTable(ProfileStore("profiles/amd-epyc-2c").records(), model="xgb")  # doctest: +SKIP
    >>> table.unit_latency_us(record, "llvm")                                            # doctest: +SKIP
    (43.99, 'measured')
    >>> table.copy_us("llvm:0", "llvm:1", 4096)                                          # doctest: +SKIP
    3.1
    """

    def __init__(self, records, model: CostModel | str | None = None):
        df = _records_frame(records)
        self.records = df
        self.measured_: dict = {}
        self.unsupported_: dict = {}
        self.launch_: dict = {}
        self.invoke_: dict = {}
        self.per_arg_: dict = {}
        self.alloc_: dict = {}
        self.copy_: dict = {}
        if not df.empty and "kind" in df:
            status = df["status"] if "status" in df else pd.Series("ok", index=df.index)
            for (_, rec), st in zip(df[df["kind"] == "unit"].iterrows(), status[df["kind"] == "unit"]):
                tag = (str(rec["key"]), str(rec["target"]))
                us = rec.get("median_us")
                if st == "ok" and us is not None and np.isfinite(us) and us > 0:
                    self.measured_[tag] = float(us)
                    self.unsupported_.pop(tag, None)
                elif st != "ok" and tag not in self.measured_:
                    self.unsupported_[tag] = str(st)
            for _, rec in df[df["kind"] == "launch"].iterrows():
                if np.isfinite(rec.get("median_us", np.nan)):
                    self.launch_[str(rec["target"])] = float(rec["median_us"])
                    single = rec.get("single_call_us", np.nan)
                    if single is not None and np.isfinite(single):
                        self.invoke_[str(rec["target"])] = max(0.0, float(single) - float(rec["median_us"]))
                    for column, into in (("per_arg_us", self.per_arg_), ("alloc_us_per_byte", self.alloc_)):
                        value = rec.get(column, np.nan)
                        if value is not None and np.isfinite(value):
                            into[str(rec["target"])] = float(value)
            for _, rec in df[df["kind"] == "copy_fit"].iterrows():
                self.copy_[str(rec["target"])] = (float(rec["alpha_us"]), float(rec["us_per_byte"]))
        if isinstance(model, os.PathLike) or (isinstance(model, str) and model.endswith(".json")):
            model = load(os.fspath(model))
        elif isinstance(model, str):
            model = create(model).fit(df)
        _warn_foreign_model(model, df)
        self.model = model

    @classmethod
    def from_profile(cls, profile_dir: str, model: CostModel | str | None = "auto") -> CostTable:
        """The table of a profile folder, with its saved model (``<dir>/cost_model.json``).

        ``model="auto"``: the saved model if there is one, else an XGBoost model trained now.
        """
        from ..profile import ProfileStore
        from .train import default_model_path

        if model == "auto":
            path = default_model_path(profile_dir)
            model = path if os.path.exists(path) else "xgb"
        return cls(ProfileStore(profile_dir).records(), model=model)

    @classmethod
    def from_profiles(cls, profile_dirs, model: CostModel | str | None = "auto") -> CostTable:
        """One table over several profile folders (e.g. a CPU profile and a GPU box's profile).

        Records of every folder are read, including those measured on other hardware (the folders
        were chosen for the devices they measured, see :func:`autoplace.profile.find_profiles`).
        ``model="auto"``: the first saved model found among the folders (``<dir>/cost_model.json``),
        else an XGBoost model trained now on all the records (seconds).
        """
        from ..profile import ProfileStore
        from .train import default_model_path

        folders = [profile_dirs] if isinstance(profile_dirs, (str, os.PathLike)) else list(profile_dirs)
        frames = [ProfileStore(os.fspath(folder)).records(allow_foreign=True) for folder in folders]
        if model == "auto":
            saved = [default_model_path(f) for f in folders if os.path.exists(default_model_path(f))]
            model = saved[0] if saved else "xgb"
        return cls(pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(), model=model)

    def copy_costs(self, targets) -> dict:
        """``{(source name, destination name): (alpha_us, us_per_byte)}`` for every ordered pair of
        distinct targets of a :class:`~autoplace.targets.TargetSet`: the placement problem's copy costs."""
        return {(src, dst): self.copy_cost(targets[src].label, targets[dst].label)
                for src in targets for dst in targets if src != dst}

    def end_to_end_us(self, units, target_label: str, *, graph=None) -> float:
        """Predicted latency of a model built entirely on one device, in microseconds.

        Parameters
        ----------
        units : list of unit records or autoplace.profile.Unit
            The kernels the model launches, in order, with repeats (``extract_units``).
        target_label : str
            The device (``"llvm:0"``).
        graph : networkx.DiGraph, optional
            The op graph the Units come from.

        Notes
        -----
        ``invoke_us + len(units) * launch_us + sum of kernel latencies`` (each lookup first).
        """
        kind = kind_of_label(target_label)
        frame = self.latencies(list(units), kind, graph=graph)
        return (
            self.invoke_us(target_label, default=0.0)
            + len(frame) * self.launch_us(target_label, default=0.0)
            + float(frame["latency_us"].sum())
        )

    # -- kernels -------------------------------------------------------------------------------------
    def unit_latency_us(self, unit, target_kind: str | None = None, *, graph=None) -> tuple[float, str]:
        """Latency of one kernel and where it comes from.

        Parameters
        ----------
        unit : dict, pandas.Series or autoplace.profile.Unit
            A unit record (as the profiler writes it) or a Unit from ``extract_units``.
        target_kind : str, optional
            ``"llvm"``, ``"cuda"`` (or a label like ``"cuda:0"``). Default: the unit's own target.
        graph : networkx.DiGraph, optional
            For a Unit: the op graph it was extracted from (better features when predicted).

        Returns
        -------
        (latency_us, source)
            ``source`` is :data:`MEASURED`, :data:`PREDICTED`, :data:`PREDICTED_UNSEEN_OP` or
            :data:`UNSUPPORTED` (latency ``inf``: the profile saw this kernel fail on the target).

        Raises
        ------
        KeyError
            The kernel was not measured and the table has no cost model.
        """
        frame = self.latencies([unit], target_kind, graph=graph)
        return float(frame["latency_us"].iloc[0]), str(frame["source"].iloc[0])

    def latencies(self, units, target_kind: str | None = None, *, graph=None) -> pd.DataFrame:
        """:meth:`unit_latency_us` for many units at once (one model call).

        Returns
        -------
        pandas.DataFrame
            One row per unit: ``key``, ``target``, ``latency_us``, ``source``, ``unseen_ops``.
        """
        if isinstance(units, pd.DataFrame):
            recs = as_records(units)
        else:
            units = (
                [units] if (isinstance(units, (dict, pd.Series)) or hasattr(units, "prim_func")) else units
            )
            recs = [features_from_unit(u, graph) if hasattr(u, "prim_func") else u for u in units]
        rows, todo = [], []
        for i, rec in enumerate(recs):
            target = kind_of_label(target_kind) if target_kind else kind_of_label(rec.get("target", "") or "")
            key = str(rec.get("key", ""))
            row = dict(key=key, target=target, latency_us=math.nan, source="", unseen_ops=[])
            if (key, target) in self.measured_:
                row.update(latency_us=self.measured_[(key, target)], source=MEASURED)
            elif (key, target) in self.unsupported_:
                row.update(latency_us=math.inf, source=UNSUPPORTED)
            else:
                todo.append(i)
            rows.append(row)
        if todo:
            if self.model is None:
                missing = [rows[i]["key"] for i in todo[:3]]
                raise KeyError(
                    f"kernels {missing}{'...' if len(todo) > 3 else ''} were not measured and this "
                    "CostTable has no cost model: pass model='xgb' (or a trained model)"
                )
            sub = [recs[i] for i in todo]
            targets = [rows[i]["target"] for i in todo]
            lat = np.empty(len(todo))
            unseen = [None] * len(todo)
            for tgt in sorted(set(targets)):
                idx = [j for j, t in enumerate(targets) if t == tgt]
                part = [sub[j] for j in idx]
                lat[idx] = self.model.predict(part, target=tgt)
                for j, ops in zip(idx, self.model.unseen_ops(part, target=tgt)):
                    unseen[j] = ops
            for j, i in enumerate(todo):
                rows[i].update(
                    latency_us=float(lat[j]),
                    unseen_ops=unseen[j],
                    source=PREDICTED_UNSEEN_OP if unseen[j] else PREDICTED,
                )
        return pd.DataFrame(rows, columns=["key", "target", "latency_us", "source", "unseen_ops"])

    # -- launches and copies -------------------------------------------------------------------------
    def launch_us(self, target_label: str, default: float | None = None) -> float:
        """VM overhead of one kernel call on a device (``"llvm:0"``), in microseconds.

        A device without its own record takes the mean over devices of the same kind; with none of
        its kind either, ``default`` is returned if given, else ``KeyError`` is raised.
        """
        label = str(target_label)
        if label in self.launch_:
            return self.launch_[label]
        same = [v for k, v in self.launch_.items() if kind_of_label(k) == kind_of_label(label)]
        if same:
            return float(np.mean(same))
        if default is not None:
            return float(default)
        raise KeyError(
            f"no launch-overhead record for {label!r} (have {sorted(self.launch_)}); "
            "profile with copies enabled (autoplace profile without --no-copies)"
        )

    def invoke_us(self, target_label: str, default: float | None = None, *, num_args: int = 1,
                  output_bytes: int = 0) -> float:
        """Fixed VM cost of one call of a model's ``main`` on a device, in microseconds (besides its
        kernel launches): the launch record's ``single_call_us`` less one launch, plus ``per_arg_us``
        for each argument beyond the first and ``alloc_us_per_byte`` for the returned tensors (where
        the profile measured them). Same fallbacks as :meth:`launch_us`."""
        label = str(target_label)
        if label not in self.invoke_:
            same = sorted(k for k in self.invoke_ if kind_of_label(k) == kind_of_label(label))
            if not same:
                if default is not None:
                    return float(default)
                raise KeyError(f"no launch record with single_call_us for {label!r}; profile with copies enabled")
            label = same[0]
        extra = self.per_arg_.get(label, 0.0) * max(0, int(num_args) - 1)
        extra += self.alloc_.get(label, 0.0) * max(0, int(output_bytes))
        return self.invoke_[label] + extra

    def copy_cost(self, src_label: str, dst_label: str) -> tuple[float, float]:
        """``(alpha_us, us_per_byte)`` of copying from one device to another (``"llvm:0"``, ``"cuda:0"``).

        A copy to the same device is free. A pair without its own fit takes the mean of the fits
        between devices of the same kinds in the same direction; with none,
        :class:`~autoplace.errors.CopyCostError` (a ``CostError``, and a ``KeyError``) saying what to profile.
        """
        src, dst = str(src_label), str(dst_label)
        if src == dst:
            return 0.0, 0.0
        pair = f"{src}->{dst}"
        if pair in self.copy_:
            return self.copy_[pair]
        kinds = (kind_of_label(src), kind_of_label(dst))
        same = [
            v
            for k, v in self.copy_.items()
            if "->" in k and tuple(kind_of_label(p) for p in k.split("->", 1)) == kinds
        ]
        if same:
            return float(np.mean([a for a, _ in same])), float(np.mean([b for _, b in same]))
        import json

        from ..errors import CopyCostError
        from ..targets import TargetSet

        bases = ["cpu" if k == "llvm" else "gpu" if k == "cuda" else k for k in kinds]
        if bases[0] == bases[1]:  # two devices of one kind: {"cpu0": "llvm", "cpu1": "llvm"}
            bases = [f"{bases[0]}0", f"{bases[0]}1"]
        names = dict(zip(bases, kinds))  # a target dict that makes both devices
        spec = json.dumps(names)
        try:
            missing = TargetSet(names).unavailable()
        except Exception:
            missing = list(names)
        kinds_missing = " and ".join(sorted({names[n] for n in missing}))
        where = (f" on a machine with {kinds_missing} devices (this one cannot run {missing}; or build a "
                 "bundle here with --bundle, see experiments/gpu/README.md)" if missing
                 else " (this machine runs both)")
        have = f"copy fits for {sorted(self.copy_)}" if self.copy_ else "no copy measurements at all"
        raise CopyCostError(
            f"no copy fit for {pair}: the profile has {have}; it was probably measured with one target only. "
            f"Measure the copies between these devices{where}: "
            f"autoplace profile --zoo mlp --targets '{spec}' "
            "(kernels the profile already has are skipped: little more than the copies and the call overhead "
            "get measured), then run this again."
        )

    def copy_us(self, src_label: str, dst_label: str, nbytes: float) -> float:
        """Predicted time of one copy of ``nbytes`` bytes: ``alpha_us + nbytes * us_per_byte``."""
        alpha, per_byte = self.copy_cost(src_label, dst_label)
        return 0.0 if src_label == dst_label else alpha + float(nbytes) * per_byte

    def __repr__(self) -> str:
        return (
            f"CostTable({len(self.measured_)} measured kernels, {len(self.launch_)} launch records, "
            f"{len(self.copy_)} copy fits, model={type(self.model).__name__ if self.model else None})"
        )


def _warn_foreign_model(model: CostModel, df: pd.DataFrame) -> None:
    """Warn when a model was trained on other hardware than the records it is combined with."""
    if model is None or df.empty or "hardware_id" not in df:
        return
    ids = set(df["hardware_id"].dropna().astype(str))
    if ids and getattr(model, "hardware_id_", None) not in ids:
        from ..profile import ForeignProfileWarning

        warnings.warn(
            f"the cost model was trained on {model.hardware_id_!r} records but the table's profile is "
            f"from {sorted(ids)}",
            ForeignProfileWarning,
            stacklevel=3,
        )
