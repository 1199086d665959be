"""Convolutions on tiny output maps: schedule version 15 against 16 (or 16 against 17), on every kernel of the models
it changes.

A convolution whose output map has four elements a channel or fewer (a ResNet's or MobileNetV2's 2x2 last stage)
gave :class:`autoplace.backend.cpu_schedules.Contraction` rows of 2 to vectorise along: 2 of AVX-512's 16 lanes.
Version 16 (``TINY_MAP_LANES_CONV``) legalizes it as one dot product per output along its reduction (input
channels x taps, along which the OIHW weights lie contiguous; the input copied once a call into an ``im2col``
buffer), which ``ConvLanes`` tiles as output channels x map positions, every partial sum in a register. Version 17
(``ONE_VECTOR_CONV_LANES``) accumulates each output in one vector on AVX2 (8 lanes, where 16 took two registers),
so that a tile holds 2 channels x 4 positions, and takes 4x4 maps of 2^20 multiply-adds or more there too.

* kernels: every kernel of the models whose scheduled TIR differs between the versions, built both ways with the
  same random inputs, outputs compared, timed in interleaved rounds (about 1 ms of calls per sample);
* models: each model placed all-CPU and built both ways, outputs compared, timed in interleaved rounds.

    python experiments/tiny_map_convs.py [--models resnet-base mobilenetv2-base ops:cnn_tiny_maps ...]
                                         [--time-models resnet-base mobilenetv2-base] [--rounds 5] [--mcpu znver3]
                                         [--versions 16 17]

Model names as ``experiments/dot_products.py`` takes them. Writes
``experiments/results/<hardware id>/tiny_map_convs_kernels.csv`` (per kernel: min over rounds both ways, speedup =
version 15's time / version 16's, GFLOP/s both ways) and ``tiny_map_convs_models.csv`` (other versions: a
``_v<old>_v<new>`` suffix).
"""

from __future__ import annotations

import argparse
import contextlib

import numpy as np
from dot_products import _flag, describe, models_of
from results_folder import results_folder

#: The zoo, suite and op-family models with convolutions on 2x2 (or smaller) maps.
DEFAULT_MODELS = ("resnet-base", "mobilenetv2-base", "convnext-base", "cnn", "resnet", "mobilenetv2",
                  "ops:cnn_tiny_maps", "ops:conv_narrow")
DEFAULT_TIMED_MODELS = ("resnet-base", "mobilenetv2-base", "convnext-base")


@contextlib.contextmanager
def schedule_version(version: int):
    """The CPU rules as they were in schedule version 15 or 16 or are in 17."""
    with _flag("TINY_MAP_LANES_CONV", version >= 16), _flag("ONE_VECTOR_CONV_LANES", version >= 17):
        yield


def _describe(model, old, new) -> dict:
    """:func:`dot_products.describe`'s columns and the convolution's floating-point operations (2 x outputs x input
    channels x taps: arguments 0 and 1 are its input and OIHW weights, the last its output)."""
    out, weight = new.arg_shapes[-1], new.arg_shapes[1] if len(new.arg_shapes) > 1 else []
    flops = 2.0 * float(np.prod(out)) * float(np.prod(weight[1:])) if len(weight) == 4 else float("nan")
    return dict(**describe(model, old, new), flops=flops)


def main(argv=None):
    from kernel_timing import report_two_versions, two_versions

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS), help="models whose changed kernels are timed")
    parser.add_argument("--time-models", nargs="*", default=list(DEFAULT_TIMED_MODELS), help="models timed whole both ways")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--versions", nargs=2, type=int, default=[15, 16], choices=(15, 16, 17), metavar="V",
                        help="the schedule versions compared, old then new (17 differs from 16 on AVX2 only)")
    parser.add_argument("--mcpu", default=None,
                        help="compile for this LLVM CPU instead of the host's (znver3: AVX2 code on an AVX-512 host, a "
                             "stand-in for an AVX2 machine's vector width, not its timings); files get a _<mcpu> suffix")
    args = parser.parse_args(argv)
    if args.mcpu:
        from autoplace.backend import cpu_schedules

        cpu_schedules.host_cpu = lambda: args.mcpu
    versions = tuple(args.versions)
    kernels, models = two_versions(models_of(args.models), schedule_version, versions, args.rounds, _describe,
                                   time_models=models_of(args.time_models))
    for version in versions if len(kernels) else ():
        kernels[f"v{version}_gflop_s"] = kernels["flops"] / kernels[f"v{version}_us"] / 1e3
    report_two_versions(kernels, models, versions, results_folder(),
                        "tiny_map_convs" + ("" if versions == (15, 16) else "_v{}_v{}".format(*versions))
                        + (f"_{args.mcpu}" if args.mcpu else ""))


if __name__ == "__main__":
    main()
