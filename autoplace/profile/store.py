"""Profile storage: ``profiles/<hardware id>/`` with ``metadata.json`` and append-only ``records.jsonl``.

Every record is one JSON object on one line, carrying a CRC-32 of its own content (``"crc"``) and
what measured it: the hardware id, the TVM version and the date (``hardware_id``, ``tvm_version``,
``measured_at``, from :func:`~autoplace.profile.hardware.measured_by` in the measuring process, never
copied from the folder). Appends are flushed and fsynced one line at a time under a file lock, so a
job killed at any moment leaves at most one torn last line: :meth:`ProfileStore.records` reports it
(and any line whose CRC does not match) and skips it, and never merges it. Resuming a job means
skipping the records whose ``(kind, key, target)`` is already there; :meth:`ProfileStore.lock`
keeps two jobs on one folder from measuring the same kernels (and from disturbing each other's timings).

Reading compares every record with the profile's hardware (``metadata.json``) and with the TVM
running now: records of other hardware or another TVM version are reported by count and version
(:class:`ForeignProfileWarning`) and left out unless asked for.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import warnings
import zlib
from collections import Counter, OrderedDict
from dataclasses import dataclass, field

import pandas as pd

from ..errors import CorruptRecordWarning, ForeignProfileWarning, ProfilingError
from .hardware import hardware_metadata, measured_by

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no locking (one job per folder at a time)
    fcntl = None

RECORD_SCHEMA = 1
#: Statuses of a kernel record that mean the target runs it (``"compiled"``: compile-only profiling).
SUCCESS = ("ok", "compiled")


def _crc(record: dict) -> str:
    body = json.dumps({k: v for k, v in record.items() if k != "crc"}, sort_keys=True, separators=(",", ":"))
    return f"{zlib.crc32(body.encode()):08x}"


def _intact(text: str, record) -> bool:
    """Whether a records line ``text`` (parsed: ``record``) carries the CRC of its record.

    The store writes each line as :func:`_crc`'s body with the ``crc`` field added (sorted keys, no spaces), so the
    body is the line without that field: its CRC is checked on the text first, in microseconds, and only a line
    that fails it is serialised again (a line written some other way; 10 of the 15 s that parsing the committed
    profiles took went into serialising every record again)."""
    if not isinstance(record, dict) or not isinstance(record.get("crc"), str):
        return False
    crc = record["crc"]
    for crc_field in (f',"crc":"{crc}"', f'"crc":"{crc}",'):
        body = text.replace(crc_field, "", 1)
        if body != text and f"{zlib.crc32(body.encode()):08x}" == crc:
            return True
    return crc == _crc(record)


#: ``{path: ((size, CRC-32 of the file), [(line number, record or None, reason)])}``, least recently read first: each
#: records file parsed and checksummed once per content (a plan reads the same profile several times; a file of
#: 25,000 records takes seconds to parse, its CRC milliseconds). Any change to the file changes its CRC, so a changed
#: file is read again. Parsed records take about 8 kB each: the files read longest ago are dropped beyond
#: :data:`PARSED_MAX_RECORDS`.
_PARSED: OrderedDict = OrderedDict()
#: Records :data:`_PARSED` keeps at most (about 320 MB; the largest committed profile has 25,000).
PARSED_MAX_RECORDS = 40_000


def _read_with_version(path: str) -> tuple[bytes, tuple[int, int]]:
    """A file's bytes and ``(size, CRC-32)`` of them."""
    with open(path, "rb") as f:
        data = f.read()
    return data, (len(data), zlib.crc32(data))


def file_version(path: str) -> tuple[int, int]:
    """``(size, CRC-32)`` of a file's content: what tells a changed records file from the one read before."""
    return _read_with_version(path)[1]


