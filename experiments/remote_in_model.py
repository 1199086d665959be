"""Do a bundle's runner and a stock TVM RPC server time CPU kernels in-model as the local profiler does?

``--via bundle`` (issue 14's CPU side) builds a bundle of a few zoo models for this machine's CPU
(``autoplace.profile.remote.build_bundle``: kernels, the streaming kernel for the L2 eviction, ``runner.py``), runs
its runner here in a subprocess (the runner imports no autoplace) and merges its records into a scratch folder.
``--via rpc`` starts a TVM RPC tracker and one server (``python -m tvm.exec.rpc_server``) here and profiles the
models over RPC into a scratch folder (``autoplace.profile.rpc.profile_over_rpc``: the server times the CPU
kernels in-model with the preprocessing library each session loads, ``autoplace/profile/in_model_preproc.cc``).
Either way the records are compared, kernel by kernel, with this machine's committed profile: warm and in-model
medians, and the in-model / warm ratio of each (what the eviction costs the kernel), which drifts of the host
between the two timings leave alone.

    python experiments/remote_in_model.py [--via bundle|rpc] [--models bert-base mlp-base seed003-base cnn] [--rounds 3]

Writes ``experiments/results/<hardware id>/bundle_in_model.csv`` or ``rpc_in_model.csv``.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np
import pandas as pd
from results_folder import results_folder


def newest_units(records: pd.DataFrame) -> pd.DataFrame:
    units = records[(records["kind"] == "unit") & (records["status"] == "ok")]
    return units.drop_duplicates("key", keep="last").set_index("key")


def via_bundle(models, rounds: int, scratch: str) -> str:
    """Profile ``models`` with a bundle run here; returns the scratch profile folder."""
    from autoplace import zoo
    from autoplace.profile.remote import build_bundle, merge_records

    bundle = os.path.join(scratch, "bundle")
    build_bundle([zoo.parse(m) for m in models], {"cpu": "llvm"}, bundle, copy_sizes=(), rounds=rounds)
    subprocess.run([sys.executable, os.path.join(bundle, "runner.py"), bundle], check=True, stdout=subprocess.DEVNULL)
    return merge_records(os.path.join(bundle, "records.jsonl"), os.path.join(scratch, "profiles"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def via_rpc(models, rounds: int, scratch: str) -> str:
    """Profile ``models`` over a tracker and one stock RPC server started here; returns the scratch folder."""
    from autoplace import zoo
    from autoplace.backend.cpu_threads import restore_usable_cpus
    from autoplace.profile import ProfileStore
    from autoplace.profile.rpc import RPCConfig, profile_over_rpc

    restore_usable_cpus()  # the servers get the CPUs a shell would give them
    tracker, server = free_port(), free_port()
    procs = []
    try:
        procs.append(subprocess.Popen([sys.executable, "-m", "tvm.exec.rpc_tracker", "--host", "127.0.0.1",
                                       "--port", str(tracker), "--port-end", str(tracker + 1)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(3)
        procs.append(subprocess.Popen([sys.executable, "-m", "tvm.exec.rpc_server", "--host", "127.0.0.1",
                                       "--port", str(server), "--port-end", str(server + 1),
                                       "--tracker", f"127.0.0.1:{tracker}", "--key", "here"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=scratch))
        folder = os.path.join(scratch, "rpc")
        profile_over_rpc([zoo.parse(m) for m in models], {"cpu": "llvm"},
                         RPCConfig.create(f"127.0.0.1:{tracker}", "here", request_timeout_s=60),
                         store=ProfileStore(folder), copies=False, end_to_end=False, rounds=rounds)
        return folder
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def main(argv=None):
    from autoplace.profile import ProfileStore
    from autoplace.profile.hardware import hardware_metadata

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--via", choices=("bundle", "rpc"), default="bundle")
    parser.add_argument("--models", nargs="+", default=["bert-base", "mlp-base", "seed003-base", "cnn"])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    hw = hardware_metadata()["hardware_id"]
    here = os.path.dirname(os.path.abspath(__file__))
    local = newest_units(ProfileStore(os.path.join(here, "..", "profiles", hw)).records())
    with tempfile.TemporaryDirectory() as scratch:
        folder = (via_bundle if args.via == "bundle" else via_rpc)(args.models, args.rounds, scratch)
        remote = newest_units(ProfileStore(folder).records())
    timed = [k for k in remote.index if k in local.index and pd.notna(local.loc[k].get("in_model_median_us"))]
    df = pd.DataFrame(dict(model=local.loc[timed, "model"].to_numpy(), func_name=remote.loc[timed, "func_name"].to_numpy(),
                           warm_local_us=local.loc[timed, "median_us"].to_numpy(),
                           warm_remote_us=remote.loc[timed, "median_us"].to_numpy(),
                           in_model_local_us=local.loc[timed, "in_model_median_us"].to_numpy(),
                           in_model_remote_us=remote.loc[timed, "in_model_median_us"].to_numpy()))
    df["eviction_cost_local"] = df["in_model_local_us"] / df["warm_local_us"]
    df["eviction_cost_remote"] = df["in_model_remote_us"] / df["warm_remote_us"]
    df = df.sort_values("warm_local_us").reset_index(drop=True)
    out = os.path.join(results_folder(), f"{args.via}_in_model.csv")
    df.to_csv(out, index=False)
    pd.set_option("display.width", 220)
    print(df.to_string(float_format=lambda x: f"{x:.3f}"))
    for name, part in (("all", df), ("warm >= 20 us", df[df["warm_local_us"] >= 20])):
        r_warm = part["warm_remote_us"] / part["warm_local_us"]
        r_cold = part["in_model_remote_us"] / part["in_model_local_us"]
        r_cost = part["eviction_cost_remote"] / part["eviction_cost_local"]
        print(f"{name}: {len(part)} kernels; {args.via} / local, median [10%, 90%]: warm {r_warm.median():.2f} "
              f"{np.round(r_warm.quantile([.1, .9]).to_numpy(), 2)}, in-model {r_cold.median():.2f} "
              f"{np.round(r_cold.quantile([.1, .9]).to_numpy(), 2)}, eviction cost {r_cost.median():.2f} "
              f"{np.round(r_cost.quantile([.1, .9]).to_numpy(), 2)}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
