"""How a data-movement kernel reads its inputs in the order it writes its output.

A fused chain of reshapes, transposes, broadcasts and elementwise ops writes its output in order, but reads each
input through the chain's index arithmetic: one step along the output's innermost axis may step one element
along an input (a copy, which vectorises: 40-70 ps an element on the Zen 3), stay on it (a broadcast) or jump
a whole row (a transpose, read down a column: 180-340 ps an element). The op names and shapes a profile record
carries cannot tell these apart (a BERT head split ``(16, 64) -> (2, 16, 32)`` reads in order, the key's
``(16, 64) -> (2, 32, 16)`` reads down columns), so the profiler records the input strides themselves
and how far each input is read in one run (a window partition reads in order, like a copy, but only a window's
row at a time) (:func:`read_access`), measured on the kernel's unscheduled PrimFunc by evaluating its index
expressions at a few output positions and following them through intermediate buffers back to the kernel's
arguments.
"""

from __future__ import annotations

import numpy as np
import tvm
import tvm_ffi
from tvm import s_tir, tirx

#: Output positions sampled per kernel (the median stride over them is recorded).
SAMPLES = 5
#: Kernels whose output has more dimensions than this are not analysed.
MAX_RANK = 8
#: Buffer elements followed per kernel before giving up (a window op reads many per output).
MAX_VISITS = 4096


def _blocks(func: tirx.PrimFunc) -> list:
    """The blocks of ``func``, root included (it allocates the intermediate buffers)."""
    found = []
    tvm_ffi.structural_walk(func.body, (s_tir.SBlock, found.append), order="post")
    return found


def _ints(exprs, values: dict) -> list[int] | None:
    """The integer values of ``exprs`` with each block iterator set as in ``values`` (None: not constant)."""
    analyzer = tvm.sym.Analyzer()
    for var, value in values.items():
        analyzer.bind(var, tirx.IntImm(str(var.ty.dtype), int(value)))
    out = []
    for expr in exprs:
        value = analyzer.simplify(expr)
        if not isinstance(value, tirx.IntImm):
            return None
        out.append(int(value.value))
    return out


def _flat(index: list[int], shape: list[int]) -> int:
    flat = 0
    for i, extent in zip(index, shape):
        flat = flat * extent + i
    return flat


