"""The sandbox processor (SPEC §9): a stand-in card processor and bank rail (ACH/SEPA
payouts, in batches, with NACHA and pain.001 files) that merchants test against.

A separate service with its own storage (tables prefixed `sandbox_`, created at start, never
in paycore's migrations). `service.Sandbox` holds the rules; `http.py` serves them for
`paycore processor serve`; `paycore_sandbox.inprocess` calls them directly.
"""

from __future__ import annotations

from paycore_sandbox.faults import Decision, FaultPlanError
from paycore_sandbox.limits import SandboxSettings
from paycore_sandbox.service import Sandbox
from paycore_sandbox.webhooks import WebhookSink, http_sink

__all__ = ["Decision", "FaultPlanError", "Sandbox", "SandboxSettings", "WebhookSink", "http_sink"]
