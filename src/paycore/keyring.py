"""Secrets at rest (finding 8; ADR 0018): a secret paycore must read back (today: the
webhook signing secrets) is stored encrypted, so that a dump of the database alone is not enough
to forge a webhook.

A stored secret is `pcs1.<key id>.<base64url(nonce, ciphertext and tag)>`: AES-256-GCM from
`cryptography`, a random 96-bit nonce per encryption, and a context as associated data (for a
webhook secret, its tenant and endpoint), so a sealed value opens only where it was written.
A value without the prefix is one written in clear before ADR 0018: it is read as it is, and
`paycore secrets rotate` encrypts it. The format fits the 128-character secret columns of
migration 0015 (Fernet's tokens would not), so no migration was needed.

Keys: PAYCORE_SECRETS_KEY holds one or more (comma-separated, newest first). The first seals;
each opens what was sealed under it, found by its id: 8 characters of a SHA-256 of the key,
which names a key without revealing it. To rotate: put a new key first and keep the old ones
after it, run `paycore secrets rotate`, then drop the old ones.

Where the keys come from (`load`): the environment, whenever it is set. Otherwise, in local mode
only, the file `paycore.secrets.key` beside the SQLite database (in the working directory for
PostgreSQL), generated on first start (mode 0600) and reused afterwards. Outside local mode
without PAYCORE_SECRETS_KEY every entry point refuses to start (`SecretsKeyRefused`, logged
`start_refused`): a key in the data folder travels with every copy of that folder. One
exception, a developer's machine: `paycore serve --dev` on a loopback address keeps using the
key file it made in local mode once API keys or operators exist, with a warning saying how to
move to PAYCORE_SECRETS_KEY (it never makes a new one outside local mode).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import os
import secrets
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from sqlalchemy import make_url

from paycore.config import SECRETS_KEY_BYTES, SECRETS_KEY_HOWTO, Settings, decode_secrets_key

log = logging.getLogger(__name__)
PREFIX: Final = "pcs1"  # paycore sealed, format 1
KEY_FILE_NAME: Final = "paycore.secrets.key"
_NONCE_BYTES: Final = 12
_KEY_ID_BYTES: Final = 6  # 8 characters of base64
_KEY_ID_LABEL: Final = b"paycore secrets key id\x00"


class SecretUnreadable(Exception):
    """A stored secret that no configured key opens: sealed under a key PAYCORE_SECRETS_KEY no
    longer holds, or altered. The message names the key's id, never a secret."""


