"""Secrets at rest (issue 29, finding 8; ADR 0018): the sealed format, the keys' rotation, where
the keys come from, and the refusals, each refusal without a key or a secret in its words."""

from __future__ import annotations

import base64
import logging
import stat
import threading
from pathlib import Path

import pytest

from paycore import keyring
from paycore.config import SECRETS_KEYS_MAX, Settings, decode_secrets_key
from paycore.keyring import PREFIX, Keyring, SecretsKeyRefused, SecretUnreadable, key_id
from paycore.webhooks.models import SECRET_LENGTH
from paycore.webhooks.service import SECRET_PREFIX

OLD, NEW = bytes(range(32)), bytes(range(100, 132))
SECRET = SECRET_PREFIX + "A" * 43  # the length of every secret paycore makes
CONTEXT = "webhook_endpoint:acme:we_01"


def text(key: bytes) -> str:
    return base64.urlsafe_b64encode(key).decode()


def test_a_sealed_secret_opens_to_itself_and_shows_nothing_of_it() -> None:
    ring = Keyring([OLD])
    sealed = ring.seal(SECRET, CONTEXT)
    assert sealed.startswith(f"{PREFIX}.{key_id(OLD)}.") and "whsec_" not in sealed and "AAAA" not in sealed
    assert ring.open(sealed, CONTEXT) == SECRET
    assert ring.seal(SECRET, CONTEXT) != sealed  # a new nonce each time
    assert len(sealed) <= SECRET_LENGTH  # fits the column of migration 0015


def test_a_sealed_secret_opens_only_in_its_own_context() -> None:
    ring = Keyring([OLD])
    sealed = ring.seal(SECRET, CONTEXT)
    with pytest.raises(SecretUnreadable):
        ring.open(sealed, "webhook_endpoint:acme:we_02")  # another endpoint's row


@pytest.mark.parametrize("change", ["tamper", "truncate", "malformed", "bad base64"])
def test_an_altered_value_is_unreadable_never_wrong(change: str) -> None:
    ring = Keyring([OLD])
    sealed = ring.seal(SECRET, CONTEXT)
    altered = {
        "tamper": sealed[:-2] + ("A" if sealed[-2] != "A" else "B") + sealed[-1],
        "truncate": sealed[:-10],
        "malformed": sealed + ".x",
        "bad base64": sealed[: sealed.rindex(".") + 1] + "!!!",
    }[change]
    with pytest.raises(SecretUnreadable) as raised:
        ring.open(altered, CONTEXT)
    assert SECRET not in str(raised.value)


def test_a_value_in_clear_is_read_as_it_is() -> None:
    """What paycore stored before ADR 0018; `paycore secrets rotate` seals it."""
    ring = Keyring([OLD])
    assert ring.open(SECRET, CONTEXT) == SECRET
    assert not ring.is_current(SECRET) and not keyring.is_sealed(SECRET)


def test_a_new_key_first_seals_and_the_old_one_still_opens() -> None:
    before = Keyring([OLD]).seal(SECRET, CONTEXT)
    rotating = Keyring([NEW, OLD])
    assert rotating.open(before, CONTEXT) == SECRET
    after = rotating.seal(SECRET, CONTEXT)
    assert rotating.is_current(after) and not rotating.is_current(before)
    assert Keyring([NEW]).open(after, CONTEXT) == SECRET
    with pytest.raises(SecretUnreadable, match=key_id(OLD)):
        Keyring([NEW]).open(before, CONTEXT)  # dropped before `paycore secrets rotate`


def test_a_key_id_names_a_key_without_showing_it() -> None:
    assert len(key_id(OLD)) == 8 and key_id(OLD) != key_id(NEW)
    assert key_id(OLD) not in text(OLD) and "." not in key_id(OLD)


# --- PAYCORE_SECRETS_KEY -------------------------------------------------------------------------


def test_the_environment_holds_keys_newest_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAYCORE_SECRETS_KEY", f" {text(NEW)} , {text(OLD).rstrip('=')},")
    assert Settings.from_env().secrets_keys == (NEW, OLD)
    monkeypatch.setenv("PAYCORE_SECRETS_KEY", "")
    assert Settings.from_env().secrets_keys == ()
    assert "secrets_keys" not in repr(Settings.from_env())


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("not-a-key", "key 1 of 1"),
        (text(OLD)[:-4], "key 1 of 1"),  # 30 bytes
        (base64.urlsafe_b64encode(bytes(48)).decode(), "key 1 of 1"),
        (text(NEW) + ",+/+/", "key 2 of 2"),
        (",".join([text(NEW)] * (SECRETS_KEYS_MAX + 1)), f"at most {SECRETS_KEYS_MAX}"),
    ],
)
def test_a_bad_key_stops_the_process_without_showing_it(
    value: str, words: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PAYCORE_SECRETS_KEY", value)
    with pytest.raises(SystemExit) as raised:
        Settings.from_env()
    message = str(raised.value.code)
    assert "PAYCORE_SECRETS_KEY" in message and words in message
    assert all(part.strip() not in message for part in value.split(",") if part.strip())


def test_decode_accepts_what_python_and_openssl_print() -> None:
    assert decode_secrets_key(text(OLD) + "\n") == OLD
    assert decode_secrets_key(base64.b64encode(OLD).decode().replace("+", "-").replace("/", "_")) == OLD
    assert decode_secrets_key("") is None and decode_secrets_key("é" * 44) is None


# --- where the keys come from ---------------------------------------------------------------------


def settings_in(folder: Path, *keys: bytes) -> Settings:
    return Settings(database_url=f"sqlite:///{folder}/paycore.db", secrets_keys=keys)


def never_asked() -> bool:
    raise AssertionError("local mode is asked only when the environment holds no key")


def test_the_environment_wins_and_no_file_is_written(tmp_path: Path) -> None:
    ring = keyring.load(settings_in(tmp_path, NEW, OLD), local_mode=never_asked)
    assert ring.current_key_id == key_id(NEW)
    assert list(tmp_path.iterdir()) == []


def test_outside_local_mode_no_key_is_refused_and_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR)
    with pytest.raises(SecretsKeyRefused) as raised:
        keyring.load(settings_in(tmp_path), local_mode=lambda: False)
    assert raised.value.reason == "secrets_key_missing" and "PAYCORE_SECRETS_KEY" in str(raised.value)
    assert [(r.event, r.reason) for r in caplog.records] == [("start_refused", "secrets_key_missing")]  # type: ignore[attr-defined]
    assert list(tmp_path.iterdir()) == []


