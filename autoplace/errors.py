"""Errors a user of autoplace can meet. Each message names the problem and the fix."""


class AutoplaceError(ValueError):
    """Base class of every error autoplace raises on bad input."""


class TargetError(AutoplaceError):
    """A target specification that autoplace cannot turn into a TVM target."""


class ModelError(AutoplaceError):
    """A model that cannot be imported, or lacks what autoplace needs (e.g. no ``main``)."""


class AssignmentError(AutoplaceError):
    """A placement that names missing nodes or targets, or contradicts itself."""
