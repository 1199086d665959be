"""The offline profiling job: unique kernels of many models on every target, copies, call overhead.

``profile_models`` extracts the units of every model on every target, takes the folder's job lock
(a second job on the same folder waits, then measures only what is still missing), drops the units
the store already has (a killed job resumes where it stopped), measures the rest one by one (each
record is on disk before the next starts) with a progress bar and an estimate of the time left.

What is recorded is what the kernels do, never what the harness does: a worker that cannot start,
options that cannot time a trivial probe kernel, a target on which every kernel fails, or a disk that
cannot take the record raise :class:`~autoplace.errors.ProfilingError` and keep no record of it.
Every record is stamped with what measured it (:func:`~autoplace.profile.hardware.measured_by`).
"""

from __future__ import annotations

import datetime
import itertools
import math
import os
import time
from collections.abc import Iterable

from tqdm.auto import tqdm

from ..backend.cpu_schedules import (
    RULE_ATTR,
    SCHEDULE_VERSION,
    ZEN_FEATURES_VERSION,
    gathers_and_scatters_without_zen_features,
    runs_in_parallel,
    vector_width,
    vectorized_row_reduction,
)
from ..backend.cpu_threads import runtime_threads
from ..errors import AutoplaceError, ProfilingError
from ..frontend import load_model
from ..graph import op_graph
from ..targets import TargetSet
from .cache_state import IN_MODEL_TIMING, WEIGHTS_COLD_TIMING
from .copies import DEFAULT_COPY_SIZES, fit_copy_cost, measure_copies, measure_launch_overhead
from .hardware import measured_by
from .host_check import (
    HOST_CHECK_LIMIT,
    HOST_CHECK_MODELS,
    MIN_HOST_CHECK_KERNELS,
    REFERENCE_MODELS,
    check_host_speed,
    reference_kernels,
    reference_models,
)
from .host_check import (
    MODES as HOST_CHECK_MODES,
)
from .host_speed import APART, CALM, SLOW, HostSpeed
from .in_context import IN_CONTEXT_TIMING, time_in_context
from .measure import KernelTimer, refuse_in_spawn_bootstrap
from .rounds import FASTEST_ROUNDS_WITHIN, fastest_round_indices, fastest_rounds
from .store import SUCCESS, ProfileStore
from .units import extract_units


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def target_label(target) -> str:
    """How records name a device: kind and vdevice id (``llvm:0``, ``cuda:0``), see
    :func:`autoplace.targets.device_label`."""
    return target.label


def unit_record(unit, graph, model_name: str, target_kind: str, result: dict) -> dict:
    """The record of one measured kernel: features the cost model uses plus the timing.

    Without ``graph`` (None) the record has the kernel's ops and argument shapes only: no anchor
    attributes and ``flops`` NaN.
    """
    nodes = [graph.nodes[n] for n in unit.nodes] if graph is not None else []
    anchor = max(nodes, key=lambda d: d.get("flops", 0.0)) if nodes else {}
    return dict(
        kind="unit",
        key=unit.key,
        target=target_kind,
        model=model_name,
        func_name=unit.func_name,
        ops=unit.ops,
        anchor_op=anchor.get("op", unit.ops[0] if unit.ops else unit.func_name),
        anchor_attrs=anchor.get("attrs", {}),
        anchor_input_shapes=[list(s) for s in anchor.get("input_shapes", [])],
        arg_shapes=[list(s) for s in unit.arg_shapes],
        arg_dtypes=unit.arg_dtypes,
        num_outputs=unit.num_outputs,
        weight_args=list(unit.weight_args),
        weight_bytes=unit.weight_bytes,
        read_strides=getattr(unit, "read_strides", None),
        read_runs=getattr(unit, "read_runs", None),
        flops=float(sum(d.get("flops", 0.0) for d in nodes)) if graph is not None else math.nan,
        bytes_in=unit.nbytes_in,
        bytes_out=unit.nbytes_out,
        measured_at=_now(),
        **(_cpu_schedule_fields(unit) if target_kind == "llvm" else {}),
        **result,
    )


def model_record(model, graph, units, targets: TargetSet, name: str, kind: str, *, repeat: int = 7,
                 placement=None, inputs=None, speed: HostSpeed | None = None) -> dict:
    """End-to-end latency of the model built entirely on one target, with the kernels it launches.

    The cost model's evaluation and the fidelity experiment compare sums of unit costs to this. ``placement``
    and ``inputs`` (from :func:`model_placement` and ``model.random_inputs()``) time a build made earlier;
    ``speed`` keeps the samples timed while the host ran calm (:func:`time_end_to_end`).
    """
    placement = placement or model_placement(model, graph, targets, name)
    inputs = model.random_inputs() if inputs is None else inputs
    return dict(model_fields(model, units, placement, kind), measured_at=_now(),
                **time_model(placement, inputs, units, kind, repeat=repeat, speed=speed))


def time_model(placement, inputs, units, kind: str, *, repeat: int = 7, speed: HostSpeed | None = None) -> dict:
    """A model built on one target timed end to end (:func:`time_end_to_end`) and, when that worked, its kernels
    in context (:func:`in_context_fields`): the timing fields of a ``model`` record."""
    timing = time_end_to_end(placement.runner, inputs, kind, repeat=repeat, speed=speed)
    if timing.get("status") == "ok":
        timing.update(in_context_fields(placement, inputs, units, speed=speed))
    return timing


def in_context_fields(placement, inputs, units, *, speed: HostSpeed | None = None) -> dict:
    """The ``in_context_*`` fields of a model built on one target (:func:`~autoplace.profile.in_context.time_in_context`
    on its build), or ``in_context_error`` saying why there are none."""
    runner = placement.runner
    try:
        args = runner.device_inputs(inputs) + list(runner.weights)
        return time_in_context(placement.build(), runner.targets.devices, args, units, speed=speed)
    except Exception as err:  # a model that cannot be instrumented keeps its end-to-end timing
        return dict(in_context_error=str(err).strip().splitlines()[-1][:300] if str(err).strip() else repr(err),
                    in_context_timing=IN_CONTEXT_TIMING)


def time_end_to_end(runner, inputs, kind: str, *, repeat: int = 7, speed: HostSpeed | None = None,
                    patience_s: float = 3.0) -> dict:
    """``status``, ``median_us``, ``min_us``, ``max_us``, ``samples`` (and ``threads`` on the CPU) of one
    timing of a built model: ``repeat`` samples, each averaging enough calls to last about 20 ms.

    With ``speed`` (the host-speed canary, :class:`~autoplace.profile.host_speed.HostSpeed`), every sample
    follows a canary and ``median_us`` is over the samples timed while the host ran calm
    (:meth:`HostSpeed.calm_samples`, waiting up to ``patience_s`` for ``repeat`` calm ones); the record also
    carries ``host_slowdown``, ``canary_us`` and ``calm_samples``. A model of several ms spans several
    canary readings, so one canary before a whole burst (as for kernels) would say little.
    """
    import numpy as np

    try:
        samples = runner.time_us(inputs, repeat=3)
        number = max(1, int(20_000 / max(1.0, float(np.median(samples)))))
        if speed is None:
            samples = runner.time_us(inputs, number=number, repeat=repeat)
            kept, extra = samples, {}
        else:
            calm = speed.calm_samples(lambda: float(runner.time_us(inputs, number=number, repeat=1)[0]), repeat,
                                      patience_s)
            samples, kept = calm["all_us"], calm["kept_us"]
            extra = dict(host_slowdown=calm["host_slowdown"], canary_us=calm["canary_us"], calm_samples=len(kept))
        timing = dict(status="ok", median_us=float(np.median(kept)), min_us=float(np.min(samples)),
                      max_us=float(np.max(samples)), samples=len(samples), **extra)
        if kind == "llvm":
            timing["threads"] = runtime_threads()
    except Exception as err:
        timing = dict(status="error", error=str(err).strip().splitlines()[-1][:300])
    return timing


def _a_calm_round_among_fastest(medians: list, slowdowns, calm_within: float = SLOW) -> bool:
    """Whether a round within 10% of the fastest (:func:`fastest_rounds`) was read while the host-speed canary
    ran calm (``host_slowdown`` at most ``calm_within``, by default :data:`~autoplace.profile.host_speed.SLOW`).
    ``slowdowns`` holds the canary's reading before each round (``round_slowdowns``, one per round of
    ``medians``, matched from the newest round backwards where a record's in-model rounds began later); a round
    without one (a record timed before the canary, a GPU kernel) counts as calm: nothing says it was not."""
    if not isinstance(slowdowns, list):
        return True
    return any(s is None or float(s) <= calm_within for s in _readings_of_fastest(medians, slowdowns))


