"""`v2gp run --executor ray` on a real local Ray cluster (started and shut down by the command itself).

Byte for byte the local executor's plans, first-frame images and training JSONL on the same synthetic
dataset; a broken episode recorded as failed by both, the rest planned; a rerun resumes from the caches
without a single new VLM request. The VLM is the V2GP stand-in server (test/helpers/v2gp_vlm_server.py, a
mock: no real model can run here) over real HTTP, two of them for the Ray run; each Ray actor talks to them
with its own client.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("ray")

from grounded_planner.v2gp.config import V2GPConfig  # noqa: E402
from grounded_planner.v2gp.pipeline import run_pipeline  # noqa: E402
from grounded_planner.v2gp.synthetic import SCENE, SyntheticConfig, scene_colors, write_synthetic_dataset  # noqa: E402
from helpers.v2gp_vlm_server import V2GPVLMServer  # noqa: E402

MODEL = "qwen3-vl-stand-in"
BROKEN = 3  # this episode's parquet file is overwritten with garbage


def v2gp_run(*args: str) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("grounded-planner")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    return subprocess.run([str(exe), "v2gp", "run", *args], capture_output=True, text=True, timeout=300, env=env)


def tree(out: Path) -> dict[str, bytes]:
    """Every output a user trains on or looks at (caches and report timings aside)."""
    files = [out / "train.jsonl", *sorted((out / "plans").glob("*.json")), *sorted((out / "images").glob("*.png"))]
    return {str(f.relative_to(out)): f.read_bytes() for f in files}


@pytest.mark.timeout(600)  # two Ray cluster starts: ~30 s on an idle 2-core machine
def test_ray_executor_matches_the_local_one_byte_for_byte_and_resumes(tmp_path):
    dataset = write_synthetic_dataset(tmp_path / "ds", SyntheticConfig(episodes=5, seed=7), "v2.1")
    (dataset / "data" / "chunk-000" / f"episode_{BROKEN:06d}.parquet").write_bytes(b"not a parquet file")
    common = ["--dataset", str(dataset), "--grounder", "oracle", "--model", MODEL]
    kinds = {name: kind for name, (_, kind, _) in SCENE.items()}
    with V2GPVLMServer(scene_colors(), kinds) as server, V2GPVLMServer(scene_colors(), kinds) as second:
        config = V2GPConfig(
            gripper="observation.state[gripper]",
            grounder="oracle",
            vlm_base_url=server.base_url,
            vlm_model=MODEL,
            workers=2,
        )
        local = run_pipeline(dataset, tmp_path / "local", config)
        config_file = tmp_path / "v2gp.yaml"
        config_file.write_text("gripper: observation.state[gripper]\n")

        # the Ray run spreads its model calls over two servers of the same model
        sent = len(server.requests)
        servers = ["--vlm", server.base_url, "--vlm", second.base_url]
        ray_run = v2gp_run(
            *common,
            "--out",
            str(tmp_path / "ray"),
            "--config",
            str(config_file),
            *servers,
            "--executor",
            "ray",
            "--workers",
            "2",
        )
        ray_requests = len(server.requests) - sent + len(second.requests)
        # the broken episode fails the run's exit status, not the run
        assert ray_run.returncode == 1, ray_run.stderr[-3000:]
        summary = json.loads(ray_run.stdout)

        rerun = v2gp_run(
            *common,
            "--out",
            str(tmp_path / "ray"),
            "--config",
            str(config_file),
            *servers,
            "--executor",
            "ray",
            "--workers",
            "2",
        )
        assert len(server.requests) - sent + len(second.requests) == ray_requests  # resumed: no new request
        first_served, second_served = len(server.requests) - sent, len(second.requests)

    assert set(local.failed_episodes) == set(summary["failed_episodes"]) == {str(BROKEN)}
    assert local.failed_episodes[str(BROKEN)] == summary["failed_episodes"][str(BROKEN)]
    assert summary["episodes"] == local.episodes == 4 and summary["episodes_with_plan"] == local.episodes_with_plan
    assert summary["servers"] == {
        server.base_url: {"served": first_served, "failed": 0},
        second.base_url: {"served": second_served, "failed": 0},
    }
    assert first_served >= 2 and second_served >= 2  # both servers took a share
    assert tree(tmp_path / "ray") == tree(tmp_path / "local")
    assert len(tree(tmp_path / "local")) == 1 + 2 * local.episodes_with_plan

    # progress: one line per episode as it finishes, the broken one named
    lines = [line for line in ray_run.stderr.splitlines() if line.startswith("[")]
    assert len(lines) == 5 and any(f"episode {BROKEN}: FAILED" in line for line in lines)
    assert "on 2 Ray actors (local cluster)" in ray_run.stderr

    again = json.loads(rerun.stdout)
    assert again["cache_hits"] == {stage: 4 for stage in ("segments", "objects", "grounding", "plan")}
    assert tree(tmp_path / "ray") == tree(tmp_path / "local")


def test_ray_address_without_the_ray_executor_is_a_one_line_error(tmp_path):
    run = v2gp_run("--dataset", str(tmp_path), "--out", str(tmp_path / "o"), "--ray-address", "127.0.0.1:6379")
    assert run.returncode == 2
    assert (
        run.stderr.strip().splitlines() == ["grounded-planner v2gp: --ray-address needs --executor ray"]
        or "--ray-address needs --executor ray" in run.stderr
        and len(run.stderr.strip().splitlines()) == 1
    )
