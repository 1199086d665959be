"""The placement problem as plain data: what each node costs where, and what copies cost.

A :class:`PlacementProblem` holds numpy arrays indexed by node number ``i`` (position in
:attr:`PlacementProblem.nodes`), target number ``d`` (position in
:attr:`PlacementProblem.targets`) and tensor number ``t``. It knows nothing about solvers; the
solvers (:mod:`.mincut`, :mod:`.ilp`, :mod:`.baselines`) read it and make a
:class:`~autoplace.solve.plan.PlacementPlan`, and :func:`~autoplace.solve.validate.validate_plan`
checks any plan against it.

Units
-----
Every latency is in microseconds (``*_us``), every size in bytes (``*_bytes``, ``nbytes``).
Copying ``nbytes`` bytes from target ``s`` to target ``d`` takes
``alpha_us[s, d] + nbytes * us_per_byte[s, d]`` microseconds.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from functools import cached_property

import numpy as np

from ..errors import InfeasiblePlacementError, PlacementError

__all__ = ["CopyCost", "PlacementProblem"]


def _json_node(name):
    """Undo JSON's tuple -> list conversion so node names stay hashable."""
    if isinstance(name, list):
        return tuple(_json_node(x) for x in name)
    return name


def _finite_or_none(x: float):
    return None if not math.isfinite(x) else float(x)


class CopyCost:
    """Cost of copying a tensor from one target to another: ``alpha_us + nbytes * us_per_byte`` (``alpha_us``: the
    fixed cost of one copy, launch and synchronisation; ``us_per_byte``: the inverse bandwidth), or, with measured
    ``points`` (``(bytes, us)``, increasing bytes), the line through them: interpolated between two measured sizes,
    the smallest size's time below them, the last two sizes' slope above them. ``points`` is kept as an
    ``(n, 2)`` array of ``(bytes, us)`` rows sorted by size, so ``CopyCost(c.alpha_us, c.us_per_byte, c.points)``
    is ``c`` again.

    A device-to-host copy from pageable memory is not a line: on an H200 box 4 MB took 328 us (12.8 GB/s) and
    16 MB 8.9 ms (1.9 GB/s), where the least-squares line gives 1.7 ms. Unpacks as ``alpha_us, us_per_byte``.
    """

    def __init__(self, alpha_us: float, us_per_byte: float, points=None, handoff_us: float = 0.0,
                 handoff_us_per_byte: float = 0.0):
        self.alpha_us, self.us_per_byte = float(alpha_us), float(us_per_byte)
        #: Extra microseconds when the copied tensor feeds a kernel (not only the model's output): the destination
        #: waits for the source's work, then resumes (GPU -> CPU: the CPU's thread pool went to sleep while the copy
        #: waited). Measured by hand-off probes (``experiments/gpu/handoff_probes.py``). Charged per tensor, not per
        #: placement: a tensor that feeds a kernel anywhere pays it on every copy, also one that only returns it as
        #: an output (exact when its kernels all run on the copy's destination, the case the probes time).
        self.handoff_us = float(handoff_us)
        #: The hand-off's part that grows with the tensor (the destination's kernel reads an input no cache holds:
        #: an H200 box's probes, session 41, from 1 KB to 8 MB). A copy that pays :attr:`handoff_us` pays
        #: ``handoff_us + nbytes * handoff_us_per_byte``.
        self.handoff_us_per_byte = float(handoff_us_per_byte)
        self.points = None
        if points is not None and len(points):
            self.points = np.array(sorted((float(b), float(u)) for b, u in points), dtype=np.float64).reshape(-1, 2)

    def __iter__(self):
        return iter((self.alpha_us, self.us_per_byte))

    def __eq__(self, other) -> bool:
        if isinstance(other, CopyCost):
            same_points = (self.points is None) == (other.points is None) and (
                self.points is None or np.array_equal(self.points, other.points))
            return (tuple(self) == tuple(other) and same_points and self.handoff_us == other.handoff_us
                    and self.handoff_us_per_byte == other.handoff_us_per_byte)
        return tuple(self) == tuple(other)  # against a pair: the fit

    __hash__ = None

    def latency_us(self, nbytes: float) -> float:
        """Latency in microseconds of one copy of ``nbytes`` bytes."""
        return float(self(nbytes))

    def __repr__(self) -> str:
        n = 0 if self.points is None else len(self.points)
        handoff = f", handoff_us={self.handoff_us:.3g}" if self.handoff_us else ""
        handoff += f", handoff_us_per_byte={self.handoff_us_per_byte:.3g}" if self.handoff_us_per_byte else ""
        return (f"CopyCost(alpha_us={self.alpha_us:.3g}, us_per_byte={self.us_per_byte:.3g}, {n} measured sizes"
                f"{handoff})")

    def __call__(self, nbytes):
        """Microseconds to copy ``nbytes`` (a number or an array)."""
        nbytes = np.asarray(nbytes, dtype=np.float64)
        if self.points is None:
            return self.alpha_us + nbytes * self.us_per_byte
        sizes, us = self.points.T
        out = np.interp(nbytes, sizes, us)
        if len(sizes) >= 2:
            slope = max(0.0, (us[-1] - us[-2]) / (sizes[-1] - sizes[-2]))
            out = np.where(nbytes > sizes[-1], us[-1] + (nbytes - sizes[-1]) * slope, out)
        return out


