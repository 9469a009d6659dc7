"""The SSRF guard of outgoing webhooks: which URLs a tenant may register, and which addresses
paycore may connect to when it delivers.

A tenant chooses the URL and paycore's worker makes the request, from inside paycore's network.
Without a guard, a tenant could make paycore POST to its database, to a cloud's metadata
service (169.254.169.254) or to any other internal service, and read the answer's excerpt back
from the delivery attempts. So the guard works twice:

- at registration, `check_url` refuses what is wrong on its face, without any DNS look-up: not
  https, credentials in the URL, a fragment, a host that is an internal address written as an
  IP literal (in any of the forms a C resolver reads as one: `0x7f.1`, `2130706433`,
  `[::ffff:127.0.0.1]`), or an internal name (`localhost`, `*.internal`, ...);
- at each delivery, `resolve` looks the host up and refuses it when ANY of its addresses is
  refused; the transport then connects to an address it got here, never looking the name up
  again, so a name whose DNS answer changes between the check and the connection (DNS
  rebinding) is still held to the check.

Local mode (a developer's machine: no API key and no operator yet) adds loopback receivers and
nothing else: `localhost`, 127.0.0.0/8 and ::1, over http or https, so that a receiver on
`http://127.0.0.1:PORT/hook` can be used. Every other rule holds in every mode, at registration
and at delivery: the metadata service, private networks and the rest stay refused, and http
stays refused for any other host. Local mode's server is reachable from
loopback only (ADR 0013), but its worker's requests are not: they leave the machine.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import urllib.parse
from typing import Final

from paycore.webhooks.errors import InvalidWebhookUrl, Unsafe

URL_LENGTH_MAX: Final = 2048
HOST_LENGTH_MAX: Final = 253  # a DNS name, without its trailing dot (RFC 1035)
ADDRESSES_MAX: Final = 32  # addresses of one host paycore looks at; more is refused, not truncated

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# RFC 3986's characters (unreserved, reserved and "%"). Anything else (spaces, tabs and new
# lines that urlsplit silently drops, backslashes that browsers read as "/", non-ASCII) is
# where two URL parsers disagree about the host: refused, the tenant percent-encodes it.
_URL_CHARACTERS: Final = re.compile(r"[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]*")
_LABEL: Final = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
# A last label that is a number makes the host an IPv4 address to URL parsers (WHATWG) and to
# the C resolver (inet_aton reads "127.1", "0x7f.1", "017700000001").
_NUMERIC_LABEL: Final = re.compile(r"(?:0x[0-9a-f]*|[0-9]+)")
_LOOPBACK_NAME: Final = "localhost"  # the one name local mode adds (RFC 6761: always loopback)
_REFUSED_NAMES: Final = frozenset({_LOOPBACK_NAME, "localhost.localdomain"})
_REFUSED_SUFFIXES: Final = (".localhost", ".local", ".localdomain", ".internal", ".home.arpa")
_SHARED_ADDRESS_SPACE: Final = ipaddress.IPv4Network("100.64.0.0/10")  # CGNAT, RFC 6598
_NAT64: Final = ipaddress.IPv6Network("64:ff9b::/96")  # an IPv4 address in its low 32 bits


def _refuse(message: str) -> InvalidWebhookUrl:
    return InvalidWebhookUrl(message, param="url")


def check_url(url: str, *, local_mode: bool) -> str:
    """The URL, unchanged, if a tenant may register it; else InvalidWebhookUrl (param "url").
    Does not look the host up: that is done at each delivery (`resolve`)."""
    if len(url) > URL_LENGTH_MAX:
        raise _refuse(f"The URL is longer than {URL_LENGTH_MAX} characters.")
    if _URL_CHARACTERS.fullmatch(url) is None:
        raise _refuse(
            "The URL contains a character that must be percent-encoded"
            " (a space, a control or non-ASCII character, a backslash)."
        )
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as error:
        raise _refuse(f"The URL cannot be parsed: {error}.") from error
    _check_structure(url, parts, port)
    host = parts.hostname
    assert host is not None  # _check_structure
    bracketed = "[" in parts.netloc
    if local_mode and _is_loopback_host(host, bracketed=bracketed):
        return url  # what local mode adds: a receiver on the developer's own machine
    if bracketed:
        _check_ipv6_literal(host)
    else:
        _check_name_or_ipv4(host)
    if parts.scheme != "https":
        raise _refuse("The URL must use https (http is allowed in local mode only, for a loopback receiver).")
    return url


def _check_structure(url: str, parts: urllib.parse.SplitResult, port: int | None) -> None:
    if parts.scheme not in ("http", "https"):
        raise _refuse("The URL must use https (http is allowed in local mode only, for a loopback receiver).")
    if "@" in parts.netloc or parts.username is not None or parts.password is not None:
        raise _refuse("The URL must not contain credentials (user:password@): the signature authenticates paycore.")
    if not parts.hostname:
        raise _refuse("The URL has no host.")
    if "#" in url:  # even an empty one: "https://example.com/hook#"
        raise _refuse("The URL must not contain a fragment (#...): it is never sent to a server.")
    if port is not None and not 1 <= port <= 65535:
        raise _refuse("The URL's port must be between 1 and 65535.")
    if "[" not in parts.netloc and not _is_host_name(parts.hostname):
        raise _refuse("The URL's host is not a valid host name.")


def _is_host_name(host: str) -> bool:
    name = host.removesuffix(".")
    if not name or len(name) > HOST_LENGTH_MAX:
        return False
    return all(_LABEL.fullmatch(label) is not None for label in name.split("."))


def _is_loopback_host(host: str, *, bracketed: bool) -> bool:
    """`localhost`, or a loopback address written the one way every parser reads alike
    (a.b.c.d, or [::1] in any spelling). `_check_structure` has vetted the host's characters."""
    name = host.removesuffix(".")
    if name == _LOOPBACK_NAME:
        return True
    try:
        address = ipaddress.IPv6Address(host) if bracketed else ipaddress.IPv4Address(name)
    except ValueError:
        return False
    return is_loopback_address(address)


