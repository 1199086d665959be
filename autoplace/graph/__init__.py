"""Graph views of a Relax model: one node per op binding (``op_graph``) and the fused kernels
that actually run (``unit_graph``)."""

from .select import resolve_assignment, select_nodes
from .view import op_graph, tensor_nbytes, type_nbytes

__all__ = ["op_graph", "resolve_assignment", "select_nodes", "tensor_nbytes", "type_nbytes"]
