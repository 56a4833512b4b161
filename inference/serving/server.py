"""Running the app under uvicorn with a stop that loses no accepted connection.

uvicorn's own stop on SIGTERM closes the listening socket at once. Connections that the kernel has
already completed but the server has not yet taken from the listen backlog are then reset: under
load, a client whose ``connect`` succeeded and whose request was sent gets ``connection reset``
(30 of 10,000 requests in the load test of ``scripts/bench_serving.py`` did). :class:`DrainingServer`
stops in three steps instead:

1. **Draining** (``grace_s``, default 0): ``/health`` answers 503 so a load balancer takes the
   server out of rotation; requests are still served, each response with ``Connection: close`` so
   that clients stop reusing their connections.
2. **Sealed**: a socket filter that drops every packet is attached to the listening sockets (Linux
   ``SO_ATTACH_FILTER``; the kernel then completes no new connection: a new client's SYN goes
   unanswered, and once the socket is closed its retry is refused). The event loop goes on
   accepting what is already in the backlog, and reads those connections' requests, until no open
   connection is idle (or ``settle_s`` has passed).
3. uvicorn's graceful shutdown: the listener closes, requests in flight finish, the lifespan's
   shutdown stops the batchers, and the process exits 0.

A second SIGTERM or SIGINT skips to step 3; a third SIGINT forces the exit, as in uvicorn. Where the
socket filter is not available (not Linux), step 2 only waits for the backlog's requests.

``--workers N`` runs N such servers on one shared socket under uvicorn's process supervisor, which
forwards SIGTERM to each of them.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import signal
import socket
import struct
import sys
import time
from types import FrameType

import uvicorn
from uvicorn.supervisors import multiprocess

logger = logging.getLogger(__name__)

SO_ATTACH_FILTER = 26  # Linux, asm-generic/socket.h


def seal_listener(sock) -> bool:
    """Attach a drop-everything classic BPF filter to a listening socket: the kernel completes no new
    connection on it, while those already in its backlog can still be accepted. False where the
    platform does not support it."""
    if not sys.platform.startswith("linux"):
        return False
    drop_all = (ctypes.c_ubyte * 8)(*struct.pack("HBBI", 0x06, 0, 0, 0))  # BPF_RET | BPF_K, 0 bytes kept
    fprog = struct.pack("HL", 1, ctypes.addressof(drop_all))  # struct sock_fprog {len; *filter}
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)
        return True
    except OSError as e:  # pragma: no cover - depends on the kernel
        logger.warning("could not seal the listening socket (%s): connections in its backlog may be reset", e)
        return False


def find_app_state(app):
    """The ``state`` of the FastAPI app inside uvicorn's middleware wrappers (``.app`` chains)."""
    for _ in range(16):
        if hasattr(app, "state"):
            return app.state
        app = getattr(app, "app", None)
        if app is None:
            return None
    return None


class DrainingServer(uvicorn.Server):
    """uvicorn's server with the three-step stop of this module's docstring."""

    def __init__(self, config: uvicorn.Config, grace_s: float = 0.0, settle_s: float = 2.0):
        super().__init__(config)
        self.grace_s, self.settle_s = grace_s, settle_s
        self.drain_started: float | None = None
        self.sealed_at: float | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.drain_started is None and not self.should_exit and sig in (signal.SIGTERM, signal.SIGINT):
            # not re-raised at the end (uvicorn re-raises captured signals): a clean stop exits 0
            self.drain_started = time.monotonic()
            state = find_app_state(self.config.loaded_app)
            if state is not None:
                state.draining = True
            logger.info("draining: /health answers 503; the listener closes in %.1f s", self.grace_s)
            return
        super().handle_exit(sig, frame)

    def idle_connections(self) -> int:
        """Open connections without a request being served (just accepted, or kept alive)."""
        n = 0
        for c in self.server_state.connections:
            cycle = getattr(c, "cycle", None)
            if cycle is None or getattr(cycle, "response_complete", False):
                n += 1
        return n

    async def on_tick(self, counter: int) -> bool:
        if self.drain_started is not None and not self.should_exit:
            now = time.monotonic()
            if self.sealed_at is None and now - self.drain_started >= self.grace_s:
                sealed = [seal_listener(s) for srv in self.servers for s in (srv.sockets or ())]
                self.sealed_at = now
                logger.info("listener sealed (%d socket(s)); taking the backlog's requests", sum(sealed))
                await asyncio.sleep(0.05)  # one turn of the loop accepts what the backlog holds
            if self.sealed_at is not None and (now - self.sealed_at >= self.settle_s or
                                               (now - self.sealed_at >= 0.05 and not self.idle_connections())):
                self.should_exit = True
        return await super().on_tick(counter)


class _DrainingProcess(multiprocess.Process):
    """A ``--workers`` process running :class:`DrainingServer` (uvicorn's supervisor builds plain ones)."""

    @property
    def server(self) -> DrainingServer:
        if self._server is None:
            self._server = DrainingServer(self.config, **getattr(self.config, "crag_drain", {}))
        return self._server


def serve(app, *, host: str, port: int, log_level: str = "info", workers: int = 1, grace_s: float = 0.0,
          settle_s: float = 2.0, keep_alive_s: float = 75.0) -> int:
    """Run ``app`` (an ASGI app, or with ``workers > 1`` the import string of an app factory) until
    SIGTERM; 0 after a clean stop.

    ``keep_alive_s``: how long an idle connection stays open. uvicorn's default (5 s) equals the idle
    expiry of common client pools (httpx's ``keepalive_expiry``, Node's agent), so the two race: a
    client reuses a connection at the moment the server closes it and gets a reset (4 of 10,000
    requests in one load test). Servers outlive their clients' pools instead (nginx: 75 s)."""
    factory = isinstance(app, str)
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, workers=workers, factory=factory,
                            timeout_keep_alive=keep_alive_s)
    if workers > 1:
        config.crag_drain = {"grace_s": grace_s, "settle_s": settle_s}
        sock = config.bind_socket()
        multiprocess.Process = _DrainingProcess  # uvicorn's supervisor builds its processes by this name
        multiprocess.Multiprocess(config, sockets=[sock]).run()
        return 0
    server = DrainingServer(config, grace_s=grace_s, settle_s=settle_s)
    server.run()
    return 0 if server.started else 3