def _readings_of_fastest(medians: list, readings: list) -> list:
    """The readings (one per round, matched from the newest round backwards; None for a round without one) of the
    rounds within 10% of the fastest of ``medians`` (:func:`fastest_rounds`)."""
    fastest = min(medians)
    matched = [None] * max(0, len(medians) - len(readings)) + list(readings[-len(medians):])
    return [r for m, r in zip(medians, matched) if m <= fastest * (1.0 + FASTEST_ROUNDS_WITHIN)]


def confirmed(record: dict) -> bool:
    """Whether another round of a record agrees with its fastest one (within 10%, :func:`fastest_rounds`), for
    its warm time and, where it has one, its in-model time: its time is then not one burst of samples that a
    calm moment of a busy host happened to give. On the AMD Zen 3 (3 rounds, a host slow in phases of minutes)
    42% of the kernels' warm times and 61% of their in-model times stood on their fastest round alone; on the
    AMD Zen 4, 10% and 21%. A record timed in one round is not confirmed.

    A model's end-to-end time is not confirmed either while it is more than its kernels timed in context in the
    same runs allow (:func:`~autoplace.profile.in_context.in_context_ceiling_us`): two rounds minutes apart can
    both fall in one slow phase. On the Zen 3, cnn-base read 9726 and 9788 us end to end in two rounds of one job,
    its kernels 7020 us in context, the plans of it 6953 us an hour later; 2 of the 172 model records there
    were over the ceiling, none of the Zen 4's 172 or the Xeon's 23.

    Nor is a record whose agreeing rounds were all read while the host-speed canary ran slow (over
    :data:`~autoplace.profile.host_speed.SLOW`, 1.15x its fastest; :func:`_a_calm_round_among_fastest`): rounds
    minutes apart can all fall in one slow phase and agree. On the Intel Xeon f6m207 (session 32) cnn-base's
    3x3 convolutions read 419-579 us in 7 rounds at canary 1.44-2.4x, agreeing, and 282-299 us in the two
    rounds at 1.07-1.13 that followed; over that profile's records, rounds at canary 1.15-1.2x read a median
    1.12x their record's calm rounds (56% over 1.1x), at 1.5-1.7x 1.36x (85%)
    (``experiments/results/slow_rounds.csv``).

    A model's rounds count as calm only within :data:`~autoplace.profile.host_speed.CALM` (1.05x), the bound its
    samples are kept by (:meth:`~autoplace.profile.host_speed.HostSpeed.calm_samples`): a round over it kept no
    sample read at a calm canary. On the Zen 3 (session 58) mobilenetv2-base's four rounds read 2237-2848 us at canary
    1.13-1.42x, the one at 1.13 confirming the fastest, and 1417-1535 us in three rounds at 1.02-1.03x; over the
    Zen 3's model records, rounds at 1.05-1.15x read a median 1.05x the same record's rounds at 1.05x or less
    (282 of 989 over 1.1x; the Zen 4's: 1.05x, 131 of 356).
    """
    from .in_context import in_context_ceiling_us

    slowdowns = record.get("round_slowdowns")
    calm_within = CALM if record.get("kind") == "model" else SLOW
    for field, single in (("round_medians_us", "median_us"), ("round_in_model_medians_us", "in_model_median_us")):
        medians = record.get(field)
        if medians is None and field != "round_medians_us" and single not in record:
            continue  # no in-model time: nothing to confirm
        if not isinstance(medians, list) or len(fastest_rounds([float(m) for m in medians])) < 2:
            return False
        if not _a_calm_round_among_fastest([float(m) for m in medians], slowdowns, calm_within):
            return False
    if record.get("kind") == "model" and isinstance(record.get("in_context_us"), list):
        ceiling = in_context_ceiling_us(record["in_context_us"])
        if ceiling is not None and float(record["median_us"]) > ceiling:
            return False
    return True


#: A re-timed kernel whose new reading is this many times its previous job's (either way) is reported.
MOVED_FACTOR = 1.5


def moved_readings(before: dict, after: dict, factor: float = MOVED_FACTOR) -> dict:
    """``{tag: (previous us, new us)}`` of the kernels re-timed (``--redo unit``) whose newest reading is
    ``factor`` or more times their previous job's, or that divided by it, with the same CPU schedule version.

    A job can run a kernel in a slow mode in every one of its rounds, where the rounds agree and so confirm it:
    mobilenetv2's 16 -> 96 1x1 convolution on a 2x2 map read 0.80, 0.91, then 2.28-2.30 us in all three rounds of
    one job (AMD Zen 3, session 24; 0.91 again in the next). Only another job shows it.
    """
    moved = {}
    for tag, old in before.items():
        new = after.get(tag)
        if new is None or old.get("cpu_schedule") != new.get("cpu_schedule"):
            continue
        ratio = float(new["median_us"]) / float(old["median_us"])
        if ratio >= factor or ratio <= 1.0 / factor:
            moved[tag] = (float(old["median_us"]), float(new["median_us"]))
    return moved


def merge_rounds(previous: dict, timing: dict) -> dict:
    """``previous`` (a kernel's or model's record) with one more round of timing ``timing`` added.

    A round is one burst of samples (about 0.15 s); on a shared machine a burst can land in a minute when
    another tenant holds a core and read up to 2x slow. A job's rounds are minutes apart, and ``median_us``
    becomes the median of the round medians within 10% of the fastest round's (:func:`fastest_rounds`;
    all of them on a calm machine); ``round_medians_us`` keeps every round's median, ``min_us``/``max_us``
    cover every sample, ``samples`` counts them, ``std_us`` is the newest round's. Where every round
    says how slow the host-speed canary read (``host_slowdown``, :mod:`.host_speed`), ``round_slowdowns``
    keeps them and ``host_slowdown`` becomes the calmest round's.
    """
    import numpy as np

    medians = [float(v) for v in previous.get("round_medians_us") or [previous["median_us"]]]
    medians.append(float(timing["median_us"]))
    slowdowns = list(previous.get("round_slowdowns") or [previous.get("host_slowdown")])
    slowdowns.append(timing.get("host_slowdown"))
    merged = {**previous, **{k: v for k, v in timing.items() if k not in ("min_us", "max_us", "samples")}}
    if all(s is not None for s in slowdowns):
        merged.update(round_slowdowns=[float(s) for s in slowdowns], host_slowdown=float(min(slowdowns)))
    else:
        merged.pop("round_slowdowns", None)
        merged.pop("host_slowdown", None)
    merged.update(median_us=float(np.median(fastest_rounds(medians))), round_medians_us=medians,
                  rounds=len(medians),
                  min_us=float(min(previous.get("min_us", np.inf), timing["min_us"])),
                  max_us=float(max(previous.get("max_us", -np.inf), timing["max_us"])),
                  samples=int(previous.get("samples", 0)) + int(timing.get("samples", 0)), measured_at=_now())
    # A CPU kernel's in-model timing (cache_state) and, with weights, its weights-cold one: their rounds alike.
    for timed in ("in_model", "weights_cold"):
        if f"{timed}_median_us" in timing:
            merged.update(_merge_cache_state_rounds(previous, timing, timed))
    if "weights_cold_median_us" in timing and "in_model_median_us" in timing:
        merged.update(_weights_cold_on_in_model(previous, timing, merged))
    if "in_context_us" in timing:  # the model's kernels timed in context: the rounds of the fastest sums
        merged.update(merge_in_context_rounds(previous, timing))
    return merged


def _merge_cache_state_rounds(previous: dict, timing: dict, timed: str) -> dict:
    """``<timed>_median_us`` (the median of the fastest rounds), ``round_<timed>_medians_us`` and ``<timed>_min_us``
    of ``previous`` with one more round ``timing`` (``timed``: ``in_model`` or ``weights_cold``); a previous
    record of another ``<timed>_timing`` version contributes no round."""
    import numpy as np

    earlier = previous.get(f"round_{timed}_medians_us")
    if earlier is None:
        same = previous.get(f"{timed}_timing") == timing.get(f"{timed}_timing")
        earlier = [previous[f"{timed}_median_us"]] if same and f"{timed}_median_us" in previous else []
    rounds = [float(v) for v in earlier] + [float(timing[f"{timed}_median_us"])]
    return {f"{timed}_median_us": float(np.median(fastest_rounds(rounds))), f"round_{timed}_medians_us": rounds,
            f"{timed}_min_us": float(min(previous.get(f"{timed}_min_us", np.inf), timing[f"{timed}_min_us"]))}


