"""Errors a user of autoplace can meet, all in one place. Each message names the problem and the fix.

Every class is a :class:`ValueError` (through :class:`AutoplaceError`), so callers that only know
about bad input can catch ``ValueError``; the command line prints any of them as one
``autoplace: error: ...`` line and exits with status 2.
"""


class AutoplaceError(ValueError):
    """Base class of every error autoplace raises on bad input."""


class TargetError(AutoplaceError):
    """A target specification that autoplace cannot turn into a TVM target."""


class ModelError(AutoplaceError):
    """A model that cannot be imported, or lacks what autoplace needs (e.g. no ``main``)."""


class AssignmentError(AutoplaceError):
    """A placement that names missing nodes or targets, or contradicts itself."""


class CostError(AutoplaceError):
    """A target has neither a profile nor a cost model to price its kernels, or a device pair has no
    measured copy cost."""


class CopyCostError(CostError, KeyError):
    """No measured copy cost between two devices. Also a ``KeyError``, which this lookup raised before."""

    __str__ = ValueError.__str__  # the message as written, not KeyError's quoted repr


class ProfilingError(AutoplaceError):
    """The profiling harness cannot measure (a worker that cannot start, options that cannot time
    anything, a folder of another machine, a full disk): nothing of it is recorded as kernel data."""


class RPCError(ProfilingError):
    """An RPC tracker or its servers cannot be reached, answer nothing, or go away (or the address or key
    given is malformed): a harness failure, so nothing of it is recorded as kernel data."""


class PlacementError(AutoplaceError):
    """A placement problem or plan that is malformed or breaks a rule."""


class InfeasiblePlacementError(PlacementError):
    """No placement satisfies the pins, supported targets and memory caps together."""


class CostModelVersionError(AutoplaceError):
    """A saved cost model was written by another format or feature version (retrain it)."""


class UnknownTargetError(AutoplaceError):
    """A prediction was asked for a target kind the model has no profile of."""


class CorruptRecordWarning(UserWarning):
    """A line of a profile's records file was torn or altered and has been skipped."""


class ForeignProfileWarning(UserWarning):
    """Records measured on other hardware or another TVM version were found."""
