"""How much memory a plan takes on each device: the solver's count against what TVM's build of the plan allocates.

The placement problem caps memory per device (``optimize(..., memory_bytes=...)``). Until session 30 it counted every
node's weights and output for the whole run (no reuse of a dead tensor's storage); it now counts the weights placed
on a device, the inputs (held by the caller), and the activations live there at the busiest point of the program
(each tensor from its producer to its last consumer). This compares, per model and device:

* ``old_count_bytes``: the count before session 30 (every node present on the device: weights + output);
* ``count_bytes``: the solver's count now (:meth:`autoplace.solve.PlacementProblem.memory_use`);
* ``built_bytes``: what the build allocates there (:meth:`autoplace.place.Placement.memory_bytes`: weights and
  inputs uploaded there, the storage TVM's ``StaticPlanBlockMemory`` plans, each copy's buffer, the outputs).

for each model all on one CPU device and split over two (each capped at 60% of what all-on-one takes, so the solver
must split the weights and copy activations between them). No timing: the numbers are the same on every machine.

    python experiments/memory_count.py [--models cnn-base bert-base ...]

Writes ``experiments/results/memory_count.csv`` and ``memory_count.md``.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import pandas as pd
from cost_model_eval import markdown_table  # experiments/cost_model_eval.py, beside this script

import autoplace
from autoplace import zoo

TWO = {"cpu0": "llvm", "cpu1": "llvm"}
DEFAULT_MODELS = ("mlp", "cnn", "bert", "inception", "mlp-base", "cnn-base", "bert-base", "inception-base",
                  "resnet-base", "vit-base", "gpt2-base", "llama-base", "t5-encoder-base")
#: Share of the all-on-cpu0 memory each device may hold in the split plan.
SPLIT_CAP = 0.6


def old_count(problem, target_of) -> np.ndarray:
    """The count before session 30: ``weight_bytes + output_bytes`` of every node placed on a device or with one of
    its tensors copied there."""
    k = problem.n_targets
    present = np.zeros((problem.n_nodes, k), dtype=bool)
    present[np.arange(problem.n_nodes), target_of] = True
    src = target_of[problem.tensor_producer[problem.use_tensor]]
    dst = target_of[problem.use_consumer]
    copied = src != dst
    present[problem.tensor_producer[problem.use_tensor[copied]], dst[copied]] = True
    return (problem.weight_bytes + problem.output_bytes).astype(np.float64) @ present


def rows_of(name: str, plan_name: str, result) -> list[dict]:
    p = result.problem
    target_of = p.assignment_index(result.plan.assignment)
    counted = p.memory_use(target_of)
    old = old_count(p, target_of)
    built = result.placement.memory_bytes()
    return [dict(model=name, plan=plan_name, device=t, kernels_here=result.placement.ops_per_target()[t],
                 old_count_bytes=int(old[d]), count_bytes=int(counted[d]), built_bytes=int(built[t]),
                 count_vs_built=counted[d] / built[t] - 1 if built[t] else np.nan,
                 old_vs_built=old[d] / built[t] - 1 if built[t] else np.nan)
            for d, t in enumerate(p.targets) if built[t] or counted[d]]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", default=list(DEFAULT_MODELS))
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    args = parser.parse_args(argv)
    rows = []
    for name in args.models:
        model = zoo.parse(name)
        whole = autoplace.optimize(model, None, TWO, method="all:cpu0", measure="never", progress=False)
        rows += rows_of(name, "all:cpu0", whole)
        cap = int(SPLIT_CAP * whole.plan.memory_bytes_by_target["cpu0"])
        try:
            split = autoplace.optimize(model, None, TWO, measure="never", progress=False,
                                       memory_bytes={"cpu0": cap, "cpu1": cap})
        except autoplace.errors.InfeasiblePlacementError as err:
            print(f"{name}: no split fits {SPLIT_CAP:.0%} of all-on-one on each device ({err})")
        else:
            rows += rows_of(name, f"both capped at {SPLIT_CAP:.0%}", split)
        for r in rows[-4:]:
            if r["model"] == name:
                print(f"{name:16s} {r['plan']:18s} {r['device']:5s} old {r['old_count_bytes'] / 1e6:8.3f} MB  "
                      f"count {r['count_bytes'] / 1e6:8.3f} MB  built {r['built_bytes'] / 1e6:8.3f} MB  "
                      f"({r['count_vs_built']:+.1%}; old {r['old_vs_built']:+.1%})", flush=True)
    table = pd.DataFrame(rows)
    os.makedirs(args.out, exist_ok=True)
    table.to_csv(os.path.join(args.out, "memory_count.csv"), index=False)
    show = table.copy()
    for c in ("old_count_bytes", "count_bytes", "built_bytes"):
        show[c.replace("_bytes", "_MB")] = (show.pop(c) / 1e6).round(3)
    for c in ("count_vs_built", "old_vs_built"):
        show[c] = show[c].map(lambda v: f"{v:+.1%}")
    with open(os.path.join(args.out, "memory_count.md"), "w") as f:
        f.write("### Memory per device: the solver's count against what the build allocates\n\n"
                "`python experiments/memory_count.py` (no timing; TVM 0.27's `StaticPlanBlockMemory`).\n\n")
        f.write(markdown_table(show))
        f.write("\n")
    print(f"wrote {os.path.join(args.out, 'memory_count.csv')}")


if __name__ == "__main__":
    main()
