"""Runs a :class:`~grounded_planner.console.app.ConsoleApp` on its own thread and asyncio loop, beside a ROS executor."""

from __future__ import annotations

import asyncio
import threading

from aiohttp import web

from grounded_planner.console.app import ConsoleApp
from grounded_planner.errors import RunFailure
from grounded_planner.threads import name_native_thread


class ConsoleBindError(RunFailure):
    """The console cannot listen on its address (the port is taken, the address is not this machine's)."""


class ConsoleServer:
    """``start()`` binds ``host:port`` (ConsoleBindError naming the address when it cannot) and serves until
    ``stop()``."""

    def __init__(self, app: ConsoleApp, host: str, port: int):
        self.app, self.host, self.port = app, host, port
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    def start(self) -> "ConsoleServer":
        async def serve() -> None:
            self._runner = web.AppRunner(self.app.make_app(), access_log=None, handle_signals=False)
            await self._runner.setup()
            await web.TCPSite(self._runner, self.host, self.port).start()
            if self.port == 0:  # an ephemeral port (tests, benchmarks): report the one the OS gave
                self.port = self._runner.addresses[0][1]

        try:
            self._loop.run_until_complete(serve())
        except OSError as exc:
            if self._runner is not None:  # the app started: its shutdown ends the push channel's task
                self._loop.run_until_complete(self._runner.cleanup())
            self._loop.close()
            raise ConsoleBindError(
                f"the console cannot listen on {self.host}:{self.port}: {exc.strerror or exc}"
            ) from exc
        self._thread = threading.Thread(target=self._serve_forever, name="console-http", daemon=True)
        self._thread.start()
        return self

    def _serve_forever(self) -> None:
        name_native_thread()
        self._loop.run_forever()

    def stop(self) -> None:
        if self._thread is None:
            return
        future = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop)
        try:
            future.result(timeout=5.0)
        except Exception:  # noqa: BLE001 - shutting down: a page that will not close must not keep the node alive
            pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5.0)
        self._thread = None
