"""Does the host-speed canary see the phases in which whole models run slow? Matmul canary against a streaming one.

In session 11 some rounds of ``experiments/measure_auto.py`` ran 20-40% slow for every model at once while the
canary (``autoplace.profile.host_speed``: a 128x256x256 matmul, 256 KB, compute-bound) read calm. The guess:
another tenant's memory traffic (L3, DRAM bandwidth), which a kernel that stays in L2 does not feel. This times,
in turn and for ``--seconds``, the matmul canary, a streaming canary (``x + y`` over two 16 MB tensors: 48 MB of
traffic, more than the L3) and one ~20 ms sample of each model, all-CPU, and asks which canary flags the slow
model samples. Session 49 added a canary that stays in the L3 (``x + y`` over two tensors of an eighth of the L3
each, read from sysfs): on the AMD Zen 5 whole models ran at two speeds (inception-base 1.3 vs 2.0 ms) while the
matmul canary and 64 MB copies stayed steady, and another tenant taking the shared L3 is what neither would feel.
It did not: the L3 and streaming canaries ran *faster* in the slow phase. The *sharing* canary
(``host_speed._sharing_canary_runner``: each thread reads what another core wrote) read 4.5x slower there and
flags it (``host_speed.APART``).

Session 51 asked whether a build speeds up as it ages (``--fresh-every-s``: each model built anew every so many
seconds and timed right after the first build): on the Zen 5 a fresh build ran as fast as one 20 minutes old
(median ratio 0.995-1.003 over 10233 pairs of each model), while the calm samples of both drifted 4-9% faster over
those 20 minutes (bert-base 2464 -> 2300 us, vit-base 1403 -> 1313, cnn-base 2086 -> 2001) with the matmul canary
37 -> 35 us: the host's speed drifts, slowly and by more than a model's own spread within a minute.

    python experiments/canary_correlation.py [--models bert-base resnet-base] [--seconds 240] [--fresh-every-s 300]
                                             [--tag _s49]

Writes ``experiments/results/<hardware id>/canary_correlation<tag>.csv`` (every sample) and prints per model the
Spearman correlation of its sample times with each canary, and how many of its slow samples (over 1.15x its
fastest) each canary flags (over 1.15x the canary's fastest), and how often it flags a calm one.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import pandas as pd
from results_folder import results_folder

STREAM_SHAPE = (1024, 4096)  # float32: 16 MB per tensor
SLOW = 1.15
CANARIES = ("matmul", "stream", "l3", "sharing")


def stream_canary(shape=STREAM_SHAPE, number=2):
    """``time_us()`` of ``x + y`` over two ``shape`` float32 tensors, built as autoplace builds."""
    import tvm
    from tvm import relax

    from autoplace.backend.cpu_schedules import cpu_target
    from autoplace.backend.pipeline import single_device_build

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    y = relax.Var("y", relax.TensorType(shape, "float32"))
    with bb.function("main", [x, y]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.add(x, y))
        bb.emit_func_output(out)
    dev = tvm.cpu()
    vm = relax.VirtualMachine(single_device_build(bb.get(), cpu_target("llvm")), dev)
    rng = np.random.default_rng(0)
    args = [tvm.runtime.tensor(rng.standard_normal(shape).astype("float32"), dev) for _ in range(2)]
    timer = vm.time_evaluator("main", dev, number=number, repeat=1)

    def time_us() -> float:
        return float(np.median(timer(*args).results)) * 1e6

    time_us()
    return time_us


def _build(spec):
    """``(runner, inputs, number)``: ``spec`` built all-CPU, and how many runs make a ~20 ms sample."""
    import autoplace
    from autoplace import zoo

    model = zoo.parse(spec)
    runner = autoplace.place(model, None, None, {"cpu": "llvm"}).runner
    inputs = model.random_inputs()
    number = max(1, int(20_000 / max(1.0, float(np.median(runner.time_us(inputs, repeat=3))))))
    return runner, inputs, number


def collect(specs, seconds: float, fresh_every_s: float = 0.0) -> pd.DataFrame:
    """Samples of each model in ``specs`` (one ~20 ms sample each in turn, each after one reading of every
    canary) for ``seconds``. With ``fresh_every_s``, each model is also built anew every so many seconds and a
    sample of that build (model ``<spec> (fresh)``) follows each sample of the first: the two read side by side
    tell whether a build speeds up or slows down as it ages (``build_age_s``) or the host does."""
    from autoplace.profile.host_speed import _canary_runner, _sharing_canary_runner
    from autoplace.profile.remote_runner import cache_size_bytes

    l3_bytes = cache_size_bytes(3) or 32 << 20
    l3_shape = (l3_bytes // 8 // 4 // 1024, 1024)  # two inputs and the output: 3/8 of the L3
    canaries = dict(matmul=_canary_runner(), stream=stream_canary(), l3=stream_canary(l3_shape, number=10),
                    sharing=_sharing_canary_runner())
    start = time.monotonic()
    models = [(spec, time.monotonic() - start, *_build(spec)) for spec in specs]
    fresh = {}
    rows = []
    while time.monotonic() - start < seconds:
        for spec, built_s, runner, inputs, number in models:
            if fresh_every_s and (spec not in fresh or time.monotonic() - start - fresh[spec][0] >= fresh_every_s):
                fresh[spec] = (time.monotonic() - start, *_build(spec))
            row = {f"{name}_canary_us": time_us() for name, time_us in canaries.items()}
            model_us = float(runner.time_us(inputs, number=number, repeat=1)[0])
            t_s = time.monotonic() - start
            rows.append(dict(t_s=t_s, model=spec, build_age_s=t_s - built_s, **row, model_us=model_us))
            if spec in fresh:
                fresh_s, fresh_runner, fresh_inputs, _ = fresh[spec]
                fresh_us = float(fresh_runner.time_us(fresh_inputs, number=number, repeat=1)[0])
                t_s = time.monotonic() - start
                rows.append(dict(t_s=t_s, model=f"{spec} (fresh)", build_age_s=t_s - fresh_s, **row,
                                 model_us=fresh_us))
    return pd.DataFrame(rows)


def summarize(table: pd.DataFrame) -> pd.DataFrame:
    out = []
    names = [n for n in CANARIES if f"{n}_canary_us" in table]  # older runs have no L3 canary
    flags = {n: table[f"{n}_canary_us"] > SLOW * table[f"{n}_canary_us"].min() for n in names}
    for spec, group in table.groupby("model", sort=False):
        slow = group.model_us > SLOW * group.model_us.min()
        row = dict(model=spec, samples=len(group), slow_samples=int(slow.sum()),
                   model_spread=float(group.model_us.max() / group.model_us.min()))
        for name in names:
            flag = flags[name][group.index]
            row[f"{name}_spearman"] = float(group.model_us.corr(group[f"{name}_canary_us"], method="spearman"))
            row[f"{name}_flags_slow"] = int((flag & slow).sum())
            row[f"{name}_flags_calm"] = int((flag & ~slow).sum())
        out.append(row)
    return pd.DataFrame(out)


def simulate_calm_policies(table: pd.DataFrame, policies=((1.15, 1.10), (1.05, 1.05), (1.03, 1.03)),
                           wanted: int = 5, patience: int = 45) -> pd.DataFrame:
    """Replay :meth:`HostSpeed.calm_samples` over the recorded samples of each model, for each ``(calm, keep)``
    policy: a call takes samples in order until ``wanted`` follow a canary within ``calm`` of the fastest (or
    ``patience`` samples, about 3 s here), keeps those within ``keep`` of the calmest canary of the call, and
    reports their median. Its error is against the model's 5th-percentile sample (the calm floor)."""
    best = table.matmul_canary_us.min()
    rows = []
    for spec, group in table.groupby("model", sort=False):
        canary, model_us = group.matmul_canary_us.to_numpy(), group.model_us.to_numpy()
        floor = np.percentile(model_us, 5)
        for calm_th, keep in policies:
            errors, i = [], 0
            while i < len(group) - patience:
                pairs = []
                while True:
                    pairs.append((canary[i], model_us[i]))
                    i += 1
                    if sum(c <= best * calm_th for c, _ in pairs) >= wanted or len(pairs) >= max(wanted, patience):
                        break
                calmest = min(c for c, _ in pairs)
                errors.append(np.median([v for c, v in pairs if c <= calmest * keep]) / floor - 1)
            rows.append(dict(model=spec, calm=calm_th, keep=keep, calls=len(errors),
                             samples_per_call=len(group) / max(1, len(errors)),
                             median_error=float(np.median(errors)), p90_error=float(np.percentile(errors, 90))))
    return pd.DataFrame(rows)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", default=["bert-base", "resnet-base"])
    parser.add_argument("--seconds", type=float, default=240)
    parser.add_argument("--fresh-every-s", type=float, default=0.0,
                        help="also build each model anew every so many seconds and time it beside the first build")
    parser.add_argument("--replay", action="store_true", help="analyse the samples of the last run again")
    parser.add_argument("--tag", default="", help="suffix of the CSV's name")
    args = parser.parse_args(argv)
    out_dir = results_folder()
    path = os.path.join(out_dir, f"canary_correlation{args.tag}.csv")
    if args.replay:
        table = pd.read_csv(path)
    else:
        table = collect(args.models, args.seconds, args.fresh_every_s)
        table.to_csv(path, index=False)
    for name in CANARIES:
        if f"{name}_canary_us" in table:
            column = table[f"{name}_canary_us"]
            print(f"{name} canary: fastest {column.min():.0f} us, median {column.median() / column.min():.2f}x, "
                  f"90th percentile {column.quantile(0.9) / column.min():.2f}x")
    print(summarize(table).to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    print("calm-sample policies replayed on these samples (error of a call's median against the model's calm floor):")
    print(simulate_calm_policies(table).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
