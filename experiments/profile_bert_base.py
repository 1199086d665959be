"""How long profiling a 12-layer BERT-base encoder (hidden 768, seq 128) takes on this machine.

Profiles every unique kernel of the model on the CPU into a fresh store (copies and end-to-end timing
off: they are not part of the per-op profile), prints unique vs total kernel launches and the wall
time. Goal: under 10 minutes on 2 cores.

    python experiments/profile_bert_base.py
"""

from __future__ import annotations

import json
import os
import tempfile
import time

from autoplace import zoo
from autoplace.profile import KernelTimer, ProfileStore, profile_models


def main():
    started = time.perf_counter()
    model = zoo.get("bert_base")
    loaded = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        store = ProfileStore(os.path.join(tmp, "bert_base"))
        summary = profile_models([model], {"cpu": "llvm"}, store, copies=False, end_to_end=False,
                                 timer=KernelTimer(), progress=True)
        meta = store.metadata
    total = time.perf_counter() - started
    result = dict(model="bert_base (12 layers, hidden 768, seq 128)", kernel_launches=summary["units_total"],
                  unique_kernels=summary["units_unique"], failed=summary["failed"],
                  import_s=round(loaded - started, 1), profile_s=round(summary["seconds"], 1),
                  total_s=round(total, 1), hardware=meta["hardware_id"], tvm=meta["tvm_version"])
    print(json.dumps(result, indent=1))
    print(f"{result['unique_kernels']} unique of {result['kernel_launches']} kernel launches; "
          f"total {total / 60:.1f} min (goal < 10 min)")
    out = os.path.join(os.path.dirname(__file__), "results", "profile_bert_base.json")
    with open(out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
