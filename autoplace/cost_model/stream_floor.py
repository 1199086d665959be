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

A kernel past the L2 that does next to no work per byte (:func:`streams_element_by_element`: elementwise
arithmetic, casts and views over operands all as large as its output, no transcendental, no broadcast) takes
its bytes over the bandwidth of the memory they come from, whatever its ops: :func:`stream_estimate_us` prices
it at that, the median bandwidth of such training kernels within a factor :data:`NEIGHBOUR_BYTES_FACTOR` of its
bytes (at least :data:`MIN_NEIGHBOURS` of them), instead of the trees, which price a chain of three ops by the
one- and two-op kernels they saw. On the Zen 4 (32 MB L3, 1 MB L2 a core) such kernels of 5-42 MB run at
127-167 GB/s; held out, seed003-base's three-op kernel (16.8 MB, 162 GB/s) was priced by the trees at 129 GB/s
(+24%).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from .features import _get, op_class, short_name, unit_ops

#: Ops that move no data of their own inside a fused kernel (views of an operand).
VIEW_OPS = frozenset({"reshape", "expand_dims", "squeeze", "flatten"})
#: Op classes of kernels that read every operand once and do a few operations per element.
STREAMING_OP_CLASSES = frozenset({"elementwise", "transcendental", "cast"})
#: Op classes of kernels whose time past the L2 is their bytes over the memory's bandwidth.
ELEMENT_BY_ELEMENT_OP_CLASSES = frozenset({"elementwise", "cast"})
#: :func:`stream_estimate_us` takes the training kernels within this factor of a kernel's bytes, both ways...
NEIGHBOUR_BYTES_FACTOR = 4.0
#: ...when there are at least this many of them.
MIN_NEIGHBOURS = 3


def streams_every_byte(record: Mapping) -> bool:
    """Whether every op the unit fuses is elementwise, transcendental, a cast or a view: its kernel reads
    each operand whole, once (a gather, slice or reduction reads some other amount)."""
    ops = unit_ops(record)
    return bool(ops) and all(op_class(op) in STREAMING_OP_CLASSES or short_name(op) in VIEW_OPS for op in ops)


def streams_element_by_element(record: Mapping) -> bool:
    """Whether the unit's ops are all elementwise arithmetic, casts or views (no transcendental) and every
    argument, its output among them, holds as many elements: each output element reads one element of each
    operand, and past the L2 the kernel's time is its bytes over the memory's bandwidth."""
    ops = unit_ops(record)
    if not ops or not all(op_class(op) in ELEMENT_BY_ELEMENT_OP_CLASSES or short_name(op) in VIEW_OPS for op in ops):
        return False
    shapes = _get(record, "arg_shapes") or []
    sizes = {int(np.prod([int(d) for d in shape])) for shape in shapes}
    return len(shapes) >= 2 and len(sizes) == 1


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
        ``{target kind: {"l2_bytes": int, "bytes": [ascending], "gb_s": [envelope at each]}}``; a target
        whose records carry no ``l2_bytes`` or have no streaming kernel past it is left out.
    """
    table = {}
    if units.empty or "l2_bytes" not in units:
        return table
    for target, group in units.groupby(units["target"].astype(str)):
        l2 = pd.to_numeric(group["l2_bytes"], errors="coerce").max()
        if not np.isfinite(l2) or l2 <= 0:
            continue
        rows = [(_bytes(r), float(r["median_us"])) for _, r in group.iterrows() if streams_every_byte(r)]
        rows = sorted((b, b / us / 1e3) for b, us in rows if np.isfinite(b) and b > l2 and us > 0)
        if not rows:
            continue
        nbytes = np.array([b for b, _ in rows])
        envelope = np.maximum.accumulate(np.array([g for _, g in rows])[::-1])[::-1]
        table[target] = {"l2_bytes": int(l2), "bytes": nbytes.tolist(), "gb_s": envelope.tolist()}
        element = sorted((b, b / us / 1e3) for b, us in ((_bytes(r), float(r["median_us"])) for _, r in group.iterrows()
                                                          if streams_element_by_element(r))
                         if np.isfinite(b) and b > l2 and us > 0)
        table[target]["element_bytes"] = [b for b, _ in element]
        table[target]["element_gb_s"] = [g for _, g in element]
    return table


def stream_floor_us(table: dict, recs: list, targets: list[str]) -> np.ndarray:
    """Each unit's least latency in microseconds by :func:`fit_stream_floor`'s envelope (0 where none)."""
    out = np.zeros(len(recs))
    for i, (rec, target) in enumerate(zip(recs, targets)):
        entry = table.get(str(target)) if table else None
        if not entry:
            continue
        nbytes = _bytes(rec)
        if not (np.isfinite(nbytes) and nbytes > entry["l2_bytes"]) or not streams_every_byte(rec):
            continue
        at = int(np.searchsorted(entry["bytes"], nbytes))
        if at < len(entry["bytes"]):
            out[i] = nbytes / (entry["gb_s"][at] * 1e3)
    return out


def stream_estimate_us(table: dict, recs: list, targets: list[str]) -> np.ndarray:
    """Each unit's latency in microseconds as its bytes over the median bandwidth of the training kernels that
    stream element by element past the L2 within :data:`NEIGHBOUR_BYTES_FACTOR` of its bytes, for a unit that
    streams so itself (:func:`streams_element_by_element`); 0 where that does not apply or fewer than
    :data:`MIN_NEIGHBOURS` such kernels are near its size (tables fitted before it have none)."""
    out = np.zeros(len(recs))
    for i, (rec, target) in enumerate(zip(recs, targets)):
        entry = table.get(str(target)) if table else None
        if not entry or not entry.get("element_bytes"):
            continue
        nbytes = _bytes(rec)
        if not (np.isfinite(nbytes) and nbytes > entry["l2_bytes"]) or not streams_element_by_element(rec):
            continue
        sizes, gb_s = np.asarray(entry["element_bytes"]), np.asarray(entry["element_gb_s"])
        near = (sizes >= nbytes / NEIGHBOUR_BYTES_FACTOR) & (sizes <= nbytes * NEIGHBOUR_BYTES_FACTOR)
        if int(near.sum()) >= MIN_NEIGHBOURS:
            out[i] = nbytes / (float(np.median(gb_s[near])) * 1e3)
    return out
