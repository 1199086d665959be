"""How many output rows should one register tile of a convolution or matmul hold? Kernels built with each tile
budget, timed side by side.

:class:`autoplace.backend.cpu_schedules.Contraction` tiles a reduction's output ``ut`` rows by ``nv`` vectors and
keeps the tile's accumulators in vector registers. It picks the tile with the fewest loads per useful multiply-add,
``ut`` a divisor of the rows up to ``max_rows`` (12), ``ut * nv`` within the accumulator budget (12 of the 16
registers of AVX2, 24 of AVX-512's 32). A convolution whose output rows are narrow (a 2x2, 4x4, 7x7 or 14x14 map:
one register per row) gets the most rows its channel count allows: until schedule version 14, 12 for 96, 192, 384
channels, 8 for 64, 128, 256; since then at most ``Contraction.NARROW_MAX_ROWS`` (8) on AVX2 for a vector of half a
register or less. A variant is ``rows=<max_rows>``, ``acc=<AVX2 accumulator budget>``, ``narrow=<NARROW_MAX_ROWS>`` and/or
``regs=<NARROW_ROWS_REGISTERS>`` joined by ``,`` (``default``: the shipped values; ``narrow=12``: version 13's tiles;
``regs=32``: the narrow-row cap on AVX-512's 32 registers too); for each, the models' kernels are extracted as the build makes them, a kernel whose TIR does not
change between variants is timed once, and all builds are timed in interleaved rounds (``time_evaluator``, ~1 ms
per sample, median of each round) so they see the same host. Each kernel's row carries the tile the variant gave it
(rows, registers, lanes of its plan for this machine's vector width).

    python experiments/register_rows.py [--models cnn-base mobilenetv2-base ...] [--variants narrow=12 default]

Writes ``experiments/results/<hardware id>/register_rows.csv`` (one row per kernel launch and variant) and prints,
per model, the sum of its kernels' times (each launch counted) under every variant relative to the first.
"""

from __future__ import annotations

import argparse
import contextlib
import os

import numpy as np
import pandas as pd
from kernel_timing import time_variants
from results_folder import results_folder

DEFAULT_MODELS = ("cnn", "cnn-base", "resnet", "resnet-base", "mobilenetv2", "mobilenetv2-base", "convnext",
                  "convnext-base", "inception", "inception-base", "swin-base", "vit-base", "bert-base", "gpt2-base",
                  "whisper-encoder-base")
DEFAULT_VARIANTS = ("narrow=12", "default")


def op_family_model(name: str):
    """A model of the op families (``ops-<family>-...``) by its name, else None."""
    if not name.startswith("ops-"):
        return None
    from autoplace.op_families import FAMILIES, op_family_models

    family = next((f for f in sorted(FAMILIES, key=len, reverse=True) if name.startswith(f"ops-{f}-")), None)
    if family is None:
        return None
    return next((m for m in op_family_models(families=[family]) if m.name == name), None)


@contextlib.contextmanager
def tile_budget(variant: str):
    """The Contraction rule with ``variant``'s ``max_rows``, AVX2 accumulator budget and narrow-row cap, inside
    the block."""
    from autoplace.backend import cpu_schedules

    defaults = cpu_schedules.Contraction.__init__.__defaults__
    accumulators = dict(cpu_schedules._ACCUMULATORS)
    settings = {} if variant == "default" else dict(part.split("=") for part in variant.split(","))
    unknown = set(settings) - {"rows", "acc", "narrow", "regs"}
    if unknown:
        raise SystemExit(f"variant {variant!r}: unknown setting(s) {sorted(unknown)}; use rows=<n>, acc=<n>, "
                         "narrow=<n>, regs=<n>")
    narrow = cpu_schedules.Contraction.NARROW_MAX_ROWS
    narrow_registers = cpu_schedules.NARROW_ROWS_REGISTERS
    try:
        if "rows" in settings:
            cpu_schedules.Contraction.__init__.__defaults__ = (int(settings["rows"]),) + defaults[1:]
        if "acc" in settings:
            cpu_schedules._ACCUMULATORS[256] = int(settings["acc"])
        if "narrow" in settings:
            cpu_schedules.Contraction.NARROW_MAX_ROWS = int(settings["narrow"])
        if "regs" in settings:
            cpu_schedules.NARROW_ROWS_REGISTERS = int(settings["regs"])
        yield cpu_schedules.Contraction()
    finally:
        cpu_schedules.Contraction.__init__.__defaults__ = defaults
        cpu_schedules.Contraction.NARROW_MAX_ROWS = narrow
        cpu_schedules.NARROW_ROWS_REGISTERS = narrow_registers
        cpu_schedules._ACCUMULATORS.clear()
        cpu_schedules._ACCUMULATORS.update(accumulators)


