"""The single-kernel random shape sweep tried as cost-model training data (and dropped: it made held-out
predictions worse, see ``experiments/results/cost_model_tried_with_sweep80.md``).

Profile it into a scratch folder (not the committed profile)::

    python experiments/op_sweep.py --count 80 --dir /tmp/sweep_profile
"""

from __future__ import annotations

import argparse

from autoplace.frontend import Model, load_model


def op_sweep(count: int = 80, seed: int = 0, max_flops: float = 1.5e9) -> list[Model]:
    """Single-kernel models over a spread of shapes, as extra training data for the cost model.

    Matmuls (plain, with bias, with bias+ReLU, batched), 2-D convolutions and a few elementwise and
    normalisation ops, with sizes drawn log-uniformly (seeded) and FLOPs capped at ``max_flops`` so
    that naive kernels stay under about a second. Zoo models teach the cost model little about
    cache regimes their shapes never visit; a sweep covers them. Names start with ``sweep-``.

    Measured on the 2-core EPYC CPU profile: adding 80 sweep kernels to the training data made the
    held-out end-to-end predictions *worse* (experiments/results/cost_model_tried_with_sweep80.md),
    so the committed profile does not include them, and the sweep lives here, not in the package.
    """
    import numpy as np
    from tvm import relax

    rng = np.random.default_rng(seed)

    def log_int(lo, hi):
        return round(float(np.exp(rng.uniform(np.log(lo), np.log(hi)))))

    models = []
    kinds = ["matmul", "matmul_bias", "matmul_bias_relu", "batch_matmul", "conv2d", "elementwise", "layer_norm",
             "softmax"]
    weights = np.array([4, 3, 3, 3, 4, 1, 1, 1], dtype=float)
    while len(models) < count:
        kind = kinds[rng.choice(len(kinds), p=weights / weights.sum())]
        bb = relax.BlockBuilder()
        if kind.startswith("matmul") or kind == "batch_matmul":
            batch = log_int(1, 16) if kind == "batch_matmul" else 1
            m, k, n = log_int(1, 512), log_int(16, 3072), log_int(16, 3072)
            if 2.0 * batch * m * k * n > max_flops:
                continue
            a_shape = (batch, m, k) if kind == "batch_matmul" else (m, k)
            b_shape = (batch, k, n) if kind == "batch_matmul" else (k, n)
            x = relax.Var("x", relax.TensorType(a_shape, "float32"))
            w = relax.Var("w", relax.TensorType(b_shape, "float32"))
            params = [x, w]
            with bb.function("main", params):
                with bb.dataflow():
                    y = bb.emit(relax.op.matmul(x, w))
                    if "bias" in kind:
                        y = bb.emit(relax.op.add(y, relax.const(np.ones((n,), "float32"))))
                    if kind.endswith("relu"):
                        y = bb.emit(relax.op.nn.relu(y))
                    out = bb.emit_output(y)
                bb.emit_func_output(out)
            name = f"sweep-{kind}-{'x'.join(map(str, a_shape))}-{n}"
        elif kind == "conv2d":
            c_in, c_out, size = log_int(3, 256), log_int(8, 256), log_int(7, 112)
            kernel, stride = int(rng.choice([1, 3, 5])), int(rng.choice([1, 2]))
            out_size = (size + 2 * (kernel // 2) - kernel) // stride + 1
            if out_size < 1 or 2.0 * c_out * out_size * out_size * c_in * kernel * kernel > max_flops:
                continue
            x = relax.Var("x", relax.TensorType((1, c_in, size, size), "float32"))
            with bb.function("main", [x]):
                with bb.dataflow():
                    w = relax.const(np.zeros((c_out, c_in, kernel, kernel), "float32"))
                    y = bb.emit(relax.op.nn.conv2d(x, w, strides=stride, padding=kernel // 2))
                    out = bb.emit_output(relax.op.nn.relu(y))
                bb.emit_func_output(out)
            name = f"sweep-conv2d-{c_in}x{size}-{c_out}-k{kernel}s{stride}"
        else:
            rows, cols = log_int(1, 4096), log_int(8, 4096)
            if rows * cols > 1 << 22:
                continue
            x = relax.Var("x", relax.TensorType((rows, cols), "float32"))
            with bb.function("main", [x]):
                with bb.dataflow():
                    if kind == "elementwise":
                        y = bb.emit(relax.op.multiply(relax.op.exp(x), x))
                    elif kind == "softmax":
                        y = bb.emit(relax.op.nn.softmax(x, axis=-1))
                    else:
                        y = bb.emit(relax.op.nn.layer_norm(x, relax.const(np.ones(cols, "float32")),
                                                           relax.const(np.zeros(cols, "float32")), axes=[-1]))
                    out = bb.emit_output(y)
                bb.emit_func_output(out)
            name = f"sweep-{kind}-{rows}x{cols}"
        models.append(load_model(bb.get(), name=name))
    return models


def main() -> None:
    from autoplace.profile import KernelTimer, ProfileStore, profile_models

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=80)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dir", required=True, help="profile folder to write (use a scratch folder)")
    args = parser.parse_args()
    models = op_sweep(args.count, args.seed)
    summary = profile_models([(m.name, m) for m in models], {"cpu": "llvm"}, ProfileStore(args.dir),
                             copies=False, end_to_end=False, timer=KernelTimer())
    print(summary)


if __name__ == "__main__":
    main()
