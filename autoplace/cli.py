"""The ``autoplace`` command line (also ``python -m autoplace``)."""

from __future__ import annotations

import argparse
import json
import os
import sys

from .errors import AutoplaceError

EXAMPLES = {
    "demo": """examples:
  autoplace demo                        # cnn-base on two CPU devices, first one memory-capped
  autoplace demo --model bert --out out # another zoo model
""",
    "optimize": """examples:
  autoplace optimize --zoo cnn --targets '{"cpu0": "llvm", "cpu1": "llvm"}' --out out
  autoplace optimize model.onnx --targets '{"cpu": "llvm", "gpu": "cuda"}' --pin relax.nn.softmax=cpu
  autoplace optimize --zoo bert-base --memory cpu0=2e6 --out out
""",
    "compare": """examples:
  autoplace compare --zoo cnn --targets '{"cpu0": "llvm", "cpu1": "llvm"}'
  autoplace compare --zoo cnn --manual '{"seed002": {"relax.nn.conv2d": "cpu1", "relax.matmul": "cpu1"}}'
""",
    "show": """examples:
  autoplace show out/cnn.result.json            # writes out/cnn.png
  autoplace show out/cnn.result.json --out plan.svg
""",
    "profile": """examples:
  autoplace profile --zoo mlp cnn bert seed003 inception          # small zoo models on this CPU
  autoplace profile --zoo cnn-base --targets '{"cpu": "llvm"}'    # one base-size model
  autoplace profile --zoo grid --no-copies                         # stride grid (matmul, conv2d) for the cost model
  autoplace profile model.onnx module.py --out profiles            # ONNX / TVMScript files
  # a GPU box without TVM's compiler: build here, run there, merge back
  autoplace profile --zoo cnn bert --targets '{"cpu": "llvm", "gpu": "cuda"}' --bundle gpu_bundle
  python gpu_bundle/runner.py gpu_bundle                           # on the GPU box (TVM runtime only)
  autoplace profile --merge gpu_bundle/records.jsonl               # back here: into profiles/<its id>/
""",
}


def _targets(text: str | None) -> dict:
    if not text:
        return {"cpu": "llvm"}
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        # "cpu=llvm,gpu=cuda"
        value = dict(part.split("=", 1) for part in text.split(",") if part)
    return value


def _models(args) -> list:
    from . import zoo
    from .frontend import load_model

    models = []
    for spec in args.zoo or []:
        if spec == "grid":  # fixed stride grid of single matmul/transpose kernels (cost-model data)
            models.extend((m.name, m) for m in zoo.regime_grid())
            continue
        models.append((spec, zoo.parse(spec)))
    for path in getattr(args, "models", None) or []:
        models.append((os.path.splitext(os.path.basename(path))[0], load_model(path)))
    if not models and not getattr(args, "merge", None):
        raise SystemExit("no model given: name zoo models with --zoo (e.g. --zoo cnn) or pass model files")
    return models


def cmd_profile(args) -> int:
    from .profile import KernelTimer, ProfileStore, default_profile_dir, profile_models

    if args.merge:
        from .profile.remote import merge_records

        merge_records(args.merge, args.out)
        return 0
    if args.bundle:
        from .profile.remote import build_bundle

        build_bundle(_models(args), _targets(args.targets), args.bundle)
        print(f"next, on the device machine (TVM runtime only): python {args.bundle}/runner.py {args.bundle}\n"
              f"then here: autoplace profile --merge {args.bundle}/records.jsonl")
        return 0
    store = ProfileStore(args.dir or default_profile_dir(args.out))
    print(f"profiling into {store.path}")
    timer = KernelTimer(repeat=args.repeat, min_repeat_ms=args.min_repeat_ms, timeout_s=args.timeout)
    summary = profile_models(_models(args), _targets(args.targets), store, copies=not args.no_copies,
                             end_to_end=not args.no_end_to_end,
                             timer=timer, progress=not args.no_progress, redo=args.redo or ())
    print(json.dumps(summary, indent=1))
    return 0


def _pins(items) -> dict:
    out = {}
    for item in items or []:
        key, _, target = item.rpartition("=")
        if not key:
            raise SystemExit(f"--pin takes KEY=TARGET (e.g. relax.nn.conv2d=gpu), got {item!r}")
        out[key] = target
    return out


def _memory(items) -> dict:
    out = {}
    for item in items or []:
        target, _, value = item.partition("=")
        try:
            out[target] = int(float(value))
        except ValueError:
            raise SystemExit(f"--memory takes TARGET=BYTES (e.g. gpu=8e9), got {item!r}") from None
    return out


def cmd_optimize(args) -> int:
    from .optimizer import optimize

    ((_, model),) = _models(args)[:1]
    result = optimize(model, None, _targets(args.targets), pins=_pins(args.pin), memory_bytes=_memory(args.memory),
                      method=args.method, time_limit_s=args.time_limit)
    print(result)
    print(result.summary().to_string(float_format=lambda v: f"{v:.1f}"))
    paths = result.save(args.out)
    for what, path in paths.items():
        print(f"wrote {what}: {path}")
    return 0


