"""Build an annotated module (fused within each device) and run it on the Relax VM."""

from .pipeline import build, lower, single_device_build, stock_build
from .runner import Runner

__all__ = ["Runner", "build", "lower", "single_device_build", "stock_build"]
