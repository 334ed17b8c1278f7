"""A userspace TCP proxy for fault injection between a client and a server (there is no tc/netem
here): added latency, a black hole, or reset connections, switchable while connections are open.

One background thread runs a selector over all sockets. Data read from one side is queued with
its arrival time and written to the other side in order, when the mode allows: at once, after
the delay, or (black hole) not until the mode changes back. Mode changes take effect before the
method returns.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import struct
import threading
import time
from collections import deque
from types import TracebackType

CHUNK = 65536
MAX_QUEUED = 1 << 20  # bytes held per direction before the proxy stops reading that side
NORMAL, DELAY, BLACKHOLE, RESET = "normal", "delay", "blackhole", "reset"


def _abort(sock: socket.socket) -> None:
    """Close with a RST rather than a FIN, as a peer that vanished or refused would."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


class _Pipe:
    """One direction of a connection: bytes read from ``src``, waiting to go to ``dst``."""

    def __init__(self, src: socket.socket, dst: socket.socket) -> None:
        self.src, self.dst = src, dst
        self.queue: deque[tuple[float, bytes]] = deque()  # (arrival time, data)
        self.queued = 0
        self.eof = False  # src closed its side
        self.shut = False  # the EOF was passed on to dst
        self.blocked = False  # dst's send buffer was full on the last try

    def reading(self) -> bool:
        return not self.eof and self.queued < MAX_QUEUED


class _Connection:
    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client, self.upstream = client, upstream
        self.pipes = (_Pipe(client, upstream), _Pipe(upstream, client))

    def done(self) -> bool:
        return all(pipe.shut for pipe in self.pipes)


