"""Each tenant's share of a jobs worker's slots, so that one tenant's runs cannot hold them all.

A slot is held from the start of an attempt to its end, waiting for its instant included.
Temporal hands a worker its activity tasks in queue order, blind to tenants: without a share,
one tenant's long jobs (slow targets, long handlers, calls waiting for its HTTP slots) fill
every slot and the other tenants' runs wait in the queue behind them."""

from __future__ import annotations

# A jobs worker's slots unless its settings say (SCHEDULER_MAX_CONCURRENT_ACTIVITIES in production).
DEFAULT_SLOTS = 2000


class SlotShare:
    """The attempts of each tenant holding a slot of this worker.

    A tenant that holds none always gets one; one that holds some gets another while it holds
    fewer than ``slots // (tenants holding slots + 1)``. Whatever the tenants already in, that
    leaves slots free for one that comes next; a tenant alone may hold half of them."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self._held: dict[str, int] = {}

    def take(self, tenant: str, *, refusable: bool = True) -> bool:
        """Count one more of ``tenant``'s attempts in; False (and nothing counted) when it
        holds its share already and the attempt is ``refusable``."""
        held = self._held.get(tenant, 0)
        if refusable and held >= self.share():
            return False
        self._held[tenant] = held + 1
        return True

    def give_back(self, tenant: str) -> None:
        """One of ``tenant``'s attempts ended."""
        held = self._held.pop(tenant) - 1
        if held:
            self._held[tenant] = held

    def share(self) -> int:
        """What a tenant holding slots may hold now."""
        return max(1, self.slots // (len(self._held) + 1))

    def held(self, tenant: str) -> int:
        return self._held.get(tenant, 0)