def _weights_cold_on_in_model(previous: dict, timing: dict, merged: dict) -> dict:
    """``weights_cold_median_us`` as the in-model time of ``merged`` (over all its in-model rounds) times what
    flushing the weights adds in the rounds that timed both: the median of the fastest weights-cold rounds over
    the median of the fastest in-model rounds timed with them (``round_weights_cold_in_model_us``, one per
    weights-cold round).

    The weights-cold timing came after the in-model one, and a job that adds it to a kernel timed before (on
    another day, in another state of the host) continues that kernel's rounds: its in-model median keeps the
    calm rounds of then, and weights-cold rounds read in a slow phase now would otherwise count the slow phase
    as the weights' memory time. On the AMD Zen 3 (session 45) a job that timed the op families' kernels again
    for it read them a median 1.18x (warm) and 1.22x (in-model) their earlier records, with the host-speed canary
    1.46x its fastest, where the profile's earlier rounds had read it at 1.0-1.1x."""
    import numpy as np

    cold = merged["round_weights_cold_medians_us"]
    paired = previous.get("round_weights_cold_in_model_us")
    if not isinstance(paired, list):  # records before this field: the in-model rounds timed with them, newest last
        earlier = len(cold) - 1
        in_model = previous.get("round_in_model_medians_us")
        if in_model is None:
            in_model = [previous["in_model_median_us"]] if "in_model_median_us" in previous else []
        paired = [float(v) for v in in_model[len(in_model) - earlier:]] if earlier <= len(in_model) else None
    if paired is None or len(paired) != len(cold) - 1:
        return {}  # cannot tell which rounds timed both: the weights-cold rounds' own median stays
    paired = [*paired, float(timing["in_model_median_us"])]
    ratio = float(np.median(fastest_rounds(cold))) / float(np.median(fastest_rounds(paired)))
    return dict(round_weights_cold_in_model_us=paired,
                weights_cold_median_us=float(merged["in_model_median_us"]) * ratio)


def merge_in_context_rounds(previous: dict, timing: dict) -> dict:
    """The ``in_context_us`` and ``in_context_kernel_us`` of ``previous`` (a ``model`` or ``context`` record) with
    one more round of in-context timing ``timing`` added: per kernel, the median over the rounds whose sums are
    within 10% of the fastest sum (:func:`fastest_rounds`); ``round_in_context_us`` and
    ``round_in_context_kernel_us`` keep every round; ``in_context_wall_us`` is the median of those rounds' times of
    the build without the hook (``round_in_context_wall_us``: every round's, None where a round has none). Rounds
    of another ``in_context_timing`` are dropped."""
    import numpy as np

    n = len(timing["in_context_us"])
    same = previous.get("in_context_timing") == timing.get("in_context_timing")
    rounds, merged = {}, {}
    for field in ("in_context_us", "in_context_kernel_us"):
        earlier = previous.get(f"round_{field}")
        if earlier is None:
            earlier = [previous[field]] if same and field in previous else []
        rounds[field] = [list(r) for r in earlier if len(r) == n] + [[float(v) for v in timing[field]]]
    sums = [float(np.sum(r)) for r in rounds["in_context_us"]]
    fastest = fastest_round_indices(sums)
    for field, values in rounds.items():
        merged[field] = [float(v) for v in np.median(np.array([values[i] for i in fastest]), axis=0)]
        merged[f"round_{field}"] = values
    # the build's time without the hook, one per round (None for a round timed before it was read)
    earlier = previous.get("round_in_context_wall_us")
    if not isinstance(earlier, list) or len(earlier) != len(sums) - 1:
        earlier = [previous.get("in_context_wall_us") if same and len(sums) == 2 else None] * (len(sums) - 1)
    walls = [*earlier, timing.get("in_context_wall_us")]
    merged["round_in_context_wall_us"] = walls
    kept = [float(walls[i]) for i in fastest if walls[i] is not None]
    merged["in_context_wall_us"] = float(np.median(kept)) if kept else None
    return merged


def remerge_rounds(store: ProfileStore) -> int:
    """Append, for every newest record of ``store`` timed in several rounds whose ``median_us`` the current
    rule (:func:`merge_rounds`) would set differently, the record with it set so; returns how many.

    Records keep every round's median (``round_medians_us``), so a change of how rounds are merged needs
    no new timing. The store is append-only: the older records stay, the newest of a key wins.
    """
    import numpy as np

    changed = 0
    with store.lock():
        for record in store.newest_good().values():
            medians = record.get("round_medians_us")
            if not isinstance(medians, list) or len(medians) < 2:
                continue
            median = float(np.median(fastest_rounds([float(m) for m in medians])))
            if not np.isclose(median, float(record["median_us"]), rtol=1e-9):
                store.append({**record, "median_us": median})
                changed += 1
    return changed


def _cpu_schedule_fields(unit) -> dict:
    """What a CPU kernel's record says of its schedule: the rules' version, the rule that scheduled it, whether
    it runs in parallel, the lanes of its widest vector loop, whether a row reduction accumulates in lanes."""
    func = unit.prim_func
    rule = str(func.attrs[RULE_ATTR]) if func.attrs is not None and RULE_ATTR in func.attrs else "none"
    return dict(cpu_schedule=SCHEDULE_VERSION, cpu_rule=rule, parallel=runs_in_parallel(func),
                vector_width=vector_width(func), vector_reduce=vectorized_row_reduction(func))


def _timed_the_old_way(newest: dict, done: set, record_kind: str, field: str, version: str,
                       target_kind: str | None = None, where=None) -> set:
    """Tags of ``done`` records of ``record_kind`` (on ``target_kind``, any when None) whose newest record's
    ``field`` is not the current ``version`` of a timing: they are timed again (CPU kernels without the in-model
    timing :data:`~autoplace.profile.cache_state.IN_MODEL_TIMING`, models without the in-context timing
    :data:`~autoplace.profile.in_context.IN_CONTEXT_TIMING`, CPU kernels with weights without the weights-cold
    timing :data:`~autoplace.profile.cache_state.WEIGHTS_COLD_TIMING`). ``where(record)``: only the records it
    keeps (all when None). ``newest``: the store's :meth:`~ProfileStore.newest_good`."""
    return {tag for tag, record in newest.items()
            if tag[0] == record_kind and tag in done and (target_kind is None or tag[2] == target_kind)
            and record.get(field) != version and (where is None or where(record))}


def cpu_kernels_timed_the_old_way(newest: dict, done: set) -> tuple[set, dict]:
    """``(tags, continued)``: the ``done`` CPU kernels a job times again because their newest record lacks the
    current in-model timing, or (a kernel with weights) the current weights-cold one; ``continued``
    (``{tag: newest record}``) are those timed again for the weights-cold timing alone, whose new timing is one
    more round of that record (:func:`merge_rounds`: their calm warm and in-model rounds of before keep counting,
    :func:`_weights_cold_on_in_model`). Both the local job and the RPC job (:mod:`.rpc`) ask this."""
    old_in_model = _timed_the_old_way(newest, done, "unit", "in_model_timing", IN_MODEL_TIMING, "llvm")
    old_weights_cold = _timed_the_old_way(newest, done, "unit", "weights_cold_timing", WEIGHTS_COLD_TIMING, "llvm",
                                          where=lambda record: bool(record.get("weight_args")))
    return old_in_model | old_weights_cold, {tag: newest[tag] for tag in old_weights_cold - old_in_model}


def rounds_timed(record: dict) -> int:
    """The rounds a record has of all its timings: a kernel whose weights-cold timing began after its other ones
    (:func:`cpu_kernels_timed_the_old_way`) counts its weights-cold rounds."""
    cold = record.get("round_weights_cold_medians_us")
    return min(int(record.get("rounds", 1)), len(cold)) if isinstance(cold, list) else int(record.get("rounds", 1))


def _launches_other_kernels(newest: dict, done: set, launches_now: dict) -> set:
    """Tags of ``done`` model records whose ``unit_keys`` are not the kernels the current build launches
    (``launches_now``: ``{model tag: [unit key]}``): a legalization that changed (schedule version 9 legalizes
    some convolutions and adaptive pools differently) makes other kernels, and the model's end-to-end and
    in-context timings were of the old ones."""
    return {tag for tag, keys in launches_now.items()
            if tag in done and tag in newest and isinstance(newest[tag].get("unit_keys"), list)
            and [str(k) for k in newest[tag]["unit_keys"]] != keys}


