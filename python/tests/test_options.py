"""MemberOptions: from_env, validation, durations, and secrets never shown."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
from conftest import REPO

import distributor_member as dm
from distributor_member._redis import Clients, coordination_prefix

SECRET = "Sup3rSecretPW"


def test_defaults_and_every_variable(tmp_path: Path) -> None:
    o = dm.MemberOptions.from_env({})
    assert o == dm.MemberOptions()
    assert (o.redis_url, o.table_key, o.services_key, o.listen) == (
        "redis://127.0.0.1:6379", "sys-matching-table", "sys-robots-list", "127.0.0.1:0")
    assert (o.weight, o.deadline, o.poll_interval, o.reregister_interval, o.drain_timeout) == (1, 10, 1, 5, 30)
    assert (o.load_half_life, o.load_report_interval, o.margin) == (60, 10, 0.5)
    files = {}
    for name in ("ca.pem", "cert.pem", "key.pem", "rca.pem", "rcert.pem", "rkey.pem"):
        (tmp_path / name).write_text("x")
        files[name] = str(tmp_path / name)
    env = {
        "REDIS_URL": "rediss://h1:7000,rediss://h2:7001",
        "REDIS_USER": "alice",
        "REDIS_PASSWORD": SECRET,
        "REDIS_TLS_CA": files["rca.pem"],
        "REDIS_TLS_CERT": files["rcert.pem"],
        "REDIS_TLS_KEY": files["rkey.pem"],
        "DISTRIBUTION_NAMESPACE": "app:{t}:table",
        "MEMBER_SERVICES_KEY": "workers",
        "MEMBER_LISTEN": "0.0.0.0:7001",
        "MEMBER_ADVERTISE": "10.0.0.7:7001",
        "MEMBER_WEIGHT": "7",
        "MEMBER_DEADLINE": "1m",
        "MEMBER_POLL_INTERVAL": "1500ms",
        "MEMBER_REREGISTER_INTERVAL": "2s",
        "MEMBER_DRAIN_TIMEOUT": "1m30s",
        "MEMBER_LOAD_HALF_LIFE": "0",
        "MEMBER_LOAD_REPORT_INTERVAL": "500ms",
        "MEMBER_FENCE_MARGIN": "2s",
        "MEMBER_TLS_CERT": files["cert.pem"],
        "MEMBER_TLS_KEY": files["key.pem"],
        "MEMBER_TLS_CA": files["ca.pem"],
    }
    o = dm.MemberOptions.from_env(env)
    assert o.cluster()
    assert o.redis_urls() == ["rediss://h1:7000", "rediss://h2:7001"]
    assert (o.redis_username, o.redis_password) == ("alice", SECRET)
    assert (o.table_key, o.services_key, o.listen, o.advertise) == ("app:{t}:table", "workers", "0.0.0.0:7001",
                                                                    "10.0.0.7:7001")
    assert (o.weight, o.deadline, o.poll_interval, o.reregister_interval, o.drain_timeout) == (7, 60, 1.5, 2, 90)
    assert (o.load_half_life, o.load_report_interval, o.margin) == (0, 0.5, 2)
    assert (o.tls_cert, o.tls_key, o.tls_ca) == (files["cert.pem"], files["key.pem"], files["ca.pem"])
    assert coordination_prefix(o.table_key) == "app:{t}:table"
    assert coordination_prefix("sys-matching-table") == "{sys-matching-table}"
    assert dm.MemberOptions.from_env({"REDIS_CLUSTER": "true"}).cluster()
    assert not dm.MemberOptions.from_env({"REDIS_CLUSTER": "off"}).cluster()
    assert dm.MemberOptions.from_env({"REDIS_USERNAME": "bob"}).redis_username == "bob"
    # Overrides win over the environment.
    assert dm.MemberOptions.from_env({"MEMBER_WEIGHT": "7"}, weight=3).weight == 3


def test_durations_like_the_daemon() -> None:
    p = dm.parse_duration
    assert (p("10s"), p("1500ms"), p("2m"), p("1m30s"), p("0"), p("250us")) == (10, 1.5, 120, 90, 0, 0.00025)
    for bad, why in [("10", "missing unit"), ("10d", "unknown unit"), ("", "empty"), ("ms", "expected a number")]:
        with pytest.raises(ValueError, match=why):
            p(bad)


@pytest.mark.parametrize(
    "env, variable, field, reason",
    [
        ({"MEMBER_WEIGHT": "0"}, "MEMBER_WEIGHT", "weight", "from 1 to 1000"),
        ({"MEMBER_WEIGHT": "1001"}, "MEMBER_WEIGHT", "weight", "from 1 to 1000"),
        ({"MEMBER_WEIGHT": "two"}, "MEMBER_WEIGHT", "weight", "whole number"),
        ({"MEMBER_DEADLINE": "301s"}, "MEMBER_DEADLINE", "deadline", "at most 300s"),
        ({"MEMBER_DEADLINE": "10"}, "MEMBER_DEADLINE", "deadline", "missing unit"),
        ({"MEMBER_DEADLINE": "0"}, "MEMBER_DEADLINE", "deadline", "above 0"),
        ({"MEMBER_POLL_INTERVAL": "6s"}, "MEMBER_POLL_INTERVAL", "poll_interval", "half the deadline"),
        ({"MEMBER_FENCE_MARGIN": "5s"}, "MEMBER_FENCE_MARGIN", "fence_margin", "half the deadline"),
        ({"MEMBER_LOAD_REPORT_INTERVAL": "0"}, "MEMBER_LOAD_REPORT_INTERVAL", "load_report_interval", "positive"),
        ({"MEMBER_LOAD_REPORT_INTERVAL": "61s"}, "MEMBER_LOAD_REPORT_INTERVAL", "load_report_interval", "at most 1m"),
        ({"MEMBER_LISTEN": "0.0.0.0:7001"}, "MEMBER_LISTEN", "listen", "set advertise"),
        ({"MEMBER_LISTEN": "nohost"}, "MEMBER_LISTEN", "listen", "host:port"),
        ({"MEMBER_ADVERTISE": "0.0.0.0:7001"}, "MEMBER_ADVERTISE", "advertise", "cannot be dialled"),
        ({"MEMBER_ADVERTISE": "host:0"}, "MEMBER_ADVERTISE", "advertise", "1..=65535"),
        ({"MEMBER_ADVERTISE": "h st:1"}, "MEMBER_ADVERTISE", "advertise", "outside"),
        ({"REDIS_CLUSTER": "maybe"}, "REDIS_CLUSTER", "redis_cluster", "true or false"),
        ({"DISTRIBUTION_NAMESPACE": "a{}b"}, "DISTRIBUTION_NAMESPACE", "table_key", "hash tag"),
        ({"MEMBER_SERVICES_KEY": " "}, None, "services_key", "must not be empty"),
        ({"REDIS_TLS_CERT": "/nonexistent.pem", "REDIS_TLS_KEY": "/nonexistent.pem"}, "REDIS_TLS_CERT",
         "redis_tls_cert", "no such file"),
        ({"MEMBER_TLS_CA": "/nonexistent.pem"}, "MEMBER_TLS_CA", "tls_ca", "needs tls_cert"),
        ({"REDIS_SENTINEL_MASTER": "m", "REDIS_CLUSTER": "1"}, "REDIS_CLUSTER", "redis_cluster", "exclude"),
    ],
)
def test_invalid_settings_name_the_variable_and_the_value(
    env: dict[str, str], variable: str | None, field: str, reason: str
) -> None:
    with pytest.raises(dm.OptionsError) as e:
        dm.MemberOptions.from_env(env)
    assert e.value.field == field
    if variable is not None:
        assert e.value.env == variable
        assert variable in str(e.value)
    assert reason in str(e.value)
    shown = env.get(variable or "", "")
    if shown and "TLS" not in (variable or ""):
        assert repr(shown) in str(e.value), str(e.value)


def test_fields_are_validated_without_the_environment() -> None:
    with pytest.raises(dm.OptionsError, match=r"weight='0'"):
        dm.MemberOptions(weight=0).validate()
    with pytest.raises(dm.OptionsError, match="poll_interval"):
        dm.Member(dm.MemberOptions(deadline=1.0, poll_interval=0.6))
    with pytest.raises(dm.OptionsError, match="weight"):
        dm.MemberOptions(weight=True).validate()
    assert dm.MemberOptions(deadline=1.0, poll_interval=0.5).margin == 0.1


@pytest.mark.parametrize(
    "url, shown",
    [
        (f"redis://u:{SECRET}@h:1/0", "redis://u:***@h:1/0"),
        ("redis://h:1", "redis://h:1"),
        (f"redis://127.0.0.1:6379,garbage:{SECRET}", "redis://127.0.0.1:6379,garbage:***"),
        (f"redis://a:1,http://u:{SECRET}@b:2", "redis://a:1,http:***@b:2"),
        (f"redis://:a{SECRET}@h:1,redis://:b{SECRET}@h:2,c:d@h:3", "redis://:***@h:1,redis://:***@h:2,c:***@h:3"),
        (f"redis://u:{SECRET},x@h:1", "redis://u:***@h:1"),
        (f"redis://u:a@{SECRET}@h:1", "redis://u:***@h:1"),
        (f"redis://h:1, {SECRET}", "redis://h:1, ***"),
        ("u:a,b:c@h:1", "u:***@h:1"),
    ],
)
def test_redaction_like_the_daemon(url: str, shown: str) -> None:
    assert dm.redact_url(url) == shown


@pytest.mark.parametrize(
    "env",
    [
        {"REDIS_URL": f"redis://u:{SECRET}@h:1,garbage:{SECRET}"},
        {"REDIS_URL": f"redis://h:1,{SECRET}"},
        {"REDIS_URL": f"redis://u:{SECRET}@h:notaport"},
        {"REDIS_URL": f"http://u:{SECRET}@h:1"},
        {"REDIS_URL": f"redis://h:1,redis://u:{SECRET}@h:99999"},
        {"REDIS_PASS": SECRET, "REDIS_TLS": "maybe"},
        {"REDIS_PASSWORD": SECRET, "REDIS_ADDRS": f"u:{SECRET}@h:1"},
        {"REDIS_URL": f"redis://u:{SECRET}@h:notaport", "REDIS_TLS": "true"},
        {"REDIS_PASS": SECRET, "MEMBER_WEIGHT": "0"},
        {"REDIS_URL": f"redis://u:{SECRET}@h:1", "REDIS_SENTINEL_MASTER": "m", "REDIS_CLUSTER": "1"},
    ],
)
def test_no_secret_in_errors(env: dict[str, str], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with pytest.raises(dm.OptionsError) as e:
        dm.MemberOptions.from_env(env)
    for text in (str(e.value), repr(e.value), e.value.value, caplog.text):
        assert SECRET not in text, text
    assert e.value.field


def test_no_secret_in_reprs(caplog: pytest.LogCaptureFixture) -> None:
    o = dm.MemberOptions.from_env({"REDIS_URL": f"redis://u:{SECRET}@h:1,redis://:{SECRET}@h:2",
                                   "REDIS_PASS": SECRET})
    for text in (repr(o), str(o), o.redacted_redis_url(), f"{o}"):
        assert SECRET not in text, text
    assert "redis://u:***@h:1,redis://:***@h:2" in repr(o)
    assert "redis_password=***" in repr(o)
    # A client built from it shows none either.
    clients = Clients(o)
    assert SECRET not in repr(clients.main)


def test_sentinel_and_cluster_modes() -> None:
    o = dm.MemberOptions(redis_url="redis://:s@a:26379,redis://:s@b:26379", redis_sentinel_master="mymaster",
                         redis_password="m")
    assert not o.cluster()
    o.validate()
    with pytest.raises(dm.OptionsError, match="all be redis:// or all rediss://"):
        dm.MemberOptions(redis_url="redis://a:1,rediss://b:2", redis_sentinel_master="m").validate()
    assert dm.MemberOptions(redis_url="redis://a:1", redis_cluster=True).cluster()


# --- The README's member variable table (rendered from the Rust MEMBER_ENV) ---

README_HEADER = "| variable | default | meaning |"


def readme_member_variables() -> list[tuple[list[str], str]]:
    """The rows of README.md's member variable table: (the names in the first
    cell, aliases included; the default cell without backticks)."""
    readme = REPO / "README.md"
    assert readme.is_file(), f"no README.md at {readme}: set DISTRIBUTOR_REPO to the repository"
    lines = readme.read_text(encoding="utf-8").splitlines()
    assert lines.count(README_HEADER) == 1, f"README.md should hold one {README_HEADER!r} table"
    start = lines.index(README_HEADER)
    assert lines[start + 1].startswith("|---")
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        names = re.findall(r"`([A-Z][A-Z0-9_]*)`", cells[0])
        assert names, f"no variable in README row {line!r}"
        rows.append((names, cells[1].strip("`")))
    return rows


def test_readme_table_is_found() -> None:
    names = [n for row, _ in readme_member_variables() for n in row]
    assert len(names) >= 25, names
    for expected in ("REDIS_URL", "REDIS_ROOTCA_CERTS", "REDIS_PASSWORD_FILE", "REDIS_ADDRS", "MEMBER_TLS_CA"):
        assert expected in names


def test_every_readme_variable_is_read() -> None:
    """Every variable of the Rust library's table (README.md) is read by
    from_env: listed in its tables, and setting it alone changes the outcome
    (other options, or an error) from that of an empty environment."""
    listed = set(dm.environment_variables())
    default = dm.MemberOptions.from_env({})
    for names, _ in readme_member_variables():
        for name in names:
            assert name in listed, f"{name} (README.md) is not in ENVIRONMENT or ENVIRONMENT_EXTRA"
            try:
                got = dm.MemberOptions.from_env({name: "x-probe"})
            except dm.OptionsError as e:
                # Only this variable is set, so the error is its effect (it
                # names it, or the field it leaves incomplete: REDIS_TLS_CERT
                # alone is reported as a missing redis_tls_key).
                assert e.env in (name, None), (name, str(e))
                continue
            assert got != default, f"{name} set alone changed nothing"


def test_readme_defaults_are_the_defaults() -> None:
    """A variable set to its README default gives the options of an empty
    environment; an 'unset' one leaves its field None."""
    default = dm.MemberOptions.from_env({})
    field_of = {v: f for f, (variables, _) in dm.ENVIRONMENT.items() for v in variables}
    for names, value in readme_member_variables():
        for name in names:
            if value == "unset":
                if name in field_of:
                    assert getattr(default, field_of[name]) is None, name
                continue
            assert dm.MemberOptions.from_env({name: value}) == default, (name, value)


def test_aliases_first_set_wins_and_empty_is_unset() -> None:
    assert dm.MemberOptions.from_env({"REDIS_USER": "a", "REDIS_USERNAME": "b"}).redis_username == "a"
    assert dm.MemberOptions.from_env({"REDIS_USER": "", "REDIS_USERNAME": "b"}).redis_username == "b"
    assert dm.MemberOptions.from_env({"REDIS_PASS": "p1", "REDIS_PASSWORD": "p2"}).redis_password == "p1"


# --- REDIS_PASSWORD_FILE ---


@pytest.mark.parametrize(
    "content, password",
    [
        (b"pw", "pw"),
        (b"pw\n", "pw"),
        (b"pw\r\n", "pw"),
        (b"pw\n\n", "pw\n"),
        (b"p w\r\nx\n", "p w\r\nx"),
        (SECRET.encode() + b"\n", SECRET),
    ],
)
def test_password_file(tmp_path: Path, content: bytes, password: str) -> None:
    f = tmp_path / "pw"
    f.write_bytes(content)
    o = dm.MemberOptions.from_env({"REDIS_PASSWORD_FILE": f" {f} "})
    assert o.redis_password == password
    assert o.redis_username is None


def test_password_variable_wins_over_the_file(tmp_path: Path) -> None:
    f = tmp_path / "pw"
    f.write_text("from-file\n")
    for var in ("REDIS_PASS", "REDIS_PASSWORD"):
        assert dm.MemberOptions.from_env({var: "direct", "REDIS_PASSWORD_FILE": str(f)}).redis_password == "direct"
    assert dm.MemberOptions.from_env({"REDIS_PASSWORD_FILE": str(f)}, redis_password="o").redis_password == "o"
    # An empty file is an error only where its password would be used.
    (tmp_path / "empty").write_text("\n")
    env = {"REDIS_PASSWORD_FILE": str(tmp_path / "empty")}
    with pytest.raises(dm.OptionsError, match="holds no password") as e:
        dm.MemberOptions.from_env(env)
    assert e.value.env == "REDIS_PASSWORD_FILE"
    assert dm.MemberOptions.from_env({**env, "REDIS_PASS": "direct"}).redis_password == "direct"


@pytest.mark.parametrize("what", ["missing", "directory", "not-utf8"])
def test_unreadable_password_file_names_the_variable_never_the_content(
    tmp_path: Path, what: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    path = tmp_path / "pw"
    if what == "directory":
        path.mkdir()
    elif what == "not-utf8":
        path.write_bytes(SECRET.encode() + b"\xff\xfe" + SECRET.encode() + b"\n")
    for env in ({"REDIS_PASSWORD_FILE": str(path)},
                # Still read (and refused) when REDIS_PASS wins, as in Rust.
                {"REDIS_PASSWORD_FILE": str(path), "REDIS_PASS": "direct"}):
        with pytest.raises(dm.OptionsError) as e:
            dm.MemberOptions.from_env(env)
        assert (e.value.env, e.value.field) == ("REDIS_PASSWORD_FILE", "redis_password")
        assert "REDIS_PASSWORD_FILE" in str(e.value) and "cannot read it" in str(e.value)
        assert str(path) in str(e.value)
        assert e.value.__context__ is None and e.value.__cause__ is None
        for text in (str(e.value), repr(e.value), e.value.value, e.value.reason, caplog.text):
            assert SECRET not in text, text


def test_password_from_file_never_shown(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    f = tmp_path / "pw"
    f.write_text(SECRET + "\n")
    o = dm.MemberOptions.from_env({"REDIS_PASSWORD_FILE": str(f)})
    assert o.redis_password == SECRET
    for text in (repr(o), str(o), repr(Clients(o).main)):
        assert SECRET not in text, text
    with pytest.raises(dm.OptionsError) as e:
        dm.MemberOptions.from_env({"REDIS_PASSWORD_FILE": str(f), "MEMBER_WEIGHT": "0"})
    for text in (str(e.value), repr(e.value), e.value.value, caplog.text):
        assert SECRET not in text, text


# --- REDIS_TLS ---


def test_redis_tls_makes_every_url_rediss() -> None:
    assert dm.MemberOptions.from_env({"REDIS_TLS": "true"}).redis_url == "rediss://127.0.0.1:6379"
    o = dm.MemberOptions.from_env({"REDIS_URL": f"redis://u:{SECRET}@a:1, redis://b:2,rediss://c:3",
                                   "REDIS_TLS": "1"})
    assert o.redis_urls() == [f"rediss://u:{SECRET}@a:1", "rediss://b:2", "rediss://c:3"]
    assert SECRET not in repr(o)
    for off in ("false", "0", "off", ""):
        assert dm.MemberOptions.from_env({"REDIS_URL": "redis://a:1", "REDIS_TLS": off}).redis_url == "redis://a:1"
    # An explicit redis_url wins, as every override does.
    assert dm.MemberOptions.from_env({"REDIS_TLS": "yes"}, redis_url="redis://a:1").redis_url == "redis://a:1"
    with pytest.raises(dm.OptionsError, match="true or false") as e:
        dm.MemberOptions.from_env({"REDIS_TLS": "maybe"})
    assert e.value.env == "REDIS_TLS" and "REDIS_TLS" in str(e.value)
    # The clients then speak TLS.
    clients = Clients(dm.MemberOptions.from_env({"REDIS_TLS": "on"}))
    assert clients.main.connection_pool.connection_class.__name__ == "SSLConnection"
    assert clients.rows.connection_pool.connection_class.__name__ == "SSLConnection"


# --- REDIS_ROOTCA_CERTS ---


def test_rootca_certs_is_an_alias_of_redis_tls_ca(tmp_path: Path) -> None:
    a, b = tmp_path / "a.pem", tmp_path / "b.pem"
    a.write_text("x")
    b.write_text("x")
    assert dm.MemberOptions.from_env({"REDIS_ROOTCA_CERTS": f"{a},{b}"}).redis_tls_ca == f"{a},{b}"
    assert dm.MemberOptions.from_env({"REDIS_TLS_CA": str(a), "REDIS_ROOTCA_CERTS": str(b)}).redis_tls_ca == str(a)
    assert dm.MemberOptions.from_env({"REDIS_TLS_CA": "", "REDIS_ROOTCA_CERTS": str(b)}).redis_tls_ca == str(b)
    with pytest.raises(dm.OptionsError, match="no such file") as e:
        dm.MemberOptions.from_env({"REDIS_ROOTCA_CERTS": str(tmp_path / "missing.pem")})
    assert (e.value.env, e.value.field) == ("REDIS_ROOTCA_CERTS", "redis_tls_ca")


# --- REDIS_ADDRS ---


def test_redis_addrs_is_refused() -> None:
    for env in ({"REDIS_ADDRS": "h1:6379,h2:6379"},
                {"REDIS_ADDRS": "h1:6379", "REDIS_URL": "redis://h1:6379"},
                {"REDIS_ADDRS": f"u:{SECRET}@h1:6379"}):
        with pytest.raises(dm.OptionsError) as e:
            dm.MemberOptions.from_env(env)
        assert e.value.env == "REDIS_ADDRS"
        assert "REDIS_ADDRS" in str(e.value) and "put the same hosts in REDIS_URL" in str(e.value)
        assert SECRET not in str(e.value)
    assert dm.MemberOptions.from_env({"REDIS_ADDRS": ""}) == dm.MemberOptions()


# --- Sentinel credentials, as in Rust ---


def test_sentinel_credentials_from_env() -> None:
    """With REDIS_SENTINEL_MASTER, REDIS_USER and REDIS_PASS are the master's,
    the URLs' userinfo the Sentinels'; without, they replace the URLs'."""
    env = {"REDIS_URL": f"redis://su:s{SECRET}@s1:26379,redis://su:s{SECRET}@s2:26379",
           "REDIS_SENTINEL_MASTER": "mymaster", "REDIS_USER": "mu", "REDIS_PASS": f"m{SECRET}"}
    o = dm.MemberOptions.from_env(env)
    assert (o.redis_sentinel_master, o.redis_username, o.redis_password) == ("mymaster", "mu", f"m{SECRET}")
    c = Clients(o)
    assert (c._sentinel.sentinel_kwargs["username"], c._sentinel.sentinel_kwargs["password"]) == ("su", f"s{SECRET}")
    master = c.main.connection_pool.connection_kwargs
    assert (master["username"], master["password"]) == ("mu", f"m{SECRET}")
    del env["REDIS_SENTINEL_MASTER"]
    env["REDIS_URL"] = f"redis://su:s{SECRET}@h:6379"
    plain = Clients(dm.MemberOptions.from_env(env)).main.connection_pool.connection_kwargs
    assert (plain["username"], plain["password"]) == ("mu", f"m{SECRET}")
