"""The console's web app (aiohttp): pages, a JSON API, and one WebSocket per browser that pushes the shared state on
every change and camera frames as fast as that browser shows them. It talks to the graph only through
:class:`~grounded_planner.console.graph.ConsoleGraph`."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import struct
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any, Callable

from aiohttp import WSMsgType, web

from grounded_planner.console import auth
from grounded_planner.console.graph import ConsoleGraph, Frame, GraphError, SentGoal
from grounded_planner.console.rollouts import NotARolloutError, OutsideFolderError, RolloutStore
from grounded_planner.console.session import EvalSession, SessionError
from grounded_planner.console.state import ConsoleState, DecisionError, PlanRequests, why_not_runnable
from grounded_planner.rollout.record import RolloutError
from grounded_planner.rollout.taxonomy import FAILURE_MODES, FailureModeError
from grounded_planner.threads import name_native_thread

log = logging.getLogger("grounded_planner.console")

STATIC = resources.files("grounded_planner.console") / "static"
PAGES = ("/", "/rollouts", "/rollout", "/session")
FRAME_POLL_S = 0.01  # how often the frame thread looks for a newer camera image while a browser waits for one, s
# While the live view is paused the frame thread sleeps until woken (pause_may_have_ended) or this long at most: a
# pause that ends on another path (live_while_planning set on the running console, a request lost to its timeout)
# ends within it. Polled every FRAME_POLL_S, the pause itself took the console 18-20 ms of CPU per second of the
# planner's work with a page on a tablet (bench_console.py --pairs 20 --vlm-latency-s 1.0).
PAUSED_POLL_S = 0.25
FRAME_NICE = 10  # the frame thread's nice increment: JPEG work for a screen yields the CPU to the planner and executor
FRAME_HEADER = struct.Struct(">qII")  # stamp_ns, width, height, then the JPEG
WIDTH_STEP = 64  # the widths frames are encoded at for the pages are multiples of this, pixels
APPROVAL_WAIT_S = 5.0  # how long an Approve waits for the executor to hold the plan it was sent, s
MAX_BODY_BYTES = 64 * 1024
BROADCASTER = web.AppKey("broadcaster", asyncio.Task)
UNAUTHORISED_PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>grounded_planner console</title>
<link rel="icon" href="data:,"></head><body style="font: 16px system-ui, sans-serif; margin: 3em; max-width: 40em">
<h1>401: a valid token is required</h1>
<p>This console listens on a network address, so it asks for its token. Open it once as
<code>http://HOST:PORT/?token=TOKEN</code>: the token is the <code>token</code> parameter (<code>--token</code>), or the
one the console printed when it started. Scripts send <code>Authorization: Bearer TOKEN</code>.</p></body></html>
"""


