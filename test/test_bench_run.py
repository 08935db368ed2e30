"""`bench run` against a real HTTP server on localhost (the vlm layer's FakeVLMServer speaking the OpenAI API).

The server is a stand-in for a VLM (no model can run here): it finds objects by colour in the image it
receives and answers in GPT style, so the whole path is real: image encoding, HTTP, parsing, the
thread pool, the JSONL output, resuming, the response cache, and scoring of what came back.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from grounded_planner.bench.episodes import load_episodes, load_predictions
from grounded_planner.bench.runner import run_bench
from grounded_planner.bench.sample import BROWN, GREY, RED
from grounded_planner.bench.scoring import score
from grounded_planner.vlm.config import PlannerConfig
from grounded_planner.vlm.fake_server import FakeVLMServer, Reply
from grounded_planner.vlm.factory import make_planner

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sample_bench"
SCENE = {"red cup": RED, "bin": GREY, "drawer": BROWN}


def gp(*args):
    exe = Path(sys.executable).with_name("grounded-planner")
    return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, timeout=120)


@pytest.fixture
def episodes_file(tmp_path):
    """ep-01 (put the red cup in the bin), ep-12 (open the drawer), ep-07 (an implicit instruction the
    stand-in cannot plan: it answers an empty plan) and an episode whose image is missing."""
    records = {
        json.loads(line)["id"]: json.loads(line) for line in (SAMPLE / "episodes.jsonl").read_text().splitlines()
    }
    chosen = [
        records["ep-01"],
        records["ep-12"],
        records["ep-07"],
        dict(records["ep-01"], id="no-image", image="gone.png"),
    ]
    for r in chosen[:3]:
        r["image"] = str(SAMPLE / r["image"])
    path = tmp_path / "episodes.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in chosen))
    return path


@pytest.fixture
def server():
    with FakeVLMServer(scene=SCENE) as s:
        yield s


def run_cli(server, episodes_file, out, *extra):
    return gp(
        "bench",
        "run",
        "--episodes",
        episodes_file,
        "--out",
        out,
        "--backend",
        "openai",
        "--model",
        "gpt-stand-in",
        "--base-url",
        server.base_url,
        *extra,
    )


def test_run_writes_one_record_per_episode_and_the_plans_score(server, episodes_file, tmp_path):
    out = tmp_path / "pred.jsonl"
    proc = run_cli(server, episodes_file, out, "--concurrency", "3")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert (summary["total"], summary["done"], summary["failed"], summary["skipped"]) == (4, 3, 1, 0)
    assert "4/4" in proc.stderr  # the progress line
    preds = load_predictions(out)
    assert set(preds) == {"ep-01", "ep-12", "ep-07", "no-image"}
    assert preds["no-image"].plan is None and "gone.png" in preds["no-image"].error
    assert preds["ep-07"].plan["actions"] == [] and preds["ep-07"].plan["reason"]
    assert [a["type"] for a in preds["ep-01"].plan["actions"]] == ["grasp", "place"]
    assert len(server.requests) == 3  # the episode without an image never reached the model
    result = score(load_episodes(episodes_file), preds)
    assert result["overall"]["successes"] == 2  # the cup and the drawer are found, the implicit one is not
    assert result["overall"]["null_plans"] == 1


def test_rerun_skips_episodes_already_written(server, episodes_file, tmp_path):
    out = tmp_path / "pred.jsonl"
    assert run_cli(server, episodes_file, out).returncode == 0
    before, sent = out.read_text(), len(server.requests)
    proc = run_cli(server, episodes_file, out)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["skipped"] == 4
    assert out.read_text() == before and len(server.requests) == sent


def test_retry_errors_reruns_failed_episodes_and_the_new_record_wins(server, episodes_file, tmp_path):
    out = tmp_path / "pred.jsonl"
    server.script.append(Reply(status=400))  # the first request is rejected (4xx: no retry)
    proc = run_cli(server, episodes_file, out, "--concurrency", "1", "--limit", "1")
    assert proc.returncode == 3 and "all 1 episode(s) failed" in proc.stderr and "HTTP 400" in proc.stderr
    assert load_predictions(out)["ep-01"].plan is None
    assert json.loads(run_cli(server, episodes_file, out, "--limit", "0").stdout)["skipped"] == 1  # errors kept
    proc = run_cli(server, episodes_file, out, "--retry-errors", "--limit", "1")
    assert proc.returncode == 0, proc.stderr
    preds = load_predictions(out)
    assert preds["ep-01"].plan is not None and preds["ep-01"].error == ""
    assert len(out.read_text().splitlines()) == 2


def test_response_cache_makes_a_repeated_run_free(server, episodes_file, tmp_path):
    cache = tmp_path / "cache"
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert run_cli(server, episodes_file, first, "--cache-dir", cache).returncode == 0
    sent = len(server.requests)
    assert run_cli(server, episodes_file, second, "--cache-dir", cache).returncode == 0
    assert len(server.requests) == sent
    a, b = load_predictions(first), load_predictions(second)
    assert {k: v.plan for k, v in a.items()} == {k: v.plan for k, v in b.items()}


def test_requests_run_concurrently(server, episodes_file, tmp_path):
    """A counting wrapper around the real planner records how many plan() calls overlap. The server holds each answer
    until all three are in flight (or 10 s have passed: a runner that plans one at a time fails, it does not hang)."""
    all_in = threading.Event()
    server.script.extend(Reply(release=all_in) for _ in range(3))
    fallback = threading.Timer(10.0, all_in.set)
    fallback.start()
    planner = make_planner(PlannerConfig(backend="openai", model="gpt-stand-in", base_url=server.base_url))
    state = {"now": 0, "max": 0}
    lock = threading.Lock()

    class Counting:
        def plan(self, image, instruction):
            with lock:
                state["now"] += 1
                state["max"] = max(state["max"], state["now"])
                if state["now"] == 3:
                    all_in.set()
            try:
                return planner.plan(image, instruction)
            finally:
                with lock:
                    state["now"] -= 1

    eps = [e for e in load_episodes(episodes_file) if e.id != "no-image"]
    with planner:
        summary = run_bench(
            eps, Counting(), tmp_path / "p.jsonl", concurrency=3, progress_stream=open("/dev/null", "w")
        )
    fallback.cancel()
    assert (summary.done, summary.failed) == (3, 0)
    assert state["max"] == 3


def test_partial_last_line_from_a_crash_is_dropped_and_rerun(server, episodes_file, tmp_path):
    out = tmp_path / "pred.jsonl"
    assert run_cli(server, episodes_file, out, "--limit", "1").returncode == 0
    with out.open("a") as f:
        f.write('{"id": "ep-12", "plan": {"acti')  # killed mid-write
    proc = run_cli(server, episodes_file, out)
    assert proc.returncode == 0, proc.stderr
    assert set(load_predictions(out)) == {"ep-01", "ep-12", "ep-07", "no-image"}


def test_unreachable_server_records_errors_and_exits_3(episodes_file, tmp_path):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = tmp_path / "planner.yaml"
    config.write_text(f"backend: openai\nmodel: gpt-stand-in\nbase_url: http://127.0.0.1:{port}/v1\nmax_retries: 0\n")
    out = tmp_path / "pred.jsonl"
    proc = gp("bench", "run", "--episodes", episodes_file, "--out", out, "--config", config)
    assert proc.returncode == 3
    assert proc.stderr.strip().splitlines()[-1].startswith("grounded-planner bench: all 4 episode(s) failed")
    assert all(p.plan is None and p.error for p in load_predictions(out).values())


def test_bad_config_is_a_one_line_error(episodes_file, tmp_path):
    config = tmp_path / "planner.yaml"
    config.write_text("backend: telepathy\n")
    proc = gp("bench", "run", "--episodes", episodes_file, "--out", tmp_path / "p.jsonl", "--config", config)
    assert proc.returncode == 2 and "backend" in proc.stderr and "telepathy" in proc.stderr
    proc = gp(
        "bench",
        "run",
        "--episodes",
        episodes_file,
        "--out",
        tmp_path / "p.jsonl",
        "--backend",
        "decoupled",
        "--mode",
        "grounded",
    )
    assert proc.returncode == 2 and "contradicts" in proc.stderr


def test_replay_backend_reproduces_recorded_plans_without_a_server(tmp_path):
    """Recorded plans (the vlm layer's replay format) for the sample episodes whose sample plan is valid;
    the others have no record, so their episodes record the replay planner's error and the run goes on."""
    from grounded_planner.plan import GroundedPlan, PlanError

    records, recorded = [], set()
    episodes = {e.id: e for e in load_episodes(SAMPLE / "episodes.jsonl")}
    for pid, pred in load_predictions(SAMPLE / "predictions.jsonl").items():
        try:
            GroundedPlan.from_dict(pred.plan)
        except (PlanError, TypeError, AttributeError):
            continue
        records.append(json.dumps({"instruction": episodes[pid].instruction, "image_sha256": "*", "plan": pred.plan}))
        recorded.add(pid)
    replay = tmp_path / "replay.jsonl"
    replay.write_text("\n".join(records) + "\n")
    out = tmp_path / "pred.jsonl"
    proc = gp(
        "bench",
        "run",
        "--episodes",
        SAMPLE / "episodes.jsonl",
        "--out",
        out,
        "--backend",
        "replay",
        "--replay-file",
        replay,
    )
    assert proc.returncode == 0, proc.stderr
    got = load_predictions(out)
    assert {i for i, p in got.items() if p.plan is not None} == recorded
    assert all("no recorded plan" in got[i].error for i in set(episodes) - recorded)
    sample = load_predictions(SAMPLE / "predictions.jsonl")
    for i in recorded:
        assert got[i].plan["actions"] == sample[i].plan["actions"]
    # the replayed run scores like the sample predictions on the recorded episodes
    mine = score(list(episodes.values()), got)["overall"]["successes"]
    assert mine == score(list(episodes.values()), sample)["overall"]["successes"] == 3


def test_decoupled_mode_plans_in_words_then_grounds_each_step(server, episodes_file, tmp_path):
    """--mode decoupled: the language planner answers steps without coordinates, the vlm grounder
    localizes each one (two more requests per pair step); the grounded result scores like grounded mode."""
    out = tmp_path / "pred.jsonl"
    proc = run_cli(server, episodes_file, out, "--mode", "decoupled", "--grounder", "vlm")
    assert proc.returncode == 0, proc.stderr
    preds = load_predictions(out)
    assert [a["type"] for a in preds["ep-01"].plan["actions"]] == ["grasp", "place"]
    systems = [
        str(m.get("content")) for r in server.requests for m in r.get("messages", []) if m.get("role") == "system"
    ]
    assert any("no coordinates" in s or "Name each object precisely" in s for s in systems)
    assert len(server.requests) > 3  # planning plus grounding requests
    result = score(load_episodes(episodes_file), preds)
    assert result["overall"]["successes"] == 2
