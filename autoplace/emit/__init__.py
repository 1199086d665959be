"""Turn a placement (node -> target) into a standard Relax module with device annotations."""

from .annotate import AnnotatedModule, annotate

__all__ = ["AnnotatedModule", "annotate"]
