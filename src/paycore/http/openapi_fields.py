"""Field by field, what the server enforces beyond the request models' own declarations: the
constraints JSON Schema can state, and for the rest a description naming the error code
(see `http/openapi.py`). Keep each line beside the check it describes in mind: a rule
changed there is a line changed here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from paycore.config import Settings
from paycore.kit.signing import SIGNATURE_HEADER
from paycore.payouts.validation import SCHEDULE_DAYS_MAX

DATE = "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"
PRINTABLE_ASCII = "^[ -~]+$"


def refine(schemas: dict[str, Any], settings: Settings) -> None:
    _credits(schemas, settings)
    _ledger(schemas, settings)
    _payouts(schemas)
    for name in ("AccountCreate", "TransferCreate", "PaymentCreate", "PayoutCreate", "ReverseRequest"):
        _metadata(_property(schemas, name, "metadata"), settings)


def _property(schemas: dict[str, Any], model: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = schemas[model]["properties"][name]
    return found


def _say(schema: dict[str, Any], sentence: str) -> None:
    schema["description"] = f"{schema['description']} {sentence}" if schema.get("description") else sentence


def _credits(schemas: dict[str, Any], settings: Settings) -> None:
    key = _property(schemas, "CreditCreate", "idempotency_key")
    key["pattern"] = PRINTABLE_ASCII
    _say(key, "1-255 printable ASCII characters, unique per tenant (else 400 invalid_idempotency_key).")
    currency = _property(schemas, "CreditLineIn", "currency")
    currency.pop("maxLength", None)
    currency["enum"] = sorted(settings.enabled_credit_currencies)
    _say(currency, "A currency this deployment enables for credits (else 400 unsupported_currency).")


def _ledger(schemas: dict[str, Any], settings: Settings) -> None:
    _say(_property(schemas, "AccountCreate", "code"), "Unique per tenant: 409 account_exists.")
    transfer = schemas["TransferCreate"]
    simple = ("debit_account_id", "credit_account_id", "amount_minor", "currency")
    # Either the simple shape or entries (SPEC §4); a field sent as null counts as left out.
    transfer["oneOf"] = [
        {
            "required": list(simple),
            "properties": {name: {"not": {"type": "null"}} for name in simple} | {"entries": {"type": "null"}},
        },
        {
            "required": ["entries"],
            "properties": {"entries": {"type": "array"}} | {name: {"type": "null"} for name in simple},
        },
    ]
    _say(
        _property(schemas, "TransferCreate", "credit_account_id"),
        "Not the debit account (else 400 invalid_entries).",
    )
    entries = _property(schemas, "TransferCreate", "entries")
    for branch in entries.get("anyOf", [entries]):
        if branch.get("type") == "array":
            branch.update({"minItems": 2, "maxItems": settings.transfer_entries_max})
    _say(
        entries,
        "Debits equal credits in each currency, each account once per direction "
        "(else 400 invalid_entries or 422 unbalanced_transfer).",
    )
    expires_at = _property(schemas, "TransferCreate", "expires_at")
    _say(expires_at, "RFC 3339, in the future, on a pending transfer only (else 400 invalid_request).")
    schemas["TransferBatch"]["properties"]["transfers"]["maxItems"] = settings.batch_transfers_max


def _payouts(schemas: dict[str, Any]) -> None:
    _say(
        _property(schemas, "PayoutCreate", "currency"),
        "ach carries USD and sepa EUR (else 400 unsupported_rail_currency).",
    )
    execute_on = _property(schemas, "PayoutCreate", "execute_on")
    _date(execute_on)
    _say(execute_on, f"From today (UTC) to {SCHEDULE_DAYS_MAX} days ahead (else 400 invalid_execute_on).")
    effective_on = _property(schemas, "AdjustmentCreate", "effective_on")
    _date(effective_on)
    _say(effective_on, "A calendar date, not before the payout (else 400 invalid_effective_on).")
    beneficiary = schemas["BeneficiaryIn"]
    _say(
        beneficiary,
        "sepa: name, iban (bic optional); ach: name, routing_number, account_number (else 400 invalid_beneficiary).",
    )
    checks = {
        "name": "Printable text (else 400 invalid_beneficiary).",
        "iban": "An IBAN with valid check digits (else 400 invalid_iban).",
        "bic": "A BIC (else 400 invalid_bic).",
        "routing_number": "9 digits with a valid ABA checksum (else 400 invalid_routing_number).",
        "account_number": "4 to 17 digits (else 400 invalid_account_number).",
    }
    for name, sentence in checks.items():
        _say(beneficiary["properties"][name], sentence)


def _date(schema: dict[str, Any]) -> None:
    for branch in schema.get("anyOf", [schema]):
        if branch.get("type") == "string":
            branch.update({"pattern": DATE, "format": "date", "minLength": 10, "maxLength": 10})


def _metadata(schema: dict[str, Any], settings: Settings) -> None:
    for branch in schema.get("anyOf", [schema]):
        if branch.get("type") == "object":
            branch["maxProperties"] = min(
                branch.get("maxProperties", settings.metadata_keys_max), settings.metadata_keys_max
            )
    _say(
        schema,
        f"String values; at most {settings.metadata_keys_max} keys and {settings.metadata_bytes_max} bytes "
        "as JSON (else 400 invalid_request).",
    )


def _signature(parameter: dict[str, Any]) -> None:
    parameter["schema"]["pattern"] = "^t=[0-9]{1,12},v1=[0-9a-f]{64}$"
    parameter["description"] = (
        "t=<unix seconds>,v1=<hex HMAC-SHA256 of 't.body' with the processor webhook secret>. A signature "
        "that does not verify is 400 invalid_signature; a timestamp more than 5 minutes from now is "
        "400 signature_timestamp_out_of_tolerance."
    )


def _idempotency_key(parameter: dict[str, Any]) -> None:
    parameter["description"] += " Not 1-255 printable ASCII: 400 invalid_idempotency_key."


def _day(parameter: dict[str, Any]) -> None:
    parameter["description"] = (
        f"{parameter.get('description', '')}. A calendar date (else 400 invalid_date); "
        "`from` not after `to` (else 400 invalid_date_range)."
    )


PARAMETERS: dict[str, Callable[[dict[str, Any]], None]] = {
    SIGNATURE_HEADER: _signature,
    "Idempotency-Key": _idempotency_key,
    "from": _day,
    "to": _day,
}
