"""Benchmark: the operator console's latencies, in a real browser (headless Chromium) against a real graph.

1. Approve click -> first motion command: the time the page's Approve button was clicked (the page's clock) to the
   stamp of the executor's first motion event (executor_node publishes it on /grounded_planner/execution/feedback
   just before it sends that motion to the robot backend; the sim backend here), with require_approval off (the
   console sends the goal) and on (the console sends the goal, the executor holds it, the console answers
   /grounded_planner/approve). Goal: <= 100 ms.
2. Camera frame -> shown in the browser at 1280x720: a camera stream at 30 Hz (stamped with the wall clock when
   published) to a console_node process of its own; the page records when each frame was decoded and on screen.
   Also the console process's CPU time per displayed frame (/proc/PID/stat), against the same process's CPU time
   over the same wall time with no page open (the baseline: nothing taken, nothing encoded). Goal: <= 150 ms.
3. What the console adds to a plan request: two bringups of the replay profile side by side (each in a ROS domain
   of its own), one without a console (the baseline: GroundedPlannerClient.plan from this process) and one with its
   console, where the plan is asked as the page asks it (POST /api/plan: the plan service, back-projected, the
   envelope's verdict per step, the push to the page) and, interleaved, directly (what the console's presence costs
   the rest of the graph): with no page open; with the live page open on the 1280x720 30 Hz stream in this machine's
   browser, the live view pausing while the planner answers (the console's default) and with live_while_planning
   true (frames all the while, set on the running console); and with the page open in a browser at nice 19 (a
   stand-in for the operator's tablet: it takes the CPUs only when the stack leaves them); and with the page on
   the operator's tablet as this machine sees it (RemotePage: a WebSocket client that takes frames as the page does
   and acknowledges each 80 ms later, ~12 frames/s, the drawing done elsewhere). The camera streams
   through every block, as a robot's does whether a page is open or not (runs before 2026-12-02 09:00 streamed only
   while a page was open, so their page-open figures also held the camera's own publishing). Blocks of each
   condition alternate round after round, so that the machine's load drifts over all alike; the CPU the browser
   and the console process used meanwhile is printed. Goal: <= 2 ms.
   Before the blocks, the same graphs paired request by request (--pairs, each pair in a seeded random order):
   through the console against direct, each request's total less the planner's own time (received -> answered, from
   its introspection events), and the graph with the console against the graph without; the median difference with
   its 95% bootstrap interval, and the console process's exact CPU time (schedstat) while each request was answered,
   with no page open and with the page on a tablet; and, its threads sampled every 4 ms (CpuTrace), the CPU it took
   while the planner itself worked on each direct request (the planner's received -> answered stamps), by thread.
   Each request through the console is split by its Server-Timing header: HTTP outside the console's handler, the
   handler's own parts (body, pool, preview, state), and its plan call beyond the planner's own time.
   The requests through the console are asked with the standard library's http.client over one kept-alive
   connection (PlainClient: as little client of its own as Python has, as a browser's native network stack), or
   with httpx (--client httpx; every run before 2026-12-05 04:00 asked with httpx, whose own time was in their HTTP).
4. The console's HTTP round trip on its own, first, before anything else loads the machine: ConsoleApp on its
   server with a graph that answers at once (InstantGraph), from each client (http.client, httpx): GET
   /api/taxonomy and POST /api/plan 10 ms apart, and POST /api/plan 1 s apart (as the plan requests come). A plan
   asked through the console cannot add less than this.
5. The tally the console recomputes after each episode, over a campaign's rollouts folder (--tally-rollouts, 3,000):
   the folder walked against the known rollouts and the closed one.
6. The console leaving the camera topic while the live view is paused (--pause-rounds, ConsoleNode.frames_paused),
   beside the 1280x720 30 Hz stream: what leaving costs the calling thread, the process's CPU over PAUSE_WINDOW_S
   subscribed and taking nothing (the baseline: the middleware still receives every image) against the same time
   with the topic left, and how long the first newer frame takes once a page asks again (subscribed anew); and how
   long the leaving holds the GIL (GilWatch: a pure-Python thread's longest gap while it runs, against its longest
   gap while the calling thread waits as long in a call that lets the GIL go).
7. An evaluation session's progress over a campaign's trials.jsonl (--session-trials, 2,892, Spa-Bench's count): read
   and checked at every ask (before) against the unchanged file's stat and a trial recorded (now).
8. The rollouts page over part 5's campaign folder: the listing's every row (before) against a page of 100 (now), as
   the console answers it, the folder's walk alone (pathlib, as the console walks it, and os.walk), and the page in
   Chromium drawing its first page and the next.
9. A rollout page's frames (--rollout-frames, 300): frame k read by scanning every frame before it (before) against
   found by its log time through the bag's chunk index, whole and as the strip's 240 px thumbnail (now); and of a
   thumbnail, the image's own work (decode, scale, encode) against decoding at a quarter of the size (not done).

Both clocks are this machine's wall clock (the browser's performance.timeOrigin + now() and the nodes' ROS clock).
The browser runs on this machine too (on a robot it runs on the operator's tablet), so its rendering takes CPU
from the stack in every figure here.
Run: .venv/bin/python benchmarks/bench_console.py [--approvals 10] [--plans 30] [--frames-s 10] [--pairs 100]
     [--tally-rollouts 3000] [--pause-rounds 10] [--session-trials 2892] [--rollout-frames 300] (0 skips a part)
     [--vlm-latency-s 0] (a served model's time) [--camera raw|compressed] (the camera's stream as rgb8 Images, or as
     image_transport's JPEG topic, .../compressed, which the console passes to the page as it came)
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import http.client
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import numpy as np
from rclpy.qos import QoSProfile

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "test"))  # the browser tests' stack and browser helpers (as other benchmarks do)
from helpers.browser import chromium, wait_until  # noqa: E402
from helpers.console_stack import (  # noqa: E402
    CONSOLE_URL,
    InstantGraph,
    Output,
    StackProcess,
    graph_node,
    ros_domain_of_its_own,
    server_timing,
    set_parameter,
    workcell_overrides,
    write_workcell,
)
from helpers.tabletop import INSTRUCTION, SCENE_COLORS  # noqa: E402

from grounded_planner.ros import names  # noqa: E402
from grounded_planner.ros.client import GroundedPlannerClient  # noqa: E402
from grounded_planner.vlm.fake_server import FakeVLMServer  # noqa: E402

FRAME_TOPIC = "/bench/camera/color/image_raw"  # with --camera compressed, image_transport's FRAME_TOPIC/compressed
WIDTH, HEIGHT, FPS = 1280, 720, 30
IDLE_S = 3.0  # the console's idle CPU is measured over this long, after the paired requests' warm-up, s
PLAN_GAP_S = 0.5  # between plan requests: the planner's and the logger's work after an answer is done by then
BLOCK = 5  # plan requests per block before the other graph's turn


CAMERA_KIND = "raw"  # --camera: "raw" (rgb8 Image) or "compressed" (JPEG CompressedImage, as realsense-ros with the
# image_transport plugins publishes it)


def camera_topic() -> str:
    return FRAME_TOPIC + ("/compressed" if CAMERA_KIND == "compressed" else "")


def stats_ms(samples_ms: list[float]) -> str:
    ms = sorted(samples_ms)
    p95 = ms[min(len(ms) - 1, int(round(0.95 * (len(ms) - 1))))]
    return f"median {statistics.median(ms):7.2f} ms   p95 {p95:7.2f} ms   max {ms[-1]:7.2f} ms   (n={len(ms)})"


def time_ms(fn, runs: int) -> list[float]:
    """``fn()`` called ``runs`` times: the wall time of each call in ms."""
    ms = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        ms.append((time.perf_counter() - t0) * 1000)
    return ms


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


class PlainAnswer:
    """An answer read by PlainClient, with the parts of httpx's Response the benchmark reads."""

    def __init__(self, status_code: int, headers, body: bytes):
        self.status_code, self.headers, self.content = status_code, headers, body

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self):
        return json.loads(self.content)