def _program_positions(graph, nodes: list) -> np.ndarray:
    """Each node's rank in a topological order of ``graph`` that follows the nodes' ``order`` attribute (then
    insertion order) where the edges leave a choice; insertion order for a graph with a cycle."""
    import networkx as nx

    index = {v: i for i, v in enumerate(nodes)}

    def rank(v):
        order = graph.nodes[v].get("order")
        return (float(order) if isinstance(order, (int, float)) else math.inf, index[v])

    try:
        ranked = list(nx.lexicographical_topological_sort(graph, key=rank))
    except nx.NetworkXUnfeasible:
        return np.arange(len(nodes), dtype=np.int64)
    position = np.empty(len(nodes), dtype=np.int64)
    position[[index[v] for v in ranked]] = np.arange(len(nodes))
    return position


class PlacementProblem:
    """Which node may run where, what it costs there, and what moving its outputs costs.

    Build one from a graph with :meth:`from_graph`; the constructor takes the arrays directly
    (that is what :meth:`from_dict` does) and checks them.

    The cost of a placement (a target ``d(i)`` for every node ``i``) is::

        sum_i latency_us[i, d(i)]
          + sum over tensors t (made by node p) and targets d != d(p) where some consumer of t
            runs: copy_latency_us[t, d(p), d]

    one copy per (tensor, destination target), shared by every consumer there. Copies of
    resident tensors (weights, made present at load time) cost nothing. Latencies add up as if
    nodes and copies ran one after another (a sum-of-latencies model: no overlap of compute on
    different targets, no overlap of copies with compute), so the cost is an upper bound on
    what an overlapping runtime achieves and exact for a serial one.

    Memory used on target ``d`` (:meth:`memory_use`) is what stays there for the whole run plus the
    activations live there at the busiest point of the program:

    * the ``weight_bytes`` of every node placed on ``d``; a resident node's tensors (weights uploaded at
      load time) where it is placed or copied (the larger of its ``weight_bytes`` and ``output_bytes``
      where placed, the tensor's bytes where copied); an input's tensors where it is placed (a node
      that reads nothing and is not resident, :attr:`source`: the caller holds it for the whole run);
    * at each program point (``position``: the order the nodes run in), the tensors live there, each
      from its producer's position to its last consumer's: on the producer's target, and on every
      target it is copied to; an output no edge carries (``output_bytes`` beyond its tensors), at its
      producer's position only.

    That is what a memory planner that reuses a dead tensor's storage needs at least (TVM's
    ``StaticPlanBlockMemory`` does); it may need more where sizes leave gaps in its storage
    (:func:`autoplace.backend.pipeline.planned_allocations` reads what a build allocates).

    Parameters
    ----------
    nodes : sequence of hashable
        Node names, in a fixed order (node ``i`` is ``nodes[i]``).
    targets : sequence of str
        Target names (target ``d`` is ``targets[d]``).
    latency_us : array_like of float, shape (n_nodes, n_targets)
        Compute latency of each node on each target; ``inf`` where the target does not
        support the node.
    pinned : array_like of int, shape (n_nodes,)
        Target number each node must be placed on, ``-1`` where the node is free.
    weight_bytes, output_bytes : array_like of int, shape (n_nodes,)
        Bytes of parameters held by each node and bytes of its output.
    resident : array_like of bool, shape (n_nodes,)
        Whether the node's tensors are made present at load time (copies cost no latency).
    tensor_producer : array_like of int, shape (n_tensors,)
        Node number that makes each tensor.
    tensor_key : sequence, length n_tensors
        The edge attribute ``tensor`` that names each tensor (``None`` for a node's only one).
    tensor_nbytes : array_like of int, shape (n_tensors,)
        Bytes of each tensor.
    use_tensor, use_consumer : array_like of int, shape (n_uses,)
        Every (tensor, consumer node) pair, each once.
    copy_alpha_us, copy_us_per_byte : array_like of float, shape (n_targets, n_targets)
        Copy cost coefficients from target ``s`` (row) to target ``d`` (column); the diagonal
        is ignored (a tensor is never copied to where it already is).
    memory_bytes : array_like of float, shape (n_targets,), optional
        Memory capacity of each target, ``inf`` for no cap. Default: no caps.
    copy_points : dict, optional
        ``{(source, destination): [(bytes, us), ...] or CopyCost}`` (target names or numbers): copies measured size by size,
        priced by :class:`CopyCost`'s interpolation instead of the line for that pair.
    position : array_like of int, shape (n_nodes,), optional
        Where each node runs in the program (any increasing numbers; ties allowed). Default: node
        order. Tensors are live from their producer's position to their last consumer's.
    copy_handoff_us : array_like of float, shape (n_targets, n_targets), optional
        Extra latency of a copy from ``s`` to ``d`` whose tensor feeds a kernel (a consumer that makes a tensor
        itself, not only a sink such as the model's output; :attr:`tensor_feeds_kernel`): see
        :attr:`CopyCost.handoff_us`. Default: none.
    copy_handoff_us_per_byte : array_like of float, shape (n_targets, n_targets), optional
        The hand-off's part per byte of the tensor (:attr:`CopyCost.handoff_us_per_byte`). Default: none.

    Raises
    ------
    PlacementError
        If the arrays do not fit together, a cost is negative or not a number, or a pin
        names an unknown target.
    InfeasiblePlacementError
        If a node is supported on no target, or is pinned to a target that does not support
        it.
    """

    def __init__(
        self,
        nodes: Sequence[Hashable],
        targets: Sequence[str],
        latency_us,
        pinned,
        weight_bytes,
        output_bytes,
        resident,
        tensor_producer,
        tensor_key: Sequence,
        tensor_nbytes,
        use_tensor,
        use_consumer,
        copy_alpha_us,
        copy_us_per_byte,
        memory_bytes=None,
        copy_points=None,
        position=None,
        copy_handoff_us=None,
        copy_handoff_us_per_byte=None,
    ):
        self.nodes = tuple(nodes)
        self.targets = tuple(str(t) for t in targets)
        n, k = len(self.nodes), len(self.targets)
        self.latency_us = np.asarray(latency_us, dtype=np.float64).reshape(n, k)
        self.pinned = np.asarray(pinned, dtype=np.int64).reshape(n)
        self.weight_bytes = np.asarray(weight_bytes, dtype=np.int64).reshape(n)
        self.output_bytes = np.asarray(output_bytes, dtype=np.int64).reshape(n)
        self.resident = np.asarray(resident, dtype=bool).reshape(n)
        self.tensor_producer = np.asarray(tensor_producer, dtype=np.int64).reshape(-1)
        self.tensor_key = tuple(tensor_key)
        self.tensor_nbytes = np.asarray(tensor_nbytes, dtype=np.int64).reshape(-1)
        self.use_tensor = np.asarray(use_tensor, dtype=np.int64).reshape(-1)
        self.use_consumer = np.asarray(use_consumer, dtype=np.int64).reshape(-1)
        self.copy_alpha_us = np.array(copy_alpha_us, dtype=np.float64).reshape(k, k)
        self.copy_us_per_byte = np.array(copy_us_per_byte, dtype=np.float64).reshape(k, k)
        np.fill_diagonal(self.copy_alpha_us, 0.0)
        np.fill_diagonal(self.copy_us_per_byte, 0.0)
        self.copy_handoff_us = (np.zeros((k, k)) if copy_handoff_us is None
                                else np.array(copy_handoff_us, dtype=np.float64).reshape(k, k))
        np.fill_diagonal(self.copy_handoff_us, 0.0)
        self.copy_handoff_us_per_byte = (np.zeros((k, k)) if copy_handoff_us_per_byte is None
                                         else np.array(copy_handoff_us_per_byte, dtype=np.float64).reshape(k, k))
        np.fill_diagonal(self.copy_handoff_us_per_byte, 0.0)
        #: ``{(s, d): CopyCost}`` for the pairs whose copies were measured size by size (else the line).
        self.copy_points = {}
        for (src, dst), pts in (copy_points or {}).items():
            ts, td = (self.targets.index(x) if isinstance(x, str) else int(x) for x in (src, dst))
            if ts != td:
                if isinstance(pts, CopyCost):
                    pts = pts.points
                self.copy_points[(ts, td)] = CopyCost(self.copy_alpha_us[ts, td], self.copy_us_per_byte[ts, td], pts,
                                                      handoff_us=self.copy_handoff_us[ts, td],
                                                      handoff_us_per_byte=self.copy_handoff_us_per_byte[ts, td])
        if memory_bytes is None:
            memory_bytes = np.full(k, np.inf)
        self.memory_bytes = np.asarray(memory_bytes, dtype=np.float64).reshape(k)
        self.position = np.arange(n, dtype=np.int64) if position is None else (
            np.asarray(position, dtype=np.int64).reshape(n))
        self._check()

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_graph(
        cls,
        graph,
        copy_cost: Mapping,
        targets: Sequence[str] | None = None,
        memory_bytes: Mapping[str, float] | None = None,
        pins: Mapping | None = None,
    ) -> PlacementProblem:
        """Read a placement problem off an op graph.

        Parameters
        ----------
        graph : networkx.DiGraph
            The op graph (a DAG; the cost model itself does not need acyclicity). Node
            attributes, all optional: ``latency_us`` (dict target -> microseconds; a target
            missing from the dict does not support the node; no attribute at all means the
            node costs 0 everywhere), ``pinned`` (target name), ``weight_bytes`` (int),
            ``resident`` (bool), ``output_bytes`` (int; default the largest ``nbytes`` of its
            out-edges, 0 without any). Edge attributes: ``nbytes`` (int, default 0) and
            ``tensor`` (key telling apart several tensors of one producer; edges without it
            carry the producer's single tensor). Where edges of one tensor disagree on
            ``nbytes``, the largest is used. The nodes' ``position`` in the program (what tensors are
            live together, for memory) is the graph's topological order, ties broken by the node
            attribute ``order`` (a program's binding order, as :func:`autoplace.graph.op_graph` gives
            it), then by insertion order.
        copy_cost : mapping
            ``{(src_target, dst_target): (alpha_us, us_per_byte)}`` (or :class:`CopyCost`).
            Every ordered pair of distinct targets needs an entry.
        targets : sequence of str, optional
            Targets to place on, in order. Default: every target named in a ``latency_us``
            dict (in node order), then in ``copy_cost``, in first-seen order. With an explicit list, targets
            outside it are ignored in ``latency_us`` and ``copy_cost``.
        memory_bytes : mapping of str to int, optional
            Memory capacity per target in bytes; targets not listed (or ``None``) have no cap.
        pins : mapping, optional
            Extra ``{node: target}`` pins, merged with the nodes' ``pinned`` attributes.

        Returns
        -------
        PlacementProblem

        Raises
        ------
        PlacementError
            On unknown nodes or targets in ``pins``/``memory_bytes``, contradictory pins or a
            missing ``copy_cost`` pair.
        InfeasiblePlacementError
            If a node is supported nowhere, or pinned where it is not supported.

        Examples
        --------
        >>> import networkx as nx
        >>> g = nx.DiGraph()
        >>> g.add_node("x", pinned="cpu")
        >>> g.add_node("mm", latency_us={"cpu": 100.0, "gpu": 10.0})
        >>> g.add_edge("x", "mm", nbytes=4096)
        >>> cost = {("cpu", "gpu"): (5.0, 1e-3), ("gpu", "cpu"): (5.0, 1e-3)}
        >>> p = PlacementProblem.from_graph(g, cost)
        >>> p.targets
        ('cpu', 'gpu')
        """
        nodes = list(graph.nodes)
        index = {v: i for i, v in enumerate(nodes)}
        node_attrs = [graph.nodes[v] for v in nodes]

        # targets, first seen
        if targets is None:
            seen: dict[str, None] = {}
            for attrs in node_attrs:
                for t in attrs.get("latency_us") or {}:
                    seen.setdefault(t, None)
            for s, d in copy_cost:
                seen.setdefault(s, None)
                seen.setdefault(d, None)
            targets = list(seen)
        targets = [str(t) for t in targets]
        if not targets:
            raise PlacementError(
                "no targets: give `targets`, or latency_us dicts / copy_cost pairs that name some"
            )
        if len(set(targets)) != len(targets):
            raise PlacementError(f"targets {targets} name a target twice")
        tindex = {t: d for d, t in enumerate(targets)}
        n, k = len(nodes), len(targets)

        def target_number(name, what: str) -> int:
            if name not in tindex:
                raise PlacementError(
                    f"{what} names target {name!r}, which is not among the targets {targets}: "
                    f"fix the name or add {name!r} to `targets`"
                )
            return tindex[name]

        # latency, pins, bytes
        latency = np.zeros((n, k))
        weight = np.zeros(n, dtype=np.int64)
        resident = np.zeros(n, dtype=bool)
        pinned = np.full(n, -1, dtype=np.int64)
        for i, attrs in enumerate(node_attrs):
            lat = attrs.get("latency_us")
            if lat is not None:
                latency[i, :] = np.inf
                for t, us in lat.items():
                    if t in tindex:
                        latency[i, tindex[t]] = float(us)
            if attrs.get("pinned") is not None:
                pinned[i] = target_number(attrs["pinned"], f"node {nodes[i]!r} attribute `pinned`")
            weight[i] = int(attrs.get("weight_bytes", 0) or 0)
            resident[i] = bool(attrs.get("resident", False))
        for v, t in (pins or {}).items():
            if v not in index:
                raise PlacementError(f"pins name node {v!r}, which is not in the graph")
            d = target_number(t, f"pins[{v!r}]")
            i = index[v]
            if pinned[i] >= 0 and pinned[i] != d:
                raise PlacementError(
                    f"contradictory pins for node {v!r}: its `pinned` attribute says "
                    f"{targets[pinned[i]]!r} but pins says {t!r}: drop one of them"
                )
            pinned[i] = d

        # tensors and their uses
        tensor_of: dict[tuple, int] = {}
        producer, key, nbytes = [], [], []
        uses: dict[tuple[int, int], None] = {}
        out_max = np.zeros(n, dtype=np.int64)
        for u, v, data in graph.edges(data=True):
            i, j = index[u], index[v]
            if i == j:
                raise PlacementError(f"node {u!r} consumes its own output (a self loop): remove the edge")
            tkey = data.get("tensor")
            b = int(data.get("nbytes", 0) or 0)
            t = tensor_of.get((i, tkey))
            if t is None:
                t = tensor_of[(i, tkey)] = len(producer)
                producer.append(i)
                key.append(tkey)
                nbytes.append(b)
            else:
                nbytes[t] = max(nbytes[t], b)
            uses.setdefault((t, j), None)
            out_max[i] = max(out_max[i], b)
        output = np.array(
            [
                int(a["output_bytes"]) if a.get("output_bytes") is not None else out_max[i]
                for i, a in enumerate(node_attrs)
            ],
            dtype=np.int64,
        )
        use_pairs = np.array(list(uses), dtype=np.int64).reshape(-1, 2)

        # copy costs
        alpha = np.zeros((k, k))
        beta = np.zeros((k, k))
        handoff = np.zeros((k, k))
        handoff_per_byte = np.zeros((k, k))
        points = {}
        for s in range(k):
            for d in range(k):
                if s == d:
                    continue
                pair = (targets[s], targets[d])
                if pair not in copy_cost:
                    raise PlacementError(
                        f"copy_cost has no entry for {pair}: add copy_cost[{pair!r}] = "
                        "(alpha_us, us_per_byte), or leave one of the targets out of `targets`"
                    )
                alpha[s, d], beta[s, d] = (float(x) for x in copy_cost[pair])
                handoff[s, d] = float(getattr(copy_cost[pair], "handoff_us", 0.0))
                handoff_per_byte[s, d] = float(getattr(copy_cost[pair], "handoff_us_per_byte", 0.0))
                if getattr(copy_cost[pair], "points", None) is not None:
                    points[(s, d)] = copy_cost[pair]

        caps = np.full(k, np.inf)
        for t, cap in (memory_bytes or {}).items():
            d = target_number(t, "memory_bytes")
            if cap is not None:
                try:
                    caps[d] = float(cap)
                except (TypeError, ValueError):
                    raise PlacementError(f"memory_bytes[{t!r}] = {cap!r} is not a number of bytes (e.g. 8e9)") from None
                if not caps[d] >= 0:
                    raise PlacementError(f"memory_bytes[{t!r}] = {cap!r}: a memory cap is a number of bytes >= 0")

        return cls(
            nodes, targets, latency, pinned, weight, output, resident,
            producer, key, nbytes, use_pairs[:, 0], use_pairs[:, 1], alpha, beta, caps, points,
            _program_positions(graph, nodes), handoff, handoff_per_byte,
        )  # fmt: skip

    def _check(self) -> None:
        n, k = len(self.nodes), len(self.targets)
        if len(set(self.nodes)) != n:
            raise PlacementError("node names must be unique")
        m = len(self.tensor_producer)
        if len(self.tensor_key) != m or len(self.tensor_nbytes) != m:
            raise PlacementError("tensor_producer, tensor_key and tensor_nbytes differ in length")
        if len(self.use_tensor) != len(self.use_consumer):
            raise PlacementError("use_tensor and use_consumer differ in length")
        if m and (self.tensor_producer.min() < 0 or self.tensor_producer.max() >= n):
            raise PlacementError("tensor_producer holds a node number out of range")
        if len(self.use_tensor) and (
            self.use_tensor.min() < 0 or self.use_tensor.max() >= m
            or self.use_consumer.min() < 0 or self.use_consumer.max() >= n
        ):  # fmt: skip
            raise PlacementError("use_tensor/use_consumer hold a number out of range")
        if np.isnan(self.latency_us).any() or (self.latency_us < 0).any():
            i, d = np.argwhere(np.isnan(self.latency_us) | (self.latency_us < 0))[0]
            raise PlacementError(
                f"node {self.nodes[i]!r} has latency_us[{self.targets[d]!r}] = "
                f"{self.latency_us[i, d]}: latencies must be numbers >= 0"
            )
        for name, arr in (("alpha_us", self.copy_alpha_us), ("us_per_byte", self.copy_us_per_byte),
                          ("handoff_us", self.copy_handoff_us),
                          ("handoff_us_per_byte", self.copy_handoff_us_per_byte)):
            bad = ~np.isfinite(arr) | (arr < 0)
            if bad.any():
                s, d = np.argwhere(bad)[0]
                raise PlacementError(
                    f"copy cost {name} from {self.targets[s]!r} to {self.targets[d]!r} is "
                    f"{arr[s, d]}: it must be a finite number >= 0"
                )
        for (s, d), curve in self.copy_points.items():
            sizes, us = curve.points.T
            if not (np.isfinite(sizes).all() and np.isfinite(us).all()) or (sizes < 0).any() or (us < 0).any():
                raise PlacementError(
                    f"copy_points from {self.targets[s]!r} to {self.targets[d]!r} hold a size or time that is "
                    "not a finite number >= 0: give measured (bytes, us) pairs, or leave the pair out for the line"
                )
        for name, arr in (("weight_bytes", self.weight_bytes), ("output_bytes", self.output_bytes)):
            if (arr < 0).any():
                raise PlacementError(f"node {self.nodes[np.argmax(arr < 0)]!r} has {name} < 0")
        if (self.tensor_nbytes < 0).any():
            raise PlacementError("a tensor has nbytes < 0")
        if np.isnan(self.memory_bytes).any() or (self.memory_bytes < 0).any():
            raise PlacementError("memory_bytes must be >= 0 (or absent for no cap)")
        if ((self.pinned < -1) | (self.pinned >= k)).any():
            raise PlacementError("pinned holds a target number out of range")

        supported = np.isfinite(self.latency_us)
        nowhere = ~supported.any(axis=1)
        if nowhere.any():
            i = int(np.argmax(nowhere))
            raise InfeasiblePlacementError(
                f"node {self.nodes[i]!r} is supported on no target of {list(self.targets)}: "
                f"add one of them to its latency_us, or remove the node"
            )
        rows = np.nonzero(self.pinned >= 0)[0]
        bad = rows[~supported[rows, self.pinned[rows]]]
        if len(bad):
            i = int(bad[0])
            t = self.targets[self.pinned[i]]
            where = [self.targets[d] for d in np.nonzero(supported[i])[0]]
            raise InfeasiblePlacementError(
                f"node {self.nodes[i]!r} is pinned to {t!r}, which does not support it "
                f"(supported on {where}): unpin node {self.nodes[i]!r} or add {t!r} to its "
                "latency_us"
            )

    # ------------------------------------------------------------------ derived data

    @property
    def n_nodes(self) -> int:
        return len(self.nodes)

    @property
    def n_targets(self) -> int:
        return len(self.targets)

    @property
    def n_tensors(self) -> int:
        return len(self.tensor_producer)

    @cached_property
    def node_index(self) -> dict:
        """``{node name: node number}``."""
        return {v: i for i, v in enumerate(self.nodes)}

    @cached_property
    def allowed(self) -> np.ndarray:
        """Bool array (n_nodes, n_targets): the target supports the node and pins allow it."""
        ok = np.isfinite(self.latency_us)
        rows = np.nonzero(self.pinned >= 0)[0]
        ok[rows] = False
        ok[rows, self.pinned[rows]] = True
        return ok

    def copy_us(self, s: int, d: int, nbytes: float) -> float:
        """Latency of copying ``nbytes`` from target ``s`` to target ``d`` (numbers), 0 on one target."""
        if s == d:
            return 0.0
        if (s, d) in self.copy_points:
            return float(self.copy_points[(s, d)](nbytes))
        return float(self.copy_alpha_us[s, d]) + float(nbytes) * float(self.copy_us_per_byte[s, d])

    @cached_property
    def copy_latency_us(self) -> np.ndarray:
        """Float array (n_tensors, n_targets, n_targets): latency of copying tensor t from s to d.

        Zero on the diagonal and for tensors of resident nodes.
        """
        nb = self.tensor_nbytes.astype(np.float64)[:, None, None]
        lat = self.copy_alpha_us[None] + nb * self.copy_us_per_byte[None]
        for (s, d), curve in self.copy_points.items():
            lat[:, s, d] = curve(self.tensor_nbytes)
        handoff = self.copy_handoff_us[None] + nb * self.copy_handoff_us_per_byte[None]
        lat = lat + self.tensor_feeds_kernel[:, None, None] * handoff
        lat[self.resident[self.tensor_producer]] = 0.0
        idx = np.arange(self.n_targets)
        lat[:, idx, idx] = 0.0
        return lat

    @cached_property
    def tensor_feeds_kernel(self) -> np.ndarray:
        """Bool array (n_tensors,): some consumer of the tensor makes a tensor itself (a kernel, not only a sink
        such as the model's output): a copy of it to a target pays that pair's hand-off (:attr:`copy_handoff_us`)."""
        makes = np.zeros(self.n_nodes, dtype=bool)
        makes[self.tensor_producer] = True
        feeds = np.zeros(self.n_tensors, dtype=bool)
        np.logical_or.at(feeds, self.use_tensor, makes[self.use_consumer])
        return feeds

    @cached_property
    def footprint_bytes(self) -> np.ndarray:
        """Int array (n_nodes,): a node's weights and output, what it needs at least where it runs."""
        return self.weight_bytes + self.output_bytes

    @cached_property
    def source(self) -> np.ndarray:
        """Bool array (n_nodes,): nodes that read no tensor and are not resident: a model's inputs, which the
        caller holds for the whole run."""
        reads = np.zeros(self.n_nodes, dtype=bool)
        reads[self.use_consumer] = True
        return ~reads & ~self.resident

    @cached_property
    def carried_bytes(self) -> np.ndarray:
        """Int array (n_nodes,): bytes of the tensors each node's out-edges carry."""
        return np.bincount(self.tensor_producer, weights=self.tensor_nbytes, minlength=self.n_nodes).astype(np.int64)

    @cached_property
    def static_bytes(self) -> np.ndarray:
        """Int array (n_nodes,): bytes a node holds for the whole run on the target it is placed on: its
        weights; a resident node's tensors too (the larger of its ``weight_bytes`` and ``output_bytes``), and
        an input's (:attr:`source`: its weights and the larger of its ``output_bytes`` and its tensors' bytes)."""
        held = np.where(self.source, self.weight_bytes + np.maximum(self.output_bytes, self.carried_bytes),
                        self.weight_bytes)
        return np.where(self.resident, np.maximum(self.weight_bytes, self.output_bytes), held).astype(np.int64)

    @cached_property
    def live_items(self) -> dict:
        """The activations a placement holds, each live over an interval of program positions.

        Returns
        -------
        dict of numpy.ndarray, one entry per item
            ``producer`` (node number), ``tensor`` (tensor number; -1 for an output no edge carries),
            ``nbytes``, ``first`` and ``last`` (positions, inclusive), ``placed`` (whether it counts on its
            producer's target: not an input's, held there for the whole run, :attr:`static_bytes`, only its
            copies). Every tensor of a non-resident node, from its producer's position to its last
            consumer's; and for a non-resident node whose ``output_bytes`` exceed its tensors' bytes, the
            rest, at its own position. And ``row_of_tensor``: each tensor's item (-1 for a resident one).
        """
        pos = self.position
        first = pos[self.tensor_producer].copy()
        last = first.copy()
        np.minimum.at(first, self.use_tensor, pos[self.use_consumer])  # an order that is not topological
        np.maximum.at(last, self.use_tensor, pos[self.use_consumer])
        extra = np.maximum(self.output_bytes - self.carried_bytes, 0)
        rest = np.nonzero((extra > 0) & ~self.resident & ~self.source)[0]
        keep = np.nonzero(~self.resident[self.tensor_producer])[0]
        row_of_tensor = np.full(self.n_tensors, -1, dtype=np.int64)
        row_of_tensor[keep] = np.arange(len(keep))
        return dict(
            row_of_tensor=row_of_tensor,
            placed=np.concatenate([~self.source[self.tensor_producer[keep]], np.ones(len(rest), dtype=bool)]),
            producer=np.concatenate([self.tensor_producer[keep], rest]).astype(np.int64),
            tensor=np.concatenate([keep, np.full(len(rest), -1)]).astype(np.int64),
            nbytes=np.concatenate([self.tensor_nbytes[keep], extra[rest]]).astype(np.int64),
            first=np.concatenate([first[keep], pos[rest]]).astype(np.int64),
            last=np.concatenate([last[keep], pos[rest]]).astype(np.int64),
        )

    @cached_property
    def live_matrix(self):
        """Sparse 0/1 matrix (n_points, n_items) of :attr:`live_items`: which items are live together at each
        program point that can be the busiest: a position where some item starts and some item ends before
        the next one starts (elsewhere the live set is contained in the one at the start before it, or at the
        next start)."""
        import scipy.sparse as sp

        items = self.live_items
        first, last = items["first"], items["last"]
        starts = np.unique(first)
        following = np.append(starts[1:], np.iinfo(np.int64).max)
        ends = np.sort(last)
        points = starts[np.searchsorted(ends, starts, side="left") < np.searchsorted(ends, following, side="left")]
        lo = np.searchsorted(points, first, side="left")
        hi = np.searchsorted(points, last, side="right")
        length = np.maximum(hi - lo, 0)
        total = int(length.sum())
        cols = np.repeat(np.arange(len(first)), length)
        rows = np.arange(total) - np.repeat(np.cumsum(length) - length, length) + np.repeat(lo, length)
        return sp.csr_array((np.ones(total), (rows, cols)), shape=(len(points), len(first)))

    def memory_use(self, target_of, copy_tensor=None, copy_dst=None) -> np.ndarray:
        """Bytes used on each target (see the class docstring) by the placement ``target_of`` (target number of
        each node) with copies of tensors ``copy_tensor[j]`` to targets ``copy_dst[j]`` (default: the copies the
        placement needs, one per tensor and destination of its consumers)."""
        k = self.n_targets
        target_of = np.asarray(target_of, dtype=np.int64)
        if copy_tensor is None:
            src = target_of[self.tensor_producer[self.use_tensor]]
            dst = target_of[self.use_consumer]
            code = np.unique(self.use_tensor[src != dst] * k + dst[src != dst])
            copy_tensor, copy_dst = code // k, code % k
        copy_tensor, copy_dst = np.asarray(copy_tensor, dtype=np.int64), np.asarray(copy_dst, dtype=np.int64)
        static = np.bincount(target_of, weights=self.static_bytes, minlength=k).astype(np.float64)
        resident = self.resident[self.tensor_producer[copy_tensor]]
        static += np.bincount(copy_dst[resident], weights=self.tensor_nbytes[copy_tensor[resident]], minlength=k)
        items = self.live_items
        present = np.zeros((len(items["nbytes"]), k), dtype=bool)
        present[np.arange(len(items["nbytes"])), target_of[items["producer"]]] = items["placed"]
        rows = items["row_of_tensor"][copy_tensor]
        present[rows[rows >= 0], copy_dst[rows >= 0]] = True
        live = self.live_matrix @ (present * items["nbytes"][:, None].astype(np.float64))
        return static + (live.max(axis=0) if live.shape[0] else 0.0)

    @property
    def has_memory_caps(self) -> bool:
        return bool(np.isfinite(self.memory_bytes).any())

    # ------------------------------------------------------------------ assignments

    def assignment_index(self, assignment: Mapping) -> np.ndarray:
        """Turn ``{node: target name}`` into an int array of target numbers per node.

        Raises
        ------
        PlacementError
            If a node is missing from ``assignment``, or a target name is unknown.
        """
        tindex = {t: d for d, t in enumerate(self.targets)}
        missing = [v for v in self.nodes if v not in assignment]
        if missing:
            more = f" (and {len(missing) - 5} more)" if len(missing) > 5 else ""
            raise PlacementError(
                f"the assignment gives no target for nodes {missing[:5]}{more}: "
                "assign every node of the problem"
            )
        out = np.empty(self.n_nodes, dtype=np.int64)
        for i, v in enumerate(self.nodes):
            t = assignment[v]
            if t not in tindex:
                raise PlacementError(
                    f"the assignment puts node {v!r} on {t!r}, which is not among the targets "
                    f"{list(self.targets)}"
                )
            out[i] = tindex[t]
        return out

    def assignment_dict(self, target_numbers) -> dict:
        """Turn an int array of target numbers per node into ``{node: target name}``."""
        return {v: self.targets[int(d)] for v, d in zip(self.nodes, target_numbers, strict=True)}

    # ------------------------------------------------------------------ JSON

    def to_dict(self) -> dict:
        """A JSON-serialisable dict (``inf`` becomes ``None``); see :meth:`from_dict`.

        Node names and tensor keys must themselves be JSON-serialisable (str, int, or
        tuples of those, which come back as tuples).
        """
        return {
            "nodes": list(self.nodes),
            "targets": list(self.targets),
            "latency_us": [[_finite_or_none(x) for x in row] for row in self.latency_us],
            "pinned": self.pinned.tolist(),
            "weight_bytes": self.weight_bytes.tolist(),
            "output_bytes": self.output_bytes.tolist(),
            "resident": self.resident.tolist(),
            "tensor_producer": self.tensor_producer.tolist(),
            "tensor_key": list(self.tensor_key),
            "tensor_nbytes": self.tensor_nbytes.tolist(),
            "use_tensor": self.use_tensor.tolist(),
            "use_consumer": self.use_consumer.tolist(),
            "copy_alpha_us": self.copy_alpha_us.tolist(),
            "copy_us_per_byte": self.copy_us_per_byte.tolist(),
            "memory_bytes": [_finite_or_none(x) for x in self.memory_bytes],
            "copy_points": [[s, d, c.points.tolist()] for (s, d), c in self.copy_points.items()],
            "position": self.position.tolist(),
            "copy_handoff_us": self.copy_handoff_us.tolist(),
            "copy_handoff_us_per_byte": self.copy_handoff_us_per_byte.tolist(),
        }

    @classmethod
    def from_dict(cls, data: Mapping) -> PlacementProblem:
        """Rebuild a problem written by :meth:`to_dict` (after a JSON round trip or not)."""
        k = len(data["targets"])
        n = len(data["nodes"])

        def inf_for_none(values, shape):
            arr = np.array([np.inf if x is None else x for x in np.ravel(np.array(values, dtype=object))],
                           dtype=np.float64)  # fmt: skip
            return arr.reshape(shape)

        return cls(
            nodes=[_json_node(v) for v in data["nodes"]],
            targets=data["targets"],
            latency_us=inf_for_none(data["latency_us"], (n, k)),
            pinned=data["pinned"],
            weight_bytes=data["weight_bytes"],
            output_bytes=data["output_bytes"],
            resident=data["resident"],
            tensor_producer=data["tensor_producer"],
            tensor_key=[_json_node(x) for x in data["tensor_key"]],
            tensor_nbytes=data["tensor_nbytes"],
            use_tensor=data["use_tensor"],
            use_consumer=data["use_consumer"],
            copy_alpha_us=data["copy_alpha_us"],
            copy_us_per_byte=data["copy_us_per_byte"],
            memory_bytes=inf_for_none(data["memory_bytes"], (k,)),
            copy_points={(int(s), int(d)): pts for s, d, pts in data.get("copy_points", [])},
            position=data.get("position"),
            copy_handoff_us=data.get("copy_handoff_us"),
            copy_handoff_us_per_byte=data.get("copy_handoff_us_per_byte"),
        )

    def __repr__(self) -> str:
        caps = ", ".join(f"{t}={int(c)}" for t, c in zip(self.targets, self.memory_bytes) if math.isfinite(c))
        return (
            f"PlacementProblem({self.n_nodes} nodes, {self.n_tensors} tensors, "
            f"{len(self.use_tensor)} uses, targets={list(self.targets)}, "
            f"pinned={int((self.pinned >= 0).sum())}" + (f", memory caps: {caps}" if caps else "") + ")"
        )
