"""A private redis-server for a test that must restart its broker.

The machine's Redis is shared by every engineer's tests and is never restarted; a test
that needs a Redis restart starts one of its own (:class:`RedisServer`) on a free port,
with no persistence (``--save '' --appendonly no``: a restart loses everything, as the
production probe's Redis without persistence did), and points the processes it starts at
:meth:`RedisServer.url`::

    with RedisServer() as redis_server:
        ...  # start a worker with REDIS_URL=redis_server.url()
        redis_server.restart()
"""

from __future__ import annotations

import socket
import subprocess
import time

from tests.support.processes import free_port

__all__ = ["RedisServer"]


class RedisServer:
    """One ``redis-server`` process on ``127.0.0.1:<port>``; :meth:`restart` keeps the port."""

    def __init__(self, *, port: int | None = None) -> None:
        self.port = port or free_port()
        self._proc: subprocess.Popen | None = None

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, *, timeout: float = 10.0) -> RedisServer:
        """Start the server and wait until it answers ``PING``; raises ``RuntimeError``
        if it exits or does not answer within ``timeout`` seconds."""
        if self.running:
            raise RuntimeError(f"redis-server on port {self.port} is already running")
        self._proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1"]
            + ["--save", "", "--appendonly", "no", "--loglevel", "warning"],
            stdout=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while not self.answers():
            if self._proc.poll() is not None:
                raise RuntimeError(f"redis-server on port {self.port} exited")
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis-server on port {self.port} did not answer")
            time.sleep(0.02)
        return self

    def stop(self, *, timeout: float = 10.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL); its clients see their connections close."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)

    def restart(self, *, down_for: float = 0.0) -> None:
        """Stop, stay down ``down_for`` seconds (a real restart takes a while: clients
        that notice the loss meanwhile find nobody), and start again on the same port,
        empty (no persistence)."""
        self.stop()
        time.sleep(down_for)
        self.start()

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def answers(self) -> bool:
        """Whether the server answers ``PING`` now."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False
