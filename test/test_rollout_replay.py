"""Replay: planning again from bags gives the predictions that planning the same frames directly gives.

The planner is the real vlm-layer planner (HTTP backend) talking to a stand-in VLM server started here,
whose answer depends on the pixels and the instruction it receives (it boxes the one white square in the
image), so a wrong, shifted or re-encoded frame or a mismatched instruction changes the prediction.
"""

from __future__ import annotations

import base64
import io
import json
import time
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

pytest.importorskip("rosbags")
planner_mod = pytest.importorskip("grounded_planner.vlm.factory")  # make_planner

from grounded_planner.cli.main import main  # noqa: E402
from grounded_planner.rollout.record import RecordingOptions, RolloutRecorder  # noqa: E402
from grounded_planner.vlm.config import PlannerConfig  # noqa: E402

W, H = 64, 48


def _frame(square_xy: tuple[int, int], seed: int) -> np.ndarray:
    rgb = np.random.default_rng(seed).integers(0, 120, (H, W, 3), dtype=np.uint8)
    x, y = square_xy
    rgb[y : y + 6, x : x + 6] = 255
    return rgb


class SquareFinderVLM:
    """OpenAI-compatible server: grasp box = bounding box of the white pixels, object = the instruction's colour word."""

    def __init__(self):
        self.requests = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.requests += 1
                user = next(m for m in body["messages"] if m["role"] == "user")["content"]
                url = next(p["image_url"]["url"] for p in user if p["type"] == "image_url")
                text = next(p["text"] for p in user if p["type"] == "text")
                from PIL import Image

                img = np.asarray(Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).convert("RGB"))
                ys, xs = np.nonzero(img.min(axis=2) >= 200)  # near-white: the planner may send JPEG
                colour = (re.search(r"\b(red|blue|green)\b", text) or re.search(r"(\w+)", text)).group(1)
                answer = [
                    {
                        "type": "grasp",
                        "object": f"{colour} block",
                        "bbox": [int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1],
                    },
                    {
                        "type": "place",
                        "object": f"{colour} block",
                        "target": "bowl",
                        "point": [int(W - 1 - xs.min()), int(ys.min())],
                    },
                ]
                data = json.dumps(
                    {"choices": [{"index": 0, "message": {"role": "assistant", "content": json.dumps(answer)}}]}
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def vlm():
    server = SquareFinderVLM()
    yield server
    server.close()


def _planner_args(vlm) -> list[str]:
    return ["--backend", "openai", "--model", "stand-in-pixel-vlm", "--base-url", vlm.url, "--prompt-family", "pixel"]


@pytest.fixture
def bags(tmp_path):
    """Three recordings: a rollout with plans, a rollout with only an instruction, a plain rosbag2 folder."""
    frames = {
        name: _frame(xy, i)
        for i, (name, xy) in enumerate(
            [("a0", (5, 5)), ("a1", (30, 20)), ("a2", (50, 40)), ("b0", (12, 33)), ("c0", (40, 8))]
        )
    }
    expected = []  # (episode id, instruction, frame) the live planner had
    # rollout A: two planning rounds; the plan's header stamp names the frame it was made on
    # raw frames: these tests compare the planner's input bit for bit (a compressed rollout has its own test)
    raw = RecordingOptions(images="raw")
    with RolloutRecorder(
        tmp_path / "ep_a", instruction="put the red block in the bowl", task="placement", options=raw
    ) as rec:
        rec.log_frame(frames["a0"], np.full((H, W), 0.6), stamp_ns=1_000)
        rec.log_frame(frames["a1"], np.full((H, W), 0.6), stamp_ns=2_000)
        rec.log_plan(_any_plan("put the red block in the bowl"), stamp_ns=1_000)  # planned on a0
        rec.log_frame(frames["a2"], None, stamp_ns=3_000)
        rec.log_instruction("put the green block in the bowl")
        rec.log_plan(_any_plan("put the green block in the bowl"), stamp_ns=99)  # no frame stamped 99: last before
    expected += [
        ("ep_a#0", "put the red block in the bowl", frames["a0"]),
        ("ep_a#1", "put the green block in the bowl", frames["a2"]),
    ]
    # rollout B: instruction logged before the first frame, no plan (the planner had died)
    with RolloutRecorder(tmp_path / "ep_b", instruction="put the blue block in the bowl", options=raw) as rec:
        rec.log_frame(frames["b0"], None, stamp_ns=5_000)
    expected.append(("ep_b", "put the blue block in the bowl", frames["b0"]))
    # C: a bag written by someone else with rosbags' standard Writer (chunked, zstd), no rollout.json
    from rosbags.rosbag2 import CompressionFormat, CompressionMode, StoragePlugin, Writer

    from grounded_planner.rollout.bag import image_msg, string_msg, typestore

    store = typestore()
    writer = Writer(tmp_path / "checker_bag", version=9, storage_plugin=StoragePlugin.MCAP)
    writer.set_compression(CompressionMode.STORAGE, CompressionFormat.ZSTD)
    with writer:
        img = writer.add_connection("/camera/camera/color/image_raw", "sensor_msgs/msg/Image", typestore=store)
        ins = writer.add_connection("/grounded_planner/instruction", "std_msgs/msg/String", typestore=store)
        writer.write(img, 10, store.serialize_cdr(image_msg(frames["c0"], 10), "sensor_msgs/msg/Image"))
        writer.write(ins, 20, store.serialize_cdr(string_msg("put the green block in the bowl"), "std_msgs/msg/String"))
    expected.append(("checker_bag", "put the green block in the bowl", frames["c0"]))
    return [tmp_path / "ep_a", tmp_path / "ep_b" / "rollout.mcap", tmp_path / "checker_bag"], expected


def _any_plan(instruction):
    from grounded_planner.plan import GroundedPlan

    return GroundedPlan(instruction, (W, H), [], reason="whatever the live model said")


def test_replay_equals_planning_the_same_frames_directly(vlm, bags, tmp_path, capsys):
    paths, expected = bags
    out = tmp_path / "pred.jsonl"
    assert main(["replay", *map(str, paths), "--out", str(out), *_planner_args(vlm)]) == 0
    replayed = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert sorted(replayed) == sorted(e[0] for e in expected)

    planner = planner_mod.make_planner(
        PlannerConfig(backend="openai", model="stand-in-pixel-vlm", base_url=vlm.url, prompt_family="pixel")
    )
    for ep_id, instruction, frame in expected:
        direct = planner.plan(frame, instruction).to_dict()
        assert replayed[ep_id]["error"] == ""
        assert replayed[ep_id]["instruction"] == instruction
        assert replayed[ep_id]["plan"]["actions"] == direct["actions"], ep_id
    # the answers really differ per frame, so the equality above is not vacuous
    assert len({json.dumps(r["plan"]["actions"]) for r in replayed.values()}) == len(expected)
    assert vlm.requests == 2 * len(expected)


def test_replay_scores_against_ground_truth_and_takes_bags_named_by_episodes(vlm, bags, tmp_path, capsys):
    paths, expected = bags
    by_id = {e[0]: e for e in expected}
    gt = [
        # ep_b: ground truth agrees with where the square is (12, 33): success
        {
            "id": "ep_b",
            "image": "ep_b/rollout.mcap",
            "instruction": "put the blue block in the bowl",
            "instruction_type": "explicit",
            "actions": [
                {"type": "grasp", "object": "blue block", "bbox": [12, 33, 18, 39]},
                {"type": "place", "object": "blue block", "target": "bowl", "bbox": [40, 28, 60, 40]},
            ],
        },
        # checker_bag, named only here (not on the command line): GT box elsewhere -> failure
        {
            "id": "checker",
            "image": "checker_bag",
            "instruction": "put the green block in the bowl",
            "instruction_type": "explicit",
            "actions": [
                {"type": "grasp", "object": "green block", "bbox": [0, 0, 6, 6]},
                {"type": "place", "object": "green block", "target": "bowl", "bbox": [40, 0, 64, 20]},
            ],
        },
    ]
    episodes = tmp_path / "episodes.jsonl"
    episodes.write_text("".join(json.dumps(e) + "\n" for e in gt))
    out, score_out = tmp_path / "p.jsonl", tmp_path / "score.json"
    assert (
        main(
            [
                "replay",
                str(paths[1]),
                "--episodes",
                str(episodes),
                "--out",
                str(out),
                "--score-out",
                str(score_out),
                *_planner_args(vlm),
            ]
        )
        == 0
    )
    result = json.loads(score_out.read_text())
    assert json.loads(capsys.readouterr().out) == result
    overall = result["overall"]
    assert (overall["episodes"], overall["successes"], overall["tsr"]) == (2, 1, 50.0)
    per_id = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert sorted(per_id) == ["checker", "ep_b"]
    # the bag named only by the episodes file was replayed from its own frame
    assert per_id["checker"]["plan"]["actions"][0]["bbox"] == [40.0, 8.0, 46.0, 14.0]
    assert per_id["ep_b"]["instruction"] == by_id["ep_b"][1]


def test_replay_backend_finds_recorded_plans_by_exact_frame_hash(bags, tmp_path):
    """The replay backend looks plans up by the SHA-256 of the pixels: only a bit-exact frame finds its plan."""
    from grounded_planner.vlm.image import image_sha256

    paths, expected = bags
    replay_file = tmp_path / "recorded.jsonl"
    with replay_file.open("w") as f:
        for k, (_, instruction, frame) in enumerate(expected):
            plan = {
                "instruction": instruction,
                "image_size": [W, H],
                "reason": "",
                "actions": [{"type": "open", "object": f"drawer {k}", "bbox": [k, k, k + 10, k + 10]}],
            }
            f.write(json.dumps({"instruction": instruction, "image_sha256": image_sha256(frame), "plan": plan}) + "\n")
    out = tmp_path / "p.jsonl"
    # the folder holding all three recordings stands for each of them
    assert (
        main(
            [
                "replay",
                str(paths[0].parent),
                "--out",
                str(out),
                "--backend",
                "replay",
                "--replay-file",
                str(replay_file),
            ]
        )
        == 0
    )
    got = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    for k, (ep_id, _, _) in enumerate(expected):
        assert got[ep_id]["error"] == "" and got[ep_id]["plan"]["actions"][0]["object"] == f"drawer {k}"


def test_replay_errors(tmp_path, capsys, vlm):
    assert main(["replay", "--out", str(tmp_path / "p.jsonl")]) == 2
    assert "name at least one BAG" in capsys.readouterr().err
    assert main(["replay", str(tmp_path / "nope.mcap"), "--out", str(tmp_path / "p.jsonl"), *_planner_args(vlm)]) == 2
    assert "does not exist" in capsys.readouterr().err
    with RolloutRecorder(tmp_path / "no_frames", instruction="x"):
        pass
    assert main(["replay", str(tmp_path / "no_frames"), "--out", str(tmp_path / "p.jsonl"), *_planner_args(vlm)]) == 2
    assert "no color images" in capsys.readouterr().err


def test_replay_of_a_cut_short_rollout(vlm, tmp_path):
    """A recorder that never closed (as after SIGKILL) leaves a footerless bag; replay still reads it, JPEG colour
    (the recorder's default, on .../compressed) included."""
    from grounded_planner.rollout.bag import image_to_rgb, read_bag

    frame = _frame((22, 11), 9)
    rec = RolloutRecorder(tmp_path / "cut", instruction="put the blue block in the bowl")
    rec.log_frame(_frame((1, 1), 8), None, stamp_ns=6)
    rec.log_frame(frame, None, stamp_ns=7)
    rec.log_plan(_any_plan("put the blue block in the bowl"), stamp_ns=7)
    rec.log_frame(_frame((40, 30), 10), None, stamp_ns=8)  # after the plan: not the planner's input
    time.sleep(RecordingOptions().chunk_interval_s + 0.1)  # what a crash may not lose is in the file now
    frame = next(
        image_to_rgb(m.msg)
        for m in read_bag(tmp_path / "cut")
        if m.msgtype.endswith("CompressedImage") and m.msg.header.stamp.nanosec == 7
    )  # the pixels the live planner saw, through JPEG
    out = tmp_path / "p.jsonl"
    assert main(["replay", str(tmp_path / "cut"), "--out", str(out), *_planner_args(vlm)]) == 0
    (record,) = map(json.loads, out.read_text().splitlines())
    planner = planner_mod.make_planner(
        PlannerConfig(backend="openai", model="stand-in-pixel-vlm", base_url=vlm.url, prompt_family="pixel")
    )
    assert record["frame_stamp_ns"] == 7
    assert record["plan"]["actions"] == planner.plan(frame, "put the blue block in the bowl").to_dict()["actions"]
