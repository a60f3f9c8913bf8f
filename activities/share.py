"""Each tenant's share of a jobs worker's slots, so that one tenant's runs cannot hold them all.

A slot is held from the start of an attempt to its end, waiting for its instant included.
Temporal hands a backlog out round-robin by tenant (config/temporal.py, task_priority), but
only to free slots: without a share, one tenant's long jobs (slow targets, long handlers,
calls waiting for its HTTP slots) fill every slot and the other tenants' runs wait in the
queue behind them."""

from __future__ import annotations

# A jobs worker's slots unless its settings say (SCHEDULER_WORKER_MAX_CONCURRENT_ACTIVITIES).
DEFAULT_SLOTS = 2000
# The part of the slots kept for the tenants below their fair share.
RESERVE = 0.1


class SlotShare:
    """The attempts of each tenant holding a slot of this worker.

    Any tenant takes a slot while the worker has more than a tenth of its slots free. The last
    tenth goes only to a tenant holding fewer than its fair share, ``slots // (tenants holding
    slots + 1)`` (the one counts a tenant not in yet), and always to one holding none. So a
    tenant's attempts fill at most nine tenths of a worker; a run refused BUSY_RESENDS times
    (workflows/inflight.py), or a retry its workflow cannot send again with the attempts it
    made (older code: ``JobInput.carries_attempts``), is not refused and may take the rest."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self._reserve = max(1, int(slots * RESERVE))
        self._held: dict[str, int] = {}
        self._total = 0

    def take(self, tenant: str, *, refusable: bool = True) -> bool:
        """Count one more of ``tenant``'s attempts in; False (and nothing counted) when the
        worker is short of free slots, the tenant holds its fair share already and the
        attempt is ``refusable``."""
        held = self._held.get(tenant, 0)
        short = self.slots - self._total - 1 < self._reserve
        if refusable and held and short and held >= self.fair():
            return False
        self._held[tenant] = held + 1
        self._total += 1
        return True

    def give_back(self, tenant: str) -> None:
        """One of ``tenant``'s attempts ended."""
        held = self._held.pop(tenant) - 1
        if held:
            self._held[tenant] = held
        self._total -= 1

    def fair(self) -> int:
        """What a tenant holding slots may hold while the worker is short of free ones."""
        return max(1, self.slots // (len(self._held) + 1))

    def held(self, tenant: str) -> int:
        return self._held.get(tenant, 0)
