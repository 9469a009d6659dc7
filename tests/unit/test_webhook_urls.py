"""The SSRF guard of outgoing webhooks (issue 21): which endpoint URLs a tenant may register
(`check_url`, no DNS), which addresses paycore may connect to (`is_refused_address`), and the
delivery-time look-up (`resolve`). The refusals are tested as carefully as the acceptances: each
row is one way an attacker could name an internal address."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from paycore.webhooks import urls
from paycore.webhooks.errors import InvalidWebhookUrl, Unsafe

ACCEPTED = [
    "https://example.com/hook",
    "https://example.com",
    "https://hooks.example.com:8443/paycore/events?tenant=acme&v=1",
    "https://EXAMPLE.com/Hook",
    "https://example.com./hook",  # the absolute form of the name
    "https://xn--bcher-kva.example/hook",  # an IDN, as punycode
    "https://8.8.8.8/hook",
    "https://[2606:4700:4700::1111]/hook",
    "https://[::ffff:8.8.8.8]/hook",  # mapped: the IPv4 address decides
    "https://example.com/a%20path/@not-userinfo",
]

# (url, a word of the message)
REFUSED_EVERYWHERE = [
    ("https://example.com/" + "a" * urls.URL_LENGTH_MAX, "longer"),
    ("", "https"),
    ("example.com/hook", "https"),
    ("ftp://example.com/hook", "https"),
    ("javascript:alert(1)", "https"),
    ("https:///hook", "no host"),
    ("https://:443/hook", "no host"),
    ("https://user:secret@example.com/hook", "credentials"),
    ("https://user@example.com/hook", "credentials"),
    ("https://@example.com/hook", "credentials"),
    ("https://example.com/hook#fragment", "fragment"),
    ("https://example.com/hook#", "fragment"),
    ("https://example.com:0/hook", "port"),
    ("https://example.com:65536/hook", "parsed"),
    ("https://example.com:-1/hook", "parsed"),
    ("https://example.com:http/hook", "parsed"),
    ("https://[::1/hook", "parsed"),
    ("https://[127.0.0.1]/hook", "parsed"),
    ("https://exa mple.com/hook", "percent-encoded"),
    ("https://exa\nmple.com/hook", "percent-encoded"),  # urlsplit alone would drop the new line
    ("https://example.com\t/hook", "percent-encoded"),
    ("https://example.com\\@127.0.0.1/hook", "percent-encoded"),
    ("https://bücher.example/hook", "percent-encoded"),
    ("https://example.com/ü", "percent-encoded"),
    ("https://%6c%6f%63%61%6chost/hook", "not a valid host"),
    ("https://exa_mple..com/hook", "not a valid host"),
    ("https://-example.com/hook", "not a valid host"),
    ("https://" + "a" * 64 + ".com/hook", "not a valid host"),
]

REFUSED_OUTSIDE_LOCAL_MODE = [
    ("http://example.com/hook", "https"),
    ("https://127.0.0.1/hook", "127.0.0.1"),
    ("https://127.0.0.1:8080/hook", "127.0.0.1"),
    ("https://127.255.255.254/hook", "loopback"),
    ("https://10.1.2.3/hook", "private"),
    ("https://172.16.0.1/hook", "private"),
    ("https://172.31.255.255/hook", "private"),
    ("https://192.168.1.1/hook", "private"),
    ("https://169.254.169.254/latest/meta-data/", "link-local"),
    ("https://100.64.0.1/hook", "reserved"),
    ("https://0.0.0.0/hook", "reserved"),
    ("https://224.0.0.1/hook", "reserved"),
    ("https://255.255.255.255/hook", "reserved"),
    ("https://240.0.0.1/hook", "reserved"),
    ("https://192.0.2.1/hook", "reserved"),  # documentation
    ("https://[::1]/hook", "::1"),
    ("https://[::]/hook", "reserved"),
    ("https://[fe80::1]/hook", "link-local"),
    ("https://[fe80::1%25eth0]/hook", "link-local"),
    ("https://[fc00::1]/hook", "private"),
    ("https://[fd12:3456::1]/hook", "private"),
    ("https://[fec0::1]/hook", "reserved"),
    ("https://[ff02::1]/hook", "reserved"),
    ("https://[::ffff:127.0.0.1]/hook", "loopback"),
    ("https://[::ffff:7f00:1]/hook", "loopback"),
    ("https://[0:0:0:0:0:ffff:169.254.169.254]/hook", "link-local"),
    ("https://[::127.0.0.1]/hook", "reserved"),  # IPv4-compatible, deprecated
    ("https://[64:ff9b::a9fe:a9fe]/hook", "reserved"),  # NAT64 of 169.254.169.254
    ("https://[2002:7f00:1::]/hook", "reserved"),  # 6to4 of 127.0.0.1
    ("https://[2002:a00:1::]/hook", "reserved"),  # 6to4 of 10.0.0.1
    ("https://[2001:0:4136:e378:8000:63bf:80ff:fffe]/hook", "reserved"),  # Teredo of 127.0.0.1
    # What the C resolver (inet_aton) reads as 127.0.0.1, or otherwise as an address:
    ("https://127.1/hook", "non-standard"),
    ("https://0x7f.1/hook", "non-standard"),
    ("https://0x7f000001/hook", "non-standard"),
    ("https://2130706433/hook", "non-standard"),
    ("https://017700000001/hook", "non-standard"),
    ("https://0177.0.0.1/hook", "non-standard"),
    ("https://127.0.0.1./hook", "loopback"),
    ("https://010.0.0.1/hook", "non-standard"),  # 8.0.0.1 to inet_aton, 10.0.0.1 to others
    ("https://0x08.8.8.8/hook", "non-standard"),
    ("https://1.2.3.999/hook", "non-standard"),
    ("https://example.123/hook", "non-standard"),
    ("https://localhost/hook", "local or internal"),
    ("https://LOCALHOST:8443/hook", "local or internal"),
    ("https://localhost./hook", "local or internal"),
    ("https://api.localhost/hook", "local or internal"),
    ("https://printer.local/hook", "local or internal"),
    ("https://metadata.google.internal/computeMetadata/v1/", "local or internal"),
    ("https://localhost.localdomain/hook", "local or internal"),
    ("https://router.home.arpa/hook", "local or internal"),
    ("https://postgres/hook", "fully qualified"),
    ("https://metadata/hook", "fully qualified"),
]

# Local mode adds loopback receivers (a developer's own machine), over http too, and nothing else.
LOCAL_MODE_ONLY = [
    "http://127.0.0.1:8080/hook",
    "https://127.0.0.1:8080/hook",
    "http://127.0.0.53/hook",
    "http://127.255.255.254:9000/hook",
    "http://127.0.0.1./hook",
    "http://localhost:8000/hook",
    "https://LOCALHOST:8443/hook",
    "http://localhost./hook",
    "http://[::1]:8000/hook",
    "https://[::1]/hook",
]

# Issue 29, finding 7: what local mode accepted and must not (every rule but loopback holds there).
REFUSED_IN_LOCAL_MODE_TOO = [
    ("http://169.254.169.254/latest/meta-data/", "link-local"),
    ("https://169.254.169.254/latest/meta-data/", "link-local"),
    ("http://10.0.0.1/hook", "private"),
    ("https://10.0.0.1/hook", "private"),
    ("http://192.168.1.1/hook", "private"),
    ("http://100.64.0.1/hook", "reserved"),
    ("http://0.0.0.0:8000/hook", "reserved"),
    ("http://[fe80::1]/hook", "link-local"),
    ("http://[fd00:ec2::254]/hook", "private"),  # the EC2 metadata service's IPv6 address
    ("http://[::ffff:127.0.0.1]/hook", "loopback"),  # loopback in disguise: write 127.0.0.1
    ("http://[::ffff:169.254.169.254]/hook", "link-local"),
    ("http://[64:ff9b::a9fe:a9fe]/hook", "reserved"),
    ("http://0x7f.1:9000/hook", "non-standard"),
    ("http://2130706433/hook", "non-standard"),
    ("http://010.0.0.1/hook", "non-standard"),
    ("http://api.localhost/hook", "local or internal"),
    ("http://metadata.google.internal/computeMetadata/v1/", "local or internal"),
    ("http://receiver/hook", "fully qualified"),
    ("http://example.com/hook", "https"),  # http is for a loopback receiver only
    ("http://8.8.8.8/hook", "https"),
]


@pytest.mark.parametrize("local_mode", [False, True])
@pytest.mark.parametrize("url", ACCEPTED)
def test_accepted_urls_are_returned_unchanged(url: str, local_mode: bool) -> None:
    assert urls.check_url(url, local_mode=local_mode) == url


@pytest.mark.parametrize("local_mode", [False, True])
@pytest.mark.parametrize(("url", "word"), REFUSED_EVERYWHERE)
def test_refused_in_every_mode(url: str, word: str, local_mode: bool) -> None:
    with pytest.raises(InvalidWebhookUrl) as raised:
        urls.check_url(url, local_mode=local_mode)
    _assert_refusal(raised.value, word)


@pytest.mark.parametrize(("url", "word"), REFUSED_OUTSIDE_LOCAL_MODE)
def test_refused_outside_local_mode(url: str, word: str) -> None:
    with pytest.raises(InvalidWebhookUrl) as raised:
        urls.check_url(url, local_mode=False)
    _assert_refusal(raised.value, word)


@pytest.mark.parametrize("url", LOCAL_MODE_ONLY)
def test_local_mode_adds_loopback_receivers(url: str) -> None:
    assert urls.check_url(url, local_mode=True) == url


@pytest.mark.parametrize("url", LOCAL_MODE_ONLY)
def test_local_mode_urls_are_refused_outside_it(url: str) -> None:
    with pytest.raises(InvalidWebhookUrl):
        urls.check_url(url, local_mode=False)


@pytest.mark.parametrize(("url", "word"), REFUSED_IN_LOCAL_MODE_TOO)
def test_local_mode_refuses_every_internal_address_but_loopback(url: str, word: str) -> None:
    with pytest.raises(InvalidWebhookUrl) as raised:
        urls.check_url(url, local_mode=True)
    _assert_refusal(raised.value, word)


def _names_loopback(url: str) -> bool:
    host = url.split("://", 1)[1].lower()
    return host.startswith(("127.0.0.1", "127.255.", "[::1]", "localhost"))


@pytest.mark.parametrize("url", [url for url, _ in REFUSED_OUTSIDE_LOCAL_MODE if not _names_loopback(url)])
def test_what_is_refused_outside_local_mode_but_loopback_is_refused_in_it(url: str) -> None:
    for form in (url, url.replace("https://", "http://", 1)):
        with pytest.raises(InvalidWebhookUrl):
            urls.check_url(form, local_mode=True)


def test_the_longest_url_is_accepted() -> None:
    prefix = "https://example.com/"
    url = prefix + "a" * (urls.URL_LENGTH_MAX - len(prefix))
    assert len(url) == urls.URL_LENGTH_MAX
    assert urls.check_url(url, local_mode=False) == url


def test_a_refusal_never_echoes_the_path_or_query() -> None:
    with pytest.raises(InvalidWebhookUrl) as raised:
        urls.check_url("https://10.0.0.1/hook?token=s3cr3t", local_mode=False)
    assert "s3cr3t" not in str(raised.value)


def _assert_refusal(error: InvalidWebhookUrl, word: str) -> None:
    assert error.param == "url"
    assert error.code == "invalid_webhook_url"
    assert word.lower() in error.message.lower(), error.message


REFUSED_ADDRESSES = [
    "127.0.0.1",
    "127.0.0.53",
    "10.0.0.1",
    "172.16.5.4",
    "192.168.0.1",
    "169.254.169.254",
    "169.254.0.1",
    "100.64.0.1",
    "100.127.255.254",
    "0.0.0.0",
    "0.1.2.3",
    "224.0.0.251",
    "239.255.255.250",
    "240.0.0.1",
    "255.255.255.255",
    "198.18.0.1",
    "::1",
    "::",
    "fe80::1",
    "fc00::1",
    "fd00:ec2::254",  # the EC2 metadata service's IPv6 address
    "fec0::1",
    "ff02::1",
    "::ffff:127.0.0.1",
    "::ffff:10.0.0.1",
    "::ffff:169.254.169.254",
    "::ffff:100.64.0.1",
    "64:ff9b::7f00:1",
    "2002:c0a8:101::1",
    "2001:db8::1",
]
ALLOWED_ADDRESSES = ["8.8.8.8", "1.1.1.1", "93.184.216.34", "100.63.255.255", "100.128.0.0", "172.32.0.1",
                     "2606:4700:4700::1111", "::ffff:8.8.8.8", "2002:808:808::1"]  # fmt: skip


@pytest.mark.parametrize("address", REFUSED_ADDRESSES)
def test_refused_addresses(address: str) -> None:
    assert urls.is_refused_address(address)


@pytest.mark.parametrize("address", ALLOWED_ADDRESSES)
def test_allowed_addresses(address: str) -> None:
    assert not urls.is_refused_address(address)


def test_resolve_refuses_a_name_of_a_loopback_address_outside_local_mode() -> None:
    with pytest.raises(Unsafe) as raised:
        urls.resolve("localhost", 443, local_mode=False)
    assert "localhost" in str(raised.value)


def test_resolve_allows_loopback_in_local_mode() -> None:
    addresses = urls.resolve("localhost", 443, local_mode=True)
    assert addresses
    assert all(urls.is_refused_address(address) for address in addresses)  # loopback, allowed here


def test_resolve_returns_an_ip_literal_as_itself() -> None:
    assert urls.resolve("8.8.8.8", 443, local_mode=False) == ["8.8.8.8"]
    with pytest.raises(Unsafe):
        urls.resolve("127.1", 443, local_mode=False)  # the C resolver reads 127.0.0.1


def test_resolve_refuses_when_any_address_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A name with one public and one internal address is refused, in every mode: the
    connection could reach either."""
    answer = _infos("93.184.216.34", "93.184.216.34", "10.0.0.7")
    monkeypatch.setattr(socket, "getaddrinfo", lambda *args, **kwargs: answer)
    for local_mode in (False, True):
        with pytest.raises(Unsafe) as raised:
            urls.resolve("rebind.example.com", 443, local_mode=local_mode)
        assert "rebind.example.com" in str(raised.value) and "10.0.0.7" in str(raised.value)


