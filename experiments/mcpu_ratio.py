"""Which ``mcpu`` to compile CPU kernels for: the same model built for two CPUs, timed side by side here.

A bundle for a remote box is compiled here, for the ``mcpu`` its target names (session 27 packed the H200 box's
CPU kernels for ``x86-64-v3``: AVX2, no AVX-512, so that they would run on whatever CPU the box had). Where this
machine has the box's CPU (or one like it), this says what that choice costs: each model is placed all-CPU
(``autoplace.place``) once per ``mcpu``, the outputs are checked against each other, and both builds are timed in
interleaved rounds (round 1 times every build once, then round 2...), so both see the same host.

    python experiments/mcpu_ratio.py [--mcpu x86-64-v3 native] [--models mlp-base bert-base llama-base] [--rounds 5]

``native`` is this machine's CPU (:func:`autoplace.backend.cpu_schedules.host_cpu`). Writes
``experiments/results/<hardware id>/mcpu_ratio.csv``: per model and ``mcpu``, median and min of the rounds'
medians, and each build's median over the first ``mcpu``'s.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import pandas as pd
from results_folder import results_folder

DEFAULT_MODELS = ["mlp-base", "cnn-base", "bert-base", "inception-base", "seed003-base", "llama-base", "gpt2-base",
                  "vit-base", "resnet-base", "mobilenetv2-base", "convnext-base"]


def main(argv=None):
    import autoplace
    from autoplace import zoo
    from autoplace.backend.cpu_schedules import host_cpu

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mcpu", nargs=2, default=["x86-64-v3", "native"])
    parser.add_argument("--models", nargs="+", default=DEFAULT_MODELS)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--sample-ms", type=float, default=20.0, help="calls per sample: about this long")
    args = parser.parse_args(argv)
    mcpus = [host_cpu() if m == "native" else m for m in args.mcpu]
    rows = []
    for spec in args.models:
        model = zoo.parse(spec)  # zoo and architecture-suite names alike
        inputs = model.random_inputs()
        runners = {m: autoplace.place(model, None, None, {"cpu": {"kind": "llvm", "mcpu": m}}).runner for m in mcpus}
        outs = [r(*inputs) for r in runners.values()]
        first = outs[0] if isinstance(outs[0], tuple) else (outs[0],)
        for other in outs[1:]:
            for x, y in zip(first, other if isinstance(other, tuple) else (other,)):
                np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-3, atol=1e-3)
        once = min(float(np.median(r.time_us(inputs, repeat=3))) for r in runners.values())
        number = max(1, int(args.sample_ms * 1e3 / max(1.0, once)))
        medians = {m: [] for m in mcpus}
        for _ in range(args.rounds):
            for m, r in runners.items():
                medians[m].append(float(np.median(r.time_us(inputs, number=number, repeat=args.repeat))))
        base = float(np.median(medians[mcpus[0]]))
        for m in mcpus:
            rows.append(dict(model=spec, mcpu=m, median_us=float(np.median(medians[m])),
                             min_us=float(np.min(medians[m])), rounds=args.rounds,
                             ratio_to_first=float(np.median(medians[m])) / base))
        print(pd.DataFrame(rows[-len(mcpus):]).to_string(index=False, float_format=lambda v: f"{v:.3f}"), flush=True)
    table = pd.DataFrame(rows)
    out_dir = results_folder()
    out = os.path.join(out_dir, "mcpu_ratio.csv")
    table.to_csv(out, index=False)
    wide = table.pivot(index="model", columns="mcpu", values="ratio_to_first")
    print(wide.to_string(float_format=lambda v: f"{v:.3f}"))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
