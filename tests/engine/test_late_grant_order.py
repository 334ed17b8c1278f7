"""The premise of the late give-back's rule (``fencelock/_core/giveback.py``), on the real
servers, with no library code: a request that waited in the sockets of a stopped server is run
before the request that gets the resumed server's last answer of ``ANSWERS`` in a row, even
when it waited on a connection the server had not yet accepted (the first answer may come
before it then; the second nearly never does, and the rule asks for one more).

A plain socket is used for the late request on purpose: it can be opened and written while the
server is stopped, which redis-py's connections (with their handshake) cannot.
"""

from __future__ import annotations

import socket

from fencelock._core.giveback import ANSWERS
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


def test_the_last_of_the_answers_a_give_back_asks_for_comes_after_what_waited(
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
        answers = []
        for _ in range(ANSWERS):  # the first: the late SET may or may not have run by then
            asker.sendall(command("EXISTS", key))
            answers.append(reply(asker))
        assert answers[-1] == b":1\r\n", f"round {n}: the answers came before it: {answers}"
    asker.close()
