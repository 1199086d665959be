"""The main job (``./run demo``): place a bundled zoo model from the committed profiles, build it,
run it, check its numbers, measure it side by side with the baselines and write what it made."""

from __future__ import annotations

import numbers
import os
import time

from .comparison import compare
from .errors import CostError
from .optimizer import optimize
from .profile import find_profiles
from .targets import TargetSet


def _gpu_profile() -> list | None:
    try:
        return find_profiles({"cuda", "llvm"})
    except CostError:  # no profile measures CUDA
        return None


def demo_targets() -> tuple[dict, str, list | None]:
    """Two CPU devices (they run anywhere); a GPU too where this machine has one and a GPU profile exists.

    Returns the targets to build and run, a sentence saying why, and the GPU profile folders to plan
    from (without running) when this machine has no GPU but a committed GPU profile exists.
    """
    targets = {"cpu0": "llvm", "cpu1": "llvm"}
    note = "two CPU vdevices (llvm:0, llvm:1): every plan builds and runs on this machine"
    folders = _gpu_profile()
    if not TargetSet({"gpu": "cuda"}).unavailable():
        if folders:
            targets["gpu"] = "cuda"
            return targets, note + "; a CUDA GPU is here and profiled, so it is a target too", None
        return targets, note + ("; a CUDA GPU is here but has no profile: run `autoplace profile --zoo cnn "
                                "--targets '{\"cpu\": \"llvm\", \"gpu\": \"cuda\"}'` to use it"), None
    if folders:
        names = ", ".join(os.path.basename(f) for f in folders)
        return targets, note + f"; no GPU here, but a GPU profile exists ({names}): the demo also plans for it", folders
    return targets, note + "; no GPU here and no committed GPU profile, so the demo plans for CPU devices only", None


#: Canary slowdown from which the demo says its timings are inflated by other programs on the host.
BUSY_HOST_SLOWDOWN = 1.3
#: Measured / predicted latency of autoplace's plan from which the demo checks the host's speed.
GAP_WORTH_EXPLAINING = 1.25


def host_speed_note(folder: str | None = None, readings: int = 10) -> str:
    """A line saying how much slower than its fastest the host runs now, by the speed canary against the fastest
    canary this machine's profile (``folder``, default ``profiles/<hardware id>``) recorded; "" when it runs within
    :data:`BUSY_HOST_SLOWDOWN` of it, or no profile of this machine has a canary."""
    import numpy as np

    from .profile.host_speed import HostSpeed, best_canary_us
    from .profile.store import ProfileStore, default_profile_dir

    folder = folder or default_profile_dir()
    if not os.path.isfile(os.path.join(folder, "records.jsonl")):
        return ""
    records = ProfileStore(folder).records()
    if best_canary_us(records) is None:
        return ""
    speed = HostSpeed.for_records(records)
    slowdowns, apart = [], 0
    for _ in range(readings):
        slowdowns.append(speed.slowdown())
        apart += speed.apart
    if apart > readings // 2:
        return (f"  the host's cores run apart now (a kernel reading what another core wrote takes "
                f"{float(np.median(slowdowns)):.1f}x its fastest, against {folder}): whole models ran 1.3-1.6x slower "
                "so on a 2-vCPU AMD Zen 5, which can make the timings above read high; such phases last seconds to "
                "minutes: run the demo again to compare them with the prediction")
    slowdown = float(np.median(slowdowns))
    if slowdown < BUSY_HOST_SLOWDOWN:
        return ""
    return (f"  the host runs {slowdown:.1f}x slower than its fastest now (speed canary against {folder}): other "
            "programs share its cores, which can make the timings above read high (a kernel on two threads waits for a "
            "busy core); run the demo on an idle machine to compare them with the prediction")