def _compiled_differently_now(newest: dict, done: set, extracted) -> set:
    """Tags of ``done`` CPU kernel records made before :data:`~autoplace.backend.cpu_schedules.ZEN_FEATURES_VERSION`
    whose kernel a Zen may now compile differently: LLVM's default build of it has a scatter, which
    :data:`~autoplace.backend.cpu_schedules.ZEN_LLVM_FEATURES` refuse (or, for a record of version 12, built without
    gathers too, a gather); the key, the kernel's TIR, is unchanged.
    Each such kernel is compiled once here; other machines' kernels are never checked."""
    changed, checked = set(), set()
    for _model, _graph, by_kind in extracted:
        for unit in by_kind.get("llvm", ()):
            tag = ("unit", unit.key, "llvm")
            record = newest.get(tag)
            if tag in checked or tag not in done or record is None:
                continue
            checked.add(tag)
            try:
                version = int(record.get("cpu_schedule") or 0)
            except (TypeError, ValueError):
                version = 0
            if version >= ZEN_FEATURES_VERSION:
                continue
            gathers, scatters = gathers_and_scatters_without_zen_features(unit.prim_func)
            if scatters or (gathers and version == 12):  # version 12 refused gathers too
                changed.add(tag)
    return changed


def _launching(newest: dict, done: set, keys: set) -> set:
    """Tags of ``done`` model records that launch one of the kernels ``keys``."""
    return {tag for tag in done if tag[0] == "model" and tag in newest
            and keys & {str(k) for k in newest[tag].get("unit_keys") or ()}}


#: How much slower (by the host-speed canary) a job's models may have run than the folder's kernels before the
#: job says so (:func:`host_state_warning`).
HOST_STATE_TOLERANCE = 1.10


def host_state_warning(store: ProfileStore, model_tags: set) -> str:
    """A line for the log when the models of ``model_tags`` were timed while the host ran slower (or faster), by
    the host-speed canary's median, than when the folder's CPU kernels were: their end-to-end records then read
    that much off the kernels' sums, and the cost model's evaluation and VM overhead fit would take it for error.
    "" when they agree within :data:`HOST_STATE_TOLERANCE` (or the records carry no canary)."""
    import numpy as np

    newest = store.newest_good()

    def slowdowns(tags):
        values = [newest[t].get("host_slowdown") for t in tags if t in newest]
        return [float(v) for v in values if v is not None and np.isfinite(v)]

    models = slowdowns(model_tags)
    kernels = slowdowns([t for t in newest if t[0] == "unit" and t[2] == "llvm"])
    if not models or not kernels:
        return ""
    ratio = float(np.median(models) / np.median(kernels))
    if 1 / HOST_STATE_TOLERANCE <= ratio <= HOST_STATE_TOLERANCE:
        return ""
    return (f"host state: these models were timed at {np.median(models):.2f}x the fastest canary, the folder's "
            f"CPU kernels at {np.median(kernels):.2f}x: by the canaries their end-to-end records may read up to "
            f"{ratio - 1:+.0%} off the kernels' sums (a canary's reading, not a timing; with the cores apart it can "
            "overstate: 2.7x on the Zen 4 where its models ran 1.04-1.77x their records); time them again when the "
            "host runs as it did for the kernels "
            "(--redo model), or time the kernels again with them (--redo unit model)")


def _retag_cpu_schedule(store: ProfileStore, newest: dict, units: dict) -> int:
    """Append, for each CPU kernel of ``units`` (``{tag: Unit}``) whose newest record was made under an older
    :data:`~autoplace.backend.cpu_schedules.SCHEDULE_VERSION` (or lacks ``vector_width``), that record with the
    current :func:`_cpu_schedule_fields`; returns how many. The key is the kernel's TIR: a kernel the current
    rules still make is the kernel that was timed, so its timing holds (the cost model trains on
    current-version CPU kernels only). ``newest``: the store's :meth:`~ProfileStore.newest_good`."""
    changed = 0
    for tag in sorted(t for t in units if t[2] == "llvm"):
        record = newest.get(tag)
        if record is not None and (record.get("cpu_schedule") != SCHEDULE_VERSION or "vector_width" not in record):
            store.append({**record, **_cpu_schedule_fields(units[tag])})
            changed += 1
    return changed


def model_placement(model, graph, targets: TargetSet, name: str):
    """The model built entirely on target ``name`` (what a ``model`` record times)."""
    from ..place import Placement

    return Placement.from_assignment(model, graph, None, TargetSet({name: targets[name].target}))


def model_fields(model, units, placement, kind: str) -> dict:
    """A ``model`` record without its timing: the kernels the model launches, its ops, arguments (``num_args``, of
    which ``num_inputs`` are the model's inputs, the rest its weights) and output."""
    return dict(kind="model", key=model.name, target=kind, unit_keys=[u.key for u in units],
                ops=sum(1 for _, d in placement.graph.nodes(data=True) if d.get("kind") == "op"),
                num_args=len(placement.mod["main"].params), num_inputs=int(model.num_input),
                output_bytes=int(placement.graph.nodes["output"].get("output_bytes", 0)))


def profile_models(models: Iterable, targets, store: ProfileStore, *, copies: bool = True,
                   end_to_end: bool = True, redo: Iterable[str] = (), copy_sizes=DEFAULT_COPY_SIZES,
                   timer: KernelTimer | None = None, progress: bool = True, log=print,
                   lock_timeout_s: float | None = None, rpc=None, rounds: int = 1,
                   max_rounds: int | None = None, host_check: str = "refuse",
                   host_check_limit: float = HOST_CHECK_LIMIT) -> dict:
    """Profile models on targets into ``store``; returns a summary dict.

    Call it from the command line (``autoplace profile``) or, in a script, under
    ``if __name__ == "__main__":``: kernels are timed in a ``spawn`` worker process, which imports
    the main script again.

    Parameters
    ----------
    models : iterable
        Models (anything :func:`autoplace.load_model` reads, or ``(name, model)`` pairs).
    targets : dict or TargetSet
        Only targets this machine can run are measured; the others are reported as skipped
        (profile them on their machine, see :mod:`autoplace.profile.remote`).
    store : ProfileStore
        This machine's folder (measuring into another machine's folder is refused).
    copies : bool
        Also measure copies between every ordered pair of targets, and the VM call overhead.
    end_to_end : bool
        Also time each model built entirely on each target (``kind="model"`` records).
    redo : iterable of str
        Record kinds to measure again even if present (e.g. ``("model",)`` after a run disturbed by
        other load). The store is append-only: readers take the latest record of a key.
    timer : KernelTimer, optional
        How kernels are timed (its options are checked when it is made).
    lock_timeout_s : float, optional
        Give up (``ProfilingError``) after waiting this long for another job on the same folder;
        default: wait until it ends.
    rounds : int
        Time every kernel and model this many times, in rounds over the whole job (minutes apart; records
        keep the median of the rounds' medians, :func:`merge_rounds`). On a shared or virtual machine one
        burst of samples can read up to 2x slow; 3 rounds made the committed profiles. A job run again with
        more rounds adds the missing rounds to the records it has.
    max_rounds : int, optional
        After ``rounds``, time again, round after round up to this many rounds in all, only the kernels and
        models whose fastest round no other round confirms (:func:`confirmed`): on a host slow in phases of
        minutes, the extra rounds go where the records disagree. The summary says how many stayed unconfirmed.
    rpc : RPCConfig, str, dict or pair, optional
        Measure on the servers of a TVM RPC tracker instead of this machine
        (:func:`autoplace.profile.rpc.profile_over_rpc`, e.g. ``rpc=("10.0.0.5:9190", "gpu-box")``):
        ``store`` must then be that machine's folder (or new; None: ``profiles/<its hardware id>``).
    host_check : {"refuse", "warn", "off"}
        Before timing CPU kernels or models, time a dozen of the folder's own kernels (of these models, else of
        the zoo's cnn-base and bert-base) and compare them with their records (:mod:`autoplace.profile.host_check`):
        ``"refuse"`` raises ``ProfilingError`` before anything is timed when they read over
        ``host_check_limit`` (1.05) times their records, ``"warn"`` logs it and goes on (the new CPU kernel records
        carry ``host_check_ratio``), ``"off"`` skips it. A folder with fewer than 6 such kernels is not checked.

    Raises
    ------
    ProfilingError
        The harness cannot measure: called while a worker imports a script without a main guard, a
        worker that cannot start, a trivial probe kernel that the timer's options cannot measure, a
        target on which every kernel of the run failed (nothing of it is kept), a folder of other
        hardware, or a record that cannot be written (disk full).
    """
    refuse_in_spawn_bootstrap("autoplace.profile.profile_models")
    if host_check not in HOST_CHECK_MODES:
        raise ProfilingError(f"host_check={host_check!r}: give one of {', '.join(HOST_CHECK_MODES)} "
                             "(e.g. --host-check warn)")
    if isinstance(host_check_limit, bool) or not isinstance(host_check_limit, (int, float)) or not host_check_limit >= 1:
        raise ProfilingError(f"host_check_limit={host_check_limit!r}: give a ratio >= 1 (e.g. 1.05: the folder's "
                             "kernels may read 5% slower than their records)")
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ProfilingError(f"rounds={rounds!r}: give the number of times to time each kernel, an integer >= 1 "
                             "(e.g. --rounds 3)")
    if max_rounds is not None and (isinstance(max_rounds, bool) or not isinstance(max_rounds, int)
                                   or max_rounds < rounds):
        raise ProfilingError(f"max_rounds={max_rounds!r} with rounds={rounds}: give an integer >= rounds "
                             "(e.g. --rounds 3 --max-rounds 6), or leave it out")
    if rpc is not None and max_rounds not in (None, rounds):
        raise ProfilingError(f"max_rounds={max_rounds} is not supported over RPC yet: give rounds only (every kernel "
                             "is then timed that many times), or run the job on the machine itself")
    if rpc is not None:
        from .rpc import profile_over_rpc

        return profile_over_rpc(models, targets, rpc, store=store, copies=copies, end_to_end=end_to_end, redo=redo,
                                copy_sizes=copy_sizes, timer=timer, progress=progress, log=log,
                                lock_timeout_s=lock_timeout_s, rounds=rounds)
    targets = TargetSet(targets)
    if timer is not None and not isinstance(timer, KernelTimer):
        raise ProfilingError(f"timer must be a KernelTimer, got {type(timer).__name__}")
    if copies and (not copy_sizes or any(int(n) <= 0 for n in copy_sizes)):
        raise ProfilingError(f"copy_sizes={copy_sizes!r}: give positive byte counts (default 4 B .. 256 MiB)")
    _check_folder_is_this_machine(store)
    skipped_targets = targets.unavailable()
    runnable = [name for name in targets if name not in skipped_targets]
    kinds = {}
    for name in runnable:
        kinds.setdefault(targets[name].kind, name)  # one profile per target kind
    started = time.perf_counter()
    extracted = extract_models(models, targets, kinds)
    summary = _profile_extracted(extracted, targets, kinds, runnable, store, copies=copies,
                                 end_to_end=end_to_end, redo=set(redo), copy_sizes=copy_sizes, timer=timer,
                                 progress=progress, log=log, lock_timeout_s=lock_timeout_s, rounds=rounds,
                                 max_rounds=max_rounds, host_check=host_check, host_check_limit=host_check_limit)
    return dict(summary, skipped_targets=skipped_targets, seconds=time.perf_counter() - started)


