"""The gemini backend: the real google-genai SDK pointed at a local server speaking Gemini's REST API
(grounded_planner.vlm.fake_server), over real HTTP."""

from __future__ import annotations

import base64
import io
import time

import pytest
from PIL import Image

pytest.importorskip("google.genai")

from grounded_planner.vlm.config import PlannerConfig  # noqa: E402
from grounded_planner.vlm.errors import VLMConfigError, VLMRequestError, VLMTimeoutError  # noqa: E402
from grounded_planner.vlm.fake_server import DEMO_SCENE, FakeVLMServer, Reply, find_color, make_demo_scene  # noqa: E402
from grounded_planner.vlm.factory import make_planner  # noqa: E402


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setenv("GEMINI_API_KEY", "test-key")
    with FakeVLMServer() as srv:
        yield srv


def gemini(server, **kw):
    kw.setdefault("max_image_side", 640)
    kw.setdefault("retry_backoff_s", 0.01)
    return PlannerConfig(backend="gemini", model="gemini-2.5-flash", base_url=server.root_url, **kw)


def test_plan_through_the_sdk(server):
    scene = make_demo_scene(1280, 720)
    with make_planner(gemini(server, json_mode=True)) as planner:
        plan = planner.plan(scene, "put the red block on the blue plate")
    box = find_color(scene, DEMO_SCENE["red block"])
    assert [a.type for a in plan.actions] == ["grasp", "place"]
    assert plan.actions[0].bbox == pytest.approx(box, abs=2.5)
    request = server.requests[-1]
    assert request["_path"].endswith("/models/gemini-2.5-flash:generateContent")
    assert request["_headers"]["x-goog-api-key"] == "test-key"
    assert "box_2d" in request["systemInstruction"]["parts"][0]["text"]  # gemini prompt family from the name
    assert request["generationConfig"]["responseMimeType"] == "application/json"
    inline = request["contents"][0]["parts"][0].get("inlineData") or request["contents"][0]["parts"][0]["inline_data"]
    data = inline["data"]
    sent = Image.open(io.BytesIO(base64.b64decode(data + "=" * (-len(data) % 4), altchars=b"-_")))
    assert sent.size == (640, 360)


def test_repair_retry_and_timeout(server):
    scene = make_demo_scene(320, 240)
    server.script += [
        Reply(status=429),
        Reply(content="I would pick up the block."),
    ]
    with make_planner(gemini(server)) as planner:
        plan = planner.plan(scene, "put the red block on the blue plate")
        assert planner.stats.repairs == 1
    assert len(plan.actions) == 2 and len(server.requests) == 3
    # the repair turn went back as the model's turn, then the error as the user's
    roles = [c["role"] for c in server.requests[-1]["contents"]]
    assert roles == ["user", "model", "user"]

    server.script.append(
        Reply(status=400, raw_body=b'{"error": {"code": 400, "message": "bad image", "status": "INVALID_ARGUMENT"}}')
    )
    with make_planner(gemini(server)) as planner:
        with pytest.raises(VLMRequestError, match="bad image"):
            planner.plan(scene, "put the red block on the blue plate")

    server.script.append(Reply(delay_s=20))
    start = time.monotonic()
    with make_planner(gemini(server, timeout_s=0.5, max_retries=0)) as planner:
        with pytest.raises(VLMTimeoutError):
            planner.plan(scene, "put the red block on the blue plate")
    assert time.monotonic() - start < 8.0  # the server would take 20-30 s; slack for a loaded machine


def test_missing_key_is_a_config_error(monkeypatch):
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    with pytest.raises(VLMConfigError, match="GEMINI_API_KEY"):
        make_planner(PlannerConfig(backend="gemini", model="gemini-2.5-flash"))
