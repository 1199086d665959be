"""Run a built placement: weights uploaded once to their devices, inputs given as numpy."""

from __future__ import annotations

import re

import numpy as np
import tvm
from tvm import relax

from ..errors import AutoplaceError, TargetError
from ..targets import TargetSet


def _to_numpy(value):
    if isinstance(value, (tuple, list)) or type(value).__name__ == "Array":
        return tuple(_to_numpy(v) for v in value)
    return value.numpy()


#: How TVM's VM names the parameter whose check failed (``ErrorContext(fn=main, loc=param[0], param=a,
#: annotation=R.Tensor((5, 7), dtype="float32", ...``): read to say which input was wrong when the
#: runner was not told the input signature.
_TVM_PARAM_CHECK = re.compile(
    r'loc=param\[(\d+)\], param=([^,\s]+), annotation=R\.Tensor\(\(([^)]*)\), dtype="(\w+)"'
)


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
    input_specs : list of (name, shape, dtype), optional
        The model's inputs (:meth:`autoplace.Model.input_specs`): every call checks its inputs
        against them first. Without them the runner learns an input's shape and dtype from TVM's
        argument check the first time an input does not match it.

    Inputs are checked before a call: the count, then each input's shape (an input of another shape
    is refused, naming it and what the model expects) and dtype. A Python list, or an array of another
    dtype of the same kind (``float64`` for a ``float32`` input, ``int32`` for ``int64``) is cast when
    no value changes kind or overflows; a cast that would lose more (floats to integers, values out of
    range) is refused with the conversion to write.

    Raises
    ------
    TargetError
        If this machine cannot run one of the targets.
    """

    def __init__(self, executable, targets: TargetSet, params, param_targets, input_targets, input_specs=None):
        self.targets = TargetSet(targets)
        missing = self.targets.unavailable()
        if missing:
            raise TargetError(
                f"this machine cannot run targets {missing} (no such device here); build elsewhere or "
                "place on available targets only"
            )
        self.vm = relax.VirtualMachine(executable, self.targets.devices)
        self.input_targets = list(input_targets)
        self.weights = [
            tvm.runtime.tensor(np.asarray(p, order="C"), self.targets[t].device) for p, t in zip(params, param_targets)
        ]
        self._specs: dict[int, tuple[str, tuple, str]] = {}
        if input_specs is not None:
            input_specs = list(input_specs)
            if len(input_specs) != len(self.input_targets):
                raise ValueError(f"{len(input_specs)} input specs for {len(self.input_targets)} inputs")
            self._specs = {i: (str(n), tuple(int(d) for d in s), str(t)) for i, (n, s, t) in enumerate(input_specs)}

    # ------------------------------------------------------------------ inputs

    def _input_name(self, index: int) -> str:
        if index in self._specs:
            return self._specs[index][0]
        try:
            return str(self.vm._get_function_param_name("main", index))
        except Exception:  # a private VM helper: only for messages
            return f"#{index}"

    def _signature(self) -> str:
        parts = []
        for i in range(len(self.input_targets)):
            if i in self._specs:
                name, shape, dtype = self._specs[i]
                parts.append(f"{name}: {shape} {dtype}")
            else:
                parts.append(self._input_name(i))
        return ", ".join(parts)

    def _array(self, index: int, value) -> np.ndarray:
        """One input as a C-contiguous array of the model's shape and dtype (cast when safe), or an error."""
        name = self._input_name(index)
        if isinstance(value, tvm.runtime.Tensor):
            value = value.numpy()
        try:
            array = np.asarray(value)
        except (ValueError, TypeError) as err:  # e.g. a ragged list
            raise AutoplaceError(f"input {name!r} (input {index}) cannot be read as an array: {err}") from None
        if array.dtype == object:
            raise AutoplaceError(f"input {name!r} (input {index}) is not a numeric array (a ragged or mixed list?): "
                                 "give a numpy array")
        spec = self._specs.get(index)
        if spec is None:
            return np.ascontiguousarray(array)
        _, shape, dtype = spec
        if tuple(array.shape) != shape:
            raise AutoplaceError(
                f"input {name!r} (input {index}) has shape {tuple(array.shape)}, but the model expects {shape} "
                f"({dtype}): give an array of shape {shape}"
            )
        if array.dtype != np.dtype(dtype):
            array = _cast(array, np.dtype(dtype), f"input {name!r} (input {index})", shape)
        return np.ascontiguousarray(array)

    def device_inputs(self, inputs) -> list:
        """The inputs checked (count, shape, dtype; see the class) and placed on their devices."""
        if len(inputs) != len(self.input_targets):
            raise AutoplaceError(
                f"the model takes {len(self.input_targets)} input(s) ({self._signature()}), got {len(inputs)}"
            )
        return [
            tvm.runtime.tensor(self._array(i, x), self.targets[t].device)
            for i, (x, t) in enumerate(zip(inputs, self.input_targets))
        ]

    def _learn(self, err: Exception) -> bool:
        """Read the input TVM's argument check refused (when no spec was given); True if it is new."""
        match = _TVM_PARAM_CHECK.search(str(err))
        if match is None:
            return False
        index = int(match.group(1))
        if index >= len(self.input_targets) or index in self._specs:
            return False
        shape = tuple(int(d) for d in match.group(3).replace(" ", "").split(",") if d)
        self._specs[index] = (match.group(2), shape, match.group(4))
        return True

    def _invoke(self, inputs, call):
        """``call(device inputs)``; when TVM refuses an input the runner had no spec for, check it again."""
        while True:
            args = self.device_inputs(inputs)
            try:
                return call(args)
            except Exception as err:  # TVM's own argument check (RuntimeError / ValueError subclasses)
                if not self._learn(err):
                    raise

    # ------------------------------------------------------------------ calls

    def __call__(self, *inputs):
        return self._invoke(inputs, lambda args: _to_numpy(self.vm["main"](*args, *self.weights)))

    def time_us(self, inputs, *, number: int = 1, repeat: int = 10, min_repeat_ms: int = 0) -> np.ndarray:
        """End-to-end latency samples in microseconds (one per repeat), inputs already on device.

        Uses ``VirtualMachine.time_evaluator`` on ``main`` with the arguments given directly:
        ``number`` calls per sample, averaged. (Not ``set_input``/``invoke_stateful``: ``set_input``
        moves every argument to the first device, which breaks weights resident elsewhere.)
        """
        timer = self.vm.time_evaluator(
            "main", self.targets.host.device, number=number, repeat=repeat, min_repeat_ms=min_repeat_ms
        )
        return self._invoke(inputs, lambda args: np.asarray(timer(*args, *self.weights).results) * 1e6)