def cmd_compare(args) -> int:
    from .comparison import compare

    (name, model), = _models(args)[:1]
    manual = json.loads(args.manual) if args.manual else None
    table = compare(model, None, _targets(args.targets), manual=manual, pins=_pins(args.pin),
                    memory_bytes=_memory(args.memory), rounds=args.rounds)
    from .show import table_text

    print(table_text(table))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        path = os.path.join(args.out, f"{table.attrs.get('model', name)}.compare.csv")
        table.to_csv(path)
        print(f"wrote {path}")
    return 0


def cmd_show(args) -> int:
    from .optimizer import OptimizeResult
    from .show import render_plan

    result = OptimizeResult.load(args.result)
    out = args.out or os.path.splitext(args.result)[0].replace(".result", "") + ".png"
    render_plan(result, out)
    print(f"wrote {out}")
    return 0


def cmd_train(args) -> int:
    from .cost_model.cli import train_main

    return train_main(args.rest)


def cmd_demo(args) -> int:
    from .demo import run_demo

    return run_demo(model=args.model, out_dir=args.out, rounds=args.rounds)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["train"]:  # its own parser (autoplace train --help)
        from .cost_model.cli import train_main

        return train_main(argv[1:])
    parser = argparse.ArgumentParser(prog="autoplace", description="Measured, optimal CPU/GPU placement for TVM Relax")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("profile", help="measure kernels, copies and call overhead into profiles/",
                       epilog=EXAMPLES["profile"], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="*", help="model files: .onnx, or .py with a TVMScript IRModule")
    p.add_argument("--zoo", nargs="*", help="zoo models: mlp cnn bert seed003 inception (add -base for base size)")
    p.add_argument("--targets", help='JSON dict name -> target (default {"cpu": "llvm"})')
    p.add_argument("--out", default="profiles", help="profiles root (default: profiles)")
    p.add_argument("--dir", help="exact profile folder (default: <out>/<hardware id>)")
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--min-repeat-ms", type=int, default=20)
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per kernel before it counts as failed")
    p.add_argument("--no-copies", action="store_true")
    p.add_argument("--no-end-to-end", action="store_true",
                   help="skip timing each model whole (kernels only; the cost-model evaluation needs it)")
    p.add_argument("--redo", nargs="*", choices=["unit", "model", "launch", "copy", "copy_fit"],
                   help="measure these record kinds again (the newest record of a key wins)")
    p.add_argument("--bundle", help="compile into this folder for another machine instead of measuring here")
    p.add_argument("--merge", help="merge a records.jsonl written by a bundle's runner.py into --out")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_profile)

    def model_args(p):
        p.add_argument("models", nargs="*", help="model file: .onnx, or .py with a TVMScript IRModule")
        p.add_argument("--zoo", nargs="*", help="zoo model (mlp cnn bert seed003 inception, -base for base size)")
        p.add_argument("--targets", help='JSON dict name -> target (default {"cpu": "llvm"})')
        p.add_argument("--pin", nargs="*", help="KEY=TARGET: pin a node, op name or instance")
        p.add_argument("--memory", nargs="*", help="TARGET=BYTES: memory cap of a target")

    p = sub.add_parser("optimize", help="place a model, write the annotated module, plan and picture",
                       epilog=EXAMPLES["optimize"], formatter_class=argparse.RawDescriptionHelpFormatter)
    model_args(p)
    p.add_argument("--method", default="auto", help="auto (default), ilp, mincut, greedy, all:<target>")
    p.add_argument("--time-limit", type=float, default=10.0, help="solver time limit in seconds")
    p.add_argument("--out", default="out", help="output folder (default: out)")
    p.set_defaults(func=cmd_optimize)

    p = sub.add_parser("compare", help="build and time autoplace's plan, the baselines and manual plans",
                       epilog=EXAMPLES["compare"], formatter_class=argparse.RawDescriptionHelpFormatter)
    model_args(p)
    p.add_argument("--manual", help='JSON {label: {key: target}} of manual placements to compare')
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--out", help="folder for the CSV table")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("show", help="render a saved plan (from optimize) as a picture",
                       epilog=EXAMPLES["show"], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("result", help="a <model>.result.json written by autoplace optimize")
    p.add_argument("--out", help="picture path (.png or .svg)")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("train", help="train the XGBoost cost model on a profile (see autoplace train --help)",
                       add_help=False)
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("demo", help="the main job: optimize a zoo model, measure it against the baselines",
                       epilog=EXAMPLES["demo"], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="cnn-base", help="zoo model (default cnn-base)")
    p.add_argument("--out", default="out", help="output folder (default: out)")
    p.add_argument("--rounds", type=int, default=5)
    p.set_defaults(func=cmd_demo)

    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except AutoplaceError as err:
        print(f"autoplace: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