def _parsed_lines(path: str) -> list:
    """``[(line number, record dict or None, why it was skipped)]`` of a records file, from :data:`_PARSED` while
    the file's content is unchanged."""
    data, version = _read_with_version(path)
    cached = _PARSED.get(path)
    if cached is not None and cached[0] == version:
        _PARSED.move_to_end(path)
        return cached[1]
    lines = []
    for number, line in enumerate(data.decode("utf-8", errors="replace").split("\n"), 1):
        text = line.strip()
        if not text:
            continue
        try:
            record = json.loads(text)
        except json.JSONDecodeError:
            lines.append((number, None, "torn or not JSON"))
            continue
        if not _intact(text, record):
            lines.append((number, None, "checksum mismatch"))
            continue
        lines.append((number, record, None))
    _PARSED.pop(path, None)
    _PARSED[path] = (version, lines)
    while len(_PARSED) > 1 and sum(len(entry[1]) for entry in _PARSED.values()) > PARSED_MAX_RECORDS:
        _PARSED.popitem(last=False)
    return lines


@dataclass
class LoadReport:
    """What :meth:`ProfileStore.records` read: good records, and lines it skipped (with why)."""

    records: list = field(default_factory=list)
    skipped: list = field(default_factory=list)  # (line number, reason)
    foreign: int = 0
    #: ``{(hardware_id, tvm_version): count}`` of the foreign records.
    foreign_groups: Counter = field(default_factory=Counter)
    total: int = 0  # good lines read (foreign ones included)