def _cast(array: np.ndarray, dtype: np.dtype, what: str, shape) -> np.ndarray:
    """``array`` as ``dtype`` when no value changes kind or overflows; otherwise an error naming the input."""
    src = array.dtype
    fix = f"convert it yourself, e.g. np.asarray(x).astype({str(dtype)!r}), if that is what you mean"
    refused = f"{what} has dtype {src}, but the model expects {dtype} (shape {tuple(shape)})"
    if src.kind == "b" or (src.kind in "iu" and dtype.kind in "iuf") or (src.kind == "f" and dtype.kind in "fc"):
        if dtype.kind in "iu" and array.size:
            info = np.iinfo(dtype)
            if array.min() < info.min or array.max() > info.max:
                raise AutoplaceError(f"{refused}; its values [{array.min()}, {array.max()}] do not fit {dtype}: {fix}")
        if dtype.kind == "f" and src.kind == "f" and array.size:
            finite = np.abs(array[np.isfinite(array)])
            if finite.size and finite.max() > np.finfo(dtype).max:
                raise AutoplaceError(f"{refused}; values up to {finite.max():g} overflow {dtype}: {fix}")
        return array.astype(dtype)
    reason = {("f", "i"): "casting would drop fractions", ("f", "u"): "casting would drop fractions",
              ("f", "b"): "casting would turn numbers into True/False"}.get((src.kind, dtype.kind),
                                                                            "autoplace does not cast between these")
    raise AutoplaceError(f"{refused}; {reason}: {fix}")
