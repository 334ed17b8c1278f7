"""A throw-away S3-compatible server for the tests, the chaos suite and the benchmarks of
``fencelock.fences.s3``: moto's server mode (``pip install 'moto[server]'``, in the ``test``
extra), a process of its own on a free loopback port, stopped by PID. It keeps objects in memory
and honours ``If-Match`` and ``If-None-Match`` on PUT (``tests/fences/test_s3.py``)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

from .embedded import free_port

CREDENTIALS = {"aws_access_key_id": "fencelock", "aws_secret_access_key": "fencelock"}
REGION = "us-east-1"


def moto_available() -> bool:
    return importlib.util.find_spec("moto") is not None


class S3Server:
    def __init__(self) -> None:
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.log = Path(tempfile.mkstemp(prefix="fencelock-s3-", suffix=".log")[1])

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client_options(self) -> dict[str, str]:
        """What ``boto3.client("s3", **options)`` needs to use this server."""
        return {"endpoint_url": self.endpoint, "region_name": REGION, **CREDENTIALS}

    def start(self, timeout: float = 30.0) -> S3Server:
        command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)]
        with open(self.log, "ab") as log:  # (a pipe nobody reads would fill and stop it)
            self.process = process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                self.process = None
                text = self.log.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"moto's server exited at start: {text}")
            try:
                with urllib.request.urlopen(self.endpoint + "/moto-api/", timeout=1):
                    return self
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"moto's server did not answer on port {self.port}")
            time.sleep(0.05)

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.log.unlink(missing_ok=True)

    def __enter__(self) -> S3Server:
        return self.start() if self.process is None else self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