def page_width(width: Any) -> int:
    """The ``width`` of a page's ``frames``/``ack`` message (the device pixels it shows the camera at), rounded up
    to a multiple of :data:`WIDTH_STEP` so that a window resized by a few pixels does not change the encoding; 0
    where it gives none or nonsense (frames as they come)."""
    if isinstance(width, bool) or not isinstance(width, (int, float)) or not 0 < width < 1e5:
        return 0
    return -(-int(width) // WIDTH_STEP) * WIDTH_STEP


def _timed(fn: Callable, *args) -> tuple[Any, float]:
    """``fn(*args)`` and the seconds it took, on the calling thread."""
    t0 = time.perf_counter()
    result = fn(*args)
    return result, time.perf_counter() - t0


class ServerTiming:
    """Where a request's time went inside the console, for its ``Server-Timing`` response header (W3C Server Timing:
    browsers' developer tools show it beside the request; the bench reads it). ``lap(name)`` ends a phase that
    started at the last lap (or at the start); ``add`` names a part measured elsewhere; ``total`` is from the start to
    the header's writing: the HTTP parsing before the handler and the writing of the body after it are not in it."""

    def __init__(self):
        self._t0 = self._last = time.perf_counter()
        self._parts: list[tuple[str, float]] = []

    def lap(self, name: str = "") -> float:
        now = time.perf_counter()
        took, self._last = now - self._last, now
        if name:
            self.add(name, took)
        return took

    def add(self, name: str, seconds: float) -> None:
        self._parts.append((name, max(seconds, 0.0)))

    def header(self) -> str:
        parts = [*self._parts, ("total", time.perf_counter() - self._t0)]
        return ", ".join(f"{name};dur={s * 1000:.3f}" for name, s in parts)


def _now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _workers(count: int, name: str) -> ThreadPoolExecutor:
    """A pool of ``count`` threads named ``name_N``, each under that name for the operating system too."""
    return ThreadPoolExecutor(max_workers=count, thread_name_prefix=name, initializer=name_native_thread)


async def _on_own_thread(fn: Callable[[], Any]) -> Any:
    """``fn()`` on a new thread (named for the operating system), awaited from the event loop."""
    future: Future = Future()

    def run() -> None:
        name_native_thread()
        try:
            future.set_result(fn())
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine, which raises it
            future.set_exception(exc)

    threading.Thread(target=run, name="console-stop", daemon=True).start()
    return await asyncio.wrap_future(future)


class StoppedError(GraphError):
    """An approved plan not carried out, or cancelled as soon as the executor took it: STOP came after its Approve."""

    rule = "stopped"


class FramePump:
    """Camera frames for the pages, from one thread of low priority: while some browser waits for a frame (each has
    at most one in flight), the thread asks the graph for a newer one every ``FRAME_POLL_S`` (no faster than
    ``max_frame_rate`` a second, 0 = no limit) and hands it to every waiting browser at once, with one wake-up of the
    event loop. No browser waiting: the thread sleeps and the graph is never asked (no image taken, none encoded).
    Each browser says how wide it shows the image (device pixels); one encoding serves them all, at the widest of
    those (as the camera gives it where one browser did not say). While ``paused()``, no frame is taken, and the
    graph hears once per pause that none is wanted (``frames_paused``), so that it can stop receiving them: at once
    when the pause begins (``pause_began``), not when a browser next asks for a frame (a tablet that took the last
    one asks up to a frame period later, and the camera's images went on arriving meanwhile)."""

    def __init__(
        self,
        graph: ConsoleGraph,
        loop: asyncio.AbstractEventLoop,
        max_frame_rate: float = 0.0,
        paused: Callable[[], bool] = lambda: False,
    ):
        self.graph, self.loop = graph, loop
        self.min_period_s = 1.0 / max_frame_rate if max_frame_rate > 0 else 0.0
        self.paused = paused  # while True, no frame is taken (the browsers keep the last one)
        self._lock = threading.Lock()
        # (the last seq the browser got, the width it shows frames at (0 = as they come), its future)
        self._waiting: list[tuple[int, int, asyncio.Future]] = []
        self._wanted = threading.Event()
        self._pause_news = False  # pause_began() since the thread last looked (under the lock)
        self._resume = threading.Event()  # pause_may_have_ended()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="console-frames", daemon=True)
        self._thread.start()

    async def next_frame(self, after_seq: int, width: int = 0) -> Frame:
        """The next frame newer than ``after_seq`` (waits for one), for a page that shows it ``width`` device pixels
        wide (0 = as the camera gives it)."""
        future = self.loop.create_future()
        with self._lock:
            self._waiting.append((after_seq, width, future))
        self._wanted.set()
        try:
            return await future
        finally:
            with self._lock:
                self._waiting = [w for w in self._waiting if w[2] is not future]

    def pause_began(self) -> None:
        """(any thread) ``paused()`` just became true: the thread tells the graph now, whether a browser waits or not."""
        with self._lock:
            self._pause_news = True
        self._wanted.set()

    def pause_may_have_ended(self) -> None:
        """(any thread) Something ``paused()`` reads changed: a thread asleep in a pause looks again now."""
        self._resume.set()

    def stop(self) -> None:
        self._stop.set()
        self._wanted.set()
        self._resume.set()
        self._thread.join(timeout=5.0)

    @staticmethod
    def _lower_priority() -> None:
        try:  # Linux: a thread is a task with a nice value of its own (raising it needs no privilege)
            tid = threading.get_native_id()
            os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + FRAME_NICE))
        except (AttributeError, OSError):  # elsewhere: the frames share the process's priority
            pass

    def _run(self) -> None:
        name_native_thread()
        self._lower_priority()
        last_taken = 0.0
        told = False  # the graph was told of this pause
        while not self._stop.is_set():
            self._wanted.wait()
            with self._lock:
                # read and cleared under the lock that pause_began() sets it under: no news is lost to the clear
                news, self._pause_news = self._pause_news, False
                idle = not self._waiting
                if idle:
                    self._wanted.clear()  # a browser that asks from here sets it again
                else:
                    oldest = min(seq for seq, _, _ in self._waiting)
                    widths = [width for _, width, _ in self._waiting]
                    width = 0 if 0 in widths else max(widths)
            if news and not told and self.paused():
                told = True
                self.graph.frames_paused()
            if idle:
                continue
            pause = last_taken + self.min_period_s - time.monotonic()
            if pause > 0:
                self._stop.wait(pause)
            if self.paused():
                if not told:
                    told = True
                    self.graph.frames_paused()
                self._resume.clear()
                if self.paused() and not self._stop.is_set():  # looked again after the clear: no wake-up is lost
                    self._resume.wait(PAUSED_POLL_S)
                continue
            told = False
            # a pause that begins while the image is read and scaled drops it before its encoding: a frame in flight
            # when the planner took a request had run on into the planner's work (7-11 ms of CPU on a busy machine)
            frame = self.graph.latest_frame(oldest, width, wanted=lambda: not self.paused())
            if frame is None:
                self._stop.wait(FRAME_POLL_S)
                continue
            last_taken = time.monotonic()
            with self._lock:  # handed out here, not when the loop runs: the next pass must not hand it out again
                ready = [f for seq, _, f in self._waiting if seq < frame.seq]
                self._waiting = [w for w in self._waiting if w[0] >= frame.seq]
            if ready and not self.loop.is_closed():
                self.loop.call_soon_threadsafe(self._hand_out, ready, frame)

    @staticmethod
    def _hand_out(futures: list[asyncio.Future], frame: Frame) -> None:
        for future in futures:
            if not future.done():
                future.set_result(frame)


