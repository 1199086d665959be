"""Profile storage: ``profiles/<hardware id>/`` with ``metadata.json`` and append-only ``records.jsonl``.

Every record is one JSON object on one line, carrying a CRC-32 of its own content (``"crc"``), the
hardware id and the TVM version it was measured with. Appends are flushed and fsynced one line at a
time, so a job killed at any moment leaves at most one torn last line: :meth:`ProfileStore.records`
reports it (and any line whose CRC does not match) and skips it, and never merges it. Resuming a job
means skipping the records whose ``(kind, key, target)`` is already there.
"""

from __future__ import annotations

import json
import os
import warnings
import zlib
from dataclasses import dataclass, field

import pandas as pd

from .hardware import hardware_metadata

RECORD_SCHEMA = 1


class CorruptRecordWarning(UserWarning):
    """A line of a records file was torn or altered and has been skipped."""


class ForeignProfileWarning(UserWarning):
    """Records measured on other hardware or another TVM version were found."""


def _crc(record: dict) -> str:
    body = json.dumps({k: v for k, v in record.items() if k != "crc"}, sort_keys=True, separators=(",", ":"))
    return f"{zlib.crc32(body.encode()):08x}"


@dataclass
class LoadReport:
    """What :meth:`ProfileStore.records` read: good records, and lines it skipped (with why)."""

    records: list = field(default_factory=list)
    skipped: list = field(default_factory=list)  # (line number, reason)
    foreign: int = 0


class ProfileStore:
    """A folder of profiles for one machine.

    Parameters
    ----------
    path : str
        ``profiles/<hardware id>`` (created on first write).
    metadata : dict, optional
        Where the records are measured (see :func:`hardware_metadata`); default: this machine.
    """

    RECORDS = "records.jsonl"
    METADATA = "metadata.json"

    def __init__(self, path: str, metadata: dict | None = None):
        self.path = path
        self._metadata = metadata

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
        """Append one record (adds schema, hardware id, TVM version and CRC); returns what was written."""
        self._write_metadata()
        record = dict(record)
        record.setdefault("schema", RECORD_SCHEMA)
        record.setdefault("hardware_id", self.metadata["hardware_id"])
        record.setdefault("tvm_version", self.metadata["tvm_version"])
        record["crc"] = _crc(record)
        line = json.dumps(record, sort_keys=True, separators=(",", ":"))
        path = os.path.join(self.path, self.RECORDS)
        self._repair_tail(path)
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())
        return record

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

    def load(self, *, allow_foreign: bool = False) -> LoadReport:
        """Read every record, skipping torn/altered lines and (unless allowed) foreign ones."""
        report = LoadReport()
        path = os.path.join(self.path, self.RECORDS)
        if not os.path.exists(path):
            return report
        meta = self.metadata
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                text = line.strip()
                if not text:
                    continue
                try:
                    record = json.loads(text)
                except json.JSONDecodeError:
                    report.skipped.append((number, "torn or not JSON"))
                    continue
                if not isinstance(record, dict) or record.get("crc") != _crc(record):
                    report.skipped.append((number, "checksum mismatch"))
                    continue
                foreign = (record.get("hardware_id") != meta["hardware_id"]
                           or record.get("tvm_version") != meta["tvm_version"])
                if foreign:
                    report.foreign += 1
                    if not allow_foreign:
                        continue
                report.records.append(record)
        if report.skipped:
            warnings.warn(
                f"{path}: skipped {len(report.skipped)} corrupt line(s) {report.skipped[:5]}; they are kept in "
                "the file and never merged. Re-run the profiling job to measure them again.",
                CorruptRecordWarning,
                stacklevel=2,
            )
        if report.foreign:
            warnings.warn(
                f"{path}: {report.foreign} record(s) were measured on other hardware or another TVM version "
                f"than {meta['hardware_id']} / TVM {meta['tvm_version']}; "
                + ("they are included as asked." if allow_foreign else "they are left out (allow_foreign=True to use them)."),
                ForeignProfileWarning,
                stacklevel=2,
            )
        return report

    def records(self, *, allow_foreign: bool = False) -> pd.DataFrame:
        """All good records as a DataFrame (one row per record)."""
        return pd.DataFrame(self.load(allow_foreign=allow_foreign).records)

    def done(self) -> set:
        """``{(kind, key, target)}`` of every good record: what a resumed job can skip."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return {(r.get("kind"), r.get("key"), r.get("target")) for r in self.load().records}


def default_profile_dir(root: str = "profiles", metadata: dict | None = None) -> str:
    """``<root>/<hardware id>`` for this machine (or the given metadata)."""
    metadata = metadata or hardware_metadata()
    return os.path.join(root, metadata["hardware_id"])
