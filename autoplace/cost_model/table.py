"""Costs for the placement problem, lookup first: measured where profiled, predicted elsewhere.

A :class:`CostTable` answers the three questions a placement needs, each in microseconds:

* what a kernel costs on a target kind (:meth:`CostTable.unit_latency_us`): the profile's
  measurement for that kernel (same unit ``key`` and target) when there is one, else the cost
  model's prediction; the answer says which (``source``);
* what one kernel launch costs on a device (:meth:`CostTable.launch_us`), and one call of a model's
  ``main`` (:meth:`CostTable.invoke_us`), from ``kind="launch"`` records (the profiler's probes),
  refitted to the profile's end-to-end ``kind="model"`` records where it has enough of them
  (:func:`fit_vm_overhead`);
* what a copy between two devices costs (:meth:`CostTable.copy_cost`), from the profiler's
  ``latency_us = alpha_us + nbytes * us_per_byte`` fit (``kind="copy_fit"``) for that device pair,
  its measured sizes (``kind="copy"``), and what handing work over costs beyond the copy where the profile
  measured it (``kind="handoff"``, ``handoff_us``: a GPU -> CPU copy that a CPU kernel waits for).

How sure the costs are
----------------------
Every kernel cost carries its ``source`` and an error band (:meth:`CostTable.latencies`:
``band_lo_us``, ``band_hi_us``): zero width for a measured kernel, the cost model's calibrated band
for a predicted one (nominal 80%, see :meth:`autoplace.cost_model.CostModel.calibrate`), NaN when the
model has no band table. :func:`plan_band` adds kernels up to a plan's latency with its band; how
per-kernel bands combine is :data:`BAND_COMBINE`, chosen by the held-out evaluation
(``python experiments/cost_model_eval.py --bands-only``, ``experiments/results/cost_model_bands.md``).
"""

from __future__ import annotations

import math
import os
import warnings

import numpy as np
import pandas as pd

from ..profile.cache_state import finite_or_zero, in_model_share, model_runs_in_model
from ..profile.rounds import fastest_round_indices
from ..targets import kind_of_label
from .cost_model import BAND_TABLE_VERSION, CostModel, create, load, record_op_class
from .features import as_records, features_from_unit

#: ``source`` of a latency: the profile's measurement of this very kernel.
MEASURED = "measured"
#: ``source`` of a latency: predicted by the cost model; every fused op was seen in training.
PREDICTED = "predicted"
#: ``source`` of a latency: predicted, but the kernel fuses an op no training record had (less sure).
PREDICTED_UNSEEN_OP = "predicted-unseen-op"
#: ``source`` of a latency: the profile recorded that this kernel fails on the target (``inf``).
UNSUPPORTED = "unsupported"

#: Columns of :meth:`CostTable.latencies`.
LATENCY_COLUMNS = ["key", "target", "latency_us", "source", "unseen_ops", "op_class", "band_lo_us", "band_hi_us",
                   "in_model", "in_model_share", "in_context", "weights_cold"]

#: Rules for adding per-kernel error bands up to a plan's band (:func:`plan_band`):
#:
#: ``"correlated"``  every kernel's error in one direction at once: the band is the sum of the kernels'
#:                   band ends (conservative: the widest);
#: ``"class"``       kernels of one (target kind, anchor op class) fully correlated (they share the cost
#:                   model's bias for that class), classes independent: per class the sum of the
#:                   kernels' distances to their band ends, then the root of the sum of squares over classes;
#: ``"independent"`` distinct kernels independent (repeats of one kernel still add up linearly): root of
#:                   the sum of squares over distinct kernels (the narrowest).
BAND_COMBINES = ("correlated", "class", "independent")
#: The rule :func:`plan_band` uses unless told otherwise: the one whose bands were calibrated when leaving
#: one model family out of the reference CPU profile (``python experiments/cost_model_eval.py --bands-only``,
#: ``experiments/results/cost_model_bands.md``, nested calibration, nominal 80%). On the profile of scheduled
#: CPU kernels (2026-11-23, 23 held-out models) ``"correlated"`` held the measured end to end of 78% of them
#: (sub-plans 92%), ``"class"`` 57% and ``"independent"`` only 17%: one model's kernel errors share a bias.
#: (On the earlier unscheduled profile, 10 models, ``"independent"`` had held 8 of 10.)
BAND_COMBINE = "correlated"


#: Edges of the warm-time bins (us) of the in-model factors (:meth:`CostTable.in_model_factor`).
IN_MODEL_BINS_US = (2.0, 5.0, 20.0, 100.0)
#: Measured kernels an op class needs in a bin for a factor of its own (else the bin's over every class).
IN_MODEL_MIN_KERNELS = 3

#: Edges of the bins of weight bytes per kernel of the weights' memory time per byte
#: (:meth:`CostTable.weights_cold_extra_us`). On the AMD Zen 3 (session 45, 685 kernels timed weights-cold) the
#: median memory time per weight KB is 173 ns for kernels of under 16 KB of weights (a few cache lines each: read
#: at a miss's latency, not streamed), 75 ns at 16-128 KB, 59 ns at 128 KB-1 MB, 42 ns at 1-4 MB and 7 ns over
#: 4 MB (already read from memory in-model); by FLOPs per weight byte it varies 63-112 ns with no order. Priced by
#: the bin of its own size, a measured kernel's weights-cold time is predicted from the others' with a mean |log
#: error| of 0.151, by FLOPs per weight byte 0.178, by one median over all 0.177.
WEIGHTS_COLD_BINS = (16 << 10, 128 << 10, 1 << 20, 4 << 20)
#: Measured kernels a bin needs for a memory time per weight byte of its own (else the median over every bin).
WEIGHTS_COLD_MIN_KERNELS = 3

#: End-to-end records of one target kind (with every kernel measured) needed before the VM's overhead
#: terms are fitted to them (:func:`fit_vm_overhead`) instead of taken from the probes alone.
MIN_OVERHEAD_RUNS = 8
#: Relative error beyond which an end-to-end record counts less in the overhead fit (a soft L1 loss: a
#: record timed while the machine was busy does not drag the fit).
OVERHEAD_FIT_SCALE = 0.02


