"""The cost model on a model the profile never saw: predicted vs measured end-to-end latency.

The leave-one-family-out evaluation (``cost_model_eval.py``) holds out zoo models whose kernels were
profiled. This script takes a model with *no* profiled kernel (by default ``bert_base``: BERT-base
geometry, hidden 768, 12 layers, sequence 128; the profile has the 256-wide 4-layer ``bert-base``),
predicts its single-device latency from the profile's saved cost model (lookup first, as
``autoplace.optimize`` does), then builds and times it on this machine and reports the error.

    python experiments/cost_model_unseen.py --profile profiles/amd-epyc-2c [--model bert_base] [--repeat 3]

Writes ``experiments/results/cost_model_unseen_<model>.json``: predicted total and per-source split
(measured / predicted kernels), measured min/median/max over ``--repeat`` runs, the error, the
slowest kernels' predictions and where the numbers came from.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import time

import numpy as np

from autoplace import zoo
from autoplace.cost_model import CostTable
from autoplace.cost_model.train import default_model_path
from autoplace.graph import op_graph
from autoplace.place import place
from autoplace.profile import ProfileStore, extract_units
from autoplace.targets import TargetSet

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="profiles/amd-epyc-2c")
    parser.add_argument("--model", default="bert_base", help="zoo spec (default bert_base)")
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--repeat", type=int, default=3, help="end-to-end runs to time (one call each)")
    parser.add_argument("--out", default=RESULTS)
    args = parser.parse_args(argv)

    started = time.perf_counter()
    model = zoo.parse(args.model)
    graph = op_graph(model)
    targets = TargetSet({"dev": args.target})
    label = f"{args.target}:0"
    units = extract_units(model, args.target, graph=graph)
    table = CostTable.from_profile(args.profile)
    frame = table.latencies(units, args.target, graph=graph)
    frame["func_name"] = [u.func_name for u in units]
    placement = place(model, None, None, targets)
    num_args = len(placement.mod["main"].params)
    output_bytes = int(placement.graph.nodes["output"].get("output_bytes", 0))
    overhead_us = table.invoke_us(label, default=0.0, num_args=num_args, output_bytes=output_bytes,
                                  num_inputs=model.num_input) + len(
        frame
    ) * table.launch_us(label, default=0.0)
    predicted_us = overhead_us + float(frame["latency_us"].sum())
    by_source = frame.groupby("source")["latency_us"].agg(["count", "sum"]).reset_index()
    print(f"{args.model}: {len(units)} kernel launches, {frame['key'].nunique()} distinct")
    print(by_source.to_string(index=False))
    print(f"predicted end to end: {predicted_us / 1e6:.3f} s")

    inputs = model.random_inputs()
    samples = np.asarray(placement.runner.time_us(inputs, number=1, repeat=args.repeat), float)
    median = float(np.median(samples))
    err = predicted_us / median - 1
    print(
        f"measured: median {median / 1e6:.3f} s (min {samples.min() / 1e6:.3f}, max {samples.max() / 1e6:.3f},"
        f" {len(samples)} runs); predicted / measured - 1 = {100 * err:+.1f}%"
    )

    heavy = (
        frame.groupby(["key", "func_name", "source"])["latency_us"]
        .agg(["count", "first", "sum"])
        .sort_values("sum", ascending=False)
        .head(8)
        .reset_index()
        .rename(columns={"first": "predicted_us_each", "sum": "predicted_us_total"})
    )
    store = ProfileStore(args.profile)
    out = dict(
        model=args.model,
        target=args.target,
        kernel_launches=len(units),
        distinct_kernels=int(frame["key"].nunique()),
        predicted_us=predicted_us,
        predicted_overhead_us=overhead_us,
        predicted_by_source=by_source.to_dict(orient="records"),
        measured_median_us=median,
        measured_min_us=float(samples.min()),
        measured_max_us=float(samples.max()),
        measured_runs=len(samples),
        error=err,
        heaviest_kernels=heavy.to_dict(orient="records"),
        meta=dict(
            date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            profile=args.profile,
            profile_metadata=store.metadata,
            cost_model=default_model_path(args.profile),
            machine=platform.machine(),
            seconds=round(time.perf_counter() - started, 1),
        ),
    )
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"cost_model_unseen_{args.model}.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, default=str)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