def register_tile(rule, record: dict, bits: int) -> dict:
    """The register tile ``rule`` gives a unit record's anchor on ``bits``-wide vectors (rows ``ut``, vectors
    ``nv``, ``lanes``), or {}."""
    from autoplace.backend import cpu_schedules
    from autoplace.cost_model.features import _tile_axes

    axes = _tile_axes(record)
    if axes is None or min(axes[:2]) < 1:
        return {}
    e_v, e_u, _ = axes
    if rule.pads_rows(e_u):
        e_u = -(-e_u // rule.ROW_PAD) * rule.ROW_PAD
    plan = rule.tile_plan(e_v, e_u, bits // 32, cpu_schedules._ACCUMULATORS[bits], cpu_schedules._REGISTERS[bits],
                          odd=True)
    return dict(e_v=e_v, e_u=e_u, ut=plan["ut"], nv=plan["nv"], lanes=plan["lanes"])


def kernels_at(specs, variant: str) -> dict:
    """``{spec: [(func_name, TIR hash, unit, tile)]}``: each model's contraction kernels built under ``variant``."""
    from autoplace import zoo
    from autoplace.backend.cpu_schedules import cpu_target, vector_bits
    from autoplace.cost_model.features import features_from_unit
    from autoplace.graph import op_graph
    from autoplace.profile.units import extract_units

    bits = vector_bits(cpu_target("llvm"))
    out = {}
    with tile_budget(variant) as rule:
        for spec in specs:
            model = op_family_model(spec) or zoo.parse(spec)
            graph = op_graph(model)
            out[spec] = []
            for unit in extract_units(model, "llvm", graph=graph):
                record = features_from_unit(unit, graph)
                tile = register_tile(rule, record, bits)
                if tile:
                    tile["anchor_input_shapes"] = str(record["anchor_input_shapes"])
                    out[spec].append((unit.func_name, unit.key, unit, tile))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", default=list(DEFAULT_MODELS))
    parser.add_argument("--variants", nargs="*", default=list(DEFAULT_VARIANTS))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tag", default="")
    args = parser.parse_args(argv)

    by_variant = {v: kernels_at(args.models, v) for v in args.variants}
    rounds = time_variants(by_variant, args.rounds)
    rows = []
    for variant, launches in by_variant.items():
        for spec, spec_launches in launches.items():
            for func_name, tir_hash, unit, tile in spec_launches:
                us = rounds[tir_hash]
                rows.append(dict(model=spec, variant=variant, func_name=func_name, tir_hash=tir_hash,
                                 **tile,
                                 median_us=float(np.median(us)), min_us=float(np.min(us))))
    table = pd.DataFrame(rows)
    first = args.variants[0]
    summary = table.groupby(["model", "variant"]).min_us.sum().unstack("variant")[args.variants]
    summary = summary.div(summary[first], axis=0).round(3)
    summary.insert(0, f"sum_us_at_{first}", table[table.variant == first].groupby("model").min_us.sum().round(1))
    pd.set_option("display.width", 200)
    print("contraction kernels' sum (min over rounds, each launch counted) relative to the first variant:")
    print(summary.to_string())
    base = table[table.variant == first].reset_index(drop=True)
    for variant in args.variants[1:]:
        other = table[table.variant == variant].reset_index(drop=True)
        both = base.assign(ut_new=other.ut, nv_new=other.nv, ratio=other.min_us / base.min_us)
        both = both[base.tir_hash != other.tir_hash].drop_duplicates("tir_hash")
        print(f"\nkernels {variant} changes: ratio to {first} by tile (rows x vectors, lanes) before -> after")
        print(both.groupby(["ut", "nv", "lanes", "ut_new", "nv_new"]).ratio.describe()[
            ["count", "min", "50%", "max"]].round(2).to_string())
    path = os.path.join(results_folder(), f"register_rows{args.tag}.csv")
    table.to_csv(path, index=False)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
