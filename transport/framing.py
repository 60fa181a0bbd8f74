"""Sans-I/O frame decoder: bytes in, Frames out (in the manner of h11).

Nothing here touches a socket or a clock, so it is tested by feeding bytes, one at a time
if need be. A length over `frame_bytes_max` is refused from the prefix alone, before its
body is buffered; once a ProtocolError is raised the stream is out of step for good and the
decoder refuses everything after it.
"""

from __future__ import annotations

from collections.abc import Iterator

from transport.codec import FRAME_BYTES_MAX, LENGTH_PREFIX, Frame, decode_body
from transport.errors import ProtocolError

_PREFIX_BYTES = LENGTH_PREFIX.size
# What to ask the stream for: enough to take a large frame in few reads, not so much that
# every small read allocates megabytes.
RECEIVE_BYTES_MIN = 64 * 1024
RECEIVE_BYTES_MAX = 1024 * 1024


class FrameDecoder:
    def __init__(self, frame_bytes_max: int = FRAME_BYTES_MAX) -> None:
        self.frame_bytes_max = frame_bytes_max
        self._buffer = bytearray()
        self._failed: ProtocolError | None = None

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        self._raise_if_failed()
        self._buffer += data

    def next_frame(self) -> Frame | None:
        """The next whole frame, or None until more bytes are fed."""
        self._raise_if_failed()
        buffer = self._buffer
        if len(buffer) < _PREFIX_BYTES:
            return None
        (body_bytes,) = LENGTH_PREFIX.unpack_from(buffer)
        if body_bytes > self.frame_bytes_max:
            raise self._fail(
                f"frame of {body_bytes} bytes exceeds frame_bytes_max {self.frame_bytes_max}"
            )
        end = _PREFIX_BYTES + body_bytes
        if len(buffer) < end:
            return None
        view = memoryview(buffer)
        body = view[_PREFIX_BYTES:end]
        try:
            frame = decode_body(body)
        except ProtocolError as exc:
            raise self._fail(str(exc)) from None
        finally:
            # The bytearray cannot shrink while a view of it is alive.
            body.release()
            view.release()
        # Deleting from the front of a bytearray moves a start pointer, not the rest.
        del buffer[:end]
        return frame

    def __iter__(self) -> Iterator[Frame]:
        """Every whole frame buffered so far."""
        while (frame := self.next_frame()) is not None:
            yield frame

    @property
    def buffered_bytes(self) -> int:
        """Bytes of an incomplete frame held back; non-zero at end of stream means a cut frame."""
        return len(self._buffer)

    @property
    def receive_bytes_hint(self) -> int:
        """How many bytes to ask the stream for next: the rest of the current frame, bounded."""
        missing = RECEIVE_BYTES_MIN
        if len(self._buffer) >= _PREFIX_BYTES:
            (body_bytes,) = LENGTH_PREFIX.unpack_from(self._buffer)
            missing = _PREFIX_BYTES + body_bytes - len(self._buffer)
        return min(max(missing, RECEIVE_BYTES_MIN), RECEIVE_BYTES_MAX)

    def _fail(self, reason: str) -> ProtocolError:
        self._failed = ProtocolError(reason)
        return self._failed

    def _raise_if_failed(self) -> None:
        if self._failed is not None:
            raise ProtocolError(f"decoder already failed: {self._failed}")


def decode_frame(data: bytes, frame_bytes_max: int = FRAME_BYTES_MAX) -> Frame:
    """Decode bytes that must hold exactly one whole frame (the in-memory network's path)."""
    decoder = FrameDecoder(frame_bytes_max)
    decoder.feed(data)
    frame = decoder.next_frame()
    if frame is None or decoder.buffered_bytes:
        raise ProtocolError("not exactly one frame")
    return frame
