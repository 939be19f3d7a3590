"""A member's settings: :class:`MemberOptions`, from code or the environment."""

from __future__ import annotations

import dataclasses
import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ._durations import format_duration, parse_duration
from ._redact import check_host_port, check_member_addr, check_redis_url, redact_url, split_list

__all__ = [
    "MemberOptions",
    "OptionsError",
    "MAX_DEADLINE",
    "MAX_WEIGHT",
    "ENVIRONMENT",
    "ENVIRONMENT_EXTRA",
    "environment_variables",
]

#: The longest fencing deadline a member may report (docs/protocol.md, step 4).
MAX_DEADLINE = 300.0
#: The highest capacity weight.
MAX_WEIGHT = 1000
#: The longest load_report_interval: a holder leaves out loads dated over
#: five minutes ago, so a living member writes several times within that.
MAX_LOAD_REPORT = 60.0

_SECRET_FIELDS = frozenset({"redis_password"})


class OptionsError(ValueError):
    """An option is invalid. ``field`` names it (and ``env`` the environment
    variable it came from, if any); ``value`` is what was given, with every
    password replaced by ``***``."""

    def __init__(self, field: str, value: str, reason: str, env: str | None = None) -> None:
        self.field = field
        self.env = env
        self.value = value
        self.reason = reason
        where = f"{env} ({field})" if env else field
        super().__init__(f"{where}={value!r}: {reason}" if value != "" else f"{where}: {reason}")


def _shown(name: str, value: object) -> str:
    """How an option's value may appear in an error: never a password."""
    if value is None:
        return ""
    if name in _SECRET_FIELDS:
        return "***"
    if name == "redis_url" and isinstance(value, str):
        return redact_url(value)
    if isinstance(value, float):
        return format_duration(value)
    return str(value)