def fit_vm_overhead(records: pd.DataFrame, kind: str, probe: dict, *, in_context: bool = False) -> dict | None:
    """The VM's overhead on a target kind, fitted to the profile's end-to-end records.

    A model built on one device takes ``invoke + calls * launch + (inputs - 1) * per_input + weights * per_arg +
    sum of its kernels`` (:func:`autoplace.cost_model.evaluate.end_to_end_us`; ``weights``: the arguments of
    ``main`` after its inputs). The profiler measures ``invoke``, ``launch`` and ``per_arg`` with small probe
    modules (``kind="launch"``); on the reference CPU profile their sum over-priced the small zoo models by 13-30%
    (0.19 us per argument where the models' own records say about 0.07): the probe's ``main`` takes inputs, and an
    input costs the VM several times what a weight does (Zen 5: 0.17-0.19 us against 0.028-0.037,
    ``experiments/vm_argument_cost.py``). So ``per_input`` is the probe's ``per_arg``, and this fits the other three
    terms to every ``kind="model"`` record of ``kind`` whose kernels are all measured (one input where a record
    does not say, ``num_inputs``), by least squares on the relative error with a soft L1 loss
    (:data:`OVERHEAD_FIT_SCALE`), each term >= 0, starting from the probes.

    Parameters
    ----------
    records : pandas.DataFrame
        Profile records (units and model records).
    kind : str
        Target kind (``"llvm"``).
    probe : dict
        ``invoke_us``, ``launch_us``, ``per_arg_us``, ``alloc_us_per_byte`` from the probes.
    in_context : bool
        Fit the overhead left besides the kernels timed inside the model (each record's ``in_context_us``,
        :mod:`autoplace.profile.in_context`): what a model priced by its in-context times adds. Only the records
        that carry them count.

    Returns
    -------
    dict or None
        ``invoke_us``, ``launch_us``, ``per_arg_us`` (a weight), ``per_input_us`` (the probe's), ``runs`` (records
        fitted); None with fewer than
        :data:`MIN_OVERHEAD_RUNS` usable records or fewer than 3 that launch several kernels.
    """
    import scipy.optimize

    from ..profile.in_context import IN_CONTEXT_TIMING
    from .evaluate import model_runs

    if records.empty or "kind" not in records or "unit_keys" not in records:
        return None
    units = records[(records["kind"] == "unit") & (records["target"] == kind)]
    if "status" in units:
        units = units[units["status"] == "ok"]
    measured = dict(zip(units["key"].astype(str), units["median_us"].astype(float)))
    in_model, l2 = in_model_times(units)
    read = [c for c in ("key", "weight_bytes", "bytes_out") if c in units]
    by_key = {str(r["key"]): r for r in units[read].to_dict("records")} if in_model else {}
    per_input = max(0.0, float(probe.get("per_arg_us", 0.0)))
    rows = []
    for _, run in model_runs(records, kind).iterrows():
        keys = run.get("unit_keys")
        e2e, args, inputs = run.get("median_us"), run.get("num_args"), run.get("num_inputs")
        if not (np.isfinite(e2e) and e2e > 0 and args is not None and np.isfinite(args)):
            continue
        inputs = int(inputs) if inputs is not None and np.isfinite(inputs) else 1
        inputs_us = per_input * max(0, min(inputs, int(args)) - 1)  # the probe's cost of each input after the first
        weights = max(0.0, float(args) - max(1, inputs))
        out_bytes = run.get("output_bytes", 0)
        out_bytes = float(out_bytes) if out_bytes is not None and np.isfinite(out_bytes) else 0.0
        alloc_us = probe.get("alloc_us_per_byte", 0.0) * out_bytes
        if in_context:
            times = run.get("in_context_us")
            if run.get("in_context_timing") != IN_CONTEXT_TIMING:
                continue
            if not isinstance(keys, list) or not keys or not isinstance(times, list) or len(times) != len(keys):
                continue
            rows.append((float(e2e), float(np.sum(times)) + alloc_us + inputs_us, len(keys), weights))
            continue
        if not isinstance(keys, list) or not keys or any(str(k) not in measured for k in keys):
            continue
        times = measured
        share = in_model_share([by_key[str(k)] for k in keys], l2) if in_model else 0.0
        if share > 0:  # as the cost table prices it
            times = {k: us + share * (in_model.get(k, us) - us) for k, us in measured.items()}
        kernels = sum(times[str(k)] for k in keys) + alloc_us + inputs_us
        rows.append((float(e2e), kernels, len(keys), weights))
    if len(rows) < MIN_OVERHEAD_RUNS or sum(r[2] > 1 for r in rows) < 3:
        return None
    e2e, kernels, calls, extra_args = (np.array(c, dtype=float) for c in zip(*rows))
    design = np.stack([np.ones_like(calls), calls, extra_args], axis=1)

    def relative_error(terms):
        return (kernels + design @ terms) / e2e - 1.0

    start = np.array([probe.get("invoke_us", 0.0), probe.get("launch_us", 0.0), probe.get("per_arg_us", 0.0)])
    fit = scipy.optimize.least_squares(relative_error, np.clip(start, 0.0, None), bounds=(0.0, np.inf),
                                       loss="soft_l1", f_scale=OVERHEAD_FIT_SCALE)
    invoke, launch, per_arg = (float(v) for v in fit.x)
    return dict(invoke_us=invoke, launch_us=launch, per_arg_us=per_arg, per_input_us=per_input, runs=len(rows))


def _arguments_us(fit: dict, num_args: int, num_inputs: int) -> float:
    """What a fitted overhead (:func:`fit_vm_overhead`) adds for ``main``'s arguments after the first: each input
    after the first the probe's cost, each weight the fitted one."""
    inputs = max(1, min(int(num_inputs), int(num_args)))
    return (fit.get("per_input_us", fit["per_arg_us"]) * (inputs - 1)
            + fit["per_arg_us"] * max(0, int(num_args) - inputs))


def in_model_times(units: pd.DataFrame) -> tuple[dict, int | None]:
    """``({key: in_model_median_us}, L2 bytes)`` of unit records that were timed in-model
    (:mod:`autoplace.profile.cache_state`); ``({}, None)`` when none was."""
    if "in_model_median_us" not in units:
        return {}, None
    timed = units[pd.to_numeric(units["in_model_median_us"], errors="coerce") > 0]
    if timed.empty:
        return {}, None
    l2 = pd.to_numeric(timed.get("l2_bytes"), errors="coerce").max() if "l2_bytes" in timed else np.nan
    return (dict(zip(timed["key"].astype(str), timed["in_model_median_us"].astype(float))),
            int(l2) if np.isfinite(l2) else None)


def weights_cold_times(units: pd.DataFrame) -> dict:
    """``{key: weights_cold_median_us}`` of unit records timed weights-cold (kernels with weights)."""
    if "weights_cold_median_us" not in units:
        return {}
    timed = units[pd.to_numeric(units["weights_cold_median_us"], errors="coerce") > 0]
    return dict(zip(timed["key"].astype(str), timed["weights_cold_median_us"].astype(float)))


def _times_of(times, n: int) -> bool:
    """Whether ``times`` is a list of ``n`` finite, non-negative in-context times."""
    return isinstance(times, list) and len(times) == n and all(
        t is not None and np.isfinite(t) and t >= 0 for t in times)


def _a_time(value) -> bool:
    """Whether ``value`` is a finite, positive time (a record's field may be None, NaN or missing)."""
    try:
        return value is not None and bool(np.isfinite(float(value))) and float(value) > 0
    except (TypeError, ValueError):
        return False


