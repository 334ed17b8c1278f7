"""The premise of the late give-back's rule (``fencelock/_core/giveback.py``), on the real
servers, with no library code: a request that waited in the sockets of a stopped server is run
before a request sent after the resumed server's first answer, even when it waited on a
connection the server had not yet accepted (the first answer may come before it then).

A plain socket is used for the late request on purpose: it can be opened and written while the
server is stopped, which redis-py's connections (with their handshake) cannot.
"""

from __future__ import annotations

import socket

from fencelock_tools.servers.embedded import EmbeddedServer

ROUNDS = 20


def command(*args: str) -> bytes:
    out = b"*%d\r\n" % len(args)
    for arg in args:
        out += b"$%d\r\n%s\r\n" % (len(arg.encode()), arg.encode())
    return out


def reply(sock: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\r\n"):
        data += sock.recv(4096)
    return data


def connect(server: EmbeddedServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=10)


def test_a_request_sent_after_the_first_answer_comes_after_what_waited(
    fresh_server: EmbeddedServer,
) -> None:
    asker = connect(fresh_server)  # accepted: it reads in the resumed server's first round
    asker.sendall(command("PING"))
    assert reply(asker) == b"+PONG\r\n"
    for n in range(ROUNDS):
        key = f"late:{n}"
        fresh_server.pause()
        try:
            late = connect(fresh_server)  # (in the listen backlog: accepted once resumed)
            late.sendall(command("SET", key, "1"))
            late.close()  # given up, as a client whose request timed out does
        finally:
            fresh_server.resume()
        asker.sendall(command("EXISTS", key))
        reply(asker)  # the first answer: the late SET may or may not have run by then
        asker.sendall(command("EXISTS", key))
        assert reply(asker) == b":1\r\n", f"round {n}: the second answer came before it"
    asker.close()
