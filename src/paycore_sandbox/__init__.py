"""The sandbox processor (SPEC §9): a stand-in card processor and bank rail (ACH/SEPA
payouts, in batches, with NACHA and pain.001 files) that merchants test against.

A separate service with its own storage (tables prefixed `sandbox_`, created at start, never
in paycore's migrations). `service.Sandbox` holds the rules; `http.py` serves them for
`paycore processor serve`; `paycore_sandbox.inprocess` calls them directly.

Its names are loaded when first used (PEP 562): `paycore` imports `paycore_sandbox.limits` at
the start of every CLI command, and importing the whole sandbox there cost each process ~0.09 s.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from paycore_sandbox.faults import Decision, FaultPlanError
    from paycore_sandbox.limits import SandboxSettings
    from paycore_sandbox.service import Sandbox
    from paycore_sandbox.sink import WebhookSink, http_sink

_HOMES = {
    "Decision": "faults",
    "FaultPlanError": "faults",
    "SandboxSettings": "limits",
    "Sandbox": "service",
    "WebhookSink": "sink",
    "http_sink": "sink",
}
__all__ = ["Decision", "FaultPlanError", "Sandbox", "SandboxSettings", "WebhookSink", "http_sink"]


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_HOMES[name]}"), name)
