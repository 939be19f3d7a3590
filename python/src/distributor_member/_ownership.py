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
  ``deadline`` after the earlier of the last read and the last ping;
- a stop that failed (the application's revocation callback raised or was
  cancelled: its work may still run) counts as done only once the unit's
  hold has ended: ``deadline`` after the earlier of the last read that
  showed the unit before it failed and the last ping (reads no longer
  extend it); the report that acknowledges its revocation waits until then
  (:meth:`Ownership.stop_failed`, then a :class:`GaveUp` step), and the
  holder, without that acknowledgement, waits out the deadline before it
  grants the unit.

What a holder's ping says of its holder (protocol version 2,
:class:`PingView`; older holders say nothing, and then none of these
rules applies):

- a ping of a lower epoch than the highest seen counts as contact but
  refreshes no hold; a ping naming another Redis server than the previous
  view did ends what reads of the old server extend: their holds end
  ``deadline`` after the last ping that named it;
- a read of another server than the last view names (``OTHER_SERVER``) is
  not processed, not even as contact: the first one since a read of the
  holder's server makes the last report due again, freezes, and the member
  registers again and finds the master again;
- a numbered read sent after a ping whose view names a higher generation
  (``BEHIND``), a lower generation than the last processed (``STALE``), or
  a missing generation after a numbered one: Redis lost writes; the last
  report is due again (once per episode), the member registers again at
  once, and it freezes;
- while frozen nothing is acquired; it thaws once a numbered generation
  above the one processed at the freeze was processed and the last view (if
  any) names no recovery and a generation at most the processed one;
  acquisitions also need the processed generation at least the last view's;
- a view naming a recovery not answered yet freezes, and makes a statement
  due (:meth:`Ownership.held_due`): every unit worked on within its hold,
  with its token, and the processed generation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from ._recovery import HeldReport, PingView, RecoveryTag


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


@dataclass(frozen=True)
class GaveUp:
    """Failed stops (:meth:`Ownership.stop_failed`) that count as done now:
    the units' hold ended at ``ended``."""

    units: list[Tenure]
    ended: float


Step = Revoke | Acquire | Overran | GaveUp


