"""Run a profiling bundle on a device machine with only the TVM *runtime* (no compiler, no autoplace).

    TVM_USE_RUNTIME_LIB=1 python runner.py BUNDLE_DIR [--out BUNDLE_DIR/records.jsonl]

Reads ``manifest.json``, loads each compiled kernel / VM executable, times it with TVM's
``time_evaluator`` and appends one CRC-checked JSON line per measurement (the format of
``autoplace.profile.store``), tagged with this machine's hardware id. Resumable: records already in
the output file are skipped. This file is copied into every bundle and imports only tvm.runtime,
numpy and the standard library.
"""

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import zlib

import numpy as np


def _crc(record):
    body = json.dumps({k: v for k, v in record.items() if k != "crc"}, sort_keys=True, separators=(",", ":"))
    return f"{zlib.crc32(body.encode()):08x}"


def _slug(text):
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def hardware(tvm_version):
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    gpus = []
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                                  "--format=csv,noheader"], capture_output=True, text=True, timeout=20).stdout
            for line in out.strip().splitlines():
                name, driver, memory = [p.strip() for p in line.split(",")]
                gpus.append({"name": name, "driver": driver, "memory": memory})
        except (OSError, subprocess.SubprocessError):
            pass
    parts = [_slug(cpu)[:40], f"{cores}c"] + [_slug(g["name"])[:30] for g in gpus]
    return {"hardware_id": "-".join(parts), "cpu_model": cpu, "cpu_cores": cores, "machine": platform.machine(),
            "gpus": gpus, "tvm_version": tvm_version, "python": platform.python_version(),
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def device(tvm, kind, index=0):
    return tvm.device("cpu" if kind == "llvm" else kind, index)


def summary(samples_us):
    s = np.asarray(samples_us, dtype=float)
    return dict(median_us=float(np.median(s)), min_us=float(s.min()), max_us=float(s.max()),
                std_us=float(s.std()), samples=len(s))


def args_for(tvm, shapes, dtypes, num_outputs, dev):
    # The same arguments as autoplace.profile.measure._random_args, written again on purpose: this file
    # is copied alone to a device box that has only the TVM runtime (no autoplace, no compiler).
    rng = np.random.default_rng(0)
    out = []
    for i, (shape, dtype) in enumerate(zip(shapes, dtypes)):
        if i >= len(shapes) - num_outputs or not dtype.startswith(("float", "bfloat")):
            value = np.zeros(shape, dtype=dtype)
        else:
            value = rng.standard_normal(shape).astype(dtype)
        out.append(tvm.runtime.tensor(value, dev))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("bundle")
    parser.add_argument("--out")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--min-repeat-ms", type=int, default=20)
    args = parser.parse_args(argv)
    import tvm  # the runtime is enough (TVM_USE_RUNTIME_LIB=1)
    from tvm.runtime import vm as runtime_vm

    with open(os.path.join(args.bundle, "manifest.json")) as f:
        manifest = json.load(f)
    out = args.out or os.path.join(args.bundle, "records.jsonl")
    meta = hardware(getattr(tvm, "__version__", manifest.get("tvm_version", "unknown")))
    with open(os.path.join(os.path.dirname(out) or ".", "metadata.json"), "w") as f:
        json.dump(meta, f, indent=1, sort_keys=True)
    done = set()
    if os.path.exists(out):
        with open(out) as f:
            for line in f:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                if r.get("crc") == _crc(r):
                    done.add((r.get("kind"), r.get("key"), r.get("target")))
    timing = dict(number=1, repeat=args.repeat, min_repeat_ms=args.min_repeat_ms)

    def write(record):
        record = dict(record, schema=1, hardware_id=meta["hardware_id"], tvm_version=meta["tvm_version"],
                      measured_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
        record["crc"] = _crc(record)
        with open(out, "a") as f:
            f.write(json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n")
            f.flush()
            os.fsync(f.fileno())

    items = manifest["units"] + manifest.get("launch", []) + manifest.get("copies", []) + manifest.get("models", [])
    present = {}

    def available(kind):
        if kind not in present:
            try:
                present[kind] = bool(device(tvm, kind).exist)
            except Exception:
                present[kind] = False
            if not present[kind]:
                print(f"no {kind} device on this machine: its items are skipped (not recorded as failures)")
        return present[kind]

    for n, item in enumerate(items, 1):
        record = dict(item["record"])
        kinds = [item["kind"]] if "kind" in item else [k for k, _ in item["devices"]]
        if not all(available(k) for k in kinds):
            continue
        tag = (record["kind"], record["key"], record["target"])
        if tag in done:
            continue
        print(f"[{n}/{len(items)}] {record['kind']} {record['target']} {record.get('func_name', record['key'])}",
              flush=True)
        try:
            lib = tvm.runtime.load_module(os.path.join(args.bundle, item["file"]))
            if record["kind"] == "unit":
                dev = device(tvm, item["kind"])
                call_args = args_for(tvm, item["arg_shapes"], item["arg_dtypes"], item["num_outputs"], dev)
                lib["main"](*call_args)
                dev.sync()
                timer = lib.time_evaluator("main", dev, **timing)
                record.update(status="ok", **summary(np.asarray(timer(*call_args).results) * 1e6))
            else:
                devices = [device(tvm, k, i) for k, i in item["devices"]]
                machine = runtime_vm.VirtualMachine(lib, devices)
                if "arrays" in item:  # a placed model: inputs and weights saved, each with its device
                    arrays = np.load(os.path.join(args.bundle, item["arrays"]))
                    call_args = [tvm.runtime.tensor(arrays[f"arg{i}"], devices[d])
                                 for i, d in enumerate(item["arg_devices"])]
                else:
                    call_args = [tvm.runtime.tensor(np.zeros(s, dtype=d), devices[i]) for s, d, i in item["inputs"]]
                machine["main"](*call_args)
                timer = machine.time_evaluator("main", devices[0], **timing)
                record.update(status="ok", **summary(np.asarray(timer(*call_args).results) * 1e6))
        except Exception as err:
            record.update(status="error", error=str(err).strip().splitlines()[-1][:300] if str(err).strip() else repr(err))
        write(record)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
