"""Fidelity of profiles: do the measured kernel costs add up to the measured model?

For each zoo model, in one run: profile its kernels on the CPU (into a fresh store), time the model
built entirely on the CPU end to end, and compare the sum of the kernel medians (plus the VM's
per-call overhead, also measured) with the end-to-end median. Goal: within 15%. ``fitted_error`` prices the
VM overheads as :class:`autoplace.cost_model.CostTable` does on a full profile: refitted to the end-to-end
records of ``--reference`` (the committed profile), the model's own family left out.

    python experiments/profile_fidelity.py [--size small|base] [--models mlp cnn ...] [--reference DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile

import pandas as pd

import autoplace
from autoplace import zoo
from autoplace.cost_model import CostTable
from autoplace.cost_model.evaluate import family
from autoplace.profile import ProfileStore, profile_models


def predicted_from_records(df: pd.DataFrame, model, kind: str = "llvm", reference=None) -> dict:
    """Kernels + VM overheads (the probes of this run) vs the end-to-end time of this run; with
    ``reference`` (the committed profile's records), also with the overheads :class:`CostTable` refits to its
    end-to-end records, this model's family left out (:func:`autoplace.cost_model.table.fit_vm_overhead`)."""
    units = df[(df.kind == "unit") & (df.status == "ok") & (df.target == kind)]
    units = units.drop_duplicates("key", keep="last").set_index("key")["median_us"]  # the newest record wins
    run = df[(df.kind == "model") & (df.key == model.name) & (df.target == kind)].iloc[-1]
    keys = list(run["unit_keys"])
    kernels_us = float(sum(units[k] for k in keys))
    call = dict(num_args=len(model.main.params), num_inputs=model.num_input,
                output_bytes=autoplace.op_graph(model).nodes["output"]["output_bytes"])

    def overhead_us(table):
        label = next(k for k in table.launch_ if k.startswith(kind))
        return table.invoke_us(label, **call) + len(keys) * table.launch_us(label)

    probed = overhead_us(CostTable(df))  # one run's five models: too few end-to-end records to refit
    measured = float(run["median_us"])
    row = dict(model=model.name, kernels=len(keys), unique_kernels=len(set(keys)), kernels_us=kernels_us,
               call_overhead_us=probed, predicted_us=kernels_us + probed, measured_us=measured,
               error=(kernels_us + probed) / measured - 1.0)
    if reference is not None:
        others = CostTable(reference[~((reference.kind == "model") & (reference.key.map(family) == family(model.name)))])
        if others.overhead_fit_:
            fitted = overhead_us(others)
            row.update(fitted_overhead_us=fitted, fitted_error=(kernels_us + fitted) / measured - 1.0)
    return row


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="small", choices=["small", "base"])
    parser.add_argument("--models", nargs="*", default=list(zoo.ZOO))
    parser.add_argument("--reference", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                            "profiles", "amd-epyc-2c"),
                        help="profile whose end-to-end records refit the VM overheads (this model's family left out)")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        store = ProfileStore(os.path.join(tmp, "profile"))
        models = [zoo.get(m, args.size) for m in args.models]
        profile_models(models, {"cpu": "llvm"}, store, copy_sizes=(4,), progress=False)
        df = store.records()
        reference = None
        if os.path.exists(os.path.join(args.reference, "records.jsonl")):
            reference = ProfileStore(args.reference).records()
        for model in models:
            rows.append(predicted_from_records(df, model, reference=reference))
        meta = store.metadata
    table = pd.DataFrame(rows)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"measured on {meta['hardware_id']} ({meta['cpu_model']}, {meta['cpu_cores']} cores), TVM {meta['tvm_version']}")
    worst = table["error"].abs().max()
    print(f"worst |error|: {worst:.1%} (goal <= 15%) with the probes' overheads", end="")
    if "fitted_error" in table:
        print(f"; {table['fitted_error'].abs().max():.1%} with the overheads refitted to the reference profile")
    else:
        print()
    out = os.path.join(os.path.dirname(__file__), "results", f"profile_fidelity_{args.size}.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(dict(meta=meta, rows=rows), f, indent=1)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
