"""The ``autoplace`` command line (also ``python -m autoplace``).

Every subcommand checks its options first (targets, models, memory caps, pins, manual plans, timing
options, output folders) and only then loads, profiles, solves or builds anything; every error of user
input ends as one ``autoplace: error: ...`` line naming the problem and the fix, with exit status 2
(as argparse's own errors). Other exceptions are bugs and keep their traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import warnings

from .errors import AssignmentError, AutoplaceError, ModelError, PlacementError, TargetError

EXAMPLES = {
    "demo": """examples:
  autoplace demo                        # cnn-base on two CPU devices, first one memory-capped
  autoplace demo --model bert --out out # another zoo model
""",
    "optimize": """examples:
  autoplace optimize --zoo cnn --targets '{"cpu0": "llvm", "cpu1": "llvm"}' --out out
  autoplace optimize model.onnx --targets '{"cpu": "llvm", "gpu": "cuda"}' --pin relax.nn.softmax=cpu
  autoplace optimize --zoo bert-base --memory cpu0=2e6 --out out
  autoplace optimize decoder.onnx --shape seq_len=128       # symbolic dimensions bound to sizes
""",
    "compare": """examples:
  autoplace compare --zoo cnn --targets '{"cpu0": "llvm", "cpu1": "llvm"}'
  autoplace compare --zoo cnn --manual '{"seed002": {"relax.nn.conv2d": "cpu1", "relax.matmul": "cpu1"}}'
  # plans for a CPU+GPU box behind a TVM RPC tracker, timed there
  autoplace compare --zoo cnn --targets '{"cpu": "llvm", "gpu": "cuda"}' --rpc 10.0.0.5:9190 --rpc-key gpu-box
""",
    "show": """examples:
  autoplace show out/cnn.result.json            # writes out/cnn.png
  autoplace show out/cnn.result.json --out plan.svg
""",
    "profile": """examples:
  autoplace profile --zoo mlp cnn bert seed003 inception          # small zoo models on this CPU
  autoplace profile --zoo cnn-base --targets '{"cpu": "llvm"}'    # one base-size model
  autoplace profile --zoo grid --no-copies                         # stride grid (matmul, conv2d) for the cost model
  autoplace profile --zoo ops --no-copies --no-end-to-end          # op families (single ops) for the cost model
  autoplace profile --zoo ops:cnn_pow2,conv_stem --no-copies --no-end-to-end   # only these op families
  autoplace profile model.onnx module.py --out profiles            # ONNX / TVMScript files
  # a GPU box without TVM's compiler: build here, run there, merge back
  autoplace profile --zoo cnn bert --targets '{"cpu": "llvm", "gpu": "cuda"}' --bundle gpu_bundle
  python gpu_bundle/runner.py gpu_bundle                           # on the GPU box (TVM runtime only)
  autoplace profile --merge gpu_bundle/records.jsonl               # back here: into profiles/<its id>/
  # the servers of a TVM RPC tracker (one key = one kind of machine): into profiles/<their id>/
  autoplace profile --zoo cnn bert --targets '{"cpu": "llvm", "gpu": "cuda"}' --rpc 10.0.0.5:9190 --rpc-key gpu-box
