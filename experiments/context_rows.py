"""Why do a model's matmuls run slower in context than timed in-model, and vit-base's most? Tokens against weights.

On the Zen 4 the kernels of vit-base (65 tokens) ran 1.21x their in-model times inside the model's runs, those of
bert-base (128 tokens, the same 256 x 256 and 256 x 1024 weights) 1.03x, and vit-base is the one held-out
architecture priced more than 15% under its end-to-end latency (``cost_model_eval.py``, issue 11). This times,
on this machine, roberta-base (bert-base's encoder) at 64, 65 and 128 tokens and vit-base: each with
``autoplace.optimize(..., measure="always")`` into a fresh measurement folder (its kernels timed warm and in-model,
then the model timed in context; the in-context ceiling lifted so the record is kept whatever it reads), then
per weight matrix of its matmuls: the in-model time, the in-context time (median over its launches), the extra
time in context and that extra per MB of weights. If the extra comes from reading the weights from memory (the
in-model timing leaves them in the L3; a model of 13 MB of weights does not), it is about the same per MB at
every token count, and the fewer tokens, the larger the ratio. The memory bandwidth autoplace's eviction streamer
gets over 128 MB (``cache_state._streamer``, read + write) is printed beside it.

    python experiments/context_rows.py [--variants roberta-64 roberta-65 roberta-128 vit-65]

Writes ``experiments/results/<hardware id>/context_rows.csv`` (one row per model and weight matrix) and
``context_rows_models.csv`` (per model: in-context / in-model sums, by op class).
"""

from __future__ import annotations

import argparse
import collections
import os
import tempfile

import numpy as np
import pandas as pd
from results_folder import write_csv

DEFAULT_VARIANTS = ("roberta-64", "roberta-65", "roberta-128", "vit-65")


def memory_gb_s(nbytes: int = 128 << 20) -> float:
    """GB/s (bytes read plus written) of autoplace's CPU streaming kernel over ``nbytes``: the fastest of 4 runs."""
    import time

    import tvm

    from autoplace.profile.cache_state import _streamer

    stream, buffer = _streamer(nbytes // 4), tvm.runtime.tensor(np.ones(nbytes // 4, "float32"))
    stream(buffer)
    seconds = []
    for _ in range(4):
        started = time.perf_counter()
        stream(buffer)
        seconds.append(time.perf_counter() - started)
    return 2.0 * nbytes / min(seconds) / 1e9


def build(variant: str):
    """The model of ``"<architecture>-<tokens>"``: roberta-base with that many tokens, or vit-base (65 tokens)."""
    import autoplace
    from autoplace import architectures

    arch, tokens = variant.rsplit("-", 1)
    if arch == "vit":
        if int(tokens) != 65:
            raise SystemExit("vit-base has 65 tokens (64 patches and its class token): ask for vit-65")
        net, inputs = architectures.torch_model("vit", "base")
    else:
        base = architectures._TEXT["base"]
        saved = base["seq"]
        base["seq"] = int(tokens)
        try:
            net, inputs = architectures.torch_model(arch, "base")
        finally:
            base["seq"] = saved
    return autoplace.load_model(net, example_inputs=inputs, name=f"{arch}-base-{tokens}tok")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="*", default=list(DEFAULT_VARIANTS))
    args = parser.parse_args(argv)
    os.environ["AUTOPLACE_CACHE"] = tempfile.mkdtemp(prefix="context-rows-")
    import autoplace
    from autoplace.cost_model.cost_model import record_op_class
    from autoplace.profile import ProfileStore, in_context, measured_here_dir

    in_context.in_context_ceiling_us = lambda kernel_us: None  # keep what the model reads, however slow
    bandwidth = memory_gb_s()
    print(f"memory bandwidth (eviction streamer, read + write): {bandwidth:.1f} GB/s", flush=True)
    matrices, models = [], []
    for variant in args.variants:
        model = build(variant)
        autoplace.optimize(model, None, {"cpu": "llvm"}, measure="always", progress=False)
        store = ProfileStore(measured_here_dir())
        units = {(k, t): r for (kind, k, t), r in store.newest_good().items() if kind == "unit"}
        records = store.records(allow_foreign=True)
        context = records[(records["kind"] == "context") & (records["model"] == model.name)].iloc[-1]
        launches = collections.defaultdict(list)
        for key, us in zip(context["unit_keys"], context["in_context_us"]):
            launches[str(key)].append(float(us))
        by_class = collections.defaultdict(lambda: [0.0, 0.0])
        for key, times in launches.items():
            unit = units[(key, "llvm")]
            in_model = float(unit.get("in_model_median_us") or unit["median_us"])
            op_class = record_op_class(unit)
            by_class[op_class][0] += in_model * len(times)
            by_class[op_class][1] += float(np.sum(times))
            weights = int(unit.get("weight_bytes") or 0)
            if op_class == "matmul" and weights:
                extra = float(np.median(times)) - in_model
                matrices.append(dict(model=variant, shapes=str(unit["arg_shapes"][:2]), launches=len(times),
                                     weight_bytes=weights, in_model_us=in_model, in_context_us=float(np.median(times)),
                                     ratio=float(np.median(times)) / in_model, extra_us=extra,
                                     extra_us_per_mb=extra / (weights / 1e6), memory_gb_s=bandwidth))
                print(f"{variant:12s} {matrices[-1]['shapes']:32s} in-model {in_model:7.1f} us, in context "
                      f"{np.median(times):7.1f} us ({matrices[-1]['ratio']:.2f}x): {extra:+6.1f} us, "
                      f"{matrices[-1]['extra_us_per_mb']:+6.1f} us per MB of weights", flush=True)
        in_model_sum = sum(v[0] for v in by_class.values())
        context_sum = sum(v[1] for v in by_class.values())
        weights_per_call = sum(int(units[(k, "llvm")].get("weight_bytes") or 0) * len(t) for k, t in launches.items())
        models.append(dict(model=variant, in_model_sum_us=in_model_sum, in_context_sum_us=context_sum,
                           ratio=context_sum / in_model_sum, weight_bytes_per_call=weights_per_call,
                           memory_gb_s=bandwidth,
                           **{f"ratio_{c}": v[1] / v[0] for c, v in sorted(by_class.items())
                              if v[0] > 0.03 * in_model_sum}))
        print(f"{variant:12s} in context / in-model: {models[-1]['ratio']:.3f} "
              f"({weights_per_call / 1e6:.1f} MB of weights per call)", flush=True)
    write_csv(pd.DataFrame(matrices), "context_rows.csv")
    write_csv(pd.DataFrame(models), "context_rows_models.csv")
    print(pd.DataFrame(models).to_string(index=False, float_format=lambda v: f"{v:.3f}"))


if __name__ == "__main__":
    main()
