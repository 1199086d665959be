"""A placement plan: the record a solver hands back (assignment, cost, proof of quality)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from .cost import evaluate
from .problem import PlacementProblem, _json_node

__all__ = ["Copy", "PlacementPlan", "relative_gap"]

#: statuses a plan can have
STATUSES = ("optimal", "feasible", "infeasible")


def relative_gap(objective_us: float, bound_us: float) -> float:
    """``(objective - bound) / objective``, 0 when both are 0, never negative."""
    if not math.isfinite(bound_us):
        return math.inf
    if objective_us <= 0:
        return 0.0 if bound_us >= objective_us - 1e-12 else math.inf
    return max(0.0, (objective_us - bound_us) / objective_us)


class Copy(NamedTuple):
    """One tensor copy a plan needs (shared by every consumer on ``dst``); a plain tuple
    ``(producer, tensor, src, dst, nbytes, latency_us)``.

    Attributes
    ----------
    producer : hashable
        Node that makes the tensor.
    tensor : hashable or None
        The tensor's key among the producer's outputs (``None`` for its only one).
    src, dst : str
        Source and destination target.
    nbytes : int
        Bytes copied.
    latency_us : float
        Latency of the copy (0 for resident tensors, present from load time).
    """

    producer: object
    tensor: object
    src: str
    dst: str
    nbytes: int
    latency_us: float


@dataclass
class PlacementPlan:
    """Where every node runs, what that costs, and how close to optimal it is proven to be.

    Attributes
    ----------
    assignment : dict
        ``{node: target name}`` for every node of the problem.
    objective_us : float
        Total latency in microseconds: ``compute_us + copy_us``.
    compute_us, copy_us : float
        Sum of node latencies, and of copy latencies.
    copies : list of Copy
        Every copy the plan needs; each unpacks as
        ``(producer, tensor_key, src, dst, nbytes, latency_us)``.
    status : {"optimal", "feasible", "infeasible"}
        ``"optimal"``: proven optimal within the solver's relative gap tolerance (exactly, for
        min-cut and brute force). ``"feasible"``: a valid plan with no such proof (a time limit
        struck, or a heuristic made it).
    bound_us : float
        Proven lower bound on the optimal objective (``-inf`` when unknown, e.g. baselines).
    gap : float
        ``(objective_us - bound_us) / objective_us``.
    solve_time_s : float
        Wall time of the solve, model building included.
    method : str
        Which solver made the plan (``"mincut"``, ``"ilp"``, ``"greedy"``, ...).
    compute_us_by_target, memory_bytes_by_target : dict
        Compute latency and (conservative) memory use per target name.
    info : dict
        Solver details (phases, timings); JSON-serialisable.
    """

    assignment: dict
    objective_us: float
    compute_us: float
    copy_us: float
    copies: list
    status: str
    bound_us: float
    gap: float
    solve_time_s: float
    method: str
    compute_us_by_target: dict = field(default_factory=dict)
    memory_bytes_by_target: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)

    @classmethod
    def from_target_numbers(
        cls,
        problem: PlacementProblem,
        target_of,
        *,
        method: str,
        status: str = "feasible",
        bound_us: float = -math.inf,
        solve_time_s: float = 0.0,
        info: Mapping | None = None,
    ) -> PlacementPlan:
        """Make a plan from target numbers per node, costing it with :func:`.cost.evaluate`.

        ``bound_us`` is clipped to the objective (a bound cannot exceed a feasible value; a
        hair above it is solver round-off).
        """
        target_of = np.asarray(target_of, dtype=np.int64)
        c = evaluate(problem, target_of)
        obj = c.objective_us
        bound = min(float(bound_us), obj)
        copies = [
            Copy(
                producer=problem.nodes[problem.tensor_producer[t]],
                tensor=problem.tensor_key[t],
                src=problem.targets[s],
                dst=problem.targets[d],
                nbytes=int(problem.tensor_nbytes[t]),
                latency_us=float(lat),
            )
            for t, s, d, lat in zip(c.copy_tensor, c.copy_src, c.copy_dst, c.copy_latency_us)
        ]
        return cls(
            assignment=problem.assignment_dict(target_of),
            objective_us=obj,
            compute_us=c.compute_us,
            copy_us=c.copy_us,
            copies=copies,
            status=status,
            bound_us=bound,
            gap=relative_gap(obj, bound),
            solve_time_s=float(solve_time_s),
            method=method,
            compute_us_by_target=dict(zip(problem.targets, map(float, c.compute_us_by_target))),
            memory_bytes_by_target=dict(zip(problem.targets, map(float, c.memory_bytes))),
            info=dict(info or {}),
        )

    def per_target(self) -> dict:
        """``{target: {"nodes": [...], "compute_us": float, "memory_bytes": float}}``."""
        out = {
            t: {"nodes": [], "compute_us": us, "memory_bytes": self.memory_bytes_by_target.get(t, 0.0)}
            for t, us in self.compute_us_by_target.items()
        }
        for v, t in self.assignment.items():
            out.setdefault(t, {"nodes": [], "compute_us": 0.0, "memory_bytes": 0.0})["nodes"].append(v)
        return out

    def to_dict(self) -> dict:
        """A JSON-serialisable dict; see :meth:`from_dict`. Infinite numbers become ``None``."""

        def num(x):
            return None if not math.isfinite(x) else float(x)

        return {
            "assignment": [[v, t] for v, t in self.assignment.items()],
            "objective_us": self.objective_us,
            "compute_us": self.compute_us,
            "copy_us": self.copy_us,
            "copies": [list(c) for c in self.copies],
            "status": self.status,
            "bound_us": num(self.bound_us),
            "gap": num(self.gap),
            "solve_time_s": self.solve_time_s,
            "method": self.method,
            "compute_us_by_target": dict(self.compute_us_by_target),
            "memory_bytes_by_target": dict(self.memory_bytes_by_target),
            "info": dict(self.info),
        }

    @classmethod
    def from_dict(cls, data: Mapping) -> PlacementPlan:
        """Rebuild a plan written by :meth:`to_dict`."""
        return cls(
            assignment={_json_node(v): t for v, t in data["assignment"]},
            objective_us=float(data["objective_us"]),
            compute_us=float(data["compute_us"]),
            copy_us=float(data["copy_us"]),
            copies=[
                Copy(_json_node(p), _json_node(k), s, d, int(b), float(us))
                for p, k, s, d, b, us in data["copies"]
            ],
            status=data["status"],
            bound_us=-math.inf if data["bound_us"] is None else float(data["bound_us"]),
            gap=math.inf if data["gap"] is None else float(data["gap"]),
            solve_time_s=float(data["solve_time_s"]),
            method=data["method"],
            compute_us_by_target=dict(data.get("compute_us_by_target", {})),
            memory_bytes_by_target=dict(data.get("memory_bytes_by_target", {})),
            info=dict(data.get("info", {})),
        )

    def __repr__(self) -> str:
        counts: dict[str, int] = {}
        for t in self.assignment.values():
            counts[t] = counts.get(t, 0) + 1
        per = ", ".join(f"{t}: {c}" for t, c in counts.items())
        bound = f"{self.bound_us:.6g}" if math.isfinite(self.bound_us) else "unknown"
        return (
            f"PlacementPlan(method={self.method!r}, status={self.status!r}, "
            f"objective_us={self.objective_us:.6g} (compute {self.compute_us:.6g} + copy "
            f"{self.copy_us:.6g} in {len(self.copies)} copies), bound_us={bound}, "
            f"gap={self.gap:.3%}, nodes per target {{{per}}}, {self.solve_time_s:.3f} s)"
        )
