"""The planner against a local OpenAI-compatible server over real HTTP (grounded_planner.vlm.fake_server):
answers in Qwen3-VL, Gemini and GPT style, broken answers and repair, retries, dead and hanging servers,
cache, record/replay, and the `plan`/`draw` commands."""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
import time

import numpy as np
import pytest
from PIL import Image

from grounded_planner.vlm.config import PlannerConfig
from grounded_planner.vlm.errors import (
    VLMProtocolError,
    VLMRequestError,
    VLMResponseError,
    VLMTimeoutError,
    VLMUnavailableError,
)
from grounded_planner.vlm.fake_server import DEMO_SCENE, FakeVLMServer, Reply, find_color, make_demo_scene
from grounded_planner.vlm.factory import make_planner

INSTRUCTION = "put the red block on the blue plate"


@pytest.fixture(scope="module")
def scene():
    return make_demo_scene(1280, 720)


@pytest.fixture
def server():
    with FakeVLMServer() as srv:
        yield srv


def truth(scene):
    block = find_color(scene, DEMO_SCENE["red block"])
    plate = find_color(scene, DEMO_SCENE["blue plate"])
    return block, ((plate[0] + plate[2]) / 2, (plate[1] + plate[3]) / 2)


def config(server, model="Qwen/Qwen3-VL-8B-Instruct", **kw):
    kw.setdefault("max_image_side", 640)
    kw.setdefault("retry_backoff_s", 0.01)
    return PlannerConfig(backend="openai", model=model, base_url=server.base_url, **kw)


def sent_image(request) -> Image.Image:
    url = request["messages"][1]["content"][0]["image_url"]["url"]
    assert url.startswith("data:image/jpeg;base64,")  # jpeg by default: ~10x smaller and faster than png
    return Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))


@pytest.mark.parametrize("model", ["Qwen/Qwen3-VL-8B-Instruct", "gemini-2.5-flash", "gpt-4o"])
def test_each_family_gives_the_pixel_plan_of_the_original_image(server, scene, model):
    box, point = truth(scene)
    with make_planner(config(server, model)) as planner:
        plan = planner.plan(scene, INSTRUCTION)
    assert [a.type for a in plan.actions] == ["grasp", "place"]
    assert plan.actions[0].object == "red block" and plan.actions[1].target == "blue plate"
    # the model saw a 640x360 copy: 1 px there is 2 px here, plus 0-1000 rounding
    assert plan.actions[0].bbox == pytest.approx(box, abs=2.5)
    assert plan.actions[1].point == pytest.approx(point, abs=2.5)
    assert plan.image_size == (1280, 720) and plan.model == model and plan.raw_response
    request = server.requests[-1]
    assert request["model"] == model
    assert sent_image(request).size == (640, 360)
    system = request["messages"][0]["content"]
    family_key = {"Qwen/Qwen3-VL-8B-Instruct": "bbox_2d", "gemini-2.5-flash": "box_2d", "gpt-4o": "640x360"}[model]
    assert family_key in system and "grasp" in system and "empty plan" in system


def test_api_key_is_read_from_the_named_environment_variable(server, scene, monkeypatch):
    monkeypatch.setenv("MY_VLM_KEY", "sk-test-123")
    with make_planner(config(server, api_key_env="MY_VLM_KEY")) as planner:
        planner.plan(scene, INSTRUCTION)
    assert server.requests[-1]["_headers"]["authorization"] == "Bearer sk-test-123"


def test_open_and_nothing_to_do(server, scene):
    with make_planner(config(server, "gpt-4o")) as planner:
        plan = planner.plan(scene, "open the green drawer handle")
        assert [a.type for a in plan.actions] == ["open"]
        assert plan.actions[0].bbox == pytest.approx(find_color(scene, DEMO_SCENE["green drawer handle"]), abs=2.5)
        plan = planner.plan(scene, "put the yellow duck on the blue plate")
        assert plan.is_empty and "yellow duck" in plan.reason


def test_broken_answer_is_repaired_once_quoting_the_error(server, scene):
    server.script.append(Reply(content="Sure! First I will pick up the red block, then put it on the plate."))
    with make_planner(config(server)) as planner:
        plan = planner.plan(scene, INSTRUCTION)
        assert planner.stats.repairs == 1 and planner.stats.requests == 2
    assert [a.type for a in plan.actions] == ["grasp", "place"]
    assert any("repair" in w for w in plan.warnings)
    repair = server.requests[1]["messages"]
    assert repair[-2] == {
        "role": "assistant",
        "content": "Sure! First I will pick up the red block, then put it on the plate.",
    }
    assert "no plan found" in repair[-1]["content"]


