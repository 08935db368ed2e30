"""A stand-in VLM server on 127.0.0.1 for tests, demos and benchmarks: real HTTP, no model.

It speaks the OpenAI chat-completions API (``POST /v1/chat/completions``) and Gemini's REST API
(``POST /v1beta/models/{model}:generateContent``), and, like vLLM, counts the requests it answered on
``GET /metrics`` (Prometheus text: ``vllm:request_success_total``). It "sees" by colour: a scene maps object
names to RGB colours, and the server finds each object as the pixels of its colour in the image it received.
It answers in the style of the model family named in the request (``qwen3`` in the model name: relative 0-1000
``bbox_2d`` after a ``<think>`` block; ``gemini``: ``box_2d`` [ymin, xmin, ymax, xmax] in a fence;
anything else: GPT-like prose around pixel JSON), so the whole planner path (resize, convention, parse,
scale back) is exercised against what real models write. Scripted replies (broken answers, 429/5xx,
slow or hanging answers) are served first, in order.

Run a demo server: ``python -m grounded_planner.vlm.fake_server --port 8011``.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
from PIL import Image

from grounded_planner.errors import RunFailure

# Colours of the demo scene (see make_demo_scene); tests pass their own.
DEMO_SCENE = {"red block": (220, 30, 30), "blue plate": (30, 60, 220), "green drawer handle": (30, 200, 60)}


@dataclass
class Reply:
    """A scripted reply: served instead of the computed answer, once, in order."""

    content: str | None = None  # assistant text (None: the computed answer)
    status: int = 200  # HTTP status
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0  # wait before answering (a slow or hanging server)
    raw_body: bytes | None = None  # sent as is instead of a JSON body
    release: threading.Event | None = None  # held until this is set (a test decides when the server answers)


def find_color(
    image_rgb: np.ndarray, color: tuple[int, int, int], tol: int = 40
) -> tuple[float, float, float, float] | None:
    """(x1, y1, x2, y2) in pixels around the pixels within ``tol`` of ``color``, or None if there are none."""
    diff = np.abs(image_rgb.astype(np.int16) - np.asarray(color, dtype=np.int16)).max(axis=2)
    ys, xs = np.nonzero(diff <= tol)
    if len(xs) == 0:
        return None
    return float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1)


def find_object(
    image_rgb: np.ndarray, color: tuple[int, int, int], tol: float = 0.05
) -> tuple[float, float, float, float] | None:
    """(x1, y1, x2, y2) of the largest 8-connected blob of ``color`` -- one object, as a model names one, not the
    union of every look-alike in view. Matches by chromaticity (r, g, b over their sum, within ``tol``) and a
    brightness within 0.55-1.8x of the colour's, so a shaded side of a box is the same colour as its lit top
    (needs OpenCV for the blobs; without it, the box around every matching pixel)."""
    img = image_rgb.astype(np.float32)
    ref = np.asarray(color, dtype=np.float32)
    total, ref_total = img.sum(axis=2), max(float(ref.sum()), 1.0)
    chroma = img / np.maximum(total, 1.0)[..., None]
    diff = np.abs(chroma - ref / ref_total).max(axis=2)
    mask = (diff <= tol) & (total >= 0.55 * ref_total) & (total <= 1.8 * ref_total)
    ys, xs = np.nonzero(mask)
    if len(xs) == 0:
        return None
    try:
        import cv2  # the geometry extra; optional for the stand-in server
    except ImportError:
        return float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1)
    n, _, stats, _ = cv2.connectedComponentsWithStats(mask.astype(np.uint8), connectivity=8)
    best = 1 + int(np.argmax(stats[1:, cv2.CC_STAT_AREA]))
    x, y, w, h = (float(v) for v in stats[best, :4])
    return x, y, x + w, y + h


def make_demo_scene(width: int = 640, height: int = 480) -> np.ndarray:
    """A table image with a red block, a blue plate and a green drawer handle (the DEMO_SCENE colours)."""
    img = np.full((height, width, 3), (185, 160, 120), dtype=np.uint8)  # wooden table

    def rect(fx1, fy1, fx2, fy2, color):
        img[int(fy1 * height) : int(fy2 * height), int(fx1 * width) : int(fx2 * width)] = color

    rect(0.15, 0.45, 0.25, 0.60, DEMO_SCENE["red block"])
    rect(0.55, 0.40, 0.85, 0.70, DEMO_SCENE["blue plate"])
    rect(0.40, 0.08, 0.60, 0.14, DEMO_SCENE["green drawer handle"])
    return img


def _family(model: str) -> str:
    name = model.lower()
    if "qwen3" in name:
        return "qwen3"
    if "gemini" in name:
        return "gemini"
    return "gpt"


class FakeVLMServer:
    """Threaded HTTP server; ``start()`` returns it, ``base_url`` is the OpenAI root (``.../v1``).

    Attributes
    ----------
    requests : list of dict
        Every request body received (JSON), in order, with ``_path`` and ``_headers`` (lower-case) added.
    script : list of Reply
        Replies served before computed answers.
    """

    def __init__(
        self,
        scene: dict[str, tuple[int, int, int]] | None = None,
        port: int = 0,
        one_object: bool = False,
        latency_s: float = 0.0,
        capacity: int = 0,
    ):
        self.scene = dict(DEMO_SCENE if scene is None else scene)
        #: True: a name is found as the largest blob of its colour (a look-alike elsewhere is ignored, or mistaken
        #: for it when it looks bigger); False: the box around every pixel of that colour
        self.one_object = one_object
        # Like a model server: each answer takes latency_s, and at most `capacity` are computed at once (vLLM's
        # batch; 0 = unlimited); more requests queue for a slot.
        self.latency_s = float(latency_s)
        self._slots = threading.BoundedSemaphore(capacity) if capacity > 0 else None
        self.script: list[Reply] = []
        self.requests: list[dict[str, Any]] = []
        #: requests answered with a completion, by model name (GET /metrics serves it)
        self.answered: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # TCP_NODELAY, as uvicorn (vLLM's server) sets: headers and body go out in two writes, and with Nagle
            # on, the body waited for the client's delayed ACK of the headers (40 ms on Linux) whenever the
            # client's reading thread was not scheduled at once
            disable_nagle_algorithm = True

            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                server._handle(self, body)

            def do_GET(self):
                if self.path.split("?")[0] != "/metrics":
                    server._send(self, 404, b'{"detail": "Not Found"}', {})
                    return
                server._send(self, 200, server._metrics(), {}, "text/plain; version=0.0.4; charset=utf-8")

        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    # -- lifecycle ----------------------------------------------------------------------------------
    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "FakeVLMServer":
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()  # wakes replies that are waiting out a delay
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # -- request handling ---------------------------------------------------------------------------
    def _handle(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        try:
            payload = json.loads(body or b"{}")
        except ValueError:
            payload = {}
        payload["_path"] = handler.path
        payload["_headers"] = {k.lower(): v for k, v in handler.headers.items()}
        with self._lock:
            self.requests.append(payload)
            reply = self.script.pop(0) if self.script else None
        gemini = ":generateContent" in handler.path
        if reply is not None and reply.delay_s:
            self._stop.wait(reply.delay_s)
        if reply is not None and reply.release is not None:
            while not reply.release.wait(0.05) and not self._stop.is_set():
                pass
        if reply is not None and (reply.status != 200 or reply.raw_body is not None):
            self._send(
                handler,
                reply.status,
                reply.raw_body
                or json.dumps({"error": {"message": f"scripted HTTP {reply.status}", "code": reply.status}}).encode(),
                reply.headers,
            )
            return
        try:
            if gemini:
                model = handler.path.split("/models/")[-1].split(":")[0]
                text_parts, image = self._gemini_inputs(payload)
            else:
                model = str(payload.get("model", ""))
                text_parts, image = self._openai_inputs(payload)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:  # what a real server answers
            self._send(
                handler, 400, json.dumps({"error": {"message": f"bad request: {exc}", "code": 400}}).encode(), {}
            )
            return
        if self._slots is not None:
            self._slots.acquire()
        try:
            if self.latency_s:
                self._stop.wait(self.latency_s)
            content = (
                reply.content
                if reply is not None and reply.content is not None
                else self.answer(model, text_parts, image)
            )
        finally:
            if self._slots is not None:
                self._slots.release()
        if gemini:
            out = {
                "candidates": [{"content": {"role": "model", "parts": [{"text": content}]}, "finishReason": "STOP"}],
                "modelVersion": model,
            }
        else:
            out = {
                "id": "chatcmpl-fake",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [
                    {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}
                ],
            }
        self._send(handler, 200, json.dumps(out).encode(), reply.headers if reply else {})
        with self._lock:  # counted once the answer is sent, as vLLM counts a finished request
            self.answered[model] = self.answered.get(model, 0) + 1

    def _metrics(self) -> bytes:
        """vLLM's counter of finished requests (``/metrics``, Prometheus text format; vLLM 0.6-0.10 name it so),
        one sample per model; other metrics of vLLM are not kept here."""
        with self._lock:
            counts = dict(self.answered)
        lines = [
            "# HELP vllm:request_success_total Count of successfully processed requests.",
            "# TYPE vllm:request_success_total counter",
        ] + [
            f'vllm:request_success_total{{finished_reason="stop",model_name={json.dumps(m)}}} {float(n)}'
            for m, n in sorted(counts.items())
        ]
        return ("\n".join(lines) + "\n").encode()

    @staticmethod
    def _send(
        handler: BaseHTTPRequestHandler,
        status: int,
        data: bytes,
        headers: dict[str, str],
        content_type: str = "application/json",
    ) -> None:
        try:
            handler.send_response(status)
            handler.send_header("Content-Type", content_type)
            handler.send_header("Content-Length", str(len(data)))
            for k, v in headers.items():
                handler.send_header(k, v)
            handler.end_headers()
            handler.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout test)

    @staticmethod
    def _decode(b64: str) -> np.ndarray:
        data = base64.b64decode(b64 + "=" * (-len(b64) % 4), altchars=b"-_" if ("-" in b64 or "_" in b64) else None)
        return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))

    def _openai_inputs(self, payload: dict) -> tuple[list[str], np.ndarray | None]:
        texts, image = [], None
        for message in payload.get("messages", []):
            content = message.get("content")
            if isinstance(content, str):
                texts.append(f"{message.get('role')}: {content}")
                continue
            for part in content or []:
                if part.get("type") == "text":
                    texts.append(f"{message.get('role')}: {part['text']}")
                elif part.get("type") == "image_url":
                    url = part["image_url"]["url"]
                    image = self._decode(url.split(",", 1)[1])
        return texts, image

    def _gemini_inputs(self, payload: dict) -> tuple[list[str], np.ndarray | None]:
        texts, image = [], None
        system = payload.get("systemInstruction") or payload.get("system_instruction")
        if system:
            texts += [f"system: {p.get('text', '')}" for p in system.get("parts", [])]
        for content in payload.get("contents", []):
            for part in content.get("parts", []):
                if "text" in part:
                    texts.append(f"{content.get('role', 'user')}: {part['text']}")
                blob = part.get("inlineData") or part.get("inline_data")
                if blob:
                    image = self._decode(blob["data"])
        return texts, image

    # -- the "model" --------------------------------------------------------------------------------
    def _find(self, name: str, image: np.ndarray) -> tuple[float, float, float, float] | None:
        name = name.lower().strip()
        for obj, color in self.scene.items():
            if obj in name or name in obj:
                return find_object(image, color) if self.one_object else find_color(image, color)
        return None

    def answer(self, model: str, texts: list[str], image: np.ndarray | None) -> str:
        """What the stand-in model says to this conversation (last user turn decides the task)."""
        family = _family(model)
        user = [t[len("user: ") :] for t in texts if t.startswith("user: ")]
        system = " ".join(t for t in texts if t.startswith("system: "))
        last = user[-1] if user else ""
        if image is None:
            return "I need an image to answer."
        h, w = image.shape[:2]
        m = re.search(
            r"(?:Locate|Point to|point out(?: a free spot on)?)(?: the)? (.+?)(?: in the image)?\.", last, re.I
        )
        if m:
            spot = re.search(r"free spot on (?:the )?(.+?) where", m.group(1))
            box = self._find(spot.group(1) if spot else m.group(1), image)
            if box is None:
                return "I cannot find it."
            if "<point>" in last:  # Embodied-R1 style
                cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
                return f"<think>The {m.group(1)} is there.</think><point>[[{cx:.0f}, {cy:.0f}]]</point>"
            return self._render_locate(family, last.startswith("Locate"), box, w, h, m.group(1))
        instr = next((m for m in (re.search(r"Instruction: (.+)", u) for u in reversed(user)) if m), None)
        instruction = instr.group(1) if instr else last
        steps = self._steps(instruction, image)
        if (
            steps
            and any(u.startswith("Instruction: ") and "Steps already done" in u for u in user[-1:])
            and self._already_done(steps)
        ):
            return json.dumps({"actions": [], "reason": f"'{instruction}' is already done."})
        if steps is None:
            return json.dumps({"actions": [], "reason": f"No valid target for '{instruction}' is visible."})
        if "no coordinates" in system or "Name each object precisely" in system:  # decoupled language planner
            return json.dumps(
                {"actions": [{k: v for k, v in s.items() if k in ("type", "object", "target")} for s in steps]}
            )
        return self._render_plan(family, steps, w, h)

    def _steps(self, instruction: str, image: np.ndarray) -> list[dict] | None:
        text = instruction.lower().strip().rstrip(".")
        m = re.match(r"(?:put|place|move) (?:the )?(.+?) (?:on|onto|in|into|to) (?:the )?(.+)$", text)
        if m:
            obj, target = m.group(1), m.group(2)
            box, dest = self._find(obj, image), self._find(target, image)
            if box is None or dest is None:
                return None
            point = ((dest[0] + dest[2]) / 2, (dest[1] + dest[3]) / 2)
            return [
                {"type": "grasp", "object": obj, "bbox": box},
                {"type": "place", "object": obj, "target": target, "point": point},
            ]
        m = re.match(r"(open|close) (?:the )?(.+)$", text)
        if m:
            box = self._find(m.group(2), image)
            return None if box is None else [{"type": m.group(1), "object": m.group(2), "bbox": box}]
        return None

    @staticmethod
    def _already_done(steps: list[dict]) -> bool:
        """A put whose object is seen inside its target's box: nothing left to do (asked when replanning)."""
        if len(steps) != 2 or steps[0]["type"] != "grasp":
            return False
        x1, y1, x2, y2 = steps[0]["bbox"]
        cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
        tx, ty = steps[1]["point"]
        return abs(cx - tx) < max(x2 - x1, 12) and abs(cy - ty) < max(y2 - y1, 12)

    @staticmethod
    def _render_locate(family: str, want_box: bool, box, w: int, h: int, label: str) -> str:
        x1, y1, x2, y2 = box
        rel = lambda v, side: round(v / side * 1000)  # noqa: E731 - 0-1000 of a side
        cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
        if family == "qwen3":
            key, value = (
                ("bbox_2d", [rel(x1, w), rel(y1, h), rel(x2, w), rel(y2, h)])
                if want_box
                else ("point_2d", [rel(cx, w), rel(cy, h)])
            )
        elif family == "gemini":
            key, value = (
                ("box_2d", [rel(y1, h), rel(x1, w), rel(y2, h), rel(x2, w)])
                if want_box
                else ("point", [rel(cy, h), rel(cx, w)])
            )
        else:
            key, value = (
                ("bbox", [round(x1), round(y1), round(x2), round(y2)])
                if want_box
                else ("point", [round(cx), round(cy)])
            )
        return json.dumps({key: value, "label": label})

    @staticmethod
    def _render_plan(family: str, steps: list[dict], w: int, h: int) -> str:
        items = []
        for s in steps:
            item = {k: s[k] for k in ("type", "object", "target") if k in s}
            if "bbox" in s:
                x1, y1, x2, y2 = s["bbox"]
                if family == "qwen3":
                    item["bbox_2d"] = [
                        round(x1 / w * 1000),
                        round(y1 / h * 1000),
                        round(x2 / w * 1000),
                        round(y2 / h * 1000),
                    ]
                elif family == "gemini":
                    item["box_2d"] = [
                        round(y1 / h * 1000),
                        round(x1 / w * 1000),
                        round(y2 / h * 1000),
                        round(x2 / w * 1000),
                    ]
                else:
                    item["bbox"] = [round(x1), round(y1), round(x2), round(y2)]
            if "point" in s:
                x, y = s["point"]
                if family == "qwen3":
                    item["point_2d"] = [round(x / w * 1000), round(y / h * 1000)]
                elif family == "gemini":
                    item["point"] = [round(y / h * 1000), round(x / w * 1000)]
                else:
                    item["point"] = [round(x), round(y)]
            items.append(item)
        if family == "qwen3":
            return (
                "<think>\nI need to find the objects first.\n</think>\n```json\n"
                + json.dumps(items, indent=2)
                + "\n```"
            )
        if family == "gemini":
            return "```json\n" + json.dumps(items, indent=2) + "\n```"
        return (
            "Here is the plan for the robot:\n\n```json\n"
            + json.dumps({"actions": items}, indent=2)
            + "\n```\n\nEach grasp is followed by a place."
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8011, help="0: any free port (the first line names it)")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds each answer takes")
    parser.add_argument("--capacity", type=int, default=0, help="answers computed at once (0: unlimited)")
    parser.add_argument("--scene", default=None, help='JSON {"object name": [r, g, b], ...} (default: the demo scene)')
    args = parser.parse_args(argv)
    scene = {k: tuple(v) for k, v in json.loads(args.scene).items()} if args.scene else None
    server = FakeVLMServer(scene=scene, port=args.port, latency_s=args.latency, capacity=args.capacity).start()
    print(f"stand-in VLM server at {server.base_url} (scene: {', '.join(server.scene)})", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()


def start_process(
    scene: Mapping[str, Sequence[int]] | None = None, latency_s: float = 0.0, capacity: int = 0
) -> tuple[subprocess.Popen, str]:
    """This server in a child process of its own, on a free port (a test or benchmark can SIGKILL it, or load it
    from another process); returns the process and its base URL once it listens."""
    args = [sys.executable, "-m", __name__, "--port", "0", "--latency", str(latency_s), "--capacity", str(capacity)]
    if scene is not None:
        args += ["--scene", json.dumps({name: list(rgb) for name, rgb in scene.items()})]
    # from the folder above the package, so that a checkout that is not installed runs it too
    package_root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(args, cwd=package_root, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    found = re.search(r"(http://127\.0\.0\.1:\d+/v1)", line)
    if found is None:
        proc.kill()
        raise RunFailure(f"the stand-in VLM server did not start: {line!r}")
    return proc, found.group(1)


if __name__ == "__main__":
    main()