class PlainClient:
    """The console's API asked through the standard library's http.client, over one connection kept alive: as little
    client of its own as a Python program has, so that what is left of a request through the console is the
    console's (a browser's network stack is native code too). httpx spent 0.25 ms of its own around each request here
    back to back and 0.57 ms after an idle second (part 4 prints both clients). ``post(path, json=...)`` as httpx's.
    A request that finds the connection closed by the server meanwhile (aiohttp closes one idle for 75 s, before it
    reads anything more from it) is sent once more on a new one."""

    def __init__(self, url: str, timeout_s: float = 60.0):
        parts = urlsplit(url)
        self._conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout_s)

    _dumps = staticmethod(json.dumps)

    def _once(self, method: str, path: str, body: bytes | None) -> PlainAnswer:
        self._conn.request(
            method, path, body=body, headers={} if body is None else {"Content-Type": "application/json"}
        )
        response = self._conn.getresponse()
        return PlainAnswer(response.status, response.headers, response.read())

    def _request(self, method: str, path: str, body: bytes | None) -> PlainAnswer:
        try:
            return self._once(method, path, body)
        except (BrokenPipeError, ConnectionResetError):  # http.client's RemoteDisconnected is one
            self._conn.close()  # closed by the server while idle: a new connection
            return self._once(method, path, body)

    def get(self, path: str) -> PlainAnswer:
        return self._request("GET", path, None)

    def post(self, path: str, json: dict) -> PlainAnswer:  # noqa: A002 - httpx's name for it
        return self._request("POST", path, self._dumps(json).encode())

    def close(self) -> None:
        self._conn.close()


API_CLIENTS = {"plain": PlainClient, "httpx": lambda url: httpx.Client(base_url=url, timeout=60.0)}
API_CLIENT = "plain"  # --client: how the benchmark asks the console's API (plan requests through the console)


def client_name(kind: str) -> str:
    """The printed name of an API_CLIENTS key."""
    return "http.client" if kind == "plain" else kind


CAMERA = """
import sys, threading, time
import numpy as np, rclpy
from rclpy.qos import QoSProfile
from grounded_planner.ros.convert import numpy_to_image

rclpy.init()
node = rclpy.create_node("bench_camera")
base = np.load("{scene}")  # (height, width, 3) uint8 RGB
if {compressed}:  # image_transport's compressed topic: JPEG at compressed_image_transport's default quality (95)
    from sensor_msgs.msg import CompressedImage
    from grounded_planner.msgs.images import numpy_to_compressed
    frames = [numpy_to_compressed(np.roll(base, k * 64, axis=1), CompressedImage, quality=95) for k in range(8)]
else:
    frames = [numpy_to_image(np.roll(base, k * 64, axis=1), "rgb8") for k in range(8)]
for msg in frames:
    msg.header.frame_id = "camera_color_optical_frame"
publisher = node.create_publisher(type(frames[0]), "{topic}", QoSProfile(depth=2))
on, done = threading.Event(), threading.Event()

def commands():
    for line in sys.stdin:
        (on.set if line.strip() == "on" else on.clear)()
    done.set()
    on.set()

threading.Thread(target=commands, daemon=True).start()
print("camera ready", flush=True)
k, tick = 0, time.monotonic()
while not done.is_set():
    if not on.wait(0.1):
        continue
    msg = frames[k % len(frames)]
    msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(time.time_ns(), 1_000_000_000)
    publisher.publish(msg)
    k += 1
    tick = max(tick + 1.0 / {fps}, time.monotonic())
    time.sleep(max(0.0, tick - time.monotonic()))
"""


REMOTE_PAGE = """
import asyncio, json, sys, aiohttp

async def main():
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect("{url}ws") as ws:
            await ws.send_str(json.dumps({{"type": "frames", "width": {width}}}))
            print("remote page connected", flush=True)
            async for message in ws:
                if message.type == aiohttp.WSMsgType.BINARY:
                    await asyncio.sleep({ack_s})  # the tablet decodes and shows it, then asks for the next
                    await ws.send_str(json.dumps({{"type": "ack", "width": {width}}}))

asyncio.run(main())
"""
REMOTE_ACK_S = 0.08  # a frame shown 80 ms after it came: ~12 frames/s, what this machine's browser shows
REMOTE_WIDTH = 832  # the page's camera width in this benchmark's 1400 px browser window


class RemotePage:
    """The live page as the robot's computer sees it when it is open on the operator's tablet: a WebSocket client in a
    process of its own that asks for frames as the page does and acknowledges each REMOTE_ACK_S after it came, as
    wide as the page shows them; the decoding and drawing happen elsewhere, so none of their CPU is on this
    machine."""

    def __init__(self, url: str):
        code = REMOTE_PAGE.format(url=url, width=REMOTE_WIDTH, ack_s=REMOTE_ACK_S)
        self.output = Output(
            subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        )
        self.output.wait_for(re.compile("remote page connected"), 30)

    def close(self) -> None:
        self.output.child.kill()
        self.output.child.wait(timeout=10)


def scene_image(noise: bool) -> np.ndarray:
    """The camera's 1280x720 image: the real RealSense recording's office corner (test/fixtures/librealsense, read by
    librealsense) scaled up to 1280x960 and cut to 720 rows, so its JPEGs are as large as a real scene's; with
    ``noise``, random pixels, the worst case for JPEG (3-4x the bytes to encode, send and decode)."""
    if noise:
        return np.random.default_rng(0).integers(0, 255, (HEIGHT, WIDTH, 3), dtype=np.uint8)
    from helpers.realdata import real_frame

    from grounded_planner.console.jpeg import scale_to_width

    tall = scale_to_width(real_frame().color_rgb, WIDTH)
    top = (tall.shape[0] - HEIGHT) // 2
    return np.ascontiguousarray(tall[top : top + HEIGHT])


class CameraStream:
    """A 1280x720 stream at 30 Hz on camera_topic() (rgb8, or JPEG with --camera compressed) from a process of its
    own, as a camera node is (publishing from this process would take this process's GIL from the clients being
    timed), each frame stamped with the wall clock when it is published; ``on.set()`` / ``on.clear()`` switch it.
    ``scene``: an .npy of the image (each frame is it shifted sideways by a multiple of 64 px, so that consecutive
    frames differ)."""

    class _Switch:
        def __init__(self, child: subprocess.Popen):
            self.child = child

        def set(self) -> None:
            self.child.stdin.write("on\n")
            self.child.stdin.flush()

        def clear(self) -> None:
            self.child.stdin.write("off\n")
            self.child.stdin.flush()

    def __init__(self, scene: Path):
        code = CAMERA.format(scene=scene, topic=camera_topic(), fps=FPS, compressed=CAMERA_KIND == "compressed")
        child = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        self.output = Output(child)
        self.output.wait_for(re.compile("camera ready"), 60)
        self.on = self._Switch(child)

    def stop(self) -> None:
        self.output.child.stdin.close()
        try:
            self.output.child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.output.child.kill()


def open_live_page(driver, url: str) -> None:
    """The console's live page, connected and showing camera frames."""
    driver.get(url)
    wait_until(
        lambda: driver.execute_script("return document.getElementById('conn').textContent") == "online",
        20,
        "the page to connect",
    )