def measure_kernels(model, graph, units_by_kind: dict, targets, store: ProfileStore, *, copies: bool = False,
                    redo: Iterable[str] = (), timer: KernelTimer | None = None, progress: bool = True,
                    log=print, rounds: int = 1, max_rounds: int | None = None, canary_records=None) -> dict:
    """Measure the given kernels of one model (already extracted) on the targets this machine can run.

    What :func:`autoplace.optimize` calls with ``measure="auto"`` for kernels its profiles lack: the
    same harness, records, progress bar, job lock and resume as :func:`profile_models`, without
    extracting the model again and without end-to-end timing.

    Parameters
    ----------
    model, graph : the loaded model and its op graph
    units_by_kind : dict
        ``{target kind: [Unit]}`` to measure (kinds this machine cannot run are skipped).
    targets : TargetSet
    store : ProfileStore
        This machine's folder.
    copies : bool
        Also measure copies between the runnable targets and their call overhead (missing ones only).
    redo : iterable of str
        Record kinds to measure again even if the store has them (``("unit",)``: ``measure="always"``).
    rounds : int
        Time each kernel in this many rounds over all of them (kept builds, no recompiling), merged as
        :func:`profile_models` merges them (:func:`merge_rounds`).
    max_rounds : int, optional
        Then more rounds, up to this many, of the kernels not :func:`confirmed` (as :func:`profile_models`).

    Returns
    -------
    dict
        ``measured``, ``failed``, ``units_unique``, ``seconds`` (and ``unconfirmed`` with ``max_rounds``).

    Raises
    ------
    ProfilingError
        As :func:`profile_models`.
    """
    refuse_in_spawn_bootstrap("autoplace.optimize(measure='auto')")
    started = time.perf_counter()
    targets = TargetSet(targets)
    _check_folder_is_this_machine(store)
    runnable = [name for name in targets if name not in targets.unavailable()]
    kinds = {}
    for name in runnable:
        kinds.setdefault(targets[name].kind, name)
    by_kind = {kind: units for kind, units in units_by_kind.items() if kind in kinds}
    summary = _profile_extracted([(model, graph, by_kind)], targets, kinds, runnable, store, copies=copies,
                                 end_to_end=False, redo=set(redo), copy_sizes=DEFAULT_COPY_SIZES, timer=timer,
                                 progress=progress, log=log, lock_timeout_s=None, rounds=rounds,
                                 report_speed=False, max_rounds=max_rounds, canary_records=canary_records)
    return dict(summary, seconds=time.perf_counter() - started)


#: Seconds :func:`measure_in_context` goes on timing a model in context whose times stay above what its kernels'
#: own times allow (:func:`~autoplace.profile.in_context.in_context_ceiling_us`), or whose fastest rounds were all
#: read while the host-speed canary ran slow, one round a second.
CONTEXT_PATIENCE_S = 10.0


def measure_in_context(model, graph, units_by_kind: dict, targets, store: ProfileStore, *, rounds: int = 1,
                       kernel_us: dict | None = None, patience_s: float | None = None,
                       progress: bool = True, canary_records=None, fresh: bool = False) -> dict:
    """Time the kernels of one model inside its runs (:mod:`.in_context`), built on each target kind of
    ``units_by_kind`` this machine can run; a ``context`` record per kind (no end-to-end latency) goes to
    ``store``. What :func:`autoplace.optimize` calls with ``measure="auto"`` for a model the profiles have no
    in-context times of. Returns ``{kind: record}``.

    Each kind is timed in ``rounds`` rounds of one build, merged as a profile job merges a model's rounds (the
    rounds of the fastest sums, :func:`merge_in_context_rounds`). Given the kernels' own times (``kernel_us``:
    ``{kind: [us per unit]}``, launch order), rounds go on, one a second for up to ``patience_s``, while the
    merged times add up to more than those allow (:func:`~autoplace.profile.in_context.in_context_ceiling_us`:
    a slow phase of the host the canary did not see); if they still do, the kind gets no record (a warning says
    so, its kernels are priced by their own times, and the next call times it again). Rounds go on alike while
    every round among the fastest was read with the canary slow (:func:`_calm_among_fastest`, the rule of
    :func:`confirmed`); after ``patience_s`` the record keeps what the rounds read, unless every round among the
    fastest was read with the host's cores apart (:func:`_apart_among_fastest`): then, as above the ceiling, the
    kind gets no record. ``fresh`` (``measure="always"``) marks the records ``in_context_fresh``: their rounds
    replace the earlier records' of the same kernels (:meth:`CostTable._read_in_context
    <autoplace.cost_model.CostTable._read_in_context>` merges them otherwise).

    Raises
    ------
    ProfilingError
        As :func:`profile_models` (a folder of other hardware, a record that cannot be written).
    """
    import warnings

    from .in_context import in_context_ceiling_us, in_context_record

    refuse_in_spawn_bootstrap("autoplace.optimize(measure='auto')")
    patience_s = CONTEXT_PATIENCE_S if patience_s is None else patience_s
    targets = TargetSet(targets)
    _check_folder_is_this_machine(store)
    kinds = {}
    for name in targets:
        if name not in targets.unavailable():
            kinds.setdefault(targets[name].kind, name)
    todo = [(kind, units) for kind, units in units_by_kind.items() if kind in kinds and units]
    out = {}
    with store.lock(log=lambda message: None):
        speed = (HostSpeed.for_records(store.records(), canary_records) if any(kind == "llvm" for kind, _ in todo)
                 else None)
        for kind, units in tqdm(todo, desc="kernels in context", unit="target", disable=not progress):
            placement = model_placement(model, graph, targets, kinds[kind])
            ceiling = in_context_ceiling_us((kernel_us or {}).get(kind))
            timing, taken = _in_context_rounds(placement, model.random_inputs(), units,
                                               speed if kind == "llvm" else None, rounds, ceiling, patience_s)
            if "in_context_us" in timing:
                timing["in_context_rounds"] = taken
                if timing.pop("apart_only", False):
                    warnings.warn(
                        f"{model.name}: its kernels timed inside the model on {kind} were read in {taken} rounds over "
                        f"{patience_s:.0f} s only while the host's cores ran apart (its sharing canary over "
                        f"{APART:.0f}x its fastest: kernels reading what another core wrote run slow), so they are "
                        f"priced by their own times; the next call times them again", stacklevel=3)
                    continue
                if _above(timing, ceiling):
                    warnings.warn(
                        f"{model.name}: its kernels timed inside the model on {kind} added up to "
                        f"{sum(timing['in_context_us']):.0f} us in {taken} rounds over {patience_s:.0f} s, more than "
                        f"their own times allow ({ceiling:.0f} us): the host ran slow in a way its speed canary does "
                        f"not see, so they are priced by their own times; the next call times them again",
                        stacklevel=3)
                    continue
            if fresh:
                timing["in_context_fresh"] = True
            out[kind] = _append(store, in_context_record(model.name, units, kind, timing))
    return out


