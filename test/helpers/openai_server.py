"""A local OpenAI-compatible chat-completions server for tests and benchmarks (a stand-in VLM, not a mock of our code).

It answers every POST /v1/chat/completions with a fixed grounded plan in Qwen3-VL's relative 0-1000 convention;
``delay_s`` makes it slow (the answer comes after that long, or never when the server is stopped first).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# grasp the cube (box in the left part of the image), place it at a point on the right; 0-1000 relative
ANSWER = {
    "actions": [
        {"type": "grasp", "object": "red cube", "bbox_2d": [250, 375, 375, 625]},
        {"type": "place", "object": "red cube", "target": "table", "point_2d": [750, 500]},
    ],
    "reason": "",
}


class OpenAIServer:
    """Start with ``start()``; ``url`` is the base URL including /v1. Counts requests in ``requests``."""

    def __init__(self, port: int = 0, answer: dict | None = None, delay_s: float = 0.0):
        self.answer = json.dumps(answer or ANSWER)
        self.delay_s = delay_s
        self.requests = 0
        self.last_body: dict | None = None
        self._port = port
        self._server: ThreadingHTTPServer | None = None
        self._stopping = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}/v1"

    def start(self) -> "OpenAIServer":
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):  # noqa: N802 - http.server API
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                owner.requests += 1
                owner.last_body = body
                if owner.delay_s and owner._stopping.wait(owner.delay_s):
                    return  # stopped while "thinking": drop the connection like a dead server
                reply = {"id": "cmpl-test", "object": "chat.completion", "model": body.get("model", ""),
                         "choices": [{"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": owner.answer}}]}
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._stopping.clear()
        self._server = ThreadingHTTPServer(("127.0.0.1", self._port), Handler)
        self._server.daemon_threads = True
        self._port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> "OpenAIServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


if __name__ == "__main__":  # run stand-alone: python test/helpers/openai_server.py [PORT]
    import sys

    server = OpenAIServer(int(sys.argv[1]) if len(sys.argv) > 1 else 8000).start()
    print(f"serving {server.url}", flush=True)
    threading.Event().wait()