@pytest.mark.parametrize("address", ["169.254.169.254", "10.0.0.1", "100.64.0.1", "fd00:ec2::254", "::ffff:127.0.0.1"])
def test_resolve_refuses_internal_addresses_in_local_mode_too(monkeypatch: pytest.MonkeyPatch, address: str) -> None:
    """Issue 29, finding 7: local mode adds loopback, nothing else (a name a tenant controls can
    resolve to the metadata service as well as an IP literal can name it)."""
    monkeypatch.setattr(socket, "getaddrinfo", lambda *args, **kwargs: _infos(address))
    with pytest.raises(Unsafe):
        urls.resolve("hooks.example.com", 80, local_mode=True)
    assert not urls.is_allowed_address(address, local_mode=True)


def test_resolve_allows_loopback_and_public_addresses_in_local_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    answer = _infos("127.0.0.1", "::1", "93.184.216.34")
    monkeypatch.setattr(socket, "getaddrinfo", lambda *args, **kwargs: answer)
    assert urls.resolve("dev.example.com", 80, local_mode=True) == ["127.0.0.1", "::1", "93.184.216.34"]
    with pytest.raises(Unsafe):
        urls.resolve("dev.example.com", 80, local_mode=False)


@pytest.mark.parametrize("address", ["127.0.0.1", "127.0.0.53", "127.255.255.254", "::1"])
def test_loopback_is_allowed_in_local_mode_only(address: str) -> None:
    assert urls.is_loopback_address(address)
    assert urls.is_allowed_address(address, local_mode=True)
    assert not urls.is_allowed_address(address, local_mode=False)


