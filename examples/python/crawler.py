#!/usr/bin/env python3
"""A crawler on distributor: the work units are sites, each crawled by exactly
one worker at a time; every page it stores is stamped with the unit's fencing
token, and the store refuses a write older than the newest it saw for that
site (a late write of a previous owner, paused past its hold, cannot land).

    # a local site server (simulated sites) and two crawlers:
    python examples/python/crawler.py --serve 127.0.0.1:8099 &
    redis-cli rpush sys-channels site-a site-b site-c site-d
    distributor -redis-url redis://127.0.0.1:6379 -http-addr off &
    REDIS_URL=redis://127.0.0.1:6379 python examples/python/crawler.py --sites http://127.0.0.1:8099 &
    REDIS_URL=redis://127.0.0.1:6379 python examples/python/crawler.py --sites http://127.0.0.1:8099 &

Configured like every member, by the environment (MemberOptions.from_env:
REDIS_URL, MEMBER_LISTEN, MEMBER_ADVERTISE, MEMBER_DEADLINE...). SIGTERM
drains (the sites move to the other crawlers), a second SIGTERM stops at once.
"""

from __future__ import annotations

import argparse
import asyncio
import http.server
import json
import logging
import os
import sys
import threading
import urllib.request

try:
    import distributor_member as dm
except ImportError:  # run from a checkout without the package installed
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python", "src"))
    import distributor_member as dm

log = logging.getLogger("crawler")


class Store:
    """The downstream store: per site, the highest fencing token seen; older writes are refused."""

    def __init__(self) -> None:
        self.tokens: dict[str, int] = {}
        self.pages: dict[str, list[str]] = {}

    def write(self, site: str, token: int, page: str) -> bool:
        if token < self.tokens.get(site, 0):
            log.warning("refused a write to %s with token %d (newest %d)", site, token, self.tokens[site])
            return False
        self.tokens[site] = token
        self.pages.setdefault(site, []).append(page)
        return True


class Crawler:
    def __init__(self, base: str, store: Store, every: float) -> None:
        self.base, self.store, self.every = base, store, every
        self.tasks: dict[str, asyncio.Task[None]] = {}

    async def acquired(self, hold: dm.Hold) -> None:
        log.info("crawling %s (token %d)", hold.unit, hold.token)
        self.tasks[hold.unit] = asyncio.create_task(self.crawl(hold))

    async def revoked(self, hold: dm.Hold, reason: dm.Reason) -> None:
        task = self.tasks.pop(hold.unit, None)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)  # stopped completely before returning
        log.info("stopped %s (%s)", hold.unit, reason)

    async def crawl(self, hold: dm.Hold) -> None:
        page = 0
        while True:
            try:
                hold.check()  # before the fetch
                url = f"{self.base}/{hold.unit}/{page}"
                body = await asyncio.to_thread(fetch, url)
                hold.check()  # and before the side effect, stamped with the token
                self.store.write(hold.unit, hold.token, body)
            except dm.HoldLost:
                return
            except OSError as e:
                log.warning("fetching %s failed: %s", hold.unit, e)
            page += 1
            await asyncio.sleep(self.every)


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=2) as r:
        body: bytes = r.read()
        return body.decode()


class Sites(http.server.BaseHTTPRequestHandler):
    """Simulated sites: every path answers a small JSON page."""

    def do_GET(self) -> None:
        body = json.dumps({"path": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def serve(addr: str) -> http.server.ThreadingHTTPServer:
    host, _, port = addr.rpartition(":")
    server = http.server.ThreadingHTTPServer((host, int(port)), Sites)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


async def main(args: argparse.Namespace) -> int:
    if args.serve:
        serve(args.serve)
        log.info("serving simulated sites on %s", args.serve)
        if not args.sites:
            await asyncio.Event().wait()
    store = Store()
    crawler = Crawler(args.sites, store, args.every)
    member = dm.Member(dm.MemberOptions.from_env(), acquired=crawler.acquired, revoked=crawler.revoked)
    await member.start()
    log.info("crawler %s started", member.id)
    how = await dm.run_until_signal(member)
    log.info("crawler %s left (%s); pages stored: %s", member.id, how.value,
             {site: len(pages) for site, pages in store.pages.items()})
    return 0


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--sites", help="base URL of the sites to crawl (a unit is a path under it)")
    p.add_argument("--serve", metavar="HOST:PORT", help="serve simulated sites on this address")
    p.add_argument("--every", type=float, default=0.5, help="seconds between two fetches of one site")
    arguments = p.parse_args()
    if not arguments.sites and not arguments.serve:
        p.error("give --sites, --serve, or both")
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        sys.exit(asyncio.run(main(arguments)))
    except dm.OptionsError as e:
        sys.exit(f"crawler: {e}")
