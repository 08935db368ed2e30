"""The console's web app on its own (no ROS graph): one plan gets one decision, approval through the executor's gate
when it has one, the envelope's refusal, the token and the origin guard, the rollouts folder's edge, labels and the
tally, the evaluation session's trials.jsonl, and the push channel. The graph is RecordingGraph, a test double of the
console's own ConsoleGraph protocol (the real one, ros/console_node.py, is tested in test_console_browser.py)."""

from __future__ import annotations

import asyncio
import io
import json
import os
import shutil
import struct
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("aiohttp")
from aiohttp import WSMsgType  # noqa: E402
from aiohttp.test_utils import TestClient, TestServer  # noqa: E402

from grounded_planner.console import app as console_app  # noqa: E402
from grounded_planner.console.app import ConsoleApp, FramePump  # noqa: E402
from grounded_planner.console.auth import TokenError, console_token, is_loopback  # noqa: E402
from grounded_planner.console.graph import Frame, GraphError, PlanAnswer, StepPreview  # noqa: E402
from grounded_planner.rollout.record import RolloutRecorder, load_rollout  # noqa: E402
from grounded_planner.rollout.stats import wilson_interval  # noqa: E402
from grounded_planner.ros import names  # noqa: E402
from helpers.console_stack import server_timing  # noqa: E402
from helpers.spabench_cards import make_cards  # noqa: E402

PLAN = {
    "instruction": "put the red cube in the bowl",
    "image_size": [320, 240],
    "model": "test-vlm",
    "actions": [
        {
            "type": "grasp",
            "object": "red cube",
            "bbox": [85, 95, 115, 145],
            "target_3d": {"frame": "base", "position": [0.5, 0.0, 0.05], "orientation": [0, 0, 0, 1], "width": 0.03},
        },
        {
            "type": "place",
            "target": "bowl",
            "point": [200, 120],
            "target_3d": {"frame": "base", "position": [0.5, 0.2, 0.05], "orientation": [0, 0, 0, 1]},
        },
    ],
}


class SentGoal:
    """Test double of console.graph.SentGoal: ``ended`` is set by the test (the executor ended the goal)."""

    def __init__(self):
        self.is_ended = False

    def ended(self):
        return self.is_ended


class RecordingGraph:
    """Test double of ConsoleGraph: answers with a fixed plan and records what the app asked of the graph (a goal
    sent to be held for approval is recorded as ``hold``). ``busy``: the executor rejects every goal, as it does
    while it holds or runs another client's plan."""

    def __init__(self, require_approval=False, verdicts=("ok", "ok"), busy=False):
        self.require_approval = require_approval
        self.verdicts = verdicts
        self.busy = busy
        self.calls: list[tuple] = []
        self.frames: list[Frame] = []
        self.goals: list[SentGoal] = []
        self.reset_answer = (True, "sim: the scene is back at its start")

    def plan(self, instruction, timeout_s, sent):
        sent()  # the request is on its way (a real graph calls it once the service request went out)
        self.calls.append(("plan", instruction))
        steps = [StepPreview(i, a["type"], verdict=v) for i, (a, v) in enumerate(zip(PLAN["actions"], self.verdicts))]
        return PlanAnswer(True, "", {**PLAN, "instruction": instruction}, steps, 0.01)

    def requires_approval(self):
        return self.require_approval

    def execute(self, plan, hold=False):
        if self.busy:
            raise GraphError("the executor rejected the goal (busy with another plan, or not active)")
        self.calls.append(("hold" if hold else "execute", plan["instruction"]))
        self.goals.append(SentGoal())
        return self.goals[-1]

    def answer_approval(self, approved, wait_s):
        self.calls.append(("approve", approved))
        return True, "approved" if approved else "rejected"

    def stop(self):
        self.calls.append(("stop",))
        return True

    def reset_scene(self):
        self.calls.append(("reset_scene",))
        return self.reset_answer

    def latest_frame(self, after_seq, width=0, wanted=None):
        newer = [f for f in self.frames if f.seq > after_seq]
        return newer[-1] if newer else None

    def frames_paused(self):
        self.calls.append(("frames_paused",))

    def did(self, kind):
        return [c for c in self.calls if c[0] == kind]


async def eventually(predicate, what) -> None:
    """Wait (up to 5 s) for ``predicate()``: what the app does on its worker threads after an answer went out.
    ``what()``: what was waited for, said when it did not come (called then: it may show what did happen)."""
    for _ in range(500):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what()}")


async def held(graph, count=1):
    """Wait until the app has sent ``count`` goals to be held: it sends them after the plan's answer."""
    await eventually(
        lambda: len(graph.did("hold")) >= count, lambda: f"a goal sent to be held for approval: {graph.calls}"
    )


def serve(app: ConsoleApp, body, **server_kwargs):
    """Run ``body(client)`` against the app on a real local HTTP server."""

    async def main():
        async with TestClient(TestServer(app.make_app(), **server_kwargs)) as client:
            return await body(client)

    return asyncio.run(main())


def make_app(tmp_path, graph=None, **kwargs):
    notes = []
    app = ConsoleApp(graph or RecordingGraph(), rollouts_dir=tmp_path / "rollouts", note=notes.append, **kwargs)
    return app, notes


def record_rollout(
    root: Path,
    name: str,
    task="pick",
    condition="id",
    success=None,
    mode=None,
    instruction: str = "",
    result: dict | None = None,
) -> Path:
    """A closed rollout of two frames; ``result``: the execution's (None: no plan ran)."""
    folder = root / name
    with RolloutRecorder(
        folder, instruction=instruction or f"{task} {name}", task=task, condition=condition, fsync_every_s=None
    ) as rec:
        rec.log_color(np.full((24, 32, 3), 120, np.uint8))
        rec.log_color(np.full((24, 32, 3), 200, np.uint8))
        if result is not None:
            rec.log_result(result)
        if success is not None:
            rec.set_label(success, mode, source="human")
    return folder


def test_one_plan_gets_one_decision_and_a_late_approve_is_refused_with_the_reason(tmp_path):
    graph = RecordingGraph()
    app, notes = make_app(tmp_path, graph)

    async def body(client):
        plan = (await (await client.post("/api/plan", json={"instruction": "put the red cube in the bowl"})).json())[
            "plan"
        ]
        assert [s["verdict"] for s in plan["steps"]] == ["ok", "ok"] and plan["decision"] is None
        first = await client.post("/api/decision", json={"plan_id": plan["id"], "approve": True})
        assert first.status == 200 and "sent to /grounded_planner/execute" in (await first.json())["message"]
        late = await client.post("/api/decision", json={"plan_id": plan["id"], "approve": True})
        assert late.status == 409
        assert "already approved by 127.0.0.1" in (await late.json())["error"]
        reject = await client.post("/api/decision", json={"plan_id": plan["id"], "approve": False})
        assert reject.status == 409

    serve(app, body)
    assert graph.did("execute") == [("execute", "put the red cube in the bowl")]  # once, whatever was clicked after
    assert any("plan 1 approved by 127.0.0.1" in n for n in notes)
    assert any("refused approve of plan 1 from 127.0.0.1" in n for n in notes)


def test_with_require_approval_the_preview_is_held_by_the_executor_and_approve_answers_its_service(tmp_path):
    graph = RecordingGraph(require_approval=True)
    app, notes = make_app(tmp_path, graph)

    async def body(client):
        plan = (await (await client.post("/api/plan", json={"instruction": "a"})).json())["plan"]
        await held(graph)  # sent ahead, before any click: the executor holds it
        answer = await client.post("/api/decision", json={"plan_id": plan["id"], "approve": True})
        assert answer.status == 200
        assert "held by the executor, and approved on /grounded_planner/approve" in (await answer.json())["message"]

    serve(app, body)
    assert graph.calls[1:] == [("hold", "a"), ("approve", True)]  # the click answers the gate; nothing sent again
    assert any("plan 1 sent to /grounded_planner/execute; the executor holds it for approval" in n for n in notes)


def test_a_held_goal_that_ended_before_the_approve_is_sent_again_and_one_the_executor_refused_is_sent_by_it(tmp_path):
    graph = RecordingGraph(require_approval=True)
    app, notes = make_app(tmp_path, graph)

    async def body(client):
        plan = (await (await client.post("/api/plan", json={"instruction": "a"})).json())["plan"]
        await held(graph)
        graph.goals[-1].is_ended = True  # the executor's approval_timeout_s passed: it refused the held goal
        answer = await client.post("/api/decision", json={"plan_id": plan["id"], "approve": True})
        assert "sent to /grounded_planner/execute and approved" in (await answer.json())["message"]

    serve(app, body)
    assert graph.calls[1:] == [("hold", "a"), ("execute", "a"), ("approve", True)]

    busy = RecordingGraph(require_approval=True, busy=True)  # another client's plan is held: nothing sent ahead
    app, notes = make_app(tmp_path, busy)

    async def refused(client):
        await client.post("/api/plan", json={"instruction": "b"})
        await eventually(
            lambda: any("not sent ahead" in n for n in notes), lambda: f"the note on the refused goal: {notes}"
        )

    serve(app, refused)
    assert any(
        "plan 1 not sent ahead to be held for approval (the executor rejected the goal (busy" in n
        and "Approve will send it" in n
        for n in notes
    ), notes


def test_a_new_plan_request_rejects_the_held_one_first(tmp_path):
    graph = RecordingGraph(require_approval=True)
    app, notes = make_app(tmp_path, graph)

    async def body(client):
        first = (await (await client.post("/api/plan", json={"instruction": "a"})).json())["plan"]
        await held(graph)
        await client.post("/api/plan", json={"instruction": "b"})
        await held(graph, 2)
        late = await client.post("/api/decision", json={"plan_id": first["id"], "approve": True})
        assert late.status == 409 and "is not the current plan" in (await late.json())["error"]

    serve(app, body)
    assert graph.calls == [("plan", "a"), ("hold", "a"), ("approve", False), ("plan", "b"), ("hold", "b")]


class TimedGraph(RecordingGraph):
    """RecordingGraph whose plan service call takes ``call_s`` (as the answer's duration says) and whose preview
    then takes ``preview_s``, as ConsoleNode.plan times them."""

    def __init__(self, call_s, preview_s, **kwargs):
        super().__init__(**kwargs)
        self.call_s, self.preview_s = call_s, preview_s

    def plan(self, instruction, timeout_s, sent):
        sent()
        time.sleep(self.call_s)
        answer = super().plan(instruction, timeout_s, lambda: None)
        answer.duration_s = self.call_s
        time.sleep(self.preview_s)
        return answer


def test_a_plan_answer_says_where_its_time_went_in_a_server_timing_header(tmp_path):
    graph = TimedGraph(call_s=0.12, preview_s=0.05, require_approval=True)
    app, _ = make_app(tmp_path, graph)

    async def body(client):
        first = await client.post("/api/plan", json={"instruction": "a"})
        await held(graph)
        second = await client.post("/api/plan", json={"instruction": "b"})  # rejects the held one first
        return server_timing(first.headers["Server-Timing"]), server_timing(second.headers["Server-Timing"])

    first, second = serve(app, body)
    assert list(first) == ["body", "pool", "call", "preview", "state", "total"]
    assert list(second) == ["body", "supersede", "pool", "call", "preview", "state", "total"]
    for parts in (first, second):
        assert parts["call"] == pytest.approx(120.0) and 50.0 <= parts["preview"] < 120.0
        assert parts["total"] >= sum(v for k, v in parts.items() if k != "total") - 0.01


