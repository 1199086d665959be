"""How a record's rounds of timing make its time: the rounds within 10% of the fastest.

On a shared machine, noise only ever slows a timing down (another tenant's core time, cache and memory
bandwidth), and not always in a way the host-speed canary sees; a kernel's undisturbed latency is best estimated
from its fastest rounds. Requiring a round to agree with the fastest within 10% (rather than taking the minimum)
keeps several rounds when the machine was calm. Used by profile jobs as they merge a record's rounds
(:mod:`.job`) and by cost tables as they read them (:class:`autoplace.cost_model.CostTable`).
"""

from __future__ import annotations

#: Rounds whose median is within this fraction of the fastest round's count (:func:`fastest_rounds`).
FASTEST_ROUNDS_WITHIN = 0.10


def fastest_rounds(medians: list, within: float = FASTEST_ROUNDS_WITHIN) -> list:
    """The round medians within ``within`` (10%) of the fastest one."""
    return [medians[i] for i in fastest_round_indices(medians, within)]


def fastest_round_indices(totals: list, within: float = FASTEST_ROUNDS_WITHIN) -> list[int]:
    """Where the rounds within ``within`` of the fastest are in ``totals`` (one number per round: a median, or the
    sum of a model's in-context times)."""
    fastest = min(totals)
    return [i for i, total in enumerate(totals) if total <= fastest * (1.0 + within)]
