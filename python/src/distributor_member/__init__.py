"""distributor-member: Python workers for distributor.

A :class:`Member` registers in a services list, answers the distributor's
pings, follows its row of the matching table with the handoff protocol
(``docs/protocol.md``), and hands each unit to the application with a
:class:`Hold` to check before every side effect. See README.md.
"""

from ._durations import parse_duration
from ._ownership import Reason
from ._redact import redact_url
from .lookup import Lookup, LookupReadError, Placement, PlacementKind, SyncLookup
from .member import (
    Acquired,
    AcquiredCallback,
    Drained,
    Event,
    EventStream,
    Fenced,
    Hold,
    HoldLost,
    Left,
    Member,
    MemberError,
    Ready,
    ReadyTimeout,
    Released,
    RevokedCallback,
    Revoking,
    Unfenced,
    monotonic,
)
from .options import (
    ENVIRONMENT,
    ENVIRONMENT_EXTRA,
    MAX_DEADLINE,
    MAX_WEIGHT,
    MemberOptions,
    OptionsError,
    environment_variables,
)
from .signals import run_until_signal
from .sync import SyncMember

__version__ = "0.1.0"

__all__ = [
    "Acquired",
    "AcquiredCallback",
    "Drained",
    "ENVIRONMENT",
    "ENVIRONMENT_EXTRA",
    "Event",
    "EventStream",
    "Fenced",
    "Hold",
    "HoldLost",
    "Left",
    "Lookup",
    "LookupReadError",
    "MAX_DEADLINE",
    "MAX_WEIGHT",
    "Member",
    "Placement",
    "PlacementKind",
    "MemberError",
    "MemberOptions",
    "OptionsError",
    "Ready",
    "ReadyTimeout",
    "Reason",
    "Released",
    "RevokedCallback",
    "Revoking",
    "SyncLookup",
    "SyncMember",
    "Unfenced",
    "environment_variables",
    "monotonic",
    "parse_duration",
    "redact_url",
    "run_until_signal",
]
