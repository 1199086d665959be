"""The memory side of the roofline, as measured: no kernel streams a working set past the L2 faster than
the fastest measured kernel that streamed one at least as large.

A kernel that reads each of its operands once and writes its outputs, doing a few operations per element
(:func:`streams_every_byte`: elementwise and transcendental ops, casts, views), takes at least its bytes over
the bandwidth of the memory they come from. Once the bytes exceed the L2 of the cores that timed the profile,
that is the L3 (or DRAM), whose bandwidth only falls as the working set grows. The trees of a cost model do
not know this: on the Intel Xeon the profile's streaming kernels past 6 MB all run at 56-59 GB/s, yet held
out, seed003-base's ``(a + b) - (b + c)`` over 1024x1024 tensors (16.8 MB) was priced at 82 GB/s (205 us
against 294 measured, -30%), its features closer to kernels that fit the caches.

:func:`fit_stream_floor` keeps, per target kind, the training kernels of that kind past the L2 and, for each,
the fastest bandwidth of any of them at least as large (an upper envelope, non-increasing in bytes);
:func:`stream_floor_us` prices a streaming kernel past the L2 at no less than its bytes over that envelope at
the first training size not below its own. A kernel larger than every training one, one within the L2 (where
launch overheads make bandwidth no simple function of size), and profiles whose records do not carry the L2
they were timed with (``l2_bytes``; CUDA records, profiles made before session 15) get no floor.

The other side, for kernels that only stream (:func:`streams_simply`: no transcendental evaluation, no libm call,
an add or a multiply per element is free beside its bytes): no such kernel past the L2 is priced slower than its
bytes over the slowest bandwidth the training's streaming-only kernels of a size near its own (within a factor
:data:`CEILING_SPAN`, at least one of them no smaller) ran at. The trees priced seed003-base's kernel (three
ops over three 4 MB inputs) on the AMD Zen 4 at 134 us against 100 measured (+34%, 125 GB/s), its op
count and FLOPs per byte nearer the transcendental kernels' than those of the adds and squares (9-23 MB at
150-170 GB/s) that bound it now. Models saved before session 36 carry no ceiling (:func:`stream_ceiling_us` gives 0).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from .features import LIBM_CALLS, TRANSCENDENTALS, _get, op_class, short_name, unit_ops

#: Ops that move no data of their own inside a fused kernel (views of an operand).
VIEW_OPS = frozenset({"reshape", "expand_dims", "squeeze", "flatten"})
#: Op classes of kernels that read every operand once and do a few operations per element.
STREAMING_OP_CLASSES = frozenset({"elementwise", "transcendental", "cast"})
#: Training kernels priced against a streaming-only kernel: those within this factor of its bytes.
CEILING_SPAN = 2.0


def _streaming(record: Mapping) -> tuple[bool, bool]:
    """``(streams_every_byte, streams_simply)`` of a unit, from one pass over its ops."""
    ops = unit_ops(record)
    every = bool(ops) and all(
        op_class(op) in STREAMING_OP_CLASSES or short_name(op) in VIEW_OPS for op in ops
    )
    simply = every and not any(
        op_class(op) == "transcendental"
        and (TRANSCENDENTALS.get(short_name(op), 1.0) or LIBM_CALLS.get(short_name(op), 0.0))
        for op in ops
    )
    return every, simply


def streams_every_byte(record: Mapping) -> bool:
    """Whether every op the unit fuses is elementwise, transcendental, a cast or a view: its kernel reads
    each operand whole, once (a gather, slice or reduction reads some other amount)."""
    return _streaming(record)[0]


def streams_simply(record: Mapping) -> bool:
    """Whether the unit streams its operands (:func:`streams_every_byte`) evaluating nothing transcendental:
    every op elementwise, a cast, a view or one :data:`~autoplace.cost_model.features.TRANSCENDENTALS` counts
    no evaluation of (``power``: a square), none a libm call."""
    return _streaming(record)[1]


def _bytes(record: Mapping) -> float:
    try:
        return float(_get(record, "bytes_in", math.nan)) + float(_get(record, "bytes_out", math.nan))
    except (TypeError, ValueError):
        return math.nan


def fit_stream_floor(units: pd.DataFrame) -> dict:
    """The envelope of streaming bandwidth past the L2 of each target kind's training kernels.

    Parameters
    ----------
    units : pandas.DataFrame
        Training unit records (``median_us``, ``bytes_in``, ``bytes_out``, ``target``, ``l2_bytes``).

    Returns
    -------
    dict
        ``{target kind: {"l2_bytes": int, "bytes": [ascending], "gb_s": [envelope at each],
        "simple_bytes": [ascending], "simple_gb_s": [bandwidth of each]}}`` (the ``simple_*`` lists: every
        streaming-only kernel past the L2, :func:`streams_simply`, for :func:`stream_ceiling_us`); a target
        whose records carry no ``l2_bytes`` or have no streaming kernel past it is left out.
    """
    table = {}
    if units.empty or "l2_bytes" not in units:
        return table
    for target, group in units.groupby(units["target"].astype(str)):
        l2 = pd.to_numeric(group["l2_bytes"], errors="coerce").max()
        if not np.isfinite(l2) or l2 <= 0:
            continue
        rows = []  # (bytes, GB/s, streams simply) of every streaming kernel past the L2
        for _, r in group.iterrows():
            every, simply = _streaming(r)
            nbytes, us = _bytes(r), float(r["median_us"])
            if every and np.isfinite(nbytes) and nbytes > l2 and us > 0:
                rows.append((nbytes, nbytes / us / 1e3, simply))
        if not rows:
            continue
        rows.sort()
        envelope = np.maximum.accumulate(np.array([g for _, g, _ in rows])[::-1])[::-1]
        table[target] = {
            "l2_bytes": int(l2),
            "bytes": [b for b, _, _ in rows],
            "gb_s": envelope.tolist(),
            "simple_bytes": [b for b, _, simply in rows if simply],
            "simple_gb_s": [g for _, g, simply in rows if simply],
        }
    return table


def stream_bounds_us(table: dict, recs: list, targets: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Each unit's least and most latency in microseconds by :func:`fit_stream_floor`'s table (0 where none).

    Least: a streaming kernel past the L2, its bytes over the envelope at the first training size not below its
    own. Most: a streaming-only one (:func:`streams_simply`) past the L2, its bytes over the least bandwidth of the
    training's streaming-only kernels within :data:`CEILING_SPAN` of its size, when at least one of those is no
    smaller than it (a kernel past every one of them may stream slower still)."""
    floor, ceiling = np.zeros(len(recs)), np.zeros(len(recs))
    for i, (rec, target) in enumerate(zip(recs, targets)):
        entry = table.get(str(target)) if table else None
        if not entry:
            continue
        nbytes = _bytes(rec)
        if not (np.isfinite(nbytes) and nbytes > entry["l2_bytes"]):
            continue
        every, simply = _streaming(rec)
        if not every:
            continue
        at = int(np.searchsorted(entry["bytes"], nbytes))
        if at < len(entry["bytes"]):
            floor[i] = nbytes / (entry["gb_s"][at] * 1e3)
        sizes, gb_s = np.asarray(entry.get("simple_bytes", [])), np.asarray(entry.get("simple_gb_s", []))
        near = (sizes >= nbytes / CEILING_SPAN) & (sizes <= nbytes * CEILING_SPAN)
        if simply and near.any() and sizes[near].max() >= nbytes:
            ceiling[i] = nbytes / (gb_s[near].min() * 1e3)
    return floor, ceiling


def stream_floor_us(table: dict, recs: list, targets: list[str]) -> np.ndarray:
    """Each unit's least latency in microseconds (:func:`stream_bounds_us`; 0 where none)."""
    return stream_bounds_us(table, recs, targets)[0]


def stream_ceiling_us(table: dict, recs: list, targets: list[str]) -> np.ndarray:
    """Each unit's most latency in microseconds (:func:`stream_bounds_us`; 0 where none: in models saved before
    session 36, whose table has no ``simple_*`` lists)."""
    return stream_bounds_us(table, recs, targets)[1]
