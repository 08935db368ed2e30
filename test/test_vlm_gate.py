"""The in-flight bound (issue 18 item 2): with max_concurrent_requests slow VLM requests in flight, one more model
request is refused at once ("busy: ..."), while cache hits, replayed plans and requests failing before the model
pass. Real planners against the stand-in server over real HTTP (its scripted replies hang on demand)."""

from __future__ import annotations

import json
import threading
import time

import pytest

from grounded_planner.vlm.config import PlannerConfig
from grounded_planner.vlm.errors import VLMBusyError
from grounded_planner.vlm.fake_server import FakeVLMServer, Reply, make_demo_scene
from grounded_planner.vlm.gate import RequestGate, model_call
from grounded_planner.vlm.factory import make_planner

pytest.importorskip("httpx")

INSTRUCTION = "put the red block on the blue plate"


@pytest.fixture
def vlm():
    server = FakeVLMServer().start()
    yield server
    server.stop()  # wakes the hanging replies


def test_slots_are_taken_at_the_first_model_call_and_kept_until_the_request_ends():
    gate = RequestGate(1)
    with gate.request():
        assert gate.in_flight == 0, "a request that has not reached the model holds no slot"
        model_call()
        model_call()  # a repair re-prompt or a grounding call of the same request: same slot
        assert gate.in_flight == 1
        with gate.request():  # another request (another thread in the node)
            with pytest.raises(
                VLMBusyError, match=r"^busy: 1 VLM request\(s\) already in flight \(max_concurrent_requests 1\)"
            ):
                model_call()
    assert gate.in_flight == 0
    model_call()  # outside a request (CLI, benchmark): no bound


def test_slow_requests_fill_the_bound_and_fast_ones_still_pass(vlm, tmp_path):
    image = make_demo_scene(160, 120)
    config = PlannerConfig(
        backend="openai",
        model="qwen3-vl-test",
        base_url=vlm.base_url,
        timeout_s=30.0,
        max_retries=0,
        cache_dir=str(tmp_path / "cache"),
    )
    planner = make_planner(config)
    planner.plan(image, INSTRUCTION)  # answered at once and cached

    gate = RequestGate(2)
    vlm.script += [Reply(delay_s=60.0), Reply(delay_s=60.0)]  # the next two model requests hang
    slow_done = []

    def slow(instruction):
        with gate.request():
            planner.plan(image, instruction)  # answered when the server stops (it wakes the delayed replies)
        slow_done.append(instruction)

    threads = [threading.Thread(target=slow, args=(f"{INSTRUCTION} {i}",), daemon=True) for i in range(2)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 20.0
    while len(vlm.requests) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(vlm.requests) == 3 and gate.in_flight == 2, "the two slow requests never reached the server"

    started = time.monotonic()
    with gate.request(), pytest.raises(VLMBusyError, match="^busy: "):
        planner.plan(image, "tidy up the table")  # a third model request
    with gate.request():
        cached = planner.plan(image, INSTRUCTION)  # a cache hit: no model call, no slot
    with gate.request(), pytest.raises(ValueError, match="instruction must be a non-empty string"):
        planner.plan(image, "  ")  # fails before the model
    replay_file = tmp_path / "plans.jsonl"
    replay_file.write_text(
        json.dumps({"instruction": INSTRUCTION, "image_sha256": "*", "plan": cached.to_dict()}) + "\n"
    )
    with gate.request():
        replayed = make_planner(PlannerConfig(backend="replay", replay_file=str(replay_file))).plan(image, INSTRUCTION)
    elapsed = time.monotonic() - started
    assert [a.type for a in cached.actions] == [a.type for a in replayed.actions] == ["grasp", "place"]
    assert elapsed < 5.0, f"fast requests took {elapsed:.1f} s behind the slow ones"
    assert len(vlm.requests) == 3, "a refused or cached request reached the server"
    assert all(t.is_alive() for t in threads), "the slow requests finished early: the test proved nothing"
    vlm.stop()
    for t in threads:
        t.join(timeout=30.0)
    assert len(slow_done) == 2 and gate.in_flight == 0, "a finished request kept its slot"
