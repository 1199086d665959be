"""Graph views of a Relax model: one node per op binding (:func:`op_graph`) and the fused kernels
that actually run, with their costs per target (:func:`unit_graph`, what the solver places)."""

from .select import resolve_assignment, select_nodes
from .unit_graph import UnitGraph, producers, unit_graph
from .view import op_graph, tensor_nbytes, type_nbytes

__all__ = ["UnitGraph", "op_graph", "producers", "resolve_assignment", "select_nodes", "tensor_nbytes",
           "type_nbytes", "unit_graph"]
