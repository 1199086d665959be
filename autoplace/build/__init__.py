"""Build an annotated module (fused within each device) and run it on the Relax VM."""

from .pipeline import build, lower, stock_build
from .runner import Runner

__all__ = ["Runner", "build", "lower", "stock_build"]