def test_answer_that_stays_invalid_raises_with_reason(server, scene):
    bad = '[{"type": "grasp", "object": "red block", "bbox_2d": [100, 100, 200, 200]}]'  # grasp without place
    server.script += [Reply(content=bad), Reply(content=bad)]
    with make_planner(config(server, repair_attempts=1)) as planner:
        with pytest.raises(VLMResponseError) as info:
            planner.plan(scene, INSTRUCTION)
    assert "grasp must be immediately followed by a place" in info.value.reason
    assert info.value.raw_response == bad and info.value.attempts == 2
    assert len(server.requests) == 2


def test_429_and_5xx_are_retried_with_backoff(server, scene):
    server.script += [Reply(status=429, headers={"Retry-After": "0"}), Reply(status=503)]
    with make_planner(config(server, max_retries=2)) as planner:
        plan = planner.plan(scene, INSTRUCTION)
    assert len(plan.actions) == 2 and len(server.requests) == 3
    server.script += [Reply(status=502)] * 3
    with make_planner(config(server, max_retries=2)) as planner:
        with pytest.raises(VLMUnavailableError, match="HTTP 502.*after 3 tries"):
            planner.plan(scene, INSTRUCTION)


def test_client_errors_are_not_retried(server, scene):
    server.script.append(Reply(status=404, raw_body=b'{"error": {"message": "model qwen9 does not exist"}}'))
    with make_planner(config(server)) as planner:
        with pytest.raises(VLMRequestError, match="404.*qwen9 does not exist") as info:
            planner.plan(scene, INSTRUCTION)
    assert info.value.status == 404 and len(server.requests) == 1
    server.script.append(Reply(status=200, raw_body=b"<html>proxy error</html>"))
    with make_planner(config(server)) as planner:
        with pytest.raises(VLMProtocolError, match="not JSON"):
            planner.plan(scene, INSTRUCTION)


def test_dead_server_fails_fast_with_a_clear_error(scene):
    with FakeVLMServer() as srv:
        url = srv.base_url
    start = time.monotonic()
    with make_planner(PlannerConfig(model="gpt-4o", base_url=url, retry_backoff_s=0.05)) as planner:
        with pytest.raises(VLMUnavailableError, match="cannot reach the server"):
            planner.plan(scene, INSTRUCTION)
    assert time.monotonic() - start < 8.0  # seconds, not a hang; slack for a loaded machine


def test_hanging_server_times_out(server, scene):
    server.script.append(Reply(delay_s=30))
    start = time.monotonic()
    with make_planner(config(server, timeout_s=0.5, max_retries=0)) as planner:
        with pytest.raises(VLMTimeoutError, match="0.5 s"):
            planner.plan(scene, INSTRUCTION)
    assert time.monotonic() - start < 8.0  # the server would take 30 s; slack for a loaded machine


def test_timeout_s_bounds_the_whole_request(server, scene):
    # slow answers that stay invalid: with a budget per answer, five tries of 0.6 s each ran for 3 s
    bad = '[{"type": "grasp", "object": "red block", "bbox_2d": [100, 100, 200, 200]}]'  # grasp without place
    server.script += [Reply(content=bad, delay_s=0.6) for _ in range(5)]
    with make_planner(config(server, timeout_s=1.0, repair_attempts=4, max_retries=0)) as planner:
        start = time.monotonic()
        with pytest.raises(VLMTimeoutError, match=r"answer within 0\.\d s"):  # the second try got what was left
            planner.plan(scene, INSTRUCTION)
        elapsed = time.monotonic() - start
    assert len(server.requests) == 2  # the re-prompt got what was left of the second; no third try started
    assert elapsed < 2.5  # 1 s budget; slack for a loaded machine


def test_retries_stop_at_the_request_deadline(server, scene):
    server.script += [Reply(status=503) for _ in range(20)]
    with make_planner(config(server, timeout_s=1.0, max_retries=10, retry_backoff_s=0.3)) as planner:
        with pytest.raises(VLMTimeoutError, match="503.*timeout_s"):
            planner.plan(scene, INSTRUCTION)
    # waits of 0.3, 0.6, 1.2 s: the third would pass the deadline, so it is not waited for
    assert 2 <= len(server.requests) <= 3


def test_cache_makes_a_rerun_free(server, scene, tmp_path):
    cfg = config(server, cache_dir=str(tmp_path / "cache"))
    with make_planner(cfg) as planner:
        first = planner.plan(scene, INSTRUCTION)
    with make_planner(cfg) as planner:  # a new process would see the same files
        again = planner.plan(scene, INSTRUCTION)
        assert planner.stats.cache_hits == 1 and planner.stats.requests == 0
        planner.plan(scene, "open the green drawer handle")  # another prompt is another key
        assert planner.stats.requests == 1
    assert len(server.requests) == 2
    assert again.to_dict() == first.to_dict()


