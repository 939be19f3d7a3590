"""A member's side of the handoff, as a pure state machine (a port of the
daemon's ``core::ownership``, following docs/protocol.md steps 3 to 6).

Every method takes the current monotonic instant; the work to do comes back
as steps (:class:`Revoke`, :class:`Acquire`, :class:`Overran`) for the
caller to run. Rules:

- a read counts only on the Redis connection the last written report names:
  one on another connection while a unit is owned or being stopped is not
  processed at all; it makes a report naming the new connection due;
- generations are processed in increasing order; a lower one is ignored
  (it refreshes no hold);
- the hold on the owned units ends ``deadline`` after the earlier of the
  send instant of the last processed read that showed them and the last ping
  answered OK; units are revoked ``margin`` before that (the time a stop may
  take), and an ended hold never comes back;
- a unit is acquired only from the row of the last processed generation
  read with its generation, after a ping, while that hold runs, never while
  it is being stopped, never while a fenced stop runs, never while draining
  or stopped, only once a report naming the read's connection is written and
  no acknowledgement is owed; its fencing token is that generation;
- a report is due at the first processed read; when ``draining``, the
  weight or the connection changes; when a processed generation took units
  from the row or follows generations not processed, once every
  revocation it implies is done; and while draining for every new
  generation. It claims ``applied = a`` only when every unit still being
  stopped was in a processed row of generation ``>= a``;
- contact is lost (fenced: pings answered UNAVAILABLE) ``margin`` before
  ``deadline`` after the earlier of the last read and the last ping.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class Reason(str, Enum):
    """Why a unit is taken from the member."""

    #: The table no longer has it in this member's row (it moves on, or left the list).
    MOVED = "moved"
    #: The same, while this member drains.
    DRAINING = "draining"
    #: Its hold ended (no read or no ping for the deadline, or a pause): stop at once.
    FENCED = "fenced"
    #: The member stops (shutdown, a drain that timed out).
    SHUTDOWN = "shutdown"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Connection:
    """A Redis connection: its client id, and the server's run id if known."""

    client: int
    server: str | None = None


@dataclass(frozen=True)
class Report:
    applied: int
    draining: bool
    deadline_ms: int
    weight: int
    client: Connection | None

    def encode(self) -> str:
        s = f"{self.applied} {int(self.draining)} {self.deadline_ms} {self.weight}"
        if self.client is not None:
            s += f" {self.client.client}"
            if self.client.server is not None:
                s += f" {self.client.server}"
        return s


@dataclass(frozen=True)
class Tenure:
    unit: str
    token: int


@dataclass(frozen=True)
class Revoke:
    units: list[Tenure]
    reason: Reason
    #: The hold's end (monotonic), for a fenced revocation.
    ended: float | None = None


@dataclass(frozen=True)
class Acquire:
    units: list[Tenure]


@dataclass(frozen=True)
class Overran:
    units: list[Tenure]
    ended: float


Step = Revoke | Acquire | Overran


class Outcome(Enum):
    PROCESSED = "processed"
    STALE = "stale"
    OTHER_CONNECTION = "other_connection"


@dataclass
class _Processed:
    generation: int
    raw: str | None
    row: list[str]
    shown: float
    client: Connection | None
    numbered: bool


@dataclass
class _Stopping:
    token: int
    shown: float
    in_row: bool
    seen: int
    overran: bool
    fenced: bool


def decode_row(raw: str | None) -> list[str]:
    """A row's units, deduplicated, in order; ``""`` and ``None`` are none."""
    if not raw:
        return []
    seen: set[str] = set()
    out = []
    for u in raw.split(","):
        if u and u not in seen:
            seen.add(u)
            out.append(u)
    return out


