"""MemberOptions: from_env, validation, durations, and secrets never shown."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

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
        {"REDIS_PASS": SECRET, "REDIS_PASSWORD": SECRET + "x"},
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
