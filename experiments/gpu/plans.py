"""Add placed models to a GPU bundle: every baseline of issue 14 and, with the box's profile, autoplace's plan.

    python experiments/gpu/plans.py --bundle gpu_carry/bundle --models mlp cnn-base llama-base \
        [--profile profiles/<gpu box id>] [--gpu-cap-mb llama-base=8] [--out plans.json]

Inputs arrive on the CPU and outputs return there in every plan. Without ``--profile`` (before the box was
profiled) only the plans that need no costs are built: ``all:cpu``, ``all:gpu`` and ``manual:seed002`` (the
seed 002 placement: conv2d and matmul on the GPU, the rest on the CPU). With it, the plans of
:func:`autoplace.comparison.candidate_plans`: autoplace's (solved on the box's measured costs, ``measure="never"``:
this machine is not the box), ``all:<target>``, ``greedy``, ``memory-greedy`` (the GPU filled in model order
until its cap, as Hugging Face accelerate's ``device_map="auto"``) and the seed 002 manual plan, each with its
predicted latency, written to ``--out`` for the comparison table (``experiments/gpu/table.py``).

``--gpu-cap-mb MODEL=MB`` caps the GPU's memory for one model (the solver and memory-greedy respect it; the
other baselines ignore it and the table says when one breaks it).

``--variants cpu=0.5 gpu=2 ...`` (with ``--profile``) also builds the plans autoplace picks when one target's
kernels are priced that many times their profiled cost (labels ``candidate:cpu*0.5``; a placement already in the
bundle is not built twice). For a box whose own profile does not exist yet: profile it and time these candidates
in the same call, then solve again on the box's profile here. If that plan is one of the candidates timed, its
measurement is from the box that profiled it (``table.py --resolved``); if not, it was not timed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import zlib

#: The box's targets: CPU kernels for ``$MCPU`` as ``pack.sh`` compiles them (default ``x86-64-v3``, AVX2).
TARGETS = {"cpu": {"kind": "llvm", "mcpu": os.environ.get("MCPU", "x86-64-v3")}, "gpu": {"kind": "cuda", "arch": "sm_90"}}
#: Seed 002's hand placement: the heavy ops on the GPU, the rest on the CPU.
SEED002 = {"relax.nn.conv2d": "gpu", "relax.matmul": "gpu"}


def _crc(placement) -> str:
    """A placement's fingerprint (its assignment), to tell plans apart across runs."""
    return f"{zlib.crc32(repr(sorted(placement.assignment.items())).encode()):08x}"


def _parse_caps(items):
    caps = {}
    for item in items or []:
        name, _, mb = item.partition("=")
        caps[name] = int(float(mb) * (1 << 20))
    return caps


def scaled_costs(costs, scale_by_target: dict):
    """A copy of a :class:`~autoplace.cost_model.CostTable` that prices each target kind's kernels
    ``scale_by_target[kind]`` times (copies and call overheads unchanged): a candidate plan's pricing."""
    import copy

    from autoplace.targets import kind_of_label

    def latencies(units, target_kind=None, **kwargs):
        frame = costs.latencies(units, target_kind, **kwargs)
        factor = frame["target"].map(lambda t: scale_by_target.get(kind_of_label(t), 1.0)).astype(float)
        for column in ("latency_us", "band_lo_us", "band_hi_us"):
            frame[column] = frame[column] * factor
        return frame

    scaled = copy.copy(costs)
    scaled.latencies = latencies  # every price of a kernel goes through it (unit_latency_us too)
    return scaled


def _parse_variants(items, targets):
    """``[(name, target kind or "handoff", value)]`` of ``TARGET=FACTOR`` and ``handoff=US`` items."""
    variants = []
    for item in items or []:
        name, _, value = item.partition("=")
        variants.append((name, "handoff" if name == "handoff" else targets[name].kind, float(value)))
    return variants


def variant_costs(costs, kind: str, value: float):
    """``costs`` with one target kind's kernels priced ``value`` times, or (``kind == "handoff"``) with a GPU -> CPU
    hand-off of ``value`` microseconds (:attr:`autoplace.solve.problem.CopyCost.handoff_us`)."""
    import copy

    if kind != "handoff":
        return scaled_costs(costs, {kind: value})
    other = copy.copy(costs)
    other.handoff_ = {**costs.handoff_, "cuda->llvm": (value, 0.0)}
    return other


