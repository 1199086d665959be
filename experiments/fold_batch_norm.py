"""BatchNorm folded into the convolution before it, against BatchNorm as its own kernel, whole models timed.

``autoplace.frontend.fold_batch_norms`` (run by every import) rewrites ``conv2d -> batch_norm`` (inference) into a
convolution with scaled weights plus a bias, with TVM's ``FoldBatchnormToConv2D``; the new weights are computed
once at import. This imports each model twice (folding off: the import of sessions before 12), checks both builds
compute the same, counts their kernels and times them whole in interleaved rounds (~20 ms per sample).

    python experiments/fold_batch_norm.py [--models cnn-base resnet-base ...] [--rounds 7]

Writes ``experiments/results/<hardware id>/fold_batch_norm.csv``.
"""

from __future__ import annotations

import argparse
import os
from unittest import mock

import numpy as np
import pandas as pd
from results_folder import results_folder

DEFAULT_MODELS = ("cnn", "resnet", "mobilenetv2", "cnn-base", "resnet-base", "mobilenetv2-base")


def compare(specs, rounds: int) -> pd.DataFrame:
    import autoplace
    from autoplace import frontend, zoo
    from autoplace.profile.units import extract_units

    rows = []
    for spec in specs:
        builds = {}
        for folded in (False, True):
            if folded:
                model = zoo.parse(spec)
            else:
                with mock.patch.object(frontend, "fold_batch_norms", lambda main, num_input, weights: main):
                    model = zoo.parse(spec)
            runner = autoplace.place(model, None, None, {"cpu": "llvm"}).runner
            builds[folded] = (model, runner, len(extract_units(model, "llvm")))
        inputs = builds[False][0].random_inputs()
        a, b = builds[False][1](*inputs), builds[True][1](*inputs)
        for x, y in zip(a if isinstance(a, tuple) else (a,), b if isinstance(b, tuple) else (b,)):
            scale = max(1.0, float(np.abs(x).max()))
            np.testing.assert_allclose(y / scale, x / scale, rtol=1e-3, atol=1e-4)
        number = max(1, int(20_000 / max(1.0, float(np.median(builds[False][1].time_us(inputs, repeat=3))))))
        times = {n: [] for n in builds}
        for _ in range(rounds):
            for folded, (_, runner, _) in builds.items():
                times[folded].append(float(np.median(runner.time_us(inputs, number=number, repeat=5))))
        row = dict(model=spec, kernels_unfolded=builds[False][2], kernels_folded=builds[True][2],
                   unfolded_median_us=float(np.median(times[False])), unfolded_min_us=float(np.min(times[False])),
                   folded_median_us=float(np.median(times[True])), folded_min_us=float(np.min(times[True])))
        row["ratio_of_medians"] = row["folded_median_us"] / row["unfolded_median_us"]
        row["ratio_of_mins"] = row["folded_min_us"] / row["unfolded_min_us"]
        print(f"{spec}: {row['kernels_unfolded']} -> {row['kernels_folded']} kernels, "
              f"{row['unfolded_median_us']:.1f} -> {row['folded_median_us']:.1f} us (median), "
              f"x{row['ratio_of_medians']:.3f} (mins x{row['ratio_of_mins']:.3f})", flush=True)
        rows.append(row)
    return pd.DataFrame(rows)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", default=list(DEFAULT_MODELS))
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    out_dir = results_folder()
    table = compare(args.models, args.rounds)
    path = os.path.join(out_dir, "fold_batch_norm.csv")
    table.to_csv(path, index=False)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