class TcpProxy:
    """Listens on a free port of 127.0.0.1 and relays each connection to ``target_port``.

    Modes: ``normal()``; ``delay(seconds)`` holds every chunk that long in each direction, so a
    round trip takes at least twice that; ``blackhole()`` accepts connections and holds all data
    (delivered if ``normal()`` comes back, as TCP would after a healed partition); ``reset()``
    aborts the open connections with RST and every new one at once.
    """

    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self._mode = NORMAL
        self._delay = 0.0
        self._closing = False
        self._requested = 0  # mode changes asked for
        self._applied = 0  # mode changes the loop has acted on
        self._error: BaseException | None = None
        self._stopped = False  # the loop has ended and closed every socket
        self._cond = threading.Condition()
        self._connections: list[_Connection] = []
        self._registered: dict[socket.socket, int] = {}
        self._selector = selectors.DefaultSelector()
        self._sockets: list[socket.socket] = []  # the listener and the wake-up pair
        try:
            # The kernel picks the port at bind: no window for another process to take it.
            self._listener = socket.create_server(("127.0.0.1", 0))
            self._sockets.append(self._listener)
            self._wake_r, self._wake_w = socket.socketpair()
            self._sockets += [self._wake_r, self._wake_w]
            for sock in self._sockets:
                sock.setblocking(False)
            self._selector.register(self._listener, selectors.EVENT_READ)
            self._selector.register(self._wake_r, selectors.EVENT_READ)
            self.port: int = self._listener.getsockname()[1]
            self._thread = threading.Thread(
                target=self._run, name=f"TcpProxy:{self.port}->{target_port}", daemon=True
            )
            self._thread.start()
        except BaseException:
            self._close_sockets()
            raise

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def mode(self) -> str:
        return self._mode

    # -- control ---------------------------------------------------------------------------------

    def normal(self) -> None:
        self._set(NORMAL)

    def delay(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a delay cannot be negative")
        self._set(DELAY, seconds)

    def blackhole(self) -> None:
        self._set(BLACKHOLE)

    def reset(self) -> None:
        self._set(RESET)

    def _set(self, mode: str, delay: float = 0.0) -> None:
        with self._cond:
            if self._closing:
                raise RuntimeError("the proxy is closed")
            self._mode, self._delay = mode, delay
            self._requested += 1
            ticket = self._requested
            self._wake()
            # Wait for the loop so that, on return, nothing is forwarded under the old mode.
            self._cond.wait_for(lambda: self._applied >= ticket or self._stopped)
            if self._applied < ticket:
                raise RuntimeError("the proxy thread died") from self._error

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError):  # a full buffer: a wake-up is pending
            self._wake_w.send(b"x")

    def close(self) -> None:
        """Close every socket and join the thread. Safe to call more than once."""
        with self._cond:
            self._closing = True
            if not self._stopped:
                self._wake()
        self._thread.join()
        if self._error is not None:
            raise RuntimeError("the proxy thread failed") from self._error

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- the loop --------------------------------------------------------------------------------

    def _run(self) -> None:
        mode, delay, ticket = NORMAL, 0.0, 0
        try:
            while True:
                events = self._selector.select(self._timeout(mode, delay))
                # Drain the wake-ups before reading what they announce: one sent after that
                # read then stays pending for the next select (drained after it, it was lost,
                # and a close() could wait for the thread forever).
                if any(key.fileobj is self._wake_r for key, _ in events):
                    self._drain_wake()
                with self._cond:
                    if self._closing:
                        return
                    mode, delay, ticket = self._mode, self._delay, self._requested
                for key, mask in events:
                    if key.fileobj is self._wake_r:
                        continue
                    elif key.fileobj is self._listener:
                        self._accept(mode)
                    elif mask & selectors.EVENT_READ:
                        self._read(key.data, key.fileobj)  # type: ignore[arg-type]
                if mode == RESET:
                    for connection in list(self._connections):
                        self._drop(connection)
                now = time.monotonic()
                for connection in list(self._connections):
                    self._pump(connection, mode, delay, now)
                self._update_interest()
                with self._cond:
                    self._applied = ticket
                    self._cond.notify_all()
        except BaseException as exc:
            self._error = exc
        finally:
            self._close_sockets()
            with self._cond:
                self._stopped = True
                self._cond.notify_all()

    def _timeout(self, mode: str, delay: float) -> float | None:
        """Until the next delayed chunk is due; otherwise only I/O or a wake-up can change
        anything."""
        if mode != DELAY:
            return None
        # A blocked pipe waits for its socket to be writable, not for the clock.
        pipes = (p for c in self._connections for p in c.pipes if p.queue and not p.blocked)
        heads = [pipe.queue[0][0] for pipe in pipes]
        return max(0.0, min(heads) + delay - time.monotonic()) if heads else None

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(CHUNK):
                pass
        except BlockingIOError:
            pass

    def _accept(self, mode: str) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except BlockingIOError:
                return
            if mode == RESET:
                _abort(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=2)
            except OSError:
                _abort(client)  # the server is down: the client sees its connection reset
                continue
            for sock in (client, upstream):
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._connections.append(_Connection(client, upstream))

    def _read(self, connection: _Connection, sock: socket.socket) -> None:
        pipe = connection.pipes[0] if sock is connection.client else connection.pipes[1]
        try:
            data = sock.recv(CHUNK)
        except BlockingIOError:
            return
        except OSError:
            self._drop(connection)
            return
        if data:
            pipe.queue.append((time.monotonic(), data))
            pipe.queued += len(data)
        else:
            pipe.eof = True

    def _pump(self, connection: _Connection, mode: str, delay: float, now: float) -> None:
        """Send what is due, in order; pass an EOF on once everything before it is sent."""
        for pipe in connection.pipes:
            pipe.blocked = False
        if mode == BLACKHOLE:
            return
        for pipe in connection.pipes:
            while pipe.queue:
                arrival, data = pipe.queue[0]
                if mode == DELAY and arrival + delay > now:
                    break
                try:
                    sent = pipe.dst.send(data)
                except BlockingIOError:
                    sent = 0
                except OSError:
                    self._drop(connection)
                    return
                pipe.queued -= sent
                if sent < len(data):
                    pipe.queue[0] = (arrival, data[sent:])
                    pipe.blocked = True
                    break
                pipe.queue.popleft()
            if pipe.eof and not pipe.queue and not pipe.shut:
                pipe.shut = True
                try:
                    pipe.dst.shutdown(socket.SHUT_WR)
                except OSError:
                    self._drop(connection)
                    return
        if connection.done():
            self._drop(connection, graceful=True)

    def _update_interest(self) -> None:
        wanted: dict[socket.socket, tuple[int, _Connection]] = {}
        for connection in self._connections:
            for pipe in connection.pipes:
                events = selectors.EVENT_READ if pipe.reading() else 0
                wanted[pipe.src] = (wanted.get(pipe.src, (0, connection))[0] | events, connection)
                if pipe.blocked:
                    events = wanted.get(pipe.dst, (0, connection))[0] | selectors.EVENT_WRITE
                    wanted[pipe.dst] = (events, connection)
        for sock in list(self._registered):
            if wanted.get(sock, (0, None))[0] == 0:
                self._selector.unregister(sock)
                del self._registered[sock]
        for sock, (events, connection) in wanted.items():
            if events == 0 or self._registered.get(sock) == events:
                continue
            if sock in self._registered:
                self._selector.modify(sock, events, connection)
            else:
                self._selector.register(sock, events, connection)
            self._registered[sock] = events

    def _drop(self, connection: _Connection, graceful: bool = False) -> None:
        if connection not in self._connections:
            return
        self._connections.remove(connection)
        for sock in (connection.client, connection.upstream):
            if sock in self._registered:
                self._selector.unregister(sock)
                del self._registered[sock]
            if graceful:
                sock.close()
            else:
                _abort(sock)

    def _close_sockets(self) -> None:
        for connection in list(self._connections):
            self._drop(connection)
        self._selector.close()
        for sock in self._sockets:
            sock.close()