class ProfileStore:
    """A folder of profiles for one machine.

    Parameters
    ----------
    path : str
        ``profiles/<hardware id>`` (created on first write).
    metadata : dict, optional
        The machine the profile describes (see :func:`hardware_metadata`); default: the folder's
        ``metadata.json``, else this machine. Given explicitly (records measured elsewhere and merged
        here), it also stamps appended records that carry no ``hardware_id`` / ``tvm_version``;
        otherwise they are stamped with :func:`measured_by` (this process).
    """

    RECORDS = "records.jsonl"
    METADATA = "metadata.json"
    #: Descriptions of kernels and models added after they were timed (``{unit key or model name: {field: value}}``,
    #: e.g. the ``read_strides`` and ``read_runs`` of :func:`autoplace.profile.access.backfill_read_access`, the ``num_inputs`` of
    #: :func:`autoplace.profile.access.backfill_model_inputs`): merged into the unit and model records of those keys
    #: that lack the field when the store is read; the timed records themselves are never rewritten.
    UNIT_FIELDS = "unit_fields.json"
    #: The fields of :attr:`UNIT_FIELDS` that describe model records (the others describe kernels): a model and a
    #: kernel of the same key each get only their own.
    MODEL_FIELDS = frozenset({"num_inputs"})

    def __init__(self, path: str, metadata: dict | None = None):
        self.path = path
        self._metadata = metadata
        self._explicit_metadata = metadata is not None

    # -- metadata ---------------------------------------------------------------------------------
    @property
    def metadata(self) -> dict:
        if self._metadata is None:
            stored = self.stored_metadata()
            self._metadata = stored if stored is not None else hardware_metadata()
        return self._metadata

    def stored_metadata(self) -> dict | None:
        path = os.path.join(self.path, self.METADATA)
        if not os.path.exists(path):
            return None
        with open(path, encoding="utf-8") as f:
            return json.load(f)

    def _write_metadata(self) -> None:
        os.makedirs(self.path, exist_ok=True)
        path = os.path.join(self.path, self.METADATA)
        if os.path.exists(path):
            return
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(self.metadata, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)  # never a half-written metadata file

    # -- records ----------------------------------------------------------------------------------
    def append(self, record: dict) -> dict:
        """Append one record (adds schema, what measured it, and the CRC); returns what was written.

        A record without ``hardware_id`` / ``tvm_version`` / ``measured_at`` gets them from
        :func:`measured_by` (this process, now), or from the ``metadata`` the store was given.
        """
        self._write_metadata()
        record = dict(record)
        record.setdefault("schema", RECORD_SCHEMA)
        stamp = measured_by()
        if self._explicit_metadata:
            stamp.update({k: self.metadata[k] for k in ("hardware_id", "tvm_version") if k in self.metadata})
        for name, value in stamp.items():
            record.setdefault(name, value)
        record["crc"] = _crc(record)
        line = json.dumps(record, sort_keys=True, separators=(",", ":"))
        path = os.path.join(self.path, self.RECORDS)
        with open(path, "a", encoding="utf-8") as f:
            if fcntl is not None:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX)  # whole lines only, whoever else appends
            try:
                self._repair_tail(path)
                f.write(line + "\n")
                f.flush()
                os.fsync(f.fileno())
            finally:
                if fcntl is not None:
                    fcntl.flock(f.fileno(), fcntl.LOCK_UN)
        return record

    @contextlib.contextmanager
    def lock(self, *, timeout_s: float | None = None, log=print, poll_s: float = 0.5):
        """Hold the folder's job lock: one profiling job per folder at a time.

        The lock is an ``flock`` on the folder itself (no lock file is left behind; the kernel releases
        it when the holder ends or is killed). A second job waits here (saying so once) until the first
        ends, then reads the store again and measures only what is still missing. Raises
        :class:`~autoplace.errors.ProfilingError` after ``timeout_s`` seconds of waiting. A folder this
        call created is removed again if the job fails before writing anything to it.
        """
        created = not os.path.isdir(self.path)
        os.makedirs(self.path, exist_ok=True)
        fd = os.open(self.path, os.O_RDONLY)
        try:
            if fcntl is not None:
                self._acquire(fd, timeout_s, log, poll_s)
            try:
                yield self
            except BaseException:
                if created and not os.listdir(self.path):
                    with contextlib.suppress(OSError):
                        os.rmdir(self.path)  # leave no trace of a job that failed before measuring
                raise
        finally:
            os.close(fd)  # releases the lock

    def _acquire(self, fd: int, timeout_s, log, poll_s) -> None:
        started = time.monotonic()
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                pass
            if timeout_s is not None and time.monotonic() - started > timeout_s:
                raise ProfilingError(
                    f"{self.path} is locked by another profiling job for more than {timeout_s:.0f} s; "
                    "wait for it to finish (or stop it), then run again"
                )
            if not told:
                log(f"waiting for another profiling job on {self.path} to finish "
                    "(then measuring what it left)")
                told = True
            time.sleep(poll_s)

    @staticmethod
    def _repair_tail(path: str) -> None:
        """If the file ends in a torn line (no newline), end it, so the next record starts clean.

        The torn line stays in the file (evidence) and is reported and skipped when read.
        """
        if not os.path.exists(path) or os.path.getsize(path) == 0:
            return
        with open(path, "rb+") as f:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                f.write(b"\n")

    def expected(self) -> tuple[str, str]:
        """``(hardware_id, tvm_version)`` a record must carry to be this profile's: the folder's hardware
        (its ``metadata.json``, else this machine) and the TVM version running now."""
        import tvm

        return self.metadata["hardware_id"], tvm.__version__

    def load(self, *, allow_foreign: bool = False) -> LoadReport:
        """Read every record, skipping torn/altered lines and (unless allowed) foreign ones.

        A record is foreign when its ``hardware_id`` is not the profile's or its ``tvm_version`` is not
        the TVM running now (see :meth:`expected`); a record without them (older files) takes the
        folder's ``metadata.json`` values.
        """
        report = LoadReport()
        path = os.path.join(self.path, self.RECORDS)
        if not os.path.exists(path):
            return report
        meta = self.metadata
        hardware_id, tvm_version = self.expected()
        for number, record, reason in _parsed_lines(path):
            if record is None:
                report.skipped.append((number, reason))
                continue
            report.total += 1
            by = (str(record.get("hardware_id", meta.get("hardware_id"))),
                  str(record.get("tvm_version", meta.get("tvm_version"))))
            if by != (hardware_id, tvm_version):
                report.foreign += 1
                report.foreign_groups[by] += 1
                if not allow_foreign:
                    continue
            report.records.append(dict(record))  # a copy: the cached one stays as the file says
        added = self.unit_fields()
        for record in report.records if added else ():
            kind = record.get("kind")
            extra = added.get(record.get("key")) if kind in ("unit", "model") else None
            for name, value in (extra or {}).items():
                if (name in self.MODEL_FIELDS) == (kind == "model") and record.get(name) is None:
                    record[name] = value
        if report.skipped:
            warnings.warn(
                f"{path}: skipped {len(report.skipped)} corrupt line(s) {report.skipped[:5]}; they are kept "
                "in the file and never merged. Re-run the profiling job to measure them again.",
                CorruptRecordWarning,
                stacklevel=2,
            )
        if report.foreign:
            groups = ", ".join(
                f"{n} measured on {hw} with TVM {tv}" for (hw, tv), n in report.foreign_groups.most_common()
            )
            share = "all" if report.foreign == report.total else f"{report.foreign} of {report.total}"
            warnings.warn(
                f"{path}: {share} record(s) were measured on other hardware or another TVM version than this "
                f"profile's hardware {hardware_id} with the running TVM {tvm_version} ({groups}); "
                + ("they are included as asked." if allow_foreign else
                   "they are left out (allow_foreign=True to use them; profile again to replace them)."),
                ForeignProfileWarning,
                stacklevel=2,
            )
        return report

    def unit_fields(self) -> dict:
        """``{unit key: {field: value}}`` of :attr:`UNIT_FIELDS` (empty when there is none)."""
        path = os.path.join(self.path, self.UNIT_FIELDS)
        if not os.path.exists(path):
            return {}
        try:
            with open(path, encoding="utf-8") as f:
                fields = json.load(f)
        except (OSError, json.JSONDecodeError) as err:
            warnings.warn(f"{path} is not readable JSON ({err}); its kernel descriptions are left out: delete "
                          "it and run the back-fill again", CorruptRecordWarning, stacklevel=2)
            return {}
        return fields if isinstance(fields, dict) else {}

    def add_unit_fields(self, fields: dict) -> int:
        """Merge ``{unit key: {field: value}}`` into :attr:`UNIT_FIELDS` (written whole, then renamed into place:
        never half-written); returns how many keys it now describes."""
        merged = self.unit_fields()
        for key, values in fields.items():
            merged.setdefault(key, {}).update(values)
        self._write_metadata()
        path = os.path.join(self.path, self.UNIT_FIELDS)
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(merged, f, sort_keys=True, separators=(",", ":"))
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        return len(merged)

    def records(self, *, allow_foreign: bool = False) -> pd.DataFrame:
        """All good records as a DataFrame (one row per record)."""
        return pd.DataFrame(self.load(allow_foreign=allow_foreign).records)

    def _quiet_records(self) -> list:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return self.load().records

    @staticmethod
    def _working(records) -> set:
        return {r.get("target") for r in records if r.get("kind") == "unit" and r.get("status") in SUCCESS}

    def working_targets(self) -> set:
        """Target kinds on which at least one kernel record of this profile succeeded."""
        return self._working(self._quiet_records())

    def done(self, *, retry_timeouts_below_s: float | None = None) -> set:
        """``{(kind, key, target)}`` of every good record: what a resumed job can skip.

        Failed kernels of a target kind on which no kernel ever succeeded are left out: such records
        come from a harness or option problem (older versions kept them), so they are measured again.
        With ``retry_timeouts_below_s``, so are kernels that timed out under a shorter time limit.
        """
        records = self._quiet_records()
        working = self._working(records)
        tags = set()
        for r in records:
            tag = (r.get("kind"), r.get("key"), r.get("target"))
            if r.get("kind") == "unit" and r.get("status") not in SUCCESS:
                if r.get("target") not in working:
                    continue
                limit = r.get("timeout_s")
                if (r.get("status") == "timeout" and retry_timeouts_below_s is not None
                        and (limit is None or float(limit) < retry_timeouts_below_s)):
                    continue
            tags.add(tag)
        return tags

    def newest_good(self) -> dict:
        """``{(kind, key, target): record}``: the newest successful ``unit`` and ``model`` record of each key
        (what a job's later rounds add to; a record without ``rounds`` is one round)."""
        newest = {}
        for r in self._quiet_records():
            if r.get("kind") in ("unit", "model") and r.get("status") in SUCCESS and "median_us" in r:
                newest[(r.get("kind"), r.get("key"), r.get("target"))] = r
        return newest


def default_profile_dir(root: str = "profiles", metadata: dict | None = None) -> str:
    """``<root>/<hardware id>`` for this machine (or the given metadata)."""
    metadata = metadata or hardware_metadata()
    return os.path.join(root, metadata["hardware_id"])