def add_yardstick(profile_bundle: str, plan_bundle: str, per_target: int) -> int:
    """Copy ``per_target`` kernels of each target (spread over the profile bundle's kernels) into the plan bundle,
    with the streaming kernel CPU kernels are timed in-model with; returns how many."""
    import shutil

    with open(os.path.join(profile_bundle, "manifest.json")) as f:
        source = json.load(f)
    path = os.path.join(plan_bundle, "manifest.json")
    with open(path) as f:
        manifest = json.load(f)
    chosen = []
    for kind in sorted({u["kind"] for u in source["units"]}):
        units = [u for u in source["units"] if u["kind"] == kind]
        step = max(1, len(units) // max(1, per_target))
        chosen += units[::step][:per_target]
    for item in chosen + ([dict(file=source["stream"])] if source.get("stream") else []):
        os.makedirs(os.path.dirname(os.path.join(plan_bundle, item["file"])), exist_ok=True)
        shutil.copy(os.path.join(profile_bundle, item["file"]), os.path.join(plan_bundle, item["file"]))
    manifest["units"] = manifest.get("units", []) + chosen
    for key in ("stream", "stream_parallel_min"):
        if key in source:
            manifest[key] = source[key]
    with open(path + ".tmp", "w") as f:
        json.dump(manifest, f, indent=1)
    os.replace(path + ".tmp", path)
    return len(chosen)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", required=True)
    parser.add_argument("--models", nargs="+", required=True)
    parser.add_argument("--profile", help="the GPU box's profile folder (then autoplace, greedy, memory-greedy)")
    parser.add_argument("--targets", default=json.dumps(TARGETS))
    parser.add_argument("--gpu-cap-mb", nargs="*", default=[], help="MODEL=MB: the GPU's memory cap for MODEL")
    parser.add_argument("--out", help="JSON of every plan's prediction and copies")
    parser.add_argument("--variants", nargs="*", default=[],
                        help="TARGET=FACTOR: also the plan autoplace picks with TARGET's kernels priced FACTOR times")
    parser.add_argument("--only-candidates", action="store_true",
                        help="with --variants: build only the candidates (e.g. appended to a bundle that has the rest)")
    parser.add_argument("--skip-placements", help="a plans JSON (--out) whose placements are not built again")
    parser.add_argument("--no-build", action="store_true", help="only write --out (the plans are not compiled)")
    parser.add_argument("--yardstick", nargs=2, metavar=("PROFILE_BUNDLE", "N"),
                        help="also time N kernels of each target from the profile bundle with the plans: if the "
                             "plans land on another box than the profile, their times say how it differs")
    args = parser.parse_args(argv)

    from autoplace import zoo
    from autoplace.comparison import candidate_plans
    from autoplace.graph import op_graph
    from autoplace.place import Placement
    from autoplace.profile.remote import build_plan_bundle
    from autoplace.targets import TargetSet

    targets = TargetSet(json.loads(args.targets))
    caps = _parse_caps(args.gpu_cap_mb)
    plans, rows = {}, []
    skip: dict = {}
    if args.skip_placements:
        with open(args.skip_placements) as f:
            for row in json.load(f)["plans"]:
                if row.get("placement_crc"):
                    skip.setdefault(row["model"], set()).add(row["placement_crc"])
    for spec in args.models:
        t0 = time.perf_counter()
        model = zoo.parse(spec)
        if args.profile:
            from autoplace import optimize

            memory = {"gpu": caps[spec]} if spec in caps else None
            result = optimize(model, None, targets, profile_dir=args.profile, measure="never", memory_bytes=memory)
            found = candidate_plans(result, manual={"seed002": SEED002}, memory_greedy=True)
            seen = {_crc(p) for _, p, _ in found.values() if p is not None} | skip.get(spec, set())
            if args.only_candidates:
                found = {}
            for name, kind, factor in _parse_variants(args.variants, targets):
                variant = optimize(model, None, targets, costs=variant_costs(result.costs, kind, factor),
                                   measure="never", memory_bytes=memory, progress=False)
                if _crc(variant.placement) not in seen:
                    seen.add(_crc(variant.placement))
                    label = f"candidate:{name}={factor:g}us" if kind == "handoff" else f"candidate:{name}*{factor:g}"
                    found[label] = (variant.predicted_us, variant.placement, "a candidate: priced with scaled costs")
        else:
            graph = op_graph(model)
            found = {}
            for label, assignment in (("all:cpu", {}), ("all:gpu", {n: "gpu" for n, d in graph.nodes(data=True)
                                                                  if d.get("kind") == "op"}),
                                      ("manual:seed002", SEED002)):
                found[label] = (None, Placement.from_assignment(model, graph, assignment, targets), "no costs yet")
        for label, (predicted, placement, note) in found.items():
            row = dict(model=spec, plan=label, predicted_us=predicted, note=note)
            if placement is not None:
                plans[(spec, label)] = placement
                # plans with one placement_crc are one placement (the table says so: their times differ by noise)
                row.update(copies=len(placement.copies), copy_bytes=sum(c["nbytes"] for c in placement.copies),
                           ops_per_target=placement.ops_per_target(),
                           placement_crc=_crc(placement))
            rows.append(row)
        print(f"{spec}: {len(found)} plans in {time.perf_counter() - t0:.0f} s", flush=True)
    if not args.no_build:
        build_plan_bundle(plans, args.bundle)
        if args.yardstick:
            add_yardstick(args.yardstick[0], args.bundle, int(args.yardstick[1]))
    if args.out:
        with open(args.out + ".tmp", "w") as f:
            json.dump(dict(targets=args.targets, caps=caps, plans=rows), f, indent=1)
        os.replace(args.out + ".tmp", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