@pytest.mark.parametrize(
    "address", [address for address in REFUSED_ADDRESSES if address not in ("127.0.0.1", "127.0.0.53", "::1")]
)
def test_every_other_refused_address_is_refused_in_local_mode(address: str) -> None:
    assert not urls.is_loopback_address(address)
    assert not urls.is_allowed_address(address, local_mode=True)


def test_resolve_keeps_the_resolvers_order_without_duplicates(monkeypatch: pytest.MonkeyPatch) -> None:
    answer = _infos("2606:4700:4700::1111", "1.1.1.1", "2606:4700:4700::1111", "1.0.0.1")
    monkeypatch.setattr(socket, "getaddrinfo", lambda *args, **kwargs: answer)
    assert urls.resolve("one.example", 443, local_mode=False) == ["2606:4700:4700::1111", "1.1.1.1", "1.0.0.1"]


def test_resolve_refuses_a_name_that_does_not_resolve(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: object, **kwargs: object) -> list[Any]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", fail)
    with pytest.raises(Unsafe, match="does not resolve"):
        urls.resolve("nowhere.example", 443, local_mode=True)
    monkeypatch.setattr(socket, "getaddrinfo", lambda *args, **kwargs: [])
    with pytest.raises(Unsafe, match="does not resolve"):
        urls.resolve("nowhere.example", 443, local_mode=False)


def _infos(*addresses: str) -> list[tuple[Any, ...]]:
    infos: list[tuple[Any, ...]] = []
    for address in addresses:
        if ":" in address:
            infos.append((socket.AF_INET6, socket.SOCK_STREAM, 6, "", (address, 443, 0, 0)))
        else:
            infos.append((socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, 443)))
    return infos
