"""Profiling: measure what the build really runs (fused kernels per target, copies, VM call overhead)
and keep it in ``profiles/<hardware id>/``."""

from .discover import default_profiles_root, find_profiles, measured_here_dir
from .hardware import hardware_metadata
from .job import profile_models
from .measure import KernelTimer
from .rpc import RPCConfig, profile_over_rpc
from .store import CorruptRecordWarning, ForeignProfileWarning, ProfileStore, default_profile_dir
from .units import Unit, extract_units

__all__ = [
    "CorruptRecordWarning",
    "ForeignProfileWarning",
    "KernelTimer",
    "ProfileStore",
    "RPCConfig",
    "Unit",
    "default_profile_dir",
    "default_profiles_root",
    "extract_units",
    "find_profiles",
    "hardware_metadata",
    "measured_here_dir",
    "profile_models",
    "profile_over_rpc",
]
