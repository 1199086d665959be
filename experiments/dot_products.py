"""Contractions of one output element a row: schedule version 14 against 15, on every kernel of the models it changes.

A 1x1 convolution over a 1x1 map (a MobileNet's last stages and head, a squeeze-excitation block) or a matmul by
one column writes one element per output row. Until version 14 ``cpu_schedules.Contraction`` vectorised it along
that row, one lane wide: one scalar multiply-add at a time (the Zen 5 streamed the weights of such a convolution at
7-15 GB/s, where a matmul of two rows by the same weights reads them at 100-130). Version 15
(``UNIT_ROW_DOT_PRODUCTS``) leaves it to ``DotProduct``, which accumulates each output along the reduction in vector
lanes, as ``RowReduction`` does a sum.

* kernels: every kernel of the models whose scheduled TIR differs between the versions, built both ways with the
  same random inputs, outputs compared, timed in interleaved rounds (about 1 ms of calls per sample);
* models: each model placed all-CPU and built both ways, outputs compared, timed in interleaved rounds.

Version 15 also reads an operand the dot product would read with a stride (a 1x1 at stride 2 over a 2x2 map reads
channels 4 floats apart) from a copy laid out along the reduction, when the kernel has the work for two threads
(``COMPACT_STRIDED_DOT_OPERANDS``). ``--compact-only`` compares version 15 with and without that instead (files
``dot_products_compact_*.csv``).

    python experiments/dot_products.py [--models mobilenetv2 ops-conv_head-1x1-160x1x1-1280-relu6 ...]
                                       [--time-models mobilenetv2 mobilenetv2-base] [--rounds 5] [--compact-only]

Model names are zoo specs or op-family models (``ops-<family>-...``, as ``autoplace profile --zoo ops`` names them;
``ops:<family>`` takes all of a family's). Writes ``experiments/results/<hardware id>/dot_products_kernels.csv``
(per kernel: min over rounds both ways, speedup = version 14's time / version 15's, the weights' bytes a
microsecond both ways) and ``dot_products_models.csv``.
"""

from __future__ import annotations

import argparse
import contextlib

import numpy as np
from register_rows import op_family_model
from results_folder import results_folder

DEFAULT_MODELS = ("mobilenetv2", "ops:conv_head", "ops:cnn_tiny_maps")  # the zoo, suite, grid and families: only these change
DEFAULT_TIMED_MODELS = ("mobilenetv2",)


@contextlib.contextmanager
def _flag(name: str, value: bool):
    """``autoplace.backend.cpu_schedules.<name>`` set to ``value`` inside the block."""
    from autoplace.backend import cpu_schedules as cs

    saved = getattr(cs, name)
    setattr(cs, name, value)
    try:
        yield
    finally:
        setattr(cs, name, saved)


def schedule_version(version: int):
    """The CPU rules as they were in schedule version 14 or are in 15."""
    return _flag("UNIT_ROW_DOT_PRODUCTS", version >= 15)


def compact_operands(version: str):
    """Version 15's dot products with (``"15"``) or without (``"15strided"``) their strided operands laid out along
    the reduction."""
    return _flag("COMPACT_STRIDED_DOT_OPERANDS", version == "15")


def models_of(specs) -> list:
    """The models ``specs`` name: zoo specs, op-family models by name, ``ops:<family>`` for a whole family."""
    from autoplace import zoo
    from autoplace.op_families import op_family_models

    out = []
    for spec in specs:
        if spec.startswith("ops:"):
            out += op_family_models(families=spec.removeprefix("ops:").split(","))
        else:
            out.append(op_family_model(spec) or zoo.parse(spec))
    return out


def describe(model, old, new) -> dict:
    """A changed kernel's operands' shapes, its weights' bytes and the rule that scheduled it in version 15."""
    weights = int(np.prod(new.arg_shapes[1])) * 4 if len(new.arg_shapes) > 1 else 0
    return dict(shapes=" ".join("x".join(map(str, s)) for s in new.arg_shapes[:2]), weight_bytes=weights,
                rule=str(new.prim_func.attrs["autoplace.cpu_schedule"]))


def main(argv=None):
    from kernel_timing import report_two_versions, two_versions

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS), help="models whose changed kernels are timed")
    parser.add_argument("--time-models", nargs="*", default=list(DEFAULT_TIMED_MODELS), help="models timed whole both ways")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--compact-only", action="store_true",
                        help="version 15 without (columns v15strided_*) and with (v15_*) COMPACT_STRIDED_DOT_OPERANDS")
    args = parser.parse_args(argv)
    versions, switch = (("15strided", "15"), compact_operands) if args.compact_only else ((14, 15), schedule_version)
    kernels, models = two_versions(models_of(args.models), switch, versions, args.rounds, describe,
                                   time_models=models_of(args.time_models))
    for version in versions if len(kernels) else ():
        kernels[f"v{version}_weights_gb_s"] = kernels["weight_bytes"] / kernels[f"v{version}_us"] / 1e3
    report_two_versions(kernels, models, versions, results_folder(),
                        "dot_products_compact" if args.compact_only else "dot_products")


if __name__ == "__main__":
    main()
