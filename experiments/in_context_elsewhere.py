"""What pricing a measured kernel by its in-context time in the profile's other models changes (no timing here: the
profile's records).

A kernel runs slower inside a model than alone, even after its timing evicted the L2 (in-model) or its weights
(weights-cold). The cost table prices a measured kernel of a model that runs in-model by its time in context in the
profile's other models that launch it (:attr:`autoplace.cost_model.CostTable.in_context_elsewhere_`), where there
are some. For each model that runs in-model with an end-to-end record, the table is built without that model's
end-to-end records (as for a new user's model that shares kernels with the profile's: ``measure="never"``), its
kernels priced (measured ones only: the models whose kernels are all measured) and summed with the VM's overheads,
twice: by the kernels' own timings (in-model or weights-cold, the table's pricing until session 46) and with the
in-context times of the other models; each against the end-to-end time.

    python experiments/in_context_elsewhere.py amd-epyc-f25m1-2c

Writes ``experiments/results/<hardware id>/in_context_elsewhere.csv``.
"""

from __future__ import annotations

import argparse
import os
import warnings

import pandas as pd

HERE = os.path.dirname(os.path.abspath(__file__))


def priced_without_own_record(records: pd.DataFrame, name: str, kind: str = "llvm") -> dict | None:
    """Model ``name``'s kernels priced by a table of ``records`` less ``name``'s end-to-end records, with and
    without :attr:`~autoplace.cost_model.CostTable.in_context_elsewhere_`; None where a kernel is not measured or
    the model stays in the L2."""
    from autoplace.cost_model import CostTable
    from autoplace.cost_model.evaluate import end_to_end_us

    runs = records[(records["kind"] == "model") & (records["target"] == kind) & (records["status"] == "ok")]
    run = runs[runs["key"] == name].iloc[-1]
    keys = [str(k) for k in run["unit_keys"]]
    units = records[(records["kind"] == "unit") & (records["target"] == kind)].drop_duplicates("key", keep="last")
    units = units.set_index(units["key"].astype(str))
    if not all(k in units.index for k in keys):
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = CostTable(records[~((records["kind"] == "model") & (records["key"] == name))])
    recs = [units.loc[k] for k in keys]
    if not table.runs_in_model(recs, kind) or not all((k, kind) in table.measured_ for k in keys):
        return None
    label = f"{kind}:0"
    call = {c: int(run[c]) for c in ("num_args", "num_inputs", "output_bytes") if c in run and pd.notna(run[c])}
    priced = table.latencies(recs, kind, in_context=False)
    elsewhere = dict(table.in_context_elsewhere_)
    table.in_context_elsewhere_ = {}
    own = table.latencies(recs, kind, in_context=False)
    table.in_context_elsewhere_ = elsewhere
    e2e = float(run["median_us"])
    with_elsewhere = end_to_end_us(table, dict(zip(keys, priced["latency_us"])), keys, label, **call)
    by_own = end_to_end_us(table, dict(zip(keys, own["latency_us"])), keys, label, **call)
    return dict(model=name, launches=len(keys), weights_cold=bool(priced["weights_cold"].all()),
                priced_from_elsewhere=sum((k, kind) in elsewhere for k in keys), e2e_us=e2e,
                own_timings_err=by_own / e2e - 1, in_context_elsewhere_err=with_elsewhere / e2e - 1)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("hardware_id", help="a folder of profiles/")
    parser.add_argument("--kind", default="llvm")
    args = parser.parse_args(argv)
    from results_folder import write_csv

    from autoplace.profile import ProfileStore

    records = ProfileStore(os.path.join(os.path.dirname(HERE), "profiles", args.hardware_id)).records()
    runs = records[(records["kind"] == "model") & (records["target"] == args.kind) & (records["status"] == "ok")]
    rows = [row for name in dict.fromkeys(runs["key"].astype(str))
            if isinstance(runs[runs["key"] == name].iloc[-1]["unit_keys"], list)
            and len(runs[runs["key"] == name].iloc[-1]["unit_keys"]) > 1
            and (row := priced_without_own_record(records, name, args.kind)) is not None]
    out = pd.DataFrame(rows)
    pd.set_option("display.width", 200)
    print(out.round(3).to_string(index=False))
    for column in ("own_timings_err", "in_context_elsewhere_err"):
        print(f"{column}: {int((out[column].abs() <= 0.15).sum())} of {len(out)} within 15%, "
              f"median |error| {out[column].abs().median():.1%}")
    write_csv(out, "in_context_elsewhere.csv", args.hardware_id)


if __name__ == "__main__":
    main()
