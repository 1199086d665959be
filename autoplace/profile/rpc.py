"""Profile a farm of machines the way TVM users do: over TVM's RPC tracker.

A tracker (``python -m tvm.exec.rpc_tracker``) knows the servers (``python -m tvm.exec.rpc_server
--tracker HOST:PORT --key KEY``, a runtime-only TVM is enough) of each *key*; a key names one kind of
machine. :func:`profile_over_rpc` compiles every kernel, call-overhead probe, copy probe and (for end-to-end
timing) every model built on one target *here*, uploads each to a server the tracker hands out, times it
there with :mod:`.remote_runner` (the code a bundle's ``runner.py`` runs, given the session's devices) and
writes the records into the profile of *that* machine, with the guarantees of a local job
(:func:`~autoplace.profile.job.profile_models`): one job per folder, resumable, append-only, failed kernels
recorded, harness failures never recorded.

How the work is spread (as MetaSchedule's ``RPCRunner`` does it): one thread per server registered under the
key; each item gets a session of its own from the tracker (``session_timeout``: the server ends a session
that runs past the per-kernel time limit, and the kernel is recorded as a ``timeout``), and a server serves
one session at a time, so a device times one kernel at a time. Kernels compile in TVM's
``PopenPoolExecutor`` while the servers time earlier ones.

A lost connection (a server killed, a network cut) is the harness's failure, not the kernel's: the item goes
back in the queue and another session (on any server of the key) measures it. Only an item whose session
dies twice is recorded as ``crashed`` (a kernel that kills the server process, as a local worker crash).
When no server of the key answers within ``request_timeout_s``, the job stops with
:class:`~autoplace.errors.ProfilingError`; every record written so far stays, and running the job again
measures the rest.

Which machine is it? A stock ``rpc_server`` runs no autoplace code and can read no file for a client
(``tvm.rpc.server.download`` fails on ``/proc`` files, whose size reads as 0), and TVM's device attributes name
GPUs but not CPUs. So the first session on each server runs a *helper kernel*: a TIR function compiled here
for the server's CPU (the ``llvm`` target of the job, without ``mcpu``) that reads ``/proc/cpuinfo``,
``/proc/self/status`` and ``uname`` with libc's ``fopen``/``fread`` into byte tensors. From them the CPU model,
the cores the server may use and the architecture give the same hardware id a job on that machine would
give itself (:func:`~autoplace.profile.remote_runner.hardware_id`); GPUs are read from the device attributes
(``device_name``, ``total_global_memory``, ``compute_version``) of ``cuda(0)``, ``cuda(1)``, ... Records are
stamped with that id and with this machine's TVM version (the TVM that compiled the kernels; TVM's RPC
handshake refuses a server whose RPC protocol differs).

CPU kernels are timed in-model too, as a local job times them (:mod:`autoplace.profile.cache_state`): the job
builds a small library for the servers' CPU (:func:`build_in_model_library`: the bundle's streaming kernels with
``in_model_preproc.cc`` linked in), each session uploads and loads it, and loading it registers the preprocessing
that ``time_evaluator(f_preproc=...)`` runs there before every sample (every core's L2 evicted, the kernel's
activation inputs read back in); ``autoplace.profile.in_model_configure`` tells it which arguments to read back,
and which the weights-cold preprocessing (``autoplace.profile.weights_cold_cache``: the same, then the kernel's
weights flushed from every cache by TVM's ``cache_flush_cpu_non_first_arg``) flushes.
"""

from __future__ import annotations

import concurrent.futures as cf
import datetime
import itertools
import os
import queue
import socket
import struct
import tempfile
import threading
import time
from dataclasses import dataclass

from ..errors import ProfilingError, RPCError
from ..targets import TargetSet
from .copies import DEFAULT_COPY_SIZES
from .remote_runner import (
    IN_MODEL_TIMING,
    PREPROC_NAME,
    WEIGHTS_COLD_PREPROC_NAME,
    WEIGHTS_COLD_TIMING,
    activation_inputs,
    cores_from,
    cpu_arch_from,
    cpu_model_from,
    error_text,
    hardware_id,
    in_model_fields,
    run_item,
    weights_cold_fields,
)

#: Registered with :data:`PREPROC_NAME` when a server loads the in-model library (``in_model_preproc.cc``).
CONFIGURE_NAME = "autoplace.profile.in_model_configure"