def _above(timing: dict, ceiling: float | None) -> bool:
    """Whether in-context times add up to more than ``ceiling`` microseconds (never without a ceiling)."""
    return ceiling is not None and sum(timing["in_context_us"]) > ceiling


def _in_context_rounds(placement, inputs, units, speed, rounds: int, ceiling: float | None,
                       patience_s: float) -> tuple[dict, int]:
    """One build timed in context in ``rounds`` rounds, then one round a second while the merged times stay above
    ``ceiling`` or no calm round is among the fastest, for up to ``patience_s`` (:func:`measure_in_context`); the
    merged timing and the rounds taken."""
    deadline = time.perf_counter() + patience_s
    timing, taken = in_context_fields(placement, inputs, units, speed=speed), 1
    slowdowns, aparts = [timing.get("in_context_host_slowdown")], [bool(timing.get("in_context_apart"))]
    while "in_context_us" in timing and (
            taken < rounds or ((_above(timing, ceiling) or not _calm_among_fastest(timing, slowdowns))
                               and time.perf_counter() < deadline)):
        if taken >= rounds:  # waiting out a slow phase (with the canary: until it reads calm, CALM_WAIT_S a job)
            waited = speed.wait_calm() if speed is not None else 0.0
            if waited < 1.0:
                time.sleep(1.0 - waited)
            deadline += waited
        more = in_context_fields(placement, inputs, units, speed=speed)
        if "in_context_us" not in more:
            break
        timing = {**more, **merge_in_context_rounds(timing, more)}
        slowdowns.append(more.get("in_context_host_slowdown"))
        aparts.append(bool(more.get("in_context_apart")))
        taken += 1
    if "in_context_us" in timing:
        timing["apart_only"] = _apart_among_fastest(timing, aparts)
    return timing, taken


def _apart_among_fastest(timing: dict, aparts: list) -> bool:
    """Whether every round of in-context timing whose sum is among the fastest (within 10%) was read with the
    host's cores apart (``aparts``: each round's ``in_context_apart``). On the 2-vCPU Zen 5 (session 49) such
    rounds read cnn-base and t5-encoder-base 17-22% over their calm times, and the slow phase outlasted the
    rounds and the wait for calm (:data:`~autoplace.profile.host_speed.CALM_WAIT_S`)."""
    rounds = timing.get("round_in_context_us") or [timing["in_context_us"]]
    return all(bool(a) for a in _readings_of_fastest([float(sum(r)) for r in rounds], list(aparts)))


def _calm_among_fastest(timing: dict, slowdowns: list) -> bool:
    """Whether a round of in-context timing whose sum is among the fastest (within 10%) was read while the host
    ran calm (``slowdowns``: each round's ``in_context_host_slowdown``, None without the canary), as
    :func:`confirmed` asks of a kernel's rounds: the merged times are then not those of a slow phase only."""
    rounds = timing.get("round_in_context_us") or [timing["in_context_us"]]
    return _a_calm_round_among_fastest([float(sum(r)) for r in rounds], list(slowdowns))


def extract_models(models: Iterable, targets, kinds: dict) -> list:
    """``[(model, op graph, {target kind: [Unit]})]`` for each model (or ``(name, model)``), its kernels
    extracted for the target profiling each kind (``kinds``: ``{kind: target name}``)."""
    extracted = []
    for item in models:
        name, model = item if isinstance(item, tuple) else (None, item)
        model = load_model(model, name=name)
        graph = op_graph(model)
        extracted.append((model, graph, {kind: extract_units(model, targets[t].target, graph=graph)
                                         for kind, t in kinds.items()}))
    return extracted


def _profile_extracted(extracted, targets, kinds, runnable, store, *, copies, end_to_end, redo, copy_sizes,
                       timer, progress, log, lock_timeout_s, rounds: int = 1, report_speed: bool = True,
                       max_rounds: int | None = None, canary_records=None, host_check: str = "off",
                       host_check_limit: float = HOST_CHECK_LIMIT) -> dict:
    """The job's core over ``[(model, graph, {kind: [Unit]})]``: lock, skip what is done, check the host
    (``host_check``, :func:`_check_host`), measure."""
    own_timer = timer is None
    max_rounds = max(rounds, max_rounds or rounds)
    unconfirmed, moved, checked = None, {}, None
    timer = timer or KernelTimer()
    try:
        with store.lock(timeout_s=lock_timeout_s, log=log):
            done = {tag for tag in store.done(retry_timeouts_below_s=timer.timeout_s) if tag[0] not in redo}
            newest = store.newest_good()  # (read once: 3 s for a profile of 24 MB)
            untimed_in_model, continued = (cpu_kernels_timed_the_old_way(newest, done) if "llvm" in kinds
                                           else (set(), {}))
            untimed_in_context = (_timed_the_old_way(newest, done, "model", "in_context_timing", IN_CONTEXT_TIMING)
                                  if end_to_end else set())
            launches_now = {("model", model.name, kind): [u.key for u in units]
                            for model, _, by_kind in extracted for kind, units in by_kind.items()}
            other_kernels = _launches_other_kernels(newest, done, launches_now) if end_to_end else set()
            recompiled = _compiled_differently_now(newest, done, extracted) if "llvm" in kinds else set()
            if recompiled and end_to_end:  # their models' end-to-end and in-context timings ran the old code too
                other_kernels |= _launching(newest, done, {tag[1] for tag in recompiled})
            done -= untimed_in_model | untimed_in_context | other_kernels | recompiled
            todo, seen, total_units, model_runs = [], {}, 0, []  # seen: {tag: Unit}
            for model, graph, by_kind in extracted:
                for kind, units in by_kind.items():
                    total_units += len(units)
                    if end_to_end and ("model", model.name, kind) not in done:
                        model_runs.append((model, graph, units, kinds[kind], kind))
                    for unit in units:
                        tag = ("unit", unit.key, kind)
                        if tag in seen:
                            continue
                        seen[tag] = unit
                        if tag not in done:
                            todo.append((model.name, graph, unit, targets[kinds[kind]].target, kind))
            again = untimed_in_context & {("model", m.name, kind) for m, _, _, _, kind in model_runs}
            retagged = _retag_cpu_schedule(store, newest, {tag: unit for tag, unit in seen.items() if tag in done})
            skipped = [name for name in targets if name not in runnable]
            log(f"{total_units} kernel launches, {len(seen)} unique kernels, {len(seen) - len(todo)} already "
                f"profiled, {len(todo)} to measure on {sorted(kinds)}"
                + (f"; not on this machine: {skipped}" if skipped else "")
                + (f"; {retagged} CPU kernels the current schedules still make marked so" if retagged else "")
                + (f"; {len(untimed_in_model & set(seen))} CPU kernels timed again because their records lack "
                   f"the in-model timing {IN_MODEL_TIMING} (with weights: {WEIGHTS_COLD_TIMING})"
                   if untimed_in_model & set(seen) else "")
                + (f"; {len(model_runs)} models timed end to end, {len(again)} of them again to time "
                   f"their kernels in context ({IN_CONTEXT_TIMING})" if again else "")
                + (f"; {len(recompiled)} CPU kernels timed again because the Zen's LLVM features (ZEN_LLVM_FEATURES) "
                   "change their code" if recompiled else "")
                + (f"; {len(other_kernels)} models timed again because their records launch other kernels "
                   "than the current build (a legalization, schedule or code generation change)" if other_kernels else ""))
            # The canary starts from the folder's fastest reading: read the records only when timing something.
            before = ({tag: r for tag, r in store.newest_good().items() if tag in seen and tag[0] == "unit"}
                      if "unit" in redo else {})
            timing_cpu = "llvm" in kinds and bool(todo or model_runs or max_rounds > 1)
            kept = _KeptBuilds(budget_bytes=_kept_builds_budget() if max_rounds > 1 else 0)
            if host_check != "off" and any(item[4] == "llvm" for item in todo + model_runs):
                timing_models = any(kind == "llvm" for *_, kind in model_runs)
                checked = _check_host(newest, seen, recompiled, targets, kinds, timer, store, mode=host_check,
                                      limit=host_check_limit, log=log, extracted=extracted, kept=kept,
                                      launches_now=launches_now if timing_models else None)
            speed = HostSpeed.for_records(store.records(), canary_records) if timing_cpu else None
            if speed is not None and checked is not None and checked.own_slow:
                speed.host_check_ratio = round(checked.ratio, 4)
            measured, failed = _measure_units(todo, timer, targets, kinds, store, progress, keep=max_rounds > 1,
                                              speed=speed, continued=continued)
            for model, graph, units, tname, kind in tqdm(model_runs, desc="end to end", unit="model",
                                                         disable=not progress):
                placement, inputs = kept.get(model, graph, targets, tname)
                _append(store, model_record(model, graph, units, targets, tname, kind, placement=placement,
                                            inputs=inputs, speed=speed if kind == "llvm" else None))
            if max_rounds > 1:
                unconfirmed = _more_rounds(extracted, targets, kinds, store, timer, kept, rounds, end_to_end, progress,
                                           speed, max_rounds=max_rounds)
                if max_rounds > rounds:
                    log(f"after up to {max_rounds} rounds: {len(unconfirmed)} of the job's kernels and models still "
                        "have a fastest round no other round confirms within 10%, or only rounds read while the "
                        "host ran slow (add rounds with a higher --max-rounds at a calmer moment)"
                        + (f" (e.g. {', '.join(sorted(unconfirmed.values())[:4])})" if unconfirmed else ""))
            moved = moved_readings(before, store.newest_good()) if before else {}
            if moved:
                names = {("unit", unit.key, kind): f"{name}:{unit.func_name}" for name, _, unit, _, kind in todo}
                examples = [f"{names.get(tag, tag[1])} {old:.3g} -> {new:.3g} us" for tag, (old, new) in
                            sorted(moved.items(), key=lambda kv: -abs(math.log(kv[1][1] / kv[1][0])))[:3]]
                log(f"{len(moved)} re-timed kernels read {MOVED_FACTOR}x or more apart from their previous job's "
                    f"record ({'; '.join(examples)}): a job can run a kernel slow in every round. Where the new "
                    "reading is the slower, add rounds in another job (--rounds N: the fastest rounds are kept) "
                    "rather than --redo")
            if speed is not None and speed.report(always=report_speed):
                log(speed.report())
            if model_runs:
                warning = host_state_warning(store, {("model", m.name, kind) for m, _, _, _, kind in model_runs})
                if warning:
                    log(warning)
            if copies:
                _profile_copies(targets, runnable, store, copy_sizes, done, progress, log)
    finally:
        if own_timer:
            timer.close()
    summary = dict(units_total=total_units, units_unique=len(seen), measured=measured, failed=failed)
    if checked is not None:
        summary["host_check"] = checked.summary("timed anyway" if checked.slow else "passed")
    if unconfirmed is not None and max_rounds > rounds:
        summary["unconfirmed"] = len(unconfirmed)
    if "unit" in redo:
        summary["moved"] = len(moved)
    return summary