def run_demo(model: str = "cnn-base", out_dir: str = "out", rounds: int = 5) -> int:
    from . import zoo
    from .cli import check_output_dir
    from .errors import AutoplaceError
    from .show import plot_compare, table_text

    # Options first: a bad one must not cost a minute of building and timing.
    if isinstance(rounds, bool) or not isinstance(rounds, numbers.Integral) or rounds < 1:
        raise AutoplaceError(f"rounds={rounds!r}: the demo times every plan in that many rounds, so it must be an "
                             "integer >= 1 (default 5; e.g. --rounds 5)")
    zoo.check_spec(model)
    check_output_dir(out_dir, "out_dir (--out)")
    started = time.perf_counter()
    targets, note, gpu_folders = demo_targets()
    print(f"targets: {note}")
    m = zoo.parse(model)
    print(f"model: {m.name} ({sum(1 for _ in m.input_specs())} input(s), {m.weight_nbytes / 1e6:.2f} MB of weights)")
    free = optimize(m, None, targets)
    from .solve import InfeasiblePlacementError, solve

    footprint = float(solve(free.problem, "all:cpu0").memory_bytes_by_target["cpu0"])
    cap = int(0.5 * footprint)
    print(f"\n1. Unconstrained optimum: {free}")
    print(f"\n2. Now cpu0 may hold only half of the model ({cap / 1e6:.2f} MB of {footprint / 1e6:.2f} MB that all-on-cpu0 holds: weights, inputs, the activations live at once):"
          " all-on-cpu0 is ruled out, and the solver must find the cheapest placement that fits.")

    try:
        result = optimize(m, None, targets, memory_bytes={"cpu0": cap})
    except InfeasiblePlacementError as err:  # e.g. the model's own inputs and outputs exceed the cap
        print(f"   no placement fits that cap ({err}); continuing without it.")
        result = free
    print(result)
    print(result.summary().to_string(float_format=lambda v: f"{v:.1f}"))
    manual = {"seed 002 (conv2d/matmul on cpu1)": {"relax.nn.conv2d": "cpu1", "relax.matmul": "cpu1"}}
    print(f"\n3. Building and timing every plan side by side ({rounds} interleaved rounds; the same numbers are checked)...")
    table = compare(m, None, targets, result=result, manual=manual, rounds=rounds)
    print(table_text(table))
    if table.attrs.get("host_speed"):  # rounds read slow are left out of the medians where calm ones exist
        print("  " + table.attrs["host_speed"])
    paths = result.save(out_dir)
    if gpu_folders:
        gpu_targets = {"cpu": "llvm", "gpu": "cuda"}
        # priced by that machine's profile alone: measure="auto" would time this machine's CPU for its CPU side
        planned = optimize(m, None, gpu_targets, profile_dir=gpu_folders[0] if len(gpu_folders) == 1 else None,
                           measure="never")
        print(f"\n4. Planned for the profiled CPU+GPU machine ({os.path.basename(gpu_folders[0])}), from its "
              f"committed profile; not run here (no GPU on this machine):\n{planned}")
        print(planned.summary().to_string(float_format=lambda v: f"{v:.1f}"))
        gpu_paths = planned.save(os.path.join(out_dir, "gpu_plan"))
        print(f"   wrote {gpu_paths['module']} and {gpu_paths['picture']}")
    table.to_csv(os.path.join(out_dir, f"{m.name}.compare.csv"))
    plot_compare(table, os.path.join(out_dir, f"{m.name}.compare.png"))
    measured = table["measured_median_us"].dropna()
    fits = ~table["status"].astype(str).str.contains("over the memory cap|infeasible")
    feasible = measured[fits.reindex(measured.index)].drop(index="autoplace")
    best = feasible.idxmin()
    print(f"\nautoplace: {measured['autoplace']:.1f} us measured (predicted {result.predicted_us:.1f} us); "
          f"best baseline that fits the cap: {best} {feasible[best]:.1f} us -> ratio "
          f"{measured['autoplace'] / feasible[best]:.3f} (medians of the same run; plans over the cap are shown "
          "for reference only)")
    if table.loc[best, "same_placement_as"] == "autoplace":
        print(f"  {best} is autoplace's own placement (every op on the same target, the same build): the gap "
              "between the two is the host's noise")
    if measured["autoplace"] > GAP_WORTH_EXPLAINING * result.predicted_us:  # a gap the host's load may explain
        note = host_speed_note()
        if note:
            print(note)
    print("\nwrote:")
    for what, path in paths.items():
        print(f"  {what}: {path}")
    print(f"  comparison: {os.path.join(out_dir, m.name + '.compare.csv')} and .compare.png")
    print(f"\ndone in {time.perf_counter() - started:.0f} s. Try next:\n"
          f"  autoplace optimize --zoo bert --targets '{{\"cpu0\": \"llvm\", \"cpu1\": \"llvm\"}}' --memory cpu0=1e6\n"
          f"  autoplace show {paths['result']}\n"
          f"  autoplace profile --zoo mlp --targets '{{\"cpu\": \"llvm\"}}'   # measure your own machine\n"
          f"  in Python: result = autoplace.optimize(mod, params, targets); result.run(x); result.mod.show()")
    return 0
