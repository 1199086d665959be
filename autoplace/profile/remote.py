"""Profile a machine that cannot install TVM's compiler: build here, measure there, merge back.

``build_bundle`` compiles every unique kernel of the models for the targets (``export_library``:
nvcc is on the CPU machines, so CUDA kernels build here) plus the copy and call-overhead probes,
and writes them with a ``manifest.json`` and ``runner.py`` (:mod:`.remote_runner`) into one folder.
On the device machine ``python runner.py BUNDLE`` needs only the TVM runtime and appends records;
``merge_records`` checks them and adds them to ``profiles/<that machine's hardware id>/``.
The same flow profiles a farm of machines: one bundle, one runner per machine, one merge each.
"""

from __future__ import annotations

import json
import os
import shutil

import tvm

from ..backend.pipeline import build
from ..frontend import load_model
from ..graph import op_graph
from ..targets import TargetSet
from .copies import DEFAULT_COPY_SIZES, copy_module, launch_module
from .job import target_label, unit_record
from .measure import compile_kernel
from .store import ProfileStore, _crc
from .units import extract_units


def build_bundle(models, targets, bundle_dir: str, *, copy_sizes=DEFAULT_COPY_SIZES, log=print) -> dict:
    """Compile kernels and probes for ``targets`` into ``bundle_dir``; returns the manifest."""
    targets = TargetSet(targets)
    os.makedirs(os.path.join(bundle_dir, "lib"), exist_ok=True)
    manifest = dict(tvm_version=tvm.__version__, targets={n: str(targets[n].target) for n in targets},
                    units=[], launch=[], copies=[], models=[])
    seen = set()
    kinds = {}
    for name in targets:
        kinds.setdefault(targets[name].kind, name)
    failed = 0
    for item in models:
        label, model = item if isinstance(item, tuple) else (None, item)
        model = load_model(model, name=label)
        graph = op_graph(model)
        for kind, tname in kinds.items():
            for unit in extract_units(model, targets[tname].target, graph=graph):
                if (unit.key, kind) in seen:
                    continue
                seen.add((unit.key, kind))
                record = unit_record(unit, graph, model.name, kind, {})
                record.pop("measured_at", None)
                file = os.path.join("lib", f"{unit.key}.so")
                try:
                    lib = compile_kernel(unit.prim_func.script(show_meta=True), str(targets[tname].target))
                    lib.export_library(os.path.join(bundle_dir, file))
                except Exception as err:
                    failed += 1
                    record.update(status="error", error=f"compile: {str(err).strip().splitlines()[-1][:300]}")
                    manifest.setdefault("failed", []).append(record)
                    continue
                manifest["units"].append(dict(record=record, file=file, kind=kind, arg_shapes=record["arg_shapes"],
                                              arg_dtypes=record["arg_dtypes"], num_outputs=record["num_outputs"]))
    for name in targets:
        one = TargetSet({name: targets[name].target})
        for calls in (1, 65):
            mod = launch_module(calls, one[name].vdevice)
            mod.update_global_info("vdevice", one.vdevices)
            file = os.path.join("lib", f"launch_{name}_{calls}.so")
            build(mod, fuse=False).export_library(os.path.join(bundle_dir, file))
            manifest["launch"].append(dict(
                record=dict(kind="launch_probe", key=f"calls{calls}", target=target_label(targets[name])),
                file=file, devices=[[one[name].kind, 0]], inputs=[[[1], "float32", 0]]))
    for src in targets:
        for dst in targets:
            if src == dst:
                continue
            label = f"{target_label(targets[src])}->{target_label(targets[dst])}"
            pair = TargetSet({src: targets[src].target, dst: targets[dst].target})  # only the two devices
            for nbytes in copy_sizes:
                mod = copy_module(nbytes, src, dst, pair)
                file = os.path.join("lib", f"copy_{src}_{dst}_{nbytes}.so")
                build(mod).export_library(os.path.join(bundle_dir, file))
                n = max(1, nbytes // 4)
                manifest["copies"].append(dict(
                    record=dict(kind="copy", key=str(n * 4), target=label, nbytes=n * 4), file=file,
                    devices=[[pair[t].kind, pair[t].vdevice_id] for t in pair],
                    inputs=[[[n], "float32", pair[src].index]]))
    shutil.copy(os.path.join(os.path.dirname(__file__), "remote_runner.py"), os.path.join(bundle_dir, "runner.py"))
    with open(os.path.join(bundle_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    log(f"bundle {bundle_dir}: {len(manifest['units'])} kernels ({failed} failed to compile), "
        f"{len(manifest['copies'])} copy probes, {len(manifest['launch'])} call-overhead probes")
    return manifest


def merge_records(records_path: str, profiles_root: str = "profiles", *, log=print) -> str:
    """Check the runner's records (CRC), derive copy fits and call overhead, and append them to
    ``profiles_root/<hardware id>/``; returns that folder. Already merged records are skipped."""
    import numpy as np

    from .copies import fit_copy_cost

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
            if record.get("crc") != _crc(record):
                bad += 1
                continue
            good.append(record)
    store = ProfileStore(os.path.join(profiles_root, meta["hardware_id"]), metadata=meta)
    done = store.done()
    added = 0
    probes: dict = {}
    copies: dict = {}
    for record in good:
        if record["kind"] == "launch_probe":
            if record.get("status") != "ok":
                continue
            probes.setdefault(record["target"], {})[record["key"]] = record
            continue
        if record["kind"] == "copy" and record.get("status") == "ok":
            copies.setdefault(record["target"], []).append(record)
        if (record["kind"], record["key"], record["target"]) in done:
            continue
        record = {k: v for k, v in record.items() if k != "crc"}
        store.append(record)
        added += 1
    for label, pair in probes.items():
        if ("launch", "vm_call", label) in done or not {"calls1", "calls65"} <= set(pair):
            continue
        per_call = (pair["calls65"]["median_us"] - pair["calls1"]["median_us"]) / 64
        store.append(dict(kind="launch", key="vm_call", target=label, status="ok", median_us=max(per_call, 0.0),
                          single_call_us=pair["calls1"]["median_us"], measured_at=pair["calls1"]["measured_at"]))
        added += 1
    for label, rows in copies.items():
        if ("copy_fit", "fit", label) in done:
            continue
        alpha, per_byte = fit_copy_cost([r["nbytes"] for r in rows], [r["median_us"] for r in rows])
        store.append(dict(kind="copy_fit", key="fit", target=label, alpha_us=alpha, us_per_byte=per_byte,
                          bandwidth_gb_s=(1e-3 / per_byte) if per_byte > 0 else None, status="ok",
                          measured_at=max(r["measured_at"] for r in rows)))
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

    Each plan becomes a VM executable, its inputs (seeded random) and weights in an ``.npz``, and a
    manifest item; ``runner.py`` times ``main`` with every argument on its device and writes
    ``kind="plan"`` records (``key`` = ``"<model>:<plan>"``).
    """
    import numpy as np

    os.makedirs(os.path.join(bundle_dir, "lib"), exist_ok=True)
    path = os.path.join(bundle_dir, "manifest.json")
    manifest = dict(tvm_version=tvm.__version__, units=[])
    if os.path.exists(path):
        with open(path) as f:
            manifest = json.load(f)
    manifest.setdefault("models", [])
    for (model_name, label), placement in plans.items():
        safe = "".join(c if c.isalnum() else "_" for c in f"{model_name}_{label}")
        lib, arrays = os.path.join("lib", f"plan_{safe}.so"), os.path.join("lib", f"plan_{safe}.npz")
        build(placement.mod, fuse=placement.fuse).export_library(os.path.join(bundle_dir, lib))
        targets = placement.targets
        inputs = placement.model.random_inputs(seed=seed)
        values = list(inputs) + list(placement.params)
        where = list(placement.annotated.input_targets) + list(placement.annotated.param_targets)
        np.savez(os.path.join(bundle_dir, arrays), **{f"arg{i}": np.asarray(v) for i, v in enumerate(values)})
        manifest["models"].append(dict(
            record=dict(kind="plan", key=f"{model_name}:{label}", target=",".join(target_label(targets[t]) for t in targets),
                        copies=len(placement.copies), copy_bytes=sum(c["nbytes"] for c in placement.copies),
                        ops_per_target=placement.ops_per_target()),
            file=lib, arrays=arrays, devices=[[targets[t].kind, targets[t].vdevice_id] for t in targets],
            arg_devices=[targets[t].index for t in where]))
    shutil.copy(os.path.join(os.path.dirname(__file__), "remote_runner.py"), os.path.join(bundle_dir, "runner.py"))
    with open(path, "w") as f:
        json.dump(manifest, f, indent=1)
    log(f"bundle {bundle_dir}: {len(plans)} placed models for end-to-end timing")
    return manifest
