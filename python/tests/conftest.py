"""Fixtures: a real redis-server and the real distributor daemon on free
loopback ports, always cleaned up; bounded waits on conditions, never fixed
sleeps for an outcome.

The daemon binary is ``DISTRIBUTOR_BIN`` (default: ``<repo>/target/debug/distributor``);
the repository is ``DISTRIBUTOR_REPO`` (default: the checkout these tests are in).
"""

from __future__ import annotations

import asyncio
import io
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis

#: The repository (the examples, the default daemon binary): DISTRIBUTOR_REPO,
#: else the checkout these tests are in.
REPO = Path(os.environ.get("DISTRIBUTOR_REPO") or Path(__file__).resolve().parents[2])
T = TypeVar("T")

SERVICES = "sys-robots-list"
UNITS_KEY = "sys-channels"


def _die_with_parent() -> None:
    """In a child: SIGKILL when the test process dies, even if it crashes
    (Linux), so that no redis-server or daemon outlives the suite."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


#: How long the tasks a test's coroutine left behind may take to end once cancelled.
TEARDOWN_BOUND = 10.0
#: The longest any one test may run, hard: then the whole run ends (exit 70)
#: with every thread's stack, rather than hang.
HARD_BOUND = 240.0


def run(coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
    """Runs a test's coroutine in an event loop of its own, bounded: after
    ``timeout`` seconds it is cancelled and the test fails (with where it
    waited). Then every task still running is cancelled; one that does not
    end within TEARDOWN_BOUND fails the test too (``asyncio.run`` would wait
    for it forever)."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        main = loop.create_task(coro)
        loop.run_until_complete(asyncio.wait({main}, timeout=timeout))
        if not main.done():
            where = io.StringIO()
            main.print_stack(file=where)
            main.cancel()
            loop.run_until_complete(asyncio.wait({main}, timeout=TEARDOWN_BOUND))
            raise AssertionError(f"the test's coroutine did not end within {timeout} s:\n{where.getvalue()}")
        result = main.result()
    except BaseException:
        _close_loop(loop)
        raise
    stuck = _close_loop(loop)
    if stuck:
        raise AssertionError(f"tasks still running {TEARDOWN_BOUND} s after they were cancelled: {stuck}")
    return result


def _close_loop(loop: asyncio.AbstractEventLoop) -> list[str]:
    """Cancels the loop's tasks, waits (bounded) for them, closes it; the names of those that did not end."""
    try:
        left = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for t in left:
            t.cancel()
        stuck: set[asyncio.Task[Any]] = set()
        if left:
            _, stuck = loop.run_until_complete(asyncio.wait(left, timeout=TEARDOWN_BOUND))
        for t in left:
            if t.done() and not t.cancelled():
                t.exception()  # retrieved: no "exception was never retrieved" noise
        loop.run_until_complete(loop.shutdown_asyncgens())
        executor = loop.create_task(loop.shutdown_default_executor())
        loop.run_until_complete(asyncio.wait({executor}, timeout=TEARDOWN_BOUND))
        return sorted(t.get_name() for t in stuck)
    finally:
        asyncio.set_event_loop(None)
        loop.close()