def test_an_approve_s_answer_says_how_long_the_executor_took_in_a_server_timing_header(tmp_path):
    class SlowGate(RecordingGraph):  # the executor's approval gate answers in 80 ms
        def answer_approval(self, approved, wait_s):
            time.sleep(0.08)
            return super().answer_approval(approved, wait_s)

    graph = SlowGate(require_approval=True)
    app, _ = make_app(tmp_path, graph)

    async def body(client):
        plan = (await (await client.post("/api/plan", json={"instruction": "a"})).json())["plan"]
        await held(graph)
        answer = await client.post("/api/decision", json={"plan_id": plan["id"], "approve": True})
        assert answer.status == 200
        return server_timing(answer.headers["Server-Timing"])

    parts = serve(app, body)
    assert list(parts) == ["body", "decide", "pool", "executor", "total"]
    assert 80.0 <= parts["executor"] < 1000.0
    assert parts["total"] >= sum(v for k, v in parts.items() if k != "total") - 0.01


def test_a_plan_the_envelope_refuses_cannot_be_approved_and_nothing_moves(tmp_path):
    # approval on: not even sent ahead to be held
    graph = RecordingGraph(require_approval=True, verdicts=("ok", "outside_workspace"))
    app, _ = make_app(tmp_path, graph)

    async def body(client):
        plan = (await (await client.post("/api/plan", json={"instruction": "a"})).json())["plan"]
        assert plan["refused_steps"] == [1]
        answer = await client.post("/api/decision", json={"plan_id": plan["id"], "approve": True})
        assert (
            answer.status == 409
            and "safety envelope refuses step(s) 2 (counted from 1" in (await answer.json())["error"]
        )

    serve(app, body)
    assert graph.did("execute") == [] and graph.did("hold") == []


def test_a_graph_failure_is_shown_on_the_plan(tmp_path):
    class Rejecting(RecordingGraph):
        def execute(self, plan):
            raise GraphError("the executor rejected the goal (busy with another plan, or not active)")

    app, _ = make_app(tmp_path, Rejecting())

    async def body(client):
        plan = (await (await client.post("/api/plan", json={"instruction": "a"})).json())["plan"]
        answer = await client.post("/api/decision", json={"plan_id": plan["id"], "approve": True})
        assert answer.status == 502 and "rejected the goal" in (await answer.json())["error"]
        state = await (await client.get("/api/state")).json()
        assert "rejected the goal" in state["plan"]["error"]

    serve(app, body)


def test_without_the_token_every_request_gets_401_and_changes_nothing(tmp_path):
    graph = RecordingGraph()
    token = "s3cret-token-of-24-chars"
    app, notes = make_app(tmp_path, graph, token=token)

    async def body(client):
        for method, path, payload in (
            ("GET", "/", None),
            ("GET", "/api/state", None),
            ("GET", "/ws", None),
            ("POST", "/api/plan", {"instruction": "a"}),
            ("POST", "/api/stop", None),
            ("POST", "/api/decision", {"plan_id": 1, "approve": True}),
            ("POST", "/api/reset_scene", None),
        ):
            response = await client.request(method, path, json=payload)
            assert response.status == 401, path
            assert "a valid token is required" in await response.text()
        wrong = await client.post("/api/stop", headers={"Authorization": "Bearer wrong-token-wrong-token"})
        assert wrong.status == 401
        ok = await client.get("/api/state", headers={"Authorization": f"Bearer {token}"})
        assert ok.status == 200
        # a person's page: ?token= once, then a cookie (and the token leaves the address bar)
        first = await client.get(f"/rollouts?token={token}&outcome=success", allow_redirects=False)
        assert first.status == 302 and first.headers["Location"] == "/rollouts?outcome=success"
        assert "HttpOnly" in first.headers["Set-Cookie"] and "SameSite=Strict" in first.headers["Set-Cookie"]
        again = await client.get("/api/state")  # the client keeps the cookie
        assert again.status == 200
        ws = await client.ws_connect("/ws")
        assert json.loads((await ws.receive()).data)["type"] == "state"
        await ws.close()

    serve(app, body)
    assert graph.calls == []  # nothing planned, nothing stopped, nothing sent
    assert sum("no valid token" in n for n in notes) == 8


def test_requests_from_another_site_are_refused_and_there_is_no_cors_wildcard(tmp_path):
    graph = RecordingGraph()
    app, notes = make_app(tmp_path, graph)

    async def body(client):
        evil = await client.post("/api/stop", headers={"Origin": "http://evil.example"})
        assert evil.status == 403
        same = await client.post("/api/stop", headers={"Origin": f"http://{client.host}:{client.port}"})
        assert same.status == 200
        for path in ("/", "/api/state", "/api/rollouts"):
            response = await client.get(path, headers={"Origin": "http://evil.example"})
            assert "Access-Control-Allow-Origin" not in response.headers
        preflight = await client.options(
            "/api/stop", headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"}
        )
        assert "Access-Control-Allow-Origin" not in preflight.headers

    serve(app, body)
    assert graph.did("stop") == [("stop",)]
    assert any("STOP from 127.0.0.1" in n for n in notes)
    assert any("cross-site request" in n for n in notes)


@pytest.mark.parametrize("query", ["id=../outside", "id=%2Fetc%2Fpasswd", "id=a/../../outside", "id=link"])
def test_a_rollout_path_that_leaves_the_folder_is_404_and_logged(tmp_path, query):
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "rollout.json").write_text('{"format": "grounded_planner.rollout/1"}')
    root = tmp_path / "rollouts"
    record_rollout(root, "a")
    (root / "link").symlink_to(tmp_path / "outside")
    app, notes = make_app(tmp_path)

    async def body(client):
        for path in ("/api/rollout", "/api/rollout/frame"):
            response = await client.get(f"{path}?{query}")
            assert response.status == 404, path
            assert "outside" not in await response.text()

    serve(app, body)
    assert sum("leaves" in n or "not a path relative" in n for n in notes) == 2


def test_a_closed_rollout_joins_the_tally_without_a_walk_of_the_folder(tmp_path, monkeypatch):
    """After each episode the tally counts the closed rollout and the known ones as they are now (a label written by
    `rollouts label` meanwhile, a rollout deleted), each once, even where the logger names the rollout through
    another path to the folder (a symlink); the folder is not walked: in a campaign of thousands of trials the walk
    reads every file name of every rollout, after every episode."""
    root = tmp_path / "rollouts"
    record_rollout(root, "r1", success=True)
    record_rollout(root, "r2")
    record_rollout(root, "r3", success=True)
    app, _ = make_app(tmp_path)
    assert {(g["n"], g["unlabelled"]) for g in app.state.snapshot()["tally"]} == {(2, 1)}  # n: the labelled ones
    load_rollout(root / "r2").save_label(False, "grasp_failure", source="human")  # another terminal's label
    shutil.rmtree(root / "r3")
    closed = record_rollout(root, "r4", success=False, mode="wrong_object")
    (tmp_path / "elsewhere").symlink_to(root)
    walks = []
    real_rglob = Path.rglob
    monkeypatch.setattr(Path, "rglob", lambda self, pattern: walks.append(self) or real_rglob(self, pattern))
    app.on_rollout_closed(str(tmp_path / "elsewhere" / closed.name))

    async def body(client):
        return await (await client.get("/api/state")).json()

    state = serve(app, body)
    (group,) = state["tally"]
    assert (group["n"], group["successes"], group["unlabelled"]) == (3, 1, 0)  # r1 ok, r2 and r4 failed, r3 gone
    assert walks == []
    assert state["episode"]["id"] == "r4"


def test_the_label_panel_says_how_the_episode_ended_counting_steps_from_1(tmp_path):
    """A stopped episode's recording is "complete" too: the panel said "(complete)" above a stopped episode's label.
    It says how the episode ended, as the live view did (steps counted from 1, as the plan table counts them), and
    the recording's status only where it is not complete."""
    root = tmp_path / "rollouts"
    grasp = {"index": 0, "type": "grasp", "outcome": "cancelled", "message": "cancelled during pre_grasp"}
    place = {"index": 1, "type": "place", "outcome": "ok", "message": ""}
    episodes = {
        "stopped": (
            {"success": False, "message": "step 0 (grasp): cancelled", "steps": [grasp]},
            "stopped: step 1 (grasp): cancelled (cancelled during pre_grasp)",
        ),
        "missed": (
            {
                "success": False,
                "message": "step 1 (place): timeout",
                "steps": [{**grasp, "outcome": "ok"}] + [{**place, "outcome": "timeout", "message": ""}],
            },
            "failed: step 2 (place): timeout",
        ),
        "done": (
            {"success": True, "message": "all 2 steps ok", "steps": [{**grasp, "outcome": "ok"}, place]},
            "succeeded: all 2 steps ok",
        ),
        "rehearsed": (
            {"success": True, "message": "dry run: every step passes the checks", "dry_run": True, "steps": [place]},
            "succeeded: dry run: every step passes the checks",
        ),
        "unrun": (None, "no plan ran"),
    }
    app, _ = make_app(tmp_path)

    async def body(client):
        said = {}
        for name, (result, _) in episodes.items():
            app.on_rollout_closed(str(record_rollout(root, name, result=result)))
            episode = (await (await client.get("/api/state")).json())["episode"]
            said[name] = (episode["id"], episode["status"], episode["ended"])
        # a rollout.json another tool wrote, its steps not steps: said so, and the state is still served
        garbled = record_rollout(root, "garbled")
        record = json.loads((garbled / "rollout.json").read_text())
        record["execution"] = {"success": False, "message": "m", "steps": ["grasp", {"outcome": "cancelled"}]}
        (garbled / "rollout.json").write_text(json.dumps(record))
        app.on_rollout_closed(str(garbled))
        answer = await client.get("/api/state")
        assert answer.status == 200
        said["garbled"] = (await answer.json())["episode"]["ended"]
        return said

    said = serve(app, body)
    assert (
        said.pop("garbled") == "how it ended cannot be read: its execution's steps are not steps (index, type, outcome)"
    )
    assert said == {name: (name, "complete", ended) for name, (_, ended) in episodes.items()}


def test_a_rollout_closed_with_no_page_open_is_read_when_a_page_connects_and_at_once_while_one_is_open(tmp_path):
    """With no page open, a closed rollout costs the console nothing but a note (the tally stats every known rollout:
    1.6 ms of CPU per episode at 100 rollouts, for nobody to see); the page that connects gets the last episode and
    a tally that counts every rollout closed meanwhile; with a page open, the next one reaches it unasked."""
    root = tmp_path / "rollouts"
    record_rollout(root, "r1", success=True)
    app, _ = make_app(tmp_path)
    reads = []
    real_entries = app.rollouts._entries
    app.rollouts._entries = lambda paths=None: reads.append(paths) or real_entries(paths)
    for name, success in (("r2", False), ("r3", True)):
        app.on_rollout_closed(
            str(record_rollout(root, name, success=success, mode=None if success else "grasp_failure"))
        )
    assert reads == []  # nothing read: no page to show it to
    assert app.state.snapshot()["episode"] is None

    async def body(client):
        ws = await client.ws_connect("/ws")
        state = json.loads((await ws.receive(timeout=5)).data)["state"]
        assert state["episode"]["id"] == "r3"  # the last closed
        (group,) = state["tally"]
        assert (group["n"], group["successes"]) == (3, 2)  # r1 and r3 succeeded, r2 failed
        closed = record_rollout(root, "r4", success=True)
        await asyncio.to_thread(app.on_rollout_closed, str(closed))  # as the graph's thread calls it
        for _ in range(20):
            state = json.loads((await ws.receive(timeout=5)).data)
            if state["type"] == "state" and (state["state"]["episode"] or {}).get("id") == "r4":
                break
        else:
            raise AssertionError("the page was not sent the rollout closed while it was open")
        (group,) = state["state"]["tally"]
        assert (group["n"], group["successes"]) == (4, 3)
        await ws.close()

    serve(app, body)


