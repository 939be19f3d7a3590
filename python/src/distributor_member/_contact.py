"""Contact with the holder: the ping server the member binds, what a ping
admits, and the watchdog that ends holds on time.

A ping is answered OK only when the ownership state admits it (neither
fenced nor stopping), UNAVAILABLE otherwise; only a ping answered OK counts
as contact. What a ping says of its holder goes to the ownership state, and
the change is carried out at once. The health check says SERVING only while
the member is in contact and following or draining. The watchdog ends each
hold at its end (minus the fence margin) even while a Redis call hangs,
since it waits on the clock, not on the follower.
"""

from __future__ import annotations

import grpc

from ._calls import HandlerCalls
from ._clock import monotonic, wait_event
from ._errors import MemberError
from ._grpc import PingService, server_credentials
from ._recovery import PingView
from ._redact import check_member_addr
from ._state import Phase
from .options import OptionsError, split_host_port


class Contact(HandlerCalls):
    """The ping server's side of the member, and the watchdog."""

    def _bind(self) -> grpc.aio.Server:
        """Makes the ping server and binds its port (not started yet), and
        sets the port and the member id: the advertised address, else the
        listen host with the bound port. Raises :class:`MemberError` if the
        address cannot be bound, :class:`OptionsError` if the id is not one
        others can dial."""
        o = self.options
        # so_reuseport off: a second process must not share this address.
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        service = PingService(self._admit, self._serving)
        server.add_generic_rpc_handlers(service.handlers())
        try:
            if o.tls_cert and o.tls_key:
                port = server.add_secure_port(o.listen, server_credentials(o.tls_cert, o.tls_key, o.tls_ca))
            else:
                port = server.add_insecure_port(o.listen)
        except RuntimeError as e:
            raise MemberError(f"cannot listen on {o.listen}: {e}") from None
        if not port:
            raise MemberError(f"cannot listen on {o.listen}")
        host, _ = split_host_port(o.listen)
        self._port = port
        if o.advertise:
            self._id = o.advertise
        else:
            self._id = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        why = check_member_addr(self._id)
        if why:
            raise OptionsError("advertise", self._id, why)
        return server

    def _serving(self) -> bool:
        with self._lock:
            fenced = self._own.fenced
        return not fenced and self._phase in (Phase.FOLLOWING, Phase.DRAINING)

    def _admit(self, view: PingView | None = None) -> str | None:
        now = monotonic()
        with self._lock:
            ok = self._own.ping(now, view)
        self._changed()
        if ok:
            return None
        return "fenced: no successful read of the matching table or no ping within the deadline, or stopping"

    async def _watchdog(self) -> None:
        """Ends holds at their end, whatever else waits (a hanging call included)."""
        assert self._watch_wake is not None
        while True:
            with self._lock:
                wake = self._own.next_wake()
            timeout = 1.0 if wake is None else min(1.0, max(0.0, wake - monotonic()))
            await wait_event(self._watch_wake, timeout)
            self._watch_wake.clear()
            with self._lock:
                self._own.tick(monotonic())
            self._changed(watchdog=True)
