"""Sans-I/O decisions: what a reply means, how long to wait, how to name things.

Nothing in this package touches a socket, a thread, an event loop or a clock: callers pass the
current time in. That keeps the sync and asyncio shells thin and lets plain unit tests pin down
every decision.
"""