def _context_tag(units, target_kind: str) -> tuple:
    """``(kind, unit keys in launch order)``: how in-context times are looked up (:attr:`CostTable.in_context_`)."""
    if isinstance(units, pd.DataFrame):
        units = [row for _, row in units.iterrows()]
    keys = tuple(str(u.key if hasattr(u, "prim_func") else u.get("key", "")) for u in units)
    return kind_of_label(target_kind), keys


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
        name (``"xgb"``, ``"roofline"``: trained and calibrated here on ``records``, one fit per model
        family), or None (then asking for an unmeasured kernel raises ``KeyError``).
    in_model_model : CostModel, str or None
        Prices the kernels the profile did not measure in a model priced in-model (:meth:`runs_in_model`): a
        model fitted on in-model times (:func:`~autoplace.cost_model.train.in_model_records`), the path of a
        saved one, or None: then ``model``'s prediction times :meth:`in_model_factor`.

    Examples
    --------
    >>> table = CostTable(ProfileStore("profiles/amd-epyc-2c").records(), model="xgb")  # doctest: +SKIP
    >>> table.unit_latency_us(record, "llvm")                                            # doctest: +SKIP
    (43.99, 'measured')
    >>> table.copy_us("llvm:0", "llvm:1", 4096)                                          # doctest: +SKIP
    3.1
    """

    def __init__(self, records, model: CostModel | str | None = None, in_model_model: CostModel | str | None = None):
        df = _records_frame(records)
        self.records = df
        self.measured_: dict = {}
        #: ``{(key, kind): us}``: the kernel timed as a model larger than the L2 runs it (``in_model_median_us``).
        self.measured_in_model_: dict = {}
        #: ``{kind: bytes}``: the L2 of the cores that timed the kernels in-model (all of them together).
        self.l2_bytes_: dict = {}
        #: ``{(kind, op class or None, warm-time bin): median in-model / warm time}`` of the measured kernels timed
        #: in-model: what a predicted (warm) kernel is scaled by in a model that runs in-model
        #: (:meth:`in_model_factor`).
        self.in_model_factor_: dict = {}
        #: ``{(key, kind): us}``: a kernel with weights timed in-model with its weights flushed from every cache
        #: (``weights_cold_median_us``): as a model whose weights outgrow the caches runs it.
        self.measured_weights_cold_: dict = {}
        #: ``{(kind, FLOPs-per-weight-byte bin or None): us per weight byte}``: the median of (weights-cold -
        #: in-model time) / weight bytes over the measured kernels (:meth:`weights_cold_extra_us`).
        self.weights_cold_per_byte_: dict = {}
        #: ``{kind: bytes}``: bytes per call (every launch's weights and output, :meth:`bytes_per_call`) above which a
        #: model is priced weights-cold (:meth:`runs_weights_cold`), where the profile's models say so
        #: (:meth:`_fit_weights_line`).
        self.weights_line_: dict = {}
        #: ``{(key, kind): us}``: a measured kernel timed in context inside the profile's models that run in-model
        #: (:func:`~autoplace.cost_model.train.in_context_times`: its median over them, less its weights' memory
        #: time in those priced weights-cold): what it costs in another model that runs in-model, in place of its
        #: in-model time (:meth:`latencies`).
        self.in_context_elsewhere_: dict = {}
        #: ``{(kind, unit keys in launch order): [us per launch]}``: a model's kernels timed inside its runs
        #: (``in_context_us`` of ``model`` and ``context`` records, :mod:`autoplace.profile.in_context`).
        self.in_context_: dict = {}
        #: ``{(kind, unit keys)}`` of every model timed in context the current way, with or without success (a
        #: build whose calls do not match its units): what ``measure="auto"`` need not try again.
        self.in_context_tried_: set = set()
        #: ``{(kind, unit keys in launch order): us}``: the end-to-end latency of the build whose kernels
        #: :attr:`in_context_` has, timed without the hook in the same samples (``in_context_wall_us``): the median
        #: over the rounds kept (:meth:`in_context_times` scales the kernels' times to it).
        self.in_context_wall_: dict = {}
        self.unsupported_: dict = {}
        self.launch_: dict = {}
        self.invoke_: dict = {}
        self.per_arg_: dict = {}
        self.alloc_: dict = {}
        self.copy_: dict = {}
        #: ``{"src->dst": [(bytes, us), ...]}``: the copies measured size by size (priced between them, not by the fit).
        self.copy_points_: dict = {}
        #: ``{"src kind->dst kind": (us, us per byte)}``: a copy's hand-off (:attr:`autoplace.solve.problem.CopyCost.handoff_us`,
        #: ``handoff_us_per_byte``).
        self.handoff_: dict = {}
        #: ``{device label: fit_vm_overhead(...)}`` where the end-to-end records replaced the probes.
        self.overhead_fit_: dict = {}
        #: ``{device label: fit_vm_overhead(..., in_context=True)}``: the VM's overhead besides kernels timed in
        #: context (:meth:`launch_us` and :meth:`invoke_us` with ``in_context=True``).
        self.overhead_fit_in_context_: dict = {}
        if not df.empty and "kind" in df:
            status = df["status"] if "status" in df else pd.Series("ok", index=df.index)
            is_unit = df["kind"] == "unit"
            read = [c for c in ("key", "target", "median_us", "in_model_median_us", "l2_bytes", "weights_cold_median_us")
                    if c in df]
            for rec, st in zip(df.loc[is_unit, read].to_dict("records"), status[is_unit]):
                tag = (str(rec["key"]), str(rec["target"]))
                us = rec.get("median_us")
                if st == "ok" and us is not None and np.isfinite(us) and us > 0:
                    self.measured_[tag] = float(us)
                    self.unsupported_.pop(tag, None)
                    in_model = rec.get("in_model_median_us")
                    if in_model is not None and np.isfinite(in_model) and in_model > 0:
                        self.measured_in_model_[tag] = float(in_model)
                        l2 = rec.get("l2_bytes")
                        if l2 is not None and np.isfinite(l2):
                            self.l2_bytes_[tag[1]] = int(l2)
                    else:
                        self.measured_in_model_.pop(tag, None)
                    cold = rec.get("weights_cold_median_us")
                    if cold is not None and np.isfinite(cold) and cold > 0 and tag in self.measured_in_model_:
                        self.measured_weights_cold_[tag] = float(cold)
                    else:
                        self.measured_weights_cold_.pop(tag, None)
                elif st != "ok" and tag not in self.measured_:
                    self.unsupported_[tag] = str(st)
            self._fit_in_model_factors(df)
            self._read_in_context(df)
            launches = df[df["kind"] == "launch"]
            if "measured_at" in launches:  # each label's newest probe last (it wins)
                launches = launches.sort_values("measured_at", kind="stable", na_position="first")
            for _, rec in launches.iterrows():
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
            copies = df[(df["kind"] == "copy") & (status == "ok")] if "nbytes" in df else df.iloc[:0]
            for label, rows in copies.groupby("target"):  # each size's median over the profile's records of it
                sizes = rows.groupby("nbytes")["median_us"].median()
                self.copy_points_[str(label)] = list(zip(sizes.index.astype(float), sizes.to_numpy(dtype=float)))
            if "handoff_us" in df:  # per pair of kinds ("cuda->llvm"): its newest record (later probes, more sizes)
                handoffs = df[(df["kind"] == "handoff") & (status == "ok")]
                for _, rec in handoffs.iterrows():
                    per_byte = rec.get("handoff_us_per_byte", 0.0)
                    per_byte = float(per_byte) if per_byte is not None and np.isfinite(per_byte) else 0.0
                    self.handoff_[str(rec["target"])] = (float(rec["handoff_us"]), per_byte)
            self._fit_overheads(df)
            self._fit_weights_cold(df)
            self._read_in_context_elsewhere(df)
        if isinstance(model, os.PathLike) or (isinstance(model, str) and model.endswith(".json")):
            model = load(os.fspath(model))
        elif isinstance(model, str):
            model = create(model).fit(df).calibrate(df)  # calibrated: its predictions carry bands
        _warn_foreign_model(model, df)
        self.model = model
        if isinstance(in_model_model, (str, os.PathLike)):
            in_model_model = load(os.fspath(in_model_model))
        self.in_model_model = in_model_model

    def _fit_in_model_factors(self, df: pd.DataFrame) -> None:
        """:attr:`in_model_factor_` from the measured kernels timed in-model: the median ratio per target kind,
        op class and warm-time bin (:data:`IN_MODEL_BINS_US`), and per kind and bin over every class."""
        ratios: dict = {}
        read = [c for c in ("key", "target", "anchor_op", "ops", "func_name") if c in df]
        for rec in df.loc[df["kind"] == "unit", read].to_dict("records"):
            tag = (str(rec["key"]), str(rec["target"]))
            if tag in self.measured_in_model_:
                ratio = self.measured_in_model_[tag] / self.measured_[tag]
                time_bin = int(np.searchsorted(IN_MODEL_BINS_US, self.measured_[tag]))
                for group in ((tag[1], record_op_class(rec), time_bin), (tag[1], None, time_bin)):
                    ratios.setdefault(group, {})[tag[0]] = ratio
        self.in_model_factor_ = {group: float(np.median(list(r.values()))) for group, r in ratios.items()
                                 if group[1] is None or len(r) >= IN_MODEL_MIN_KERNELS}

    def _fit_weights_cold(self, df: pd.DataFrame) -> None:
        """:attr:`weights_cold_per_byte_` from the measured kernels timed weights-cold, then
        :attr:`weights_line_` (:meth:`_fit_weights_line`)."""
        if not self.measured_weights_cold_:
            return
        per_byte: dict = {}
        read = [c for c in ("key", "target", "weight_bytes") if c in df]
        for rec in df.loc[df["kind"] == "unit", read].to_dict("records"):
            tag = (str(rec["key"]), str(rec["target"]))
            weights = finite_or_zero(rec.get("weight_bytes"))
            if tag not in self.measured_weights_cold_ or weights <= 0:
                continue
            extra = max(0.0, self.measured_weights_cold_[tag] - self.measured_in_model_[tag]) / weights
            for group in ((tag[1], _weights_bin(weights)), (tag[1], None)):
                per_byte.setdefault(group, {})[tag[0]] = extra
        self.weights_cold_per_byte_ = {group: float(np.median(list(v.values()))) for group, v in per_byte.items()
                                       if group[1] is None or len(v) >= WEIGHTS_COLD_MIN_KERNELS}
        self._fit_weights_line(df)

    def _read_in_context_elsewhere(self, df: pd.DataFrame) -> None:
        """:attr:`in_context_elsewhere_` of the measured kernels timed in-model.

        A kernel runs slower inside a model than alone, even after an eviction of the L2 (in-model) or of its
        weights (weights-cold): on the AMD Zen 3 the matmuls of bert-base, gpt2-base and llama-base took 1.16,
        1.17 and 1.05x their weights-cold times in context (session 47). The model of in-model times learns
        from these times (:func:`~autoplace.cost_model.train.in_model_records`); a measured kernel is priced by
        them too, where another model launched it: priced so without their own end-to-end records, the Zen 3's
        eight base transformers that share kernels with others summed -13.4..+4.0% of their end-to-end times,
        against -23.9..-5.5% by their kernels' own timings (16 of its 17 base models within 15%, against 13); the
        AMD Zen 4's -8.9..+2.1%, against -14.1..-5.5% (median error of its 17 base models 4.1%, against 7.2%)
        (``experiments/in_context_elsewhere.py``). Scaling the other measured kernels by their op class's
        in-context / in-model ratio as well (1.02-1.15, median or time-weighted) helped the Zen 3 (median error
        8.8% -> 5.8%) and not the Zen 4 (4.1% -> 4.8-5.4%: its CNNs and mlp-base went +12-14% over): not done."""
        from .train import in_context_times

        self.in_context_elsewhere_ = {(key, kind): us for (kind, key), us in
                                      in_context_times(df, weights_line=self.weights_line_).items()
                                      if (key, kind) in self.measured_in_model_}

    def _fit_weights_line(self, df: pd.DataFrame) -> None:
        """:attr:`weights_line_`: per target kind, the bytes per call (:meth:`bytes_per_call`: every launch's
        weights and output) that best separates the profile's models priced right in-model from those priced
        right weights-cold.

        Which cache keeps a model's weights from one call to the next is the host's (its L3, what other tenants
        leave of it): on the AMD Zen 3, resnet-base's and convnext-base's kernels (2.8 and 4.7 MB of weights per
        call) summed weights-cold to +49% and +46% of their end-to-end times, in-model to +20% and -2%;
        swin-base's and vit-base's (5.1 and 12.9 MB) weights-cold to +0.1% and +6.0%, in-model to -17% and
        -20% (session 43). What evicts a weight before the next call reads it is everything the call passes
        through the caches, its activations too: a line on weights alone fell anywhere from 3.8 to 6.4 MB as one
        of the Zen 3's 17 models was left out (convnext-base's 4.7 MB priced weights-cold without its own record,
        +28%), one on bytes per call between 9.1 and 11.6 MB (11.15 with all; convnext-base's 6.1 MB per call
        priced in-model without its record, -14%; session 47, ``experiments/weights_line_loo.py``). Over the
        models with an end-to-end record whose kernels were all timed both ways (and which run in-model), the line
        is the one that minimises the sum of their absolute log errors (kernel sums plus the VM's overheads), put
        halfway (geometrically) between the two models it falls between; no line (nothing priced weights-cold) when
        no model above it is priced better so.
        """
        if "unit_keys" not in df:
            return
        from ..profile.cache_state import bytes_per_call

        units = df[df["kind"] == "unit"]
        weight_of = {(str(k), str(t)): finite_or_zero(w) for k, t, w in
                     zip(units["key"], units["target"], units.get("weight_bytes", pd.Series(0, index=units.index)))}
        out_of = {(str(k), str(t)): finite_or_zero(b) for k, t, b in
                  zip(units["key"], units["target"], units.get("bytes_out", pd.Series(0, index=units.index)))}
        runs = df[(df["kind"] == "model") & (df.get("status", "ok") == "ok")]
        runs = runs.drop_duplicates(subset=["target", "key"], keep="last") if "key" in runs else runs  # the newest
        points: dict = {}  # kind -> [(bytes per call, in-model sum + fixed, cold sum + fixed, end to end)]
        for rec in runs[["target", "unit_keys", "median_us"]].to_dict("records"):
            kind, keys, e2e = str(rec["target"]), rec.get("unit_keys"), finite_or_zero(rec.get("median_us"))
            if not isinstance(keys, list) or len(keys) < 2 or e2e <= 0 or kind not in self.l2_bytes_:
                continue
            tags = [(str(k), kind) for k in keys]
            if not all(t in self.measured_in_model_ for t in tags):
                continue
            heavy = [t for t in tags if weight_of.get(t, 0.0) > 0]
            if not heavy or not all(t in self.measured_weights_cold_ for t in heavy):
                continue
            as_units = [dict(key=t[0], weight_bytes=weight_of.get(t, 0.0), bytes_out=out_of.get(t, 0.0)) for t in tags]
            if not model_runs_in_model(as_units, self.l2_bytes_[kind]):
                continue
            label = f"{kind}:0"
            fixed = self.invoke_us(label, default=0.0) + len(tags) * self.launch_us(label, default=0.0)
            in_model = fixed + sum(self.measured_in_model_[t] for t in tags)
            cold = fixed + sum(self.measured_weights_cold_.get(t, self.measured_in_model_[t]) for t in tags)
            points.setdefault(kind, []).append((bytes_per_call(as_units), in_model, cold, e2e))
        for kind, pts in points.items():
            pts.sort()
            per_call = [p[0] for p in pts]
            best, best_cost = len(pts), None  # the first model priced weights-cold; len(pts): none
            for first in range(len(pts), -1, -1):  # ties: the higher line (fewer models priced weights-cold)
                if 0 < first < len(pts) and per_call[first - 1] >= per_call[first]:
                    continue  # no line falls between two models of the same bytes per call
                cost = sum(abs(math.log((p[2] if i >= first else p[1]) / p[3])) for i, p in enumerate(pts))
                if best_cost is None or cost < best_cost - 1e-12:
                    best, best_cost = first, cost
            if best < len(pts):
                below = per_call[best - 1] if best > 0 else per_call[0] / 2
                self.weights_line_[kind] = float(math.sqrt(max(below, 1.0) * per_call[best]))

    def weights_per_call(self, units) -> float:
        """Bytes of weights one call of a model of these kernels (all of them, in launch order, with repeats)
        reads: every launch's weights (each layer's are its own)."""
        return float(sum(finite_or_zero(r.get("weight_bytes")) for r in as_records(list(units))))

    def bytes_per_call(self, units) -> float:
        """Bytes one call of a model of these kernels (all of them, in launch order, with repeats) passes through
        the caches: every launch's weights and output (:func:`~autoplace.profile.cache_state.bytes_per_call`)."""
        from ..profile.cache_state import bytes_per_call

        return float(bytes_per_call(as_records(units) if isinstance(units, pd.DataFrame) else list(units)))

    def runs_weights_cold(self, units, target_kind: str) -> bool:
        """Whether a model of these kernels is priced weights-cold on a target kind: it runs in-model
        (:meth:`runs_in_model`) and passes more bytes per call through the caches (:meth:`bytes_per_call`) than
        the profile's line (:attr:`weights_line_`; False without one)."""
        kind = kind_of_label(target_kind)
        units = list(units)
        return (kind in self.weights_line_ and self.runs_in_model(units, kind)
                and self.bytes_per_call(units) > self.weights_line_[kind])

    def weights_cold_extra_us(self, target_kind: str, record) -> float:
        """What reading its weights from memory adds to a kernel's in-model time when the profile has no
        weights-cold timing of it: its weight bytes times the measured kernels' median memory time per weight
        byte in its bin of weight bytes (:data:`WEIGHTS_COLD_BINS`; over every bin when its own has fewer than
        :data:`WEIGHTS_COLD_MIN_KERNELS` kernels); 0 without weights or weights-cold timings."""
        kind = kind_of_label(target_kind)
        weights = finite_or_zero(record.get("weight_bytes"))
        if weights <= 0:
            return 0.0
        per_byte = self.weights_cold_per_byte_.get((kind, _weights_bin(weights)),
                                                   self.weights_cold_per_byte_.get((kind, None), 0.0))
        return weights * per_byte

    def _read_in_context(self, df: pd.DataFrame) -> None:
        """:attr:`in_context_` from the ``model`` and ``context`` records that carry ``in_context_us`` timed the
        current way (:data:`~autoplace.profile.in_context.IN_CONTEXT_TIMING`; older ones are timed again).

        The records of one model's kernels (a profile's, and ``measure="auto"``'s in the user's folder) are rounds
        of one timing: per kernel, the median over the rounds of every record whose sums are within 10% of the
        fastest sum (:func:`autoplace.profile.rounds.fastest_rounds`, as a profile job merges a record's rounds). A
        record timed in a slow phase of the host no longer overrides a calm one for being newer: on the Zen 5 the
        demo priced cnn-base by the user folder's in-context times of the day before, 2436 us (three rounds of
        2431-2445, the cores likely apart before the sharing canary existed), the profile's were 2001 us, and the
        plan ran 2024 (session 50). A record of ``measure="always"`` (``in_context_fresh``) drops the rounds
        before it: the user asked for the times of now."""
        from ..profile.in_context import IN_CONTEXT_TIMING

        if "in_context_timing" not in df:
            return
        read = [c for c in ("target", "unit_keys", "in_context_us", "in_context_timing", "round_in_context_us",
                            "in_context_fresh", "in_context_wall_us", "round_in_context_wall_us") if c in df]
        rounds = {}  # {tag: {round as a tuple: its time without the hook or None}}: a round counts once (a job's
        # record repeats the rounds of the records before it; the optimizer reads the store of its new records twice)
        for rec in df.loc[df["kind"].isin(["model", "context"]), read].to_dict("records"):
            keys, times = rec.get("unit_keys"), rec.get("in_context_us")
            if rec.get("in_context_timing") != IN_CONTEXT_TIMING or not isinstance(keys, list) or not keys:
                continue
            tag = (str(rec["target"]), tuple(str(k) for k in keys))
            self.in_context_tried_.add(tag)
            if not _times_of(times, len(keys)):
                continue
            earlier, walls = rec.get("round_in_context_us"), rec.get("round_in_context_wall_us")
            own = [r for r in (earlier if isinstance(earlier, list) else []) if _times_of(r, len(keys))]
            if own and isinstance(walls, list) and len(walls) == len(own):
                own = list(zip(own, walls))
            else:
                own = [(r, None) for r in own] or [(times, rec.get("in_context_wall_us"))]
            if rec.get("in_context_fresh") is True:
                rounds[tag] = {}
            taken = rounds.setdefault(tag, {})
            for r, wall in own:
                r = tuple(float(t) for t in r)
                if taken.get(r) is None:
                    taken[r] = float(wall) if _a_time(wall) else None
        for tag, taken in rounds.items():
            walls = list(taken.values())
            taken = [list(r) for r in taken]
            kept = fastest_round_indices([sum(r) for r in taken])
            self.in_context_[tag] = [float(v) for v in np.median(np.array([taken[i] for i in kept]), axis=0)]
            kept_walls = [walls[i] for i in kept if walls[i] is not None]
            if kept_walls:
                self.in_context_wall_[tag] = float(np.median(kept_walls))

    def in_context_times(self, units, target_kind: str) -> list | None:
        """The in-context times of a model's kernels (all of them, in launch order) on a target kind, None when
        no record has them.

        Where the records also timed the build without the hook (:attr:`in_context_wall_`), the times are shares of
        that latency: scaled to add up to it less the VM's overhead besides in-context times (:meth:`invoke_us` and
        :meth:`launch_us` with ``in_context=True``), so that the model built on that target is priced at the
        latency it ran at. A reading's hook costs about as much as a small kernel (0.35 us and more on the Xeon,
        :mod:`autoplace.profile.in_context`), so for a model of many small kernels a 10% error in the hook's cost
        is 4-9% of the model (swin-base, mobilenetv2-base on the Zen 5, session 51); its time without the hook
        has no such error."""
        tag = _context_tag(units, target_kind)
        times, wall = self.in_context_.get(tag), self.in_context_wall_.get(tag)
        if times is None or wall is None:
            return times
        kind = kind_of_label(target_kind)
        labels = sorted({label for label in [*self.overhead_fit_in_context_, *self.invoke_]
                         if kind_of_label(label) == kind})  # as _fixed_us adds them
        fixed = float(np.mean([self.invoke_us(label, default=0.0, in_context=True)
                               + len(times) * self.launch_us(label, default=0.0, in_context=True)
                               for label in labels])) if labels else 0.0
        total = float(sum(times))
        if total <= 0 or wall - fixed <= 0:
            return times
        return [t * (wall - fixed) / total for t in times]

    def in_context_tried(self, units, target_kind: str) -> bool:
        """Whether a model of these kernels was timed in context on a target kind the current way, even if it
        failed (:attr:`in_context_tried_`)."""
        return _context_tag(units, target_kind) in self.in_context_tried_

    def runs_in_model(self, units, target_kind: str) -> bool:
        """Whether a model of these kernels (all of them, in launch order) is priced in-model on a target kind:
        it touches more bytes per call than the L2 that timed its kernels and launches more than one kernel
        (:func:`~autoplace.profile.cache_state.model_runs_in_model`). False when the profile has no
        in-model timing for that kind."""
        kind = kind_of_label(target_kind)
        return kind in self.l2_bytes_ and model_runs_in_model(as_records(list(units)), self.l2_bytes_[kind])

    def in_model_share(self, units, target_kind: str) -> float:
        """The share of its kernels' in-model excess over their warm times that a model of these kernels (all of
        them, in launch order) pays on a target kind: ``1 - L2 / touched bytes`` where it :meth:`runs_in_model`,
        0 elsewhere (:func:`~autoplace.profile.cache_state.in_model_share`)."""
        kind = kind_of_label(target_kind)
        return in_model_share(as_records(list(units)), self.l2_bytes_[kind]) if kind in self.l2_bytes_ else 0.0

    def _fit_overheads(self, df: pd.DataFrame) -> None:
        """Replace the probed VM overheads with :func:`fit_vm_overhead`, once per target kind (the end-to-end
        records say nothing about which device of a kind ran them), where it applies.

        The probe of a kind is the fastest of its devices' newest probes, field by field: the devices of a kind
        are the same VM on the same machine, a busy host only adds to what a call costs (as
        :func:`~autoplace.profile.copies.measure_launch_overhead` keeps its fastest round), and a device that
        ``--redo launch`` did not time again keeps an old probe. (Their mean, before session 59, priced each
        input of the Zen 3's models at 0.242 us: its ``llvm:1`` kept a one-round probe of 0.325 beside
        ``llvm:0``'s five-round 0.159, and seed003's three inputs read 0.16 us dear.)"""
        labels = [label for label in self.launch_ if label in self.invoke_]
        for kind in sorted({kind_of_label(label) for label in labels}):
            mine = [label for label in labels if kind_of_label(label) == kind]
            probe = dict(invoke_us=float(np.min([self.invoke_[k] for k in mine])),
                         launch_us=float(np.min([self.launch_[k] for k in mine])),
                         per_arg_us=float(np.min([self.per_arg_.get(k, np.inf) for k in mine])),
                         alloc_us_per_byte=float(np.min([self.alloc_.get(k, np.inf) for k in mine])))
            probe = {field: (value if np.isfinite(value) else 0.0) for field, value in probe.items()}
            fit_in_context = fit_vm_overhead(df, kind, probe, in_context=True)
            if fit_in_context is not None:
                self.overhead_fit_in_context_.update({label: dict(fit_in_context, probe=probe) for label in mine})
            fit = fit_vm_overhead(df, kind, probe)
            if fit is None:
                continue
            for label in mine:
                self.overhead_fit_[label] = dict(fit, probe=probe)
                self.invoke_[label], self.launch_[label] = fit["invoke_us"], fit["launch_us"]
                self.per_arg_[label] = fit["per_arg_us"]

    @classmethod
    def from_profile(cls, profile_dir: str, model: CostModel | str | None = "auto") -> CostTable:
        """The table of a profile folder, with its saved model (``<dir>/cost_model.json``).

        ``model="auto"``: the saved model if there is one, else an XGBoost model trained now.
        """
        from ..profile import ProfileStore
        from .train import default_model_path, in_model_path

        in_model_model = None
        if model == "auto":
            path = default_model_path(profile_dir)
            model = path if os.path.exists(path) else "xgb"
            in_model_model = in_model_path(path) if os.path.exists(in_model_path(path)) else None
        return cls(ProfileStore(profile_dir).records(), model=model, in_model_model=in_model_model)

    @classmethod
    def from_profiles(cls, profile_dirs, model: CostModel | str | None = "auto") -> CostTable:
        """One table over several profile folders (e.g. a CPU profile and a GPU box's profile).

        Records of every folder are read, including those measured on other hardware (the folders
        were chosen for the devices they measured, see :func:`autoplace.profile.find_profiles`).
        ``model="auto"``: the first saved model found among the folders (``<dir>/cost_model.json``),
        else an XGBoost model trained now on all the records (seconds).
        """
        from ..profile import ProfileStore
        from .train import default_model_path, in_model_path

        folders = [profile_dirs] if isinstance(profile_dirs, (str, os.PathLike)) else list(profile_dirs)
        frames = [ProfileStore(os.fspath(folder)).records(allow_foreign=True) for folder in folders]
        in_model_model = None
        if model == "auto":
            saved = [default_model_path(f) for f in folders if os.path.exists(default_model_path(f))]
            model = saved[0] if saved else "xgb"
            in_model_model = in_model_path(model) if saved and os.path.exists(in_model_path(model)) else None
        return cls(pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(), model=model,
                   in_model_model=in_model_model)

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
        ``invoke_us + len(units) * launch_us + sum of kernel latencies`` (each lookup first; the overheads
        besides in-context times where the kernels are priced by them).
        """
        kind = kind_of_label(target_label)
        frame = self.latencies(list(units), kind, graph=graph)
        return self._fixed_us(frame, target_label) + float(frame["latency_us"].sum())

    def _fixed_us(self, frame: pd.DataFrame, target_label: str) -> float:
        """The VM's overheads of one model's kernels priced in ``frame`` (:meth:`latencies`) on a device."""
        in_context = bool(len(frame)) and bool(frame["in_context"].all())
        return (self.invoke_us(target_label, default=0.0, in_context=in_context)
                + len(frame) * self.launch_us(target_label, default=0.0, in_context=in_context))

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

    def latencies(self, units, target_kind: str | None = None, *, graph=None,
                  in_model: bool | None = None, in_model_share: float | None = None, in_context: bool = True,
                  weights_cold: bool | None = None) -> pd.DataFrame:
        """:meth:`unit_latency_us` for many units at once (one model call), with error bands.

        ``in_model``: price the kernels as a model larger than the L2 runs them (weights from L3 or memory,
        :mod:`autoplace.profile.cache_state`): each measured kernel by its time in context in the profile's other
        models where they launch it (:attr:`in_context_elsewhere_`), else by its in-model time where the profile
        has one (its warm time otherwise), each predicted one by the model of in-model times (``in_model_model``), or
        without one scaled by the measured in-model / warm ratio of its op class and size
        (:meth:`in_model_factor`). Default (None): when ``units`` (taken as one model's kernels)
        :meth:`runs_in_model`, per target kind.

        ``in_model_share``: of a kernel priced in-model, the share of its in-model price's excess over its warm
        price that it pays: ``warm + share * (in-model - warm)``, bands alike. Default (None): with ``in_model``
        None, :meth:`in_model_share` of ``units`` (a model a little larger than its L2 keeps most of its data there
        from one call to the next); with ``in_model=True``, 1. A kernel priced weights-cold pays all of it.

        ``in_context`` (default True): when ``units`` are all the kernels of a model on a target kind, in launch
        order, and the profile timed them inside that model (:attr:`in_context_`), each is priced by its
        in-context time (measured, exact band); ``in_model`` then plays no part for that kind.

        ``weights_cold``: of kernels priced in-model, price them as a model whose weights outgrow the caches runs
        them (weights from memory): each measured kernel by its weights-cold time where the profile has one, every
        other kernel by its in-model price plus :meth:`weights_cold_extra_us`. Default (None): when ``units``
        :meth:`runs_weights_cold`, per target kind.

        Returns
        -------
        pandas.DataFrame
            One row per unit: ``key``, ``target``, ``latency_us``, ``source``, ``unseen_ops``,
            ``op_class`` (of the anchor op: what bands are grouped by), ``band_lo_us`` and ``band_hi_us``:
            the kernel's error band at the model's nominal coverage (``band_nominal``, 0.8). Equal to
            ``latency_us`` for a measured kernel (and ``inf`` for an unsupported one); for a predicted one
            the prediction times the model's calibrated factors (:meth:`CostModel.band_factors`); NaN where
            the model has no band table (never calibrated, or saved before bands existed): unknown.
            ``in_model``: whether the row was priced in-model; ``in_context``: whether by its in-context time;
            ``weights_cold``: whether with its weights read from memory.
        """
        if isinstance(units, pd.DataFrame):
            recs = as_records(units)
        else:
            units = (
                [units] if (isinstance(units, (dict, pd.Series)) or hasattr(units, "prim_func")) else units
            )
            recs = [features_from_unit(u, graph) if hasattr(u, "prim_func") else u for u in units]
        rows, todo = [], []
        targets_of = [kind_of_label(target_kind) if target_kind else kind_of_label(rec.get("target", "") or "")
                      for rec in recs]
        context_of = {t: (self.in_context_times([r for r, k in zip(recs, targets_of) if k == t], t)
                          if in_context and self.in_context_ else None) for t in set(targets_of)}
        in_model_of = {t: (self.runs_in_model([r for r, k in zip(recs, targets_of) if k == t], t)
                           if in_model is None else bool(in_model)) and context_of[t] is None
                       for t in set(targets_of)}
        cold_of = {t: in_model_of[t] and (self.runs_weights_cold([r for r, k in zip(recs, targets_of) if k == t], t)
                                          if weights_cold is None else bool(weights_cold))
                   for t in set(targets_of)}
        share_of = {t: (0.0 if not in_model_of[t] else 1.0 if cold_of[t]
                        else float(np.clip(in_model_share, 0.0, 1.0)) if in_model_share is not None
                        else 1.0 if in_model is not None
                        else self.in_model_share([r for r, k in zip(recs, targets_of) if k == t], t))
                    for t in set(targets_of)}
        position = dict.fromkeys(context_of, 0)
        for i, (rec, target) in enumerate(zip(recs, targets_of)):
            key = str(rec.get("key", ""))
            row = dict(key=key, target=target, latency_us=math.nan, source="", unseen_ops=[],
                       op_class=record_op_class(rec), band_lo_us=math.nan, band_hi_us=math.nan,
                       in_model=in_model_of[target], in_model_share=share_of[target],
                       in_context=context_of[target] is not None, weights_cold=cold_of[target])
            if row["in_context"]:
                us = context_of[target][position[target]]
                position[target] += 1
                row.update(latency_us=us, source=MEASURED, band_lo_us=us, band_hi_us=us)
            elif (key, target) in self.measured_:
                us = self.measured_[(key, target)]
                elsewhere = None
                if row["in_model"]:
                    us = self.measured_in_model_.get((key, target), us)
                    elsewhere = self.in_context_elsewhere_.get((key, target))
                if row["weights_cold"]:
                    cold = self.measured_weights_cold_.get((key, target))
                    if elsewhere is None:
                        us = cold if cold is not None else us + self.weights_cold_extra_us(target, rec)
                    else:  # the weights' memory time added as in_context_times took it out
                        us = elsewhere + (max(0.0, cold - us) if cold is not None
                                          else self.weights_cold_extra_us(target, rec))
                elif elsewhere is not None:
                    us = elsewhere
                if row["in_model"]:  # the share of the excess over its warm time a model this size pays
                    warm = self.measured_[(key, target)]
                    us = warm + row["in_model_share"] * (us - warm)
                row.update(latency_us=us, source=MEASURED, band_lo_us=us, band_hi_us=us)
            elif (key, target) in self.unsupported_:
                row.update(latency_us=math.inf, source=UNSUPPORTED, band_lo_us=math.inf, band_hi_us=math.inf)
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
            lat, lo, hi = np.empty(len(todo)), np.full(len(todo), np.nan), np.full(len(todo), np.nan)
            unseen = [None] * len(todo)
            scaled = np.zeros(len(todo), dtype=bool)  # warm predictions to scale by in_model_factor
            warm = {}  # {j: (warm prediction, its band factors)} of kernels that pay a share of the in-model excess
            for tgt in sorted(set(targets)):
                idx = [j for j, t in enumerate(targets) if t == tgt]
                part = [sub[j] for j in idx]
                model = self.model
                if in_model_of[tgt]:
                    if tgt in getattr(self.in_model_model, "target_kinds_", ()):
                        model = self.in_model_model
                    else:
                        scaled[idx] = True
                lat[idx] = model.predict(part, target=tgt)
                part_unseen = model.unseen_ops(part, target=tgt)
                for j, ops in zip(idx, part_unseen):
                    unseen[j] = ops
                if hasattr(model, "band_factors"):
                    lo[idx], hi[idx] = model.band_factors(part, target=tgt, predicted=lat[idx], unseen=part_unseen)
                if in_model_of[tgt] and share_of[tgt] < 1.0:
                    if model is self.model:
                        warm.update({j: (lat[j], lo[j], hi[j]) for j in idx})
                    else:
                        w = self.model.predict(part, target=tgt)
                        w_lo, w_hi = (self.model.band_factors(part, target=tgt, predicted=w,
                                                              unseen=self.model.unseen_ops(part, target=tgt))
                                      if hasattr(self.model, "band_factors") else (np.full(len(idx), np.nan),) * 2)
                        warm.update({j: (w[n], w_lo[n], w_hi[n]) for n, j in enumerate(idx)})
            for j, i in enumerate(todo):
                if scaled[j]:
                    lat[j] *= self.in_model_factor(rows[i]["target"], rows[i]["op_class"], lat[j])
                if j in warm:  # the share of the excess over its warm price a model this size pays (bands alike)
                    share, (w, w_lo, w_hi) = rows[i]["in_model_share"], warm[j]
                    blended = w + share * (lat[j] - w)
                    if blended > 0:
                        lo[j] = ((1 - share) * w * w_lo + share * lat[j] * lo[j]) / blended
                        hi[j] = ((1 - share) * w * w_hi + share * lat[j] * hi[j]) / blended
                    lat[j] = blended
                if rows[i]["weights_cold"]:  # the band moves with it: the weights' time is added, not scaled
                    extra = self.weights_cold_extra_us(rows[i]["target"], sub[j])
                    lo[j], hi[j] = (lo[j] * lat[j] + extra) / (lat[j] + extra), (hi[j] * lat[j] + extra) / (lat[j] + extra)
                    lat[j] += extra
                rows[i].update(
                    latency_us=float(lat[j]),
                    unseen_ops=unseen[j],
                    source=PREDICTED_UNSEEN_OP if unseen[j] else PREDICTED,
                    band_lo_us=float(lat[j] * lo[j]),
                    band_hi_us=float(lat[j] * hi[j]),
                )
        return pd.DataFrame(rows, columns=LATENCY_COLUMNS)

    def in_model_factor(self, target_kind: str, op_class, warm_us: float) -> float:
        """What a kernel predicted at ``warm_us`` (warm) is scaled by in-model: :attr:`in_model_factor_` of its op
        class and warm-time bin (of all classes in that bin when the class has too few kernels there; 1 when the
        profile has no in-model timing). A 1 us kernel loses relatively more to the L2 eviction than a 1 ms one:
        on the Xeon the median ratio is 1.5 for 5-20 us kernels and 1.03 above 100 us."""
        kind = kind_of_label(target_kind)
        time_bin = int(np.searchsorted(IN_MODEL_BINS_US, warm_us)) if np.isfinite(warm_us) else len(IN_MODEL_BINS_US)
        return self.in_model_factor_.get((kind, op_class, time_bin),
                                         self.in_model_factor_.get((kind, None, time_bin), 1.0))

    @property
    def band_nominal(self) -> float:
        """Nominal coverage of the predicted kernels' bands (0.8), NaN when the model has no band table."""
        bands = getattr(self.model, "bands_", None) if self.model is not None else None
        return float(bands["nominal"]) if bands and bands.get("version") == BAND_TABLE_VERSION else math.nan

    def end_to_end_band(self, units, target_label: str, *, graph=None, how: str | None = None) -> dict:
        """:meth:`end_to_end_us` with its error band: :func:`plan_band` of the kernels, the VM's invocation
        and launch overheads added as exact (measured) costs."""
        kind = kind_of_label(target_label)
        frame = self.latencies(list(units), kind, graph=graph)
        return plan_band(frame, fixed_us=self._fixed_us(frame, target_label), how=how, nominal=self.band_nominal)

    def plan_band(self, rows, *, fixed_us: float = 0.0, how: str | None = None) -> dict:
        """:func:`plan_band` of rows of :meth:`latencies` (a plan's kernels, over all its targets), with this
        table's nominal coverage."""
        return plan_band(rows, fixed_us=fixed_us, how=how, nominal=self.band_nominal)

    # -- launches and copies -------------------------------------------------------------------------
    def launch_us(self, target_label: str, default: float | None = None, *, in_context: bool = False) -> float:
        """VM overhead of one kernel call on a device (``"llvm:0"``), in microseconds.

        A device without its own record takes the mean over devices of the same kind; with none of
        its kind either, ``default`` is returned if given, else ``KeyError`` is raised. ``in_context``: the
        overhead besides kernels priced by their in-context times, fitted where the profile's model records carry
        them (:func:`fit_vm_overhead`), else 0 (an in-context reading holds the VM's call of the kernel).
        """
        label = str(target_label)
        if in_context:  # without a fit: nothing, the kernel's call is inside its in-context reading
            fit = self.overhead_fit_in_context_.get(label)
            same = [f for k, f in self.overhead_fit_in_context_.items() if kind_of_label(k) == kind_of_label(label)]
            return float(fit["launch_us"] if fit else np.mean([f["launch_us"] for f in same]) if same else 0.0)
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
                  output_bytes: int = 0, in_context: bool = False, num_inputs: int = 1) -> float:
        """Fixed VM cost of one call of a model's ``main`` on a device, in microseconds (besides its
        kernel launches): the launch record's ``single_call_us`` less one launch, plus ``per_arg_us``
        for each argument beyond the first and ``alloc_us_per_byte`` for the returned tensors (where
        the profile measured them). Where the overhead was fitted to end-to-end records
        (:func:`fit_vm_overhead`), each input of ``main`` after the first costs the probe's ``per_arg_us`` (its
        ``main`` takes inputs) and each of the ``num_args - num_inputs`` weights the fitted ``per_arg_us``.
        Same fallbacks as :meth:`launch_us`."""
        label = str(target_label)
        if in_context and label in self.overhead_fit_in_context_:
            fit = self.overhead_fit_in_context_[label]
            return (fit["invoke_us"] + _arguments_us(fit, num_args, num_inputs)
                    + self.alloc_.get(label, 0.0) * max(0, int(output_bytes)))
        if label not in self.invoke_:
            same = sorted(k for k in self.invoke_ if kind_of_label(k) == kind_of_label(label))
            if not same:
                if default is not None:
                    return float(default)
                raise KeyError(f"no launch record with single_call_us for {label!r}; profile with copies enabled")
            label = same[0]
        fit = self.overhead_fit_.get(label)
        extra = (_arguments_us(fit, num_args, num_inputs) if fit is not None
                 else self.per_arg_.get(label, 0.0) * max(0, int(num_args) - 1))
        extra += self.alloc_.get(label, 0.0) * max(0, int(output_bytes))
        return self.invoke_[label] + extra

    def copy_cost(self, src_label: str, dst_label: str):
        """The :class:`~autoplace.solve.problem.CopyCost` of copying from one device to another (``"llvm:0"``,
        ``"cuda:0"``): its fit, and its measured sizes where the profile has them. Unpacks as ``alpha_us, us_per_byte``.

        A copy to the same device is free. A pair without its own fit takes the mean of the fits
        between devices of the same kinds in the same direction; with none,
        :class:`~autoplace.errors.CopyCostError` (a ``CostError``, and a ``KeyError``) saying what to profile.
        """
        from ..solve.problem import CopyCost

        src, dst = str(src_label), str(dst_label)
        if src == dst:
            return CopyCost(0.0, 0.0)
        pair = f"{src}->{dst}"
        kinds = (kind_of_label(src), kind_of_label(dst))
        handoff, handoff_per_byte = self.handoff_.get(f"{kinds[0]}->{kinds[1]}", (0.0, 0.0))
        if pair in self.copy_:
            return CopyCost(*self.copy_[pair], points=self.copy_points_.get(pair), handoff_us=handoff,
                            handoff_us_per_byte=handoff_per_byte)
        same = [
            v
            for k, v in self.copy_.items()
            if "->" in k and tuple(kind_of_label(p) for p in k.split("->", 1)) == kinds
        ]
        if same:
            return CopyCost(float(np.mean([a for a, _ in same])), float(np.mean([b for _, b in same])),
                            handoff_us=handoff, handoff_us_per_byte=handoff_per_byte)
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
        """Predicted time of one copy of ``nbytes`` bytes: between the measured sizes where the profile has them
        (:class:`~autoplace.solve.problem.CopyCost`), else ``alpha_us + nbytes * us_per_byte``."""
        return 0.0 if src_label == dst_label else float(self.copy_cost(src_label, dst_label)(nbytes))

    def __repr__(self) -> str:
        return (
            f"CostTable({len(self.measured_)} measured kernels, {len(self.launch_)} launch records, "
            f"{len(self.copy_)} copy fits, model={type(self.model).__name__ if self.model else None})"
        )


