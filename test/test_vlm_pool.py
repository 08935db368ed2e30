"""Several model servers behind one planner: least-loaded routing, failover when one dies, per-server counts.

The servers are the vlm layer's stand-in (grounded_planner/vlm/fake_server.py, no model can run here): real
HTTP, answers computed from the pixels received, a fixed latency and a capacity like a model server's batch.
The kill test runs them as separate processes and SIGKILLs one in the middle of a `bench run`.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from grounded_planner.bench.episodes import load_predictions
from grounded_planner.bench.sample import BROWN, GREY, RED
from grounded_planner.vlm.backends.base import VLMRequest
from grounded_planner.vlm.config import PlannerConfig
from grounded_planner.vlm.errors import VLMRequestError, VLMTimeoutError, VLMUnavailableError
from grounded_planner.vlm.fake_server import FakeVLMServer, Reply, make_demo_scene, start_process
from grounded_planner.vlm.factory import make_planner

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sample_bench"
SCENE = {"red cup": RED, "bin": GREY, "drawer": BROWN}
MODEL = "gpt-stand-in"


def free_port_url() -> str:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/v1"


def episodes(tmp_path: Path, n: int) -> Path:
    """``n`` plannable episodes: copies of the sample's ep-01 (red cup in the bin) and ep-12 (open the drawer)."""
    records = {
        json.loads(line)["id"]: json.loads(line) for line in (SAMPLE / "episodes.jsonl").read_text().splitlines()
    }
    chosen = []
    for k in range(n):
        r = dict(records["ep-01" if k % 2 == 0 else "ep-12"], id=f"ep-{k:03d}")
        r["image"] = str(SAMPLE / r["image"])
        chosen.append(r)
    path = tmp_path / "episodes.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in chosen))
    return path


def answered(base_url: str) -> int:
    """Requests a stand-in server has answered, read from its vLLM-style ``/metrics``."""
    root = base_url.removesuffix("/v1")
    with urllib.request.urlopen(f"{root}/metrics", timeout=5) as r:
        text = r.read().decode()
    return int(sum(float(v) for v in re.findall(r"^vllm:request_success_total\{[^}]*\} (\S+)$", text, re.M)))


def request() -> VLMRequest:
    return VLMRequest(messages=[{"role": "user", "content": "Say hi."}])


def test_two_servers_share_the_load_and_a_dead_one_is_routed_around():
    with FakeVLMServer(scene=SCENE, latency_s=0.05) as a, FakeVLMServer(scene=SCENE, latency_s=0.05) as b:
        # each server holds its first two requests until released: the first four requests are all in flight at
        # once, whatever the machine's scheduling, and least-loaded routing must put two on each
        release = threading.Event()
        for srv in (a, b):
            srv.script += [Reply(release=release), Reply(release=release)]
        dead = free_port_url()
        config = PlannerConfig(
            backend="openai", model=MODEL, base_url=a.base_url, base_urls=[dead, b.base_url], max_retries=0
        )
        with make_planner(config) as planner:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(4) as pool:
                running = pool.map(lambda _: planner.backend.generate(request()), range(12))
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline and len(a.requests) + len(b.requests) < 4:
                    time.sleep(0.01)
                first_wave = (len(a.requests), len(b.requests))
                release.set()
                answers = list(running)
            counts = planner.backend.server_counts()
    assert first_wave == (2, 2)  # spread by what is in flight, not all on one
    assert answers == ["I need an image to answer."] * 12
    assert counts[a.base_url]["served"] + counts[b.base_url]["served"] == 12
    # the dead server was tried once, then skipped while it is marked down
    assert counts[dead]["served"] == 0 and 1 <= counts[dead]["failed"] <= 2
    assert "Connect" in str(counts[dead]["last_error"])


def test_an_erroring_server_is_retried_elsewhere_but_a_rejected_request_is_not():
    with FakeVLMServer(scene=SCENE) as a, FakeVLMServer(scene=SCENE) as b:
        config = PlannerConfig(
            backend="openai", model=MODEL, base_url=a.base_url, base_urls=[b.base_url], max_retries=0
        )
        with make_planner(config) as planner:
            a.script.append(Reply(status=503))
            b.script.append(Reply(status=503))
            # both answer 503 once: the first pick fails, the other one fails too -> one round only, an error
            with pytest.raises(VLMUnavailableError, match="all 2 servers"):
                planner.backend.generate(request())
            assert planner.backend.generate(request()) == "I need an image to answer."
            a.script.append(Reply(status=400))
            b.script.append(Reply(status=400))
            sent = len(a.requests) + len(b.requests)
            with pytest.raises(VLMRequestError, match="HTTP 400"):
                planner.backend.generate(request())
            assert len(a.requests) + len(b.requests) == sent + 1  # a bad request goes to one server only
            counts = planner.backend.server_counts()
        # the 503s count as failures of the server that sent them; the rejected request counts nowhere
        assert sum(c["served"] for c in counts.values()) == 1 and sum(c["failed"] for c in counts.values()) == 2


