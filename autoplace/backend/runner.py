"""Run a built placement: weights uploaded once to their devices, inputs given as numpy."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from ..targets import TargetSet


def _to_numpy(value):
    if isinstance(value, (tuple, list)) or type(value).__name__ == "Array":
        return tuple(_to_numpy(v) for v in value)
    return value.numpy()


class Runner:
    """A loaded executable with its weights resident on their devices.

    Parameters
    ----------
    executable : tvm.relax.VMExecutable
    targets : TargetSet
        The device list given to the VM follows the vdevice order of the targets.
    params : list of array-like
        Weight values in ``main``'s order after the inputs.
    param_targets, input_targets : list of str
        Where each weight lives and where each input must be given.
    """

    def __init__(self, executable, targets: TargetSet, params, param_targets, input_targets):
        self.targets = TargetSet(targets)
        missing = self.targets.unavailable()
        if missing:
            raise RuntimeError(
                f"this machine cannot run targets {missing} (no such device here); build elsewhere or "
                "place on available targets only"
            )
        self.vm = relax.VirtualMachine(executable, self.targets.devices)
        self.input_targets = list(input_targets)
        self.weights = [
            tvm.runtime.tensor(np.asarray(p, order="C"), self.targets[t].device) for p, t in zip(params, param_targets)
        ]

    def device_inputs(self, inputs) -> list:
        if len(inputs) != len(self.input_targets):
            raise ValueError(f"the model takes {len(self.input_targets)} inputs, got {len(inputs)}")
        return [
            tvm.runtime.tensor(np.asarray(x, order="C"), self.targets[t].device) for x, t in zip(inputs, self.input_targets)
        ]

    def __call__(self, *inputs):
        out = self.vm["main"](*self.device_inputs(inputs), *self.weights)
        return _to_numpy(out)

    def time_us(self, inputs, *, number: int = 1, repeat: int = 10, min_repeat_ms: int = 0) -> np.ndarray:
        """End-to-end latency samples in microseconds (one per repeat), inputs already on device.

        Uses ``VirtualMachine.time_evaluator`` on ``main`` with the arguments given directly:
        ``number`` calls per sample, averaged. (Not ``set_input``/``invoke_stateful``: ``set_input``
        moves every argument to the first device, which breaks weights resident elsewhere.)
        """
        args = self.device_inputs(inputs) + self.weights
        timer = self.vm.time_evaluator(
            "main", self.targets.host.device, number=number, repeat=repeat, min_repeat_ms=min_repeat_ms
        )
        return np.asarray(timer(*args).results) * 1e6
