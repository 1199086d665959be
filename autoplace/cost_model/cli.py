"""``autoplace train``: fit the cost model on a profile and save it next to the profile."""

from __future__ import annotations

import argparse
import sys

EPILOG = """examples:
  autoplace train --profile profiles/amd-epyc-2c               # -> profiles/amd-epyc-2c/cost_model.json
  autoplace train --profile profiles/h100 --target cuda --out gpu_model.json
  # a small profile, starting from a richer one of a similar machine
  autoplace train --profile profiles/intel-r-xeon-r-processor-f6m167-2c --prior profiles/intel-r-xeon-r-processor-f6m207-2c
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
    parser.add_argument(
        "--prior", metavar="DIR",
        help="another machine's profile folder as the XGBoost model's prior: its trees learn this machine's ratio "
             "to a model of that profile (what it timed and this one did not carries over)",
    )
    parser.add_argument("--random-state", type=int, default=0)
    parser.add_argument(
        "--allow-foreign",
        action="store_true",
        help="also use records measured on other hardware or TVM versions",
    )
    return parser


def train_main(argv=None) -> int:
    """Entry point of ``autoplace train``; returns the exit status. Errors of input raise
    :class:`~autoplace.errors.AutoplaceError`; :func:`autoplace.cli.main` prints them as one line."""
    args = build_parser().parse_args(argv)
    return run(args)


def _check_options(profile: str, out: str | None, target_kinds, *, explicit: bool) -> None:
    """Refuse an unknown target kind, a profile folder that holds no profile, or a model path that
    cannot be written, before reading any record."""
    import os

    from ..errors import AutoplaceError
    from ..targets import SUPPORTED_KINDS

    for kind in target_kinds or []:
        if kind not in SUPPORTED_KINDS:
            raise AutoplaceError(f"--target {kind!r} is not a target kind: records are per kind, one of "
                                 f"{list(SUPPORTED_KINDS)} (e.g. --target llvm)")

    how = "--profile" if explicit else "this machine's default profile folder"
    if not os.path.exists(profile):
        raise AutoplaceError(f"no profile at {profile} ({how}): run `autoplace profile --zoo mlp cnn` first, or "
                             "pass --profile profiles/<hardware id> (a folder with records.jsonl)")
    if not os.path.isdir(profile):
        raise AutoplaceError(f"{how} {profile} is a file, not a profile folder: pass the folder that holds "
                             "records.jsonl and metadata.json (e.g. --profile profiles/amd-epyc-2c)")
    if not os.path.exists(os.path.join(profile, "records.jsonl")):
        raise AutoplaceError(f"{profile} ({how}) holds no records.jsonl, so it is not a profile: run "
                             f"`autoplace profile --dir {profile} --zoo mlp cnn` first, or pass another --profile")
    if out is not None:
        if os.path.isdir(out):
            raise AutoplaceError(f"--out {out} is a folder: give a file name for the model, e.g. {out}/cost_model.json")
        parent = os.path.dirname(os.path.abspath(out))
        if not os.path.isdir(parent):
            raise AutoplaceError(f"--out {out}: the folder {parent} does not exist; create it or give another path")
        if not os.access(parent, os.W_OK):
            raise AutoplaceError(f"--out {out}: no permission to write in {parent}")


def _checked_prior(prior: str | None, profile: str, model: str, target_kinds=None) -> str | None:
    """``--prior``, refused before any fit when it is no other profile folder, shares no target kind with the
    profile (``target_kinds``: those trained) or the model kind takes none."""
    import os

    from ..errors import AutoplaceError
    from ..profile import ProfileStore

    if not prior:
        return None
    if model != "xgb":
        raise AutoplaceError(f"--prior works with --model xgb only (the {model!r} model has no trees to start from "
                             "a donor's); drop --prior or use --model xgb")
    if not os.path.isfile(os.path.join(prior, "records.jsonl")):
        raise AutoplaceError(f"--prior {prior}: no profile there (no records.jsonl); give another machine's profile "
                             "folder, e.g. --prior profiles/intel-r-xeon-r-processor-f6m207-2c")
    if os.path.realpath(prior) == os.path.realpath(profile):
        raise AutoplaceError(f"--prior {prior} is the profile being trained: give another machine's profile folder")
    from .cost_model import training_units
    from .xgb_model import prior_records

    theirs = set(training_units(prior_records(prior)).get("target", []))
    if not theirs & set(target_kinds or ProfileStore(profile).working_targets()):
        raise AutoplaceError(f"--prior {prior}: that profile timed no kernel of a target kind this one trains on "
                             f"(it has {sorted(theirs) or 'none'}); give a profile with those kinds, or drop --prior")
    return prior


def run(args) -> int:
    """Run ``autoplace train`` from parsed arguments (for a main CLI that adds :func:`build_parser`)."""
    import numpy as np

    from ..profile import default_profile_dir
    from .cost_model import training_units
    from .train import IN_MODEL_MIN_COVERAGE, train

    profile = args.profile or default_profile_dir()
    _check_options(profile, args.out, args.target, explicit=bool(args.profile))
    prior = _checked_prior(getattr(args, "prior", None), profile, args.model, args.target)
    model = train(
        profile,
        args.out,
        target=args.target,
        model=args.model,
        allow_foreign=args.allow_foreign,
        random_state=args.random_state,
        **({"prior": prior} if prior else {}),
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
        + (f"\n  starting from a model of {model.prior_.n_records_} kernels of {model.prior_.hardware_id_} "
           f"(--prior {model.prior}; its trees learn this machine's ratio to it)"
           if getattr(model, "prior_", None) is not None else "")
        + (f"\n  with a model of the kernels' in-model times ({model.in_model_.n_records_} kernels; models larger "
           f"than the L2 are priced with it) saved to {model.in_model_.path_}"
           if getattr(model, "in_model_", None) is not None else "")
    )
    for kind, (timed, measured) in sorted((getattr(model, "in_model_short_", None) or {}).items()):
        print(
            f"note: only {timed} of {measured} {kind} kernels were timed in-model (at least "
            f"{IN_MODEL_MIN_COVERAGE:.0%} needed): no model of in-model times for {kind}; models larger than the L2 "
            "are priced warm, scaled by the in-model factors of the kernels timed. Profile the models again "
            "(`autoplace profile` with the same --zoo / model files times each kernel without an in-model time "
            "again) and retrain."
        )
    return 0


if __name__ == "__main__":
    from ..cli import main

    sys.exit(main(["train", *sys.argv[1:]]))  # errors of input as one line, as `autoplace train`
