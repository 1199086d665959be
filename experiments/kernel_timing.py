"""Build kernels once and time them side by side: what the schedule experiments share.

``build_kernels`` compiles each distinct scheduled kernel (by its TIR hash, a :class:`autoplace.profile.Unit` key)
with random arguments; ``time_interleaved`` times all of them in rounds (round 1 times every kernel once, then
round 2...), each sample about 1 ms of calls, so every variant of a kernel sees the same host.
"""

from __future__ import annotations

import numpy as np


def build_kernels(units) -> dict:
    """``{TIR hash: (runtime module, arguments)}`` for ``(TIR hash, unit)`` pairs; a hash seen before is skipped."""
    import tvm

    from autoplace.backend.strided_loads import TIR_PIPELINE
    from autoplace.profile.measure import _random_args

    built = {}
    for tir_hash, unit in units:
        if tir_hash in built:
            continue
        func = unit.prim_func.with_attr("global_symbol", "main")
        lib = tvm.tirx.build(tvm.IRModule({"main": func.without_attr("target")}), target=func.attrs["target"],
                             pipeline=TIR_PIPELINE)
        built[tir_hash] = (lib, _random_args(unit.arg_shapes, unit.arg_dtypes, unit.num_outputs, tvm.cpu()))
    return built


def time_interleaved(built: dict, rounds: int, sample_s: float = 1e-3) -> dict:
    """``{TIR hash: [median us of each round]}``: every kernel of ``built`` timed once per round, in turn."""
    import tvm

    numbers = {}
    for tir_hash, (lib, targs) in built.items():
        lib["main"](*targs)
        once = lib.time_evaluator("main", tvm.cpu(), number=1, repeat=3)(*targs).results
        numbers[tir_hash] = max(1, int(sample_s / max(1e-9, float(np.median(once)))))
    times = {h: [] for h in built}
    for _ in range(rounds):
        for tir_hash, (lib, targs) in built.items():
            timer = lib.time_evaluator("main", tvm.cpu(), number=numbers[tir_hash], repeat=5)
            times[tir_hash].append(float(np.median(timer(*targs).results)) * 1e6)
    return times


def time_variants(by_variant: dict, rounds: int) -> dict:
    """Every distinct kernel of ``{variant: {model: [(func_name, TIR hash, unit, ...)]}}`` built once and timed in
    interleaved rounds (:func:`time_interleaved`): ``{TIR hash: [median us of each round]}``."""
    built = build_kernels((launch[1], launch[2]) for launches in by_variant.values()
                          for model_launches in launches.values() for launch in model_launches)
    print(f"{len(built)} distinct kernel builds over {len(by_variant)} variants", flush=True)
    return time_interleaved(built, rounds)


def time_runners_interleaved(runners: dict, inputs, rounds: int, sample_us: float = 20_000.0) -> dict:
    """Whole builds side by side: every runner's outputs checked against the first's (within 1e-3), then
    ``{name: [median us of each round]}``, the runners (``autoplace`` :class:`~autoplace.place.Runner`) timed in
    turn each round, each sample about ``sample_us`` of calls."""
    first, *rest = runners.values()
    expected = first(*inputs)
    for runner in rest:
        got = runner(*inputs)
        for x, y in zip(expected if isinstance(expected, tuple) else (expected,), got if isinstance(got, tuple) else (got,)):
            np.testing.assert_allclose(x, y, rtol=1e-3, atol=1e-3)
    number = max(1, int(sample_us / max(1.0, float(np.median(first.time_us(inputs, repeat=3))))))
    times = {name: [] for name in runners}
    for _ in range(rounds):
        for name, runner in runners.items():
            times[name].append(float(np.median(runner.time_us(inputs, number=number, repeat=5))))
    return times


def side_by_side_row(model: str, times: dict, before, after, labels=None) -> dict:
    """A results row of two builds of ``model`` timed in interleaved rounds (``times``: ``{build: [us of each
    round]}``): median and min over rounds of each (``<label>_median_us``, ``<label>_min_us``; labels default to the
    builds' names) and ``speedup_median`` / ``speedup_min``, ``before``'s time over ``after``'s."""
    old, new = times[before], times[after]
    a, b = labels or (before, after)
    return {"model": model, f"{a}_median_us": float(np.median(old)), f"{a}_min_us": min(old),
            f"{b}_median_us": float(np.median(new)), f"{b}_min_us": min(new),
            "speedup_median": float(np.median(old) / np.median(new)), "speedup_min": min(old) / min(new)}


