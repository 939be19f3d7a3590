"""Redis URL lists: checks and redaction of every password.

A port of the daemon's rules (`src/config/redis_url.rs`), so that a member
shows a URL list exactly as conservatively as the daemon does: every
`user:pass@` becomes `user:***@`, and an entry of the list that is neither a
Redis URL nor a `host:port` shows nothing past its first `:` (it may be a
password typed where a URL belongs: `redis://h:1,garbage:Secret`).
Messages of the checks never quote the input.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

_Span = tuple[tuple[int, int], tuple[int, int], int]

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*$")


def _is_scheme(s: str) -> bool:
    return bool(_SCHEME.match(s))


def _userinfo_spans(s: str) -> list[_Span]:
    """Each userinfo: (user range, hidden password range, index of its '@')."""
    spans: list[list[object]] = []
    start = 0
    while True:
        at = s.find("@", start)
        if at < 0:
            break
        rng = s[start:at]
        info_start: int | None = None
        offset = start
        for entry in rng.split(","):
            trimmed = entry.lstrip()
            lead = len(entry) - len(trimmed)
            i = trimmed.find("://")
            if i >= 0 and _is_scheme(trimmed[:i]):
                known = trimmed[:i] in ("redis", "rediss")
                info_start = offset + lead + (i + 3 if known else 0)
            offset += len(entry) + 1
        previous_empty = bool(spans) and _empty(spans[-1])
        no_entry = rng.rsplit(",", 1)[-1].strip() == ""
        if info_start is None and not ("," in rng and not previous_empty and not no_entry) and spans:
            # No new entry since the previous '@': the password holds an '@'.
            last = spans[-1]
            hidden = last[1]
            assert isinstance(hidden, tuple)
            last[1] = (hidden[0], at)
            last[2] = at
            start = at + 1
            continue
        if info_start is None:
            comma = rng.find(",") if start > 0 else -1
            info_start = start + comma + 1 if comma >= 0 else start
        info = s[info_start:at]
        colon = info.find(":")
        if colon >= 0:
            spans.append([(info_start, info_start + colon), (info_start + colon + 1, at), at])
        else:
            spans.append([(info_start, info_start), (info_start, at), at])
        start = at + 1
    out: list[_Span] = []
    for user, hidden, at_ in spans:
        assert isinstance(user, tuple) and isinstance(hidden, tuple) and isinstance(at_, int)
        out.append((user, hidden, at_))
    return out


def _empty(span: list[object]) -> bool:
    hidden = span[1]
    assert isinstance(hidden, tuple)
    return bool(hidden[0] == hidden[1])


def check_host_port(hp: str, port_required: bool) -> str | None:
    """Why `host[:port]` is not one (never quoting it), or None."""
    host: str
    port: str | None
    if hp.startswith("["):
        inner, sep, after = hp[1:].partition("]")
        if not sep:
            return "an IPv6 host needs its closing ]"
        try:
            ipaddress.IPv6Address(inner)
        except ValueError:
            return "the host in [] is not an IPv6 address"
        if after == "":
            host, port = inner, None
        elif after.startswith(":"):
            host, port = inner, after[1:]
        else:
            return "expected :port after the IPv6 host"
    else:
        host, sep, p = hp.partition(":")
        port = p if sep else None
    if not host:
        return "the host is missing"
    if any(c.isspace() or c in "@/?#," for c in host):
        return "the host has characters a host name cannot have"
    if port is None:
        return "the port is missing" if port_required else None
    if not port.isdigit() or not port.isascii() or not 0 < int(port) <= 65535:
        return "the port must be a number from 1 to 65535"
    return None


def check_redis_url(url: str) -> str | None:
    """Why `url` is not a `redis://` or `rediss://` URL (never quoting it), or None."""
    form = "expected redis://[user:pass@]host[:port][/db] or rediss://..."
    scheme, sep, rest = url.partition("://")
    if not sep:
        return form
    if scheme not in ("redis", "rediss"):
        return "the scheme must be redis or rediss; " + form
    end = len(rest)
    for c in "/?#":
        i = rest.find(c)
        if 0 <= i < end:
            end = i
    authority, tail = rest[:end], rest[end:]
    host_port = authority.rpartition("@")[2]
    why = check_host_port(host_port, False)
    if why:
        return why + "; " + form
    q = len(tail)
    for c in "?#":
        i = tail.find(c)
        if 0 <= i < q:
            q = i
    db = tail[:q].strip("/")
    if db and not (db.isascii() and db.isdigit() and int(db) < 2**32):
        return "the database must be a whole number; " + form
    return None


def _malformed_tail(entry: str) -> tuple[int, int] | None:
    trimmed = entry.strip()
    if (
        not trimmed
        or "@" in trimmed
        or check_redis_url(trimmed) is None
        or check_host_port(trimmed, True) is None
    ):
        return None
    i = entry.find("://")
    scheme = i if i >= 0 and entry[:i].lstrip() in ("redis", "rediss") else None
    after = 0 if scheme is None else scheme + 3
    colon = entry.find(":", after)
    if colon >= 0:
        return (colon + 1, len(entry))
    if scheme is None:
        return (len(entry) - len(entry.lstrip()), len(entry))
    return (after, len(entry)) if after < len(entry) else None


def redact_url(url: str) -> str:
    """`url` (one URL, or a comma-separated list) with every password as `***`."""
    out: list[str] = []
    frm = 0
    for user, hidden, at in _userinfo_spans(url):
        out.append(url[frm : user[1]])
        if hidden[0] > user[1]:
            out.append(":")
        out.append("***")
        frm = at
    out.append(url[frm:])
    joined = "".join(out)
    entries = []
    for entry in joined.split(","):
        tail = _malformed_tail(entry)
        entries.append(entry if tail is None else entry[: tail[0]] + "***")
    return ",".join(entries)


def split_list(value: str) -> list[str]:
    """A comma-separated list: entries trimmed, empty ones dropped."""
    return [e.strip() for e in value.split(",") if e.strip()]


def check_member_addr(addr: str) -> str | None:
    """Why `addr` cannot be a member id (docs/protocol.md), or None."""
    raw = addr.encode("utf-8", "surrogatepass")
    if not raw:
        return "empty"
    if len(raw) > 261:
        return "longer than 261 bytes"
    host, sep, port = addr.rpartition(":")
    if not sep:
        return "missing ':port'"
    if not port or not (port.isascii() and port.isdigit()):
        return "port is not a number"
    if not 0 < int(port) <= 65535:
        return "port out of range 1..=65535"
    if host.startswith("["):
        if not host.endswith("]"):
            return "unclosed '[' in IPv6 host"
        try:
            ip = ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            return "bad IPv6 address"
        if ip.is_unspecified:
            return "unspecified address [::] cannot be dialled"
        return None
    if host == "0.0.0.0":
        return "unspecified address 0.0.0.0 cannot be dialled"
    if not host:
        return "empty host"
    if not all(c.isascii() and (c.isalnum() or c in "._-") for c in host):
        return "host has characters outside [A-Za-z0-9._-]"
    return None


_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^\s/@]*@")


def scrub(text: str, secrets: list[str]) -> str:
    """Free text (an error's message) with each of ``secrets`` (passwords)
    as ``***``, and the credentials of any URL in it (``scheme://user:pass@``)
    as ``***@``: safe to show."""
    for secret in sorted({x for x in secrets if x}, key=len, reverse=True):
        text = text.replace(secret, "***")
    return _URL_USERINFO.sub(r"\1***@", text)


def secrets_of(password: str | None, urls: list[str]) -> list[str]:
    """Every password of a member's Redis settings (``password`` and those
    in ``urls``): to be scrubbed from anything shown."""
    secrets = [password or ""]
    for url in urls:
        try:
            secrets.append(urlsplit(url).password or "")
        except ValueError:
            pass
    return secrets