def _check_ipv6_literal(host: str) -> None:
    try:
        address = ipaddress.IPv6Address(host)
    except ValueError as error:
        raise _refuse("The URL's host is not a valid IPv6 address.") from error
    if is_refused_address(address):
        raise _refuse(f"The URL's host {address} is a loopback, private, link-local or reserved address.")


def _check_name_or_ipv4(host: str) -> None:
    name = host.removesuffix(".")
    if _NUMERIC_LABEL.fullmatch(name.rsplit(".", 1)[-1]) is None:
        _check_name(name)
        return
    try:
        address = ipaddress.IPv4Address(name)  # the one form every parser reads the same: a.b.c.d
    except ValueError:
        address = None
    if address is None:
        # Numeric but not a.b.c.d: either no address at all ("1.2.3.999") or one that parsers read
        # differently ("010.0.0.1" is 8.0.0.1 to inet_aton, 10.0.0.1 to others).
        raise _refuse("The URL's host is an IP address in a non-standard form (or not an address): write a.b.c.d.")
    if is_refused_address(address):
        raise _refuse(f"The URL's host {address} is a loopback, private, link-local or reserved address.")


def _check_name(name: str) -> None:
    if name in _REFUSED_NAMES or name.endswith(_REFUSED_SUFFIXES):
        raise _refuse(f"The URL's host {name} is a local or internal name.")
    if "." not in name:
        # A one-label name is completed by the resolver's search domains: an internal service.
        raise _refuse(f"The URL's host {name} is not a fully qualified domain name.")


def is_loopback_address(ip: IpAddress | str) -> bool:
    """127.0.0.0/8 or ::1: what local mode adds. Not an IPv6 form that embeds 127.x (mapped,
    NAT64, ...): a developer's receiver is written 127.0.0.1 or [::1]."""
    address = ipaddress.ip_address(ip) if isinstance(ip, str) else ip
    if isinstance(address, ipaddress.IPv6Address):
        return address == ipaddress.IPv6Address(1)
    return address.is_loopback


def is_allowed_address(ip: IpAddress | str, *, local_mode: bool) -> bool:
    """Whether paycore may connect to the address: a public one, or in local mode a loopback one."""
    return not is_refused_address(ip) or (local_mode and is_loopback_address(ip))


def is_refused_address(ip: IpAddress | str) -> bool:
    """True for an address that is not public: loopback, link-local (the cloud metadata service),
    private, CGNAT, unspecified, multicast, reserved, documentation ranges, and IPv6 forms that
    carry such an IPv4 address (mapped, NAT64, 6to4, Teredo). Local mode allows loopback among
    them (`is_allowed_address`), nothing else."""
    address = ipaddress.ip_address(ip) if isinstance(ip, str) else ip
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if any(is_refused_address(inner) for inner in embedded):
            return True
        if address.ipv4_mapped is not None:  # the mapped address alone decides
            return False
        if address.is_site_local:  # fec0::/10, deprecated but still routed as private by some
            return True
    elif address in _SHARED_ADDRESS_SPACE:
        return True
    return (
        address.is_loopback
        or address.is_link_local
        or address.is_private
        or address.is_unspecified
        or address.is_multicast
        or address.is_reserved
        or not address.is_global
    )


def _embedded_ipv4(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    embedded: list[ipaddress.IPv4Address] = []
    if address.ipv4_mapped is not None:
        embedded.append(address.ipv4_mapped)
    if address.sixtofour is not None:
        embedded.append(address.sixtofour)
    if address.teredo is not None:
        embedded.extend(address.teredo)
    if address in _NAT64:
        embedded.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return embedded


def resolve(host: str, port: int, *, local_mode: bool) -> list[str]:
    """The host's TCP addresses (deduplicated, in the resolver's order), each one allowed
    (`is_allowed_address`); else Unsafe, and nothing may be sent. The message names the host,
    never the URL's path or query."""
    assert 1 <= port <= 65535
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError) as error:
        raise Unsafe(f"the webhook host {host} does not resolve") from error
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    if not addresses:
        raise Unsafe(f"the webhook host {host} does not resolve")
    if len(addresses) > ADDRESSES_MAX:
        raise Unsafe(f"the webhook host {host} resolves to more than {ADDRESSES_MAX} addresses")
    for address in addresses:
        try:
            allowed = is_allowed_address(address, local_mode=local_mode)
        except ValueError:
            allowed = False  # not an address paycore can read: not one it connects to
        if not allowed:
            raise Unsafe(f"the webhook host {host} resolves to {address}, a loopback, private or reserved address")
    return addresses
