"""Errors raised by :mod:`autoplace.solve`. Each message names the culprit and the fix."""

from ..errors import AutoplaceError


class PlacementError(AutoplaceError):
    """A placement problem or plan that is malformed or breaks a rule.

    A subclass of :class:`ValueError` (through :class:`autoplace.errors.AutoplaceError`), so
    callers that only know about bad input can catch ``ValueError``.
    """


class InfeasiblePlacementError(PlacementError):
    """No placement satisfies the pins, supported targets and memory caps together."""
