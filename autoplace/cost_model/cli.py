"""``autoplace train``: fit the cost model on a profile and save it next to the profile."""

from __future__ import annotations

import argparse
import sys

EPILOG = """examples:
  autoplace train --profile profiles/amd-epyc-2c               # -> profiles/amd-epyc-2c/cost_model.json
  autoplace train --profile profiles/h100 --target cuda --out gpu_model.json
"""


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """The options of ``autoplace train`` (added to ``parser`` if given, e.g. a subcommand parser)."""
    parser = parser or argparse.ArgumentParser(
        prog="autoplace train",
        description="Train the cost model on a profile folder",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--profile", help="profile folder (default: profiles/<this machine's hardware id>)")
    parser.add_argument("--out", help="model file (default: <profile dir>/cost_model.json)")
    parser.add_argument("--target", action="append", help="train on this target kind only (repeatable)")
    parser.add_argument(
        "--model", default="xgb", choices=["xgb", "roofline"], help="model kind (default xgb)"
    )
    parser.add_argument("--random-state", type=int, default=0)
    parser.add_argument(
        "--allow-foreign",
        action="store_true",
        help="also use records measured on other hardware or TVM versions",
    )
    return parser


def train_main(argv=None) -> int:
    """Entry point of ``autoplace train``; returns the exit status."""
    args = build_parser().parse_args(argv)
    return run(args)


def run(args) -> int:
    """Run ``autoplace train`` from parsed arguments (for a main CLI that adds :func:`build_parser`)."""
    import numpy as np

    from ..profile import default_profile_dir
    from .cost_model import training_units
    from .train import train

    profile = args.profile or default_profile_dir()
    model = train(
        profile,
        args.out,
        target=args.target,
        model=args.model,
        allow_foreign=args.allow_foreign,
        random_state=args.random_state,
    )
    from ..profile import ProfileStore

    units = training_units(ProfileStore(profile).records(allow_foreign=args.allow_foreign))
    if args.target:
        units = units[units["target"].isin(args.target)]
    for kind in sorted(units["target"].unique()):
        if not units.loc[units["target"] == kind, "model"].astype(str).str.startswith("grid-").any():
            print(
                f"note: the profile has no stride-grid kernels on {kind}: predictions for large matmuls and "
                "convolutions of models it never saw can be off by 2x. Add them (about 2 minutes on a CPU):\n"
                f"  autoplace profile --zoo grid --no-copies --targets '{{\"t\": \"{kind}\"}}'"
            )
    pred = model.predict(units)
    ape = np.abs(pred - units["median_us"].to_numpy()) / units["median_us"].to_numpy()
    print(
        f"trained {model!r}\n  on {model.n_records_} kernels of {model.target_kinds_} measured on "
        f"{model.hardware_id_} (TVM {model.tvm_version_})\n  training fit: median abs error "
        f"{100 * np.median(ape):.1f}% (held-out accuracy: python experiments/cost_model_eval.py)\n"
        f"  saved to {model.path_}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(train_main())
