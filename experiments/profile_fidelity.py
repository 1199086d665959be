"""Fidelity of profiles: do the measured kernel costs add up to the measured model?

For each zoo model, in one run: profile its kernels on the CPU (into a fresh store), time the model
built entirely on the CPU end to end, and compare the sum of the kernel medians (plus the VM's
per-call overhead, also measured) with the end-to-end median. Goal: within 15%.

    python experiments/profile_fidelity.py [--size small|base] [--models mlp cnn ...]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile

import pandas as pd

import autoplace
from autoplace import zoo
from autoplace.profile import ProfileStore, profile_models


def predicted_from_records(df: pd.DataFrame, model_name: str, kind: str = "llvm") -> dict:
    units = df[(df.kind == "unit") & (df.status == "ok") & (df.target == kind)]
    units = units.drop_duplicates("key", keep="last").set_index("key")["median_us"]  # the newest record wins
    model = df[(df.kind == "model") & (df.key == model_name) & (df.target == kind)].iloc[-1]
    launch = df[(df.kind == "launch") & (df.target.str.startswith(kind))].iloc[-1]
    keys = list(model["unit_keys"])
    kernels_us = float(sum(units[k] for k in keys))
    overhead_us = len(keys) * float(launch["median_us"])
    invoke_us = max(0.0, float(launch["single_call_us"]) - float(launch["median_us"]))
    # Arguments beyond the first and the returned tensor's allocation (where the profile measured them).
    model_obj = zoo.parse(model_name)
    num_args = len(model_obj.main.params)
    output_bytes = autoplace.op_graph(model_obj).nodes["output"]["output_bytes"]
    if "per_arg_us" in launch and pd.notna(launch["per_arg_us"]):
        invoke_us += float(launch["per_arg_us"]) * max(0, num_args - 1)
    if "alloc_us_per_byte" in launch and pd.notna(launch["alloc_us_per_byte"]):
        invoke_us += float(launch["alloc_us_per_byte"]) * output_bytes
    predicted = kernels_us + overhead_us + invoke_us
    return dict(model=model_name, kernels=len(keys), unique_kernels=len(set(keys)), kernels_us=kernels_us,
                call_overhead_us=overhead_us + invoke_us, predicted_us=predicted,
                measured_us=float(model["median_us"]), error=predicted / float(model["median_us"]) - 1.0)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="small", choices=["small", "base"])
    parser.add_argument("--models", nargs="*", default=list(zoo.ZOO))
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        store = ProfileStore(os.path.join(tmp, "profile"))
        models = [zoo.get(m, args.size) for m in args.models]
        profile_models(models, {"cpu": "llvm"}, store, copy_sizes=(4,), progress=False)
        df = store.records()
        for model in models:
            rows.append(predicted_from_records(df, model.name))
        meta = store.metadata
    table = pd.DataFrame(rows)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"measured on {meta['hardware_id']} ({meta['cpu_model']}, {meta['cpu_cores']} cores), TVM {meta['tvm_version']}")
    worst = table["error"].abs().max()
    print(f"worst |error|: {worst:.1%} (goal <= 15%)")
    out = os.path.join(os.path.dirname(__file__), "results", f"profile_fidelity_{args.size}.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(dict(meta=meta, rows=rows), f, indent=1)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