""",
}


#: Exit status of refused input (argparse's own errors use it too).
EXIT_BAD_INPUT = 2
TARGETS_EXAMPLE = """'{"cpu0": "llvm", "cpu1": "llvm"}' (JSON) or cpu0=llvm,cpu1=llvm"""


# ---------------------------------------------------------------------------------------------- options


def _int_at_least(low: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {value}")
        return value

    return parse


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a fraction in [0, 1) (e.g. 0.03 for 3%)")
    return value


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text}")
    return value


def _ratio_at_least_one(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value < 1.0:
        raise argparse.ArgumentTypeError(f"must be a ratio >= 1 (1.05: the folder's kernels may read 5% slower "
                                         f"than their records), got {text}")
    return value


def _json_option(text: str, option: str, example: str, error=AutoplaceError):
    """``text`` parsed as JSON; a duplicate key in any object is refused (JSON would keep the last)."""

    def no_duplicates(pairs):
        out = {}
        for key, value in pairs:
            if key in out:
                raise error(f"{option} names {key!r} twice ({out[key]!r} and {value!r}); JSON keeps only the last, "
                            "so give each key once")
            out[key] = value
        return out

    try:
        return json.loads(text, object_pairs_hook=no_duplicates)
    except json.JSONDecodeError as err:
        raise error(f"{option} is not valid JSON: {err.msg} at line {err.lineno} column {err.colno} (char {err.pos}) "
                    f"of {text!r}; write it like {example}") from None


def target_spec(text: str | None):
    """``--targets`` as what :class:`~autoplace.targets.TargetSet` takes (None: its default,
    :data:`autoplace.targets.DEFAULT_TARGETS`). JSON when it starts with ``{`` (or ``[``, ``"``),
    else ``name=kind,name=kind``; a name given twice is refused in either form."""
    if text is None:
        return None
    stripped = text.strip()
    if not stripped:
        raise TargetError(f"--targets is empty: give the targets, e.g. {TARGETS_EXAMPLE}")
    if stripped[0] in '{["':
        return _json_option(stripped, "--targets", TARGETS_EXAMPLE, TargetError)
    out = {}
    for part in stripped.split(","):
        name, eq, kind = (p.strip() for p in part.partition("="))
        if not (name or eq or kind):
            continue  # "cpu=llvm," (a trailing comma)
        if not eq or not name or not kind:
            raise TargetError(f"--targets: {part.strip()!r} is not NAME=KIND; write {TARGETS_EXAMPLE}")
        if name in out:
            raise TargetError(f"--targets names {name!r} twice ({out[name]!r} and {kind!r}): give each target once")
        out[name] = kind
    return out


def _targets(text: str | None):
    from .targets import TargetSet

    return TargetSet(target_spec(text))


def _items(values) -> list[str]:
    """Values of a repeatable ``KEY=VALUE`` option: every flag's values, comma-separated ones split."""
    return [part.strip() for value in values or [] for part in value.split(",") if part.strip()]


def _file_hint(item: str) -> str:
    if item.lower().endswith((".onnx", ".py", ".tvmscript")):
        return f" ({item} looks like a model file: put model files before the options)"
    return ""


def _memory(values, targets) -> dict:
    """``--memory TARGET=BYTES ...`` (repeatable) -> ``{target: bytes}``, every item checked."""
    names, out = list(targets), {}  # (`in` on a TargetSet raises for an unknown name)
    for item in _items(values):
        name, eq, value = (p.strip() for p in item.partition("="))
        if not eq or not name or not value:
            raise PlacementError(f"--memory takes TARGET=BYTES (e.g. cpu0=2e9), got {item!r}{_file_hint(item)}")
        try:
            nbytes = float(value)
        except ValueError:
            raise PlacementError(f"--memory {item}: {value!r} is not a number of bytes; write e.g. {name}=2e9") from None
        if not math.isfinite(nbytes) or nbytes < 0:
            raise PlacementError(f"--memory {item}: a memory cap is a finite number of bytes >= 0 (leave a target "
                                 "out for no cap)")
        if name not in names:
            raise PlacementError(f"--memory {item}: no target named {name!r}; the targets are {names} "
                                 "(set them with --targets)")
        if name in out and out[name] != int(nbytes):
            raise PlacementError(f"--memory gives {name!r} two caps ({out[name]} and {int(nbytes)} bytes): give "
                                 "each target's cap once")
        out[name] = int(nbytes)
    return out


def _shapes(values) -> dict:
    """``--shape NAME=SIZE ...`` (repeatable) -> ``{symbolic dimension: size}``, every item checked."""
    out = {}
    for item in _items(values):
        name, eq, value = (p.strip() for p in item.partition("="))
        if not eq or not name or not value:
            raise ModelError(f"--shape takes NAME=SIZE, a symbolic dimension of the model file and the size to place "
                             f"it for (e.g. seq_len=128), got {item!r}{_file_hint(item)}")
        try:
            size = int(value)
        except ValueError:
            raise ModelError(f"--shape {item}: {value!r} is not a whole number; write e.g. {name}=128") from None
        if size < 1:
            raise ModelError(f"--shape {item}: a size is a whole number >= 1")
        if name in out and out[name] != size:
            raise ModelError(f"--shape gives {name!r} two sizes ({out[name]} and {size}): give each dimension once")
        out[name] = size
    return out


def _pins(values, targets) -> dict:
    """``--pin KEY=TARGET ...`` (repeatable) -> ``{key: target}``, every item checked."""
    names, out = list(targets), {}
    for item in _items(values):
        key, eq, name = (p.strip() for p in item.rpartition("="))
        if not eq or not key or not name:
            raise AssignmentError(f"--pin takes KEY=TARGET (e.g. relax.nn.conv2d=cpu1 or lv3=cpu1), got "
                                  f"{item!r}{_file_hint(item)}")
        if name not in names:
            raise AssignmentError(f"--pin {item}: no target named {name!r}; the targets are {names} "
                                  "(set them with --targets)")
        if key in out and out[key] != name:
            raise AssignmentError(f"--pin pins {key!r} twice, to {out[key]!r} and {name!r}: pin each key to one "
                                  "target")
        out[key] = name
    return out


def _manual(text: str | None, targets) -> dict | None:
    """``--manual`` JSON ``{label: {key: target}}``, its shape and target names checked."""
    if text is None:
        return None
    example = """'{"convs on cpu1": {"relax.nn.conv2d": "cpu1"}}'"""
    manual = _json_option(text, "--manual", example, AssignmentError)
    if not isinstance(manual, dict) or not manual:
        raise AssignmentError(f"--manual must be a non-empty JSON object {{label: {{key: target}}}}, e.g. {example}")
    for label, assignment in manual.items():
        if not isinstance(assignment, dict):
            raise AssignmentError(f"--manual plan {label!r} must be an object {{key: target}}, got {assignment!r}; "
                                  f"write e.g. {example}")
        for key, name in assignment.items():
            if not isinstance(name, str) or name not in list(targets):
                raise AssignmentError(f"--manual plan {label!r}: {key!r} -> {name!r} names no target; the targets "
                                      f"are {list(targets)}")
    return manual


def _check_method(method: str, targets) -> None:
    methods = (["auto", "ilp", "mincut", "greedy", "brute_force"] + [f"all:{t}" for t in targets]
               + [f"memory-greedy:{t}" for t in list(targets)[1:]])
    if method not in methods:
        raise PlacementError(f"--method {method!r} is not a method: choose one of {methods}")


def check_output_dir(path: str, option: str = "--out") -> None:
    """Refuse an output folder that cannot be made or written, before any work; creates nothing."""
    path = os.fspath(path)
    if os.path.exists(path):
        if not os.path.isdir(path):
            raise AutoplaceError(f"{option} {path} is a file, not a folder: give a folder (made if missing)")
        if not os.access(path, os.W_OK | os.X_OK):
            raise AutoplaceError(f"{option} {path}: no permission to write in that folder; give another one")
        return
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise AutoplaceError(f"{option} {path}: {parent} is a file, so the folder cannot be made; give another path")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise AutoplaceError(f"{option} {path}: no permission to create it in {parent}; give another path")


# ----------------------------------------------------------------------------------------------- models


def _model_specs(args) -> list[tuple[str, object]]:
    """``(name, loader)`` for every model named, each checked without building it (zoo names and sizes,
    file paths); a loader returns a list of ``(name, Model)``."""
    from . import zoo
    from .frontend import check_model_path, load_model

    specs = []
    for spec in args.zoo or []:
        if spec == "grid" and args.command == "profile":  # fixed stride grid of single kernels (cost-model data)
            specs.append(("grid", lambda: [(m.name, m) for m in zoo.regime_grid()]))
            continue
        if spec.split(":")[0] == "ops" and args.command == "profile":  # single-op models (cost-model data)
            from .op_families import FAMILIES, op_family_models

            families = [f for f in spec.split(":", 1)[1].split(",") if f] if ":" in spec else None
            unknown = sorted(set(families or ()) - set(FAMILIES))
            if unknown or families == []:
                raise ModelError(f"--zoo {spec}: unknown op families {unknown}; name some of {sorted(FAMILIES)} "
                                 "(e.g. --zoo ops:cnn_pow2,conv_stem), or --zoo ops for all")
            specs.append((spec, lambda families=families: [(m.name, m) for m in op_family_models(families=families)]))
            continue
        if spec == "grid":
            raise ModelError("--zoo grid is the profiler's stride grid (149 single-kernel models), not a model to "
                             "place: name a zoo model (mlp cnn bert seed003 inception, -base for the base size)")
        zoo.check_spec(spec)
        specs.append((spec, lambda spec=spec: [(spec, zoo.parse(spec))]))
    shapes = _shapes(getattr(args, "shape", None))
    if shapes and not getattr(args, "models", None):
        raise ModelError("--shape binds symbolic dimensions of model files (.onnx, .py), and no model file was "
                         "given: zoo models have static shapes (drop --shape)")
    for path in getattr(args, "models", None) or []:
        check_model_path(path)
        name = os.path.splitext(os.path.basename(path))[0]
        specs.append((name, lambda path=path, name=name: [(name, load_model(path, shapes=shapes))]))
    if not specs:
        raise ModelError("no model given: name zoo models with --zoo (e.g. --zoo cnn) or pass model files "
                         "(.onnx, or .py with a TVMScript IRModule)")
    return specs


def _one_model_spec(args):
    specs = _model_specs(args)
    if len(specs) > 1:
        names = [name for name, _ in specs]
        raise ModelError(f"{args.command} places one model, but {len(specs)} were given ({names}): run it once per "
                         "model (`autoplace profile` takes several)")
    return specs[0]


def _load(specs) -> list:
    return [pair for _, loader in specs for pair in loader()]


def _check_pins_on_model(model, pins: dict, targets) -> None:
    """Resolve the pins against the model's op graph now (a key that names nothing is refused before costing)."""
    if not pins:
        return
    from .graph import op_graph, resolve_assignment

    try:
        resolve_assignment(op_graph(model), pins, targets, default=targets.host.name)
    except AssignmentError as err:
        raise AssignmentError(f"--pin: {err}") from None


# --------------------------------------------------------------------------------------------- commands


def _rpc(args):
    """``--rpc HOST:PORT --rpc-key KEY`` as an :class:`~autoplace.profile.rpc.RPCConfig` (None without
    ``--rpc``), every part checked before any work."""
    from .errors import RPCError

    if args.rpc is None:
        if args.rpc_key is not None:
            raise RPCError(f"--rpc-key {args.rpc_key} needs --rpc HOST:PORT (the RPC tracker's address)")
        return None
    if args.rpc_key is None:
        raise RPCError(f"--rpc {args.rpc} needs --rpc-key KEY: the --key the RPC servers were started with "
                       "(`python -m tvm.exec.rpc_server --tracker HOST:PORT --key KEY`)")
    from .profile.rpc import RPCConfig

    return RPCConfig.create(args.rpc, args.rpc_key, request_timeout_s=args.rpc_timeout)


def cmd_profile(args) -> int:
    from .profile import KernelTimer, ProfileStore, default_profile_dir, profile_models

    rpc = _rpc(args)
    if rpc is not None and (args.merge or args.bundle):
        raise AutoplaceError(f"--rpc measures on the tracker's servers; {'--merge' if args.merge else '--bundle'} is "
                             "for machines no network reaches: give one or the other")
    if args.merge:
        given = [flag for flag, on in (("model files", args.models), ("--zoo", args.zoo), ("--bundle", args.bundle),
                                       ("--dir", args.dir), ("--targets", args.targets)) if on]
        if given:
            raise AutoplaceError(f"--merge takes only a records file (and --out); drop {given} or run them separately")
        _check_merge(args.merge)
        root = args.out or "profiles"
        check_output_dir(root, "--out")
        from .profile.remote import merge_records

        merge_records(args.merge, root)
        return 0
    if args.dir and args.out:
        raise AutoplaceError("give --dir (the exact profile folder) or --out (the profiles root), not both")
    if args.max_rounds is not None and (args.bundle or rpc is not None or args.max_rounds < args.rounds):
        raise AutoplaceError(f"--max-rounds {args.max_rounds}: give it with --rounds N <= it (e.g. --rounds 3 "
                             "--max-rounds 6), for a job on this machine (not --bundle or --rpc)")
    targets = _targets(args.targets)
    specs = _model_specs(args)
    if (args.bundle_append or args.bundle_kinds) and not args.bundle:
        raise AutoplaceError("--bundle-append and --bundle-kinds shape a bundle: give --bundle FOLDER too")
    if args.bundle_kinds:
        kinds = {targets[n].kind for n in targets}
        unknown = sorted(set(args.bundle_kinds) - kinds)
        if unknown:
            raise AutoplaceError(f"--bundle-kinds {unknown}: no target of that kind in --targets (kinds: {sorted(kinds)})")
    if args.bundle:
        check_output_dir(args.bundle, "--bundle")
        from .profile.remote import build_bundle

        build_bundle(_load(specs), targets, args.bundle, rounds=args.rounds, append=args.bundle_append,
                     kernel_kinds=args.bundle_kinds, copies=not args.no_copies, end_to_end=not args.no_end_to_end)
        print(f"next, on the device machine (TVM runtime only): python {args.bundle}/runner.py {args.bundle}"
              + (f" (times every item {args.rounds} times, round by round)" if args.rounds > 1 else "") + "\n"
              f"then here: autoplace profile --merge {args.bundle}/records.jsonl")
        return 0
    # The timer's options are checked when it is made: before any model is loaded or anything written.
    timer = KernelTimer(repeat=args.repeat, min_repeat_ms=args.min_repeat_ms, timeout_s=args.timeout)
    if rpc is not None:
        from .profile.rpc import profile_over_rpc, wait_for_servers

        root = args.out or "profiles"
        check_output_dir(args.dir or root, "--dir" if args.dir else "--out")
        wait_for_servers(rpc)  # the tracker answers and knows the key, before any model is loaded
        models = _load(specs)
        summary = profile_over_rpc(models, targets, rpc, store=ProfileStore(args.dir) if args.dir else None,
                                   profiles_root=root, copies=not args.no_copies, end_to_end=not args.no_end_to_end,
                                   timer=timer, progress=not args.no_progress, redo=args.redo or (),
                                   rounds=args.rounds)
        print(json.dumps(summary, indent=1))
        return 0
    try:
        folder = args.dir or default_profile_dir(args.out or "profiles")
        check_output_dir(folder, "--dir" if args.dir else "--out")
        models = _load(specs)
        store = ProfileStore(folder)
        print(f"profiling into {store.path}")
        summary = profile_models(models, targets, store, copies=not args.no_copies,
                                 end_to_end=not args.no_end_to_end, rounds=args.rounds,
                                 max_rounds=args.max_rounds, timer=timer, progress=not args.no_progress, redo=args.redo or (),
                                 host_check=args.host_check, host_check_limit=args.host_check_limit)
    finally:
        timer.close()
    print(json.dumps(summary, indent=1))
    return 0


def _check_merge(path: str) -> None:
    if not os.path.isfile(path):
        what = "is a folder" if os.path.isdir(path) else "does not exist"
        raise AutoplaceError(f"--merge {path} {what}: give the records.jsonl that a bundle's runner.py wrote "
                             "(e.g. --merge gpu_bundle/records.jsonl)")
    meta = os.path.join(os.path.dirname(path) or ".", "metadata.json")
    if not os.path.isfile(meta):
        raise AutoplaceError(f"--merge {path}: no metadata.json beside it ({meta}), so the machine that measured it "
                             "is unknown; give the records.jsonl inside the bundle folder runner.py ran in")
    try:
        with open(meta, encoding="utf-8") as f:
            hardware = json.load(f).get("hardware_id")
    except (ValueError, AttributeError):
        hardware = None
    if not hardware:
        raise AutoplaceError(f"--merge {path}: {meta} is not a bundle's metadata (no hardware_id); give the "
                             "records.jsonl inside the bundle folder runner.py ran in")


def cmd_optimize(args) -> int:
    targets = _targets(args.targets)
    pins, memory = _pins(args.pin, targets), _memory(args.memory, targets)
    _check_method(args.method, targets)
    check_output_dir(args.out)
    ((_, model),) = _load([_one_model_spec(args)])
    _check_pins_on_model(model, pins, targets)
    from .optimizer import optimize

    result = optimize(model, None, targets, pins=pins, memory_bytes=memory,
                      method=args.method, time_limit_s=args.time_limit, min_split_gain=args.min_split_gain)
    print(result)
    for note in result.choice_notes()[:1] if result.split_declined else ():
        print(f"note: {note}")
    print(result.summary().to_string(float_format=lambda v: f"{v:.1f}"))
    paths = result.save(args.out)
    for what, path in paths.items():
        print(f"wrote {what}: {path}")
    return 0


def cmd_compare(args) -> int:
    rpc = _rpc(args)
    targets = _targets(args.targets)
    pins, memory = _pins(args.pin, targets), _memory(args.memory, targets)
    manual = _manual(args.manual, targets)
    if args.out:
        check_output_dir(args.out)
    if rpc is not None:
        from .profile.rpc import wait_for_servers

        wait_for_servers(rpc)  # the tracker answers and knows the key, before the model is loaded
    ((name, model),) = _load([_one_model_spec(args)])
    _check_pins_on_model(model, pins, targets)
    from .comparison import compare

    # compare() resolves every manual plan against the model before it builds the first plan.
    table = compare(model, None, targets, manual=manual, pins=pins, memory_bytes=memory, rounds=args.rounds, rpc=rpc)
    from .show import table_text

    if "hardware_id" in table.attrs:
        print(f"measured on {table.attrs['hardware_id']} over RPC ({rpc.tracker} key {rpc.key})")
    print(table_text(table))
    if table.attrs.get("host_speed"):
        print(table.attrs["host_speed"])
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        path = os.path.join(args.out, f"{table.attrs.get('model', name)}.compare.csv")
        table.to_csv(path)
        print(f"wrote {path}")
    return 0


def cmd_show(args) -> int:
    if os.path.isdir(args.result):
        raise AutoplaceError(f"{args.result} is a folder: give the <model>.result.json file that `autoplace optimize "
                             "--out DIR` wrote in it")
    out = args.out or os.path.splitext(args.result)[0].replace(".result", "") + ".png"
    _check_picture_path(out, "--out" if args.out else "the picture path")
    from .optimizer import OptimizeResult
    from .show import render_plan

    result = OptimizeResult.load(args.result)
    if os.path.dirname(out):
        os.makedirs(os.path.dirname(out), exist_ok=True)  # as optimize --out makes its folder
    render_plan(result, out)
    print(f"wrote {out}")
    return 0


def _check_picture_path(path: str, option: str) -> None:
    if os.path.isdir(path):
        raise AutoplaceError(f"{option} {path} is a folder: give a picture file name (.png, .svg, .pdf)")
    suffix = os.path.splitext(path)[1].lower().lstrip(".")
    if suffix:
        from matplotlib.backend_bases import FigureCanvasBase

        formats = sorted(FigureCanvasBase.get_supported_filetypes())
        if suffix not in formats:
            raise AutoplaceError(f"{option} {path}: cannot draw a .{suffix} picture; use one of {formats}")
    check_output_dir(os.path.dirname(path) or ".", f"{option} {path}: its folder")


def cmd_train(args) -> int:
    from .cost_model.cli import train_main

    return train_main(args.rest)


def cmd_demo(args) -> int:
    from .demo import run_demo

    return run_demo(model=args.model, out_dir=args.out, rounds=args.rounds)


# ------------------------------------------------------------------------------------------------- main


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _run(func, *args) -> int:
    """``func(*args)``, with errors of user input printed as one ``autoplace: error:`` line (exit 2).

    Caught: :class:`AutoplaceError` (every check of input raises one) and ``OSError`` about a file
    the user named (missing, a folder, no permission, disk full). Anything else is a bug and keeps its
    traceback.
    """
    try:
        return func(*args)
    except AutoplaceError as err:
        message = str(err)
    except OSError as err:
        if err.filename is None:
            raise
        message = f"{err.strerror or err}: {err.filename}"
    print(f"autoplace: error: {_one_line(message)}", file=sys.stderr)
    return EXIT_BAD_INPUT


def _rpc_args(p) -> None:
    p.add_argument("--rpc", metavar="HOST:PORT",
                   help="measure on the servers of this TVM RPC tracker (python -m tvm.exec.rpc_tracker)")
    p.add_argument("--rpc-key", metavar="KEY", help="the servers' --key (one kind of machine)")
    p.add_argument("--rpc-timeout", type=_positive_seconds, default=60.0,
                   help="seconds to wait for a free server of the key before giving up (default 60)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="autoplace", description="Measured, optimal CPU/GPU placement for TVM Relax")
    sub = parser.add_subparsers(dest="command", required=True)
    from .targets import DEFAULT_TARGETS

    targets_help = f"targets, default {json.dumps(DEFAULT_TARGETS)}: {TARGETS_EXAMPLE}"

    p = sub.add_parser("profile", help="measure kernels, copies and call overhead into profiles/",
                       epilog=EXAMPLES["profile"], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="*", help="model files: .onnx, or .py with a TVMScript IRModule")
    p.add_argument("--zoo", nargs="+", action="extend",
                   help="zoo models: mlp cnn bert seed003 inception (add -base for base size), grid, ops "
                        "(the op families), ops:FAMILY,FAMILY (only those)")
    p.add_argument("--targets", help=targets_help)
    p.add_argument("--shape", nargs="+", action="extend", metavar="NAME=SIZE",
                   help="size of a symbolic dimension of the model files (e.g. seq_len=128; repeatable)")
    p.add_argument("--out", help="profiles root (default: profiles)")
    p.add_argument("--dir", help="exact profile folder (default: <out>/<hardware id>)")
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--min-repeat-ms", type=int, default=20)
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per kernel before it counts as failed")
    p.add_argument("--rounds", type=_int_at_least(1), default=1,
                   help="time every kernel and model this many times, minutes apart (median of the rounds; "
                        "3 on a shared or virtual machine, where one burst of samples can read 2x slow)")
    p.add_argument("--max-rounds", type=_int_at_least(1), default=None,
                   help="after --rounds, time again (up to this many rounds in all) only the kernels and models "
                        "whose fastest round no other round confirms within 10%%: a host slow in phases")
    p.add_argument("--host-check", choices=["refuse", "warn", "off"], default="refuse",
                   help="before timing, time a dozen of the folder's own CPU kernels (and, for a job that times "
                        "models end to end, up to 3 models) against their records: refuse (default) stops before "
                        "anything is timed when the calmest of 3 checks 20 s apart reads over --host-check-limit, "
                        "warn times anyway (records carry host_check_ratio), off skips it")
    p.add_argument("--host-check-limit", type=_ratio_at_least_one, default=1.05, metavar="RATIO",
                   help="how many times their records the folder's kernels, or its models, may read (median) "
                        "before the host counts as slow (default 1.05)")
    p.add_argument("--no-copies", action="store_true")
    p.add_argument("--no-end-to-end", action="store_true",
                   help="skip timing each model whole (kernels only; the cost-model evaluation needs it)")
    p.add_argument("--redo", nargs="+", action="extend", choices=["unit", "model", "launch", "copy", "copy_fit"],
                   help="measure these record kinds again (the newest record of a key wins)")
    p.add_argument("--bundle", help="compile into this folder for another machine instead of measuring here")
    p.add_argument("--bundle-append", action="store_true",
                   help="add to the bundle already in --bundle (its items stay) instead of starting a new one")
    p.add_argument("--bundle-kinds", nargs="+", metavar="KIND",
                   help="compile the models' kernels for these target kinds only (e.g. cuda: GPU training data)")
    p.add_argument("--merge", help="merge a records.jsonl written by a bundle's runner.py into --out")
    p.add_argument("--no-progress", action="store_true")
    _rpc_args(p)
    p.set_defaults(func=cmd_profile)

    def model_args(p):
        p.add_argument("models", nargs="*", help="model file: .onnx, or .py with a TVMScript IRModule")
        p.add_argument("--zoo", nargs="+", action="extend",
                       help="zoo model (mlp cnn bert seed003 inception, -base for base size)")
        p.add_argument("--targets", help=targets_help)
        p.add_argument("--pin", nargs="+", action="extend", metavar="KEY=TARGET",
                       help="pin a node, op name or instance to a target (repeatable)")
        p.add_argument("--memory", nargs="+", action="extend", metavar="TARGET=BYTES",
                       help="memory cap of a target (repeatable)")
        p.add_argument("--shape", nargs="+", action="extend", metavar="NAME=SIZE",
                       help="size of a symbolic dimension of the model file (e.g. seq_len=128; repeatable)")

    p = sub.add_parser("optimize", help="place a model, write the annotated module, plan and picture",
                       epilog=EXAMPLES["optimize"], formatter_class=argparse.RawDescriptionHelpFormatter)
    model_args(p)
    p.add_argument("--method", default="auto",
                   help="auto (default), ilp, mincut, greedy, all:<target>, memory-greedy:<target>")
    p.add_argument("--time-limit", type=_positive_seconds, default=10.0, help="solver time limit in seconds")
    p.add_argument("--min-split-gain", type=_fraction, default=None, metavar="FRACTION",
                   help="keep a plan over several targets only if predicted at least this much faster than the "
                        "fastest one-target plan (default 0.03; 0 keeps any split)")
    p.add_argument("--out", default="out", help="output folder (default: out)")
    p.set_defaults(func=cmd_optimize)

    p = sub.add_parser("compare", help="build and time autoplace's plan, the baselines and manual plans",
                       epilog=EXAMPLES["compare"], formatter_class=argparse.RawDescriptionHelpFormatter)
    model_args(p)
    p.add_argument("--manual", help='JSON {label: {key: target}} of manual placements to compare')
    p.add_argument("--rounds", type=_int_at_least(1), default=5)
    p.add_argument("--out", help="folder for the CSV table")
    _rpc_args(p)
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
    p.add_argument("--rounds", type=_int_at_least(1), default=5)
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # torch's exporter warns about its own internals on every import of a model: not the user's business.
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
                            category=FutureWarning)
    if argv[:1] == ["train"]:  # its own parser (autoplace train --help)
        from .cost_model.cli import train_main

        return _run(train_main, argv[1:])
    args = build_parser().parse_args(argv)
    return _run(args.func, args)


if __name__ == "__main__":
    sys.exit(main())
