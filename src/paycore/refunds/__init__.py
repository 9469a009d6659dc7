"""Refunds (SPEC §7). `handle` is the replay entry point of §7.2."""

from paycore.refunds.replay import handle

__all__ = ["handle"]
