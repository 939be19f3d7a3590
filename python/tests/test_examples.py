"""The examples (examples/python) run on the package."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import distributor_member as dm
from conftest import REPO, SERVICES, Fleet, _die_with_parent, free_port, wait_for


def test_the_crawler_crawls_its_sites_and_drains(fleet: Fleet) -> None:
    sites = ["site-a", "site-b", "site-c"]
    fleet.set_units(sites)
    fleet.start_daemon()
    port = free_port()
    log = fleet.tmp / "crawler.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(REPO / "examples" / "python" / "crawler.py"), "--serve", f"127.0.0.1:{port}",
             "--sites", f"http://127.0.0.1:{port}", "--every", "0.05"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent,
            env={**os.environ, "REDIS_URL": fleet.redis.url, "MEMBER_DEADLINE": "2s",
                 "MEMBER_POLL_INTERVAL": "200ms", "MEMBER_SERVICES_KEY": SERVICES,
                 # Alone, its sites have nowhere to go: the drain times out and it stops them.
                 "MEMBER_DRAIN_TIMEOUT": "1s"},
        )
        try:
            wait_for("the crawler to crawl every site", lambda: all(f"crawling {s}" in log.read_text() for s in sites), 20)
            time.sleep(0.3)  # a few pages each
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(20) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    text = log.read_text()
    stored = re.search(r"pages stored: (\{.*\})", text)
    assert stored is not None, text
    counts = eval(stored.group(1))  # a dict literal of str -> int
    assert set(counts) == set(sites) and all(n > 0 for n in counts.values()), counts
    assert "refused a write" not in text
    assert fleet.lrange(SERVICES) == []


WORKER = REPO / "examples" / "python" / "worker.py"


def worker_env(**variables: str) -> dict[str, str]:
    """The test's environment without any member variable, plus ``variables``."""
    env = {k: v for k, v in os.environ.items() if k not in dm.environment_variables() and k != "SERVICES_KEY"}
    env.update(variables)
    return env


def run_worker(args: list[str], env: dict[str, str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(WORKER), *args], env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout, preexec_fn=_die_with_parent)


def last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def test_the_worker_takes_its_settings_from_the_member_variables(fleet: Fleet) -> None:
    fleet.set_units(["u1", "u2", "u3"])
    fleet.start_daemon()
    port = free_port()
    me = f"127.0.0.1:{port}"
    # No flag but --events: where it listens, its Redis, its list and its
    # timings all come from the variables.
    env = worker_env(REDIS_URL=fleet.redis.url, MEMBER_LISTEN=me, MEMBER_SERVICES_KEY=SERVICES,
                     DISTRIBUTION_NAMESPACE=fleet.table, MEMBER_DEADLINE="2s", MEMBER_POLL_INTERVAL="200ms",
                     MEMBER_WEIGHT="3", MEMBER_DRAIN_TIMEOUT="1s")
    proc = subprocess.Popen([sys.executable, str(WORKER), "--events"], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_die_with_parent)
    try:
        wait_for("the worker to own every unit", lambda: sorted(fleet.table_rows().get(me, [])) == ["u1", "u2", "u3"],
                 20)
        report = fleet.hget(fleet.members_key(), me)
        # "applied draining deadline_ms weight ...": MEMBER_DEADLINE and MEMBER_WEIGHT.
        assert report is not None and report.split()[2:4] == ["2000", "3"], report
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
        assert proc.returncode == 0, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
    assert fleet.lrange(SERVICES) == []


def test_the_worker_exits_1_saying_why_when_redis_is_unreachable() -> None:
    closed = free_port()  # nothing listens there
    started = time.monotonic()
    done = run_worker(["--ready-timeout", "1"], worker_env(REDIS_URL=f"redis://127.0.0.1:{closed}"))
    assert done.returncode == 1, done.stderr
    line = last_line(done.stderr)
    assert line.startswith(f"worker: not ready within 1 s: cannot use Redis at redis://127.0.0.1:{closed}: "), line
    assert time.monotonic() - started < 15


def test_the_worker_exits_1_saying_why_when_cluster_mode_meets_a_plain_node(fleet: Fleet) -> None:
    # The member stops by itself at once: no wait for the ready timeout.
    done = run_worker(["--ready-timeout", "20"], worker_env(REDIS_URL=fleet.redis.url, REDIS_CLUSTER="true"),
                      timeout=15)
    assert done.returncode == 1, done.stderr
    line = last_line(done.stderr)
    assert line.startswith("worker: the member stopped before it was ready: cannot use the Redis Cluster"), line
    assert "Cluster mode is not enabled" in line, line
    assert fleet.lrange(SERVICES) == []


def test_the_worker_names_a_bad_flag_or_variable_and_exits_2() -> None:
    done = run_worker(["--deadline-ms", "1000", "--poll-ms", "200", "--work-ms", "500"], worker_env())
    assert done.returncode == 2 and last_line(done.stderr).startswith("worker: --work-ms 500: "), done.stderr
    done = run_worker(["--listen", "nowhere"], worker_env())
    assert done.returncode == 2 and last_line(done.stderr).startswith("worker: --listen 'nowhere': "), done.stderr
    done = run_worker([], worker_env(MEMBER_DEADLINE="10"))
    assert done.returncode == 2 and "MEMBER_DEADLINE" in last_line(done.stderr), done.stderr