class SecretsKeyRefused(Exception):
    """This process must not start: no key outside local mode, or an unusable local key file.
    Already logged as `start_refused` with its `reason`."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def key_id(key: bytes) -> str:
    digest = hashlib.sha256(_KEY_ID_LABEL + key).digest()
    return base64.urlsafe_b64encode(digest[:_KEY_ID_BYTES]).decode()


def is_sealed(stored: str) -> bool:
    return stored.startswith(PREFIX + ".")


class Keyring:
    """The keys that seal secrets at rest: the first seals, every one opens. Safe to share
    between threads (it holds only the keys)."""

    def __init__(self, keys: Sequence[bytes]) -> None:
        assert keys, "a keyring needs a key"
        assert all(len(key) == SECRETS_KEY_BYTES for key in keys)
        self._keys = {key_id(key): key for key in reversed(keys)}  # a key listed twice: one entry
        self.current_key_id = key_id(keys[0])

    def seal(self, plaintext: str, context: str) -> str:
        nonce = os.urandom(_NONCE_BYTES)
        sealed = AESGCM(self._keys[self.current_key_id]).encrypt(nonce, plaintext.encode(), context.encode())
        body = base64.urlsafe_b64encode(nonce + sealed).rstrip(b"=").decode()
        return f"{PREFIX}.{self.current_key_id}.{body}"

    def open(self, stored: str, context: str) -> str:
        """The secret a stored value holds (a value in clear, written before ADR 0018, as it is)."""
        if not is_sealed(stored):
            return stored
        parts = stored.split(".")
        if len(parts) != 3:
            raise SecretUnreadable("a sealed secret is malformed")
        stored_key_id, body = parts[1], parts[2]
        key = self._keys.get(stored_key_id)
        if key is None:
            raise SecretUnreadable(f"a secret is sealed under key {stored_key_id}, which PAYCORE_SECRETS_KEY lacks")
        try:
            raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
            opened = AESGCM(key).decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], context.encode())
            return opened.decode()
        except (InvalidTag, ValueError, binascii.Error):  # UnicodeDecodeError is a ValueError
            raise SecretUnreadable(f"a secret sealed under key {stored_key_id} does not open here") from None

    def is_current(self, stored: str) -> bool:
        """Whether the stored value is sealed under the newest key (nothing to rotate)."""
        return stored.startswith(f"{PREFIX}.{self.current_key_id}.")


class KeyringSource:
    """An app's keyring, loaded (`load`) on first use and kept. An app can be built before its
    database is migrated (`/readyz` and `/openapi.json` answer then), so building it reads
    nothing; every entry point that starts serving asks first, and refuses to start without a
    key (`paycore.http.server.Server`, `app.app`, `paycore serve`)."""

    def __init__(self, settings: Settings, *, local_mode: Callable[[], bool], keyring: Keyring | None = None) -> None:
        self._settings = settings
        self._local_mode = local_mode
        self._keyring = keyring
        self._lock = threading.Lock()

    def get(self) -> Keyring:
        keyring = self._keyring
        if keyring is None:
            with self._lock:
                if self._keyring is None:
                    self._keyring = load(self._settings, local_mode=self._local_mode)
                keyring = self._keyring
        return keyring


def load(settings: Settings, *, local_mode: Callable[[], bool], dev_key_file: bool = False) -> Keyring:
    """The keyring of this process: PAYCORE_SECRETS_KEY's keys; else, if `local_mode()` says so,
    the local key file's (made on first start); else, with `dev_key_file` (`paycore serve --dev`
    on loopback), the local key file's if there is one, with a warning; else SecretsKeyRefused.
    `local_mode` is asked only when the environment holds no key."""
    if settings.secrets_keys:
        return Keyring(settings.secrets_keys)
    path = key_file_path(settings.database_url)
    if local_mode():
        if not path.exists():
            _create(path)
    elif dev_key_file and path.exists():
        _warn_dev_key_file(path)
    else:
        raise _refused(_missing_message(path), "secrets_key_missing")
    return Keyring([_read(path)])


def key_file_path(database_url: str) -> Path:
    """Where local mode keeps its key: beside the SQLite file, else in the working directory."""
    folder = Path.cwd()
    if database_url.startswith("sqlite"):
        database = make_url(database_url).database
        if database and database != ":memory:":
            folder = Path(database).resolve().parent
    return folder / KEY_FILE_NAME


def _missing_message(path: Path) -> str:
    message = (
        "PAYCORE_SECRETS_KEY is not set; it is required once an API key or an operator exists "
        "(it encrypts the webhook signing secrets at rest, docs/adr/0018-secrets-at-rest.md). "
    )
    if path.exists():
        return message + (
            f"The secrets written in local mode are sealed with the key in {path}: set "
            "PAYCORE_SECRETS_KEY to its content (to move to a new key, to the new key, a comma and "
            "that one, then run `paycore secrets rotate`). Only `paycore serve --dev` on a loopback "
            "address keeps using the file."
        )
    return message + SECRETS_KEY_HOWTO


def _warn_dev_key_file(path: Path) -> None:
    log.warning(
        "serve --dev: API keys or operators exist and PAYCORE_SECRETS_KEY is not set, so the webhook "
        "signing secrets are still sealed with the local key file %s, as in local mode. Every other entry "
        "point (paycore serve, paycore worker, app.make_server) refuses to start so. To move to "
        'PAYCORE_SECRETS_KEY, set it to that file\'s content (export PAYCORE_SECRETS_KEY="$(cat %s)"), '
        "or to a new key, a comma and that content, then run `paycore secrets rotate`",
        path,
        path,
        extra={"event": "secrets_key_dev_file", "path": str(path)},
    )


def _read(path: Path) -> bytes:
    try:
        key = decode_secrets_key(path.read_text(encoding="ascii"))
    except (OSError, UnicodeDecodeError) as error:
        raise _refused(f"cannot read the local secrets key {path}: {error}", "secrets_key_file") from None
    if key is None:
        raise _refused(
            f"{path} does not hold a secrets key ({SECRETS_KEY_BYTES} bytes in URL-safe base64). It is never "
            "replaced on its own: the secrets sealed with it would be lost. Restore it, or remove it if no "
            "webhook endpoint exists yet.",
            "secrets_key_file",
        )
    return key


def _create(path: Path) -> None:
    """A new key where none is, written whole: into a temporary file first (mode 0600, synced),
    then linked to its name, which fails if another process got there first (its key is then
    the one everybody reads)."""
    key = base64.urlsafe_b64encode(os.urandom(SECRETS_KEY_BYTES)) + b"\n"
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as file:
            file.write(key)
            file.flush()
            os.fsync(file.fileno())
        try:
            os.link(temporary, path)
        except FileExistsError:
            return
        _sync_folder(path.parent)
    except OSError as error:
        raise _refused(f"cannot write the local secrets key {path}: {error}", "secrets_key_file") from None
    finally:
        temporary.unlink(missing_ok=True)
    log.info(
        "generated the local secrets key %s (local mode); once an API key or an operator exists, "
        "PAYCORE_SECRETS_KEY is required instead",
        path,
        extra={"event": "secrets_key_generated", "path": str(path)},
    )


def _sync_folder(folder: Path) -> None:
    """The new name survives a crash: losing the key would lose every secret sealed with it."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _refused(message: str, reason: str) -> SecretsKeyRefused:
    log.error(message, extra={"event": "start_refused", "reason": reason})
    return SecretsKeyRefused(message, reason)
