"""Targets: the named devices a model may be placed on.

A target set maps a user's name (``"cpu"``, ``"gpu"``, ``"cpu1"``) to a TVM target. Names are
what plans, profiles and pins speak of; the order of the set is the order of the Relax vdevice
list (``I.module_global_infos({"vdevice": [...]})``) and of the runtime devices given to the VM.
The same kind may appear several times: its occurrences become vdevice ids 0, 1, ... of that kind
(``{"cpu0": "llvm", "cpu1": "llvm"}`` -> ``llvm:0`` and ``llvm:1``, devices ``cpu(0)``, ``cpu(1)``),
which is how a heterogeneous placement runs on a CPU-only machine.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import tvm
from tvm import relax

from .errors import TargetError

#: Target kinds autoplace knows how to build and run.
SUPPORTED_KINDS = ("llvm", "cuda")
#: CUDA arch used when no GPU is visible to ask (H100/H200: Hopper).
DEFAULT_CUDA_ARCH = "sm_90"
#: The targets used when a call names none: this machine's CPU.
DEFAULT_TARGETS = {"cpu": "llvm"}


def device_label(kind: str, vdevice_id: int) -> str:
    """How profiles, costs and plans name one device: kind and vdevice id (``"llvm:0"``, ``"cuda:1"``)."""
    return f"{kind}:{int(vdevice_id)}"


def kind_of_label(label: str) -> str:
    """The target kind of a device label (``"llvm:1"`` -> ``"llvm"``); a bare kind passes through."""
    return str(label).split(":", 1)[0]


def _make_target(name: str, spec) -> tvm.target.Target:
    if isinstance(spec, tvm.target.Target):
        target = spec
    else:
        if isinstance(spec, str):
            if spec.strip() not in SUPPORTED_KINDS:
                raise TargetError(
                    f"target {name!r}: unknown target kind {spec!r}. Use one of {list(SUPPORTED_KINDS)} "
                    f"(or 'cpu'/'gpu'), a JSON dict such as {{'kind': 'cuda', 'arch': 'sm_90'}}, or a "
                    "tvm.target.Target. CLI strings like 'llvm -num-cores 2' are not accepted by TVM 0.27: "
                    "write them as dicts."
                )
            spec = {"kind": spec.strip()}
        if not isinstance(spec, Mapping) or "kind" not in spec:
            raise TargetError(f"target {name!r}: {spec!r} is not a target; give a kind name or a dict with 'kind'")
        spec = dict(spec)
        if spec["kind"] not in SUPPORTED_KINDS:
            raise TargetError(
                f"target {name!r}: unknown target kind {spec['kind']!r}; autoplace supports {list(SUPPORTED_KINDS)}"
            )
        if spec["kind"] == "cuda" and "arch" not in spec:
            spec["arch"] = _local_cuda_arch() or DEFAULT_CUDA_ARCH
        try:
            target = tvm.target.Target(spec)
        except Exception as err:  # TVM raises its own error types with long traces
            raise TargetError(f"target {name!r}: TVM rejected {spec!r}: {str(err).splitlines()[-1]}") from None
    if target.kind.name not in SUPPORTED_KINDS:
        raise TargetError(f"target {name!r}: kind {target.kind.name!r} is not one of {list(SUPPORTED_KINDS)}")
    if target.kind.name == "cuda" and target.host is None:
        target = tvm.target.Target(target, host="llvm")
    return target


def _local_cuda_arch() -> str | None:
    try:
        dev = tvm.cuda(0)
        if dev.exist:
            return "sm_" + dev.compute_version.replace(".", "")
    except Exception:  # no CUDA runtime on this machine: fall back to the default arch
        return None
    return None


_ALIASES = {"cpu": "llvm", "gpu": "cuda"}


@dataclass(frozen=True)
class Target:
    """One named placement target: a TVM target, its vdevice and its runtime device."""

    name: str
    target: tvm.target.Target
    kind: str
    index: int  # position in the vdevice list
    vdevice_id: int  # occurrence of this kind: llvm:0, llvm:1, ...
    vdevice: relax.VDevice

    @property
    def device(self) -> tvm.runtime.Device:
        """The runtime device (created on demand, it needs no hardware until used)."""
        return tvm.device("cpu" if self.kind == "llvm" else self.kind, self.vdevice_id)

    @property
    def label(self) -> str:
        """The device label profiles and costs use (``"llvm:0"``), see :func:`device_label`."""
        return device_label(self.kind, self.vdevice_id)

    @property
    def available(self) -> bool:
        """Whether this machine can run code for the target."""
        if self.kind == "llvm":
            return True
        return tvm.runtime.enabled(self.kind) and self.device.exist


class TargetSet(Mapping):
    """An ordered mapping name -> :class:`Target`.

    Parameters
    ----------
    targets : mapping or TargetSet
        ``{name: spec}``; a spec is a kind name (``"llvm"``, ``"cuda"``, or the aliases
        ``"cpu"``/``"gpu"``), a JSON-style dict with ``"kind"``, or a ``tvm.target.Target``.
        The first target is the host: model inputs arrive there and outputs return there
        unless pinned elsewhere.

    Raises
    ------
    TargetError
        On an empty set, an unknown kind, or a spec TVM rejects.
    """

    def __init__(self, targets=None):
        if targets is None:
            targets = DEFAULT_TARGETS
        if isinstance(targets, TargetSet):
            self._targets = dict(targets._targets)
            return
        if isinstance(targets, (list, tuple)):
            targets = {f"{_ALIASES.get(t, t) if isinstance(t, str) else 'target'}{i}": t for i, t in enumerate(targets)}
        if not isinstance(targets, Mapping) or not targets:
            raise TargetError(
                "targets must be a non-empty dict name -> target, e.g. {'cpu': 'llvm', 'gpu': 'cuda'}"
            )
        counts: dict[str, int] = {}
        self._targets = {}
        for index, (name, spec) in enumerate(targets.items()):
            if not isinstance(name, str) or not name:
                raise TargetError(f"target names must be non-empty strings, got {name!r}")
            if isinstance(spec, str):
                spec = _ALIASES.get(spec.strip(), spec)
            target = _make_target(name, spec)
            kind = target.kind.name
            vdevice_id = counts.get(kind, 0)
            counts[kind] = vdevice_id + 1
            vdevice = relax.VDevice(target, vdevice_id, "global")
            self._targets[name] = Target(name, target, kind, index, vdevice_id, vdevice)

    def __getitem__(self, name: str) -> Target:
        try:
            return self._targets[name]
        except KeyError:
            raise TargetError(f"unknown target {name!r}; the targets are {list(self._targets)}") from None

    def __contains__(self, name) -> bool:
        return name in self._targets

    def __iter__(self):
        return iter(self._targets)

    def __len__(self) -> int:
        return len(self._targets)

    def __repr__(self) -> str:
        inner = ", ".join(f"{t.name}={t.label}" for t in self._targets.values())
        return f"TargetSet({inner})"

    @property
    def host(self) -> Target:
        """The first target: where inputs arrive and outputs return by default."""
        return next(iter(self._targets.values()))

    @property
    def vdevices(self) -> list[relax.VDevice]:
        return [t.vdevice for t in self._targets.values()]

    @property
    def devices(self) -> list[tvm.runtime.Device]:
        return [t.device for t in self._targets.values()]

    def unavailable(self) -> list[str]:
        """Names of targets this machine cannot run."""
        return [name for name, t in self._targets.items() if not t.available]
