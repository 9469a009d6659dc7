"""The key the tests seal webhook secrets with (PAYCORE_SECRETS_KEY, ADR 0018): one fixed key,
so that a test's app, its workers and the processes it starts all open what the others sealed,
and no test writes a local key file (`paycore.secrets.key`) anywhere but where it means to."""

from __future__ import annotations

import base64
from typing import Final

from paycore.keyring import Keyring

KEY: Final = bytes(range(32))
TEXT: Final = base64.urlsafe_b64encode(KEY).decode()  # as PAYCORE_SECRETS_KEY holds it
KEYRING: Final = Keyring([KEY])
