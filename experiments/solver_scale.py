"""How the exact placement solvers scale: a 10,000-node layered random DAG on 2 and 3 targets.

Run as ``python experiments/solver_scale.py`` (``--help`` for options). Prints one row per
solve: targets, nodes, edges, method, status, objective, proven bound, gap, and wall time of
``solve`` (ILP/min-cut model building included; reading the graph into a problem is shown
apart as ``problem_s``).

Targets to meet on a 2-core machine: proven optimal on 2 targets in under 2 s; a proven gap
of at most 1 % on 3 targets in under 10 s.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from synthetic import default_copy_cost, layered_dag  # experiments/synthetic.py, beside this script

from autoplace.solve import PlacementProblem, solve


def run_case(targets, n_layers, width, seed, time_limit_s, relative_gap, memory_fraction=None):
    g = layered_dag(n_layers, width, targets=targets, seed=seed)
    t = time.perf_counter()
    memory = None
    problem = PlacementProblem.from_graph(g, default_copy_cost(targets))
    if memory_fraction is not None:  # a fraction of what every node on that target would hold there
        memory = {tt: int(memory_fraction * problem.memory_use(np.full(problem.n_nodes, d))[d])
                  for d, tt in enumerate(problem.targets) if tt in targets[1:]}
        problem = PlacementProblem.from_graph(g, default_copy_cost(targets), memory_bytes=memory)
    problem_s = time.perf_counter() - t
    plan = solve(problem, time_limit_s=time_limit_s, relative_gap=relative_gap)
    return {
        "targets": len(targets),
        "nodes": g.number_of_nodes(),
        "edges": g.number_of_edges(),
        "caps": "yes" if memory else "no",
        "rel_gap_tol": relative_gap,
        "method": plan.method,
        "status": plan.status,
        "objective_us": round(plan.objective_us, 3),
        "bound_us": round(plan.bound_us, 3),
        "gap": plan.gap,
        "solve_s": round(plan.solve_time_s, 3),
        "problem_s": round(problem_s, 3),
        "phases": plan.info.get("phases"),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=100)
    ap.add_argument("--width", type=int, default=100)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--json", help="also write the rows (with per-phase detail) to this file")
    ap.add_argument("--phases", action="store_true", help="print the ILP phases of each solve")
    ap.add_argument(
        "--caps",
        type=float,
        metavar="FRACTION",
        help="also solve with each accelerator's memory capped at FRACTION of what all nodes would hold on it",
    )
    args = ap.parse_args(argv)

    cases = [
        # (targets, relative gap tolerance, memory cap fraction)
        (("cpu", "gpu0"), 1e-4, None),
        (("cpu", "gpu0", "gpu1"), 1e-2, None),
        (("cpu", "gpu0", "gpu1"), 1e-4, None),
    ]
    if args.caps is not None:
        cases += [(("cpu", "gpu0"), 1e-2, args.caps), (("cpu", "gpu0", "gpu1"), 1e-2, args.caps)]
    rows = []
    header = (
        f"{'targets':>7} {'nodes':>6} {'edges':>6} {'caps':>4} {'tol':>6} {'method':>12} {'status':>9} "
        f"{'objective_us':>13} {'bound_us':>13} {'gap':>8} {'solve_s':>8} {'problem_s':>9}"
    )
    print(header)
    for seed in args.seeds:
        for targets, tol, mem in cases:
            r = run_case(list(targets), args.layers, args.width, seed, args.time_limit, tol, mem)
            r["seed"] = seed
            rows.append(r)
            print(
                f"{r['targets']:>7} {r['nodes']:>6} {r['edges']:>6} {r['caps']:>4} {tol:>6.0e} {r['method']:>12} "
                f"{r['status']:>9} {r['objective_us']:>13.1f} {r['bound_us']:>13.1f} {r['gap']:>8.4%} "
                f"{r['solve_s']:>8.2f} {r['problem_s']:>9.2f}",
                flush=True,
            )
            if args.phases and r.get("phases"):
                for ph in r["phases"]:
                    print("        ", ph)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
