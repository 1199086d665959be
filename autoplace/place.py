"""``autoplace.place``: apply a placement given by hand (or by the solver) and run it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import networkx as nx
import numpy as np

from .emit import AnnotatedModule, annotate
from .frontend import Model, load_model
from .graph import op_graph, resolve_assignment
from .targets import TargetSet


@dataclass
class Placement:
    """A model placed on targets: the annotated module, its weights and a runner.

    Attributes
    ----------
    mod : tvm.IRModule
        Standard Relax with vdevices on every tensor and explicit ``R.to_vdevice`` copies.
    params : list of numpy.ndarray
        Weights in the order ``main`` takes them after the model inputs.
    devices : list of tvm.runtime.Device
        The runtime devices in vdevice order (give them to ``relax.VirtualMachine`` in this order).
    assignment : dict
        ``{node: target}`` for every op, input and output node of :attr:`graph`.
    """

    model: Model
    graph: nx.DiGraph
    targets: TargetSet
    assignment: dict
    annotated: AnnotatedModule
    fuse: bool = True
    _runner: object = field(default=None, repr=False)
    _executable: object = field(default=None, repr=False)
    _memory: dict = field(default=None, repr=False)

    @property
    def mod(self):
        return self.annotated.mod

    @property
    def params(self) -> list:
        return self.annotated.params

    @property
    def devices(self) -> list:
        return self.targets.devices

    @property
    def copies(self) -> list[dict]:
        """Every ``to_vdevice`` in the module: source variable, src/dst target and bytes."""
        return self.annotated.copies

    @classmethod
    def from_assignment(cls, model: Model, graph: nx.DiGraph, assignment: Mapping[str, str] | None,
                        targets: TargetSet, *, fuse: bool = True) -> Placement:
        """Place an already loaded model whose op graph is already built (what :func:`place` does after
        loading; :func:`autoplace.optimize` and :func:`autoplace.compare` call this to build each
        expensive object once)."""
        full = resolve_assignment(graph, assignment, targets, default=targets.host.name)
        return cls(model, graph, targets, full, annotate(model, graph, full, targets), fuse)

    def build(self):
        """Compile once with autoplace's per-device fusing build (cached)."""
        if self._executable is None:
            from .backend import build

            self._executable = build(self.mod, fuse=self.fuse)
        return self._executable

    @property
    def runner(self):
        if self._runner is None:
            from .backend import Runner

            a = self.annotated
            self._runner = Runner(self.build(), self.targets, a.params, a.param_targets, a.input_targets,
                                  input_specs=self.model.input_specs())
        return self._runner

    def run(self, *inputs):
        """Run on numpy inputs (given on the host); returns numpy, a tuple for several outputs."""
        return self.runner(*inputs)

    def memory_bytes(self) -> dict[str, int]:
        """Bytes each target holds while this placement runs, as its build allocates them: the weights uploaded
        there, the inputs given there, and the activation memory TVM's static planner gives it (with each copy's
        destination buffer and the outputs, which the runtime allocates:
        :func:`autoplace.backend.pipeline.planned_allocations`). Read once per placement (it lowers the module)."""
        if self._memory is not None:
            return dict(self._memory)
        from .backend.pipeline import planned_allocations

        names = list(self.targets)
        out = {t: 0 for t in names}
        for index, nbytes in planned_allocations(self.mod, fuse=self.fuse).items():
            out[names[index]] += nbytes
        for value, target in zip(self.params, self.annotated.param_targets):
            out[target] += int(value.nbytes)
        for (_, shape, dtype), target in zip(self.model.input_specs(), self.annotated.input_targets):
            out[target] += int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        self._memory = out
        return dict(out)

    def ops_per_target(self) -> dict[str, int]:
        counts = {t: 0 for t in self.targets}
        for node, target in self.assignment.items():
            if self.graph.nodes[node].get("kind") == "op":
                counts[target] += 1
        return counts

    def __repr__(self) -> str:
        per = ", ".join(f"{t}: {n} ops" for t, n in self.ops_per_target().items())
        nbytes = sum(c["nbytes"] for c in self.copies)
        return f"Placement({self.model.name}; {per}; {len(self.copies)} copies, {nbytes} bytes)"


def place(mod, params=None, assignment: Mapping[str, str] | None = None, targets=None, *, fuse: bool = True,
          example_inputs=None, shapes=None) -> Placement:
    """Place a model by hand and emit it as annotated Relax.

    Parameters
    ----------
    mod : tvm.IRModule, torch.nn.Module, onnx.ModelProto, path or Model
        The model (see :func:`autoplace.load_model`).
    params : list or dict, optional
        Its weights (as ``relax.frontend.detach_params`` returns them).
    assignment : dict, optional
        ``{key: target name}``; a key is a node name as it prints in TVMScript (``"lv3"``), an op name
        (``"relax.nn.conv2d"``) or an instance (``"relax.nn.conv2d#0"``). A model input's name sets
        where it arrives; ``"output"`` sets where the outputs return. Unassigned nodes go to the first
        target.
    targets : dict
        ``{name: target}``, see :class:`autoplace.targets.TargetSet`. Default
        :data:`autoplace.targets.DEFAULT_TARGETS` (this machine's CPU).
    shapes : dict, optional
        ``{symbolic dimension: size}`` binding a model's symbolic dimensions, e.g. ``{"seq_len": 128}``
        (see :func:`autoplace.load_model`).

    Returns
    -------
    Placement

    Examples
    --------
    >>> p = place(mod, params, {"relax.nn.conv2d": "cpu1"}, {"cpu0": "llvm", "cpu1": "llvm"})  # doctest: +SKIP
    >>> p.run(x)  # doctest: +SKIP
    """
    model = load_model(mod, params, example_inputs=example_inputs, shapes=shapes)
    return Placement.from_assignment(model, op_graph(model), assignment, TargetSet(targets), fuse=fuse)
