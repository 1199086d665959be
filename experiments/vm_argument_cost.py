"""What one more argument of ``main`` costs a model's call on the Relax VM: as an input, and as a weight.

The cost table prices a model built on one device at ``invoke + (args - 1) * per_arg + calls * launch + kernels``
(:func:`autoplace.cost_model.table.fit_vm_overhead`), ``per_arg`` one figure for every argument. Held out, seed003
(``(a + b) - (b + c)``: three inputs, one 0.012 us kernel, 0.97 us a call) stayed 15% low even with its kernel
measured, and the probe of the profiler (:func:`autoplace.profile.copies.measure_launch_overhead`: a ``main`` of
nine inputs) says 0.17 us an argument where the fit over the models says 0.046. This takes zoo models as autoplace
builds and times them (:func:`autoplace.place`, ``Runner.time_us``) and adds ``k`` unused 5x7 float32 arguments to
``main``: once as inputs (before the weights, ``num_input`` raised by ``k``), once as weights (after them), timed
in turn. The difference per argument, over the plain model, is the VM's cost of an input and of a weight.

Run: ``TVM_NUM_THREADS=2 PYTHONPATH=.:experiments python experiments/vm_argument_cost.py [--models seed003 mlp
bert llama] [--extra 16] [--rounds 9]``; writes ``vm_argument_cost.csv`` to this machine's results folder.
"""

from __future__ import annotations

import argparse

import numpy as np

EXTRA_SHAPE = (5, 7)


def with_extra_arguments(model, count: int, as_inputs: bool):
    """``model`` whose ``main`` takes ``count`` more unused float32 arguments: inputs (after the model's own
    inputs) or weights (after its weights)."""
    import tvm
    from tvm import relax

    from autoplace.frontend import Model

    main = model.mod["main"]
    extra = [relax.Var(f"extra{i}", relax.TensorType(EXTRA_SHAPE, "float32")) for i in range(count)]
    params = list(main.params)
    n = model.num_input
    params = params[:n] + extra + params[n:] if as_inputs else params + extra
    attrs = dict(main.attrs) if main.attrs is not None else {}
    attrs["num_input"] = n + (count if as_inputs else 0)
    func = relax.Function(params, main.body, main.ret_ty, main.is_pure, tvm.ir.make_node("ir.DictAttrs", **attrs))
    mod = tvm.IRModule({gv.name_hint: (func if gv.name_hint == "main" else model.mod[gv])
                        for gv in model.mod.get_global_vars()})
    weights = list(model.params) + ([] if as_inputs else [np.ones(EXTRA_SHAPE, "float32")] * count)
    return Model(mod=mod, params=weights, name=f"{model.name}+{count}{'in' if as_inputs else 'w'}")


def main(argv=None) -> None:
    from results_folder import write_csv

    import autoplace
    from autoplace import zoo

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="*", default=["seed003", "mlp", "bert", "llama"])
    parser.add_argument("--extra", type=int, default=16, help="arguments added")
    parser.add_argument("--rounds", type=int, default=9, help="rounds of the three builds timed in turn")
    args = parser.parse_args(argv)
    rows = []
    for name in args.models:
        model = zoo.parse(name)
        rng = np.random.default_rng(0)
        inputs = [rng.standard_normal(shape).astype(dtype) if dtype.startswith("float") else np.zeros(shape, dtype)
                  for _, shape, dtype in model.input_specs()]
        builds = {"plain": (model, inputs),
                  "inputs": (with_extra_arguments(model, args.extra, True),
                             inputs + [np.ones(EXTRA_SHAPE, "float32")] * args.extra),
                  "weights": (with_extra_arguments(model, args.extra, False), inputs)}
        runners = {how: (autoplace.place(m).runner, given) for how, (m, given) in builds.items()}
        times = {how: [] for how in runners}
        for _ in range(args.rounds):
            for how, (runner, given) in runners.items():
                times[how].append(float(np.median(runner.time_us(given, number=2000, repeat=3))))
        plain = float(np.median(times["plain"]))
        row = dict(model=name, inputs=model.num_input, arguments=len(model.mod["main"].params), extra=args.extra,
                   rounds=args.rounds, plain_median_us=plain, plain_min_us=min(times["plain"]))
        for how in ("inputs", "weights"):
            median = float(np.median(times[how]))
            row[f"extra_{how}_median_us"] = median
            row[f"per_{how[:-1]}_us"] = (median - plain) / args.extra
        rows.append(row)
        print(f"{name}: {row['arguments']} arguments ({row['inputs']} inputs), {plain:.3f} us; "
              f"per extra input {row['per_input_us']:.4f} us, per extra weight {row['per_weight_us']:.4f} us")
    write_csv(rows, "vm_argument_cost.csv")


if __name__ == "__main__":
    main()