def test_record_then_replay(server, scene, tmp_path):
    record = tmp_path / "plans.jsonl"
    with make_planner(config(server, record_file=str(record))) as planner:
        live = planner.plan(scene, INSTRUCTION)
    replay = make_planner(PlannerConfig(backend="replay", replay_file=str(record)))
    assert replay.plan(scene, INSTRUCTION).to_dict() == live.to_dict()
    with pytest.raises(VLMResponseError, match="no recorded plan"):
        replay.plan(scene[:, ::-1].copy(), INSTRUCTION)
    with pytest.raises(VLMResponseError, match="no recorded plan"):
        replay.plan(scene, "open the green drawer handle")


def test_ask_returns_the_raw_answer(server, scene):
    with make_planner(config(server)) as planner:
        answer = planner.ask(scene, "Locate the red block in the image. Answer with JSON only.")
    assert json.loads(answer)["label"] == "red block"
    assert server.requests[-1]["messages"] == [server.requests[-1]["messages"][0]]  # one user turn, no system


def test_bad_inputs_are_named(server):
    with make_planner(config(server)) as planner:
        with pytest.raises(ValueError, match=r"\(H, W, 3\)"):
            planner.plan(np.zeros((10, 10), np.uint8), INSTRUCTION)
        with pytest.raises(ValueError, match="uint8"):
            planner.plan(np.zeros((10, 10, 3), np.float32), INSTRUCTION)
        with pytest.raises(ValueError, match="instruction"):
            planner.plan(np.zeros((10, 10, 3), np.uint8), "  ")
    with pytest.raises(ValueError, match="backend"):
        PlannerConfig(backend="llama")
    with pytest.raises(ValueError, match="replay_file"):
        PlannerConfig(backend="replay")
    assert len(server.requests) == 0


CLI = "import sys; from grounded_planner.cli.main import main; sys.exit(main(sys.argv[1:]))"


