"""How steady the weights line is when the model it prices is left out, on two axes (no timing here: the
profile's records).

The cost table prices a model weights-cold when it passes more bytes per call through the caches than a line its
profile's models set (:meth:`autoplace.cost_model.CostTable._fit_weights_line`). A new user's model has no
end-to-end record of its own: the line it meets was set by the others. For each model that sets the line (it runs
in-model, its kernels all timed both ways, it has an end-to-end record), the line is fitted again without that
model's end-to-end record, and the model priced by it: in-model or weights-cold sum plus the VM's overheads,
against its end-to-end time. Two axes:

* ``weights``: the weights every launch reads per call (the line's axis until session 46);
* ``bytes per call``: those plus every launch's output (:func:`autoplace.profile.cache_state.bytes_per_call`):
  what else passes through the caches between two calls' reads of a weight.

The VM's overheads stay those the whole profile fits (its end-to-end records, the left-out one too).

    python experiments/weights_line_loo.py amd-epyc-f25m1-2c

Writes ``experiments/results/<hardware id>/weights_line_loo.csv``.
"""

from __future__ import annotations

import argparse
import os
from unittest import mock

import numpy as np
import pandas as pd

HERE = os.path.dirname(os.path.abspath(__file__))

AXES = ("weights", "bytes per call")


def _axis(name: str):
    """The function of a model's launches (unit records) the line is fitted on."""
    from autoplace.profile import cache_state

    if name == "weights":
        return lambda units: sum(cache_state._launch_bytes(u)[1] for u in units)
    return cache_state.bytes_per_call


def line_without(table, records: pd.DataFrame, model: str | None, axis: str, kind: str = "llvm") -> float:
    """The line (bytes on ``axis``) ``table`` fits from ``records`` less ``model``'s end-to-end records; inf
    where no model is priced better weights-cold."""
    from autoplace.profile import cache_state

    left = records if model is None else records[~((records["kind"] == "model") & (records["key"] == model))]
    saved = dict(table.weights_line_)
    table.weights_line_ = {}
    try:
        with mock.patch.object(cache_state, "bytes_per_call", _axis(axis)):
            table._fit_weights_line(left)
        return float(table.weights_line_.get(kind, np.inf))
    finally:
        table.weights_line_ = saved


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("hardware_id", help="a folder of profiles/")
    args = parser.parse_args(argv)
    from results_folder import write_csv
    from weights_cold_sums import model_sums

    from autoplace.cost_model import CostTable
    from autoplace.profile import ProfileStore

    records = ProfileStore(os.path.join(os.path.dirname(HERE), "profiles", args.hardware_id)).records()
    table = CostTable(records)
    sums = model_sums(table)
    sums = sums[sums["runs_in_model"] & sums["weights_cold_err"].notna()]
    rows = []
    for axis in AXES:
        full = line_without(table, records, None, axis)
        for rec in sums.to_dict("records"):
            x = rec["weights_mb"] if axis == "weights" else rec["bytes_per_call_mb"]
            line = line_without(table, records, rec["model"], axis)
            cold = x * 1e6 > line
            err = rec["weights_cold_err"] if cold else rec["in_model_err"]
            rows.append(dict(axis=axis, model=rec["model"], per_call_mb=x, full_line_mb=full / 1e6,
                             line_without_mb=line / 1e6, priced="weights-cold" if cold else "in-model", err=err,
                             in_model_err=rec["in_model_err"], weights_cold_err=rec["weights_cold_err"]))
    out = pd.DataFrame(rows)
    pd.set_option("display.width", 200)
    for axis, part in out.groupby("axis", sort=False):
        within = int((part["err"].abs() <= 0.15).sum())
        print(f"{axis}: line {part['full_line_mb'].iloc[0]:.2f} MB with every model; without one "
              f"{part['line_without_mb'].min():.2f}-{part['line_without_mb'].max():.2f} MB; priced so, "
              f"{within} of {len(part)} within 15%, median |error| {part['err'].abs().median():.1%}")
        print(part.drop(columns=["axis", "full_line_mb"]).round(3).to_string(index=False))
    write_csv(out, "weights_line_loo.csv", args.hardware_id)


if __name__ == "__main__":
    main()