def test_the_stand_in_counts_only_answered_requests_on_its_metrics_page_as_vllm_does():
    with FakeVLMServer(scene=SCENE) as srv:
        config = PlannerConfig(backend="openai", model=MODEL, base_url=srv.base_url, max_retries=0)
        with make_planner(config) as planner:
            assert answered(srv.base_url) == 0
            planner.backend.generate(request())
            srv.script.append(Reply(status=503))
            with pytest.raises(VLMUnavailableError):
                planner.backend.generate(request())
            planner.backend.generate(request())
        assert answered(srv.base_url) == 2  # the 503 is not a finished request
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(f"{srv.root_url}/v1/metrics", timeout=5)


def test_the_pool_stops_at_the_request_deadline():
    # every server keeps answering 503: rounds start at 0, 0.3 and 0.9 s; the next wait (1.2 s) would pass timeout_s
    with FakeVLMServer(scene=SCENE) as a, FakeVLMServer(scene=SCENE) as b:
        for srv in (a, b):
            srv.script += [Reply(status=503) for _ in range(30)]
        config = PlannerConfig(
            backend="openai",
            model=MODEL,
            base_url=a.base_url,
            base_urls=[b.base_url],
            timeout_s=1.0,
            max_retries=10,
            retry_backoff_s=0.3,
        )
        with make_planner(config) as planner:
            with pytest.raises(VLMTimeoutError, match="timeout_s.*503"):
                planner.ask(make_demo_scene(320, 240), "Say hi.")
            counts = planner.backend.server_counts()
        sent = len(a.requests) + len(b.requests)
    assert 2 <= sent <= 6  # three rounds at most, not eleven
    # a server is blamed only for the tries it was sent, never for the time the request ran out of
    assert counts[a.base_url]["failed"] + counts[b.base_url]["failed"] == sent


def test_yaml_list_of_servers_and_config_errors():
    config = PlannerConfig(backend="openai", model=MODEL, base_url=["http://h1:8000/v1", "http://h2:8000/v1/"])
    assert config.server_urls == ["http://h1:8000/v1", "http://h2:8000/v1"]
    with pytest.raises(ValueError, match="base_urls must be a list of server URLs"):
        PlannerConfig(base_url="http://h1/v1", base_urls="http://h2/v1")
    with pytest.raises(ValueError, match="give base_url too"):
        PlannerConfig(base_urls=["http://h2/v1"])


@pytest.mark.timeout(300)
def test_bench_run_with_two_servers_one_killed_mid_run_plans_every_episode(tmp_path):
    n = 24
    eps = episodes(tmp_path, n)
    out = tmp_path / "pred.jsonl"
    (a, url_a), (b, url_b) = start_process(SCENE, 0.2, 2), start_process(SCENE, 0.2, 2)
    try:
        exe = Path(sys.executable).with_name("grounded-planner")
        run = subprocess.Popen(
            [
                str(exe),
                "bench",
                "run",
                "--episodes",
                str(eps),
                "--out",
                str(out),
                "--backend",
                "openai",
                "--model",
                MODEL,
                "--base-url",
                url_a,
                "--base-url",
                url_b,
                "--concurrency",
                "4",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        # A dies in the middle of the run, once it has answered 3 (it then holds more, or gets more: the run has 24)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and answered(url_a) < 3:
            assert run.poll() is None, run.stderr.read()
            time.sleep(0.02)
        a.send_signal(signal.SIGKILL)
        stdout, stderr = run.communicate(timeout=240)
    finally:
        for p in (a, b):
            p.kill()
            p.wait()
    assert run.returncode == 0, stderr[-2000:]
    predictions = load_predictions(out)
    assert len(predictions) == n
    assert all(not p.error and p.plan is not None and p.plan["actions"] for p in predictions.values()), [
        p.error for p in predictions.values() if p.error
    ]
    summary = json.loads(stdout)
    served = {url: c["served"] for url, c in summary["servers"].items()}
    assert served[url_a] >= 3 and served[url_b] >= 3 and served[url_a] + served[url_b] == n
    assert summary["servers"][url_a]["failed"] >= 1  # the requests it held when killed went to B
    assert f"requests served per server: {url_a} {served[url_a]}" in stderr