def two_versions(models, schedule_version, versions, rounds: int, describe, time_models=()):
    """Schedule version ``old`` against ``new`` (``versions``), side by side: ``(kernels, models)`` DataFrames.

    ``models``: :class:`autoplace.frontend.Model` objects; ``schedule_version(v)`` a context manager that sets the
    CPU rules as version ``v`` made them. Every kernel whose scheduled TIR differs between the versions (a pair of
    keys seen before is skipped) is built both ways with the same random inputs, the outputs compared
    (``same_nans``, ``max_abs_diff``), and timed in interleaved rounds: one row each, ``describe(model, old unit,
    new unit)``'s columns, ``v<old>_us`` / ``v<new>_us`` (min over rounds) and ``speedup`` (old / new). Each of
    ``time_models`` is placed all-CPU and built both ways, outputs checked, timed in interleaved rounds
    (:func:`side_by_side_row`).
    """
    import pandas as pd

    import autoplace
    from autoplace.backend.cpu_schedules import cpu_target
    from autoplace.profile.units import extract_units

    old_v, new_v = versions
    target = cpu_target("llvm")
    pairs, rows, seen = [], [], set()
    for model in models:
        units = {}
        for version in versions:
            with schedule_version(version):
                units[version] = extract_units(model, target)
        for old, new in zip(units[old_v], units[new_v]):
            if old.key == new.key or (old.key, new.key) in seen:
                continue
            seen.add((old.key, new.key))
            pairs += [(old.key, old), (new.key, new)]
            rows.append(dict(model=model.name, func_name=new.func_name, **describe(model, old, new),
                             **{f"v{old_v}_key": old.key, f"v{new_v}_key": new.key}))
        print(f"{model.name}: {sum(r['model'] == model.name for r in rows)} kernels changed", flush=True)
    built = build_kernels(pairs)
    for row in rows:  # the same inputs both ways, outputs compared
        old_lib, old_args = built[row[f"v{old_v}_key"]]
        new_lib, new_args = built[row[f"v{new_v}_key"]]
        for a, b in zip(old_args, new_args):
            b.copyfrom(a.numpy())
        old_lib["main"](*old_args)
        new_lib["main"](*new_args)
        old_out, new_out = old_args[-1].numpy(), new_args[-1].numpy()
        row["same_nans"] = bool((np.isnan(old_out) == np.isnan(new_out)).all())  # an rsqrt of random inputs
        row["max_abs_diff"] = float(np.nan_to_num(np.abs(old_out - new_out)).max())
    times = time_interleaved(built, rounds)
    for row in rows:
        row[f"v{old_v}_us"] = float(np.min(times[row[f"v{old_v}_key"]]))
        row[f"v{new_v}_us"] = float(np.min(times[row[f"v{new_v}_key"]]))
        row["speedup"] = row[f"v{old_v}_us"] / row[f"v{new_v}_us"]
    model_rows = []
    for model in time_models:
        inputs = model.random_inputs()
        runners = {}
        for version in versions:
            with schedule_version(version):
                runners[version] = autoplace.place(model, None, None, {"cpu": "llvm"}).runner
        times = time_runners_interleaved(runners, inputs, rounds)  # outputs checked within 1e-3 first
        model_rows.append(side_by_side_row(model.name, times, old_v, new_v, labels=(f"v{old_v}", f"v{new_v}")))
        print(model_rows[-1], flush=True)
    return pd.DataFrame(rows), pd.DataFrame(model_rows)


def report_two_versions(kernels, models, versions, folder: str, name: str) -> None:
    """Print and write what :func:`two_versions` measured: ``<folder>/<name>_kernels.csv`` and ``_models.csv``."""
    import os

    import pandas as pd

    kernels.to_csv(os.path.join(folder, f"{name}_kernels.csv"), index=False)
    if len(kernels):
        with pd.option_context("display.width", 220, "display.max_colwidth", 48, "display.max_rows", 500):
            print(kernels.drop(columns=[f"v{v}_key" for v in versions]).round(3).to_string(index=False))
        s = kernels["speedup"]
        print(f"{len(kernels)} kernels changed: speedup min {s.min():.2f}, median {s.median():.2f}, max {s.max():.2f}; "
              f"{int((s < 0.95).sum())} slower by more than 5%; max abs diff {kernels['max_abs_diff'].max():.1e}")
    if len(models):
        models.to_csv(os.path.join(folder, f"{name}_models.csv"), index=False)
        print(models.round(3).to_string(index=False))
    print(f"wrote {folder}/{name}_*.csv")