@pytest.fixture(autouse=True)
def _hard_bound(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every test, sync ones included, ends within HARD_BOUND or ends the run."""
    capman = request.config.pluginmanager.getplugin("capturemanager")

    def expired() -> None:
        me = threading.get_ident()
        stacks = "".join(f"\n--- thread {tid}\n" + "".join(traceback.format_stack(f, limit=30))
                         for tid, f in sys._current_frames().items() if tid != me)
        if capman is not None:
            capman.suspend_global_capture(in_=False)
        sys.stderr.write(f"\n{request.node.nodeid}: still running after {HARD_BOUND:.0f} s; ending the test run"
                         f"\n{stacks}\n")
        sys.stderr.flush()
        os._exit(70)

    timer = threading.Timer(HARD_BOUND, expired)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def wait_for(what: str, predicate: Callable[[], bool], timeout: float = 15.0, every: float = 0.02) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(every)


async def await_for(what: str, predicate: Callable[[], bool | Awaitable[bool]], timeout: float = 15.0,
                    every: float = 0.02) -> float:
    """Waits until ``predicate`` holds; returns how long that took."""
    started = time.monotonic()
    while True:
        got = predicate()
        if not isinstance(got, bool):
            got = await got
        if got:
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(every)


class RedisServer:
    def __init__(self, tmp: Path, extra: list[str] | None = None, port: int | None = None) -> None:
        self.port = port or free_port()
        self.dir = tmp
        self.extra = extra or []
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen(
            self._command(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent,
        )
        wait_for("redis-server to answer", self._answers, 10)

    def _command(self) -> list[str]:
        return ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                "--dir", str(self.dir), *self.extra]

    def restart_empty(self) -> None:
        """Kills the server and starts another on the same port, without the
        data (no persistence) and with a new run id: Redis lost every write.
        Safe while other threads run (gRPC's): no ``preexec_fn``, whose fork
        may crash then; ``setpriv --pdeathsig`` where there is one."""
        self.stop()
        wrap = ["setpriv", "--pdeathsig", "KILL"] if shutil.which("setpriv") else []
        self.proc = subprocess.Popen([*wrap, *self._command()], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for("redis-server to answer", self._answers, 10)

    def _answers(self) -> bool:
        try:
            return bool(self.client().ping())
        except redis.RedisError:
            return False

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, decode_responses=True, socket_timeout=5)

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None


class Daemon:
    """One distributor replica."""

    def __init__(self, redis_url: str, table: str, extra: list[str], log: Path) -> None:
        binary = os.environ.get("DISTRIBUTOR_BIN") or str(REPO / "target" / "debug" / "distributor")
        if not os.access(binary, os.X_OK):
            pytest.fail(f"no distributor binary at {binary}: build it (cargo build) or set DISTRIBUTOR_BIN")
        self.log = log
        self._out = open(log, "ab")
        self.proc = subprocess.Popen(
            [binary, "--redis-url", redis_url, "--services-namespaces", SERVICES,
             "--workunits-namespace", UNITS_KEY, "--distribution-namespace", table,
             "--poll-interval", "200ms", "--ping-timeout", "500ms", "--http-addr", "off",
             "--handoff-delay", "2s", "--census-interval", "1s", *extra],
            stdout=self._out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, "RUST_LOG": os.environ.get("DAEMON_LOG", "warn")}, preexec_fn=_die_with_parent,
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._out.close()


class Fleet:
    """A redis-server, the units list, and daemons on demand."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.redis = RedisServer(tmp)
        self.table = "sys-matching-table"
        self.daemons: list[Daemon] = []
        self.r = self.redis.client()

    def set_units(self, units: list[str]) -> None:
        p = self.r.pipeline()
        p.delete(UNITS_KEY)
        if units:
            p.rpush(UNITS_KEY, *units)
        p.execute()

    def start_daemon(self, *extra: str) -> Daemon:
        d = Daemon(self.redis.url, self.table, list(extra), self.tmp / f"daemon-{len(self.daemons)}.log")
        self.daemons.append(d)
        return d

    def hget(self, key: str, field: str) -> str | None:
        v = self.r.hget(key, field)
        return None if v is None else str(v)

    def hgetall(self, key: str) -> dict[str, str]:
        return {str(k): str(v) for k, v in self.r.hgetall(key).items()}

    def lrange(self, key: str) -> list[str]:
        return [str(v) for v in self.r.lrange(key, 0, -1)]

    def table_rows(self) -> dict[str, list[str]]:
        return {m: [u for u in v.split(",") if u] for m, v in self.hgetall(self.table).items()}

    def members_key(self) -> str:
        return "{" + self.table + "}:members"

    def close(self) -> None:
        for d in self.daemons:
            d.stop()
        self.redis.stop()


@pytest.fixture
def fleet(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Fleet]:
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is not installed")
    f = Fleet(tmp_path)
    try:
        yield f
    finally:
        f.close()
        failed = getattr(request.node, "rep_call", None)
        if failed is not None and failed.failed:
            for d in f.daemons:
                sys.stderr.write(f"--- {d.log} ---\n{d.log.read_text(errors='replace')[-4000:]}\n")


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    rep = outcome.get_result()  # type: ignore[attr-defined]
    setattr(item, "rep_" + rep.when, rep)


@pytest.fixture
def tmp_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as d:
        yield Path(d)


class Proc:
    """A member in a subprocess (tests/member_proc.py), printing its events as JSON lines."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).parent / "member_proc.py"), *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
            env={**os.environ, **env}, preexec_fn=_die_with_parent,
        )

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)

    def close(self) -> None:
        self.kill()
        for s in (self.proc.stdout, self.proc.stderr):
            if s is not None:
                s.close()


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    started: list[Proc] = []
    try:
        yield started
    finally:
        for p in started:
            p.close()