_PREDICTED_SOURCES = (PREDICTED, PREDICTED_UNSEEN_OP)


def _weights_bin(weight_bytes: float) -> int:
    """The bin (:data:`WEIGHTS_COLD_BINS`) of a kernel's weight bytes."""
    return int(np.searchsorted(WEIGHTS_COLD_BINS, weight_bytes, side="right"))


def _band_rows(rows) -> pd.DataFrame:
    """``rows`` of :func:`plan_band` as a DataFrame with its columns."""
    if isinstance(rows, pd.DataFrame):
        df = rows.copy()
    else:
        rows = list(rows)
        if rows and not isinstance(rows[0], (dict, pd.Series)):
            names = ["latency_us", "band_lo_us", "band_hi_us", "source", "op_class", "key"]
            rows = [dict(zip(names, r)) for r in rows]
        df = pd.DataFrame(rows)
    for column, default in (("latency_us", math.nan), ("band_lo_us", math.nan), ("band_hi_us", math.nan),
                            ("source", PREDICTED)):
        if column not in df:
            df[column] = default
    return df


def plan_band(rows, *, fixed_us: float = 0.0, how: str | None = None, nominal: float = math.nan) -> dict:
    """A plan's predicted latency with its error band: kernels' latencies and bands added up.

    Parameters
    ----------
    rows : pandas.DataFrame, list of dict or list of tuple
        One row per kernel launch (a kernel launched twice is two rows), with ``latency_us``,
        ``band_lo_us``, ``band_hi_us``, ``source`` and, where known, ``op_class``, ``target`` and ``key``:
        the rows of :meth:`CostTable.latencies` of the kernels a plan runs (concatenated over its
        targets), or tuples ``(latency_us, band_lo_us, band_hi_us, source[, op_class[, key]])``. Rows not
        predicted (measured, ``"folded"``...) are exact whatever their band columns say.
    fixed_us : float
        Costs known exactly added to the total (launches, VM invocation, copies from measured fits).
    how : str, optional
        How the kernels' bands combine, one of :data:`BAND_COMBINES` (default :data:`BAND_COMBINE`). The
        kernels of a group are fully correlated (their band ends add up: the group's band is ``[sum of
        lows, sum of highs]``), groups are independent: the plan's band reaches below the total by the root
        of the sum of squares of the groups' distances from their prediction down to their low end, and
        above it likewise (each side on its own, so the band stays around the prediction and keeps the
        kernels' asymmetry; exact for one group). Groups: ``"correlated"`` one group; ``"class"`` one per
        (``target``, ``op_class``); ``"independent"`` one per distinct (``target``, ``key``): repeats of
        a kernel are one group (every row its own without ``key``).
    nominal : float
        Nominal coverage of the kernels' bands, passed through (:attr:`CostTable.band_nominal`).

    Returns
    -------
    dict
        ``latency_us`` (``fixed_us`` + the kernels' latencies), ``band_lo_us``, ``band_hi_us``, ``rel_lo``,
        ``rel_hi`` (the band ends over ``latency_us``, minus 1), ``band_known`` (False, with NaN ends, when a
        predicted kernel has no band: the model has no band table), ``how``, ``nominal``, ``kernels``,
        ``measured``, ``predicted`` and ``unknown_band`` (launches of each kind), ``distinct_kernels`` and
        ``distinct_predicted`` (distinct ``key`` values, when rows carry keys).
    """
    how = how or BAND_COMBINE
    if how not in BAND_COMBINES:
        raise ValueError(f"how must be one of {BAND_COMBINES}, not {how!r}")
    df = _band_rows(rows)
    lat = pd.to_numeric(df["latency_us"], errors="coerce").to_numpy(float)
    predicted = df["source"].isin(_PREDICTED_SOURCES).to_numpy()
    lo = np.where(predicted, pd.to_numeric(df["band_lo_us"], errors="coerce").to_numpy(float), lat)
    hi = np.where(predicted, pd.to_numeric(df["band_hi_us"], errors="coerce").to_numpy(float), lat)
    unknown = predicted & ~(np.isfinite(lo) & np.isfinite(hi))
    total = float(fixed_us) + float(lat.sum())
    out = dict(latency_us=total, band_lo_us=math.nan, band_hi_us=math.nan, rel_lo=math.nan, rel_hi=math.nan,
               band_known=not unknown.any(), how=how, nominal=float(nominal), kernels=len(df),
               measured=int((df["source"] == MEASURED).sum()), predicted=int(predicted.sum()),
               unknown_band=int(unknown.sum()))
    if "key" in df:
        keys = df["key"].astype(str)
        out.update(distinct_kernels=int(keys.nunique()), distinct_predicted=int(keys[predicted].nunique()))
    if not math.isfinite(total):
        out.update(band_lo_us=total, band_hi_us=total)
        return out
    if unknown.any():
        return out
    target = df["target"].astype(str) if "target" in df else pd.Series("", index=df.index)
    if how == "correlated":
        groups = pd.Series(0, index=df.index)
    elif how == "class":
        cls = df["op_class"].astype(str) if "op_class" in df else pd.Series("", index=df.index)
        groups = target + "/" + cls
    else:
        groups = target + "/" + df["key"].astype(str) if "key" in df else pd.Series(range(len(df)), index=df.index)
    sums = pd.DataFrame(dict(g=groups.to_numpy(), below=lat - lo, above=hi - lat)).groupby("g").sum()
    below, above = sums["below"].to_numpy(float), sums["above"].to_numpy(float)
    # Each side on its own: root of the sum of squares of the groups' distances to their band end; a group
    # whose band lies wholly on one side of its prediction (a negative distance) shifts that end linearly.
    band_lo = total - math.sqrt(float((np.maximum(below, 0) ** 2).sum())) + float(np.maximum(-below, 0).sum())
    band_hi = total + math.sqrt(float((np.maximum(above, 0) ** 2).sum())) - float(np.maximum(-above, 0).sum())
    band_lo, band_hi = min(band_lo, band_hi), max(band_lo, band_hi)
    out.update(band_lo_us=band_lo, band_hi_us=band_hi)
    if total > 0:
        out.update(rel_lo=band_lo / total - 1, rel_hi=band_hi / total - 1)
    return out


