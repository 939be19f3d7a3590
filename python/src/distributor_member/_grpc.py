"""The ping server (docs/protocol.md, step 1): ``/proto.GRPCPinger/Ping``,
``/proto.Liveness/Beats`` and ``grpc.health.v1.Health/Check``, without
generated code (``google.protobuf.Empty`` is zero bytes; a ``Beat`` and a
``HealthCheckResponse`` are encoded by hand).

A holder of protocol version 2 says what it knows (:class:`PingView`) in
the metadata ``distributor-holder`` of a ``Ping`` call, and in a beat's
``holder`` field (2) when it changed since the last beat of its stream (an
empty field: as before). A malformed view counts as none."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable

import grpc

from ._recovery import METADATA, PingView, decode_view

SERVING, NOT_SERVING = b"\x08\x01", b"\x08\x02"  # HealthCheckResponse.status
SERVICE_UNKNOWN = b"\x08\x03"
KNOWN_SERVICES = ("", "proto.GRPCPinger", "proto.Liveness")


def read_varint(data: bytes, i: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if i >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, i


def write_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def decode_beat(data: bytes) -> tuple[int, bytes]:
    """The ``seq`` (field 1) and ``holder`` (field 2, undecoded: empty when
    absent) of a ``proto.Beat``; other fields are skipped."""
    i, seq, holder = 0, 0, b""
    while i < len(data):
        key, i = read_varint(data, i)
        if key & 7 == 0:
            value, i = read_varint(data, i)
            if key >> 3 == 1:
                seq = value
        elif key & 7 == 2:
            n, i = read_varint(data, i)
            if key >> 3 == 2:
                holder = data[i : i + n]
            i += n
        elif key & 7 == 1:
            i += 8
        elif key & 7 == 5:
            i += 4
        else:
            raise ValueError("unexpected wire type in a beat")
    if i > len(data):
        raise ValueError("truncated beat")
    return seq, holder


def encode_beat(seq: int, holder: str = "") -> bytes:
    """A ``proto.Beat`` (a member answers with ``seq`` alone; ``holder`` for tests)."""
    out = b"\x08" + write_varint(seq) if seq else b""
    if holder:
        raw = holder.encode("utf-8")
        out += b"\x12" + write_varint(len(raw)) + raw
    return out


def metadata_view(metadata: Iterable[tuple[str, str | bytes]] | None) -> PingView | None:
    """The holder's view in a call's invocation metadata, if any and well formed."""
    if not metadata:
        return None
    try:
        for key, value in metadata:
            if key == METADATA:
                return decode_view(value)
    except (TypeError, ValueError):
        return None
    return None


def decode_health_service(data: bytes) -> str:
    """The ``service`` (field 1) of a ``HealthCheckRequest``."""
    i = 0
    service = ""
    while i < len(data):
        key, i = read_varint(data, i)
        if key & 7 == 2:
            n, i = read_varint(data, i)
            if key >> 3 == 1:
                service = data[i : i + n].decode("utf-8", "replace")
            i += n
        elif key & 7 == 0:
            _, i = read_varint(data, i)
        else:
            raise ValueError("unexpected wire type in a health check")
    return service


def _raw(b: bytes) -> bytes:
    return b


class PingService:
    """``admit(view)`` says whether to answer a ping carrying ``view`` (the
    holder's, ``None`` for none) OK (None) or why not; ``serving()`` whether
    the health service says SERVING."""

    def __init__(self, admit: Callable[[PingView | None], str | None], serving: Callable[[], bool]) -> None:
        self.admit = admit
        self.serving = serving

    async def ping(self, _request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        refused = self.admit(metadata_view(context.invocation_metadata()))
        if refused is not None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, refused)
        return b""

    async def beats(
        self, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext[bytes, bytes]
    ) -> AsyncIterator[bytes]:
        # A beat is a ping: answered with its seq, or the stream ends
        # UNAVAILABLE when a ping would be refused. The headers go at once:
        # the holder waits for them before its first beat.
        await context.send_initial_metadata(())
        # The holder's view as the last beat of this stream that carried one
        # said (a beat whose view did not change carries none).
        view: PingView | None = None
        async for beat in requests:
            try:
                seq, holder = decode_beat(beat)
            except ValueError:
                # Still a ping (answered as before): only its view is unknown.
                seq, holder = None, b""
            if holder:
                view = decode_view(holder)
            refused = self.admit(view)
            if refused is not None:
                await context.abort(grpc.StatusCode.UNAVAILABLE, refused)
            if seq is None:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "malformed beat")
            yield encode_beat(seq)

    async def health(self, request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        try:
            service = decode_health_service(request)
        except ValueError:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "malformed health check")
        if service not in KNOWN_SERVICES:
            await context.abort(grpc.StatusCode.NOT_FOUND, "unknown service")
        return SERVING if self.serving() else NOT_SERVING

    def handlers(self) -> tuple[grpc.GenericRpcHandler, ...]:
        unary = grpc.unary_unary_rpc_method_handler
        return (
            grpc.method_handlers_generic_handler(
                "proto.GRPCPinger",
                {"Ping": unary(self.ping, request_deserializer=_raw, response_serializer=_raw)},
            ),
            grpc.method_handlers_generic_handler(
                "proto.Liveness",
                {"Beats": grpc.stream_stream_rpc_method_handler(
                    self.beats, request_deserializer=_raw, response_serializer=_raw)},
            ),
            grpc.method_handlers_generic_handler(
                "grpc.health.v1.Health",
                {"Check": unary(self.health, request_deserializer=_raw, response_serializer=_raw)},
            ),
        )


def server_credentials(cert: str, key: str, ca: str | None) -> grpc.ServerCredentials:
    with open(cert, "rb") as f:
        cert_pem = f.read()
    with open(key, "rb") as f:
        key_pem = f.read()
    ca_pem = None
    if ca:
        with open(ca, "rb") as f:
            ca_pem = f.read()
    return grpc.ssl_server_credentials(
        [(key_pem, cert_pem)], root_certificates=ca_pem, require_client_auth=ca_pem is not None
    )
