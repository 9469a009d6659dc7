"""Typed errors of disputes; their HTTP statuses are mapped in `paycore.http`."""

from __future__ import annotations

from paycore.kit.errors import NotFound


class DisputeNotFound(NotFound):
    code = "dispute_not_found"