class Outcome(Enum):
    #: Processed (a new generation, or the same one again).
    PROCESSED = "processed"
    #: A lower generation than the last processed: ignored (Redis lost writes).
    STALE = "stale"
    #: On another connection than the last written report names, while units
    #: are owned or stopping: not processed; a report naming it is due.
    OTHER_CONNECTION = "other_connection"
    #: Of another Redis server than the one the holder's last view names: not
    #: processed, not even as contact. Find the master again.
    OTHER_SERVER = "other_server"
    #: A numbered read sent after a view naming a higher generation of the
    #: holder's server: that server lost writes since. Ignored like a stale read.
    BEHIND = "behind"


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
    #: The application's stop failed: done once the hold ends, which reads no longer extend.
    failed: bool = False


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
    #: The last ping answered OK that may refresh a hold: of the highest
    #: epoch seen, or from a holder that sends no view.
    last_ping: float | None = None
    #: The last ping answered OK, of any holder: contact.
    contact_ping: float | None = None
    #: What the last ping of the highest epoch said of its holder, and when
    #: it came (``None`` before the first, and from holders that send none).
    pinged: tuple[PingView, float] | None = None
    #: The highest holder epoch a view named.
    max_epoch: int = 0
    last_read: float | None = None
    written: Report | None = None
    owed: set[int] = field(default_factory=set)
    missed: bool = False
    client: Connection | None = None
    #: The recovery whose statement was written, and the one being written.
    held_done: RecoveryTag | None = None
    held_building: RecoveryTag | None = None
    #: Writes may have been lost, or a holder recovers: nothing more starts
    #: from the rows processed so far. The generation processed at the freeze.
    frozen: int | None = None
    #: The report written last is due again (Redis lost writes, or reads
    #: went to another server than the holder's), with a registration.
    reassert: bool = False
    #: The last read was of another server than the holder's view names.
    off_server: bool = False
    draining: bool = False
    stopped: bool = False
    fenced: bool = False
    revision: int = 0
    steps: list[Step] = field(default_factory=list)

    # -- inputs ---------------------------------------------------------

    def read(self, now: float, sent: float, generation: int | None, row: str | None,
             client: Connection | None) -> Outcome:
        self._expire(now)
        holder = self.pinged[0].server if self.pinged is not None else None
        if holder is not None and client is not None and client.server is not None and \
                client.server.lower() != holder:
            # An old master still answering shows rows the holder no longer
            # writes: nothing more starts from the rows processed, and the
            # last report is written again where this member reads.
            if not self.off_server:
                self.off_server = True
                self.reassert = True
                self._freeze()
            self.client = client
            self._update_contact(now)
            return Outcome.OTHER_SERVER
        self.off_server = False
        self.client = client
        working = bool(self.owned) or bool(self.stopping)
        named = self.written.client if self.written is not None else None
        if working and (self.written is None or named != client):
            self._update_contact(now)
            return Outcome.OTHER_CONNECTION
        self.last_read = sent if self.last_read is None else max(self.last_read, sent)
        prev = self.processed.generation if self.processed is not None else None
        numbered = generation is not None
        if not numbered and self.processed is not None and self.processed.numbered:
            # The generation is gone: Redis lost its data (or an edit removed it).
            self._lost_writes()
        g = generation if generation is not None else (prev if prev is not None else 0)
        if prev is not None and g < prev:
            self._lost_writes()
            self._update_contact(now)
            return Outcome.STALE
        if numbered and self.pinged is not None and sent >= self.pinged[1] and g < self.pinged[0].generation:
            # Sent after a view naming a higher generation of this server:
            # the server lost writes since the holder saw them.
            self._lost_writes()
            self._update_contact(now)
            return Outcome.BEHIND
        p = self.processed
        if p is not None and p.generation == g and p.raw == row:
            p.shown = max(p.shown, sent)
            p.client = client
            p.numbered = p.numbered or numbered
            for s in self.stopping.values():
                if s.in_row and not s.failed:
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
                if not s.failed:
                    s.shown = max(s.shown, sent)
                s.seen = max(s.seen, g)
        self.processed = _Processed(g, row, units, sent, client, numbered)
        self.revision += 1
        self._thaw()
        self._update_contact(now)
        self._try_acquire(now)
        return Outcome.PROCESSED

    def ping(self, now: float, view: PingView | None = None) -> bool:
        """A ping received at ``now``, with what it says of its holder
        (``None`` from a holder that says nothing): whether to answer it OK.
        Only a ping answered OK counts as contact or refreshes a hold
        (docs/protocol.md: count only pings you answered OK); its view is
        taken either way (it only ever restricts).

        A ping of a lower epoch than one already seen counts as contact but
        refreshes no hold. A view that names another Redis server than the
        previous one did ends what reads of the old server extend: their
        holds end ``deadline`` after the last ping that named it."""
        self._expire(now)
        refreshes = view is None or view.epoch >= self.max_epoch
        if refreshes and view is not None:
            before = self.pinged[0].server if self.pinged is not None else None
            if before is not None and view.server is not None and before != view.server \
                    and self.last_ping is not None:
                self._server_changed(self.last_ping)
            self.max_epoch = view.epoch
            self.pinged = (view, now)
            if view.recovery is not None and self.held_done != view.recovery:
                self._freeze()
        read = self.last_read if self.last_read is not None else self.started
        if self.stopped or now >= min(read, now) + self.deadline - self.margin:
            self._thaw()
            self._update_contact(now)
            return False
        self.contact_ping = now if self.contact_ping is None else max(self.contact_ping, now)
        if refreshes:
            self.last_ping = now if self.last_ping is None else max(self.last_ping, now)
        self._thaw()
        self._update_contact(now)
        self._try_acquire(now)
        return not self.fenced

    def held_due(self, now: float) -> HeldReport | None:
        """The statement the holder's recovery asks for (the last view names a
        recovery whose statement was neither written nor is being written),
        if due: every unit worked on within its hold (owned, or being stopped
        and not overrun), with its token, and the last processed generation.
        From now on nothing starts from the rows processed so far. Pass the
        outcome of its write to :meth:`held_written`."""
        tag = self.pinged[0].recovery if self.pinged is not None else None
        if tag is None or self.held_done == tag or self.held_building == tag:
            return None
        self._expire(now)
        units: dict[str, int] = {}
        end = self.owned_end()
        if end is not None and now < end and not self.stopped:
            units.update(self.owned)
        for u, s in self.stopping.items():
            if not s.overran and now < self.end_of(s.shown):
                units[u] = s.token
        self._freeze()
        self.held_building = tag
        return HeldReport(tag, self.generation, units)

    def held_written(self, tag: RecoveryTag, ok: bool) -> None:
        """The statement for ``tag`` was written (``ok``), or its write failed (it is due again)."""
        if self.held_building == tag:
            self.held_building = None
        if ok:
            self.held_done = tag

    def reassert_due(self) -> bool:
        """Whether the report written last is due again (Redis lost writes, or
        reads went to another server than the holder's): register again now."""
        return self.reassert

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

    def stop_failed(self, now: float, units: list[str]) -> float | None:
        """The application's stop of ``units`` (revoked earlier) failed: its
        work may still run. Each counts as stopped only once its hold has
        ended (at once if it has: a :class:`GaveUp` step says when), and the
        report that acknowledges its revocation waits until then; reads no
        longer extend that hold. Returns when the last of those holds ends
        (``None``: none of them is being stopped)."""
        last: float | None = None
        for u in units:
            s = self.stopping.get(u)
            if s is None or s.failed:
                continue
            s.failed = True
            end = self.end_of(s.shown)
            last = end if last is None else max(last, end)
        if last is not None:
            self.revision += 1
        self._expire(now)
        self._update_contact(now)
        self._try_acquire(now)
        return last

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
        if self.reassert or w.draining != self.draining or w.client != self.client or w.weight != self.weight:
            return report(w.applied)
        return None

    def reported(self, now: float, report: Report) -> None:
        self._expire(now)
        self.reassert = False
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
    def pinged_view(self) -> PingView | None:
        """What the last ping of the highest epoch said of its holder."""
        return self.pinged[0] if self.pinged is not None else None

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
        times.extend(self.end_of(s.shown) for s in self.stopping.values() if not s.overran or s.failed)
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
        ping = self.contact_ping if self.contact_ping is not None else self.started
        return min(read, ping) + self.deadline

    # -- internals --------------------------------------------------------

    def _server_changed(self, last: float) -> None:
        """The holder writes on another server than the previous view named:
        reads of that one refreshed the holds up to ``last`` (the last ping
        that named it) at most."""
        if self.processed is not None:
            self.processed.shown = min(self.processed.shown, last)
        for s in self.stopping.values():
            s.shown = min(s.shown, last)
        self.revision += 1

    def _lost_writes(self) -> None:
        """A read showed that Redis lost writes this member saw: the tables it
        missed are unknown (the next generation processed is reported), the
        last report is due again (once per episode, with a registration), and
        nothing more starts from the rows processed so far."""
        if not self.missed:
            self.reassert = True
        self.missed = True
        self._freeze()

    def _freeze(self) -> None:
        if self.frozen is None:
            self.frozen = self.generation

    def _thaw(self) -> None:
        """Units start again once a numbered generation above the one processed
        at the freeze was processed, and the last view (if any) names no
        recovery and a generation at most the processed one."""
        if self.frozen is None:
            return
        g = self.generation
        numbered = self.processed is not None and self.processed.numbered
        view = self.pinged_view
        pinged_ok = view is None or (view.recovery is None and view.generation <= g)
        if numbered and g > self.frozen and pinged_ok:
            self.frozen = None

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
        # A failed stop counts as done once its hold ended: no one else can
        # have had the unit before.
        gave_up: dict[float, list[Tenure]] = {}
        for u, s in list(self.stopping.items()):
            if s.failed:
                end = self.end_of(s.shown)
                if end <= now:
                    del self.stopping[u]
                    gave_up.setdefault(end, []).append(Tenure(u, s.token))
        if gave_up:
            self.revision += 1
        for ended in sorted(gave_up):
            self.steps.append(GaveUp(gave_up[ended], ended))
        overran: dict[float, list[Tenure]] = {}
        for u, s in self.stopping.items():
            if s.overran or s.failed:
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
        if self.draining or self.stopped or self.fenced or self.frozen is not None:
            return
        p = self.processed
        if p is None:
            return
        # A row older than the table the holder's last view said Redis holds
        # starts nothing (the holder may have planned past it: a recovery).
        if (
            len(self.owned) == len(p.row)
            or not p.numbered
            or (self.pinged is not None and p.generation < self.pinged[0].generation)
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
