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
        single folder that covers every kind (a plan for that machine, with a warning); else one
        folder per kind (this machine's where it has one).

    Raises
    ------
    CostError
        If some kind has no profile anywhere (and so no cost model either).
    """
    if profile_dir is not None:
        return [profile_dir]
    root = root or default_profiles_root()
    folders = sorted(os.path.join(root, d) for d in os.listdir(root)) if os.path.isdir(root) else []
    covered = {}
    for folder in folders:
        if not os.path.isdir(folder):
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            df = ProfileStore(folder).records(allow_foreign=True)
        # A kind counts as measured there only where some kernel was measured successfully.
        ok = (df["kind"] == "unit") & (df["status"] == "ok") if len(df) and "status" in df else None
        covered[folder] = set(df["target"][ok]) if ok is not None else set()
    kinds = set(kinds)
    own = os.path.join(root, hardware_metadata()["hardware_id"])
    if kinds <= covered.get(own, set()):
        return [own]
    for folder, have in covered.items():
        if kinds <= have:
            warnings.warn(f"planning with the profile measured on {os.path.basename(folder)} (this machine is "
                          f"{os.path.basename(own)}): the plan is for that machine", stacklevel=3)
            return [folder]
    chosen = []
    for kind in sorted(kinds):
        options = [f for f, have in covered.items() if kind in have]
        if not options:
            raise CostError(
                f"no profile measures target kind {kind!r} (searched {root}): run `autoplace profile --zoo ... "
                f"--targets '{{\"x\": \"{kind}\"}}'` on a machine with that device, or pass costs=... "
                "(a CostTable with a trained cost model)"
            )
        chosen.append(own if own in options else options[0])
    return sorted(set(chosen))
