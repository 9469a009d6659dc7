"""The only place a manual resolution's status changes: its machine on the one lifecycle
(`paycore.lifecycle.machine`: the transition table, compare-and-set, the audit event). It waits
on no other system, so its table has no work columns (`scheduled=False`) and it is not
published to the tenant's endpoints: the item's own change, when confirmed, is."""

from __future__ import annotations

from functools import partial

from paycore.lifecycle.machine import Machine
from paycore.manual_resolutions import states
from paycore.manual_resolutions.errors import ResolutionNotFound
from paycore.manual_resolutions.models import manual_resolutions
from paycore.manual_resolutions.types import Resolution, resolution_from_row, resolution_row

MACHINE: Machine[Resolution] = Machine(
    object_type="manual_resolution",
    table=manual_resolutions,
    states=states,
    from_row=resolution_from_row,
    to_row=resolution_row,
    not_found=partial(ResolutionNotFound, "no such manual resolution", param="id"),
    scheduled=False,
)