class ConsoleApp:
    """The app for one graph. ``token``: '' (loopback bind, none needed) or the token every request must carry.
    ``note(line)``: where approve, execute, stop and refused requests are logged (with the client's address).
    ``max_frame_rate``: camera frames a second to each page at most (0 = as many as the page takes).
    ``live_while_planning``: keep sending camera frames while the planner answers a request and the arm is still
    (False: the live view pauses then, and the pages' decoding and the console's encoding leave the CPUs to the
    planner; frames always flow while a goal runs). The graph reports the planner's requests to ``plan_requests``."""

    def __init__(
        self,
        graph: ConsoleGraph,
        *,
        rollouts_dir: str | Path,
        token: str = "",
        session_dir: str = "",
        plan_timeout_s: float = 60.0,
        note: Callable[[str], None] | None = None,
        state: ConsoleState | None = None,
        max_frame_rate: float = 0.0,
        live_while_planning: bool = False,
    ):
        self.graph = graph
        self.live_while_planning = live_while_planning
        self.plan_requests = PlanRequests(plan_timeout_s, listener=self._planning_changed)
        self.state = state or ConsoleState()
        self.rollouts = RolloutStore(rollouts_dir)
        self.token = token
        self.plan_timeout_s = plan_timeout_s
        self.max_frame_rate = max_frame_rate
        self._frames: FramePump | None = None
        self.session = EvalSession(session_dir) if session_dir else None
        self._note = note or log.info
        # the session's trial being run: its card's id and instruction, when its Approve came, and its rollout (the
        # first that closed after that Approve: the one its label records)
        self._trial: dict[str, Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._dirty: asyncio.Event | None = None
        self._sockets: set[web.WebSocketResponse] = set()
        self._pool = _workers(8, "console")
        # plan requests wait on the planner (up to plan_timeout_s, a dead VLM server): on workers of their own, so that
        # decisions, labels and the rollouts pages never queue behind them (STOP has a thread of its own)
        self._plan_pool = _workers(8, "console-plan")
        # Approve/Reject (and the reject of a superseded plan) and labels on workers of their own too: the rollouts
        # pages' file reads (a page of thumbnails, a rollouts folder on a network share) must not hold up a decision
        # on the arm, nor the label that moves an evaluation session on to its next card
        self._decide_pool = _workers(4, "console-decide")
        self._graph_lock = threading.Lock()  # one graph action (execute, approve, stop aside) at a time
        # STOPs so far (counted on the event loop as each arrives, before its cancel goes out): a goal sent while this
        # changed may have been on its way when the cancel reached the executor, and is cancelled once it is taken
        self._stops = 0
        # (plan id, goal): the current plan, sent to the executor at its preview to be held for approval
        self._held: tuple[int, SentGoal] | None = None
        # rollouts closed while no page was open, not read yet (_settle_closed); the lock keeps their order
        self._closed: list[str] = []
        self._closed_lock = threading.Lock()
        self.state.set_listener(self._state_changed)
        self.state.set_tally(self._tally())
        self._session_progress()

    # -- logging -----------------------------------------------------------------------------------------------
    def note(self, line: str) -> None:
        self._note(line)
        self.state.note(line)

    # -- the app ----------------------------------------------------------------------------------------------
    def make_app(self) -> web.Application:
        app = web.Application(middlewares=[self._guard], client_max_size=MAX_BODY_BYTES)
        for page in PAGES:
            app.router.add_get(page, self._page)
        app.router.add_get("/static/{name}", self._static)
        app.router.add_get("/ws", self._websocket)
        app.router.add_get("/api/state", self._get_state)
        app.router.add_post("/api/plan", self._post_plan)
        app.router.add_post("/api/decision", self._post_decision)
        app.router.add_post("/api/stop", self._post_stop)
        app.router.add_post("/api/label", self._post_label)
        app.router.add_post("/api/reset_scene", self._post_reset_scene)
        app.router.add_get("/api/taxonomy", self._get_taxonomy)
        app.router.add_get("/api/rollouts", self._get_rollouts)
        app.router.add_get("/api/rollout", self._get_rollout)
        app.router.add_get("/api/rollout/frame", self._get_frame)
        app.router.add_get("/api/session", self._get_session)
        app.router.add_post("/api/session/start", self._post_session_start)
        app.router.add_get("/api/session/file", self._get_session_file)
        app.on_startup.append(self._on_startup)
        app.on_shutdown.append(self._on_shutdown)
        return app

    async def _on_startup(self, app: web.Application) -> None:
        self._loop = asyncio.get_running_loop()
        self._dirty = asyncio.Event()
        self._frames = FramePump(self.graph, self._loop, self.max_frame_rate, paused=self.live_paused)
        app[BROADCASTER] = asyncio.create_task(self._broadcast())

    async def _on_shutdown(self, app: web.Application) -> None:
        app[BROADCASTER].cancel()
        for ws in list(self._sockets):
            await ws.close()
        if self._frames is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._frames.stop)
        for pool in (self._pool, self._plan_pool, self._decide_pool):
            pool.shutdown(wait=False, cancel_futures=True)

    def live_paused(self) -> bool:
        """The live view waits: the planner is answering a request and the arm is still (no goal running)."""
        if self.live_while_planning or self.state.executor.get("state") == "running":
            return False
        return self.plan_requests.busy()

    def _planning_changed(self, busy: bool) -> None:
        """The planner became busy or idle: the pages say whether the live view is paused (a message of its own, not
        the whole state: nothing else is drawn again while the planner works)."""
        if not busy and self._frames is not None:
            self._frames.pause_may_have_ended()
        loop = self._loop_for_pages()
        if loop is not None:
            if busy and self._frames is not None and self.live_paused():
                self._frames.pause_began()  # the graph may leave the camera now, before the pages hear of it
            loop.call_soon_threadsafe(lambda: asyncio.ensure_future(self._send_live()))

    async def _send_live(self) -> None:
        await self._send_to_pages(json.dumps({"type": "live", "paused": self.live_paused()}))

    async def _send_to_pages(self, text: str) -> None:
        for ws in list(self._sockets):
            if not ws.closed:
                try:
                    await ws.send_str(text)
                except ConnectionError:
                    self._sockets.discard(ws)

    def _loop_for_pages(self) -> asyncio.AbstractEventLoop | None:
        """(any thread) The running event loop where some page is open to be told of a change, else None: with none
        open the loop is not woken at all (a page that connects is sent the state and the pause then; it joins
        ``_sockets`` before that)."""
        loop = self._loop
        return loop if self._sockets and loop is not None and not loop.is_closed() else None

    def _state_changed(self) -> None:
        """(any thread) The state changed: the event loop sends it to the open pages (and a paused frame thread looks
        again: a goal that started running ends the pause)."""
        if self._frames is not None:
            self._frames.pause_may_have_ended()
        loop, dirty = self._loop_for_pages(), self._dirty
        if loop is not None and dirty is not None:
            loop.call_soon_threadsafe(dirty.set)

    async def _broadcast(self) -> None:
        """Every state change reaches every open page (changes in a burst go out as one snapshot)."""
        assert self._dirty is not None
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            if not self._sockets:  # no page open: nothing to encode (a new page gets the state when it connects)
                continue
            await self._send_to_pages(json.dumps({"type": "state", "state": self.state.snapshot()}))

    async def _run(self, fn, *args, pool: ThreadPoolExecutor | None = None):
        """``fn(*args)`` on ``pool``'s workers (the general ones unless said), awaited from the event loop."""
        return await asyncio.get_running_loop().run_in_executor(pool or self._pool, fn, *args)

    async def _run_timed(self, marks: ServerTiming, fn, *args, pool: ThreadPoolExecutor) -> tuple[Any, float]:
        """``_run``, with the hand-over to the worker and back (all but ``fn``'s own time) added to ``marks`` as
        ``pool``: ``fn``'s result and the seconds it took on the worker."""
        result, worker_s = await self._run(_timed, fn, *args, pool=pool)
        marks.add("pool", marks.lap() - worker_s)
        return result, worker_s

    # -- guard: token, origin -----------------------------------------------------------------------------------
    @web.middleware
    async def _guard(self, request: web.Request, handler):
        client = request.remote or "?"
        changes = request.method not in ("GET", "HEAD", "OPTIONS") or request.path == "/ws"
        if changes and not auth.same_origin(request.headers.get("Origin"), request.host):
            self.note(
                f"refused {request.method} {request.path} from {client}: cross-site request "
                f"(Origin {request.headers.get('Origin')})"
            )
            return web.json_response({"error": "cross-site request refused"}, status=403)
        if not self.token:
            return await handler(request)
        supplied = auth.bearer(request.headers.get("Authorization")) or request.cookies.get(auth.COOKIE)
        from_query = request.query.get("token")
        if auth.token_matches(self.token, supplied):
            return await handler(request)
        if auth.token_matches(self.token, from_query):
            if request.method == "GET" and request.path in PAGES:
                # the token leaves the address bar (and the history) for a cookie
                query = {k: v for k, v in request.query.items() if k != "token"}
                response = web.HTTPFound(request.rel_url.with_query(query))
                response.set_cookie(auth.COOKIE, self.token, httponly=True, samesite="Strict", path="/")
                raise response
            return await handler(request)
        self.note(f"refused {request.method} {request.path} from {client}: no valid token")
        headers = {"WWW-Authenticate": 'Bearer realm="grounded_planner console"'}
        if request.method == "GET" and request.path in PAGES:  # a person at a browser: a page that says what to do
            return web.Response(status=401, content_type="text/html", headers=headers, text=UNAUTHORISED_PAGE)
        return web.json_response(
            {
                "error": "a valid token is required (Authorization: Bearer TOKEN, or open the "
                "console once with ?token=TOKEN)"
            },
            status=401,
            headers=headers,
        )

    # -- pages and static files ---------------------------------------------------------------------------------
    async def _page(self, request: web.Request) -> web.Response:
        return web.Response(
            text=(STATIC / "index.html").read_text(encoding="utf-8"),
            content_type="text/html",
            headers={"Cache-Control": "no-store"},
        )

    async def _static(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        types = {".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml", ".png": "image/png"}
        item = STATIC / name
        suffix = Path(name).suffix
        if "/" in name or name.startswith(".") or suffix not in types or not item.is_file():
            raise web.HTTPNotFound()
        return web.Response(body=item.read_bytes(), content_type=types[suffix])

    # -- push channel -------------------------------------------------------------------------------------------
    async def _websocket(self, request: web.Request) -> web.WebSocketResponse:
        # no permessage-deflate (browsers ask for it, aiohttp agrees by default): deflating the JPEG frames again gained
        # nothing and took half the console's CPU with a page open, on a worker thread per frame
        ws = web.WebSocketResponse(heartbeat=20.0, max_msg_size=MAX_BODY_BYTES, compress=False)
        await ws.prepare(request)
        self._sockets.add(ws)  # from here on, a closed rollout is read as it comes
        await self._run(self._settle_closed)
        if self.session is not None:  # trials.jsonl may have changed since (a fixed line, another terminal's trial)
            await self._run(self._session_progress)
        ready = asyncio.Event()  # the browser showed the last frame it was sent (or asked for frames)
        shown_width = [0]  # how wide the page shows the camera, device pixels (0: it did not say)
        sender = asyncio.create_task(self._send_frames(ws, ready, shown_width))
        try:
            await ws.send_str(json.dumps({"type": "state", "state": self.state.snapshot()}))
            if self.live_paused():
                await ws.send_str(json.dumps({"type": "live", "paused": True}))
            async for message in ws:
                if message.type != WSMsgType.TEXT:
                    continue
                try:
                    data = json.loads(message.data)
                    kind = data.get("type")
                except (ValueError, AttributeError):
                    continue
                if kind in ("frames", "ack"):
                    shown_width[0] = page_width(data.get("width"))
                    ready.set()
        finally:
            sender.cancel()
            self._sockets.discard(ws)
        return ws

    async def _send_frames(self, ws: web.WebSocketResponse, ready: asyncio.Event, shown_width: list[int]) -> None:
        """One frame in flight per browser: the next goes out when the last one was shown (what the browser takes),
        no wider than the browser shows it."""
        assert self._frames is not None
        last_seq = 0
        while not ws.closed:
            await ready.wait()
            frame = await self._frames.next_frame(last_seq, shown_width[0])
            ready.clear()
            last_seq = frame.seq
            try:
                await ws.send_bytes(FRAME_HEADER.pack(frame.stamp_ns, frame.width, frame.height) + frame.jpeg)
            except ConnectionError:
                return

    # -- API: state, plan, decision, stop -------------------------------------------------------------------------
    async def _json(self, request: web.Request) -> dict[str, Any]:
        try:
            body = await request.json()
        except web.HTTPRequestEntityTooLarge:  # aiohttp's own answer is text/plain: the page shows JSON's "error"
            raise web.HTTPRequestEntityTooLarge(
                max_size=MAX_BODY_BYTES,
                actual_size=request.content_length or 0,
                text=json.dumps({"error": f"the body is larger than the console takes ({MAX_BODY_BYTES // 1024} KiB)"}),
                content_type="application/json",
            ) from None
        except ValueError:
            raise web.HTTPBadRequest(
                text=json.dumps({"error": "the body must be a JSON object"}), content_type="application/json"
            ) from None
        if not isinstance(body, dict):
            raise web.HTTPBadRequest(
                text=json.dumps({"error": "the body must be a JSON object"}), content_type="application/json"
            )
        return body

    @staticmethod
    def _error(message: str, status: int = 400) -> web.Response:
        return web.json_response({"error": message}, status=status)

    async def _get_state(self, request: web.Request) -> web.Response:
        await self._run(self._settle_closed)
        return web.json_response(self.state.snapshot())

    async def _post_plan(self, http_request: web.Request) -> web.Response:
        marks = ServerTiming()
        body = await self._json(http_request)
        marks.lap("body")
        instruction = str(body.get("instruction") or "").strip()
        if not instruction:
            return self._error("type an instruction first")
        client = http_request.remote or "?"
        if self._held is not None or self.state.snapshot()["executor"]["state"] == "waiting_approval":
            await self._run(self._supersede, client, pool=self._decide_pool)
            marks.lap("supersede")
        request = object()
        try:
            # busy once the request is on its way (the planner hears of it a moment later): the live view's pause
            # (the frame thread leaving the camera topic, the pages told) then overlaps the planner's work instead of
            # taking the CPUs and the GIL from the plan worker while it sends the request
            answer, worker_s = await self._run_timed(
                marks,
                self.graph.plan,
                instruction,
                self.plan_timeout_s,
                lambda: self.plan_requests.started(request),
                pool=self._plan_pool,
            )
            marks.add("call", answer.duration_s)
            marks.add("preview", worker_s - answer.duration_s)
            plan = self.state.new_plan(instruction, answer, client)
            # the answer goes out first; the log line and the goal sent ahead (a parameter round trip on another
            # thread) would otherwise take the GIL from the thread writing it
            response = web.json_response({"plan": plan})
            marks.lap("state")
            response.headers["Server-Timing"] = marks.header()
            try:
                await response.prepare(http_request)
                await response.write_eof()
            except ConnectionError:  # the page went: the plan is on every other page, and logged and held all the same
                pass
        finally:
            # and the live view resumes once it is out: the frame thread subscribing to the camera again and the
            # pages told would otherwise take the GIL from the handler before it wrote the answer
            self.plan_requests.answered(request)
        self.note(
            f"plan {plan['id']} for {instruction!r} requested by {client}: "
            f"{len((answer.plan or {}).get('actions') or [])} step(s)"
            f"{'' if answer.success else ', failed: ' + answer.message}"
        )
        if not why_not_runnable(plan):
            self._decide_pool.submit(self._hold, plan["id"])
        return response

    def _hold(self, plan_id: int) -> None:
        """Where the executor requires approval, a runnable preview goes to it at once, as a goal it must hold for
        /grounded_planner/approve (nothing moves without that answer, whatever the executor's parameter is by the
        time the goal arrives). The goal's round trip and the executor's preparation happen while the person reads
        the preview, so that their Approve is one service call away from motion. Never raises: a goal the executor
        does not take (busy, gone) is sent again by Approve."""
        with self._graph_lock:
            stops = self._stops
            plan = self.state.snapshot()["plan"]
            if plan is None or plan["id"] != plan_id or plan["decision"] is not None:
                return  # decided (or replaced) before it could be sent ahead: the decision did what was needed
            try:
                if not self.graph.requires_approval():
                    return
            except GraphError:  # no executor answers: Approve says so, if it is clicked
                return
            try:
                goal = self.graph.execute(plan["plan"], hold=True)
                if self._cancelled_as_stopped(stops):
                    self.note(
                        f"plan {plan_id}: STOP came while it was sent ahead to be held; the executor's goal "
                        "was cancelled as soon as it was taken (Approve sends it again)"
                    )
                    return
                self._held = (plan_id, goal)
            except GraphError as exc:
                self.note(f"plan {plan_id} not sent ahead to be held for approval ({exc}); Approve will send it")
                return
        self.note(f"plan {plan_id} sent to /grounded_planner/execute; the executor holds it for approval")

    def _cancelled_as_stopped(self, stops: int) -> bool:
        """(graph lock held, a goal just taken by the executor) True, and the goal cancelled, where a STOP came since
        ``stops`` was read: its cancel may have reached the executor before the goal did, and found nothing."""
        if self._stops == stops:
            return False
        try:
            self.graph.stop()
        except GraphError as exc:
            raise StoppedError(
                f"STOP came while a goal was on its way to the executor, and cancelling it once taken failed ({exc}): "
                "press STOP again, or use the robot's own stop"
            ) from exc
        return True

    def _take_held(self, plan_id: int) -> SentGoal | None:
        """The goal the executor holds for plan ``plan_id`` (None when that plan was not sent ahead, or its goal
        ended, as when the executor's approval_timeout_s passed); the console holds it no longer either way."""
        held, self._held = self._held, None
        if held is None or held[0] != plan_id or held[1].ended():
            return None
        return held[1]

    def _supersede(self, client: str) -> None:
        """A new request replaces an undecided plan: one the executor holds for approval is rejected first."""
        with self._graph_lock:
            snap = self.state.snapshot()
            plan = snap["plan"]
            held = None if plan is None else self._take_held(plan["id"])
            if plan is None or plan["decision"] is not None:
                return
            if held is None and snap["executor"]["state"] != "waiting_approval":
                return
            try:
                self.state.decide(plan["id"], False, f"{client} (new plan requested)")
                self.graph.answer_approval(False, APPROVAL_WAIT_S if held is not None else 0.0)
            except (DecisionError, GraphError):
                pass

    async def _post_decision(self, request: web.Request) -> web.Response:
        marks = ServerTiming()
        body = await self._json(request)
        marks.lap("body")
        client = request.remote or "?"
        try:
            plan_id, approved = int(body["plan_id"]), body["approve"]
        except (KeyError, TypeError, ValueError):
            return self._error('expected {"plan_id": N, "approve": true|false}')
        if not isinstance(approved, bool):
            return self._error("'approve' must be true or false")
        try:
            plan = self.state.decide(plan_id, approved, client)
        except DecisionError as exc:
            self.note(f"refused {'approve' if approved else 'reject'} of plan {plan_id} from {client}: {exc}")
            return self._error(str(exc), 409)
        verb = "approved" if approved else "rejected"
        marks.lap("decide")
        try:
            message, worker_s = await self._run_timed(
                marks, self._carry_out, plan, approved, self._stops, pool=self._decide_pool
            )
        except (StoppedError, GraphError) as exc:
            if approved:  # (a Reject that failed leaves a trial approved before it as it was)
                self._trial_not_started()
            self.state.plan_error(plan_id, str(exc))
            self.note(f"plan {plan_id} {verb} by {client}, but: {exc}")
            return self._error(str(exc), 409 if isinstance(exc, StoppedError) else 502)
        marks.add("executor", worker_s)
        response = web.json_response({"plan_id": plan_id, "decision": verb, "message": message})
        response.headers["Server-Timing"] = marks.header()
        self.note(f"plan {plan_id} {verb} by {client}: {message}")
        return response

    def _carry_out(self, plan: dict[str, Any], approved: bool, stops: int) -> str:
        """Approve: the executor's approval gate when it has one (the plan, held since its preview, is approved; one
        not held yet is sent, then approved once it is held), else the plan goes to /grounded_planner/execute.
        Reject: the held plan is refused, or nothing is sent. ``stops``: the STOPs counted when the click came; one
        since then wins over the Approve (StoppedError): nothing more is sent, and a goal the executor took after
        that STOP's cancel is cancelled at once."""
        with self._graph_lock:
            held = self._take_held(plan["id"])
            if approved and self._stops != stops:  # a held goal was cancelled by that STOP
                raise StoppedError(f"STOP came after plan {plan['id']} was approved: nothing was sent to move")
            if not approved:
                if held is None and not (
                    self.state.snapshot()["executor"]["state"] == "waiting_approval" and self.graph.requires_approval()
                ):
                    return "nothing was sent to the executor"
                taken, message = self.graph.answer_approval(False, APPROVAL_WAIT_S if held is not None else 0.0)
                return f"answered {'' if taken else '(not taken) '}/grounded_planner/approve: {message}"
            self._start_trial()
            if held is not None:
                taken, message = self.graph.answer_approval(True, APPROVAL_WAIT_S)
                if taken:
                    return (
                        "sent to /grounded_planner/execute at its preview, held by the executor, and approved "
                        f"on /grounded_planner/approve ({message})"
                    )
                if not held.ended():
                    raise GraphError(f"the executor did not take the approval: {message}")
                # the held goal ended meanwhile (the executor's approval timeout): it is sent again below
            self.graph.execute(plan["plan"])
            if self._cancelled_as_stopped(stops):
                raise StoppedError(
                    f"STOP came while plan {plan['id']} was on its way to the executor: its goal was cancelled as "
                    "soon as the executor took it"
                )
            # asked after the goal went out: the answer comes while the executor prepares to hold the plan
            if not self.graph.requires_approval():
                return "sent to /grounded_planner/execute"
            taken, message = self.graph.answer_approval(True, APPROVAL_WAIT_S)
            if not taken:
                raise GraphError(f"the executor did not take the approval: {message}")
            return f"sent to /grounded_planner/execute and approved on /grounded_planner/approve ({message})"

    def _start_trial(self) -> None:
        """The session's trial starts with its Approve."""
        if self._trial is not None and self._trial.get("trial_id") and not self._trial.get("started_at"):
            self._trial["started_at"], self._trial["t0"] = _now_iso(), time.monotonic()

    def _trial_not_started(self) -> None:
        """The Approve did not set the arm going (the executor refused it, a STOP came first): the trial starts with
        the next Approve, and the episode that closes meanwhile (the plan that did not run) is not its rollout."""
        trial = self._trial
        if trial is not None and not trial.get("rollout"):
            trial["started_at"], trial["t0"] = None, None

    async def _post_reset_scene(self, request: web.Request) -> web.Response:
        """The simulator's scene back at its start (between episodes): the executor's answer, logged with the client.
        A refusal (a plan running or held, a robot's scene) is 409 with the executor's reason."""
        client = request.remote or "?"
        try:
            done, message = await self._run(self.graph.reset_scene, pool=self._decide_pool)
        except GraphError as exc:
            self.note(f"scene reset from {client} failed: {exc}")
            return self._error(str(exc), 502)
        line = f"scene reset from {client}: {message}" if done else f"scene reset from {client} refused: {message}"
        self.note(line)
        return web.json_response({"reset": True, "message": message}) if done else self._error(message, 409)

    async def _post_stop(self, request: web.Request) -> web.Response:
        """Cancel the running goal, on a thread of its own: never queued behind the workers (all of them may be
        waiting on a planner that does not answer, up to ``plan_timeout_s``)."""
        client = request.remote or "?"
        self._stops += 1  # before the cancel goes out: a goal on its way meanwhile is cancelled once it is taken
        try:
            cancelled = await _on_own_thread(self.graph.stop)
        except GraphError as exc:
            self.note(f"STOP from {client} failed: {exc}")
            return self._error(str(exc), 502)
        self.note(f"STOP from {client}: {'the running goal was cancelled' if cancelled else 'no goal was running'}")
        return web.json_response({"cancelled": cancelled})

    # -- API: labels, tally, rollouts ----------------------------------------------------------------------------
    def _tally(self, closed: list[str] | None = None) -> list[dict[str, Any]]:
        try:
            return self.rollouts.tally() if closed is None else self.rollouts.tally_after_close(*closed)
        except (OSError, ValueError) as exc:
            log.warning("tally not computed: %s", exc)
            return []

    def on_rollout_closed(self, path: str) -> None:
        """From the graph: a rollout folder was closed; the label panel shows it with the stack's own label, and the
        tally counts it. With no page open it is only noted, and read when a page connects or asks for the state:
        the tally stats every known rollout again (1.6-1.8 ms of the console's CPU per episode at 100 rollouts, on
        the thread that takes the graph's news), for nobody to see."""
        with self._closed_lock:
            self._closed.append(path)
        trial = self._trial
        if trial is not None and trial.get("started_at") and not trial.get("rollout"):
            trial["rollout"] = str(path)  # the episode of the plan approved for it (an earlier plan's closed before)
        if self._loop_for_pages() is not None:
            self._settle_closed()

    def _settle_closed(self) -> None:
        """(any thread) The rollouts closed since the last call reach the label panel (the last of them) and the
        tally (all of them)."""
        with self._closed_lock:  # held throughout: two threads settling at once would set an older episode last
            closed, self._closed = self._closed, []
            if closed:
                self.state.on_closed(self.rollouts.episode(closed[-1]), self._tally(closed=closed))

    async def _get_taxonomy(self, request: web.Request) -> web.Response:
        return web.json_response({"failure_modes": FAILURE_MODES})

    async def _post_label(self, request: web.Request) -> web.Response:
        body = await self._json(request)
        client = request.remote or "?"
        rollout, success = str(body.get("rollout") or ""), body.get("success")
        mode, notes = body.get("failure_mode") or None, body.get("notes")
        if not isinstance(success, bool):
            return self._error("'success' must be true or false")
        try:
            # the operator's decision too: on the decision workers, never behind the rollouts pages' file reads
            trial, trial_error = await self._run(
                self._label,
                client,
                rollout,
                success,
                mode,
                None if notes is None else str(notes),
                pool=self._decide_pool,
            )
        except OutsideFolderError as exc:
            self.note(f"refused label from {client}: {exc}")
            raise web.HTTPNotFound() from None
        except NotARolloutError as exc:
            return self._error(str(exc), 404)
        except (RolloutError, FailureModeError) as exc:
            return self._error(str(exc))
        except OSError as exc:  # a full disk, a folder gone read-only: rollout.json is as it was (an atomic write)
            self.note(f"label of rollout {rollout} from {client} not saved: {exc}")
            return self._error(f"rollout {rollout}: {exc}", 507)
        return web.json_response(
            {"rollout": rollout, "success": success, "failure_mode": mode, "trial": trial, "trial_error": trial_error}
        )

    def _label(
        self, client: str, rollout: str, success: bool, mode: str | None, notes: str | None
    ) -> tuple[dict[str, Any] | None, str | None]:
        """(a worker) The label into the rollout, the label panel, the session's trial and the tally (a walk of the
        rollouts folder: 100-120 ms at 3,000 rollouts, which on the event loop held up STOP and every page)."""
        record = self.rollouts.save_label(rollout, success, mode, notes)
        self.note(f"rollout {rollout} labelled {'success' if success else 'failure: ' + str(mode)} by {client}")
        self._settle_closed()
        episode = self.state.snapshot()["episode"]
        if episode is not None and episode["id"] == rollout:
            self.state.on_episode(self.rollouts.episode(record.directory))
        trial = self._record_trial(record, success, mode)
        self.state.set_tally(self._tally())
        return trial

    def _record_trial(self, record, success: bool, mode: str | None) -> tuple[dict[str, Any] | None, str | None]:
        """The session's running trial ends with the label of its rollout: one line in trials.jsonl, then the next
        card. Returns the line, or why the trial was not recorded; (None, None) for a label of any other rollout (an
        older one, relabelled on the rollouts page while the trial runs), which records no trial."""
        trial = self._trial
        if self.session is None or trial is None or not trial.get("rollout"):
            return None, None
        if Path(trial["rollout"]).resolve() != Path(record.directory).resolve():
            return None, None
        d = record.data
        asked = str(d.get("instruction") or "")
        if asked != trial["instruction"]:  # the box edited before the Approve: not this card's trial
            if self._trial is trial:
                self._trial = None
            why = (
                f"trial {trial['trial_id']} not recorded: its plan asked {asked!r}, not the card's "
                f"{trial['instruction']!r}; run the trial again with the card's instruction"
            )
            self.note(why)
            return None, why
        steps = d.get("steps") or []
        grasp_attempted = (
            any(
                s.get("type") == "grasp" and s.get("outcome") not in ("outside_workspace", "unreachable") for s in steps
            )
            if steps
            else False
        )
        try:
            line = self.session.record(
                trial["trial_id"],
                success=success,
                failure_mode=mode,
                planner=str((d.get("plan") or {}).get("model") or d.get("model") or ""),
                rollout_dir=record.directory,
                grasp_attempted=grasp_attempted,
                error=d.get("planner_error") or d.get("error") or None,
                started_at=trial.get("started_at"),
                wall_s=None if trial.get("t0") is None else time.monotonic() - trial["t0"],
            )
        except (SessionError, OSError) as exc:  # OSError: a full disk (append_line leaves no half line)
            self.note(f"trial {trial['trial_id']} not recorded: {exc}")
            unreadable = isinstance(exc, SessionError) and (self._session_progress() or {}).get("error")
            if not (unreadable or isinstance(exc, OSError)) and self._trial is trial:
                self._trial = None  # recorded meanwhile by another terminal: this run of it is over
            # else it runs on: once the file is fixed or there is room, labelling again records it
            return None, f"trial {trial['trial_id']} not recorded: {exc}"
        if self._trial is trial:
            self._trial = None
        self._session_progress()
        return line, None

    def _filters(self, request: web.Request) -> dict[str, str]:
        return {k: request.query.get(k, "") for k in ("task", "condition", "outcome")}

    async def _get_rollouts(self, request: web.Request) -> web.Response:
        filters: dict[str, Any] = self._filters(request)
        for name in ("offset", "limit"):  # a page of the listing (the rollouts page asks 100 rows at a time)
            value = request.query.get(name, "")
            if value:
                try:
                    filters[name] = int(value)
                except ValueError:
                    return self._error(f"{name} must be a whole number, got {value!r}")
        try:  # made into JSON on the worker too: 0.9 MB at 3,000 rollouts
            text = await self._run(lambda: json.dumps(self.rollouts.list(**filters)))
        except ValueError as exc:
            return self._error(str(exc))
        response = web.Response(text=text, content_type="application/json")
        # compressed where the browser takes it (deflate or gzip: every browser does; aiohttp compresses off the event
        # loop): a campaign's listing, 0.9 MB at 3,000 rollouts, is what a tablet beside the cell loads over Wi-Fi at
        # each filter
        response.enable_compression()
        return response

    def _outside(self, request: web.Request, exc: Exception):
        self.note(f"refused {request.path}?{request.query_string} from {request.remote}: {exc}")
        return web.HTTPNotFound(text=json.dumps({"error": "no such rollout"}), content_type="application/json")

    async def _get_rollout(self, request: web.Request) -> web.Response:
        try:
            return web.json_response(await self._run(self.rollouts.detail, request.query.get("id", "")))
        except OutsideFolderError as exc:
            raise self._outside(request, exc) from None
        except NotARolloutError as exc:
            return self._error(str(exc), 404)

    async def _get_frame(self, request: web.Request) -> web.Response:
        try:
            k = int(request.query.get("k", "0"))
            width = int(request.query["w"]) if "w" in request.query else None  # w=0 is a width, and refused
        except ValueError:
            return self._error(
                f"k and w must be whole numbers, got k={request.query.get('k')!r}, w={request.query.get('w')!r}"
            )
        if width is not None and not 16 <= width <= 4096:
            return self._error(f"w (a thumbnail's width) must be 16-4096 pixels, got {width}")
        try:
            jpeg = await self._run(self.rollouts.frame_jpeg, request.query.get("id", ""), k, width)
        except OutsideFolderError as exc:
            raise self._outside(request, exc) from None
        except NotARolloutError as exc:
            return self._error(str(exc), 404)
        return web.Response(body=jpeg, content_type="image/jpeg", headers={"Cache-Control": "max-age=3600"})

    # -- API: evaluation session -----------------------------------------------------------------------------------
    def _session_progress(self) -> dict[str, Any] | None:
        """(a worker: trials.jsonl is read when it changed) The session's progress, as the pages are shown it."""
        if self.session is None:
            return None
        progress = self.session.progress()
        self.state.set_session(progress)
        return progress

    async def _get_session(self, request: web.Request) -> web.Response:
        if self.session is None:
            return web.json_response({"session": None})
        return web.json_response({"session": await self._run(self._session_progress), "trial": self._trial})

    async def _post_session_start(self, request: web.Request) -> web.Response:
        if self.session is None:
            return self._error("the console was started without a session folder (--session DIR)", 404)
        body = await self._json(request)
        try:
            card = self.session.card(str(body.get("trial_id") or ""))
        except SessionError as exc:
            return self._error(str(exc), 404)
        try:
            done = await self._run(self.session.done)
        except SessionError as exc:  # a bad line in trials.jsonl: no trial starts until it is fixed
            self.note(f"trial {card['trial_id']} not started: {exc}")
            await self._run(self._session_progress)
            return self._error(f"trial {card['trial_id']} not started: {exc}", 409)
        if card["trial_id"] in done:
            return self._error(f"trial {card['trial_id']} is already recorded", 409)
        running = self._trial
        if running is not None and running["trial_id"] == card["trial_id"] and running.get("started_at"):
            # Run this trial pressed again (a second page, a second tap) after its Approve: the same run goes on
            return web.json_response({"trial": running, "instruction": card["instruction"]})
        self._trial = {"trial_id": card["trial_id"], "instruction": card["instruction"], "started_at": None, "t0": None}
        self.note(f"trial {card['trial_id']} started by {request.remote}")
        return web.json_response({"trial": self._trial, "instruction": card["instruction"]})

    async def _get_session_file(self, request: web.Request) -> web.StreamResponse:
        if self.session is None:
            raise web.HTTPNotFound()
        try:
            path = self.session.file(request.query.get("path", ""))
        except OutsideFolderError as exc:
            raise self._outside(request, exc) from None
        if not path.is_file():
            raise web.HTTPNotFound()
        return web.FileResponse(path)
