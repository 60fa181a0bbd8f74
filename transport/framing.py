"""Sans-I/O frame decoder: bytes in, Frames out (in the manner of h11).

Nothing here touches a socket or a clock, so it is tested by feeding bytes, one at a time
if need be. A length over `frame_bytes_max` is refused from the prefix alone, before its
body is buffered; once a ProtocolError is raised the stream is out of step for good and the
decoder refuses everything after it.

Bytes arrive either by `feed(data)` or, to save a copy, straight into the decoder's buffer:
`get_buffer()` hands out room (the whole rest of a large frame when its length is known) and
`buffer_updated(n)` says how much was written, as asyncio's BufferedProtocol does. The
buffer is kept between frames, because allocating a fresh megabyte per frame costs more
(page faults) than decoding it.
"""

from __future__ import annotations

from collections.abc import Iterator

from quorumlog.transport.codec import FRAME_BYTES_MAX, LENGTH_PREFIX, Frame, decode_body
from quorumlog.transport.errors import ProtocolError

_PREFIX_BYTES = LENGTH_PREFIX.size
# Room offered per read when no large frame is under way: it starts small, so that idle
# connections stay small, and doubles while reads fill it.
READ_BYTES_MIN = 64 * 1024
READ_BYTES_MAX = 256 * 1024
# A buffer grown past this for a large frame is let go once that frame is decoded: idle
# connections must not each hold frame_bytes_max.
RETAINED_BYTES_MAX = 2 * 1024 * 1024


class FrameDecoder:
    def __init__(self, frame_bytes_max: int = FRAME_BYTES_MAX) -> None:
        self.frame_bytes_max = frame_bytes_max
        self._buffer = bytearray()  # grown on first use: a silent connection costs nothing
        self._start = 0  # first byte not yet decoded
        self._end = 0  # end of what was received
        self._read_bytes = READ_BYTES_MIN  # room offered per read, grown while reads fill it
        self._offered = 0
        self._offered_all = False
        self._failed: ProtocolError | None = None

    # --- input ------------------------------------------------------------------------

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        self._raise_if_failed()
        self._make_room(len(data))
        self._buffer[self._end : self._end + len(data)] = data
        self._end += len(data)

    def get_buffer(self) -> memoryview:
        """Room to receive into; release the view, then call `buffer_updated`."""
        self._raise_if_failed()
        missing = self._missing_bytes()
        if missing > self._read_bytes:
            # A large frame: room for exactly its rest, so that it lands in place and
            # nothing read after it has to be moved to make room for the next one.
            self._make_room(missing)
            self._offered, self._offered_all = missing, False
        else:
            # Small frames: one read takes many of them.
            self._make_room(self._read_bytes)
            self._offered, self._offered_all = self._read_bytes, True
        return memoryview(self._buffer)[self._end : self._end + self._offered]

    def buffer_updated(self, nbytes: int) -> None:
        assert 0 <= nbytes <= self._offered
        self._end += nbytes
        if self._offered_all and nbytes == self._offered and self._read_bytes < READ_BYTES_MAX:
            self._read_bytes *= 2  # the stream had more than we asked for: ask for more

    # --- output -----------------------------------------------------------------------

    def next_frame(self) -> Frame | None:
        """The next whole frame, or None until more bytes arrive."""
        if self._failed is not None:
            self._raise_if_failed()
        start = self._start
        if self._end - start < _PREFIX_BYTES:
            return None
        (body_bytes,) = LENGTH_PREFIX.unpack_from(self._buffer, start)
        if body_bytes > self.frame_bytes_max:
            raise self._fail(
                f"frame of {body_bytes} bytes exceeds frame_bytes_max {self.frame_bytes_max}"
            )
        end = start + _PREFIX_BYTES + body_bytes
        if self._end < end:
            return None
        body = memoryview(self._buffer)[start + _PREFIX_BYTES : end]
        try:
            frame = decode_body(body)
        except ProtocolError as exc:
            raise self._fail(str(exc)) from None
        finally:
            body.release()  # the bytearray cannot be resized while a view of it is alive
        self._start = end
        if end == self._end:
            self._start = self._end = 0
            if len(self._buffer) > RETAINED_BYTES_MAX:
                self._buffer = bytearray()
        return frame

    def __iter__(self) -> Iterator[Frame]:
        """Every whole frame buffered so far."""
        while (frame := self.next_frame()) is not None:
            yield frame

    @property
    def buffered_bytes(self) -> int:
        """Bytes of an incomplete frame held back; non-zero at end of stream means a cut frame."""
        return self._end - self._start

    # --- the buffer -------------------------------------------------------------------

    def _missing_bytes(self) -> int:
        """What the frame under way still lacks, 0 while its length is unknown or bad."""
        held = self._end - self._start
        if held < _PREFIX_BYTES:
            return 0
        (body_bytes,) = LENGTH_PREFIX.unpack_from(self._buffer, self._start)
        if body_bytes > self.frame_bytes_max:
            return 0  # next_frame will say so
        return max(0, _PREFIX_BYTES + body_bytes - held)

    def _make_room(self, nbytes: int) -> None:
        """At least `nbytes` free after `_end`, moving or growing the buffer if need be."""
        if len(self._buffer) - self._end >= nbytes:
            return
        held = self._end - self._start
        if held + nbytes <= len(self._buffer):
            # Slide the unfinished frame to the front (a copy, as the ranges may overlap).
            self._buffer[:held] = self._buffer[self._start : self._end]
        else:
            # Doubling keeps byte-at-a-time feeding linear; past the retained size only
            # what this frame needs, or the buffer would be let go after every frame.
            grown = bytearray(max(held + nbytes, min(2 * len(self._buffer), RETAINED_BYTES_MAX)))
            grown[:held] = memoryview(self._buffer)[self._start : self._end]
            self._buffer = grown
        self._start, self._end = 0, held

    def _fail(self, reason: str) -> ProtocolError:
        self._failed = ProtocolError(reason)
        return self._failed

    def _raise_if_failed(self) -> None:
        if self._failed is not None:
            raise ProtocolError(f"decoder already failed: {self._failed}")


def decode_frame(data: bytes, frame_bytes_max: int = FRAME_BYTES_MAX) -> Frame:
    """Decode bytes that must hold exactly one whole frame (the in-memory network's path)."""
    if len(data) < _PREFIX_BYTES:
        raise ProtocolError("not a whole frame")
    (body_bytes,) = LENGTH_PREFIX.unpack_from(data)
    if body_bytes > frame_bytes_max:
        raise ProtocolError(
            f"frame of {body_bytes} bytes exceeds frame_bytes_max {frame_bytes_max}"
        )
    if len(data) != _PREFIX_BYTES + body_bytes:
        raise ProtocolError("not exactly one frame")
    return decode_body(memoryview(data)[_PREFIX_BYTES:])
