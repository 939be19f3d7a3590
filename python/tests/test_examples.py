"""The examples (examples/python) run on the package."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

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