def read_access(func: tirx.PrimFunc, num_outputs: int = 1) -> dict | None:
    """How each input argument of ``func`` is read as the output is written in order; None when the kernel is not
    purely spatial (a reduction, a matmul: their own features describe them) or its indices cannot be followed.

    Returns
    -------
    dict
        ``read_strides``: per input, the median step of its read index (in elements) when the output index steps
        by one along its innermost axis. A copy reads with stride 1, a broadcast with 0, a transpose with a row's
        length. Arguments the output does not read along (a scalar) count 0; an argument read several times
        counts its largest stride.

        ``read_runs``: per input, the median number of output elements written while its read index runs on
        contiguously (each output step one element further on; :func:`_run`: aligned blocks of the output's axes,
        from the innermost outward, for as long as each continues the run of those inside it). A copy reads all of its input
        in one run, a window partition ``(1, 8, 8, 96) -> (4, 16, 96)`` in runs of 4 x 96 (a window's row), a
        transpose read down columns in runs of 1 (a broadcast along the innermost axis: 1 too; its stride says
        it). Both carry the same read-stride 1 for the first two.
    """
    blocks = _blocks(func)
    names = [p.name for p in func.params]
    if len(names) <= num_outputs:
        return None
    try:
        shapes = {p.name: [int(d) for d in p.shape] for p in func.params}
        for block in blocks:
            shapes.update({b.name: [int(d) for d in b.shape] for b in block.alloc_buffers})
    except (TypeError, ValueError, AttributeError):
        return None  # symbolic shapes, or an argument that is not a tensor
    inputs, outputs = names[:-num_outputs], names[-num_outputs:]
    out = outputs[0]
    out_shape = shapes[out]
    if not out_shape or len(out_shape) > MAX_RANK or out_shape[-1] < 2:
        return None
    writer = {}
    for block in blocks:
        if block.name_hint == "root":
            continue
        if any(iv.iter_type != tirx.IterVar.DataPar for iv in block.iter_vars) or len(block.writes) != 1:
            return None  # a reduction (or a block with several outputs): not a data-movement kernel
        region = block.writes[0].region
        if not all(isinstance(r.min, tirx.Var) for r in region):
            return None  # the write is not a plain out[v0, v1, ...]
        writer[block.writes[0].source.name] = block
    if out not in writer:
        return None

    memo = {}

    def reads(buffer: str, index: tuple) -> list[tuple]:
        """(argument, flat index) of every argument element ``buffer[index]`` is computed from."""
        if (buffer, index) in memo:
            return memo[buffer, index]
        block = writer.get(buffer)
        if block is None:
            found = [(buffer, _flat(index, shapes[buffer]))] if buffer in shapes else []
        else:
            values = {r.min: i for r, i in zip(block.writes[0].region, index)}
            found = []
            for read in block.reads:
                idx = _ints([r.min for r in read.region], values)
                if idx is None:
                    raise ValueError("index not constant")
                found += reads(read.source.name, tuple(idx))
            found = sorted(set(found))
        if len(memo) > MAX_VISITS:
            raise ValueError("too many reads to follow")
        memo[buffer, index] = found
        return found

    def by_input(index: tuple) -> dict:
        read = {}
        for buf, flat in reads(out, index):
            read.setdefault(buf, []).append(flat)
        return read

    def step(here: dict, there: dict, name: str) -> int | None:
        a, b = here.get(name, []), there.get(name, [])
        if not a or not b:
            return 0 if not a and not b else None
        return max(abs(y - x) for x, y in zip(a, b)) if len(a) == len(b) else None

    rng = np.random.default_rng(0)
    positions = [[int(rng.integers(0, d)) for d in out_shape[:-1]] + [int(rng.integers(0, out_shape[-1] - 1))]
                 for _ in range(SAMPLES)]
    strides = [[] for _ in inputs]
    try:
        for at in positions:
            here, there = by_input(tuple(at)), by_input((*at[:-1], at[-1] + 1))
            for name, stride in zip(inputs, strides):
                stride.append(step(here, there, name) or 0)
    except Exception:  # any TVM error too: the kernel is not analysed
        return None
    memo.clear()  # the runs follow more positions: a budget of their own
    try:
        # each axis's block lengths, longest first (the divisors of its extent)
        lengths = [sorted((n for n in range(2, e + 1) if e % n == 0), reverse=True) for e in out_shape]
        runs = [[_run(by_input, step, at, out_shape, lengths, name) for at in positions] for name in inputs]
    except Exception:
        runs = None  # too many reads to follow: the strides stand without
    return {"read_strides": [float(np.median(s)) for s in strides],
            "read_runs": None if runs is None else [float(np.median(r)) for r in runs]}


def _run(by_input, step, at: list, out_shape: list, lengths: list, name: str) -> int:
    """The output elements around ``at`` written while input ``name`` is read on contiguously: from the innermost
    output axis outward, the longest aligned block of each axis (a divisor of its extent) containing ``at`` over
    which the read index moves on by the run so far per step (its ends that far apart); an axis only partly covered
    ends the run."""
    run = 1
    for axis in reversed(range(len(out_shape))):
        extent = out_shape[axis]
        if extent == 1:
            continue
        block = 1
        for length in lengths[axis]:
            first, last = list(at), list(at)
            first[axis] = at[axis] // length * length
            last[axis] = first[axis] + length - 1
            if step(by_input(tuple(first)), by_input(tuple(last)), name) == run * (length - 1):
                block = length
                break
        run *= block
        if block < extent:
            break
    return run


def _models_named(names) -> dict:
    """``{name: Model}`` of the profile model names that can be built again by name: zoo and architecture-suite
    specs (``cnn``, ``llama-base``), op-family models (``ops-...``) and the stride grid (``grid-...``)."""
    from .. import zoo
    from ..errors import ModelError
    from ..op_families import op_family_models

    names = set(names)
    built = {}
    if any(n.startswith("ops-") for n in names):
        built.update({m.name: m for m in op_family_models() if m.name in names})
    if any(n.startswith("grid-") for n in names):
        built.update({m.name: m for m in zoo.regime_grid() if m.name in names})
    for name in sorted(n for n in names if not n.startswith(("ops-", "grid-"))):
        try:
            built[name] = zoo.parse(name)
        except ModelError:
            continue  # a model file: not rebuilt by name
    return built