#: The port of ``python -m tvm.exec.rpc_tracker`` when none is given.
DEFAULT_TRACKER_PORT = 9190
#: How many sessions one item may lose before it is recorded as ``crashed`` (it killed the server twice).
MAX_LOSSES = 2
START_TRACKER = "python -m tvm.exec.rpc_tracker --host 0.0.0.0 --port {port}"
START_SERVER = "TVM_USE_RUNTIME_LIB=1 python -m tvm.exec.rpc_server --tracker {tracker} --key {key}"


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class RPCConfig:
    """Where the tracker is and which servers to use.

    Parameters
    ----------
    host, port : the tracker's address.
    key : str
        The servers' key (``--key`` of ``rpc_server``): one kind of machine.
    request_timeout_s : float
        How long to wait for a free server of the key before giving up (``ProfilingError``).
    session_timeout_s : float
        Per item (upload + timing): the server ends a session that runs longer.

    ``RPCConfig.create("HOST:PORT", "KEY")``, ``create({"tracker": "HOST:PORT", "key": "KEY"})`` or
    ``create(("HOST:PORT", "KEY"))`` build one from what a user writes.
    """

    host: str
    port: int
    key: str
    request_timeout_s: float = 60.0
    session_timeout_s: float = 300.0

    @property
    def tracker(self) -> str:
        return f"{self.host}:{self.port}"

    @classmethod
    def create(cls, value, key: str | None = None, **options) -> RPCConfig:
        """An :class:`RPCConfig` from an instance, ``"HOST:PORT"`` (+ ``key``), a dict or a pair; every
        field is checked (:class:`~autoplace.errors.RPCError` names the fix)."""
        if isinstance(value, RPCConfig):
            return value
        if isinstance(value, dict):
            value = dict(value)
            address, key = value.pop("tracker", None), value.pop("key", key)
            options = {**value, **options}
        elif isinstance(value, (tuple, list)) and len(value) == 2:
            address, key = value
        else:
            address = value
        return cls(*parse_address(address), check_key(key), **options)

    def __post_init__(self):
        for name in ("request_timeout_s", "session_timeout_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise RPCError(f"{name}={value!r}: give a number of seconds > 0")


def parse_address(address) -> tuple[str, int]:
    """``"HOST:PORT"`` (or ``"HOST"``: port 9190) -> ``(host, port)``, or :class:`RPCError` naming the fix."""
    example = f"e.g. --rpc 127.0.0.1:{DEFAULT_TRACKER_PORT} (the --host/--port of `python -m tvm.exec.rpc_tracker`)"
    if not isinstance(address, str) or not address.strip():
        raise RPCError(f"the RPC tracker address {address!r} is empty: give it as HOST:PORT, {example}")
    text = address.strip()
    if "://" in text or "/" in text:
        raise RPCError(f"--rpc {text!r}: give the tracker as HOST:PORT without a scheme or path, {example}")
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = text, str(DEFAULT_TRACKER_PORT)
    host = host.strip("[]")
    if not host:
        raise RPCError(f"--rpc {text!r} has no host: give HOST:PORT, {example}")
    try:
        number = int(port)
    except ValueError:
        raise RPCError(f"--rpc {text!r}: {port!r} is not a port number; give HOST:PORT, {example}") from None
    if not 0 < number < 65536:
        raise RPCError(f"--rpc {text!r}: port {number} is not in 1..65535; give HOST:PORT, {example}")
    return host, number


def check_key(key) -> str:
    if not isinstance(key, str) or not key.strip() or any(c.isspace() for c in key.strip()) or ":" in key:
        raise RPCError(f"RPC key {key!r}: give the --key the servers were started with (one word, no ':' or "
                       "spaces), e.g. --rpc-key gpu-box")
    return key.strip()


# ------------------------------------------------------------------------------------------- the tracker


class _Tracker:
    """A client of TVM's tracker protocol (``tvm.rpc.base``) whose requests have a deadline.

    ``tvm.rpc.TrackerSession.request`` waits for a free server forever; a job must be able to say that no
    server answers. Requests are otherwise the same (``TrackerCode.REQUEST``, then ``tvm.rpc.connect`` to
    the server handed out, with its match key)."""

    def __init__(self, config: RPCConfig, *, timeout_s: float = 10.0):
        from tvm.rpc import base

        self.config, self._base = config, base
        try:
            self._sock = socket.create_connection((config.host, config.port), timeout=timeout_s)
            self._sock.sendall(struct.pack("<i", base.RPC_TRACKER_MAGIC))
            magic = struct.unpack("<i", base.recvall(self._sock, 4))[0]
        except (OSError, RuntimeError) as err:
            cause = err.strerror if isinstance(err, OSError) and err.strerror else str(err) or type(err).__name__
            raise RPCError(
                f"cannot reach the RPC tracker at {config.tracker} ({cause}): start it there with "
                f"`{START_TRACKER.format(port=config.port)}`, or fix --rpc (HOST:PORT of the tracker)"
            ) from None
        if magic != base.RPC_TRACKER_MAGIC:
            self.close()
            raise RPCError(f"{config.tracker} answers, but it is not a TVM RPC tracker: give the tracker's "
                           "HOST:PORT to --rpc (not a server's)")

    def summary(self) -> dict:
        base = self._base
        try:
            base.sendjson(self._sock, [base.TrackerCode.SUMMARY])
            value = base.recvjson(self._sock)
        except (OSError, RuntimeError, ValueError) as err:
            raise RPCError(f"lost the RPC tracker at {self.config.tracker} ({err}); the records written so far are "
                           "kept: restart the tracker and its servers, then run again to measure the rest") from None
        return value[1]

    def servers(self) -> list[tuple[str, int]]:
        """Addresses of the servers registered under the key."""
        info = self.summary().get("server_info", [])
        return [tuple(s["addr"]) for s in info if s.get("key") == f"server:{self.config.key}"]

    def request(self, timeout_s: float) -> tuple[str, int, str]:
        """A free server of the key: ``(host, port, match key)``; :class:`RPCError` after ``timeout_s``."""
        base = self._base
        try:
            self._sock.settimeout(timeout_s)
            base.sendjson(self._sock, [base.TrackerCode.REQUEST, self.config.key, "", 1])
            value = base.recvjson(self._sock)
        except TimeoutError:
            self.close()  # the tracker drops the pending request with the connection
            raise _NoAnswer() from None
        except (OSError, RuntimeError, ValueError) as err:
            raise RPCError(f"lost the RPC tracker at {self.config.tracker} ({err}); the records written so far are "
                           "kept: restart the tracker and its servers, then run again to measure the rest") from None
        finally:
            if self._sock is not None:
                self._sock.settimeout(None)
        if value[0] != base.TrackerCode.SUCCESS:
            raise RPCError(f"the RPC tracker at {self.config.tracker} refused a request for key "
                           f"{self.config.key!r}: {value!r}")
        url, port, matchkey = value[1]
        return url, int(port), matchkey

    def nobody(self, timeout_s: float) -> str:
        try:
            tracker = _Tracker(self.config)
            info = tracker.summary().get("server_info", [])
            tracker.close()
            known = sorted({str(s.get("key", "")).split(":", 1)[-1] for s in info})
        except RPCError:
            known = []
        start = START_SERVER.format(tracker=self.config.tracker, key=self.config.key)
        return (f"no RPC server with key {self.config.key!r} answered the tracker at {self.config.tracker} within "
                f"{timeout_s:.0f} s (keys of the servers it knows: {known or 'none'}). Start one on the device "
                f"(`{start}`), check --rpc-key, or wait longer (--rpc-timeout, request_timeout_s). Any records "
                "written before are kept: running again measures the rest")

    def close(self):
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def wait_for_servers(config: RPCConfig, *, log=print) -> list[tuple[str, int]]:
    """The servers registered under the key, waiting up to ``request_timeout_s`` for a first one."""
    tracker = _Tracker(config)
    try:
        deadline = time.monotonic() + config.request_timeout_s
        told = False
        while True:
            servers = tracker.servers()
            if servers:
                return servers
            if time.monotonic() > deadline:
                raise RPCError(tracker.nobody(config.request_timeout_s))
            if not told:
                log(f"waiting up to {config.request_timeout_s:.0f} s for an RPC server with key {config.key!r} at "
                    f"{config.tracker}")
                told = True
            time.sleep(0.5)
    finally:
        tracker.close()


class _NoAnswer(Exception):
    """No server of the key was free within the request's time limit."""


def request_server(config: RPCConfig) -> tuple[str, int, str]:
    """A free server of the key, ``(host, port, match key)``: waits while the key's servers are busy (the
    tracker queues the request), and raises :class:`RPCError` once none has been registered for
    ``request_timeout_s``."""
    while True:
        tracker = _Tracker(config)
        try:
            return tracker.request(config.request_timeout_s)
        except _NoAnswer:
            pass
        finally:
            tracker.close()
        tracker = _Tracker(config)
        try:
            if not tracker.servers():
                raise RPCError(tracker.nobody(config.request_timeout_s))
        finally:
            tracker.close()


def _connect(config: RPCConfig, host: str, port: int, matchkey: str, session_timeout_s: float):
    from tvm import rpc

    return rpc.connect(host, port, matchkey, session_timeout=session_timeout_s)


def _alive(session) -> bool:
    """Whether the session still answers (a remote call); False once its connection is gone."""
    try:
        session.get_function("runtime.NumThreads")()
        return True
    except Exception:
        return False


# ------------------------------------------------------------------------------------- which machine


#: The helper as TVMScript, parsed with ``tvm.script.from_source``: ``@T.prim_func`` on a nested function keeps
#: the caller's frames alive in a reference cycle (its parser holds the stack), and with them the RPC session.
_HELPER = """
@T.prim_func
def main(cpuinfo: T.Buffer((65536,), "uint8"), status: T.Buffer((16384,), "uint8"), uname: T.Buffer((2048,), "uint8")):
    T.func_attr({"global_symbol": "main", "tir.noalias": True})
    f1 = T.call_extern("handle", "fopen", "/proc/cpuinfo", "r")
    if not T.isnullptr(f1):
        T.evaluate(T.call_extern("uint64", "fread", T.address_of(cpuinfo[0]), T.uint64(1), T.uint64(65535), f1))
        T.evaluate(T.call_extern("int32", "fclose", f1))
    f2 = T.call_extern("handle", "fopen", "/proc/self/status", "r")
    if not T.isnullptr(f2):
        T.evaluate(T.call_extern("uint64", "fread", T.address_of(status[0]), T.uint64(1), T.uint64(16383), f2))
        T.evaluate(T.call_extern("int32", "fclose", f2))
    T.evaluate(T.call_extern("int32", "uname", T.address_of(uname[0])))
"""


def build_hardware_helper(target, folder: str) -> str:
    """Compile the helper (copies ``/proc/cpuinfo``, ``/proc/self/status`` and ``uname()`` into byte tensors)
    for the CPU of ``target`` (an ``llvm`` target; its ``mcpu`` is dropped so the helper runs on any CPU of
    that architecture) into ``folder``; returns the library's path."""
    import tvm

    config = {k: v for k, v in dict(target.export()).items() if k in ("kind", "mtriple")} \
        if target is not None and target.kind.name == "llvm" else {"kind": "llvm"}
    path = os.path.join(folder, "autoplace_hardware.so")
    tvm.tirx.build(tvm.script.from_source(_HELPER), target=tvm.target.Target(config)).export_library(path)
    return path


def build_in_model_library(cpu_target, hardware: dict, folder: str, *, log=print) -> str | None:
    """The servers' in-model preprocessing (:func:`~autoplace.profile.remote.export_stream_kernel` with
    ``preproc=True``: the bundle's streaming kernels for ``cpu_target`` and ``in_model_preproc.cc``), built here;
    None, said in the log, when this machine's C++ compiler makes code for another architecture than the servers'
    (set ``CXX`` to a cross compiler for theirs) or the build fails: the CPU kernels are then timed warm only."""
    import platform

    from .remote import export_stream_kernel

    machine = hardware.get("machine")
    if machine != platform.machine() and not os.environ.get("CXX"):
        log(f"CPU kernels are timed warm only: the servers are {machine}, this machine compiles C++ for "
            f"{platform.machine()}; set CXX to a cross compiler for {machine} (and name its mtriple in the llvm "
            "target) to time them in-model as well")
        return None
    path = os.path.join(folder, "autoplace_in_model.so")
    try:
        export_stream_kernel(cpu_target, path, preproc=True)
    except Exception as err:
        log(f"CPU kernels are timed warm only: the in-model preprocessing did not build here ({error_text(err)})")
        return None
    return path


def remote_hardware(session, helper_path: str, tvm_version: str, *, threads: bool = True) -> dict:
    """The hardware metadata of the machine behind ``session`` (see the module docstring). ``threads``: also
    read the size of the server's CPU thread pool (``cpu_threads``, else None). Reading it creates the pool, which
    pins the session's thread to one CPU when it has fewer threads than CPUs: the in-model library loaded after
    that in the same session reads one core's L2 (1 MiB of the 2 of a 2-core Zen 5), and its kernels run pinned.
    Read it last, or in a session that times nothing."""
    import tvm

    session.upload(helper_path, target="autoplace_hardware.so")
    helper = session.load_module("autoplace_hardware.so")
    dev = session.cpu(0)
    buffers = [tvm.runtime.empty((n,), "uint8", dev) for n in (65536, 16384, 2048)]
    helper["main"](*buffers)
    raw = [b.numpy().tobytes() for b in buffers]
    cpuinfo, status = (r.split(b"\0", 1)[0].decode("utf-8", "replace") for r in raw[:2])
    # struct utsname (Linux): sysname, nodename, release, version, machine, domainname: 65 bytes each
    fields = [raw[2][i * 65:(i + 1) * 65].split(b"\0", 1)[0].decode("utf-8", "replace") for i in range(5)]
    machine = fields[4] or "unknown"
    cpu = cpu_model_from(cpuinfo, machine)
    cores = cores_from(status, cpuinfo)
    if cores is None:
        raise RPCError("the RPC server did not let its helper read /proc (not Linux?), so its hardware id is "
                       "unknown; profile that machine with a bundle instead (`autoplace profile ... --bundle DIR`)")
    gpus = []
    for index in range(16):
        gpu = session.cuda(index)
        if not gpu.exist:
            break
        gpus.append({"name": str(gpu.device_name), "memory": f"{int(gpu.total_global_memory) // 2**20} MiB",
                     "compute_version": str(gpu.compute_version)})
    arch = cpu_arch_from(cpuinfo)
    # The server's CPU thread pool: TVM's default is half the logical CPUs on x86 (start servers with
    # TVM_NUM_THREADS=<physical cores> to use them all); every CPU record says what it ran on.
    pool = int(session.get_function("runtime.NumThreads")()) if threads else None
    return {"hardware_id": hardware_id(cpu, cores, [g["name"] for g in gpus], arch), "cpu_model": cpu,
            "cpu_arch": arch, "cpu_cores": cores, "cpu_threads": pool,
            "machine": machine, "gpus": gpus, "tvm_version": tvm_version, "python": None, "created": _now(),
            "host": fields[1]}


# ------------------------------------------------------------------------------------------ the farm


class Work:
    """One item to time remotely: a manifest item, its compiled file (a future) and arrays (placed models)."""

    def __init__(self, item: dict, build: cf.Future, arrays=None, what: str = ""):
        self.item, self.build, self.arrays = item, build, arrays
        self.what = what or f"{item['record']['kind']} {item['record'].get('func_name', item['record']['key'])}"
        self.losses = 0


class Farm:
    """The servers of one key, timing :class:`Work` items one at a time per server.

    Parameters
    ----------
    config : RPCConfig
    timing : dict
        ``number``, ``repeat``, ``min_repeat_ms`` of ``time_evaluator``.
    log : callable
        Reports (lost connections, waiting).
    """

    def __init__(self, config: RPCConfig, timing: dict, *, log=print):
        import tvm

        self.config, self.timing, self.log = config, dict(timing), log
        self.tvm_version = tvm.__version__
        self.hardware: dict | None = None
        self.servers: list = []
        self._checked: dict = {}  # server address -> hardware id
        self._devices: dict = {}  # (kind, index) -> the servers have that device
        self._helper_dir = tempfile.TemporaryDirectory(prefix="autoplace-rpc-")
        self._helper = None
        #: The in-model preprocessing library for the servers' CPU (:func:`build_in_model_library`); None when
        #: the job has no CPU target or it cannot be built here for the servers.
        self.in_model_library: str | None = None

    def close(self):
        self._helper_dir.cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def workdir(self) -> str:
        return self._helper_dir.name

    def open(self, cpu_target=None, *, in_model: bool = False) -> dict:
        """Wait for the key's servers, read the hardware of one; returns its metadata (the profile's). ``in_model``:
        also build the in-model library for ``cpu_target`` and check that the server loads it
        (:attr:`in_model_library`)."""
        self.servers = wait_for_servers(self.config, log=self.log)
        self._helper = build_hardware_helper(cpu_target, self.workdir)
        host, port, matchkey = request_server(self.config)
        session = self._session(host, port, matchkey)
        try:
            self.hardware = remote_hardware(session, self._helper, self.tvm_version)
            self.hardware["rpc"] = f"{self.config.tracker} key {self.config.key}"
            self._checked[(host, port)] = self.hardware["hardware_id"]
            for kind in ("llvm", "cuda"):
                for index in range(4):
                    self._devices[(kind, index)] = bool(session.device(_dev_type(kind), index).exist)
            if in_model and cpu_target is not None:
                self.in_model_library = build_in_model_library(cpu_target, self.hardware, self.workdir, log=self.log)
                if self.in_model_library is not None and not self._in_model_library_loads(session):
                    self.in_model_library = None
        except RPCError:
            raise
        except Exception as err:
            raise RPCError(f"the RPC server {host}:{port} (key {self.config.key!r}) failed while autoplace read its "
                           f"hardware ({error_text(err)}); check that it runs a TVM runtime of the same version "
                           f"({self.tvm_version}) on Linux") from None
        finally:
            del session
        return self.hardware

    def _in_model_library_loads(self, session) -> bool:
        """Whether a server loads the in-model library and its functions answer (else the job times CPU kernels
        warm only, and says why: a kernel must not fail for its preprocessing)."""
        try:
            library = self._load_in_model_library(session)
            l2 = int(session.get_function(CONFIGURE_NAME)(0, 1 << 15))
            del library
        except Exception as err:
            self.log(f"CPU kernels are timed warm only: the RPC server could not load the in-model preprocessing "
                     f"({error_text(err)})")
            return False
        return l2 > 0

    def _load_in_model_library(self, session):
        """Upload and load :attr:`in_model_library` in a session (registering its functions there); the module."""
        name = os.path.basename(self.in_model_library)
        session.upload(self.in_model_library, target=name)
        return session.load_module(name)

    def has_device(self, kind: str, index: int) -> bool:
        return self._devices.get((kind, index), False)

    def _session(self, host, port, matchkey, timeout_s=None):
        try:
            return _connect(self.config, host, port, matchkey, timeout_s or self.config.session_timeout_s)
        except Exception as err:
            raise _Lost(f"cannot open a session on the RPC server {host}:{port} ({error_text(err)})") from None

    def _check_server(self, session, address) -> None:
        if address not in self._checked:
            # not its thread pool: this session times an item next (remote_hardware)
            self._checked[address] = remote_hardware(session, self._helper, self.tvm_version,
                                                     threads=False)["hardware_id"]
        if self._checked[address] != self.hardware["hardware_id"]:
            raise RPCError(
                f"the RPC server {address[0]}:{address[1]} under key {self.config.key!r} is hardware "
                f"{self._checked[address]!r}, but the job profiles {self.hardware['hardware_id']!r}: servers of one "
                "key must be the same kind of machine (their timings go into one profile). Start that server "
                "with a key of its own (--key) and profile it separately"
            )

    def time(self, work: Work, session, tvm_module, runtime_vm) -> dict:
        """Time one item in an open session (upload, load, ``run_item``); a CPU kernel also in-model where the farm
        has its preprocessing library (uploaded and loaded in the session first, as the kernel is)."""
        path = work.build.result()

        def load(file):
            name = os.path.basename(file)
            session.upload(path, target=name)
            return session.load_module(name)

        in_model = preproc = None
        if self.in_model_library is not None and work.item["record"]["kind"] == "unit" \
                and work.item.get("kind") == "llvm":
            # Loaded before the kernel: it reads the L2 of the CPUs the server's process may use, which a thread
            # TVM's pool pinned for a parallel kernel would read as one core's. Held while timing: unloading it
            # would drop the functions it registered.
            preproc = self._load_in_model_library(session)

            def in_model(lib, dev, call_args, record):
                from .remote import STREAM_PARALLEL_MIN_ELEMS

                weights = record.get("weight_args") or []
                reread = activation_inputs(len(call_args), record["num_outputs"], weights)
                l2 = session.get_function(CONFIGURE_NAME)(sum(1 << i for i in reread if i < 64),
                                                          STREAM_PARALLEL_MIN_ELEMS,
                                                          sum(1 << i for i in weights if i < 64))
                fields = in_model_fields(lib, dev, call_args, PREPROC_NAME, self.timing["repeat"], l2)
                if weights:  # and with its weights flushed from every cache, as a local job times it
                    fields.update(weights_cold_fields(lib, dev, call_args, WEIGHTS_COLD_PREPROC_NAME,
                                                      self.timing["repeat"]))
                return fields

        try:
            return run_item(tvm_module, runtime_vm, work.item, load=load, timing=self.timing, arrays=work.arrays,
                            make_device=lambda kind, index: session.device(_dev_type(kind), index),
                            in_model=in_model)
        finally:
            del preproc

    def run(self, works: list, on_result, *, progress=None) -> None:
        """Time every item on the key's servers; ``on_result(work, result)`` is called (under a lock) for each
        item once: ``result`` has ``status`` ``"ok"`` and the timing, or ``"error"``/``"timeout"``/``"crashed"``
        and ``error``. Raises :class:`RPCError` (no server answers, tracker lost, other hardware under the key)
        after the items in flight are done."""
        import tvm
        from tvm.runtime import vm as runtime_vm

        pending = queue.Queue()
        for work in works:
            pending.put(work)
        state = dict(left=len(works), error=None)
        lock = threading.Lock()

        def finish(work, result):
            with lock:
                try:
                    on_result(work, result)
                except BaseException as err:  # a record that cannot be written stops the job
                    state["error"] = state["error"] or err
                state["left"] -= 1
                if progress is not None:
                    progress.update(1)

        def stop(err):
            with lock:
                state["error"] = state["error"] or err

        def worker():
            while state["error"] is None:
                with lock:
                    if state["left"] == 0:
                        return
                try:
                    work = pending.get(timeout=0.2)
                except queue.Empty:
                    continue
                try:
                    work.build.result()
                except Exception as err:
                    finish(work, _build_failure(err))
                    continue
                try:
                    host, port, matchkey = request_server(self.config)
                except RPCError as err:
                    return stop(err)
                if progress is not None:
                    progress.set_postfix_str(f"{host}:{port} {work.what}"[:50])
                result = self._time_once(work, host, port, matchkey, tvm, runtime_vm)
                if isinstance(result, BaseException):
                    return stop(result)
                if result is None:  # lost the session: measured again, maybe on another server
                    work.losses += 1
                    if work.losses >= MAX_LOSSES:
                        finish(work, dict(status="crashed", error=(
                            f"the RPC session died {work.losses} times while timing this item (the kernel "
                            "crashes the server process, or servers were stopped)")))
                    else:
                        pending.put(work)
                    continue
                finish(work, result)

        threads = [threading.Thread(target=worker, name=f"rpc-{i}", daemon=True)
                   for i in range(max(1, len(self.servers)))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if state["error"] is not None:
            raise state["error"]

    def _time_once(self, work, host, port, matchkey, tvm_module, runtime_vm):
        """One session for one item: the result dict, None for a lost session, or an error that stops the job."""
        try:
            session = self._session(host, port, matchkey)
        except _Lost as lost:
            self.log(f"{lost}; {work.what} is measured again")
            return None
        try:
            self._check_server(session, (host, port))
            return self.time(work, session, tvm_module, runtime_vm)
        except RPCError as err:
            return err
        except Exception as err:
            text = error_text(err)
            if "RPCSessionTimeoutError" in text or "RPCSessionTimeoutError" in type(err).__name__:
                return dict(status="timeout", error=f"no result within the session limit of "
                            f"{self.config.session_timeout_s:.0f} s", timeout_s=self.config.session_timeout_s)
            if _alive(session):
                return dict(status="error", error=f"run: {text}")
            self.log(f"lost the session on RPC server {host}:{port} while timing {work.what} ({text}); it is "
                     f"measured again{self._whereabouts(host, port)}")
            return None
        finally:
            del session

    def _whereabouts(self, host, port) -> str:
        try:
            tracker = _Tracker(self.config, timeout_s=5)
            try:
                gone = (host, port) not in {tuple(a) for a in tracker.servers()}
            finally:
                tracker.close()
        except RPCError:
            return ""
        return " (the server has left the tracker)" if gone else " (the server is still registered)"


class _Lost(RPCError):
    """A session could not be opened: a job measures the item again elsewhere; elsewhere it is an RPCError."""


def _dev_type(kind: str) -> str:
    return "cpu" if kind == "llvm" else kind


def _build_failure(err: BaseException) -> dict:
    if isinstance(err, TimeoutError):
        return dict(status="timeout", error="compile: no result within the time limit")
    if isinstance(err, ChildProcessError):
        return dict(status="crashed", error="compile: the compile worker died (segfault or abort) on this kernel")
    return dict(status="error", error=f"compile: {error_text(err)}")


# ------------------------------------------------------------------------------------------- the job


def profile_over_rpc(models, targets, rpc, *, store=None, profiles_root: str = "profiles", copies: bool = True,
                     end_to_end: bool = True, redo=(), copy_sizes=DEFAULT_COPY_SIZES, timer=None,
                     progress: bool = True, log=print, lock_timeout_s: float | None = None,
                     build_workers: int | None = None, rounds: int = 1) -> dict:
    """Profile models on the machines of an RPC key into that machine's profile; returns a summary dict.

    Parameters
    ----------
    models, targets, copies, end_to_end, redo, copy_sizes, progress, lock_timeout_s :
        As :func:`~autoplace.profile.job.profile_models`; targets whose device the servers lack are skipped.
    rounds : int
        Time every kernel and model this many times, round after round over all of them (round 2 starts when
        every item had round 1), merged as the local job merges them
        (:func:`~autoplace.profile.job.merge_rounds`); a job run again with more rounds adds the missing ones.
    rpc : RPCConfig, str, dict or pair
        The tracker and key (see :meth:`RPCConfig.create`).
    store : ProfileStore, optional
        The profile folder; default ``profiles_root/<the remote machine's hardware id>``. A folder of other
        hardware is refused.
    timer : KernelTimer, optional
        Only its options are used (``repeat``, ``number``, ``min_repeat_ms``; ``timeout_s`` bounds each compile
        and each session); no local worker is started.
    build_workers : int, optional
        Compile workers (default: the servers' count, at most this machine's cores).

    Returns
    -------
    dict
        ``units_total``, ``units_unique``, ``measured``, ``failed``, ``skipped_targets``, ``seconds``, and
        ``hardware_id``, ``servers``, ``profile`` (the folder).

    Raises
    ------
    ProfilingError
        As the local job, and :class:`~autoplace.errors.RPCError` (one of them) when the tracker or every
        server of the key cannot be reached or goes away, or servers of one key are different machines.
    """
    from .job import extract_models
    from .measure import validate_timing

    started = time.perf_counter()
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ProfilingError(f"rounds={rounds!r}: give the number of times to time each kernel, an integer >= 1 "
                             "(e.g. --rounds 3)")
    targets = TargetSet(targets)
    if timer is not None:
        timing, timeout_s = dict(timer.timing), float(timer.timeout_s or 300.0)
    else:
        timing, timeout_s = validate_timing(300.0, True, {}), 300.0
    config = RPCConfig.create(rpc)
    if timer is not None:  # its time limit bounds each session, as it bounds each kernel locally
        config = RPCConfig(config.host, config.port, config.key, config.request_timeout_s, timeout_s)
    if copies and (not copy_sizes or any(int(n) <= 0 for n in copy_sizes)):
        raise ProfilingError(f"copy_sizes={copy_sizes!r}: give positive byte counts (default 4 B .. 256 MiB)")
    kinds = {}
    for name in targets:
        kinds.setdefault(targets[name].kind, name)
    cpu = next((targets[n].target for n in targets if targets[n].kind == "llvm"), None)
    with Farm(config, timing, log=log) as farm:
        meta = farm.open(cpu, in_model=True)
        log(f"RPC {config.tracker} key {config.key!r}: {len(farm.servers)} server(s), hardware {meta['hardware_id']}")
        _warn_if_other_cpu(meta, targets, log)
        store = _remote_store(store, profiles_root, meta)
        runnable = [n for n in targets if farm.has_device(targets[n].kind, targets[n].vdevice_id)]
        skipped = [n for n in targets if n not in runnable]
        kinds = {k: t for k, t in kinds.items() if t in runnable}
        extracted = extract_models(models, targets, kinds)
        job = _Job(farm, targets, kinds, runnable, store, meta, timeout_s=timeout_s, log=log, progress=progress,
                   build_workers=build_workers)
        with store.lock(timeout_s=lock_timeout_s, log=log):
            summary = job.run(extracted, copies=copies, end_to_end=end_to_end, redo=set(redo), copy_sizes=copy_sizes,
                              rounds=rounds)
    return dict(summary, skipped_targets=skipped, seconds=time.perf_counter() - started,
                hardware_id=meta["hardware_id"], servers=len(farm.servers), profile=store.path)


def _warn_if_other_cpu(meta: dict, targets: TargetSet, log) -> None:
    """CPU kernels are compiled for *this* machine's CPU unless the target names an ``mcpu``: say so when the
    servers have another CPU (their kernels may not run there, and every failure is then held, not recorded)."""
    from .hardware import hardware_metadata

    here = hardware_metadata()["cpu_model"]
    plain = [n for n in targets if targets[n].kind == "llvm" and not targets[n].target.attrs.get("mcpu")]
    if plain and meta["cpu_model"] != here:
        log(f"warning: the servers' CPU is {meta['cpu_model']!r}, this one {here!r}, and targets {plain} name no "
            "mcpu, so their kernels are compiled for this CPU; name the servers' CPU as LLVM knows it, e.g. "
            '{"kind": "llvm", "mcpu": "skylake-avx512"}, to profile what a build for them runs')


def _remote_store(store, profiles_root, meta):
    """The profile folder of the remote machine; a folder of other hardware is refused."""
    from .store import ProfileStore

    if store is None:
        return ProfileStore(os.path.join(profiles_root, meta["hardware_id"]), metadata=meta)
    stored = store.stored_metadata()
    if stored is not None and stored.get("hardware_id") != meta["hardware_id"]:
        raise ProfilingError(
            f"{store.path} holds the profile of hardware {stored.get('hardware_id')!r}, but the RPC servers are "
            f"{meta['hardware_id']!r}: measuring there would mix two machines in one profile. Profile into "
            f"profiles/{meta['hardware_id']} (the default with --rpc), or pass another --dir."
        )
    return ProfileStore(store.path, metadata=stored or meta)


class _Job:
    """The RPC job's core: what to measure, the compile pool, and records as the local job writes them."""

    def __init__(self, farm: Farm, targets, kinds, runnable, store, meta, *, timeout_s, log, progress,
                 build_workers):
        self.farm, self.targets, self.kinds, self.runnable = farm, targets, kinds, runnable
        self.store, self.meta, self.timeout_s, self.log, self.progress = store, meta, timeout_s, log, progress
        self.build_workers = build_workers or max(1, min(len(farm.servers), os.cpu_count() or 1))
        self.held: dict = {}
        self.working: set = set()
        self.measured = self.failed = 0
        self.probes: dict = {}
        self.copies: dict = {}
        self.expected_probes: dict = {}
        self.expected_copies: dict = {}
        #: ``{tag: newest record}``: CPU kernels timed again for the weights-cold timing alone, their timing one
        #: more round of that record (:func:`~autoplace.profile.job.cpu_kernels_timed_the_old_way`)
        self.continued: dict = {}

    # -- records ---------------------------------------------------------------------------------
    def append(self, record: dict) -> None:
        record = {**record, "hardware_id": self.meta["hardware_id"], "tvm_version": self.farm.tvm_version}
        if record.get("target") == "llvm" and record.get("status") == "ok" and self.meta.get("cpu_threads"):
            record["threads"] = self.meta["cpu_threads"]
        record.setdefault("measured_at", _now())
        try:
            self.store.append(record)
        except OSError as err:
            raise ProfilingError(
                f"cannot write to the profile {self.store.path}: {err}. Records written before this one are kept; "
                "fix the cause (e.g. free disk space) and run again: the job resumes where it stopped."
            ) from err

    def on_result(self, work: Work, result: dict) -> None:
        from .job import merge_rounds
        from .remote import copy_fit_record, launch_record
        from .store import SUCCESS

        item = work.item
        record = dict(item["record"], measured_at=_now(), **result)
        kind = record["kind"]
        if kind == "unit":
            self.measured += 1
            tag = ("unit", record["key"], record["target"])
            if record["status"] == "ok" and tag in self.continued:
                record = merge_rounds(self.continued[tag], record)  # as the local job (_measure_units)
            if record["status"] in SUCCESS:
                self.working.add(record["target"])
                for earlier in self.held.pop(record["target"], []):
                    self.append(earlier)
                self.append(record)
            else:
                self.failed += 1
                if record["target"] in self.working:
                    self.append(record)
                else:
                    self.held.setdefault(record["target"], []).append(record)
        elif kind == "model":
            record.pop("std_us", None)  # the local job's model records carry median, min, max, samples
            self.append(record)
        elif kind == "launch_probe":
            self._need_ok(record, work)
            label = record["target"]
            self.probes.setdefault(label, {})[record["key"]] = record
            if len(self.probes[label]) == self.expected_probes[label]:
                self.append(launch_record(label, self.probes.pop(label)))
        elif kind == "copy":
            self._need_ok(record, work)
            label = record["target"]
            self.copies.setdefault(label, []).append(record)
            if len(self.copies[label]) == self.expected_copies[label]:
                rows = sorted(self.copies.pop(label), key=lambda r: r["nbytes"])
                for row in rows:
                    self.append(row)
                fit = copy_fit_record(label, rows)
                self.append(fit)
                per_byte = fit["us_per_byte"]
                self.log(f"copy {label}: alpha {fit['alpha_us']:.2f} us, "
                         f"{1e-3 / per_byte if per_byte else float('inf'):.2f} GB/s")
        else:
            self.append(record)

    @staticmethod
    def _need_ok(record, work):
        if record["status"] != "ok":
            raise ProfilingError(f"the probe {work.what} on {record['target']} failed over RPC ({record['status']}: "
                                 f"{record.get('error', '')}): probes are the harness, not data, so nothing of them "
                                 "was recorded; check the servers and run again")

    # -- the job ---------------------------------------------------------------------------------
    def run(self, extracted, *, copies, end_to_end, redo, copy_sizes, rounds: int = 1) -> dict:
        from tvm.support.popen_pool import PopenPoolExecutor

        from .job import cpu_kernels_timed_the_old_way, probe_module
        from .remote import copy_items, kernel_item, launch_items
        from .units import extract_units

        done = {tag for tag in self.store.done(retry_timeouts_below_s=self.timeout_s) if tag[0] not in redo}
        untimed = set()
        if "llvm" in self.kinds and self.farm.in_model_library is not None:
            # as the local job: CPU kernels whose records lack the current in-model or weights-cold timing (servers
            # that cannot time in-model would time them warm again, and again at every run: left as they are)
            untimed, self.continued = cpu_kernels_timed_the_old_way(self.store.newest_good(), done)
            done -= untimed
        units, seen, total_units, model_runs = [], set(), 0, []
        for model, graph, by_kind in extracted:
            for kind, kind_units in by_kind.items():
                total_units += len(kind_units)
                if end_to_end and ("model", model.name, kind) not in done:
                    model_runs.append((model, graph, kind_units, self.kinds[kind], kind))
                for unit in kind_units:
                    tag = ("unit", unit.key, kind)
                    if tag not in seen:
                        seen.add(tag)
                        if tag not in done:
                            units.append((model.name, graph, unit, kind))
        again = len(untimed & seen)
        self.log(f"{total_units} kernel launches, {len(seen)} unique kernels, {len(seen) - len(units)} already "
                 f"profiled, {len(units)} to measure on {sorted(self.kinds)} over RPC"
                 + (f" ({again} CPU kernels timed again because their records lack the in-model timing "
                    f"{IN_MODEL_TIMING} (with weights: {WEIGHTS_COLD_TIMING}))" if again else ""))
        pool = PopenPoolExecutor(max_workers=self.build_workers, timeout=self.timeout_s)
        lib = os.path.join(self.farm.workdir, "lib")
        os.makedirs(lib, exist_ok=True)
        try:
            def submit(unit, kind, file):
                target = self.targets[self.kinds[kind]].target
                return pool.submit(_export_kernel, unit.prim_func.script(show_meta=True), str(target),
                                   os.path.join(self.farm.workdir, file))

            # The harness first: a trivial kernel per target kind compiles here and runs on a server.
            if units:
                probes = []
                for kind in sorted({u[3] for u in units}):
                    unit = extract_units(probe_module(), self.targets[self.kinds[kind]].target)[0]
                    file = os.path.join("lib", f"probe_{kind}.so")
                    probes.append(Work(kernel_item(unit, None, "probe", kind, file), submit(unit, kind, file),
                                       what=f"probe kernel on {kind}"))
                results = {}
                self.farm.run(probes, lambda w, r: results.__setitem__(w.item["kind"], r))
                for kind, result in results.items():
                    if result.get("status") != "ok":
                        raise ProfilingError(
                            f"the profiler cannot measure even a trivial kernel (x + x on 16 floats) on {kind} over "
                            f"RPC ({self.farm.config.tracker} key {self.farm.config.key!r}): {result.get('status')}: "
                            f"{result.get('error', '')}. That is a problem of the options or the set-up (compiling "
                            "here, the servers' TVM runtime), not of any kernel, so nothing was recorded."
                        )
            works = [self._kernel_work(model_name, graph, unit, kind, submit) for model_name, graph, unit, kind in units]
            later = []  # (Work, build): compiled here in this thread while the servers time the kernels
            for model, graph, kind_units, _, kind in model_runs:
                later.append(self._model_work(model, graph, kind_units, kind))
            if copies:
                for name in self.runnable:
                    label = self.targets[name].label
                    if ("launch", "vm_call", label) in done:
                        continue
                    probes = launch_items(self.targets, name)
                    self.expected_probes[label] = len(probes)
                    later.extend((Work(item, cf.Future(), what=f"call overhead {item['record']['key']}"), write)
                                 for item, write in probes)
                for src, dst in itertools.permutations(self.runnable, 2):
                    label = f"{self.targets[src].label}->{self.targets[dst].label}"
                    if ("copy_fit", "fit", label) in done:
                        continue
                    items = copy_items(self.targets, src, dst, copy_sizes)
                    self.expected_copies[label] = len(items)
                    later.extend((Work(item, cf.Future(), what=f"copy {label} {item['record']['key']} B"), write)
                                 for item, write in items)
            works.extend(w for w, _ in later)
            self._time_all(works, later, self.on_result, f"rpc {self.farm.config.key}")
            if rounds > 1:
                self.more_rounds(extracted, rounds, end_to_end, submit)
        finally:
            pool.shutdown(wait=False)
        for kind, records in self.held.items():
            statuses = sorted({r["status"] for r in records})
            first = records[0]
            raise ProfilingError(
                f"every one of the {len(records)} kernel(s) measured on {kind} over RPC failed ({', '.join(statuses)}; "
                f"first: {first['func_name']}: {first.get('error', '')}) and no kernel has ever run there in "
                f"{self.store.path}: that is a problem of the options or the set-up, not data about these kernels, "
                "so none of these failures was recorded. Fix the cause and run again."
            )
        return dict(units_total=total_units, units_unique=len(seen), measured=self.measured, failed=self.failed)

    def _kernel_work(self, model_name, graph, unit, kind, submit, what_more: str = "") -> Work:
        """A kernel to time; compiled by ``submit(unit, kind, file)`` unless this job compiled it already."""
        from .remote import kernel_item

        file = os.path.join("lib", f"{unit.key}_{kind}.so")
        path = os.path.join(self.farm.workdir, file)
        if os.path.exists(path):
            build = cf.Future()
            build.set_result(path)
        else:
            build = submit(unit, kind, file)
        return Work(kernel_item(unit, graph, model_name, kind, file), build,
                    what=f"{model_name}:{unit.func_name}{what_more}")

    def _model_work(self, model, graph, kind_units, kind, what_more: str = "") -> tuple:
        """``(Work, build)`` of a model built on one target kind, timed end to end (its executable is written by
        ``build(path)``: :func:`_build_later`)."""
        from .job import model_fields, model_placement
        from .remote import plan_item

        placement = model_placement(model, graph, self.targets, self.kinds[kind])
        record = model_fields(model, kind_units, placement, kind)
        item, values, write = plan_item(placement, record, os.path.join("lib", f"model_{model.name}_{kind}.so"))
        return Work(item, cf.Future(), values, what=f"{model.name} end to end on {kind}{what_more}"), write

    def _time_all(self, works, later, on_result, desc: str) -> None:
        """Time ``works`` on the farm while a thread builds the executables of ``later``; one progress bar."""
        bar = None
        if works:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(works), desc=desc, unit="item", disable=not self.progress)
        builder = threading.Thread(target=_build_later, args=(later, self.farm.workdir), daemon=True)
        builder.start()
        try:
            if works:
                self.farm.run(works, on_result, progress=bar)
        finally:
            builder.join()
            if bar is not None:
                bar.close()

    def more_rounds(self, extracted, rounds: int, end_to_end: bool, submit) -> None:
        """Rounds 2..``rounds`` over RPC: every kernel and model of the job with a successful record and fewer
        rounds, timed again round after round over all of them (a kernel's rounds minutes apart on a long job),
        each result merged into its newest record (:func:`~autoplace.profile.job.merge_rounds`: the median of the
        rounds within 10% of the fastest). A failure in a later round leaves the record as it was. Kernels
        compiled in this job are not compiled again; ``submit(unit, kind, file)`` compiles the others."""
        from .job import merge_rounds, rounds_timed

        newest = self.store.newest_good()

        def behind(tag, round_):
            return tag in newest and rounds_timed(newest[tag]) < round_

        def merge(work, result):
            record = work.item["record"]
            tag = (record["kind"], record["key"], record["target"])
            if result.get("status") != "ok":
                self.log(f"{work.what}: {result.get('status')} ({result.get('error', '')}); its record keeps the "
                         "rounds it had")
                return
            merged = merge_rounds(newest[tag], {"host_slowdown": None, **result})
            if record["kind"] == "model":
                merged.pop("std_us", None)
            self.append(merged)
            newest[tag] = merged

        for round_ in range(2, rounds + 1):
            works, later, seen = [], [], set()
            for model, graph, by_kind in extracted:
                for kind, kind_units in by_kind.items():
                    for unit in kind_units:
                        tag = ("unit", unit.key, kind)
                        if tag not in seen and behind(tag, round_):
                            seen.add(tag)
                            works.append(self._kernel_work(model.name, graph, unit, kind, submit, f", round {round_}"))
                    if end_to_end and behind(("model", model.name, kind), round_):
                        work, write = self._model_work(model, graph, kind_units, kind, f", round {round_}")
                        built = os.path.join(self.farm.workdir, work.item["file"])
                        if os.path.exists(built):
                            work.build.set_result(built)
                        else:
                            later.append((work, write))
                        works.append(work)
            if works:
                self._time_all(works, later, merge, f"rpc {self.farm.config.key}, round {round_}/{rounds}")


def _export_kernel(func_script: str, target_json: str, path: str) -> str:
    """Runs in a compile worker (TVM's ``PopenPoolExecutor``): compile one kernel into ``path``."""
    from .remote import export_kernel

    export_kernel(func_script, target_json, path)
    return path


def _build_later(later, workdir) -> None:
    """Build the VM executables (end-to-end models, probes) in order; each future gets its file or error."""
    for work, write in later:
        path = os.path.join(workdir, work.item["file"])
        try:
            write(path)
        except Exception as err:
            work.build.set_exception(err)
        else:
            work.build.set_result(path)


# --------------------------------------------------------------------------------------- end to end


def time_plans(placements: dict, rpc, *, rounds: int = 5, repeat: int = 3, check: bool = True, seed: int = 0,
               log=print) -> tuple[dict, dict]:
    """Time placed models end to end on one server of an RPC key, in interleaved rounds.

    Every plan is built here (with :func:`~autoplace.profile.remote.staged_module`'s timing functions),
    uploaded with its inputs (seeded random) and weights, each argument copied to its own device there, and
    timed as :func:`autoplace.compare` times plans locally: ``rounds`` rounds, each timing every plan
    ``repeat`` times, ``number`` calls per sample chosen so a sample lasts about 20 ms. All plans run in one
    session on one server, so they are compared on the same machine.

    Parameters
    ----------
    placements : dict
        ``{plan name: Placement}``.
    rpc : RPCConfig, str, dict or pair
    check : bool
        Check that every plan computes the same outputs as the first (rtol 1e-4), on the server.

    Returns
    -------
    (dict, dict)
        ``{plan name: samples in microseconds}`` and the server's hardware metadata.

    Raises
    ------
    RPCError
        The tracker or the key's servers cannot be reached, or the session is lost.
    AssertionError
        A plan computes other numbers than the first (``check``).
    """
    import numpy as np
    import tvm
    from tvm.runtime import vm as runtime_vm

    from .remote import plan_item
    from .remote_runner import stage_placed_model, staged_outputs, time_staged

    config = RPCConfig.create(rpc)
    if not placements:
        return {}, {}
    first = next(iter(placements.values()))
    cpu = next((first.targets[n].target for n in first.targets if first.targets[n].kind == "llvm"), None)
    with Farm(config, {}, log=log) as farm:
        meta = farm.open(cpu)
        missing = [first.targets[n].label for n in first.targets
                   if not farm.has_device(first.targets[n].kind, first.targets[n].vdevice_id)]
        if missing:
            raise RPCError(f"the RPC servers of key {config.key!r} ({meta['hardware_id']}) have no device for "
                           f"{missing}: give --targets that machine has")
        built = {}
        for i, (name, placement) in enumerate(placements.items()):
            item, values, write = plan_item(placement, {}, f"plan{i}.so", seed=seed)
            path = os.path.join(farm.workdir, item["file"])
            write(path)
            built[name] = (item, values, path)
        host, port, matchkey = request_server(config)
        session = farm._session(host, port, matchkey, timeout_s=config.session_timeout_s * (len(built) + rounds))
        try:
            farm._check_server(session, (host, port))
            machines = {}
            for name, (item, values, path) in built.items():
                session.upload(path, target=os.path.basename(path))
                lib = session.load_module(os.path.basename(path))
                devices = [session.device(_dev_type(k), i) for k, i in item["devices"]]
                machines[name] = (stage_placed_model(tvm, runtime_vm, lib, devices, values), devices[0])
            machine, dev = next(iter(machines.values()))
            one = float(np.median(time_staged(machine, dev, dict(number=1, repeat=3, min_repeat_ms=0))))
            timing = dict(number=max(1, int(20_000 / max(one, 1.0))), repeat=repeat, min_repeat_ms=0)
            samples = {name: [] for name in machines}
            for _ in range(rounds):
                for name, (machine, dev) in machines.items():
                    samples[name].extend(time_staged(machine, dev, timing))
            if check:
                reference = None
                for name, (machine, _) in machines.items():
                    out = staged_outputs(machine)
                    if reference is None:
                        reference = out
                        continue
                    for a, b in zip(out, reference):
                        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4,
                                                   err_msg=f"plan {name} computes other numbers")
        except (RPCError, AssertionError):
            raise
        except Exception as err:
            if _alive(session):
                raise
            raise RPCError(f"lost the session on RPC server {host}:{port} while timing the plans "
                           f"({error_text(err)}); run the comparison again") from None
        finally:
            machines = machine = None
            del session
    return {name: np.asarray(s) for name, s in samples.items()}, meta


def remote_profile_dir(rpc, root: str | None = None, *, log=print) -> tuple[str, dict]:
    """``(<profiles root>/<hardware id of the key's machines>, hardware metadata)``: where a profile of the
    remote machine lives (it may not exist yet)."""
    from .discover import default_profiles_root

    config = RPCConfig.create(rpc)
    with Farm(config, {}, log=log) as farm:
        meta = farm.open()
    return os.path.join(root or default_profiles_root(), meta["hardware_id"]), meta