@dataclass
class Ownership:
    deadline: float
    weight: int
    margin: float
    started: float
    processed: _Processed | None = None
    owned: dict[str, int] = field(default_factory=dict)
    stopping: dict[str, _Stopping] = field(default_factory=dict)
    last_ping: float | None = None
    last_read: float | None = None
    written: Report | None = None
    owed: set[int] = field(default_factory=set)
    missed: bool = False
    client: Connection | None = None
    draining: bool = False
    stopped: bool = False
    fenced: bool = False
    revision: int = 0
    steps: list[Step] = field(default_factory=list)

    # -- inputs ---------------------------------------------------------

    def read(self, now: float, sent: float, generation: int | None, row: str | None,
             client: Connection | None) -> Outcome:
        self._expire(now)
        self.client = client
        working = bool(self.owned) or bool(self.stopping)
        named = self.written.client if self.written is not None else None
        if working and (self.written is None or named != client):
            self._update_contact(now)
            return Outcome.OTHER_CONNECTION
        self.last_read = sent if self.last_read is None else max(self.last_read, sent)
        prev = self.processed.generation if self.processed is not None else None
        numbered = generation is not None
        g = generation if generation is not None else (prev if prev is not None else 0)
        if prev is not None and g < prev:
            self._update_contact(now)
            self.missed = True
            return Outcome.STALE
        p = self.processed
        if p is not None and p.generation == g and p.raw == row:
            p.shown = max(p.shown, sent)
            p.client = client
            p.numbered = p.numbered or numbered
            for s in self.stopping.values():
                if s.in_row:
                    s.shown = max(s.shown, sent)
            self._update_contact(now)
            self._try_acquire(now)
            return Outcome.PROCESSED
        units = decode_row(row)
        in_row = set(units)
        took = p is not None and any(u not in in_row for u in p.row)
        skipped = numbered and (self.missed or prev is None or g > prev + 1)
        if numbered:
            self.missed = False
        elif took:
            # Units taken at a generation not known: the next numbered read
            # acknowledges it (the holder waits for that generation's report).
            self.missed = True
        if (took or skipped) and (self.written is None or g > self.written.applied):
            self.owed.add(g)
        if not self.stopped:
            why = Reason.DRAINING if self.draining else Reason.MOVED
            seen = prev if prev is not None else g
            gone = [u for u in self.owned if u not in in_row]
            self._revoke(gone, why, seen, fenced=False, ended=None)
        for u, s in self.stopping.items():
            s.in_row = u in in_row
            if s.in_row:
                s.shown = max(s.shown, sent)
                s.seen = max(s.seen, g)
        self.processed = _Processed(g, row, units, sent, client, numbered)
        self.revision += 1
        self._update_contact(now)
        self._try_acquire(now)
        return Outcome.PROCESSED

    def ping(self, now: float) -> bool:
        """A ping received at ``now``: whether to answer it OK. Only a ping
        answered OK counts (docs/protocol.md: count only pings you answered OK)."""
        self._expire(now)
        read = self.last_read if self.last_read is not None else self.started
        if self.stopped or now >= min(read, now) + self.deadline - self.margin:
            self._update_contact(now)
            return False
        self.last_ping = now if self.last_ping is None else max(self.last_ping, now)
        self._update_contact(now)
        self._try_acquire(now)
        return not self.fenced

    def tick(self, now: float) -> None:
        self._expire(now)
        self._update_contact(now)

    def revoked(self, now: float, units: list[str]) -> list[tuple[Tenure, float]]:
        """The application stopped ``units``; returns those stopped after their hold ended, and how late."""
        late = []
        for u in units:
            s = self.stopping.pop(u, None)
            if s is not None:
                end = self.end_of(s.shown)
                if now > end and not s.fenced:
                    late.append((Tenure(u, s.token), now - end))
        self._expire(now)
        self._update_contact(now)
        self._try_acquire(now)
        return late

    def report_due(self) -> Report | None:
        p = self.processed
        if p is None:
            return None
        applied = min([p.generation] + [s.seen for s in self.stopping.values()])

        def report(a: int) -> Report:
            return Report(a, self.draining, round(self.deadline * 1000), self.weight, self.client)

        w = self.written
        if w is None:
            return report(applied)
        acknowledge = any(g <= applied for g in self.owed) or (self.draining and applied > w.applied)
        if acknowledge:
            return report(max(applied, w.applied))
        if w.draining != self.draining or w.client != self.client or w.weight != self.weight:
            return report(w.applied)
        return None

    def reported(self, now: float, report: Report) -> None:
        self._expire(now)
        if self.written is None or self.written.applied <= report.applied:
            self.written = report
            self.owed = {g for g in self.owed if g > report.applied}
        self._update_contact(now)
        self._try_acquire(now)

    def drain(self, now: float) -> None:
        self._expire(now)
        self.draining = True
        self._update_contact(now)

    def stop(self, now: float) -> None:
        self._expire(now)
        if not self.stopped:
            self.stopped = True
            self._revoke(list(self.owned), Reason.SHUTDOWN, self.generation, fenced=False, ended=None)
        self._update_contact(now)

    def set_weight(self, weight: int) -> None:
        self.weight = weight

    def take_steps(self) -> list[Step]:
        steps, self.steps = self.steps, []
        return steps

    # -- views ----------------------------------------------------------

    @property
    def generation(self) -> int:
        return self.processed.generation if self.processed is not None else 0

    def in_table(self) -> bool:
        return self.processed is not None and self.processed.raw is not None

    def next_wake(self) -> float | None:
        times = []
        owned = self.owned_lapse()
        if owned is not None:
            times.append(owned)
        times.extend(self.end_of(s.shown) for s in self.stopping.values() if not s.overran)
        if not self.fenced:
            times.append(self.contact_end() - self.margin)
        return min(times) if times else None

    def holds(self, unit: str, now: float) -> int | None:
        token = self.owned.get(unit)
        if token is None or self.stopped:
            return None
        lapse = self.owned_lapse()
        return token if lapse is not None and now < lapse else None

    def owned_units(self) -> list[Tenure]:
        p = self.processed
        if p is None:
            return []
        return [Tenure(u, self.owned[u]) for u in p.row if u in self.owned]

    def drained(self) -> bool:
        p = self.processed
        w = self.written
        return (
            p is not None
            and self.draining
            and not self.stopped
            and w is not None
            and w.applied == p.generation
            and w.draining
            and not p.row
            and not self.owned
            and not self.stopping
        )

    def settled(self, now: float) -> bool:
        return not self.owned and all(s.overran or self.end_of(s.shown) <= now for s in self.stopping.values())

    def owned_end(self) -> float | None:
        """When the hold of the owned units ends (the holder's bound)."""
        if not self.owned or self.processed is None:
            return None
        return self.end_of(self.processed.shown)

    def owned_lapse(self) -> float | None:
        """When the owned units are revoked: their hold's end minus the margin."""
        end = self.owned_end()
        return None if end is None else end - self.margin

    def end_of(self, shown: float) -> float:
        if self.last_ping is None:
            return self.started
        return min(shown, self.last_ping) + self.deadline

    def contact_end(self) -> float:
        read = self.last_read if self.last_read is not None else self.started
        ping = self.last_ping if self.last_ping is not None else self.started
        return min(read, ping) + self.deadline

    # -- internals --------------------------------------------------------

    def _update_contact(self, now: float) -> None:
        fenced = self.stopped or now >= self.contact_end() - self.margin
        if fenced != self.fenced:
            self.fenced = fenced
            self.revision += 1

    def _expire(self, now: float) -> None:
        lapse = self.owned_lapse()
        if lapse is not None and lapse <= now:
            end = self.owned_end()
            self._revoke(list(self.owned), Reason.FENCED, self.generation, fenced=True, ended=end)
        overran: dict[float, list[Tenure]] = {}
        for u, s in self.stopping.items():
            if s.overran:
                continue
            end = self.end_of(s.shown)
            if end <= now:
                s.overran = True
                overran.setdefault(end, []).append(Tenure(u, s.token))
        for ended in sorted(overran):
            self.steps.append(Overran(overran[ended], ended))

    def _revoke(self, units: list[str], why: Reason, seen: int, fenced: bool, ended: float | None) -> None:
        if not units:
            return
        shown = self.processed.shown if self.processed is not None else self.started
        tenures = []
        for u in units:
            token = self.owned.pop(u, None)
            if token is None:
                continue
            tenures.append(Tenure(u, token))
            self.stopping[u] = _Stopping(token, shown, False, seen, fenced, fenced)
        if tenures:
            self.revision += 1
            self.steps.append(Revoke(tenures, why, ended))

    def _try_acquire(self, now: float) -> None:
        if self.draining or self.stopped or self.fenced:
            return
        p = self.processed
        if p is None:
            return
        if (
            len(self.owned) == len(p.row)
            or not p.numbered
            or self.written is None
            or self.written.client != p.client
            or self.owed
            or self.last_ping is None
            or self.end_of(p.shown) - self.margin <= now
            or any(s.fenced for s in self.stopping.values())
        ):
            return
        new = [Tenure(u, p.generation) for u in p.row if u not in self.owned and u not in self.stopping]
        if not new:
            return
        for t in new:
            self.owned[t.unit] = t.token
        self.revision += 1
        self.steps.append(Acquire(new))
