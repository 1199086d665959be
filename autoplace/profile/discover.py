"""Which profile folders price a set of target kinds: this machine's own first, then a folder measured
on another machine that covers every kind (a plan for that machine), then one folder per kind."""

from __future__ import annotations

import os
import warnings

from ..errors import CostError
from .hardware import hardware_metadata
from .store import ProfileStore


def default_profiles_root() -> str:
    """``$AUTOPLACE_PROFILES``, else the repository's ``profiles/`` folder, else ``./profiles``."""
    env = os.environ.get("AUTOPLACE_PROFILES")
    if env:
        return env
    bundled = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                           "profiles")
    return bundled if os.path.isdir(bundled) else "profiles"


def measured_here_dir() -> str:
    """Where ``optimize(measure="auto")`` keeps what it measured on this machine:
    ``$AUTOPLACE_CACHE/<hardware id>``, default ``~/.cache/autoplace/profiles/<hardware id>``.

    A folder of its own, apart from the profiles a project ships (``profiles/``), so a user's
    measurements never change committed files; :func:`find_profiles` reads it with this machine's
    profile, and its records win over older ones of the same kernel.
    """
    root = os.environ.get("AUTOPLACE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "autoplace",
                                                             "profiles")
    return os.path.join(root, hardware_metadata()["hardware_id"])


def find_profiles(kinds, profile_dir: str | None = None, root: str | None = None) -> list[str]:
    """Profile folders that together cover ``kinds`` (target kinds such as ``llvm``, ``cuda``).

    Parameters
    ----------
    kinds : iterable of str
        Target kinds the plan needs costs for.
    profile_dir : str, optional
        Use exactly this folder.
    root : str, optional
        Where profile folders live (default :func:`default_profiles_root`).

    Returns
    -------
    list of str
        Preference: the given folder; else this machine's own folder if it covers every kind; else a
        single folder that covers every kind (another machine's, with a warning); else one folder per
        kind (this machine's where it has one). This machine's own measurements
        (:func:`measured_here_dir`) always come last (newest wins), and count as part of its own folder
        when it has one.

    Raises
    ------
    CostError
        If some kind has no profile anywhere (and so no cost model either).
    """
    if profile_dir is not None:
        return [profile_dir]
    root = root or default_profiles_root()
    folders = sorted(os.path.join(root, d) for d in os.listdir(root)) if os.path.isdir(root) else []
    folders = [folder for folder in folders if os.path.isdir(folder)]
    kinds = set(kinds)
    own = os.path.join(root, hardware_metadata()["hardware_id"])
    here = measured_here_dir()
    extra = [here] if os.path.isdir(here) and os.path.abspath(here) != os.path.abspath(own) else []
    here_kinds = _measured_kinds(here) if extra else set()
    # This machine's measurements alone never stand in for a profile: they have no cost model, no copy fits.
    mine = _measured_kinds(own) | here_kinds if own in folders else set()
    if own in folders and kinds <= mine:  # the other folders are not read (a second or so each, parsed)
        if "llvm" in kinds:
            _warn_other_thread_count(own)
        return [own] + extra
    covered = {folder: _measured_kinds(folder) for folder in folders}
    for folder, have in covered.items():
        if kinds <= have:
            if own in covered:
                why = (f"planning with the profile measured on {os.path.basename(folder)} (this machine is "
                       f"{os.path.basename(own)}): the plan is for that machine")
            else:
                why = (f"no profile of this machine ({os.path.basename(own)}) in {root}: the cost model and the "
                       f"costs of kernels not measured here come from {os.path.basename(folder)}'s profile "
                       "(optimize's default measure='auto' measures the model's kernels here first)")
            warnings.warn(why, stacklevel=3)
            # This machine's measurements join only a plan for this machine (it measured every kind asked),
            # never a plan for that one (a GPU box's profile, planned from here).
            return [folder] + (extra if kinds <= here_kinds else [])
    chosen = []
    for kind in sorted(kinds):
        if kind in mine:
            chosen.append(own)
            continue
        options = [f for f, have in covered.items() if kind in have]
        if not options:
            raise CostError(
                f"no profile measures target kind {kind!r} (searched {root}): run `autoplace profile --zoo ... "
                f"--targets '{{\"x\": \"{kind}\"}}'` on a machine with that device, or pass costs=... "
                "(a CostTable with a trained cost model)"
            )
        chosen.append(options[0])
    return sorted(set(chosen)) + extra


def _warn_other_thread_count(folder: str) -> None:
    """Warn when this machine's profile timed its CPU kernels on another number of threads than TVM runs here."""
    from ..backend.cpu_threads import runtime_threads

    measured = ProfileStore(folder).stored_metadata() or {}
    threads = measured.get("cpu_threads")
    if threads is not None and int(threads) != runtime_threads():
        warnings.warn(
            f"the profile {folder} timed CPU kernels on {threads} threads, but TVM runs {runtime_threads()} in "
            f"this process (TVM_NUM_THREADS / OMP_NUM_THREADS): its CPU costs do not hold here. Unset the "
            f"variable (autoplace then uses every physical core) or set TVM_NUM_THREADS={threads}; "
            "measure='auto' measures this model's kernels again on the threads used here.", stacklevel=4)


#: ``{records file: ((size, CRC-32), kinds)}``: :func:`_measured_kinds` of each folder's records as last read (every
#: plan asks it of every folder; parsing them all each time took seconds, keeping them parsed hundreds of MB).
_KINDS: dict = {}


def _measured_kinds(folder: str) -> set:
    """Target kinds a profile folder measured at least one kernel of successfully."""
    from .store import file_version

    path = os.path.join(folder, ProfileStore.RECORDS)
    if not os.path.exists(path):
        return set()
    version = file_version(path)
    if path in _KINDS and _KINDS[path][0] == version:
        return set(_KINDS[path][1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        records = ProfileStore(folder).load(allow_foreign=True).records
    kinds = {r.get("target") for r in records if r.get("kind") == "unit" and r.get("status") == "ok"}
    _KINDS[path] = (version, kinds)
    return set(kinds)
