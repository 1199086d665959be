"""Profile another machine: build here, measure there (a bundle, or over TVM's RPC), merge back.

Two ways to reach the machine share one list of *items* (a kernel, a VM call-overhead probe, a copy
probe, a placed model: each a compiled file plus what the runner needs to time it) and one runner
(:mod:`.remote_runner`):

* a **bundle** (``build_bundle``, for a machine no network reaches): every item is compiled
  (``export_library``: nvcc is on the CPU machines, so CUDA kernels build here) into one folder with a
  ``manifest.json`` and ``runner.py``; ``python runner.py BUNDLE`` there needs only the TVM runtime and
  appends records (CPU kernels timed warm and in-model, with the bundle's streaming kernel,
  :func:`export_stream_kernel`); ``merge_records`` checks them and adds them to ``profiles/<that machine's id>/``;
* **RPC** (:mod:`.rpc`): the same items are uploaded to the servers of a TVM RPC tracker and timed by the
  runner's :func:`~.remote_runner.run_item` with the remote session's devices (warm only: the in-model
  preprocessing would have to run in the server).

The records derived from probes (``launch`` from the call-overhead probes, ``copy_fit`` from the copy
sizes) are computed here by :func:`launch_record` and :func:`copy_fit_record` for both ways, as the
local job computes them.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import zlib

import tvm

from ..backend.cpu_schedules import PARALLEL_MIN_WORK
from ..backend.pipeline import build
from ..frontend import load_model
from ..graph import op_graph
from ..targets import TargetSet
from .copies import (
    ALLOC_ELEMS,
    DEFAULT_COPY_SIZES,
    LAUNCH_PROBE_ROUNDS,
    alloc_alone_func,
    args_module,
    copy_module,
    fit_copy_cost,
    launch_module,
)
from .job import model_fields, model_placement, target_label, unit_record
from .measure import compile_kernel
from .remote_runner import BENCH, IN_CONTEXT_FILE, STASH, STREAM_FILE
from .store import SUCCESS, ProfileStore, _intact
from .units import extract_units

# ------------------------------------------------------------------------------------------------- items


def kernel_item(unit, graph, model_name: str, kind: str, file: str) -> dict:
    """The manifest item of one kernel: its ``unit`` record (no timing yet) and how to call it."""
    record = unit_record(unit, graph, model_name, kind, {})
    record.pop("measured_at", None)
    return dict(record=record, file=file, kind=kind, arg_shapes=record["arg_shapes"], arg_dtypes=record["arg_dtypes"],
                num_outputs=record["num_outputs"])


def export_kernel(func_script: str, target_json: str, path: str) -> None:
    """Compile one kernel (TVMScript, see :func:`~.measure.compile_kernel`) and write it as a library (a CUDA
    kernel as machine code where :func:`autoplace.backend.cuda_codegen.enable` can, for a bundle or an RPC box)."""
    target = tvm.target.Target(json.loads(target_json))
    if target.kind.name == "cuda":
        from ..backend import cuda_codegen

        cuda_codegen.enable(target)
    compile_kernel(func_script, target_json).export_library(path)


def launch_items(targets: TargetSet, name: str) -> list[tuple[dict, object]]:
    """``[(item, build)]`` of the probes that give target ``name``'s ``launch`` record (``build(path)``
    writes the item's file): 1- and 65-call chains, a 9-argument ``main`` and, on a CPU, a 4 MiB
    allocation in the VM and the same ``add`` kernel alone (see
    :func:`~autoplace.profile.copies.measure_launch_overhead`). The runner keeps each probe's fastest of
    :data:`~autoplace.profile.copies.LAUNCH_PROBE_ROUNDS` timings (``probe_rounds``; the local job interleaves its
    rounds over the probes, a runner times one probe's in a row)."""
    one = TargetSet({name: targets[name].target})
    label = target_label(targets[name])
    kind, vdevice = one[name].kind, one[name].vdevice
    out = []

    def vm_probe(key, mod, inputs):
        def write(path, mod=mod):
            mod.update_global_info("vdevice", one.vdevices)
            build(mod, fuse=False).export_library(path)

        item = dict(record=dict(kind="launch_probe", key=key, target=label), file=f"lib/launch_{name}_{key}.so",
                    devices=[[kind, 0]], inputs=inputs, probe_rounds=LAUNCH_PROBE_ROUNDS)
        out.append((item, write))

    for calls in (1, 65):
        vm_probe(f"calls{calls}", launch_module(calls, vdevice), [[[1], "float32", 0]])
    vm_probe("args9", args_module(9, 1, vdevice), [[[1], "float32", 0]] * 9)
    if kind == "llvm":  # the kernel-alone half runs on the machine's CPU
        vm_probe("alloc", args_module(1, ALLOC_ELEMS, vdevice), [[[ALLOC_ELEMS], "float32", 0]])

        def alone(path, target=one[name].target):
            tvm.tirx.build(tvm.IRModule({"main": alloc_alone_func()}), target=target).export_library(path)

        out.append((dict(record=dict(kind="launch_probe", key="alloc_alone", target=label), alone=True, kind=kind,
                         file=f"lib/launch_{name}_alloc_alone.so", arg_shapes=[[ALLOC_ELEMS], [ALLOC_ELEMS]],
                         arg_dtypes=["float32", "float32"], num_outputs=1, probe_rounds=LAUNCH_PROBE_ROUNDS), alone))
    return out


def copy_items(targets: TargetSet, src: str, dst: str, copy_sizes=DEFAULT_COPY_SIZES) -> list[tuple[dict, object]]:
    """``[(item, build)]``: ``to_vdevice`` from ``src`` to ``dst`` for every size (``copy`` records)."""
    label = f"{target_label(targets[src])}->{target_label(targets[dst])}"
    pair = TargetSet({src: targets[src].target, dst: targets[dst].target})  # only the two devices
    out = []
    for nbytes in copy_sizes:
        n = max(1, int(nbytes) // 4)

        def write(path, nbytes=nbytes):
            build(copy_module(nbytes, src, dst, pair)).export_library(path)

        out.append((dict(record=dict(kind="copy", key=str(n * 4), target=label, nbytes=n * 4),
                         file=f"lib/copy_{src}_{dst}_{nbytes}.so",
                         devices=[[pair[t].kind, pair[t].vdevice_id] for t in pair],
                         inputs=[[[n], "float32", pair[src].index]]), write))
    return out


def staged_module(placement, tag: str = "plan") -> tvm.IRModule:
    """A placed model's module plus :data:`~.remote_runner.STASH` and :data:`~.remote_runner.BENCH`.

    ``STASH(args on device 0)`` copies every argument of ``main`` to its own device and keeps it in the
    runtime's tensor cache (``vm.builtin.tensor_cache.update``); ``BENCH()`` reads them back and calls
    ``main``. A remote VM can then time ``main`` with each weight resident on its device:
    ``VirtualMachine.set_input`` moves every argument to the first device, and a tensor sent over RPC
    reaches the VM as a ``DLTensor*``, which ``main`` does not take. ``main`` itself is unchanged.
    The cache is global to the process, so its names carry ``tag``: give each executable loaded in one
    process its own.
    """
    from tvm import relax

    mod = placement.mod
    main = mod["main"]
    first = mod.global_infos["vdevice"][0]
    bb = relax.BlockBuilder()
    gvars = {g.name_hint: bb.add_func(f, g.name_hint) for g, f in mod.functions_items()}
    params = list(main.params)
    staged = [relax.Var(f"a{i}", relax.TensorType(p.ty.shape, p.ty.dtype, first)) for i, p in enumerate(params)]
    with bb.function(STASH, staged, pure=False):
        for i, (arg, param) in enumerate(zip(staged, params)):
            vdevice = param.ty.vdevice
            same = (vdevice is None or (vdevice.target.kind.name == first.target.kind.name
                                        and int(vdevice.vdevice_id) == int(first.vdevice_id)))
            value = arg if same else bb.emit(relax.op.to_vdevice(arg, vdevice))
            bb.emit(relax.Call(relax.ExternFunc("vm.builtin.tensor_cache.update"),
                               [tvm.ir.StringImm(f"{STASH}.{tag}.{i}"), value, relax.prim_value(tvm.tirx.IntImm("bool", 1))],
                               ty_args=[relax.TupleType([])]))
        bb.emit_func_output(relax.Tuple([]))
    with bb.function(BENCH, []):
        args = [bb.emit(relax.op.call_pure_packed("vm.builtin.tensor_cache.get", tvm.ir.StringImm(f"{STASH}.{tag}.{i}"),
                                                  ty_args=param.ty)) for i, param in enumerate(params)]
        bb.emit_func_output(bb.emit(relax.Call(gvars["main"], args)))
    out = bb.get()
    out.update_global_info("vdevice", mod.global_infos["vdevice"])
    return out


def plan_item(placement, record: dict, file: str, *, seed: int = 0) -> tuple[dict, list, object]:
    """``(item, arrays, build)`` of a placed model timed end to end: its inputs (seeded random) and
    weights in ``main``'s order, and the device of each."""
    import numpy as np

    targets = placement.targets
    values = [np.asarray(v) for v in list(placement.model.random_inputs(seed=seed)) + list(placement.params)]
    where = list(placement.annotated.input_targets) + list(placement.annotated.param_targets)
    item = dict(record=record, file=file, devices=[[targets[t].kind, targets[t].vdevice_id] for t in targets],
                arg_devices=[targets[t].index for t in where])

    tag = os.path.splitext(os.path.basename(file))[0]

    def write(path):
        build(staged_module(placement, tag), fuse=placement.fuse).export_library(path)

    return item, values, write


def model_item(model, graph, units, targets: TargetSet, name: str, file: str, *, seed: int = 0) -> tuple[dict, list, object]:
    """``(item, arrays, build)`` of the model built entirely on target ``name``: a ``model`` record (as the local
    job's, :func:`~.job.model_fields`) timed end to end like a placed model, and its kernels timed inside the runs
    (``in_context``: each unit's ``func_name``, in launch order; the runner's :func:`~.remote_runner.time_in_context_item`)."""
    placement = model_placement(model, graph, targets, name)
    kind = targets[name].kind
    item, values, write = plan_item(placement, model_fields(model, units, placement, kind), file, seed=seed)
    item["in_context"] = [u.func_name for u in units]
    return item, values, write


def _file_safe(text: str) -> str:
    """``text`` with every character but letters and digits as ``_``: a bundle file's name."""
    return "".join(c if c.isalnum() else "_" for c in text)


def save_arrays(bundle_dir: str, model_name: str, values: list) -> tuple[str, dict]:
    """A placed model's arguments in the bundle: ``(npz file, generated)``. Large float arrays are drawn on the box
    (:data:`GENERATED_MIN_BYTES`; the bundle must stay small, and values do not change the time); the rest (inputs,
    integer tensors, small weights) travel, one file per distinct set, which the items of one model share."""
    import numpy as np

    generated = {str(i): [list(v.shape), str(v.dtype)] for i, v in enumerate(values)
                 if v.dtype.kind == "f" and v.nbytes >= GENERATED_MIN_BYTES}
    kept = {f"arg{i}": v for i, v in enumerate(values) if str(i) not in generated}
    crc = zlib.crc32(repr(sorted(generated.items())).encode())
    for name, v in kept.items():
        crc = zlib.crc32(np.ascontiguousarray(v).tobytes(), zlib.crc32(repr((name, v.shape, str(v.dtype))).encode(), crc))
    arrays = os.path.join("lib", f"args_{_file_safe(model_name)}_{crc:08x}.npz")
    if not os.path.exists(os.path.join(bundle_dir, arrays)):
        np.savez(os.path.join(bundle_dir, arrays), **kept)
    return arrays, generated


def copy_runner(bundle_dir: str) -> None:
    """The runner and the in-context timing it imports (:mod:`.in_context`), into the bundle."""
    here = os.path.dirname(__file__)
    shutil.copy(os.path.join(here, "remote_runner.py"), os.path.join(bundle_dir, "runner.py"))
    shutil.copy(os.path.join(here, "in_context.py"), os.path.join(bundle_dir, IN_CONTEXT_FILE))


# ----------------------------------------------------------------------------------------- derived records


def launch_record(label: str, probes: dict) -> dict | None:
    """The ``launch`` record of a device from its probes (``{key: timed probe record}``), as
    :func:`~autoplace.profile.copies.measure_launch_overhead` computes it; None without both call chains."""
    if not {"calls1", "calls65"} <= set(probes):
        return None
    single = probes["calls1"]["median_us"]
    record = dict(kind="launch", key="vm_call", target=label, status="ok",
                  median_us=max(0.0, (probes["calls65"]["median_us"] - single) / 64), single_call_us=single)
    if "args9" in probes:
        record["per_arg_us"] = max(0.0, (probes["args9"]["median_us"] - single) / 8)
    if "alloc" in probes and "alloc_alone" in probes:
        extra = probes["alloc"]["median_us"] - probes["alloc_alone"]["median_us"] - single
        record["alloc_us_per_byte"] = max(0.0, extra) / (4 * ALLOC_ELEMS)
    stamps = [p["measured_at"] for p in probes.values() if "measured_at" in p]
    if stamps:
        record["measured_at"] = max(stamps)
    return record


def copy_fit_record(label: str, rows: list) -> dict:
    """``latency = alpha + bytes * per_byte`` over one device pair's ``copy`` records."""
    alpha, per_byte = fit_copy_cost([r["nbytes"] for r in rows], [r["median_us"] for r in rows])
    record = dict(kind="copy_fit", key="fit", target=label, alpha_us=alpha, us_per_byte=per_byte,
                  bandwidth_gb_s=(1e-3 / per_byte) if per_byte > 0 else None, status="ok")
    stamps = [r["measured_at"] for r in rows if "measured_at" in r]
    if stamps:
        record["measured_at"] = max(stamps)
    return record


#: Vectors the bundle's runner reads back in parallel from this many elements on (shorter: on one thread): where
#: autoplace's CPU schedules run an elementwise kernel in parallel (``PARALLEL_MIN_WORK["injective"]``).
STREAM_PARALLEL_MIN_ELEMS = PARALLEL_MIN_WORK["injective"]


def _twice(x):
    return lambda i: x[i] + x[i]


#: The C++ source of the in-model preprocessing a stock RPC server gets (linked into the streaming kernels by
#: ``export_stream_kernel(..., preproc=True)``; registers ``autoplace.profile.in_model_configure`` and
#: :data:`~autoplace.profile.remote_runner.PREPROC_NAME` when the library is loaded).
PREPROC_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "in_model_preproc.cc")


def export_stream_kernel(target, path: str, *, preproc: bool = False) -> None:
    """The runner's streaming kernels for in-model timing (``remote_runner.register_stream_preproc``): ``main(x,
    y)``, ``y = x + x`` over float32 vectors of any length, 16 lanes at a time, the chunks in parallel (each core
    streams through its share), and ``serial(x, y)``, the same on one thread, compiled for ``target`` (an ``llvm``
    one). The runner streams vectors of at least :data:`STREAM_PARALLEL_MIN_ELEMS` in parallel and shorter ones on
    one thread, as the profiler's own streamer here (autoplace's schedule of an ``add``) does: a short input read
    back by both cores was left half in the other core's L2, and the bundle's in-model times of kernels under
    0.1 us read 1.1-1.75x the profiler's (Zen 3, session 20).

    ``preproc``: also link :data:`PREPROC_SOURCE` into the library (compiled by TVM's ``cc``, g++ unless ``CXX``
    says otherwise), for a server that runs no autoplace code (:mod:`autoplace.profile.rpc`): loading it registers
    the in-model preprocessing, which streams with these two kernels as the runner does."""
    from tvm import te

    from ..backend.cpu_schedules import cpu_target

    funcs = {}
    for name, parallel in (("main", True), ("serial", False)):
        n = tvm.tirx.Var("n", "int64")
        x = te.placeholder((n,), "float32", name="x")
        y = te.compute((n,), _twice(x), name="y")
        sch = tvm.s_tir.Schedule(te.create_prim_func([x, y]))
        (loop,) = sch.get_loops(sch.get_sblock("y"))
        outer, inner = sch.split(loop, [None, 16])
        if parallel:
            sch.parallel(outer)
        sch.vectorize(inner)
        funcs[name] = sch.mod["main"].with_attr("global_symbol", name)
    lib = tvm.tirx.build(tvm.IRModule(funcs), target=cpu_target(target))
    if not preproc:
        lib.export_library(path)
        return
    from tvm.support import cc
    from tvm_ffi import libinfo

    includes = [tvm.libinfo.find_include_path(), libinfo.find_include_path(), libinfo.find_dlpack_include_path()]
    includes = [p for paths in includes for p in ([paths] if isinstance(paths, str) else paths)]

    def with_preproc(output, objects, options=None, **kwargs):
        flags = [*(options or []), "-std=c++17", "-O2", *(f"-I{p}" for p in includes)]
        return cc.create_shared(output, [*objects, PREPROC_SOURCE], options=flags, **kwargs)

    lib.export_library(path, fcompile=with_preproc)


# ---------------------------------------------------------------------------------------------- bundles


#: LLVM's x86 vector features by their ``/proc/cpuinfo`` flag where the two names differ.
#: ``avx512vp2intersect`` is ``avx512_vp2intersect`` there: a Zen 5 (``znver5``) that has it refused its own bundle.
_CPUINFO_FLAG = {"avx512bf16": "avx512_bf16", "avx512bitalg": "avx512_bitalg", "avx512fp16": "avx512_fp16",
                 "avx512vbmi2": "avx512_vbmi2", "avx512vnni": "avx512_vnni", "avx512vpopcntdq": "avx512_vpopcntdq",
                 "avx512vp2intersect": "avx512_vp2intersect", "avxvnni": "avx_vnni"}
#: The vector flags Linux lists in ``/proc/cpuinfo`` (arch/x86/include/asm/cpufeatures.h), the only ones a runner can
#: check. Newer ones are not listed by every kernel (``avx_ifma``) or by none (``avx_vnni_int8`` and ``avx_ne_convert``
#: are KVM-only): a Sierra Forest's ``sierraforest`` code needs LLVM's avxifma, avxneconvert and avxvnniint8, and
#: checking them would refuse its own bundle. A CPU lacking one of those fails at its first kernel instead.
_LISTED_FLAGS = frozenset({"avx", "avx2", "fma", "f16c", "avx512f", "avx512cd", "avx512dq", "avx512bw", "avx512vl",
                           "avx512ifma", "avx512vbmi", "avx512pf", "avx512er", "avx512_4vnniw", "avx512_4fmaps",
                           *_CPUINFO_FLAG.values()})


def cpu_flags_needed(cpu_target) -> list:
    """The vector instruction sets (``/proc/cpuinfo`` flags: ``avx2``, ``fma``, ``avx512f``...) that code compiled
    for ``cpu_target``'s ``mcpu`` may use and Linux lists (:data:`_LISTED_FLAGS`): the bundle's runner checks the
    remote CPU has them all. Empty for a target that is not x86 (nothing checked)."""
    from tvm.target import codegen

    if cpu_target.kind.name != "llvm" or "x86" not in str(cpu_target.attrs.get("mtriple") or "x86"):
        return []
    features = (str(f).lstrip("+") for f in codegen.llvm_get_cpu_features(cpu_target))
    return sorted(flag for flag in (_CPUINFO_FLAG.get(f, f) for f in features) if flag in _LISTED_FLAGS)


def build_bundle(models, targets, bundle_dir: str, *, copy_sizes=DEFAULT_COPY_SIZES, rounds: int = 1,
                 kernel_kinds=None, append: bool = False, copies: bool = True, end_to_end: bool = True,
                 seed: int = 0, log=print) -> dict:
    """Compile kernels and probes for ``targets`` into ``bundle_dir``; returns the manifest. ``rounds``: how many
    times the runner times every item unless told otherwise (``runner.py --rounds``). ``kernel_kinds``: compile the
    models' kernels for these target kinds only (e.g. ``{"cuda"}``: training data for one device, whose CPU rounds
    would cost most of a GPU box's time). ``append``: add to the bundle already in ``bundle_dir`` (its kernels,
    probes and placed models stay; a kernel it has is not compiled again) instead of starting a new one.
    ``copies``: the copy and call-overhead probes. ``end_to_end``: each model built on each of those kinds too, a
    ``model`` record as the local job writes (:func:`model_item`): timed end to end, and its kernels timed inside
    the runs (``in_context_us``), which is how a cost table prices that model's kernels on that machine."""
    targets = TargetSet(targets)
    os.makedirs(os.path.join(bundle_dir, "lib"), exist_ok=True)
    path = os.path.join(bundle_dir, "manifest.json")
    manifest = dict(tvm_version=tvm.__version__, rounds=int(rounds), targets={n: str(targets[n].target) for n in targets},
                    units=[], launch=[], copies=[], models=[])
    if append and os.path.exists(path):
        with open(path) as f:
            manifest = {**manifest, **json.load(f)}
    _compile_cuda_here([targets[n].target for n in targets], manifest, log)
    seen = {(u["record"]["key"], u["kind"]) for u in manifest["units"]}
    have_models = {(m["record"]["key"], m["record"]["target"]) for m in manifest["models"]
                   if m["record"]["kind"] == "model"}
    kinds = {}
    for name in targets:
        if kernel_kinds is None or targets[name].kind in set(kernel_kinds):
            kinds.setdefault(targets[name].kind, name)
    failed = 0
    saved = time.monotonic()
    for item in models:
        label, model = item if isinstance(item, tuple) else (None, item)
        model = load_model(model, name=label)
        graph = op_graph(model)
        for kind, tname in kinds.items():
            try:
                units = extract_units(model, targets[tname].target, graph=graph)
            except Exception as err:  # one model TVM cannot lower for a target costs that model, not the bundle
                failed += 1
                message = str(err).strip().splitlines()[-1][:300] if str(err).strip() else type(err).__name__
                manifest.setdefault("failed", []).append(dict(kind="model", key=model.name, target=tname,
                                                              status="error", error=f"lower: {message}"))
                log(f"{model.name}: its {kind} kernels failed to lower ({message}); skipped")
                continue
            if end_to_end and (model.name, kind) not in have_models:
                have_models.add((model.name, kind))
                lib = os.path.join("lib", f"model_{_file_safe(f'{model.name}_{kind}')}.so")
                try:
                    entry, values, write = model_item(model, graph, units, targets, tname, lib, seed=seed)
                    write(os.path.join(bundle_dir, lib))
                except Exception as err:
                    failed += 1
                    message = str(err).strip().splitlines()[-1][:300] if str(err).strip() else type(err).__name__
                    manifest.setdefault("failed", []).append(dict(kind="model", key=model.name, target=kind,
                                                                  status="error", error=f"build: {message}"))
                    log(f"{model.name}: its {kind} build failed ({message}); no end-to-end item")
                else:
                    arrays, generated = save_arrays(bundle_dir, model.name, values)
                    manifest["models"].append(dict(entry, arrays=arrays, generated=generated))
            for unit in units:
                if (unit.key, kind) in seen:
                    continue
                seen.add((unit.key, kind))
                entry = kernel_item(unit, graph, model.name, kind, os.path.join("lib", f"{unit.key}.so"))
                try:
                    export_kernel(unit.prim_func.script(show_meta=True), str(targets[tname].target),
                                  os.path.join(bundle_dir, entry["file"]))
                except Exception as err:
                    failed += 1
                    entry["record"].update(status="error",
                                           error=f"compile: {str(err).strip().splitlines()[-1][:300]}")
                    manifest.setdefault("failed", []).append(entry["record"])
                    continue
                manifest["units"].append(entry)
                if time.monotonic() - saved > 60:  # a build cut short resumes with append=True (--bundle-append)
                    _write_manifest(manifest, path)
                    saved = time.monotonic()
    cpu = next((targets[n].target for n in targets if targets[n].kind == "llvm"), None)
    if cpu is not None:
        from ..backend.cpu_schedules import cpu_target

        # kernels of a plain llvm target: this CPU; an appended bundle keeps what its earlier kernels need too
        needed = set(manifest.get("cpu_flags_needed", ())) | set(cpu_flags_needed(cpu_target(cpu)))
        manifest["cpu_flags_needed"] = sorted(needed)
    if cpu is not None and any(entry["kind"] == "llvm" for entry in manifest["units"]) and "stream" not in manifest:
        export_stream_kernel(cpu, os.path.join(bundle_dir, STREAM_FILE))  # the runner times CPU kernels in-model
        manifest["stream"] = STREAM_FILE
        manifest["stream_parallel_min"] = STREAM_PARALLEL_MIN_ELEMS
    have = {entry["file"] for entry in manifest["launch"] + manifest["copies"]}
    probes = [("launch", item) for name in targets for item in launch_items(targets, name)] if copies else []
    probes += [("copies", item) for src in targets for dst in targets if src != dst and copies
               for item in copy_items(targets, src, dst, copy_sizes)]
    for where, (entry, write) in probes:
        if entry["file"] not in have:
            write(os.path.join(bundle_dir, entry["file"]))
            manifest[where].append(entry)
    copy_runner(bundle_dir)
    _write_manifest(manifest, path)
    built = sum(m["record"]["kind"] == "model" for m in manifest["models"])
    log(f"bundle {bundle_dir}: {len(manifest['units'])} kernels ({failed} failed to compile), "
        f"{built} models built on one target (end to end and in context), "
        f"{len(manifest['copies'])} copy probes, {len(manifest['launch'])} call-overhead probes")
    return manifest


def _write_manifest(manifest: dict, path: str) -> None:
    """Write a bundle's manifest whole or not at all (a temporary file, then a rename)."""
    with open(path + ".tmp", "w") as f:
        json.dump(manifest, f, indent=1)
    os.replace(path + ".tmp", path)


def _compile_cuda_here(targets, manifest: dict, log) -> None:
    """CUDA kernels of a bundle as machine code, built here (:func:`autoplace.backend.cuda_codegen.enable`), not
    CUDA C that the GPU box compiles when it loads each module; the manifest says which (``cuda_code``)."""
    from ..backend import cuda_codegen

    cuda = [t for t in targets if t.kind.name == "cuda"]
    if not cuda:
        return
    machine_code = cuda_codegen.enable(cuda[0])
    manifest["cuda_code"] = "machine code (fatbin/cubin)" if machine_code else "CUDA C (compiled on the box at load)"
    if not machine_code:
        log("CUDA kernels stay CUDA C (no nvcc or C compiler here): the GPU box compiles each module when it loads it")


def merge_bundle_rounds(records: list) -> list:
    """One record per item of a bundle runner's records (``runner.py --rounds N`` writes one per round, each
    with its ``round``): the rounds of an item merged as a profile job merges its rounds
    (:func:`~autoplace.profile.job.merge_rounds`: the median of the rounds within 10% of the fastest). An item
    with a failed round keeps its first failure. Order: each item where its first round was."""
    from .job import merge_rounds

    by_item: dict = {}
    for record in records:
        by_item.setdefault((record.get("kind"), record.get("key"), record.get("target")), []).append(record)
    out = []
    for rounds in by_item.values():
        merged = None
        for record in sorted(rounds, key=lambda r: r.get("round", 1)):
            record = {k: v for k, v in record.items() if k not in ("crc", "round")}
            if merged is None or (merged.get("status") == "ok" and record.get("status") != "ok"):
                merged = record  # the first round, or the first failure (kept)
            elif merged.get("status") == "ok":  # measured there, not now
                merged = dict(merge_rounds(merged, record), measured_at=record.get("measured_at"))
        out.append(merged)
    return out


def merge_records(records_path: str, profiles_root: str = "profiles", *, log=print) -> str:
    """Check the runner's records (CRC), derive copy fits and call overhead, and append them to
    ``profiles_root/<hardware id>/``; returns that folder. Already merged records are skipped."""
    import numpy as np

    with open(os.path.join(os.path.dirname(records_path) or ".", "metadata.json")) as f:
        meta = json.load(f)
    good, bad = [], 0
    with open(records_path) as f:
        for line in f:
            try:
                record = json.loads(line)
            except ValueError:
                bad += 1
                continue
            if not _intact(line.strip(), record):  # as the store checks its own lines
                bad += 1
                continue
            good.append(record)
    good = merge_bundle_rounds(good)
    store = ProfileStore(os.path.join(profiles_root, meta["hardware_id"]), metadata=meta)
    done = store.done()
    # a kernel that failed on an earlier call (e.g. a library that runner did not load) and ran now is added: its
    # ok record comes last, and readers keep the last record of a key
    held = {}
    for r in store.load().records:
        tag = (r.get("kind"), r.get("key"), r.get("target"))
        held[tag] = held.get(tag, False) or r.get("status", "ok") in SUCCESS
    failed_before = {tag for tag, ran in held.items() if not ran}
    added = 0
    probes: dict = {}
    copies: dict = {}
    for record in good:
        if record["kind"] == "launch_probe":
            if record.get("status") == "ok":
                probes.setdefault(record["target"], {})[record["key"]] = record
            continue
        if record["kind"] == "copy" and record.get("status") == "ok":
            copies.setdefault(record["target"], []).append(record)
        tag = (record["kind"], record["key"], record["target"])
        if tag in done and not (tag in failed_before and record.get("status", "ok") in SUCCESS):
            continue
        failed_before.discard(tag)
        store.append(record)
        added += 1
    for label, pair in probes.items():
        derived = launch_record(label, pair)
        if ("launch", "vm_call", label) in done or derived is None:
            continue
        store.append(derived)
        added += 1
    for label, rows in copies.items():
        if ("copy_fit", "fit", label) in done:
            continue
        store.append(copy_fit_record(label, rows))
        added += 1
    log(f"merged {added} records into {store.path} ({bad} corrupt lines skipped); "
        f"median copy fits: {[(k, round(float(np.median([r['median_us'] for r in v])), 1)) for k, v in copies.items()]}")
    return store.path


def build_plan_bundle(plans: dict, bundle_dir: str, *, seed: int = 0, log=print) -> dict:
    """Compile placed models for end-to-end timing on another machine with the same runner.

    Parameters
    ----------
    plans : dict
        ``{(model name, plan label): Placement}`` (e.g. autoplace's plan and every baseline of
        :func:`autoplace.compare`, built here for a CPU+GPU box).

    Each plan becomes a VM executable (with :func:`staged_module`'s timing functions), its inputs
    (seeded random) and weights in an ``.npz`` (float weights of :data:`GENERATED_MIN_BYTES` or more are drawn
    there instead, seeded by their position), and a manifest item; ``runner.py`` times ``main`` with
    every argument on its device and writes ``kind="plan"`` records (``key`` = ``"<model>:<plan>"``).
    """
    os.makedirs(os.path.join(bundle_dir, "lib"), exist_ok=True)
    path = os.path.join(bundle_dir, "manifest.json")
    manifest = dict(tvm_version=tvm.__version__, units=[])
    if os.path.exists(path):
        with open(path) as f:
            manifest = json.load(f)
    manifest.setdefault("models", [])
    _compile_cuda_here([p.targets[n].target for p in plans.values() for n in p.targets], manifest, log)
    for (model_name, label), placement in plans.items():
        lib = os.path.join("lib", f"plan_{_file_safe(f'{model_name}_{label}')}.so")
        item, values, write = plan_item(placement, plan_record(placement, model_name, label), lib, seed=seed)
        write(os.path.join(bundle_dir, lib))
        arrays, generated = save_arrays(bundle_dir, model_name, values)
        manifest["models"].append(dict(item, arrays=arrays, generated=generated))
    copy_runner(bundle_dir)
    with open(path, "w") as f:
        json.dump(manifest, f, indent=1)
    log(f"bundle {bundle_dir}: {len(plans)} placed models for end-to-end timing")
    return manifest


#: Float arrays of a placed model from this size on are not written into a plan bundle: the runner draws them
#: (:func:`~.remote_runner.generated_array`, the same values for every plan of the model).
GENERATED_MIN_BYTES = 64 << 10


def plan_record(placement, model_name: str, label: str) -> dict:
    """The ``plan`` record (no timing yet) of a placed model: key ``"<model>:<plan>"``, its devices and copies."""
    targets = placement.targets
    return dict(kind="plan", key=f"{model_name}:{label}", target=",".join(target_label(targets[t]) for t in targets),
                copies=len(placement.copies), copy_bytes=sum(c["nbytes"] for c in placement.copies),
                ops_per_target=placement.ops_per_target())