def test_rollouts_list_filters_and_a_label_changes_the_tally(tmp_path):
    root = tmp_path / "rollouts"
    record_rollout(root, "r1", success=True)
    record_rollout(root, "r2", success=False, mode="grasp_failure")
    record_rollout(root, "r3", condition="ood")
    (root / "broken").mkdir()
    (root / "broken" / "rollout.json").write_text("{")  # one unreadable record hides no other
    app, notes = make_app(tmp_path)

    async def body(client):
        listing = await (await client.get("/api/rollouts")).json()
        assert {r["id"] for r in listing["rollouts"]} == {"r1", "r2", "r3"} and listing["conditions"] == ["id", "ood"]
        unlabelled = await (await client.get("/api/rollouts?outcome=unlabelled")).json()
        assert [r["id"] for r in unlabelled["rollouts"]] == ["r3"]
        ood = await (await client.get("/api/rollouts?condition=ood&task=pick")).json()
        assert [r["id"] for r in ood["rollouts"]] == ["r3"]
        bad = await client.get("/api/rollouts?outcome=maybe")
        assert bad.status == 400
        detail = await (await client.get("/api/rollout?id=r1")).json()
        assert detail["frames"] == 2 and detail["record"]["success"] is True
        frame = await client.get("/api/rollout/frame?id=r1&k=1")
        assert frame.status == 200 and (await frame.read())[:2] == b"\xff\xd8"
        assert (await client.get("/api/rollout/frame?id=r1&k=2")).status == 404
        tally = {(g["task"], g["condition"]): g for g in (await (await client.get("/api/state")).json())["tally"]}
        assert tally[("pick", "id")]["successes"] == 1 and tally[("pick", "id")]["n"] == 2
        refused = await client.post("/api/label", json={"rollout": "r3", "success": False, "failure_mode": "flew_away"})
        assert refused.status == 400 and "unknown failure mode 'flew_away'" in (await refused.json())["error"]
        saved = await client.post("/api/label", json={"rollout": "r3", "success": True, "notes": "clean"})
        assert saved.status == 200
        tally = {(g["task"], g["condition"]): g for g in (await (await client.get("/api/state")).json())["tally"]}
        assert tally[("pick", "ood")]["successes"] == 1 and tally[("pick", "ood")]["unlabelled"] == 0
        assert tally[("pick", "ood")]["ci95"] == pytest.approx(list(wilson_interval(1, 1)))

    serve(app, body)
    record = load_rollout(root / "r3")
    assert record.success is True and record.data["label_source"] == "human" and record.data["notes"] == "clean"
    assert any("rollout r3 labelled success by 127.0.0.1" in n for n in notes)


async def refused_with_reasons(client, path: str, reasons: dict[str, str]) -> None:
    """GET ``path`` + each query of ``reasons``: refused (400), the error naming its reason."""
    for query, reason in reasons.items():
        refused = await client.get(path + query)
        assert refused.status == 400 and reason in (await refused.json())["error"], query


def test_a_rollout_s_frames_are_served_each_as_logged_and_thumbnails_at_the_width_asked(tmp_path):
    """The rollout page asks for each frame of its strip by number, as a thumbnail (``w``): frame k is the k-th the
    logger wrote (two logged at the same time included, in their order), in a closed bag, in one whose writer died
    before its footer and in one whose chunk index does not read; a thumbnail comes at the width asked; a bad number
    is refused with the reason."""
    from PIL import Image

    from grounded_planner.console.rollouts import RolloutStore
    from grounded_planner.rollout.bag import ScanResult, has_footer, iter_mcap

    levels = [40, 80, 120, 160, 200]
    now = [1_700_000_000_000_000_000]  # the recorder's clock (its log times)
    with RolloutRecorder(
        tmp_path / "rollouts" / "closed", instruction="x", fsync_every_s=None, clock_ns=lambda: now[0]
    ) as rec:
        for level, ms in zip(levels, [1, 2, 2, 3, 4]):  # frames 1 and 2 logged at the same time
            now[0] = 1_700_000_000_000_000_000 + ms * 1_000_000
            rec.log_color(np.full((240, 320, 3), level, np.uint8), stamp_ns=now[0])
    stamps = RolloutStore(tmp_path / "rollouts").frame_stamps(load_rollout(tmp_path / "rollouts" / "closed"))
    assert len(stamps) == 5 and stamps[1] == stamps[2], stamps
    # the same rollout cut where its data ends (the writer killed): no summary, no footer
    shutil.copytree(tmp_path / "rollouts" / "closed", tmp_path / "rollouts" / "cut")
    scan = ScanResult()
    list(iter_mcap(tmp_path / "rollouts" / "cut" / "rollout.mcap", decode=False, result=scan))
    os.truncate(tmp_path / "rollouts" / "cut" / "rollout.mcap", scan.data_end_pos)
    assert not has_footer(tmp_path / "rollouts" / "cut" / "rollout.mcap")
    # and one whose summary (the chunk index) is garbled, its data and footer whole
    shutil.copytree(tmp_path / "rollouts" / "closed", tmp_path / "rollouts" / "garbled")
    bag = tmp_path / "rollouts" / "garbled" / "rollout.mcap"
    data = bytearray(bag.read_bytes())
    data[scan.data_end_pos + 20 : len(data) - 60] = b"\xab" * (len(data) - 80 - scan.data_end_pos)
    bag.write_bytes(bytes(data))
    app, _ = make_app(tmp_path)

    def image(body: bytes) -> np.ndarray:
        return np.asarray(Image.open(io.BytesIO(body)).convert("RGB"))

    async def body(client):
        for rollout in ("closed", "cut", "garbled"):
            shown = []
            for k in range(len(levels)):
                reply = await client.get(f"/api/rollout/frame?id={rollout}&k={k}")
                assert reply.status == 200, (rollout, k, await reply.text())
                shown.append(int(round(image(await reply.read()).mean())))
            assert shown == pytest.approx(levels, abs=2), rollout
            thumb = image(await (await client.get(f"/api/rollout/frame?id={rollout}&k=3&w=80")).read())
            assert thumb.shape == (60, 80, 3) and abs(thumb.mean() - 160) <= 2
        missing = await client.get("/api/rollout/frame?id=closed&k=5")
        assert missing.status == 404 and "has 5 frames, no frame 5" in (await missing.json())["error"]
        await refused_with_reasons(
            client,
            "/api/rollout/frame?id=closed&",
            {
                "k=two": "k and w must be whole numbers, got k='two'",
                "k=0&w=big": "w='big'",
                "k=0&w=8": "w (a thumbnail's width) must be 16-4096 pixels, got 8",
                "k=0&w=0": "w (a thumbnail's width) must be 16-4096 pixels, got 0",
                "k=0&w=": "k and w must be whole numbers, got k='0', w=''",
            },
        )

    serve(app, body)


def test_the_rollouts_listing_is_served_a_page_at_a_time_with_how_many_match(tmp_path):
    """The rollouts page asks for 100 rows at a time of a campaign's thousands: ``offset`` and ``limit`` give a page
    of the filtered listing, newest first, with how many rollouts match; without them, every one (as before); a bad
    page is refused with the reason."""
    root = tmp_path / "rollouts"
    for k in range(7):
        record_rollout(root, f"r{k}", success=k % 3 != 0, mode=None if k % 3 else "grasp_failure")
    app, _ = make_app(tmp_path)

    async def body(client):
        every = await (await client.get("/api/rollouts")).json()
        assert every["total"] == 7 and every["limit"] is None and len(every["rollouts"]) == 7
        newest_first = [r["id"] for r in every["rollouts"]]
        page = await (await client.get("/api/rollouts?offset=2&limit=3")).json()
        assert [r["id"] for r in page["rollouts"]] == newest_first[2:5]
        assert (page["total"], page["offset"], page["limit"]) == (7, 2, 3)
        last = await (await client.get("/api/rollouts?outcome=failure&offset=2&limit=2")).json()
        assert last["total"] == 3 and [r["outcome"] for r in last["rollouts"]] == ["failure"]
        past = await (await client.get("/api/rollouts?offset=50&limit=10")).json()
        assert past["rollouts"] == [] and past["total"] == 7
        await refused_with_reasons(
            client,
            "/api/rollouts?",
            {
                "limit=ten": "limit must be a whole number, got 'ten'",
                "limit=0": "limit 1 or more",
                "offset=-1&limit=5": "offset must be 0 or more",
            },
        )

    serve(app, body)


def test_the_rollouts_listing_goes_compressed_to_a_browser_that_takes_it(tmp_path):
    """A campaign's listing is loaded over the Wi-Fi of a tablet beside the cell at every filter: compressed where the
    browser takes it (every browser takes deflate and gzip), the same listing as a client that takes it plain gets."""
    for k in range(60):
        record_rollout(tmp_path / "rollouts", f"r{k:02d}", task=("pick", "place")[k % 2])
    app, _ = make_app(tmp_path)

    async def body(client):
        plain = await client.get("/api/rollouts?task=pick", headers={"Accept-Encoding": "identity"})
        zipped = await client.get("/api/rollouts?task=pick", headers={"Accept-Encoding": "gzip, deflate, br"})
        assert "Content-Encoding" not in plain.headers and zipped.headers["Content-Encoding"] in ("deflate", "gzip")
        sent_plain, sent_zipped = int(plain.headers["Content-Length"]), int(zipped.headers["Content-Length"])
        assert sent_zipped * 5 < sent_plain, (sent_zipped, sent_plain)
        listing = await plain.json()
        assert await zipped.json() == listing and len(listing["rollouts"]) == 30

    serve(app, body)


def test_two_pages_get_every_state_change_and_frames_follow_the_browser(tmp_path):
    graph = RecordingGraph()
    graph.frames = [Frame(1, 111, 4, 2, b"\xff\xd8one"), Frame(2, 222, 4, 2, b"\xff\xd8two")]
    app, _ = make_app(tmp_path, graph)

    async def body(client):
        a, b = await client.ws_connect("/ws"), await client.ws_connect("/ws")
        for ws in (a, b):
            assert json.loads((await ws.receive()).data)["state"]["plan"] is None
        await client.post("/api/plan", json={"instruction": "stack the cups"})
        for ws in (a, b):  # the plan's state, and the live view resumed once its answer was written (its own message)
            seen = {}
            while len(seen) < 2:
                message = json.loads((await ws.receive(timeout=5)).data)
                if message["type"] == "state" and message["state"]["plan"] is not None:
                    seen["state"] = message["state"]
                elif message["type"] == "live" and not message["paused"]:
                    seen["live"] = message
            assert seen["state"]["plan"]["instruction"] == "stack the cups"
        await a.send_str(json.dumps({"type": "frames"}))
        message = await a.receive(timeout=5)
        seq_stamp, width, height = struct.unpack(">qII", message.data[:16])
        assert (seq_stamp, width, height, message.data[16:]) == (222, 4, 2, b"\xff\xd8two")  # the newest frame
        with pytest.raises(asyncio.TimeoutError):  # nothing newer, and no ack: nothing more is sent
            await a.receive(timeout=0.3)
        graph.frames.append(Frame(3, 333, 4, 2, b"\xff\xd8three"))
        with pytest.raises(asyncio.TimeoutError):  # newer, but the browser has not shown the last one yet
            await a.receive(timeout=0.3)
        await a.send_str(json.dumps({"type": "ack"}))
        assert (await a.receive(timeout=5)).data[16:] == b"\xff\xd8three"
        await a.close()
        await b.close()

    serve(app, body)