def test_outside_local_mode_the_refusal_points_at_the_local_key_file(tmp_path: Path) -> None:
    made = keyring.load(settings_in(tmp_path), local_mode=lambda: True)  # local mode, then a first API key
    with pytest.raises(SecretsKeyRefused) as raised:
        keyring.load(settings_in(tmp_path), local_mode=lambda: False)
    path = tmp_path / keyring.KEY_FILE_NAME
    assert str(path) in str(raised.value) and "paycore secrets rotate" in str(raised.value)
    assert path.read_text().strip() not in str(raised.value)
    assert made.current_key_id == key_id(decode_secrets_key(path.read_text()) or b"")


def test_serve_dev_on_loopback_keeps_the_local_key_file_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    made = keyring.load(settings_in(tmp_path), local_mode=lambda: True)  # local mode, then a first API key
    path = tmp_path / keyring.KEY_FILE_NAME
    caplog.set_level(logging.WARNING)
    caplog.clear()  # the first load's INFO line, captured when an earlier test left paycore's loggers at INFO
    kept = keyring.load(settings_in(tmp_path), local_mode=lambda: False, dev_key_file=True)
    assert kept.current_key_id == made.current_key_id
    [warning] = [record for record in caplog.records if record.levelno >= logging.WARNING]
    assert (warning.levelname, warning.event, warning.path) == ("WARNING", "secrets_key_dev_file", str(path))  # type: ignore[attr-defined]
    assert "PAYCORE_SECRETS_KEY" in warning.getMessage() and path.read_text().strip() not in warning.getMessage()


def test_serve_dev_never_makes_a_key_file_outside_local_mode(tmp_path: Path) -> None:
    with pytest.raises(SecretsKeyRefused) as raised:
        keyring.load(settings_in(tmp_path), local_mode=lambda: False, dev_key_file=True)
    assert raised.value.reason == "secrets_key_missing"
    assert list(tmp_path.iterdir()) == []


def test_in_local_mode_the_key_file_is_made_once_private_and_reused(tmp_path: Path) -> None:
    first = keyring.load(settings_in(tmp_path), local_mode=lambda: True)
    path = tmp_path / keyring.KEY_FILE_NAME
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    content = path.read_text()
    again = keyring.load(settings_in(tmp_path), local_mode=lambda: True)
    assert path.read_text() == content and again.current_key_id == first.current_key_id
    assert sorted(p.name for p in tmp_path.iterdir()) == [keyring.KEY_FILE_NAME]  # no temporary file left


def test_processes_starting_together_share_one_key_file(tmp_path: Path) -> None:
    ids: list[str] = []
    start = threading.Barrier(8)

    def load() -> None:
        start.wait()
        ids.append(keyring.load(settings_in(tmp_path), local_mode=lambda: True).current_key_id)

    threads = [threading.Thread(target=load) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(ids) == 8 and len(set(ids)) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [keyring.KEY_FILE_NAME]


def test_a_damaged_key_file_is_refused_never_replaced(tmp_path: Path) -> None:
    path = tmp_path / keyring.KEY_FILE_NAME
    path.write_text("not a key\n")
    with pytest.raises(SecretsKeyRefused) as raised:
        keyring.load(settings_in(tmp_path), local_mode=lambda: True)
    assert raised.value.reason == "secrets_key_file"
    assert path.read_text() == "not a key\n"


@pytest.mark.parametrize(
    ("url", "folder"),
    [
        ("sqlite:///./data/p.db", Path.cwd() / "data"),
        ("sqlite:////srv/paycore/p.db", Path("/srv/paycore")),
        ("sqlite://", Path.cwd()),
        ("sqlite:///:memory:", Path.cwd()),
        ("postgresql+psycopg://paycore@db:5432/paycore", Path.cwd()),
    ],
)
def test_the_key_file_lives_beside_the_sqlite_file_else_in_the_working_directory(url: str, folder: Path) -> None:
    assert keyring.key_file_path(url) == folder / keyring.KEY_FILE_NAME


def test_a_key_file_that_cannot_be_written_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SecretsKeyRefused) as raised:
        keyring.load(settings_in(tmp_path / "missing"), local_mode=lambda: True)
    assert raised.value.reason == "secrets_key_file" and "cannot write" in str(raised.value)