def backfill_read_access(store, *, target_kind: str = "llvm", progress: bool = True) -> dict:
    """Add :func:`read_access` (``read_strides``, ``read_runs``) to the profile's ``target_kind`` kernels timed before
    records carried it (``read_runs`` came later than ``read_strides``: a kernel lacking it is analysed again; the
    strides a record carries itself stay).

    The kernels are extracted again (no timing) from the models their records name, compiled for the profile's
    CPU (``metadata.json``'s ``llvm_cpu``, so that the kernels' keys match), and the fields of the keys the
    records lack are written to the store's :attr:`~autoplace.profile.ProfileStore.UNIT_FIELDS` file, which
    :meth:`~autoplace.profile.ProfileStore.records` merges in. Kernels of models that cannot be rebuilt by
    name (model files) are left without.

    Returns
    -------
    dict
        ``kernels`` (keys lacking the fields; on the CPU, of the current CPU schedule version only, as training
        uses), ``added`` (keys analysed now: with fields, or None for kernels that are not data movement),
        ``unmatched`` (keys no rebuilt model gave: op-family sizes no longer drawn; recorded as None, not looked
        for again), ``with_strides``, ``with_runs``, ``models`` (rebuilt), ``skipped_models``, ``seconds``.
    """
    import time
    import warnings

    from tqdm import tqdm

    from .units import extract_units

    started = time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        records = store.load().records
    analysed = store.unit_fields()  # None there: analysed, not a data-movement kernel
    kernels = [r for r in records if r.get("kind") == "unit" and r.get("target") == target_kind]
    newest = max((r["cpu_schedule"] for r in kernels if isinstance(r.get("cpu_schedule"), int)), default=None)
    if target_kind == "llvm" and newest is not None:
        # kernels of older CPU schedules than the profile's newest: training skips them
        kernels = [r for r in kernels if r.get("cpu_schedule") == newest]
    lacking, models = set(), set()
    for r in kernels:
        if r.get("read_runs") is None and "read_runs" not in analysed.get(r.get("key"), {}):
            lacking.add(r.get("key"))
            models.add(r.get("model"))
    cpu = store.metadata.get("llvm_cpu")
    spec = {"kind": "llvm", "mcpu": cpu} if target_kind == "llvm" and cpu else target_kind
    built = _models_named(m for m in models if m)
    found = {}
    for name in tqdm(sorted(built), desc="read access", unit="model", disable=not progress):
        for unit in extract_units(built[name], spec):
            if unit.key in lacking and unit.key not in found:
                found[unit.key] = {"read_strides": unit.read_strides, "read_runs": unit.read_runs}
    # Keys no rebuilt model gives (sizes no longer drawn) are written as None too, so that the next run does not
    # rebuild their models to look for them again; the features read None and a missing field alike (NaN).
    # (their strides, where an earlier back-fill found them, stay)
    unmatched = {key: {"read_strides": analysed.get(key, {}).get("read_strides"), "read_runs": None}
                 for key in lacking if key not in found}
    if found or unmatched:
        store.add_unit_fields({**found, **unmatched})
    return {"kernels": len(lacking), "added": len(found), "unmatched": len(unmatched),
            "with_strides": sum(v["read_strides"] is not None for v in found.values()),
            "with_runs": sum(v["read_runs"] is not None for v in found.values()), "models": len(built),
            "skipped_models": sorted(m for m in models if m and m not in built),
            "seconds": round(time.monotonic() - started, 1)}


def backfill_model_inputs(store, *, progress: bool = True) -> dict:
    """Add ``num_inputs`` (how many of ``main``'s ``num_args`` arguments are the model's inputs, the rest its weights:
    the VM's cost of each differs, :func:`autoplace.cost_model.table.fit_vm_overhead`) to the profile's end-to-end
    records made before records carried it. Nothing is timed: the models are built again by name (zoo,
    architecture suite, stride grid) and the counts written to the store's
    :attr:`~autoplace.profile.ProfileStore.UNIT_FIELDS` file. Models that cannot be rebuilt by name are left without
    (priced as one input).

    Returns
    -------
    dict
        ``models`` (names lacking the field), ``added``, ``skipped_models``, ``seconds``.
    """
    import time
    import warnings

    from tqdm import tqdm

    started = time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        records = store.load().records
    added = store.unit_fields()
    lacking = sorted({str(r.get("key")) for r in records if r.get("kind") == "model" and r.get("num_inputs") is None
                      and "num_inputs" not in added.get(r.get("key"), {})})
    built = _models_named(lacking)
    found = {name: {"num_inputs": int(built[name].num_input)}
             for name in tqdm(sorted(built), desc="model inputs", unit="model", disable=not progress)}
    if found:
        store.add_unit_fields(found)
    return {"models": len(lacking), "added": len(found), "skipped_models": sorted(set(lacking) - set(built)),
            "seconds": round(time.monotonic() - started, 1)}