def _check_host(newest: dict, seen: dict, recompiled: set, targets, kinds: dict, timer: KernelTimer,
                store: ProfileStore, *, mode: str, limit: float, log, extracted=(), launches_now=None, kept=None):
    """The job's host check (:func:`~autoplace.profile.host_check.check_host_speed`) on the CPU kernels of its
    models that the folder has (``seen``: ``{tag: Unit}``; not ``recompiled`` ones, whose code changed), topped up
    with those of :data:`~autoplace.profile.host_check.REFERENCE_MODELS` when they are too few and the folder
    has enough of any. With ``launches_now`` (``{model tag: [kernel keys]}`` of a job that times models end to
    end) it times models end to end too: the job's (``extracted``) and the reference models whose record launches
    the kernels their build launches now (built with ``kept``, :class:`_KeptBuilds`)."""
    from .. import zoo

    loaded: dict = {}

    def reference(name):  # [(model, graph, {kind: [Unit]})] of a reference model, [] when it cannot be loaded
        if name not in loaded:
            try:  # (a zoo model needs the frontends' extras; without them the check has fewer kernels)
                loaded[name] = extract_models([(name, zoo.parse(name))], targets, {"llvm": kinds["llvm"]})
            except (ImportError, AutoplaceError) as err:
                log(f"host check: reference model {name} not loaded ({type(err).__name__}: {str(err)[:120]})")
                loaded[name] = []
        return loaded[name]

    references = reference_kernels(newest, seen, exclude=recompiled)
    if len(references) < MIN_HOST_CHECK_KERNELS and sum(  # (the folder has enough calm kernels for a check at all)
            1 for tag, r in newest.items() if tag[0] == "unit" and tag[2] == "llvm" and confirmed(r)
    ) >= MIN_HOST_CHECK_KERNELS:
        extra = {}
        for name in REFERENCE_MODELS:
            for _, _, by_kind in reference(name):
                extra.update({("unit", u.key, "llvm"): u for u in by_kind["llvm"]})
        references = reference_kernels(newest, {**extra, **seen}, exclude=recompiled)
    models = []
    if launches_now is not None:
        changed_keys = {tag[1] for tag in recompiled}

        def current(tag, keys):  # the record launches what the build launches now, none of it recompiled
            record = newest.get(tag)
            return (record is not None and list(record.get("unit_keys") or ()) == list(keys)
                    and not changed_keys & set(keys))

        candidates = {}
        for model, graph, by_kind in extracted:
            tag = ("model", model.name, "llvm")
            if "llvm" in by_kind and current(tag, launches_now.get(tag, ())):
                candidates[tag] = (model, graph)
        if len(candidates) < HOST_CHECK_MODELS:
            for name in REFERENCE_MODELS:
                if ("model", name, "llvm") in candidates or ("model", name, "llvm") not in newest:
                    continue
                for model, graph, by_kind in reference(name):
                    if current(("model", model.name, "llvm"), [u.key for u in by_kind.get("llvm", ())]):
                        candidates[("model", model.name, "llvm")] = (model, graph)
        for _tag, (model, graph), record in reference_models(newest, candidates):
            models.append((model.name, _end_to_end_timer(model, graph, targets, kinds["llvm"], kept), record))
    timer.check_harness()
    return check_host_speed(references, timer, targets[kinds["llvm"]].target, mode=mode, limit=limit, log=log,
                            folder=store.path, models=models)


def _end_to_end_timer(model, graph, targets, name: str, kept):
    """``time_us()``: the model built on target ``name`` (once, at the first call) timed end to end
    (:func:`time_end_to_end`, no canary), its median in us; None when it cannot be built or run."""
    build = {}

    def time_us():
        try:
            if "placement" not in build:
                build["placement"], build["inputs"] = kept.get(model, graph, targets, name)
            timing = time_end_to_end(build["placement"].runner, build["inputs"], "llvm")
        except Exception:  # (a model that does not build is left out of the check, as a kernel that fails is)
            return None
        return float(timing["median_us"]) if timing.get("status") == "ok" else None

    return time_us


def _check_folder_is_this_machine(store: ProfileStore) -> None:
    """Refuse to measure into the profile folder of other hardware (it would mix machines)."""
    here = measured_by()["hardware_id"]
    folder = store.metadata.get("hardware_id")
    if folder is not None and folder != here:
        raise ProfilingError(
            f"{store.path} holds the profile of hardware {folder!r}, but this machine is {here!r}: measuring "
            f"here would mix two machines in one profile. Profile into this machine's own folder "
            f"(profiles/{here}, the default of `autoplace profile`; or pass another --dir)."
        )


def _append(store: ProfileStore, record: dict) -> dict:
    """Stamp a record with what measured it (this process: hardware, running TVM, date) and append it."""
    stamp = measured_by()
    record = {**record, "hardware_id": stamp["hardware_id"], "tvm_version": stamp["tvm_version"]}
    record.setdefault("measured_at", stamp["measured_at"])
    try:
        return store.append(record)
    except OSError as err:
        raise ProfilingError(
            f"cannot write to the profile {store.path}: {err}. Records written before this one are kept; "
            "fix the cause (e.g. free disk space) and run again: the job resumes where it stopped."
        ) from err