def approve_to_motion(driver, url: str, node, executor, events: list, runs: int) -> list[float]:
    """Plan in the page, click Approve, and time the click to the executor's first motion event."""
    open_live_page(driver, url)
    out = []
    for _ in range(runs):
        before = driver.find_element("id", "plan-title").text
        box = driver.find_element("id", "instruction")
        box.clear()
        box.send_keys(INSTRUCTION)
        driver.find_element("id", "plan-btn").click()
        wait_until(
            lambda: (
                driver.find_element("id", "plan-title").text not in ("", before)
                and not driver.find_element("id", "approve-btn").get_attribute("disabled")
            ),
            60,
            "a plan to approve",
        )
        events.clear()
        driver.execute_script(
            "document.getElementById('approve-btn').addEventListener('click', "
            "() => { window.gpClick = performance.timeOrigin + performance.now(); }, "
            "{capture: true, once: true});"
        )
        driver.find_element("id", "approve-btn").click()
        click_ms = driver.execute_script("return window.gpClick")

        def motions() -> list:  # this plan's motion events (the last plan's late ones are older than the click)
            return [e for e in events if e[1] != "awaiting_approval" and e[0] / 1e6 > click_ms]

        deadline = time.monotonic() + 30
        while not motions() and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.01)
        out.append(motions()[0][0] / 1e6 - click_ms)
        # let the plan finish (or end) before the next one: the executor takes one goal at a time
        wait_until(lambda: driver.find_element("id", "exec-badge").text == "executor: idle", 60, "the executor idle")
    return out