def test_plan_and_draw_commands(server, scene, tmp_path):
    image = tmp_path / "scene.png"
    Image.fromarray(scene).save(image)
    out, overlay = tmp_path / "plan.json", tmp_path / "overlay.png"
    env_cmd = [
        sys.executable,
        "-c",
        CLI,
        "plan",
        "--image",
        str(image),
        "--instruction",
        INSTRUCTION,
        "--model",
        "gemini-2.5-flash",
        "--base-url",
        server.base_url,
        "--out",
        str(out),
        "--overlay",
        str(overlay),
        "--max-tokens",
        "333",
    ]
    result = subprocess.run(env_cmd, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout)
    assert printed == json.loads(out.read_text())
    assert server.requests[0]["max_tokens"] == 333
    box, point = truth(scene)
    assert printed["actions"][0]["bbox"] == pytest.approx(box, abs=1.5)  # 1280 px fits under the default 1280 side
    drawn = np.asarray(Image.open(overlay).convert("RGB"))
    x1, y1, x2, y2 = (int(v) for v in printed["actions"][0]["bbox"])
    assert tuple(drawn[(y1 + y2) // 2, x1]) == (0, 200, 0)  # green box edge
    px, py = (int(round(v)) for v in printed["actions"][1]["point"])
    assert tuple(drawn[py, px]) == (230, 0, 0)  # red cross centre

    redraw = tmp_path / "redraw.png"
    result = subprocess.run(
        [sys.executable, "-c", CLI, "draw", "--image", str(image), "--plan", str(out), "--out", str(redraw)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert np.array_equal(np.asarray(Image.open(redraw).convert("RGB")), drawn)

    # a dead server: exit 3 and one line
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            CLI,
            "plan",
            "--image",
            str(image),
            "--instruction",
            INSTRUCTION,
            "--model",
            "gpt-4o",
            "--base-url",
            "http://127.0.0.1:9/v1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 3 and "model unavailable" in result.stderr
    # a plan for another image size is refused by draw
    small = tmp_path / "small.png"
    Image.fromarray(scene[:100, :100]).save(small)
    result = subprocess.run(
        [sys.executable, "-c", CLI, "draw", "--image", str(small), "--plan", str(out), "--out", str(redraw)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "1280x720" in result.stderr


def test_unknown_model_name_answering_in_its_native_format_is_read_by_keys(server, scene):
    """A server whose model name says nothing (asked for pixels) that answers like Qwen3-VL or Gemini anyway."""
    box, point = truth(scene)
    for native in ("Qwen/Qwen3-VL-8B-Instruct", "gemini-2.5-flash"):
        answer = server.answer(native, ["user: Instruction: " + INSTRUCTION], np.asarray(sent_image_of(scene, 640)))
        server.script.append(Reply(content=answer))
        with make_planner(config(server, "my-finetune-v3")) as planner:
            plan = planner.plan(scene, INSTRUCTION)
        assert "640x360" in server.requests[-1]["messages"][0]["content"]  # it was asked for pixels
        assert plan.actions[0].bbox == pytest.approx(box, abs=2.5)
        assert plan.actions[1].point == pytest.approx(point, abs=2.5)


def sent_image_of(scene, max_side):
    from grounded_planner.vlm.image import encode_image

    return encode_image(scene, max_side).to_pil()


def test_config_from_the_model_name_and_environment():
    assert PlannerConfig(model="Qwen/Qwen2.5-VL-7B-Instruct").parse_convention == "pixel"  # its bbox_2d is pixels
    assert PlannerConfig(model="Qwen/Qwen3-VL-8B-Instruct").parse_convention == "qwen3"
    assert PlannerConfig(model="gemini-2.5-pro").parse_convention == "gemini"
    gpt = PlannerConfig(model="gpt-4o")
    assert gpt.family == "pixel" and gpt.parse_convention == "auto"
    assert PlannerConfig(model="gpt-4o", convention="qwen3").parse_convention == "qwen3"
    env = {
        "GP_VLM_BASE_URL": "http://h:8000/v1",
        "GP_VLM_MODEL": "m",
        "GP_VLM_TIMEOUT_S": "5",
        "GP_VLM_BACKEND": "gemini",
    }
    cfg = PlannerConfig.from_env(env, model="other", base_url=None)
    assert (cfg.backend, cfg.base_url, cfg.model, cfg.timeout_s) == ("gemini", "http://h:8000/v1", "other", 5.0)
    with pytest.raises(ValueError, match="no field"):
        PlannerConfig.from_env({}, modle="typo")


def test_parameters_a_model_rejects_are_adapted_once(server, scene):
    """OpenAI reasoning models answer 400 to max_tokens and to temperature 0; the next request adapts."""
    server.script += [
        Reply(
            status=400,
            raw_body=b'{"error": {"message": "Unsupported parameter: \'max_tokens\' is not supported with '
            b"this model. Use 'max_completion_tokens' instead.\"}}",
        ),
        Reply(
            status=400,
            raw_body=b'{"error": {"message": "Unsupported value: \'temperature\' does not support 0 with '
            b'this model. Only the default (1) value is supported."}}',
        ),
    ]
    with make_planner(config(server, "o4-mini")) as planner:
        plan = planner.plan(scene, INSTRUCTION)
        planner.plan(scene, "open the green drawer handle")
    assert len(plan.actions) == 2
    last = server.requests[-1]
    assert "max_completion_tokens" in last and "max_tokens" not in last and "temperature" not in last
    assert len(server.requests) == 4  # two rejected, then one per plan
    server.script.append(Reply(status=400, raw_body=b'{"error": {"message": "image too large"}}'))
    with make_planner(config(server, "o4-mini")) as planner:
        with pytest.raises(VLMRequestError, match="image too large"):
            planner.plan(scene, INSTRUCTION)


def test_corrupt_cache_entry_is_a_miss_not_an_error(server, scene, tmp_path):
    cfg = config(server, cache_dir=str(tmp_path / "cache"))
    with make_planner(cfg) as planner:
        first = planner.plan(scene, INSTRUCTION)
    entries = list((tmp_path / "cache").rglob("*.json"))
    assert len(entries) == 1
    entries[0].write_text("{not json")  # a crash mid-write on another tool, a full disk...
    with make_planner(cfg) as planner:
        again = planner.plan(scene, INSTRUCTION)
        assert planner.stats.requests == 1 and planner.stats.cache_hits == 0
    assert again.to_dict() == first.to_dict()
    assert json.loads(entries[0].read_text())["response"] == first.raw_response  # rewritten


def test_replayed_answers_to_raw_prompts(server, scene, tmp_path):
    record = tmp_path / "plans.jsonl"
    prompt = "Locate the blue plate in the image. Answer with JSON only."
    with make_planner(config(server, record_file=str(record))) as planner:
        live = planner.ask(scene, prompt)
    replay = make_planner(PlannerConfig(backend="replay", replay_file=str(record)))
    assert replay.ask(scene, prompt) == live
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"instruction": "x", "image_sha256": "*"}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        make_planner(PlannerConfig(backend="replay", replay_file=str(bad)))


def test_json_mode_asks_the_server_for_json(server, scene):
    with make_planner(config(server, json_mode=True)) as planner:
        planner.plan(scene, INSTRUCTION)
        planner.ask(scene, "Locate the red block in the image.")
    assert server.requests[0]["response_format"] == {"type": "json_object"}
    assert "response_format" not in server.requests[1]  # raw requests are free text
