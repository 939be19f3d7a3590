"""What a holder's ping tells the member (protocol version 2), and what the
member states when the holder recovers from handoff state Redis lost (a
port of the daemon's ``core::handoff::recovery``).

Redis loses writes in normal operation (a failover to a replica that
lagged, a restart without persistence, an operator's edit). A holder that
may have lost state recovers: every ping names the recovery (its tag), and
each member writes what it works on within its hold, with each unit's
fencing token, and the generation it processed, in ``{T}:held``; from then
on it starts nothing from the rows it processed before, only from a later
generation the holder writes.

- :class:`PingView`: ``<epoch> <generation> <redis run id|-> <recovery|->``,
  in the gRPC metadata ``distributor-holder`` of a ``Ping`` call, or the
  ``holder`` field (2) of a ``Beat`` (a beat carries it only when it changed
  since the last beat of its stream; empty means "as before"). Older
  holders, and the Go daemon, send none.
- :class:`HeldReport`: ``<tag> <processed> <unit>=<token>,...`` (units may
  hold spaces and ``=``, never ``,``: each pair splits at its last ``=``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: The gRPC metadata key of a ``Ping`` call that carries the holder's view.
METADATA = "distributor-holder"
#: The largest counter stored (2^53 - 1: Lua's numbers hold it exactly).
MAX_COUNT = (1 << 53) - 1
#: The most units one statement may name (a larger one is refused).
MAX_HELD_UNITS = 10_000_000
_HEX = frozenset("0123456789abcdefABCDEF")


def parse_count(s: str) -> int | None:
    """A stored counter: 1 to 16 ASCII digits (leading zeros allowed), at
    most :data:`MAX_COUNT`; ``None`` for anything else."""
    if not s or len(s) > 16 or not (s.isascii() and s.isdigit()):
        return None
    n = int(s)
    return n if n <= MAX_COUNT else None


def parse_run_id(s: str) -> str | None:
    """A Redis run id: exactly 40 hex digits (either case), lowercased."""
    if len(s) != 40 or not all(c in _HEX for c in s):
        return None
    return s.lower()


@dataclass(frozen=True, order=True)
class RecoveryTag:
    """Names one recovery: the holding's epoch and which recovery of it. ``<epoch>.<seq>``."""

    epoch: int
    seq: int

    def encode(self) -> str:
        return f"{self.epoch}.{self.seq}"

    def __str__(self) -> str:
        return self.encode()

    @staticmethod
    def decode(s: str) -> RecoveryTag | None:
        e, dot, n = s.partition(".")
        if not dot:
            return None
        epoch, seq = parse_count(e), parse_count(n)
        if epoch is None or seq is None or seq >= 1 << 32:
            return None
        return RecoveryTag(epoch, seq)


@dataclass(frozen=True)
class PingView:
    """What a holder's ping says of its holder."""

    #: The holder's fencing epoch: a ping of a lower epoch than one already
    #: seen refreshes no hold.
    epoch: int
    #: The generation of the table the holder knows Redis holds: a read of
    #: its server sent after this ping must show at least this one to count.
    generation: int
    #: The run id of the Redis server the holder writes on (``None``: not
    #: known): reads of another server extend no hold.
    server: str | None = None
    #: The recovery the holder runs, if any: the member states what it holds once per tag.
    recovery: RecoveryTag | None = None

    def encode(self) -> str:
        server = self.server if self.server is not None else "-"
        recovery = self.recovery.encode() if self.recovery is not None else "-"
        return f"{self.epoch} {self.generation} {server} {recovery}"

    @staticmethod
    def decode(s: str) -> PingView | None:
        """Parses :meth:`encode`'s form; fields after the fourth are ignored
        (for later versions). ``None`` for anything else: the ping then
        counts as one from a holder that sends no view."""
        parts = s.split(" ")
        if len(parts) < 4:
            return None
        epoch, generation = parse_count(parts[0]), parse_count(parts[1])
        if epoch is None or generation is None:
            return None
        server: str | None = None
        if parts[2] != "-":
            server = parse_run_id(parts[2])
            if server is None:
                return None
        recovery: RecoveryTag | None = None
        if parts[3] != "-":
            recovery = RecoveryTag.decode(parts[3])
            if recovery is None:
                return None
        return PingView(epoch, generation, server, recovery)


def decode_view(raw: str | bytes | None) -> PingView | None:
    """A view as it arrives (metadata value, beat field): ``None`` when
    absent or malformed, never an error."""
    if raw is None:
        return None
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("ascii")
        except UnicodeDecodeError:
            return None
    return PingView.decode(raw)


@dataclass(frozen=True)
class HeldReport:
    """A member's statement for a recovery (``{T}:held``, field: the member):
    the units it works on within its hold, each with its fencing token, and
    the generation it processed last."""

    tag: RecoveryTag
    processed: int
    units: dict[str, int] = field(default_factory=dict)

    def encode(self) -> str:
        pairs = ",".join(f"{u}={t}" for u, t in sorted(self.units.items()))
        return f"{self.tag.encode()} {self.processed} {pairs}"

    @staticmethod
    def decode(s: str) -> HeldReport | None:
        """Parses a stored statement; ``None`` for anything malformed."""
        tag_text, sep, rest = s.partition(" ")
        if not sep:
            return None
        tag = RecoveryTag.decode(tag_text)
        if tag is None:
            return None
        processed_text, _, units_text = rest.partition(" ")
        processed = parse_count(processed_text)
        if processed is None:
            return None
        units: dict[str, int] = {}
        if units_text:
            for pair in units_text.split(","):
                u, eq, t = pair.rpartition("=")
                if not eq or not u or u in units:
                    return None
                token = parse_count(t)
                if token is None:
                    return None
                units[u] = token
                if len(units) > MAX_HELD_UNITS:
                    return None
        return HeldReport(tag, processed, units)