@pytest.mark.parametrize("path", ["/api/plan", "/api/decision", "/api/label", "/api/session/start"])
def test_a_body_that_is_not_a_json_object_or_too_large_is_refused_with_the_reason_and_changes_nothing(tmp_path, path):
    session = tmp_path / "session"
    make_cards(session, [("relational_placement", "id", 0)])
    graph = RecordingGraph()
    app, _ = make_app(tmp_path, graph, session_dir=str(session))
    before = app.state.snapshot()

    async def body(client):
        for data, status, reason in (
            (b'{"instruction": "pick', 400, "the body must be a JSON object"),
            (b'["pick the cube"]', 400, "the body must be a JSON object"),
            (json.dumps({"instruction": "x" * 70_000}).encode(), 413, "larger than the console takes (64 KiB)"),
        ):
            answer = await client.post(path, data=data, headers={"Content-Type": "application/json"})
            assert answer.status == status and answer.content_type == "application/json", (data[:20], answer)
            assert reason in (await answer.json())["error"]

    serve(app, body)
    assert graph.calls == [] and app.state.snapshot() == before


def test_console_token_rules():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost") and is_loopback("127.0.0.2")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.20")
    assert console_token("127.0.0.1", "") == ("", False)
    generated, was_generated = console_token("0.0.0.0", "")
    assert was_generated and len(generated) >= 24
    assert console_token("0.0.0.0", "a-token-of-20-chars!") == ("a-token-of-20-chars!", False)
    with pytest.raises(TokenError, match="at least 16 characters"):
        console_token("0.0.0.0", "short")


def test_an_evaluation_session_runs_card_by_card_into_trials_jsonl(tmp_path):
    from grounded_planner.spabench.trial import RECORD_KEYS

    session = tmp_path / "session"
    cards = make_cards(session, [("relational_placement", "id", 0), ("relational_placement", "ood", 1)])
    graph = RecordingGraph()
    app, notes = make_app(tmp_path, graph, session_dir=str(session))
    app.rollouts.root = session / "rollouts"  # the contract's place: DIR/rollouts/ (rollout_logger.log_dir there)

    async def body(client):
        progress = (await (await client.get("/api/session")).json())["session"]
        assert progress["done"] == 0 and progress["total"] == 2 and progress["card"]["trial_id"] == cards[0]["trial_id"]
        png = await client.get("/api/session/file?path=" + progress["card"]["card_png"])
        assert png.status == 200 and (await png.read())[:4] == b"\x89PNG"
        assert (await client.get("/api/session/file?path=../../etc/passwd")).status == 404
        started = await (await client.post("/api/session/start", json={"trial_id": cards[0]["trial_id"]})).json()
        assert started["instruction"] == cards[0]["instruction"]
        await run_trial(client, app, session, cards[0], "trial0")
        state = await (await client.get("/api/state")).json()
        assert state["episode"]["id"] == "trial0"
        labelled = await (
            await client.post(
                "/api/label", json={"rollout": "trial0", "success": False, "failure_mode": "wrong_object"}
            )
        ).json()
        assert labelled["trial"]["trial_id"] == cards[0]["trial_id"]
        state = await (await client.get("/api/state")).json()
        assert state["session"]["done"] == 1 and state["session"]["card"]["trial_id"] == cards[1]["trial_id"]
        again = await client.post("/api/session/start", json={"trial_id": cards[0]["trial_id"]})
        assert again.status == 409  # recorded: one outcome per trial

    serve(app, body)
    lines = [json.loads(line) for line in (session / "trials.jsonl").read_text().splitlines()]
    assert len(lines) == 1 and list(lines[0]) == list(RECORD_KEYS)
    line = lines[0]
    assert line["trial_id"] == cards[0]["trial_id"] and line["instruction"] == cards[0]["instruction"]
    assert (line["success"], line["failure_mode"], line["outcome_source"]) == (False, "wrong_object", "operator")
    assert line["rollout"] == "rollouts/trial0" and line["planner"] == "unknown"  # the rollout names no model
    assert line["started_at"] and line["wall_s"] is not None
    assert load_rollout(session / "rollouts" / "trial0").failure_mode == "wrong_object"
    # resume: a new console on the same folder starts at the second card
    resumed, _ = make_app(tmp_path, RecordingGraph(), session_dir=str(session))
    assert resumed.state.snapshot()["session"]["card"]["trial_id"] == cards[1]["trial_id"]


def trial_line(session: Path, card: dict) -> str:
    """``card``'s trial as another process records it in trials.jsonl (a second console, `spabench session`)."""
    from grounded_planner.console.session import EvalSession

    EvalSession(session).record(
        card["trial_id"],
        success=True,
        failure_mode=None,
        planner="other-terminal",
        rollout_dir=None,
        grasp_attempted=True,
        error=None,
        started_at=None,
        wall_s=None,
    )
    return (session / "trials.jsonl").read_text().splitlines()[-1]


async def run_trial(client, app: ConsoleApp, session: Path, card: dict, name: str, instruction: str = "") -> Path:
    """The started trial of ``card`` run as the page runs it: its instruction (or ``instruction``, the box edited)
    planned and approved, then its episode recorded as ``session/rollouts/name`` and closed by the logger."""
    asked = instruction or card["instruction"]
    plan = (await (await client.post("/api/plan", json={"instruction": asked})).json())["plan"]
    decision = await client.post("/api/decision", json={"plan_id": plan["id"], "approve": True})
    assert decision.status == 200, await decision.text()
    folder = record_rollout(session / "rollouts", name, task=card["task"], instruction=asked)
    app.on_rollout_closed(str(folder))
    return folder


