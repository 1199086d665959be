"""autoplace: measured, provably optimal device placement for Apache TVM Relax models.

Data flows one way through the package:
``frontend`` (read a model) -> ``graph`` (networkx view) -> ``profile`` (measured costs) ->
``cost_model`` (predicted costs) -> ``solve`` (placement problem -> plan) -> ``emit`` (annotated
Relax) -> ``build`` (compile, run) -> ``compare`` (measure plans side by side).
"""

from .backend.cpu_threads import use_physical_cores

use_physical_cores()  # before any kernel runs: TVM's default would leave half the cores of an x86 VM idle

from .comparison import compare
from .errors import AssignmentError, AutoplaceError, ModelError, TargetError
from .frontend import Model, load_model
from .graph import op_graph
from .optimizer import OptimizeResult, optimize
from .place import Placement, place
from .targets import TargetSet

__version__ = "0.1.0"

__all__ = [
    "AssignmentError",
    "AutoplaceError",
    "Model",
    "ModelError",
    "OptimizeResult",
    "Placement",
    "TargetError",
    "TargetSet",
    "compare",
    "load_model",
    "op_graph",
    "optimize",
    "place",
]