def probe_module():
    """A trivial kernel (``x + x`` on 16 floats) every working target measures: the harness check."""
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((16,), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.add(x, x))
        bb.emit_func_output(y)
    return bb.get()


def _probe(timer: KernelTimer, target, kind: str) -> None:
    """Measure the probe kernel with the job's timer; a failure is the harness's or the options', not data."""
    unit = extract_units(probe_module(), target)[0]
    result = timer.measure(unit, target)
    if result.get("status") not in SUCCESS:
        raise ProfilingError(
            f"the profiler cannot measure even a trivial kernel (x + x on 16 floats) on {kind} with "
            f"{timer.options()}: {result.get('status')}: {result.get('error', '')}. That is a problem of the "
            "options or the set-up, not of any kernel, so nothing was measured or recorded; check the "
            "options (defaults: repeat=7, min_repeat_ms=20, timeout_s=300) and that TVM can build and run "
            "for this target."
        )


def _measure_units(todo, timer: KernelTimer, targets, kinds: dict, store: ProfileStore, progress: bool,
                   keep: bool = False, speed: HostSpeed | None = None, continued: dict | None = None):
    """Measure ``todo`` after the harness checks; failures on a target stay in memory until one kernel
    there succeeds, and a target where every kernel fails raises instead of recording them. A kernel in
    ``continued`` (``{tag: its newest record}``) adds this timing as one more round of that record
    (:func:`merge_rounds`)."""
    continued = continued or {}
    if not todo:
        return 0, 0
    timer.check_harness()  # the worker starts and answers, or ProfilingError
    for kind in sorted({item[4] for item in todo}):
        _probe(timer, targets[kinds[kind]].target, kind)
    working = store.working_targets()
    held: dict = {}
    measured = failed = 0
    bar = tqdm(todo, desc="kernels", unit="kernel", disable=not progress)
    for model_name, graph, unit, target, kind in bar:
        bar.set_postfix_str(f"{model_name}:{unit.func_name}"[:40])
        speed_now = speed.fields() if speed is not None and kind == "llvm" else {}
        result = timer.measure(unit, target, keep=keep)
        if result.get("status") in SUCCESS:
            result.update(speed_now)
        record = unit_record(unit, graph, model_name, kind, result)
        measured += 1
        if result["status"] == "ok" and ("unit", unit.key, kind) in continued:
            record = merge_rounds(continued[("unit", unit.key, kind)], record)
        if result["status"] in SUCCESS:
            working.add(kind)
            for earlier in held.pop(kind, []):
                _append(store, earlier)
            _append(store, record)
        else:
            failed += 1
            if kind in working:
                _append(store, record)
            else:
                held.setdefault(kind, []).append(record)
    for kind, records in held.items():
        statuses = sorted({r["status"] for r in records})
        first = records[0]
        raise ProfilingError(
            f"every one of the {len(records)} kernel(s) measured on {kind} failed ({', '.join(statuses)}; "
            f"first: {first['func_name']}: {first.get('error', '')}) and no kernel has ever run there in "
            f"{store.path}: that is a problem of the options ({timer.options()}) or the set-up, not data "
            "about these kernels, so none of these failures was recorded. Fix the cause and run again."
        )
    return measured, failed


class _KeptBuilds:
    """Models built for end-to-end timing, kept for the job's later rounds while their weights fit a budget
    (a model over it is built again in each round)."""

    def __init__(self, budget_bytes: int):
        self.budget_bytes = budget_bytes
        self.builds: dict = {}
        self.held_bytes = 0

    def get(self, model, graph, targets, name: str):
        key = (model.name, name)
        if key in self.builds:
            return self.builds[key]
        build = model_placement(model, graph, targets, name), model.random_inputs()
        size = int(getattr(model, "weight_nbytes", 0) or 0)
        if self.held_bytes + size <= self.budget_bytes:
            self.builds[key] = build
            self.held_bytes += size
        return build


def _kept_builds_budget() -> int:
    """A quarter of the memory available now (Linux), else 2 GiB: the most a job keeps built models in."""
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 4
    except (ValueError, OSError, AttributeError):
        return 2 << 30


def _more_rounds(extracted, targets, kinds, store: ProfileStore, timer: KernelTimer, kept: _KeptBuilds,
                 rounds: int, end_to_end: bool, progress: bool, speed: HostSpeed | None = None,
                 max_rounds: int | None = None) -> dict:
    """Rounds 2..``rounds``: time every successful kernel and model of the job again, one round after the
    other over all of them (so a kernel's rounds are minutes apart), and append each merged record
    (:func:`merge_rounds`). A record that already has ``rounds`` rounds is left; one with fewer (a job
    stopped in a later round) gets the rounds it lacks. Then rounds up to ``max_rounds`` of the records not
    :func:`confirmed`; returns ``{tag: model:kernel}`` of those that are still not."""
    newest = store.newest_good()
    units, models, names = [], [], {}
    for model, graph, by_kind in extracted:
        for kind, kind_units in by_kind.items():
            if end_to_end and ("model", model.name, kind) in newest:
                models.append((("model", model.name, kind), model, graph, kinds[kind], kind, kind_units))
                names[("model", model.name, kind)] = model.name
            for unit in kind_units:
                tag = ("unit", unit.key, kind)
                if tag in newest and tag not in names:
                    names[tag] = f"{model.name}:{unit.func_name}"
                    units.append((tag, unit, targets[kinds[kind]].target))

    def speed_now(tag):
        return speed.fields() if speed is not None and tag[2] == "llvm" else dict(host_slowdown=None)

    max_rounds = max(rounds, max_rounds or rounds)

    def due(tag, round_):
        return rounds_timed(newest[tag]) < round_ and (round_ <= rounds or not confirmed(newest[tag]))

    for round_ in range(2, max_rounds + 1):
        behind = [item for item in units if due(item[0], round_)]
        label = f"round {round_}/{rounds}" if round_ <= rounds else f"round {round_}/{max_rounds} (unconfirmed)"
        if round_ > rounds and speed is not None and (behind or any(due(item[0], round_) for item in models)):
            speed.wait_calm()  # a slow phase can outlast the rounds (host_speed.CALM_WAIT_S)
        for tag, unit, target in tqdm(behind, desc=f"kernels, {label}", unit="kernel", disable=not progress):
            now = speed_now(tag)
            result = timer.measure(unit, target, keep=True)
            if result.get("status") == "ok":
                newest[tag] = _append(store, merge_rounds(newest[tag], dict(result, **now)))
        behind = [item for item in models if due(item[0], round_)]
        for tag, model, graph, name, kind, kind_units in tqdm(behind, desc=f"end to end, {label}",
                                                  unit="model", disable=not progress):
            placement, inputs = kept.get(model, graph, targets, name)
            timing = time_model(placement, inputs, kind_units, kind, speed=speed if kind == "llvm" else None)
            if timing.get("status") == "ok":
                newest[tag] = _append(store, merge_rounds(newest[tag], {"host_slowdown": None, **timing}))
    timer.forget_kept()
    return {tag: names[tag] for tag, *_ in units + models if not confirmed(newest[tag])}


def _profile_copies(targets, runnable, store, copy_sizes, done, progress, log) -> None:
    for name in runnable:
        label = target_label(targets[name])
        if ("launch", "vm_call", label) not in done:
            result = measure_launch_overhead(targets, name)
            _append(store, dict(kind="launch", key="vm_call", target=label, measured_at=_now(), status="ok",
                                **result))
    pairs = [(s, d) for s, d in itertools.permutations(runnable, 2)]
    for src, dst in pairs:
        label = f"{target_label(targets[src])}->{target_label(targets[dst])}"
        if ("copy_fit", "fit", label) in done:
            continue
        bar = tqdm(total=len(copy_sizes), desc=f"copies {label}", unit="size", disable=not progress)
        results = measure_copies(targets, src, dst, copy_sizes, progress=bar)
        bar.close()
        for res in results:
            _append(store, dict(kind="copy", key=str(res["nbytes"]), target=label, measured_at=_now(),
                                status="ok", **res))
        alpha, per_byte = fit_copy_cost([r["nbytes"] for r in results], [r["median_us"] for r in results])
        _append(store, dict(kind="copy_fit", key="fit", target=label, alpha_us=alpha, us_per_byte=per_byte,
                            bandwidth_gb_s=(1e-3 / per_byte) if per_byte > 0 else None,
                            measured_at=_now(), status="ok"))
        log(f"copy {label}: alpha {alpha:.2f} us, {1e-3 / per_byte if per_byte else float('inf'):.2f} GB/s")