@dataclass
class MemberOptions:
    """How a member finds Redis and the matching table, and how it is reached.

    Durations are seconds (floats). Every field has the default of the
    environment variable in :data:`ENVIRONMENT`; :meth:`from_env` reads them.
    :meth:`validate` (called by :class:`~distributor_member.Member` at start)
    raises :class:`OptionsError` naming the field and the value.
    """

    #: Redis URL (``redis://[user:pass@]host[:port][/db]`` or ``rediss://``).
    #: Several comma-separated URLs are Redis Cluster seed nodes, or, with
    #: :attr:`redis_sentinel_master`, the Sentinels to ask.
    redis_url: str = "redis://127.0.0.1:6379"
    #: Redis Cluster mode with a single seed URL.
    redis_cluster: bool = False
    #: ACL user and password, over the URL's own (with Sentinel: the master's).
    redis_username: str | None = None
    redis_password: str | None = field(default=None, repr=False)
    #: PEM CA files (comma-separated) that verify Redis' certificate; default: system roots.
    redis_tls_ca: str | None = None
    #: PEM client certificate and key, where Redis requires client certificates.
    redis_tls_cert: str | None = None
    redis_tls_key: str | None = None
    #: Sentinel master name: the URLs then name Sentinels (their credentials
    #: authenticate to the Sentinels; ``rediss://`` means TLS to both).
    redis_sentinel_master: str | None = None
    #: Bound of each Redis call (seconds).
    redis_timeout: float = 2.0
    #: The matching table key (the daemon's ``-distribution-namespace``).
    table_key: str = "sys-matching-table"
    #: The services list to register in (the member's group).
    services_key: str = "sys-robots-list"
    #: ``host:port`` to serve gRPC on; port 0 picks a free port.
    listen: str = "127.0.0.1:0"
    #: The address the distributor dials, which is also the member id;
    #: default: :attr:`listen` as bound. Required with a wildcard listen address.
    advertise: str | None = None
    #: Capacity weight, 1 to 1000.
    weight: int = 1
    #: Fencing deadline: a hold ends this long after the earlier of the last
    #: read that showed the unit and the last ping (at most 300 s).
    deadline: float = 10.0
    #: Polling of the row besides notifications; at most half the deadline.
    poll_interval: float = 1.0
    #: Re-registration (and re-writing of the report), healing a Redis that lost its data.
    reregister_interval: float = 5.0
    #: How long :meth:`Member.drain` waits for the holder to move every unit away.
    drain_timeout: float = 30.0
    #: Half-life of the smoothing of :meth:`Member.report_load` (0: the last sample alone).
    load_half_life: float = 60.0
    #: How often the smoothed loads are written to ``{T}:loads``.
    load_report_interval: float = 10.0
    #: Units are stopped this long before their hold ends (the time a stop
    #: may take); ``None``: a tenth of the deadline, at most 500 ms.
    fence_margin: float | None = None
    #: Serve the ping over TLS with this PEM certificate and key; with a CA,
    #: also require client certificates signed by it (mutual TLS).
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_ca: str | None = None

    def __repr__(self) -> str:
        parts = []
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name in _SECRET_FIELDS:
                parts.append(f"{f.name}={'***' if v is not None else None}")
            elif f.name == "redis_url":
                parts.append(f"{f.name}={redact_url(v)!r}")
            else:
                parts.append(f"{f.name}={v!r}")
        return f"MemberOptions({', '.join(parts)})"

    __str__ = __repr__

    @property
    def margin(self) -> float:
        """The fence margin in effect."""
        if self.fence_margin is not None:
            return self.fence_margin
        return min(0.5, self.deadline / 10)

    def redis_urls(self) -> list[str]:
        return split_list(self.redis_url)

    def redacted_redis_url(self) -> str:
        return redact_url(self.redis_url)

    def cluster(self) -> bool:
        """Redis Cluster: several seed URLs (without Sentinel), or :attr:`redis_cluster`."""
        if self.redis_sentinel_master:
            return False
        return self.redis_cluster or len(self.redis_urls()) > 1

    def _bad(self, name: str, reason: str, env: Mapping[str, str] | None = None) -> OptionsError:
        return OptionsError(name, _shown(name, getattr(self, name)), reason)

    def validate(self) -> None:
        """Raises :class:`OptionsError` for the first invalid field."""
        bad = self._bad
        urls = self.redis_urls()
        if not isinstance(self.redis_url, str) or not urls:
            raise bad("redis_url", "expected redis://host:port (several comma-separated for a cluster)")
        for url in urls:
            why = check_redis_url(url)
            if why:
                raise OptionsError("redis_url", redact_url(url), why)
        if self.redis_sentinel_master is not None:
            if not self.redis_sentinel_master.strip():
                raise bad("redis_sentinel_master", "must not be empty")
            if self.redis_cluster:
                raise bad("redis_cluster", "Redis Cluster and Sentinel exclude each other")
            if len({u.split("://", 1)[0] for u in urls}) > 1:
                raise bad("redis_url", "the Sentinel URLs must all be redis:// or all rediss://")
        if self.redis_password is not None and self.redis_password == "":
            raise bad("redis_password", "must not be empty (leave it unset instead)")
        if (self.redis_tls_cert is None) != (self.redis_tls_key is None):
            raise bad("redis_tls_cert" if self.redis_tls_cert is None else "redis_tls_key",
                      "redis_tls_cert and redis_tls_key go together")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise bad("tls_cert" if self.tls_cert is None else "tls_key", "tls_cert and tls_key go together")
        if self.tls_ca is not None and self.tls_cert is None:
            raise bad("tls_ca", "needs tls_cert and tls_key (the CA only checks clients)")
        for name in ("redis_tls_cert", "redis_tls_key", "tls_cert", "tls_key", "tls_ca"):
            path = getattr(self, name)
            if path is not None and not os.path.isfile(path):
                raise bad(name, "no such file")
        for path in split_list(self.redis_tls_ca or ""):
            if not os.path.isfile(path):
                raise OptionsError("redis_tls_ca", path, "no such file")
        if not _positive(self.redis_timeout):
            raise bad("redis_timeout", "must be positive")
        for name in ("table_key", "services_key"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise bad(name, "must not be empty")
        tag_start = self.table_key.find("{")
        if tag_start >= 0 or "}" in self.table_key:
            end = self.table_key.find("}", tag_start + 1) if tag_start >= 0 else -1
            if end <= tag_start + 1:
                raise bad("table_key", "braces without a non-empty {hash tag}")
        why = _check_listen(self.listen)
        if why:
            raise bad("listen", why)
        if self.advertise is not None:
            why = check_member_addr(self.advertise)
            if why:
                raise bad("advertise", why)
        elif _wildcard(self.listen):
            raise bad("listen", "a wildcard address cannot be dialled: set advertise to the address others dial")
        if isinstance(self.weight, bool) or not isinstance(self.weight, int) or not 1 <= self.weight <= MAX_WEIGHT:
            raise bad("weight", f"must be a whole number from 1 to {MAX_WEIGHT}")
        if not _positive(self.deadline) or self.deadline > MAX_DEADLINE:
            raise bad("deadline", "must be above 0 and at most 300s")
        if not _positive(self.poll_interval) or self.poll_interval * 2 > self.deadline:
            raise bad("poll_interval",
                      f"must be positive and at most half the deadline ({format_duration(self.deadline)}): reads extend the holds")
        if not _positive(self.reregister_interval):
            raise bad("reregister_interval", "must be positive")
        if not _number(self.drain_timeout) or self.drain_timeout < 0:
            raise bad("drain_timeout", "must not be negative")
        if not _number(self.load_half_life) or self.load_half_life < 0:
            raise bad("load_half_life", "must not be negative")
        if not _positive(self.load_report_interval) or self.load_report_interval > MAX_LOAD_REPORT:
            raise bad(
                "load_report_interval",
                f"must be positive and at most {format_duration(MAX_LOAD_REPORT)}: a holder leaves out loads older than 5m",
            )
        if self.fence_margin is not None and (
            not _number(self.fence_margin) or self.fence_margin < 0 or self.fence_margin * 2 >= self.deadline
        ):
            raise bad("fence_margin", f"must be at least 0 and below half the deadline ({format_duration(self.deadline)})")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> MemberOptions:
        """Options from the environment variables of :data:`ENVIRONMENT` and
        :data:`ENVIRONMENT_EXTRA` (``environ``: default ``os.environ``), as
        the Rust ``MemberOptions::from_env`` reads them; ``overrides`` win.
        An empty variable counts as unset; of aliases, the first set wins.
        Durations are Go-style (``10s``, ``1500ms``, ``2m``), booleans
        ``true``/``false`` (also ``1``/``0``, ``yes``/``no``, ``on``/``off``).
        Raises :class:`OptionsError` naming the variable; the result is
        validated."""
        env = os.environ if environ is None else environ
        if env.get("REDIS_ADDRS", ""):
            raise OptionsError("redis_url", "", "members take their Redis hosts from REDIS_URL only: unset "
                               "REDIS_ADDRS and put the same hosts in REDIS_URL (redis://host:port, "
                               "comma-separated)", env="REDIS_ADDRS")
        values: dict[str, Any] = {}
        for name, (variables, kind) in ENVIRONMENT.items():
            var = next((v for v in variables if env.get(v, "") != ""), None)
            if var is not None:
                values[name] = _convert(name, var, env[var], kind)
        password_file = env.get("REDIS_PASSWORD_FILE", "")
        if password_file:
            # Read even when REDIS_PASS wins, as the Rust library does: a
            # broken setting is reported rather than left to surprise later.
            used = "redis_password" not in values and "redis_password" not in overrides
            password = _read_password_file(password_file.strip(), used)
            if used:
                values["redis_password"] = password
        tls = env.get("REDIS_TLS", "")
        if tls and _boolean(tls, "redis_url", "REDIS_TLS"):
            url: str = values.get("redis_url", cls.redis_url)
            values["redis_url"] = _with_tls(url)
        values.update(overrides)
        opts = cls(**values)
        try:
            opts.validate()
        except OptionsError as e:
            names: tuple[str, ...] = ENVIRONMENT[e.field][0] if e.field in ENVIRONMENT else ()
            source = next((v for v in names if env.get(v, "") != ""), None)
            if source is not None and e.field not in overrides:
                kind = ENVIRONMENT[e.field][1]
                raw = env[source].strip()
                shown = "***" if kind == "secret" else e.value if e.field == "redis_url" else raw
                raise OptionsError(e.field, shown, e.reason, env=source) from None
            raise
        return opts


#: field → (environment variables, the first set wins; kind)
ENVIRONMENT: dict[str, tuple[tuple[str, ...], str]] = {
    "redis_url": (("REDIS_URL",), "str"),
    "redis_cluster": (("REDIS_CLUSTER",), "bool"),
    "redis_username": (("REDIS_USER", "REDIS_USERNAME"), "str"),
    "redis_password": (("REDIS_PASS", "REDIS_PASSWORD"), "secret"),
    "redis_tls_ca": (("REDIS_TLS_CA", "REDIS_ROOTCA_CERTS"), "str"),
    "redis_tls_cert": (("REDIS_TLS_CERT",), "str"),
    "redis_tls_key": (("REDIS_TLS_KEY",), "str"),
    "redis_sentinel_master": (("REDIS_SENTINEL_MASTER",), "str"),
    "table_key": (("DISTRIBUTION_NAMESPACE",), "str"),
    "services_key": (("MEMBER_SERVICES_KEY",), "str"),
    "listen": (("MEMBER_LISTEN",), "str"),
    "advertise": (("MEMBER_ADVERTISE",), "str"),
    "weight": (("MEMBER_WEIGHT",), "int"),
    "deadline": (("MEMBER_DEADLINE",), "duration"),
    "poll_interval": (("MEMBER_POLL_INTERVAL",), "duration"),
    "reregister_interval": (("MEMBER_REREGISTER_INTERVAL",), "duration"),
    "drain_timeout": (("MEMBER_DRAIN_TIMEOUT",), "duration"),
    "load_half_life": (("MEMBER_LOAD_HALF_LIFE",), "duration"),
    "load_report_interval": (("MEMBER_LOAD_REPORT_INTERVAL",), "duration"),
    "fence_margin": (("MEMBER_FENCE_MARGIN",), "duration"),
    "tls_cert": (("MEMBER_TLS_CERT",), "str"),
    "tls_key": (("MEMBER_TLS_KEY",), "str"),
    "tls_ca": (("MEMBER_TLS_CA",), "str"),
}

#: Variables that set no field of their own → what :meth:`MemberOptions.from_env` does with them.
ENVIRONMENT_EXTRA: dict[str, str] = {
    "REDIS_PASSWORD_FILE": "redis_password from this file (a trailing newline is ignored); "
                           "REDIS_PASS/REDIS_PASSWORD win; an unreadable file is an error",
    "REDIS_TLS": "boolean: true turns every redis:// URL of redis_url into rediss://",
    "REDIS_ADDRS": "refused: members take their Redis hosts from REDIS_URL only",
}


def environment_variables() -> list[str]:
    """Every variable :meth:`MemberOptions.from_env` reads, aliases included."""
    return [v for variables, _ in ENVIRONMENT.values() for v in variables] + list(ENVIRONMENT_EXTRA)


def _read_password_file(path: str, used: bool) -> str:
    """The password in ``path``, without its trailing newline (``\\n``, then a
    ``\\r``), as the Rust library reads it; ``used``: REDIS_PASS does not
    win, so an empty file is an error. Errors name the variable and may show
    the path, never the content (raised outside the ``except``, so that no
    exception holding the bytes read hangs on them)."""
    reason: str | None = None
    text = ""
    try:
        with open(path, encoding="utf-8", newline="") as f:
            text = f.read()
    except UnicodeDecodeError:
        reason = "cannot read it: not UTF-8 text"
    except OSError as e:
        reason = f"cannot read it: {e.strerror or type(e).__name__}"
    if reason is not None:
        raise OptionsError("redis_password", path, reason, env="REDIS_PASSWORD_FILE")
    password = text.removesuffix("\n").removesuffix("\r")
    if password == "" and used:
        raise OptionsError("redis_password", path, "the file holds no password", env="REDIS_PASSWORD_FILE")
    return password


def _with_tls(url: str) -> str:
    """``REDIS_TLS``: every ``redis://`` URL of the list as ``rediss://``."""
    out = []
    for u in url.split(","):
        u = u.strip()
        out.append("rediss://" + u[len("redis://"):] if u.startswith("redis://") else u)
    return ",".join(out)


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _convert(name: str, var: str, raw: str, kind: str) -> Any:
    shown = "***" if kind == "secret" else (redact_url(raw) if name == "redis_url" else raw)
    text = raw.strip()
    if kind in ("str", "secret"):
        return raw if kind == "secret" else text
    if kind == "bool":
        return _boolean(raw, name, var)
    if kind == "int":
        if not (text.isascii() and text.lstrip("-").isdigit()):
            raise OptionsError(name, shown, "expected a whole number", env=var)
        return int(text)
    if kind == "duration":
        try:
            return parse_duration(text)
        except ValueError as e:
            raise OptionsError(name, shown, f"{e} (examples: 10s, 1500ms, 2m)", env=var) from None
    raise AssertionError(kind)


def _boolean(raw: str, name: str, var: str) -> bool:
    text = raw.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise OptionsError(name, raw.strip(), "expected true or false", env=var)


def _number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and v not in (float("inf"), float("-inf"))


def _positive(v: object) -> bool:
    return _number(v) and v > 0  # type: ignore[operator]


def split_host_port(addr: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` → (host without brackets, port)."""
    host, _, port = addr.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def _check_listen(listen: object) -> str | None:
    if not isinstance(listen, str):
        return "expected host:port"
    why = check_host_port(listen, True) if not listen.endswith(":0") else check_host_port(listen[:-2] + ":1", True)
    return None if why is None else why + " (expected host:port, port 0 for any free port)"


def _wildcard(listen: str) -> bool:
    host, _ = split_host_port(listen)
    if host in ("", "*"):
        return True
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False
