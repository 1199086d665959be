"""The ``autoplace`` command line (also ``python -m autoplace``)."""

from __future__ import annotations

import argparse
import json
import os
import sys

EXAMPLES = {
    "profile": """examples:
  autoplace profile --zoo mlp cnn bert seed003 inception          # small zoo models on this CPU
  autoplace profile --zoo cnn-base --targets '{"cpu": "llvm"}'    # one base-size model
  autoplace profile model.onnx module.py --out profiles            # ONNX / TVMScript files
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
        models.append((spec, zoo.parse(spec)))
    for path in getattr(args, "models", None) or []:
        models.append((os.path.splitext(os.path.basename(path))[0], load_model(path)))
    if not models:
        raise SystemExit("no model given: name zoo models with --zoo (e.g. --zoo cnn) or pass model files")
    return models


def cmd_profile(args) -> int:
    from .profile import KernelTimer, ProfileStore, default_profile_dir, profile_models

    store = ProfileStore(args.dir or default_profile_dir(args.out))
    print(f"profiling into {store.path}")
    timer = KernelTimer(repeat=args.repeat, min_repeat_ms=args.min_repeat_ms, timeout_s=args.timeout)
    summary = profile_models(_models(args), _targets(args.targets), store, copies=not args.no_copies,
                             timer=timer, progress=not args.no_progress)
    print(json.dumps(summary, indent=1))
    return 0


def main(argv=None) -> int:
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
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_profile)

    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