def test_a_bad_line_in_trials_jsonl_is_shown_with_its_line_and_the_trial_is_recorded_once_it_is_fixed(tmp_path):
    """A crash mid-write (a full disk, a power cut) leaves trials.jsonl with half a line: the console still starts,
    the session says which line is bad and starts no trial, and a trial labelled meanwhile is recorded once the line
    is fixed and the label saved again: nothing is lost, nothing is appended to a file whose trials cannot be
    counted."""
    session = tmp_path / "session"
    cards = make_cards(session, [("relational_placement", "id", k) for k in range(3)])
    good = trial_line(session, cards[0])
    trials = session / "trials.jsonl"
    trials.write_text(good + "\n" + good[: len(good) // 2])  # the second line cut short
    app, notes = make_app(tmp_path, RecordingGraph(), session_dir=str(session))
    app.rollouts.root = session / "rollouts"
    shown = app.state.snapshot()["session"]
    assert shown["card"] is None and shown["done"] is None
    assert f"{trials} line 2: not JSON" in shown["error"], shown

    async def body(client):
        answer = await (await client.get("/api/session")).json()
        assert "line 2: not JSON" in answer["session"]["error"] and answer["session"]["card"] is None
        start = await client.post("/api/session/start", json={"trial_id": cards[1]["trial_id"]})
        assert start.status == 409 and "line 2: not JSON" in (await start.json())["error"]
        trials.write_text(good + "\n")  # the operator removes the half line
        answer = await (await client.get("/api/session")).json()
        assert answer["session"]["error"] is None and answer["session"]["done"] == 1
        assert answer["session"]["card"]["trial_id"] == cards[1]["trial_id"]
        assert app.state.snapshot()["session"] == answer["session"]  # the pages are shown it too
        start = await client.post("/api/session/start", json={"trial_id": cards[1]["trial_id"]})
        assert start.status == 200, await start.text()
        with trials.open("a") as f:  # the disk fills while the trial runs: half a line again
            f.write(good[:20])
        await run_trial(client, app, session, cards[1], "trial1")
        label = {"rollout": "trial1", "success": False, "failure_mode": "wrong_object"}
        labelled = await (await client.post("/api/label", json=label)).json()
        assert labelled["trial"] is None and "line 2: not JSON" in labelled["trial_error"], labelled
        assert load_rollout(session / "rollouts" / "trial1").failure_mode == "wrong_object"  # the label is kept
        trials.write_text(good + "\n")
        labelled = await (await client.post("/api/label", json=label)).json()  # saved again, once fixed
        assert labelled["trial_error"] is None and labelled["trial"]["trial_id"] == cards[1]["trial_id"], labelled

    serve(app, body)
    recorded = [json.loads(line) for line in trials.read_text().splitlines()]
    assert [r["trial_id"] for r in recorded] == [cards[0]["trial_id"], cards[1]["trial_id"]]
    assert (recorded[1]["success"], recorded[1]["failure_mode"]) == (False, "wrong_object")
    assert any(f"trial {cards[1]['trial_id']} not started" in n and "line 2" in n for n in notes), notes
    assert any(f"trial {cards[1]['trial_id']} not recorded" in n and "line 2" in n for n in notes), notes


def test_only_the_rollout_of_the_plan_approved_for_a_trial_records_it(tmp_path):
    """While a trial runs, the operator corrects an older rollout's label on the rollouts page: that records no trial
    (it used to be recorded as the running trial's outcome). The trial's own rollout, the first to close after its
    Approve, records it. A trial whose plan asked another instruction than the card's (the box edited) is not
    recorded: the label panel says why, and the card waits to be run again."""
    session = tmp_path / "session"
    cards = make_cards(session, [("relational_placement", "id", k) for k in range(2)])
    app, notes = make_app(tmp_path, RecordingGraph(), session_dir=str(session))
    app.rollouts.root = session / "rollouts"
    older = record_rollout(session / "rollouts", "older", instruction=cards[0]["instruction"])

    async def body(client):
        async def label(name, success=True):
            sent = {"rollout": name, "success": success, "failure_mode": None if success else "wrong_object"}
            return await (await client.post("/api/label", json=sent)).json()

        await client.post("/api/session/start", json={"trial_id": cards[0]["trial_id"]})
        app.on_rollout_closed(str(older))  # closed before the trial's Approve: not its rollout
        answer = await label("older")
        assert answer["trial"] is None and answer["trial_error"] is None
        await run_trial(client, app, session, cards[0], "trial0")
        again = await client.post("/api/session/start", json={"trial_id": cards[0]["trial_id"]})  # a second tap
        assert again.status == 200 and (await again.json())["trial"]["rollout"].endswith("trial0")
        assert (await label("older", success=False))["trial"] is None  # relabelled while the trial waits for its own
        recorded = await label("trial0", success=False)
        assert (
            recorded["trial"]["trial_id"] == cards[0]["trial_id"] and recorded["trial"]["rollout"] == "rollouts/trial0"
        )
        await client.post("/api/session/start", json={"trial_id": cards[1]["trial_id"]})
        await run_trial(client, app, session, cards[1], "trial1", instruction="put the blue cube in the bowl")
        refused = await label("trial1")
        assert refused["trial"] is None and "not the card's" in refused["trial_error"], refused
        assert "'put the blue cube in the bowl'" in refused["trial_error"]
        progress = (await (await client.get("/api/session")).json())["session"]
        assert progress["done"] == 1 and progress["card"]["trial_id"] == cards[1]["trial_id"]
        again = await client.post("/api/session/start", json={"trial_id": cards[1]["trial_id"]})
        assert again.status == 200, await again.text()

    serve(app, body)
    (line,) = [json.loads(x) for x in (session / "trials.jsonl").read_text().splitlines()]
    assert (line["trial_id"], line["success"], line["failure_mode"]) == (cards[0]["trial_id"], False, "wrong_object")
    assert load_rollout(session / "rollouts" / "older").failure_mode == "wrong_object"  # its label was saved
    assert any(n.startswith(f"trial {cards[1]['trial_id']} not recorded: its plan asked") for n in notes), notes


def test_an_approve_the_executor_refused_does_not_start_the_trial_and_the_plan_s_episode_is_not_its_rollout(tmp_path):
    """The executor refuses the trial's first Approve (busy with another client's plan): nothing ran, so the episode
    of that plan, closed when the next plan arrives, is not the trial's rollout; the next Approve starts the trial."""
    session = tmp_path / "session"
    (card,) = make_cards(session, [("relational_placement", "id", 0)])
    graph = RecordingGraph(busy=True)
    app, _ = make_app(tmp_path, graph, session_dir=str(session))
    app.rollouts.root = session / "rollouts"

    async def body(client):
        await client.post("/api/session/start", json={"trial_id": card["trial_id"]})
        plan = (await (await client.post("/api/plan", json={"instruction": card["instruction"]})).json())["plan"]
        refused = await client.post("/api/decision", json={"plan_id": plan["id"], "approve": True})
        assert refused.status == 502 and "rejected the goal" in (await refused.json())["error"]
        graph.busy = False
        # the next plan request: the logger closes the unrun plan's episode as the new plan arrives, before its Approve
        app.on_rollout_closed(str(record_rollout(session / "rollouts", "unrun", instruction=card["instruction"])))
        await run_trial(client, app, session, card, "trial0")
        assert (await (await client.post("/api/label", json={"rollout": "unrun", "success": True})).json())[
            "trial"
        ] is None
        answer = await (await client.post("/api/label", json={"rollout": "trial0", "success": True})).json()
        assert answer["trial"]["trial_id"] == card["trial_id"] and answer["trial"]["rollout"] == "rollouts/trial0"

    serve(app, body)


def test_a_reject_that_fails_while_a_trial_runs_leaves_the_trial_and_its_rollout(tmp_path):
    """With approval on, a trial's plan is approved and runs; the operator plans again and rejects that plan, and the
    executor does not answer the refusal. The trial that runs is still started: its rollout, closing after, records
    it."""
    session = tmp_path / "session"
    (card,) = make_cards(session, [("relational_placement", "id", 0)])
    graph = RecordingGraph(require_approval=True)
    app, _ = make_app(tmp_path, graph, session_dir=str(session))
    app.rollouts.root = session / "rollouts"

    def no_refusal(approved, wait_s):  # test double: the executor's approve service does not answer a Reject
        if not approved:
            raise GraphError("/grounded_planner/approve did not answer")
        return True, "approved"

    async def body(client):
        await client.post("/api/session/start", json={"trial_id": card["trial_id"]})
        plan = (await (await client.post("/api/plan", json={"instruction": card["instruction"]})).json())["plan"]
        await held(graph)
        assert (await client.post("/api/decision", json={"plan_id": plan["id"], "approve": True})).status == 200
        graph.answer_approval = no_refusal
        other = (await (await client.post("/api/plan", json={"instruction": "look around"})).json())["plan"]
        await held(graph, 2)
        refused = await client.post("/api/decision", json={"plan_id": other["id"], "approve": False})
        assert refused.status == 502, await refused.text()
        app.on_rollout_closed(str(record_rollout(session / "rollouts", "trial0", instruction=card["instruction"])))
        answer = await (await client.post("/api/label", json={"rollout": "trial0", "success": True})).json()
        assert answer["trial"]["trial_id"] == card["trial_id"], answer

    serve(app, body)


def test_trials_jsonl_is_read_again_only_when_another_process_changed_it(tmp_path, monkeypatch):
    """Every page's session panel and every trial ask for the session's progress; a campaign's trials.jsonl took
    110-180 ms to read and check (2,892 lines), so it is read again only when it changed: not for a page's ask, not
    for this console's own trial, and at once for a trial another terminal recorded."""
    from grounded_planner.console import session as console_session

    session = tmp_path / "session"
    cards = make_cards(session, [("relational_placement", "id", k) for k in range(3)])
    reads = []
    real_load_trials = console_session.load_trials
    monkeypatch.setattr(console_session, "load_trials", lambda folder: reads.append(folder) or real_load_trials(folder))
    trial_line(session, cards[0])
    reads.clear()
    app, _ = make_app(tmp_path, RecordingGraph(), session_dir=str(session))
    app.rollouts.root = session / "rollouts"
    assert len(reads) == 1 and app.state.snapshot()["session"]["done"] == 1

    async def body(client):
        for _ in range(3):
            assert (await (await client.get("/api/session")).json())["session"]["done"] == 1
        assert len(reads) == 1, "trials.jsonl was read again for a page's ask, unchanged"
        await client.post("/api/session/start", json={"trial_id": cards[1]["trial_id"]})
        await run_trial(client, app, session, cards[1], "trial1")
        labelled = await (await client.post("/api/label", json={"rollout": "trial1", "success": True})).json()
        assert labelled["trial"]["trial_id"] == cards[1]["trial_id"]
        assert app.state.snapshot()["session"]["done"] == 2 and len(reads) == 1, "read again for its own trial"
        trial_line(session, cards[2])  # another terminal records the last card
        answer = await (await client.get("/api/session")).json()
        assert answer["session"]["done"] == 3 and answer["session"]["card"] is None

    serve(app, body)
    assert len(reads) >= 2  # the other terminal's trial was read (by its own EvalSession and this console's)
    assert len((session / "trials.jsonl").read_text().splitlines()) == 3


def test_a_trial_after_a_last_line_with_no_newline_is_recorded_on_a_line_of_its_own(tmp_path):
    """An editor that strips the file's last newline must not make the next trial run into the line before."""
    session = tmp_path / "session"
    cards = make_cards(session, [("relational_placement", "id", k) for k in range(2)])
    trials = session / "trials.jsonl"
    trials.write_text(trial_line(session, cards[0]))  # the same line, its newline gone
    trial_line(session, cards[1])
    assert [json.loads(line)["trial_id"] for line in trials.read_text().splitlines()] == [
        cards[0]["trial_id"],
        cards[1]["trial_id"],
    ]


class SlowDisk:
    """Test double of a slow disk (a network share): ``wrap(read)`` is the real ``read``, called once the test sets
    ``release``. Each call is counted in ``calls``; one still waiting after ``wait_s`` goes on anyway and is counted in
    ``unreleased``: it held the thread the test releases from (the console's event loop, in these tests)."""

    def __init__(self, wait_s: float = 10.0):
        self.release, self.wait_s = threading.Event(), wait_s
        self.calls: list[tuple] = []
        self.unreleased: list[tuple] = []

    def wrap(self, read):
        def slow(*args, **kwargs):
            self.calls.append(args)
            if not self.release.wait(self.wait_s):
                self.unreleased.append(args)
            return read(*args, **kwargs)

        return slow


def test_stop_and_the_state_answer_while_trials_jsonl_is_read_from_a_slow_disk(tmp_path, monkeypatch):
    """The session's progress is read on a worker: a trials.jsonl on a slow disk (a network share) holds up neither
    STOP nor the state while a page asks for the session."""
    from grounded_planner.console import session as console_session

    session = tmp_path / "session"
    cards = make_cards(session, [("relational_placement", "id", k) for k in range(2)])
    graph = RecordingGraph()
    app, _ = make_app(tmp_path, graph, session_dir=str(session))
    disk = SlowDisk()
    monkeypatch.setattr(console_session, "load_trials", disk.wrap(console_session.load_trials))
    trial_line(session, cards[0])  # trials.jsonl changed: the next ask reads it

    async def body(client):
        asking = asyncio.ensure_future(client.get("/api/session"))
        try:
            await eventually(lambda: len(disk.calls) >= 1, lambda: "the session's read under way")
            stop = await asyncio.wait_for(client.post("/api/stop"), 3.0)  # the read waits 10 s
            assert stop.status == 200, await stop.text()
            state = await asyncio.wait_for(client.get("/api/state"), 3.0)
            assert state.status == 200
        finally:
            disk.release.set()
        assert (await (await asyncio.wait_for(asking, 15.0)).json())["session"]["done"] == 1

    serve(app, body)
    assert not disk.unreleased, "the read held the console's event loop: STOP and the state waited 10 s behind it"
    assert graph.did("stop"), graph.calls


def test_a_taken_port_is_a_one_line_error_naming_the_address(tmp_path):
    import socket

    from grounded_planner.console.server import ConsoleBindError, ConsoleServer

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        app, _ = make_app(tmp_path)
        with pytest.raises(ConsoleBindError, match=f"cannot listen on 127.0.0.1:{port}"):
            ConsoleServer(app, "127.0.0.1", port).start()
        server = ConsoleServer(make_app(tmp_path)[0], "127.0.0.1", 0).start()  # any free port: served
        try:
            import urllib.request

            assert json.loads(urllib.request.urlopen(server.url + "api/state", timeout=10).read())["plan"] is None
        finally:
            server.stop()
    finally:
        taken.close()


def test_reject_refuses_the_plan_the_executor_holds_and_sends_nothing_otherwise(tmp_path):
    graph = RecordingGraph(require_approval=True)
    app, notes = make_app(tmp_path, graph)

    async def body(client):
        plan = (await (await client.post("/api/plan", json={"instruction": "a"})).json())["plan"]
        await held(graph)
        answer = await client.post("/api/decision", json={"plan_id": plan["id"], "approve": False})
        assert "answered /grounded_planner/approve: rejected" in (await answer.json())["message"]
        graph.require_approval = False  # no approval gate: Reject sends nothing
        plan = (await (await client.post("/api/plan", json={"instruction": "b"})).json())["plan"]
        answer = await client.post("/api/decision", json={"plan_id": plan["id"], "approve": False})
        assert (await answer.json())["message"] == "nothing was sent to the executor"

    serve(app, body)
    assert graph.did("approve") == [("approve", False)] and graph.did("execute") == []
    assert any("plan 1 rejected by 127.0.0.1" in n for n in notes)
    assert any("plan 2 rejected by 127.0.0.1: nothing was sent" in n for n in notes)

    # another client's plan is held by the executor (its awaiting_approval event; ours could not be sent ahead):
    # Reject refuses that one
    other = RecordingGraph(require_approval=True, busy=True)
    app, notes = make_app(tmp_path, other)

    async def another(client):
        plan = (await (await client.post("/api/plan", json={"instruction": "c"})).json())["plan"]
        app.state.on_feedback({"step": 0, "state": "awaiting_approval", "message": "'x': grasp cube"})
        assert (await (await client.get("/api/state")).json())["executor"]["state"] == "waiting_approval"
        answer = await client.post("/api/decision", json={"plan_id": plan["id"], "approve": False})
        assert "answered /grounded_planner/approve: rejected" in (await answer.json())["message"]

    serve(app, another)
    assert other.did("approve") == [("approve", False)] and other.did("hold") == []


class CountingGraph(RecordingGraph):
    """RecordingGraph whose camera has a new frame each time the app asks (a camera far faster than any page)."""

    def __init__(self):
        super().__init__()
        self.asked = 0
        self.widths = []  # the width each frame was asked for
        self.held = False  # True: the camera has no newer image (nothing asked is counted)

    def latest_frame(self, after_seq, width=0, wanted=None):
        if self.held:
            return None
        self.asked += 1
        self.widths.append(width)
        return Frame(self.asked, self.asked, 4, 2, b"\xff\xd8%d" % self.asked)  # a newer image each time


def test_frames_are_taken_only_while_a_page_waits_for_one(tmp_path):
    graph = CountingGraph()
    app, _ = make_app(tmp_path, graph)

    async def body(client):
        await asyncio.sleep(0.3)
        assert graph.asked == 0  # no page: no image taken, none encoded
        ws = await client.ws_connect("/ws")
        await ws.receive(timeout=5)  # the state
        await asyncio.sleep(0.3)
        assert graph.asked == 0  # a page that has not asked for frames (the rollouts page) costs nothing either
        await ws.send_str(json.dumps({"type": "frames"}))
        assert (await ws.receive(timeout=5)).type == WSMsgType.BINARY
        await asyncio.sleep(0.3)
        asked = graph.asked
        assert asked == 1  # the frame is in flight until the page acknowledges it: nothing more is taken
        await ws.send_str(json.dumps({"type": "ack"}))
        assert (await ws.receive(timeout=5)).type == WSMsgType.BINARY
        await ws.close()
        await asyncio.sleep(0.3)
        assert graph.asked == 2

    serve(app, body)


def test_frames_are_asked_for_as_wide_as_the_widest_page_shows_them(tmp_path):
    """Each page says how wide it shows the camera (device pixels, on ``frames`` and every ``ack``): the graph is asked
    for frames that wide, rounded up to 64 px, the widest of the pages waiting; a page that says nothing (or nonsense)
    gets frames as they come (0)."""
    graph = CountingGraph()
    app, _ = make_app(tmp_path, graph)

    async def frame_for(ws, message):
        await ws.send_str(json.dumps(message))
        assert (await ws.receive(timeout=5)).type == WSMsgType.BINARY
        return graph.widths[-1]

    async def body(client):
        small = await client.ws_connect("/ws")
        await small.receive(timeout=5)  # the state
        assert await frame_for(small, {"type": "frames", "width": 811}) == 832
        assert await frame_for(small, {"type": "ack", "width": 640}) == 640  # the window was made narrower
        for nonsense in ("wide", -5, True, None, 1e9):
            assert await frame_for(small, {"type": "ack", "width": nonsense}) == 0
        wide = await client.ws_connect("/ws")
        await wide.receive(timeout=5)
        # both pages wait for the camera's next image: one encoding for both, as wide as the wider page shows it
        graph.held = True
        await wide.send_str(json.dumps({"type": "frames", "width": 1500}))
        await small.send_str(json.dumps({"type": "ack", "width": 600}))
        await asyncio.sleep(0.3)
        asked = graph.asked
        graph.held = False
        got = [(await ws.receive(timeout=5)).data for ws in (wide, small)]
        assert got[0] == got[1] and graph.asked == asked + 1 and graph.widths[-1] == 1536
        await small.close()
        await wide.close()

    serve(app, body)


def test_max_frame_rate_caps_the_frames_a_page_gets(tmp_path):
    graph = CountingGraph()
    app, _ = make_app(tmp_path, graph, max_frame_rate=5.0)

    async def body(client):
        ws = await client.ws_connect("/ws")
        await ws.receive(timeout=5)
        await ws.send_str(json.dumps({"type": "frames"}))
        arrived = []
        for _ in range(4):  # the page acknowledges each frame at once: only the cap spaces them
            assert (await ws.receive(timeout=5)).type == WSMsgType.BINARY
            arrived.append(asyncio.get_running_loop().time())
            await ws.send_str(json.dumps({"type": "ack"}))
        await ws.close()
        return arrived

    arrived = serve(app, body)
    assert arrived[-1] - arrived[0] >= 3 * 0.2 - 0.02  # 5 a second at most: 0.2 s apart or more


def test_the_push_channel_does_not_deflate_the_jpeg_frames_again(tmp_path):
    """A browser asks for permessage-deflate; the console declines (its frames are JPEG already: deflating them again
    gained nothing and took half its CPU with a page open)."""
    graph = RecordingGraph()
    graph.frames = [Frame(1, 111, 4, 2, b"\xff\xd8one")]
    app, _ = make_app(tmp_path, graph)

    async def body(client):
        ws = await client.ws_connect("/ws", compress=15)  # what Chromium offers
        assert ws.compress == 0  # not agreed
        await ws.receive(timeout=5)
        await ws.send_str(json.dumps({"type": "frames"}))
        assert (await ws.receive(timeout=5)).data[16:] == b"\xff\xd8one"
        await ws.close()

    serve(app, body)


async def next_message(ws, kind):
    """The next push of ``kind`` ("live", "state") or a frame ("frame"), skipping others (5 s at most)."""
    while True:
        message = await ws.receive(timeout=5)
        if kind == "frame" and message.type == WSMsgType.BINARY:
            return message
        if message.type == WSMsgType.TEXT and json.loads(message.data)["type"] == kind:
            return json.loads(message.data)


async def live_page(client):
    """A live page's push channel: connected, its state read, and the first frame it asked for shown (no ack yet)."""
    ws = await client.ws_connect("/ws")
    await next_message(ws, "state")
    await ws.send_str(json.dumps({"type": "frames"}))
    await next_message(ws, "frame")
    return ws


def test_the_live_view_pauses_while_the_planner_answers_and_the_arm_is_still(tmp_path):
    """Any client's plan request (the graph reports them from the plan service's introspection events): no frame is
    taken or sent until it is answered, and the pages are told; while a goal runs, frames always flow."""
    graph = CountingGraph()
    app, _ = make_app(tmp_path, graph)

    async def body(client):
        ws = await live_page(client)
        app.plan_requests.started(("a client", 1))  # the planner took a request
        assert (await next_message(ws, "live"))["paused"] is True
        asked = graph.asked
        await ws.send_str(json.dumps({"type": "ack"}))
        await asyncio.sleep(0.4)
        assert graph.asked == asked  # paused: no image taken, none encoded, none sent
        assert graph.did("frames_paused") == [("frames_paused",)]  # told once: it may leave the camera meanwhile
        app.plan_requests.answered(("a client", 1))
        assert (await next_message(ws, "live"))["paused"] is False
        await next_message(ws, "frame")  # the page's ack was kept: frames flow again at once
        app.plan_requests.started(("a client", 2))  # the next request: the graph is told of that pause too
        await next_message(ws, "live")
        await ws.send_str(json.dumps({"type": "ack"}))
        await eventually(lambda: len(graph.did("frames_paused")) == 2, lambda: f"told {graph.calls}")
        app.plan_requests.answered(("a client", 2))
        await next_message(ws, "frame")

        app.state.on_feedback({"step": 0, "state": "approach"})  # a goal runs (a closed loop asks for plans)
        app.plan_requests.started(("the executor", 7))
        await ws.send_str(json.dumps({"type": "ack"}))
        await next_message(ws, "frame")
        await ws.close()

    serve(app, body)


def test_the_graph_hears_of_a_pause_when_it_begins_not_at_the_pages_next_ask(tmp_path):
    """A page (a tablet) still showing its last frame has not asked for the next one when the planner takes a
    request: the graph is told at once that no frame is wanted, so that it leaves the camera while the planner works
    (it used to hear only at the page's next ask, up to a frame period later, the camera's images arriving
    meanwhile). With no page open the console does nothing at all for a pause."""
    graph = CountingGraph()
    app, _ = make_app(tmp_path, graph)

    async def body(client):
        app.plan_requests.started(("a client", 1))
        await asyncio.sleep(0.3)
        assert graph.did("frames_paused") == []  # no page: nothing to pause, no thread woken
        app.plan_requests.answered(("a client", 1))
        ws = await live_page(client)  # shown; no ack: the page asks for nothing now
        app.plan_requests.started(("a client", 2))
        await eventually(lambda: graph.did("frames_paused") == [("frames_paused",)], lambda: f"told {graph.calls}")
        assert (await next_message(ws, "live"))["paused"] is True
        await ws.send_str(json.dumps({"type": "ack"}))  # the page asks during the pause: not told twice
        await asyncio.sleep(0.3)
        assert graph.did("frames_paused") == [("frames_paused",)]
        app.plan_requests.answered(("a client", 2))
        await next_message(ws, "frame")  # and frames flow again once it is answered
        await ws.close()

    serve(app, body)


class SlowReadingGraph(RecordingGraph):
    """RecordingGraph whose next image is read and scaled until the test says ``go`` (a frame under way on a busy
    machine); before encoding it, it asks ``wanted`` as ConsoleNode does."""

    def __init__(self):
        super().__init__()
        self.reading, self.go = threading.Event(), threading.Event()
        self.encoded = 0

    def latest_frame(self, after_seq, width=0, wanted=None):
        self.reading.set()
        assert self.go.wait(10.0), "the test never said go"
        if wanted is not None and not wanted():
            self.calls.append(("dropped before encoding",))
            return None
        self.encoded += 1
        return Frame(self.encoded, self.encoded, 4, 2, b"\xff\xd8%d" % self.encoded)


def test_a_frame_under_way_when_the_planner_takes_a_request_is_not_encoded(tmp_path):
    """The page asked for a frame and the console is reading the camera's image when the planner takes a request: the
    image is dropped before its encoding (the larger part of a frame's CPU), not encoded and sent while the planner
    works; once the request is answered the next frame is encoded and sent."""
    graph = SlowReadingGraph()
    app, _ = make_app(tmp_path, graph)

    async def body(client):
        ws = await client.ws_connect("/ws")
        await next_message(ws, "state")
        graph.go.set()
        await ws.send_str(json.dumps({"type": "frames"}))
        await next_message(ws, "frame")
        graph.go.clear()
        graph.reading.clear()
        await ws.send_str(json.dumps({"type": "ack"}))
        await eventually(graph.reading.is_set, lambda: "the frame thread to read the next image")
        app.plan_requests.started(("a client", 1))  # while that image is read
        assert (await next_message(ws, "live"))["paused"] is True
        graph.go.set()
        await eventually(lambda: graph.did("frames_paused"), lambda: f"told {graph.calls}")
        assert graph.did("dropped before encoding") == [("dropped before encoding",)] and graph.encoded == 1
        app.plan_requests.answered(("a client", 1))
        assert (await next_message(ws, "frame")).data[16:] == b"\xff\xd82" and graph.encoded == 2
        await ws.close()

    serve(app, body)


def test_a_paused_frame_thread_sleeps_until_the_pause_ends(monkeypatch):
    """While the live view is paused and a page waits for a frame, the frame thread sleeps until it is told the pause
    may have ended (it looked every FRAME_POLL_S, 100 times a second: 18-20 ms of the console's CPU per second of the
    planner's work). The fallback look is set to 30 s here, so only the wake-up can bring the frame in time."""
    monkeypatch.setattr(console_app, "PAUSED_POLL_S", 30.0)
    graph = CountingGraph()
    paused, looked = [True], []

    def is_paused() -> bool:
        looked.append(time.monotonic())
        return paused[0]

    async def main():
        pump = FramePump(graph, asyncio.get_running_loop(), paused=is_paused)
        try:
            waiting = asyncio.ensure_future(pump.next_frame(0))
            await asyncio.sleep(1.0)
            assert graph.asked == 0 and graph.did("frames_paused") == [("frames_paused",)]
            assert len(looked) <= 5, f"looked {len(looked)} times in a second of pause"
            paused[0] = False
            pump.pause_may_have_ended()
            assert (await asyncio.wait_for(waiting, 5.0)).seq == 1
        finally:
            await asyncio.get_running_loop().run_in_executor(None, pump.stop)

    asyncio.run(main())


def test_a_page_that_connects_while_the_planner_answers_is_told_the_live_view_is_paused(tmp_path):
    app, _ = make_app(tmp_path, CountingGraph())

    async def body(client):
        app.plan_requests.started(("a client", 1))
        ws = await client.ws_connect("/ws")
        await next_message(ws, "state")
        assert (await next_message(ws, "live"))["paused"] is True
        await ws.close()

    serve(app, body)


def test_the_consoles_own_plan_request_pauses_the_live_view_and_live_while_planning_keeps_it(tmp_path):
    for live_while_planning in (False, True):
        seen = []

        class Watching(RecordingGraph):
            def plan(self, instruction, timeout_s, sent):
                return super().plan(instruction, timeout_s, lambda: (sent(), seen.append(app.live_paused())))

        app, _ = make_app(tmp_path, Watching(), live_while_planning=live_while_planning)

        async def body(client):
            await client.post("/api/plan", json={"instruction": "a"})
            assert app.live_paused() is False  # answered: frames flow again

        serve(app, body)
        assert seen == [not live_while_planning]


def test_the_consoles_own_plan_request_is_on_its_way_before_the_live_view_pauses(tmp_path):
    """With a page open, the live view pauses (the graph told it may leave the camera topic, the pages told) once the
    console's request is on its way to the planner (the graph's ``sent()``), not while the request is being made:
    leaving the camera holds the GIL for about a millisecond (rclpy's subscription destroy), which held up the
    request's sending on the plan worker (docs/console.md, Performance)."""
    seen = []

    class Sending(CountingGraph):
        def plan(self, instruction, timeout_s, sent):
            seen.append(("making the request", app.live_paused()))
            time.sleep(0.3)  # long enough for the frame thread to have been told of a pause, had one begun
            seen.append(("made", len(self.did("frames_paused"))))

            def on_its_way():
                sent()
                seen.append(("sent", app.live_paused()))

            answer = super().plan(instruction, timeout_s, on_its_way)
            deadline = time.monotonic() + 5.0
            while not self.did("frames_paused") and time.monotonic() < deadline:  # the planner works meanwhile
                time.sleep(0.01)
            seen.append(("answered", len(self.did("frames_paused"))))
            return answer

    graph = Sending()
    app, _ = make_app(tmp_path, graph)

    async def body(client):
        ws = await live_page(client)
        assert (await client.post("/api/plan", json={"instruction": "a"})).status == 200
        assert (await next_message(ws, "live"))["paused"] is True
        await ws.close()

    serve(app, body)
    assert seen == [("making the request", False), ("made", 0), ("sent", True), ("answered", 1)]


def test_the_live_view_resumes_only_once_the_plan_s_answer_is_written(tmp_path, monkeypatch):
    """The frame thread subscribing to the camera again and the pages' news would otherwise take the GIL from the
    handler before it wrote the answer (docs/console.md, Performance: where a request through the console goes)."""
    from aiohttp import web

    order = []
    app, _ = make_app(tmp_path)
    listener = app.plan_requests.listener

    def heard(busy):
        order.append("paused" if busy else "resumed")
        listener(busy)

    app.plan_requests.listener = heard
    write_eof = web.StreamResponse.write_eof

    async def written(self, data=b""):
        await write_eof(self, data)
        order.append("answer written")

    monkeypatch.setattr(web.StreamResponse, "write_eof", written)

    async def body(client):
        assert (await client.post("/api/plan", json={"instruction": "a"})).status == 200

    serve(app, body)
    assert order[:3] == ["paused", "answer written", "resumed"]


def test_a_plan_request_never_answered_pauses_the_live_view_no_longer_than_its_timeout():
    from grounded_planner.console.state import PlanRequests

    flips = []
    requests = PlanRequests(0.2, listener=flips.append)
    requests.started("lost")  # the planner died before it answered
    assert requests.busy() and flips == [True]
    time.sleep(0.3)
    assert not requests.busy() and flips == [True, False]


class BlockingGraph(RecordingGraph):
    """RecordingGraph whose ``plan`` (a planner that does not answer: a dead VLM server, up to ``plan_timeout_s``)
    and ``execute`` (the executor's answer to the goal still on its way) wait until the test releases them. ``stop``
    cancels what the executor has accepted and not ended, as the real action's cancel-all request does: a goal still
    on its way is not there to cancel."""

    def __init__(self, block_plan=False, block_execute=False, **kwargs):
        super().__init__(**kwargs)
        self.release = threading.Event()
        self.block_plan, self.block_execute = block_plan, block_execute
        self.waiting = 0  # calls waiting for the release
        self._lock = threading.Lock()

    def _wait(self):
        with self._lock:
            self.waiting += 1
        self.release.wait(30)

    def plan(self, instruction, timeout_s, sent):
        sent()
        if self.block_plan:
            self._wait()
        return super().plan(instruction, timeout_s, lambda: None)

    def execute(self, plan, hold=False):
        if self.block_execute:
            self._wait()
        return super().execute(plan, hold)

    def stop(self):
        running = [g for g in self.goals if not g.is_ended]
        for goal in running:
            goal.is_ended = True
        self.calls.append(("stop", len(running)))
        return bool(running)


async def while_every_plan_waits(client, graph, check) -> None:
    """Await ``check()`` while 10 plan requests (more than the console has workers: pages, reloads, other clients of
    its API) wait on ``graph``'s planner, which does not answer until they are released afterwards."""
    plans = [asyncio.ensure_future(client.post("/api/plan", json={"instruction": f"p{i}"})) for i in range(10)]
    try:
        await eventually(lambda: graph.waiting >= 8, lambda: f"8 plans waiting, not {graph.waiting}")
        await check()
    finally:
        graph.release.set()
        await asyncio.gather(*plans)


def test_stop_is_answered_at_once_while_every_worker_waits_on_a_planner_that_does_not_answer(tmp_path):
    graph = BlockingGraph(block_plan=True)
    app, notes = make_app(tmp_path, graph)

    async def check(client):
        stop = await asyncio.wait_for(client.post("/api/stop"), 3.0)  # the plans wait 30 s
        assert stop.status == 200, await stop.text()
        assert graph.did("stop"), graph.calls

    serve(app, lambda client: while_every_plan_waits(client, graph, lambda: check(client)))
    assert any(n.startswith("STOP from 127.0.0.1") for n in notes), notes


def test_a_stop_while_an_approved_plan_is_on_its_way_cancels_it_once_the_executor_takes_it(tmp_path):
    graph = BlockingGraph(block_execute=True)  # require_approval off: Approve sends the goal
    app, notes = make_app(tmp_path, graph)

    async def body(client):
        plan = (await (await client.post("/api/plan", json={"instruction": "put the cube in the bowl"})).json())["plan"]
        decision = asyncio.ensure_future(client.post("/api/decision", json={"plan_id": plan["id"], "approve": True}))
        await eventually(lambda: graph.waiting == 1, lambda: "the goal on its way")
        stop = await client.post("/api/stop")  # the operator changed their mind: the goal is not accepted yet
        assert stop.status == 200
        graph.release.set()  # the executor accepts the goal now
        answer = await decision
        return stop, answer, await answer.json()

    stop, answer, data = serve(app, body)
    # the first cancel found nothing; the goal the executor took afterwards was cancelled as soon as it was taken
    assert graph.calls[-3:] == [("stop", 0), ("execute", "put the cube in the bowl"), ("stop", 1)], graph.calls
    assert all(goal.is_ended for goal in graph.goals)
    assert answer.status == 409, data
    assert "STOP" in data["error"] and "cancelled" in data["error"], data
    assert app.state.snapshot()["plan"]["error"] == data["error"]
    assert any("STOP" in n and "cancelled" in n and "plan 1" in n for n in notes), notes


def test_an_approve_that_waited_behind_a_stop_sends_nothing(tmp_path):
    graph = BlockingGraph(block_execute=True, require_approval=True)  # the preview's goal is held on its way
    app, notes = make_app(tmp_path, graph)

    async def body(client):
        plan = (await (await client.post("/api/plan", json={"instruction": "put the cube in the bowl"})).json())["plan"]
        await eventually(lambda: graph.waiting == 1, lambda: "the preview's goal on its way to be held")
        # Approve waits for the preview's send (one graph action at a time); STOP comes meanwhile
        decision = asyncio.ensure_future(client.post("/api/decision", json={"plan_id": plan["id"], "approve": True}))
        await asyncio.sleep(0.1)
        assert (await client.post("/api/stop")).status == 200
        graph.release.set()
        answer = await decision
        return answer, await answer.json()

    answer, data = serve(app, body)
    assert answer.status == 409 and "STOP" in data["error"], data
    assert not graph.did("approve") or graph.did("approve") == [("approve", False)], graph.calls
    assert all(goal.is_ended for goal in graph.goals), graph.calls  # the held goal was cancelled once it was taken


class NoExecutor(RecordingGraph):
    """A graph whose executor left: its Stop and Reset scene fail as ConsoleNode's do when no executor offers the
    service (the other calls answer as RecordingGraph's)."""

    def stop(self):
        raise GraphError.no_executor(names.EXECUTE_ACTION)

    def reset_scene(self):
        raise GraphError.no_executor(names.RESET_SCENE_SERVICE)


def test_the_graph_doubles_offer_every_call_the_console_makes_of_its_graph():
    """ConsoleApp may call any method of the ConsoleGraph protocol; a test double that lacks one (or names a
    parameter otherwise than the app passes it) fails only when a test clicks that path (a 500 from the console),
    and the real graph, ConsoleNode, must offer each of them with the protocol's parameters."""
    import inspect

    from grounded_planner.console.graph import ConsoleGraph
    from grounded_planner.ros.console_node import ConsoleNode
    from helpers.console_stack import InstantGraph

    calls = {name: f for name, f in vars(ConsoleGraph).items() if inspect.isfunction(f) and not name.startswith("_")}
    assert {"plan", "execute", "answer_approval", "stop", "reset_scene", "latest_frame"} <= set(calls), calls
    for graph in (ConsoleNode, RecordingGraph, NoExecutor, InstantGraph):
        for name, protocol_call in calls.items():
            call = getattr(graph, name, None)
            assert callable(call), f"{graph.__name__} has no {name}"
            wanted = list(inspect.signature(protocol_call).parameters)
            assert list(inspect.signature(call).parameters) == wanted, f"{graph.__name__}.{name}"


def test_a_stop_with_no_executor_there_says_so_and_is_logged(tmp_path):
    app, notes = make_app(tmp_path, NoExecutor())

    async def body(client):
        response = await client.post("/api/stop")
        return response.status, await response.json()

    status, data = serve(app, body)
    assert status == 502 and data["error"] == "no executor offers grounded_planner/execute", data
    assert any(n.startswith("STOP from 127.0.0.1 failed: no executor offers") for n in notes), notes


def test_reset_scene_answers_with_the_executor_s_word_and_logs_it_with_the_client(tmp_path):
    graph = RecordingGraph()
    app, notes = make_app(tmp_path, graph)
    assert app.state.snapshot()["executor_backend"] == ""  # not known: the page offers no reset
    app.state.on_executor_backend("sim")
    assert app.state.snapshot()["executor_backend"] == "sim"

    async def body(client):
        done = await client.post("/api/reset_scene")
        answers = [(done.status, await done.json())]
        graph.reset_answer = (False, "a plan is executing or awaiting approval: reset refused")
        refused = await client.post("/api/reset_scene")
        answers.append((refused.status, await refused.json()))
        return answers

    (status, data), (refused_status, refused) = serve(app, body)
    assert status == 200 and data == {"reset": True, "message": "sim: the scene is back at its start"}
    assert refused_status == 409 and refused["error"] == "a plan is executing or awaiting approval: reset refused"
    assert graph.did("reset_scene") == [("reset_scene",), ("reset_scene",)]
    assert "scene reset from 127.0.0.1: sim: the scene is back at its start" in notes
    assert "scene reset from 127.0.0.1 refused: a plan is executing or awaiting approval: reset refused" in notes
    assert app.state.snapshot()["log"][-1].endswith("refused: a plan is executing or awaiting approval: reset refused")

    app, notes = make_app(tmp_path, NoExecutor())

    async def gone(client):
        response = await client.post("/api/reset_scene")
        return response.status, await response.json()

    assert serve(app, gone) == (502, {"error": "no executor offers grounded_planner/reset_scene"})
    assert notes == ["scene reset from 127.0.0.1 failed: no executor offers grounded_planner/reset_scene"]


def test_an_executor_that_left_is_shown_gone_once_with_what_it_was_doing_until_it_is_back(tmp_path):
    app, _ = make_app(tmp_path)
    state = app.state
    state.on_executor_backend("sim")
    assert state.on_executor_presence(False) == "the executor left the graph: nothing can run until it is back"
    # which robot comes back is read again then: till that, the page offers no scene reset a click would fail on
    assert state.snapshot()["executor_backend"] == ""
    # nor does a read of the backend that answers after the executor left (the node reads it on a thread of its own)
    state.on_executor_backend("sim")
    assert state.snapshot()["executor_backend"] == ""
    # the pages get the line in their log with the change, in the same snapshot (not a push later)
    assert state.snapshot()["log"][-1].endswith("the executor left the graph: nothing can run until it is back")
    assert state.on_executor_presence(False) == ""  # said once
    assert len(state.snapshot()["log"]) == 1
    assert state.snapshot()["executor"]["state"] == "gone"
    assert state.on_executor_presence(True) == "the executor is back on the graph"
    assert state.snapshot()["executor"] == {
        "state": "idle",
        "step": None,
        "motion": "",
        "message": "the executor is back",
    }
    state.on_executor_backend("sim")  # the one that came back is read again
    assert state.snapshot()["executor_backend"] == "sim"
    assert state.on_executor_presence(True) == ""  # another executor matched, or the same one again: nothing new

    state.on_feedback({"step": 0, "state": "awaiting_approval", "message": ""})
    assert "held a plan for approval: nothing was approved" in state.on_executor_presence(False)
    state.on_executor_presence(True)

    plan = state.new_plan(
        "put the cube in the bowl", RecordingGraph().plan("put the cube in the bowl", 1.0, lambda: None), "me"
    )
    state.decide(plan["id"], True, "me")
    state.on_feedback({"step": 1, "state": "approach", "message": ""})
    line = state.on_executor_presence(False)
    assert line == (
        "the executor left the graph while step 2 ran (approach): what the arm did after that is not known; "
        "check the robot"
    )
    shown = state.snapshot()
    assert shown["executor"]["state"] == "gone" and shown["executor"]["step"] == 1
    assert shown["plan"]["error"] == line and shown["plan"]["result"] is None  # the page says why no result came
    assert shown["log"][-1].endswith(line)


def test_the_page_names_the_step_that_ended_a_plan_counted_from_1_as_its_table_counts(tmp_path):
    """The executor's abort message counts steps from 0 (``step 1 (place): fault`` for the second step, as the
    rollout's ``index``); the page's table and its running line count from 1, so the page says ``step 2`` with what
    stopped it. A message of another shape (a success, the closed loop's time budget) is shown as it came."""
    from grounded_planner.execution.config import ExecutorConfig
    from grounded_planner.execution.executor import Executor
    from helpers.kinematic_arm import KinematicArm, fault
    from helpers.staged_plans import plan_of, targets_of

    def as_received(result) -> dict:  # what execution_result_from_msg gives the console, of the fields used here
        return {"success": result.success, "message": result.message, "steps": [s.to_dict() for s in result.steps]}

    arm = KinematicArm(fail_on={5: fault()})  # the place's first motion (the grasp sends 5 commands)
    arm.connect()
    targets = targets_of(("grasp", (0.5, 0.1, 0.04), {"yaw": 0.0, "width": 0.04}), ("place", (0.5, -0.2, 0.0)))
    failed = Executor(arm, ExecutorConfig()).execute(plan_of("grasp", "place"), targets)
    assert failed.message == "step 1 (place): fault"  # the executor's own wording, which the page translates

    app, _ = make_app(tmp_path)
    state = app.state
    plan = state.new_plan(
        "put the cube in the bowl", RecordingGraph().plan("put the cube in the bowl", 1.0, lambda: None), "me"
    )
    state.decide(plan["id"], True, "me")
    state.on_result(as_received(failed))
    shown = state.snapshot()
    line = f"step 2 (place): fault ({failed.steps[-1].message})"
    assert "injected controller reflex" in line
    assert shown["executor"]["message"] == f"last plan failed: {line}"
    assert shown["plan"]["result"]["message"] == line and shown["plan"]["result"]["outcome"] == "failed"
    assert [s["index"] for s in shown["plan"]["result"]["steps"]] == [0, 1]  # the records: as the executor wrote them

    arm = KinematicArm()
    arm.connect()
    done = Executor(arm, ExecutorConfig()).execute(plan_of("grasp", "place"), targets)
    state.on_result(as_received(done))
    assert state.snapshot()["executor"]["message"] == "last plan succeeded: all 2 steps ok"
    budget = {"success": False, "message": "time budget of 1 s spent at step 0", "steps": failed.to_dict()["steps"]}
    state.on_result(budget)
    assert state.snapshot()["executor"]["message"] == "last plan failed: time budget of 1 s spent at step 0"

    # the closed loop's stop at a step says why itself: the number changes, the rest is as it came
    from test_execution_closed_loop import GRASP, Stage, frame, loop
    from test_execution_closed_loop import plan as plan_of_actions

    closed = loop(KinematicArm(fail_on={0: fault()}), Stage([frame()]))
    stopped = closed.run("x", plan_of_actions(GRASP), first=frame())
    assert stopped.message.startswith("step 0 (grasp): fault: ")  # the loop's own wording, translated
    state.on_result(stopped.to_dict())
    assert state.snapshot()["executor"]["message"] == "last plan failed: step 1" + stopped.message[len("step 0") :]


def test_the_rollouts_pages_and_the_state_answer_while_every_plan_request_waits_on_a_planner(tmp_path):
    graph = BlockingGraph(block_plan=True)
    app, _ = make_app(tmp_path, graph)

    async def check(client):
        for path in ("/api/rollouts", "/api/state"):
            answer = await asyncio.wait_for(client.get(path), 3.0)  # the plans wait 30 s
            assert answer.status == 200, (path, await answer.text())

    serve(app, lambda client: while_every_plan_waits(client, graph, lambda: check(client)))


def slow_frame_reads(app: ConsoleApp) -> tuple[threading.Event, list[tuple]]:
    """The app's rollout frames read from a slow disk (a network share): (the event that lets the reads go on, the
    reads under way)."""
    disk = SlowDisk(wait_s=30.0)
    app.rollouts.frame_jpeg = disk.wrap(app.rollouts.frame_jpeg)
    return disk.release, disk.calls


def test_an_approve_is_carried_out_while_every_worker_reads_rollout_frames_from_a_slow_disk(tmp_path):
    """A rollouts page loading its thumbnails from a slow disk (a network share) takes every general worker; the plan
    sent ahead to be held and the Approve on it do not wait behind those reads."""
    record_rollout(tmp_path / "rollouts", "r1")
    graph = RecordingGraph(require_approval=True)
    app, notes = make_app(tmp_path, graph)
    release, reading = slow_frame_reads(app)

    async def body(client):
        frames = [asyncio.ensure_future(client.get("/api/rollout/frame?id=r1&k=1")) for _ in range(10)]
        try:
            await eventually(lambda: len(reading) >= 8, lambda: f"8 frame reads waiting, not {len(reading)}")
            answer = await asyncio.wait_for(client.post("/api/plan", json={"instruction": "pick the cube"}), 3.0)
            plan = (await answer.json())["plan"]
            await eventually(lambda: ("hold", "pick the cube") in graph.calls, lambda: f"the plan held: {graph.calls}")
            decision = await asyncio.wait_for(
                client.post("/api/decision", json={"plan_id": plan["id"], "approve": True}), 3.0
            )  # the frame reads wait 30 s
            assert decision.status == 200, await decision.text()
        finally:
            release.set()
            shown = await asyncio.gather(*frames)
        assert all(frame.status == 200 for frame in shown)  # the slow reads were answered too, once the disk did

    serve(app, body)
    assert ("approve", True) in graph.calls, graph.calls
    assert any(n.startswith("plan 1 approved by 127.0.0.1") for n in notes), notes


def test_a_label_is_saved_while_every_worker_reads_rollout_frames_from_a_slow_disk(tmp_path):
    """The label that ends a trial (and moves an evaluation session to its next card) does not wait behind a rollouts
    page's thumbnails from a slow disk."""
    record_rollout(tmp_path / "rollouts", "r1")
    app, notes = make_app(tmp_path, RecordingGraph())
    release, reading = slow_frame_reads(app)

    async def body(client):
        frames = [asyncio.ensure_future(client.get("/api/rollout/frame?id=r1&k=1")) for _ in range(10)]
        try:
            await eventually(lambda: len(reading) >= 8, lambda: f"8 frame reads waiting, not {len(reading)}")
            label = {"rollout": "r1", "success": False, "failure_mode": "wrong_object"}
            answer = await asyncio.wait_for(client.post("/api/label", json=label), 3.0)  # the frame reads wait 30 s
            assert answer.status == 200, await answer.text()
        finally:
            release.set()
            await asyncio.gather(*frames)

    serve(app, body)
    assert load_rollout(tmp_path / "rollouts" / "r1").failure_mode == "wrong_object"
    assert any(n.startswith("rollout r1 labelled failure: wrong_object by 127.0.0.1") for n in notes), notes


def test_stop_answers_while_a_label_s_tally_walks_a_campaign_s_rollouts_folder(tmp_path):
    """A label recounts the tally with a walk of the rollouts folder (100-120 ms at 3,000 rollouts, longer on a slow
    disk): on a worker, so a STOP pressed meanwhile is not held up behind it."""
    record_rollout(tmp_path / "rollouts", "r1")
    graph = RecordingGraph()
    app, _ = make_app(tmp_path, graph)
    disk = SlowDisk()
    app.rollouts.tally = disk.wrap(app.rollouts.tally)

    async def body(client):
        labelling = asyncio.ensure_future(client.post("/api/label", json={"rollout": "r1", "success": True}))
        try:
            await eventually(lambda: disk.calls, lambda: "the label's walk under way")
            stop = await asyncio.wait_for(client.post("/api/stop"), 3.0)  # the walk waits 10 s
            assert stop.status == 200, await stop.text()
        finally:
            disk.release.set()
        assert (await asyncio.wait_for(labelling, 15.0)).status == 200

    serve(app, body)
    assert not disk.unreleased, "the walk held the console's event loop: STOP waited 10 s behind it"
    assert graph.did("stop"), graph.calls
    assert app.state.snapshot()["tally"][0]["successes"] == 1