def bands_overlap(a: dict, b: dict) -> bool | None:
    """Whether two plans' bands (:func:`plan_band`) overlap: then the predictions cannot tell which plan is
    faster at the bands' nominal coverage. None when either band is unknown.

    Plans that share most kernels have correlated errors, so their difference is surer than two
    overlapping bands suggest: an overlap is a warning, not a proof that the choice is wrong.
    """
    if not (a.get("band_known") and b.get("band_known")):
        return None
    return bool(a["band_lo_us"] <= b["band_hi_us"] and b["band_lo_us"] <= a["band_hi_us"])


def _time(us: float) -> str:
    if not math.isfinite(us):
        return str(us)
    for scale, unit in ((1e6, "s"), (1e3, "ms")):
        if abs(us) >= scale:
            return f"{us / scale:.3g} {unit}"
    return f"{us:.3g} us"


def describe_band(band: dict) -> str:
    """One line for a :func:`plan_band`: ``"predicted 374 ms (+-9%, 12 of 40 kernels predicted)"``,
    ``"predicted 374 ms (-7%/+12%, ...)"`` for an asymmetric band, ``"measured 374 ms (all 40 kernels
    measured)"``, or ``"predicted 374 ms (band unknown: ...)"`` when the model has no band table."""
    total, n, pred = band["latency_us"], band["kernels"], band["predicted"]
    if "distinct_kernels" in band:
        n, pred = band["distinct_kernels"], band["distinct_predicted"]
    counts = f"{pred} of {n} kernels predicted"
    if pred == 0:
        return f"measured {_time(total)} (all {n} kernels measured)"
    if not band["band_known"]:
        return (f"predicted {_time(total)} (band unknown: the cost model has no error band, retrain it with "
                f"autoplace train; {counts})")
    lo, hi = 100 * band["rel_lo"], 100 * band["rel_hi"]
    if abs(-lo - hi) < 1.0:
        width = f"+-{max(-lo, hi):.0f}%"
    else:
        width = f"{lo:+.0f}%/{hi:+.0f}%"
    nominal = band.get("nominal", math.nan)
    level = f" {100 * nominal:.0f}% band" if isinstance(nominal, float) and math.isfinite(nominal) else ""
    return f"predicted {_time(total)} ({width}{level}, {counts})"


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