def cpu_s(pids) -> float:
    """CPU time (user + system) the processes ``pids`` have used so far, seconds (those that ended count 0)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (Linux /proc)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except FileNotFoundError:
            pass
    return out


class Condition:
    """One way of asking for plans, timed; the CPU the browser and the console process used meanwhile."""

    def __init__(self, what: str):
        self.what = what
        self.ms: list[float] = []
        self.call_ms: list[float] = []  # through the console: the plan call as the console timed it
        self.wall_s = self.browser_cpu_s = self.console_cpu_s = 0.0
        # while the requests themselves were answered (the pauses between them left out): the console's CPU
        self.request_wall_s = self.request_console_cpu_s = 0.0


def plan_overhead(
    pages: dict, url: str, console_pid: int, on, off, stream: CameraStream, plans: int, live_while_planning
) -> dict[str, Condition]:
    """Plan requests in blocks, round after round (the first round warms up), the 1280x720 camera streaming all the
    while (as a robot's camera does, whether a page is open or not): the graph without a console; the graph with one,
    no page open; with its live page open in this machine's browser (through the console, and direct), the live view
    pausing while the planner answers (the default) and with ``live_while_planning(True)`` (frames all the while); the
    default with the page in a browser at nice 19 (which takes the CPUs only when the stack leaves them: a stand-in
    for the operator's tablet)."""
    api = API_CLIENTS[API_CLIENT](url)
    out = {
        k: Condition(w)
        for k, w in (
            ("off", "no console in the graph (baseline)"),
            ("idle", "direct, the console there, no page"),
            ("idle_console", "through the console, no page open"),
            ("console", "through the console, its page open"),
            ("on", "direct, the console's page open"),
            ("live_console", "through the console, page, frames throughout"),
            ("live_on", "direct, page open, frames throughout"),
            ("remote_console", "through the console, page on a tablet"),
            ("remote_on", "direct, page on a tablet"),
            ("tablet_console", "through the console, page at nice 19"),
            ("tablet_on", "direct, page at nice 19"),
        )
    }

    def ask(key: str, record: bool) -> None:
        time.sleep(PLAN_GAP_S)
        cpu0 = cpu_s([console_pid])
        t0 = time.perf_counter()
        if key.endswith("console"):
            answer = api.post("/api/plan", json={"instruction": INSTRUCTION})
            assert answer.status_code == 200, answer.text
            call_ms = answer.json()["plan"]["duration_s"] * 1000
        else:
            client = off if key == "off" else on
            assert client.plan(INSTRUCTION, backproject=True, timeout_s=60.0).succeeded, client.last_error
        if record:
            out[key].ms.append((time.perf_counter() - t0) * 1000)
            out[key].request_wall_s += time.perf_counter() - t0
            out[key].request_console_cpu_s += cpu_s([console_pid]) - cpu0
            if key.endswith("console"):
                out[key].call_ms.append(call_ms)

    live = [False]

    def block(keys: tuple[str, ...], page: str | None, record: bool, live_during_plans: bool = False) -> None:
        for driver in pages.values():
            driver.get("about:blank")
        if live_during_plans != live[0]:
            live_while_planning(live_during_plans)
            live[0] = live_during_plans
        browser, remote = [], None
        if page == "remote":
            remote = RemotePage(url)
            time.sleep(1.0)  # frames flowing
            browser = [remote.output.child.pid]
        elif page is not None:
            open_live_page(pages[page], url)
            wait_until(lambda: pages[page].execute_script("return window.gpShown.length") > 5, 30, "frames shown")
            browser = descendants(pages[page].service.process.pid)
        t0, b0, c0 = time.monotonic(), cpu_s(browser), cpu_s([console_pid])
        for k in range(BLOCK):
            for key in keys if k % 2 else reversed(keys):
                ask(key, record)
        if record:
            for key in keys:
                out[key].wall_s += time.monotonic() - t0
                out[key].browser_cpu_s += cpu_s(browser) - b0
                out[key].console_cpu_s += cpu_s([console_pid]) - c0
        if remote is not None:
            remote.close()

    stream.on.set()
    for round_ in range(1 + -(-plans // BLOCK)):
        record = round_ > 0
        block(("off",), None, record)
        block(("idle", "idle_console"), None, record)
        block(("console", "on"), "here", record)
        block(("live_console", "live_on"), "here", record, live_during_plans=True)
        block(("remote_console", "remote_on"), "remote", record)
        block(("tablet_console", "tablet_on"), "tablet", record)
    stream.on.clear()
    if live[0]:
        live_while_planning(False)
    return out


def median_ci(diffs_ms: list[float], seed: int = 0, resamples: int = 4000) -> tuple[float, float, float]:
    """The median of paired differences and its 95% bootstrap interval (percentile method)."""
    d = np.asarray(diffs_ms)
    medians = np.median(np.random.default_rng(seed).choice(d, (resamples, len(d))), axis=1)
    return float(np.median(d)), float(np.percentile(medians, 2.5)), float(np.percentile(medians, 97.5))


class PlanEvents:
    """The planner's plan-service introspection events (names.PLAN_SERVICE_EVENTS): when it received each request
    and sent its answer, by its own clock. A request's total minus that is what the path around the planner took."""

    def __init__(self, node, executor):
        from grounded_planner_interfaces.srv import GetGroundedPlan

        self._executor = executor
        self.seen: dict[tuple, dict[int, float]] = {}
        self.last: tuple[float, float] | None = None  # the last server_ms_since's (received, answered), wall clock
        node.create_subscription(GetGroundedPlan.Event, names.PLAN_SERVICE_EVENTS, self._on_event, QoSProfile(depth=50))

    def _on_event(self, event) -> None:
        stamp = event.info.stamp.sec + event.info.stamp.nanosec * 1e-9
        self.seen.setdefault((bytes(event.info.client_gid), event.info.sequence_number), {})[event.info.event_type] = (
            stamp
        )

    def server_ms_since(self, count: int) -> float | None:
        """The planner's own time (received -> answered) of the one request that came after the first ``count``
        events' requests (None unless exactly one came, answered)."""
        from service_msgs.msg import ServiceEventInfo

        deadline = time.monotonic() + 0.2
        while time.monotonic() < deadline:
            self._executor.spin_once(timeout_sec=0.02)
        new = [v for v in list(self.seen.values())[count:] if len(v) == 2]
        if len(new) != 1:
            self.last = None
            return None
        self.last = (new[0][ServiceEventInfo.REQUEST_RECEIVED], new[0][ServiceEventInfo.RESPONSE_SENT])
        return 1000 * (self.last[1] - self.last[0])


def run_ns(pid: int) -> int:
    """CPU time of all of a process's threads so far, ns (/proc/PID/task/*/schedstat: exact, where /proc/PID/stat
    counts 10 ms ticks)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            total += int((task / "schedstat").read_text().split()[0])
    return total


class CpuTrace:
    """The CPU time of each thread of process ``pid``, sampled every PERIOD_S by a thread of this process while the
    ``with`` block runs (/proc/PID/task/TID/schedstat, each file held open), so that the CPU the process took in any
    window inside the block (the planner's own time, from its introspection stamps) is read by interpolation, thread
    by thread. The sampling costs this process a few per cent of a core; it runs around every request of a pair,
    so that both sides pay it alike."""

    PERIOD_S = 0.004

    def __init__(self, pid: int):
        self.pid = pid
        self.samples: list[tuple[float, dict[str, int]]] = []  # (wall clock, {thread: ns so far})
        self.names: dict[str, str] = {}  # thread id -> its name (comm)
        self._files: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-trace", daemon=True)

    def __enter__(self) -> CpuTrace:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
        for fd in self._files.values():
            os.close(fd)

    def _run(self) -> None:
        while not self._stop.wait(self.PERIOD_S):
            self._sample()

    def _sample(self) -> None:
        now, ns = time.time(), {}
        for tid in os.listdir(f"/proc/{self.pid}/task"):
            with contextlib.suppress(OSError, ValueError):
                if tid not in self._files:
                    self.names[tid] = Path(f"/proc/{self.pid}/task/{tid}/comm").read_text().strip()
                    self._files[tid] = os.open(f"/proc/{self.pid}/task/{tid}/schedstat", os.O_RDONLY)
                ns[tid] = int(os.pread(self._files[tid], 128, 0).split()[0])
        self.samples.append((now, ns))

    def _at(self, times: list[float], tid: str, t: float) -> float:
        """Thread ``tid``'s CPU so far at wall-clock time ``t``, ns (linear between the samples around it; ``times``:
        the samples' times)."""
        i = min(max(0, bisect.bisect_right(times, t) - 1), len(times) - 2)
        (t_a, a), (t_b, b) = self.samples[i], self.samples[i + 1]
        ns_a, ns_b = a.get(tid, 0), b.get(tid, a.get(tid, 0))
        share = min(1.0, max(0.0, (t - t_a) / max(t_b - t_a, 1e-9)))
        return ns_a + share * (ns_b - ns_a)

    def ms_between(self, t0: float, t1: float) -> dict[str, float]:
        """The CPU each thread took from ``t0`` to ``t1`` (wall clock), ms, by thread name."""
        out: dict[str, float] = {}
        times = [s[0] for s in self.samples]
        for tid, name in self.names.items():
            out[name] = out.get(name, 0.0) + (self._at(times, tid, t1) - self._at(times, tid, t0)) / 1e6
        return out


def planner_working(working: list[dict[str, float]]) -> str:
    """The console's CPU while the planner worked on each direct request (its received -> answered stamps): in all,
    and the part in Fast DDS's own threads (dds.*: receiving what the console subscribes to) and the threads that
    took most."""
    if not working:
        return ""
    in_all = sorted(sum(w.values()) for w in working)
    dds = [sum(ms for name, ms in w.items() if name.startswith("dds.")) for w in working]
    by_name: dict[str, float] = {}
    for w in working:
        for name, ms in w.items():
            by_name[name] = by_name.get(name, 0.0) + ms / len(working)
    top = ", ".join(f"{name} {ms:.2f}" for name, ms in sorted(by_name.items(), key=lambda kv: -kv[1])[:4])
    return (
        f"\n    the console's CPU while the planner worked on the request (its received -> answered stamps; "
        f"sampled every {CpuTrace.PERIOD_S * 1000:.0f} ms): mean {statistics.mean(in_all):.2f} ms, "
        f"median {statistics.median(in_all):.2f}, p95 {in_all[int(0.95 * (len(in_all) - 1))]:.2f}; in Fast DDS's "
        f"threads {statistics.mean(dds):.2f}; by thread (mean ms): {top}"
    )


def request_split(timing: dict[str, float], total_ms: float, planner_ms: float, direct_beyond_ms: float) -> dict:
    """One request through the console, from the client's total, the console's Server-Timing and the planner's own
    received -> answered time: HTTP (all outside the console's handler: the client, the connection, aiohttp's parsing,
    the body's writing), the console's own parts in its handler, and its plan service call beyond the planner's
    time, against the same for the direct request it was paired with."""
    own = {k: v for k, v in timing.items() if k not in ("call", "total")}
    return {
        "http": total_ms - timing["total"],
        "handler": timing["total"] - timing["call"],
        "call": timing["call"] - planner_ms,
        "direct_call": direct_beyond_ms,
        **{f"handler.{k}": v for k, v in own.items()},
    }


def console_split(split: list[dict[str, float]]) -> str:
    """Medians of request_split over the requests through the console."""
    if not split:
        return ""

    def med(key: str) -> float:
        return statistics.median(s.get(key, 0.0) for s in split)

    parts = ", ".join(f"{k[len('handler.') :]} {med(k):.2f}" for k in split[0] if k.startswith("handler."))
    return (
        f"\n    where a request through the console went (medians, ms; its Server-Timing header): HTTP outside the "
        f"handler {med('http'):.2f}; the console's handler less its plan call {med('handler'):.2f} ({parts}); the "
        f"plan call beyond the planner's own time {med('call'):.2f} (a direct request's {med('direct_call'):.2f})"
    )


def plan_paired(url: str, console_pid: int, node, executor, client, off_client, pairs: int, page: str | None) -> None:
    """What the console adds to a plan request, paired request by request, each pair in a random order (seeded), so
    that the machine's drift falls on both halves alike:

    * its presence: a direct request (GroundedPlannerClient from this process) to the graph with the console, against
      one to the graph without (the other ROS domain), and the console process's CPU time while each request to its
      graph was answered (all its threads, exact). A process that the planner never waits on slows a request only
      by the CPU it takes from it meanwhile, so that CPU time bounds what the console adds, with no spread from
      the planner at all.
    * a request through the console's API (POST /api/plan, as the page asks) against a direct one: each request's
      total minus the planner's own time (its introspection events: received -> answered), so the planner's and the
      VLM's spread drop out; the difference is the console's path (HTTP, the pool, the preview, JSON).
    """
    import random

    rng = random.Random(7)
    events = PlanEvents(node, executor)
    api = API_CLIENTS[API_CLIENT](url)
    remote = RemotePage(url) if page == "remote" else None
    where = "the page on a tablet" if remote else "no page open"

    def direct(c=client) -> float:
        t0 = time.perf_counter()
        assert c.plan(INSTRUCTION, backproject=True, timeout_s=60.0).succeeded, c.last_error
        return (time.perf_counter() - t0) * 1000

    def without_console() -> float:
        return direct(off_client)

    timings: list[dict[str, float]] = []  # each request through the console: its Server-Timing header

    def through_console() -> float:
        t0 = time.perf_counter()
        answer = api.post("/api/plan", json={"instruction": INSTRUCTION})
        total = (time.perf_counter() - t0) * 1000
        assert answer.status_code == 200, answer.text
        timings.append(server_timing(answer.headers["Server-Timing"]))
        return total

    try:
        for label, a, b in (
            ("its presence: direct, the graph with the console - the graph without", direct, without_console),
            ("through the console - direct, each less the planner's own time", through_console, direct),
        ):
            totals, diffs, cpu_ms, all_ms = {a: [], b: []}, [], [], []
            working: list[dict[str, float]] = []  # the console's CPU by thread while the planner worked, ms
            split: list[dict[str, float]] = []  # each request through the console, where its time went, ms
            since = None  # (CPU, time) at the start of the last direct request to the console's graph
            idle_ns_per_s = 0.0

            def all_since(cpu_now: int) -> float:
                """The console's CPU since ``since`` less its idle rate, ms."""
                return (cpu_now - since[0] - idle_ns_per_s * (time.monotonic() - since[1])) / 1e6

            for k in range(pairs + 3):  # the first 3 pairs warm up
                result = {}
                if k == 3:  # the console's idle CPU, once the warm-up's discovery and first requests are over
                    time.sleep(PLAN_GAP_S)
                    idle_cpu0, idle_t0 = run_ns(console_pid), time.monotonic()
                    time.sleep(IDLE_S)
                    idle_ns_per_s = (run_ns(console_pid) - idle_cpu0) / (time.monotonic() - idle_t0)
                for ask in rng.sample([a, b], 2):
                    time.sleep(PLAN_GAP_S)
                    count, cpu0 = len(events.seen), run_ns(console_pid)
                    if since is not None:  # the last one's messages have all come by now (PLAN_GAP_S)
                        all_ms.append(all_since(cpu0))
                        since = None
                    # (not with a page open: its live view, paused while the planner works, is most of the idle)
                    if ask is direct and b is without_console and k >= 3 and remote is None:
                        since = (cpu0, time.monotonic())
                    with CpuTrace(console_pid) as trace:
                        total = ask()
                    cpu = run_ns(console_pid) - cpu0
                    server = None if ask is without_console else events.server_ms_since(count)
                    result[ask] = (total, server, cpu / 1e6)
                    if ask is direct and b is without_console and k >= 3 and events.last is not None:
                        working.append(trace.ms_between(*events.last))
                if k < 3 or any(r[1] is None for ask, r in result.items() if ask is not without_console):
                    continue
                for ask in (a, b):
                    totals[ask].append(result[ask][0])
                if b is without_console:
                    diffs.append(result[a][0] - result[b][0])
                    cpu_ms.append(result[a][2])
                else:
                    diffs.append((result[a][0] - result[a][1]) - (result[b][0] - result[b][1]))
                    split.append(request_split(timings[-1], result[a][0], result[a][1], result[b][0] - result[b][1]))
            if since is not None:
                time.sleep(PLAN_GAP_S)
                all_ms.append(all_since(run_ns(console_pid)))
            median, low, high = median_ci(diffs)
            cpu = sorted(cpu_ms)
            print(
                f"plan request, paired, {where}, {label}:\n    {median:+.2f} ms (95% CI {low:+.2f} .. {high:+.2f}; "
                f"{len(diffs)} pairs); totals: {stats_ms(totals[a])} | {stats_ms(totals[b])}"
                + (
                    f"\n    the console process's CPU while a request was answered: mean {statistics.mean(cpu):.2f} ms, "
                    f"median {statistics.median(cpu):.2f}, p95 {cpu[int(0.95 * (len(cpu) - 1))]:.2f}"
                    if cpu
                    else ""
                )
                + (
                    f"\n    all of the console's CPU per request (from its start to the next one, less the console's "
                    f"idle {idle_ns_per_s / 1e6:.2f} ms/s): mean {statistics.mean(all_ms):.2f} ms, "
                    f"median {statistics.median(all_ms):.2f}"
                    if all_ms
                    else ""
                )
                + planner_working(working)
                + console_split(split)
                + f"; {load()}"
            )
    finally:
        if remote is not None:
            remote.close()


PAUSE_WINDOW_S = 0.3  # each window of the camera-pause part: about a plan request's planner time here
GIL_AFTER_S = 0.05  # how long GilWatch goes on watching after frames_paused returned


class GilWatch:
    """While open, a pure-Python thread of this process turns as fast as it can and keeps its longest gap between two
    turns: how long some other thread of the process held the GIL meanwhile (a C call that does not let it go).
    ``longest_ms`` once closed."""

    def __init__(self):
        self.longest_ms = 0.0
        self._stop = threading.Event()
        self._turning = threading.Event()
        self._thread = threading.Thread(target=self._turn, name="gil-watch", daemon=True)

    def _turn(self) -> None:
        longest, last = 0.0, time.perf_counter()
        self._turning.set()
        while not self._stop.is_set():
            now = time.perf_counter()
            longest, last = max(longest, now - last), now
        self.longest_ms = longest * 1000

    def __enter__(self) -> GilWatch:
        self._thread.start()
        self._turning.wait()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def camera_pause(tmp: Path, scene: Path, rounds: int) -> None:
    """6. ConsoleNode.frames_paused beside the 1280x720 30 Hz stream (CameraStream, a process of its own): a console
    node in this process (its HTTP server idle, no page), frames taken by calling latest_frame as the frame pump
    does (as wide as the tablet's page shows them). Round after round: a frame taken (subscribed), PAUSE_WINDOW_S
    subscribed and taking nothing, frames_paused() (the calling thread's CPU, and the GIL held: GilWatch's longest
    gap, against the same watch while the calling thread sleeps as long), PAUSE_WINDOW_S with the topic left, then
    the wait for a newer frame. This process's CPU (all its threads: the executor and Fast DDS's receive)."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.parameter import Parameter

    from grounded_planner.ros.console_node import ConsoleNode

    stream = CameraStream(scene)
    stream.on.set()
    context = rclpy.Context()
    rclpy.init(context=context)
    values = {"port": 0, "rollouts_dir": str(tmp / "pause"), "color_topic": camera_topic()}
    node = ConsoleNode(context=context, parameter_overrides=[Parameter(k, value=v) for k, v in values.items()])
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    threading.Thread(target=executor.spin, name="pause-executor", daemon=True).start()
    seq = [0]

    def newer_frame() -> float:
        """Ask as the frame pump does until a frame newer than the last comes; the wait, ms."""
        t0 = time.perf_counter()
        while (frame := node.latest_frame(seq[0], REMOTE_WIDTH)) is None:
            if time.perf_counter() - t0 > 10.0:
                raise RuntimeError(f"no camera frame on {camera_topic()} within 10 s")
            time.sleep(0.005)
        seq[0] = frame.seq
        return (time.perf_counter() - t0) * 1000

    def cpu_ms_over(window_s: float) -> float:
        c0 = time.process_time()
        time.sleep(window_s)
        return (time.process_time() - c0) * 1000

    try:
        newer_frame()
        leave, subscribed, left, back, held, slept = [], [], [], [], [], []
        for _ in range(rounds):
            newer_frame()
            subscribed.append(cpu_ms_over(PAUSE_WINDOW_S))
            with GilWatch() as watch:
                t0, w0 = time.thread_time(), time.perf_counter()
                node.frames_paused()
                leave.append((time.thread_time() - t0) * 1000)
                took_s = time.perf_counter() - w0
                time.sleep(GIL_AFTER_S)  # rclpy may finish the destroy on the executor's thread, once its wait ends
            held.append(watch.longest_ms)
            with GilWatch() as watch:  # the baseline: as long a wait that lets the GIL go
                time.sleep(took_s + GIL_AFTER_S)
            slept.append(watch.longest_ms)
            left.append(cpu_ms_over(PAUSE_WINDOW_S))
            back.append(newer_frame())
        print(
            f"the camera left while the live view is paused ({rounds} rounds, {PAUSE_WINDOW_S * 1000:.0f} ms windows, "
            f"1280x720 {FPS} Hz {CAMERA_KIND}): leaving: {stats_ms(leave)}\n"
            f"    the GIL held meanwhile (another thread's longest wait): {stats_ms(held)} | "
            f"while the caller sleeps as long (baseline) {stats_ms(slept)}\n"
            f"    this process's CPU per window: subscribed, taking nothing (baseline) {stats_ms(subscribed)} | "
            f"left {stats_ms(left)}\n    the first newer frame once asked again: {stats_ms(back)}; {load()}"
        )
    finally:
        stream.stop()
        executor.shutdown()
        node.destroy_node()
        context.try_shutdown()


def frame_to_screen(driver, node, tmp: Path, frames_s: float, stream: CameraStream) -> None:
    """Camera frame -> shown, 1280x720 at 30 Hz, to a console process of its own; its CPU per displayed frame."""
    child = Output(
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "grounded_planner.ros.console_node",
                "--ros-args",
                "-p",
                "port:=0",
                "-p",
                f"color_topic:={camera_topic()}",
                "-p",
                f"rollouts_dir:={tmp / 'rollouts'}",
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
    )
    try:
        cam_url = child.wait_for(CONSOLE_URL, 60).group(1)
        stream.on.set()
        time.sleep(2.0)
        idle0 = child.cpu_s()
        time.sleep(frames_s)
        idle_cpu = child.cpu_s() - idle0  # the baseline: the stream published, no page open
        driver.get(cam_url)
        wait_until(lambda: driver.execute_script("return window.gpShown.length") > 5, 30, "frames in the page")
        time.sleep(1.0)
        shown0 = driver.execute_script("return window.gpShown.length")
        cpu0 = child.cpu_s()
        time.sleep(frames_s)
        cpu = child.cpu_s() - cpu0
        shown = driver.execute_script("return window.gpShown")
        sent_width = driver.execute_script("return document.getElementById('camera').naturalWidth")
        stream.on.clear()
        time.sleep(0.5)  # the last frame stays on screen: its blob is released only when a newer one is shown
        sent_bytes = driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "fetch(document.getElementById('camera').src).then((r) => r.blob()).then((b) => done(b.size));"
        )
        window = shown[-(len(shown) - shown0) :] if len(shown) > shown0 else []
        latency = [s["shown_ms"] - int(s["stamp_ns"]) / 1e6 for s in window]
        print(f"camera frame (1280x720, {FPS} Hz published) -> shown in the browser: {stats_ms(latency)}")
        sent = "the camera's own JPEG" if CAMERA_KIND == "compressed" and sent_width == WIDTH else "the page's width"
        print(
            f"  sent {sent_width} px wide ({sent}), {sent_bytes / 1000:.0f} kB a frame; "
            f"displayed {len(window) / frames_s:.1f} frames/s; "
            f"console process CPU {cpu / max(1, len(window)) * 1000:.1f} ms per displayed frame "
            f"({cpu / frames_s * 100:.0f} % of a core; with no page open: {idle_cpu / frames_s * 100:.1f} %); {load()}"
        )
    finally:
        driver.get("about:blank")
        child.child.send_signal(2)
        child.child.wait(timeout=30)


def http_floor(tmp: Path, runs: int = 200, idle_runs: int = 20) -> None:
    """4. The console's HTTP round trip on its own (ConsoleApp on its server, InstantGraph), from each client the plan
    requests through the console can be asked with (--client): a trivial GET /api/taxonomy and POST /api/plan, 10 ms
    apart, and POST /api/plan after an idle second (as the plan requests come)."""
    from grounded_planner.console.app import ConsoleApp
    from grounded_planner.console.server import ConsoleServer

    server = ConsoleServer(
        ConsoleApp(InstantGraph(), rollouts_dir=tmp / "floor", note=lambda _line: None), "127.0.0.1", 0
    )
    server.start()
    try:
        for kind, make in API_CLIENTS.items():
            api = make(server.url)

            def plan():
                return api.post("/api/plan", json={"instruction": "a"})

            for label, call, n, gap_s in (
                ("GET /api/taxonomy", lambda: api.get("/api/taxonomy"), runs, 0.01),
                ("POST /api/plan, an instant graph", plan, runs, 0.01),
                ("the same, 1 s apart", plan, idle_runs, 1.0),
            ):
                ms = []
                for k in range(n + 3):  # the first 3 warm up
                    time.sleep(gap_s)
                    t0 = time.perf_counter()
                    assert call().status_code == 200
                    if k >= 3:
                        ms.append((time.perf_counter() - t0) * 1000)
                print(
                    f"the console's HTTP round trip from {client_name(kind):11}, {label:34}: {stats_ms(ms)}; {load()}"
                )
            api.close()
    finally:
        server.stop()


def tally_at_scale(tmp: Path, rollouts: int, runs: int = 20) -> None:
    """5. The tally the console recomputes after each episode, in a campaign's rollouts folder (``rollouts`` of
    them, each a RolloutRecorder folder with two frames): the whole folder walked (as before, and still at the
    console's start, a label and the rollouts page) against the known rollouts and the closed one
    (``tally_after_close``). The cache of records is warm in both: what is left is the walk, the stat of each
    rollout.json and the counting."""
    import shutil

    from grounded_planner.console.rollouts import RolloutStore
    from grounded_planner.rollout.record import RolloutRecorder

    root = tmp / "campaign"
    with RolloutRecorder(root / "r00000", instruction="pick", task="pick", condition="id", fsync_every_s=None) as rec:
        rec.log_color(np.full((24, 32, 3), 120, np.uint8))
        rec.log_color(np.full((24, 32, 3), 200, np.uint8))
        rec.set_label(True, None, source="human")
    for k in range(1, rollouts):
        shutil.copytree(root / "r00000", root / f"r{k:05d}")
    store = RolloutStore(root)
    store.tally()  # reads every record once (the console's start)
    closed = root / f"r{rollouts - 1:05d}"
    for label, fn in (
        ("the folder walked", store.tally),
        ("after a close, no walk", lambda: store.tally_after_close(closed)),
    ):
        ms = []
        for _ in range(runs):
            t0 = time.perf_counter()
            (group,) = fn()
            ms.append((time.perf_counter() - t0) * 1000)
            assert group["n"] == rollouts
        print(f"the tally over {rollouts} rollouts, {label:24}: {stats_ms(ms)}")


def rollouts_page_at_scale(tmp: Path, rollouts: int, runs: int = 20) -> None:
    """8. The rollouts page over the campaign's folder of part 5: the listing as the page asked it before (every row)
    against one page of it (100 rows, as the page asks now), the console's HTTP answer from httpx (time and bytes,
    uncompressed); and in headless Chromium, the page opened until its first 100 rows are drawn, and "older" clicked
    until the next 100 are."""
    from grounded_planner.console.app import ConsoleApp
    from grounded_planner.console.server import ConsoleServer

    server = ConsoleServer(
        ConsoleApp(InstantGraph(), rollouts_dir=tmp / "campaign", note=lambda _line: None), "127.0.0.1", 0
    )
    server.start()
    driver = None
    try:
        with httpx.Client(base_url=server.url, timeout=30.0, headers={"Accept-Encoding": "identity"}) as http:
            for label, query in (("every row (before)", ""), ("one page of 100 (now)", "?offset=0&limit=100")):
                ms, size = [], 0
                for k in range(runs + 2):  # the first two warm up (the first reads every rollout.json)
                    t0 = time.perf_counter()
                    reply = http.get("/api/rollouts" + query)
                    if k >= 2:
                        ms.append((time.perf_counter() - t0) * 1000)
                    assert reply.status_code == 200 and reply.json()["total"] == rollouts
                    size = len(reply.content)
                print(f"GET /api/rollouts at {rollouts} rollouts, {label:22}: {stats_ms(ms)}; {size / 1000:.0f} kB")
        # what is left of a page's answer: the folder's walk (the console's, pathlib) and os.walk in its place
        campaign = tmp / "campaign"
        for label, walk in (
            ("pathlib rglob (the console's)", lambda: sorted(campaign.rglob("rollout.json"))),
            (
                "os.walk (not used)",
                lambda: sorted(Path(d) for d, _, files in os.walk(campaign) if "rollout.json" in files),
            ),
        ):
            print(f"the rollouts folder's walk at {rollouts} rollouts, {label:29}: {stats_ms(time_ms(walk, runs))}")
        driver = chromium()
        drawn = """const done = arguments[arguments.length - 1], want = arguments[0];
            (function poll() { const a = document.querySelector('#rollout-list tbody a');
              if (a && document.getElementById('rollout-count').textContent.startsWith(want)) done(performance.now());
              else requestAnimationFrame(poll); })();"""
        # before pages: the whole listing asked and every row drawn, by the page's own row builder
        every = """const done = arguments[arguments.length - 1], t0 = performance.now();
            fetch('/api/rollouts').then(r => r.json()).then(data => {
              document.querySelector('#rollout-list tbody').replaceChildren(...data.rollouts.map(rolloutRow));
              requestAnimationFrame(() => done([data.rollouts.length, performance.now() - t0])); });"""
        opened, older, whole = [], [], []
        for k in range(max(3, runs // 4) + 1):
            driver.get(server.url + "rollouts")  # performance.now() counts from this navigation's start
            t = driver.execute_async_script(drawn, "1–100 of")
            t0 = driver.execute_script("document.getElementById('rollouts-older').click(); return performance.now()")
            t1 = driver.execute_async_script(drawn, "101–200 of")
            n, t_every = driver.execute_async_script(every)
            assert n == rollouts
            if k:  # the first warms up
                opened.append(t)
                older.append(t1 - t0)
                whole.append(t_every)
        for label, ms in (
            ("opened -> 100 rows drawn", opened),
            ("older clicked -> drawn", older),
            ("every row asked -> drawn (before)", whole),
        ):
            print(f"the rollouts page at {rollouts} rollouts in Chromium, {label:33}: {stats_ms(ms)}")
    finally:
        if driver is not None:
            driver.quit()
        server.stop()


def rollout_frames(tmp: Path, frames: int, runs: int = 10) -> None:
    """9. A rollout page's frames: a rollout of ``frames`` 1280x720 colour frames with their depth (the logger's 2 Hz
    over 2.5 minutes at 300), the page asking each frame of its strip. Frame k as the console served it before
    (every colour frame up to the k-th read and decoded, the k-th encoded whole) against now (found by its log time
    through the bag's chunk index, and scaled to the strip's 240 px)."""
    import io

    from PIL import Image

    from grounded_planner.console.jpeg import encode_jpeg, scale_to_width
    from grounded_planner.console.rollouts import RolloutStore
    from grounded_planner.rollout.bag import image_to_rgb
    from grounded_planner.rollout.record import RolloutRecorder

    root = tmp / "long_rollout"
    scene = (np.random.default_rng(0).random((720, 1280, 3)) * 40 + 100).astype(np.uint8)
    with RolloutRecorder(root / "ep", instruction="pick", fsync_every_s=None) as rec:
        for k in range(frames):
            rec.log_color(np.roll(scene, 7 * k, axis=1))
            rec.log_depth(np.full((720, 1280), 800 + k, np.uint16))
    store = RolloutStore(root)
    record = store.record("ep")

    def before(k: int) -> bytes:
        for seen, message in enumerate(m for m in store._colour_messages(record) if m.msg is not None):
            if seen == k:
                return encode_jpeg(image_to_rgb(message.msg))
        raise AssertionError(k)

    store.frame_jpeg("ep", 0)  # the frames' log times, read once per bag
    size = (root / "ep" / "rollout.mcap").stat().st_size / 1e6
    for label, fn in (
        ("every frame up to k (before)", before),
        ("by its log time, whole (now)", lambda k: store.frame_jpeg("ep", k)),
        ("by its log time, 240 px (now)", lambda k: store.frame_jpeg("ep", k, 240)),
    ):
        for k in (0, frames // 2, frames - 1):
            ms = time_ms(lambda: fn(k), runs)
            print(
                f"a rollout of {frames} frames ({size:.0f} MB), frame {k:3d}, {label:30}: {stats_ms(ms)}; "
                f"{len(fn(k)) / 1000:.0f} kB"
            )
    # of a thumbnail's time, the image's own work (the logged JPEG decoded, scaled, encoded) against decoding it at a
    # quarter of its size, as libjpeg can (Pillow's draft mode; not done)
    logged = next(m.msg for m in store._colour_messages(record) if m.msg is not None)

    def quarter() -> bytes:
        image = Image.open(io.BytesIO(bytes(logged.data)))
        image.draft("RGB", (image.width // 4, image.height // 4))
        return encode_jpeg(scale_to_width(np.asarray(image.convert("RGB")), 240))

    for label, fn in (
        ("decoded whole (now)", lambda: encode_jpeg(scale_to_width(image_to_rgb(logged), 240))),
        ("decoded at a quarter (not done)", quarter),
    ):
        print(f"a thumbnail's image work alone, 240 px, {label:31}: {stats_ms(time_ms(fn, runs))}")


def session_at_scale(tmp: Path, trials: int, runs: int = 20) -> None:
    """7. An evaluation session's progress (what every page's session panel, every page load and every trial asks for)
    with ``trials`` of its cards already in trials.jsonl (Spa-Bench ran 2,892): the file read and checked at each ask
    (as before, the baseline: the read the console now makes only when the file changed) against an unchanged file
    (a stat), and recording one more trial (its append, and the progress after it, with no read of the file)."""
    from helpers.spabench_cards import make_cards

    from grounded_planner.console.session import EvalSession

    folder = tmp / "session"
    cards = make_cards(folder, [("relational_placement", ("id", "ood")[k % 2], k) for k in range(trials + runs)])
    session = EvalSession(folder)
    kwargs = dict(failure_mode=None, planner="bench", rollout_dir=None, grasp_attempted=True, error=None)
    session.record(cards[0]["trial_id"], success=True, started_at=None, wall_s=1.0, **kwargs)
    line = json.loads((folder / "trials.jsonl").read_text())
    with open(folder / "trials.jsonl", "a", encoding="utf-8") as f:  # the rest of the campaign, as it was recorded
        for card in cards[1:trials]:
            f.write(json.dumps({**line, **{k: card[k] for k in ("trial_id", "task", "condition", "seed")}}) + "\n")

    def read_every_ask() -> None:
        session._read = None  # noqa: SLF001 - the baseline: what every ask cost before the file's stat was kept
        session.progress()

    pending = iter(cards[trials:])

    def record_one() -> None:
        session.record(next(pending)["trial_id"], success=True, started_at=None, wall_s=1.0, **kwargs)
        session.progress()

    session.progress()
    for label, fn in (
        ("read at every ask (before)", read_every_ask),
        ("unchanged file (now)", session.progress),
        ("one trial recorded (now)", record_one),
    ):
        ms = []
        for _ in range(runs):
            t0 = time.perf_counter()
            fn()
            ms.append((time.perf_counter() - t0) * 1000)
        print(f"the session's progress at {trials} trials, {label:27}: {stats_ms(ms)}")
    assert session.progress()["done"] == trials + runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--approvals", type=int, default=10)
    parser.add_argument("--plans", type=int, default=30)
    parser.add_argument("--frames-s", type=float, default=10.0)
    parser.add_argument("--pairs", type=int, default=100, help="plan requests paired one by one (0 skips them)")
    parser.add_argument(
        "--tally-rollouts",
        type=int,
        default=3000,
        help="the campaign for the tally's and the rollouts page's figures (0 skips them)",
    )
    parser.add_argument(
        "--pause-rounds", type=int, default=10, help="rounds of the camera left while paused (0 skips them)"
    )
    parser.add_argument(
        "--session-trials", type=int, default=2892, help="trials.jsonl for the session's figure (0 skips it)"
    )
    parser.add_argument(
        "--rollout-frames", type=int, default=300, help="the long rollout for the frames' figure (0 skips it)"
    )
    parser.add_argument(
        "--vlm-latency-s",
        type=float,
        default=0.0,
        help="each answer of the stand-in VLM takes this long (a served model takes 0.5-5 s; 0: at once)",
    )
    parser.add_argument(
        "--camera",
        choices=("raw", "compressed"),
        default="raw",
        help="the 1280x720 stream as rgb8 Images, or as image_transport's JPEG CompressedImages on .../compressed",
    )
    parser.add_argument(
        "--noise", action="store_true", help="a camera of random pixels (JPEG's worst case) instead of a real scene"
    )
    parser.add_argument(
        "--client",
        choices=tuple(API_CLIENTS),
        default="plain",
        help="plan requests through the console asked with the standard library's http.client (as little client "
        "of its own as Python has) or with httpx (runs before 2026-12-05 04:00)",
    )
    args = parser.parse_args()
    global CAMERA_KIND, API_CLIENT
    CAMERA_KIND, API_CLIENT = args.camera, args.client
    print(
        f"machine: {platform.platform()}, {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}; {load()}; "
        f"camera: {'random pixels' if args.noise else 'a real scene'} ({args.camera}); "
        f"the stand-in VLM answers in {args.vlm_latency_s:g} s; plan requests through the console from "
        f"{client_name(API_CLIENT)}"
    )
    os.environ["PYTHONPATH"] = str(REPO)
    tmp = Path(tempfile.mkdtemp(prefix="bench_console_"))
    cell = write_workcell(tmp)
    from grounded_planner_interfaces.msg import ExecutionEvent

    http_floor(tmp)  # first, before the graphs and browsers load the machine
    if args.tally_rollouts:
        tally_at_scale(tmp, args.tally_rollouts)
        rollouts_page_at_scale(tmp, args.tally_rollouts)
    if args.session_trials:
        session_at_scale(tmp, args.session_trials)
    if args.rollout_frames:
        rollout_frames(tmp, args.rollout_frames)
    scene = tmp / "scene.npy"
    np.save(scene, scene_image(args.noise))
    if args.pause_rounds:  # before the graphs: the stream and this console alone on the machine
        camera_pause(tmp, scene, args.pause_rounds)
    driver, tablet = chromium(), chromium(nice=19)
    graphs: list[StackProcess] = []
    with FakeVLMServer(SCENE_COLORS, latency_s=args.vlm_latency_s) as vlm, contextlib.ExitStack() as stack:
        # the graph without a console, in a ROS domain of its own
        off_domain = stack.enter_context(ros_domain_of_its_own())
        (tmp / "off").mkdir()
        graphs.append(StackProcess(tmp / "off", workcell_overrides(cell, vlm.base_url, tmp / "off"), console=False))
        off_node, off_exec = stack.enter_context(graph_node("bench_console_off"))
        off_client = GroundedPlannerClient(off_node, executor=off_exec)
        # the graph with a console (its live view on the 1280x720 stream), in another
        while stack.enter_context(ros_domain_of_its_own()) == off_domain:
            pass
        overrides = workcell_overrides(cell, vlm.base_url, tmp / "rollouts")
        overrides["console.color_topic"] = camera_topic()
        graphs.append(StackProcess(tmp, overrides))
        url = graphs[-1].url
        node, executor = stack.enter_context(graph_node("bench_console"))
        events: list[tuple[int, str]] = []
        node.create_subscription(
            ExecutionEvent,
            names.EXECUTION_FEEDBACK,
            lambda m: events.append((m.header.stamp.sec * 1_000_000_000 + m.header.stamp.nanosec, m.state)),
            QoSProfile(depth=50),
        )
        stream = CameraStream(scene)
        stack.callback(stream.stop)
        try:
            # 1. approve click -> first motion command
            stream.on.set()
            for require_approval in (False, True) if args.approvals else ():
                set_parameter(node, executor, "executor", "require_approval", require_approval)
                samples = approve_to_motion(driver, url, node, executor, events, args.approvals)
                print(
                    f"approve click -> first motion command, require_approval {str(require_approval).lower():5}: "
                    f"{stats_ms(samples)}; {load()}"
                )
            set_parameter(node, executor, "executor", "require_approval", False)

            # 3. what the console adds to a plan request
            if args.plans or args.pairs:
                client = GroundedPlannerClient(node, executor=executor)
                for c in (client, off_client):
                    assert c.wait_until_ready(30.0, execute=False), "the plan service"
                console_pid = int(
                    re.search(r"console in a process of its own \(pid (\d+)\)", graphs[-1].output.text())[1]
                )
                for d in (driver, tablet):  # the approvals' page is closed: "no page open" means none
                    d.get("about:blank")
                stream.on.set()  # the camera streams, as a robot's does
                for page in (None, "remote") if args.pairs else ():
                    plan_paired(url, console_pid, node, executor, client, off_client, args.pairs, page)
                stream.on.clear()
            if args.plans:
                pages = {"here": driver, "tablet": tablet}
                conditions = plan_overhead(
                    pages,
                    url,
                    console_pid,
                    client,
                    off_client,
                    stream,
                    args.plans,
                    lambda value: set_parameter(node, executor, "console", "live_while_planning", value),
                )
                base = statistics.median(conditions["off"].ms)
                for key, c in conditions.items():
                    extra = "" if key == "off" else f"\n    adds: {statistics.median(c.ms) - base:+.2f} ms (medians)"
                    if c.call_ms:
                        own = [total - call for total, call in zip(c.ms, c.call_ms)]
                        extra += (
                            f"; the plan call timed inside the console: median {statistics.median(c.call_ms):.2f} ms, "
                            f"the rest (HTTP, preview, state push, JSON) {statistics.median(own):.2f} ms"
                        )
                    if key in ("on", "live_on", "tablet_on", "remote_on"):
                        extra += (
                            f"\n    meanwhile (% of a core): the page (browser, or the remote page client) {100 * c.browser_cpu_s / c.wall_s:.0f} %, "
                            f"console process {100 * c.console_cpu_s / c.wall_s:.0f} %"
                        )
                    extra += (
                        f"\n    the console process while these requests were answered: "
                        f"{100 * c.request_console_cpu_s / c.request_wall_s:.0f} % of a core"
                    )
                    print(f"plan request, {c.what:38}: {stats_ms(c.ms)}{extra}")
                print(f"  {load()}")

            # 2. camera frame -> shown, 1280x720 at 30 Hz, to a console of its own
            if args.frames_s > 0:
                frame_to_screen(driver, node, tmp, args.frames_s, stream)
        finally:
            driver.quit()
            tablet.quit()
            for graph in reversed(graphs):
                graph.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
