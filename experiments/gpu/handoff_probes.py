"""Placed micro-models that measure what a GPU -> CPU hand-off costs beyond its copy, for a GPU box's plan bundle.

    python experiments/gpu/handoff_probes.py --bundle gpu_carry/plans2      # appends to the bundle's plans
    python experiments/gpu/handoff_probes.py --records plan_records.jsonl --profile profiles/<gpu box id>
                                        # after the box timed them: one kind="handoff" record into the profile

Session 38's first same-box measurement (H200 box) found mixed plans whose last kernel runs on the CPU after the
GPU's work (mlp-base: the 2048x10 classifier) 40-50 us slower than the sum of their measured kernels and copies,
where all-GPU plans were not. A hand-off costs more than the copy when the CPU waits for the GPU (the copy
synchronises) and its kernel then runs with a thread pool that went to sleep while it waited, on an input the
copy engine wrote (not in any core's cache). These probes time it on the box, for two sizes:

``handoff-<n>x<k>`` is ``x[n, k] -> relu -> linear(k -> 10)``; ``relu-<n>x<k>`` is ``x[n, k] -> relu``. Plans:
``gpu>cpu`` (relu on the GPU, the linear on the CPU), ``all:gpu``, ``all:cpu``. Then, all timed side by side,
hand-off = handoff:gpu>cpu - relu:all:gpu - (handoff:all:cpu - relu:all:cpu): the mixed plan less the same
GPU work and copy (relu's all-GPU plan returns the same tensor over the same copy) and less the CPU's linear as an
all-CPU VM runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

SIZES = ((64, 2048), (4, 64))
#: Session 41's second call: six sizes, 1 KB to 8 MB of copied input, for a line in the tensor's bytes
SIZES_LINE = ((4, 64), (64, 256), (64, 1024), (64, 2048), (256, 2048), (1024, 2048))
TARGETS = {"cpu": {"kind": "llvm", "mcpu": os.environ.get("MCPU", "x86-64-v3")}, "gpu": {"kind": "cuda", "arch": "sm_90"}}


def probe_models(sizes=SIZES):
    """``{name: (Model)}`` for each size: the relu + linear model and the relu model."""
    import torch

    from autoplace import load_model

    models = {}
    for n, k in sizes:
        torch.manual_seed(0)
        head = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(k, 10))
        models[f"handoff-{n}x{k}"] = load_model(head.eval(), example_inputs=(torch.randn(n, k),))
        models[f"relu-{n}x{k}"] = load_model(torch.nn.ReLU().eval(), example_inputs=(torch.randn(n, k),))
    return models


def handoff_us(medians: dict, n: int, k: int) -> float:
    """The hand-off's cost from the four plans' medians ``{"<model>:<plan>": us}`` (see the module's doc)."""
    return (medians[f"handoff-{n}x{k}:gpu>cpu"] - medians[f"relu-{n}x{k}:all:gpu"]
            - (medians[f"handoff-{n}x{k}:all:cpu"] - medians[f"relu-{n}x{k}:all:cpu"]))


def handoff_record(records_path: str, sizes=SIZES) -> dict:
    """The ``kind="handoff"`` profile record of a box's probe timings (``runner.py``'s plan records, every round):
    ``handoff_us`` is the median over ``sizes`` of :func:`handoff_us` on the medians of the rounds, or, with three
    sizes or more, the intercept of a line in the copied tensor's bytes (``handoff_us_per_byte`` its slope, both
    clipped at 0; Theil-Sen); each size's value and the plans' medians are kept beside it."""
    import numpy as np

    rounds: dict = {}
    meta = {}
    with open(records_path) as f:
        for line in f:
            r = json.loads(line)
            if r.get("kind") == "plan" and r.get("status") == "ok":
                rounds.setdefault(r["key"], []).append(float(r["median_us"]))
                meta = {k: r[k] for k in ("hardware_id", "tvm_version", "measured_at") if k in r}
    medians = {key: float(np.median(v)) for key, v in rounds.items()}
    per_size = {f"{n}x{k}": handoff_us(medians, n, k) for n, k in sizes}
    used = {key: us for key, us in medians.items() if key.startswith(("handoff-", "relu-"))}
    fixed, per_byte = float(np.median(list(per_size.values()))), 0.0
    if len(sizes) >= 3:  # a line in the copied tensor's bytes (float32), robust to one noisy size (Theil-Sen:
        # the median slope, and the median of what is left above the line as the intercept)
        from scipy.stats import theilslopes

        nbytes = np.array([4.0 * n * k for n, k in sizes])
        slope, intercept, _, _ = theilslopes(list(per_size.values()), nbytes, method="joint")
        fixed, per_byte = max(0.0, float(intercept)), max(0.0, float(slope))
    return dict(kind="handoff", key="gpu-to-cpu", target="cuda->llvm", status="ok",
                handoff_us=fixed, handoff_us_per_byte=per_byte, handoff_us_by_size=per_size,
                plan_medians_us=used, rounds=min(len(rounds[k]) for k in used), source=os.path.basename(records_path),
                **meta)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", help="append the probe plans to this plan bundle")
    parser.add_argument("--targets", default=json.dumps(TARGETS))
    parser.add_argument("--records", help="the box's plan records (runner.py's records.jsonl) with the probes")
    parser.add_argument("--profile", help="with --records: the box's profile folder, to add the hand-off to")
    parser.add_argument("--sizes", nargs="+", metavar="NxK", help="probe sizes (rows x columns of the copied input; "
                        f"default {' '.join(f'{n}x{k}' for n, k in SIZES)}; 'line' for {len(SIZES_LINE)} sizes, 1 KB-8 MB)")
    args = parser.parse_args(argv)
    sizes = SIZES_LINE if args.sizes == ["line"] else (
        tuple(tuple(int(x) for x in s.split("x")) for s in args.sizes) if args.sizes else SIZES)
    if args.records:
        from autoplace.profile.store import ProfileStore

        record = handoff_record(args.records, sizes)
        print(json.dumps(record, indent=1))
        if args.profile:
            ProfileStore(args.profile).append(record)
            print(f"added to {args.profile}")
        return 0
    if not args.bundle:
        parser.error("give --bundle (build the probes) or --records (read their timings)")

    from autoplace.graph import op_graph
    from autoplace.place import Placement
    from autoplace.profile.remote import build_plan_bundle
    from autoplace.targets import TargetSet

    targets = TargetSet(json.loads(args.targets))
    plans = {}
    for name, model in probe_models(sizes).items():
        graph = op_graph(model)
        ops = {n: d["op"] for n, d in graph.nodes(data=True) if d.get("kind") == "op"}
        choices = {"all:cpu": {}, "all:gpu": {n: "gpu" for n in ops}}
        if name.startswith("handoff-"):
            choices["gpu>cpu"] = {n: "gpu" for n, op in ops.items() if op == "relax.nn.relu"}
        for label, assignment in choices.items():
            plans[(name, label)] = Placement.from_assignment(model, graph, assignment, targets)
            print(name, label, plans[(name, label)].ops_per_target(), len(plans[(name, label)].copies), flush=True)
    build_plan_bundle(plans, args.bundle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
