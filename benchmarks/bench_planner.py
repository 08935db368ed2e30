"""Benchmark: the planner's own cost per request on a 1280x720 camera-like image, next to the bare HTTP round
trip to the same local server.

Planner path: ``Planner.plan`` end to end (resize and encode the image, build the prompt, POST, parse,
validate, scale back). Baseline: the same request body, prepared once, POSTed with httpx to the same local
OpenAI-compatible server (grounded_planner.vlm.fake_server, which decodes the image and answers), read and
JSON-decoded. Overhead = planner - baseline; also timed alone: encode, prompt, parse + validate.

Run: .venv/bin/python benchmarks/bench_planner.py [--repeats 30]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import httpx
import numpy as np

from grounded_planner.vlm import prompts
from grounded_planner.vlm.backends.base import VLMRequest
from grounded_planner.vlm.config import PlannerConfig
from grounded_planner.vlm.fake_server import FakeVLMServer, make_demo_scene
from grounded_planner.vlm.image import encode_image
from grounded_planner.vlm.parse import parse_plan
from grounded_planner.vlm.factory import make_planner

WIDTH, HEIGHT = 1280, 720
INSTRUCTION = "put the red block on the blue plate"


def camera_like_image(seed: int = 0) -> np.ndarray:
    """The demo scene with sensor-like noise, so PNG/JPEG encoding costs what a camera frame costs."""
    rng = np.random.default_rng(seed)
    img = make_demo_scene(WIDTH, HEIGHT).astype(np.int16)
    img += rng.normal(0, 6, img.shape).astype(np.int16)
    return np.clip(img, 0, 255).astype(np.uint8)


def timed(fn, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def fmt(samples: list[float]) -> str:
    s = sorted(samples)
    return f"median {statistics.median(s) * 1e3:7.2f} ms   p90 {s[int(0.9 * (len(s) - 1))] * 1e3:7.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    print(f"machine: {platform.platform()}, Python {platform.python_version()}, {os.cpu_count()} CPUs")
    image = camera_like_image()
    model = "Qwen/Qwen3-VL-8B-Instruct"
    with FakeVLMServer() as server:
        for max_side, fmt_name in ((1280, "jpeg"), (1280, "png"), (640, "jpeg")):
            config = PlannerConfig(
                model=model, base_url=server.base_url, max_image_side=max_side, image_format=fmt_name
            )
            planner = make_planner(config)
            # the baseline's request: byte-identical body to the planner's, prepared once
            encoded = planner.encode(image)
            messages = [
                {"role": "system", "content": prompts.planning_system_prompt(config.family, *encoded.size)},
                {"role": "user", "content": prompts.planning_user_prompt(INSTRUCTION)},
            ]
            body = json.dumps(
                planner.backend.payload(VLMRequest(messages, encoded, config.max_tokens, config.temperature))
            ).encode()
            client = httpx.Client(timeout=30, trust_env=False)

            def bare():
                response = client.post(
                    server.base_url + "/chat/completions", content=body, headers={"Content-Type": "application/json"}
                )
                return response.json()["choices"][0]["message"]["content"]

            answer = bare()
            plan = planner.plan(image, INSTRUCTION)  # warm-up, and a check that both paths agree
            assert plan.raw_response == answer and len(plan.actions) == 2, "planner and bare request disagree"
            # interleave every measurement so load changes on the machine hit all of them alike
            steps = {
                "bare": bare,
                "plan": lambda: planner.plan(image, INSTRUCTION),
                "encode": lambda: encode_image(image, max_side, fmt_name, config.jpeg_quality),
                "prompt": lambda: (
                    prompts.planning_system_prompt(config.family, *encoded.size),
                    json.dumps(planner.backend.payload(VLMRequest(messages, encoded))),
                ),
                "parse": lambda: parse_plan(
                    answer, (WIDTH, HEIGHT), "qwen3", INSTRUCTION, model_image_size=encoded.size
                ),
            }
            times: dict[str, list[float]] = {name: [] for name in steps}
            for _ in range(args.repeats):
                for name, fn in steps.items():
                    times[name] += timed(fn, 1)
            t_bare, t_plan, t_encode, t_prompt, t_parse = (
                times[k] for k in ("bare", "plan", "encode", "prompt", "parse")
            )
            planner.close()
            client.close()
            med_plan, med_bare = statistics.median(t_plan), statistics.median(t_bare)
            print(
                f"\n== {WIDTH}x{HEIGHT} image, sent at {encoded.size[0]}x{encoded.size[1]} {fmt_name} "
                f"({len(encoded.data) / 1e3:.0f} kB), {args.repeats} requests each"
            )
            print(f"  bare HTTP round trip (baseline) {fmt(t_bare)}")
            print(f"  Planner.plan end to end         {fmt(t_plan)}")
            print(
                f"  planner overhead                median {(med_plan - med_bare) * 1e3:7.2f} ms   "
                f"ratio plan/bare {med_plan / med_bare:.2f}"
            )
            print(f"    of which encode (resize+{fmt_name:4s}) {fmt(t_encode)}")
            print(f"    of which prompt + request body {fmt(t_prompt)}")
            print(f"    of which parse + validate      {fmt(t_parse)}")


if __name__ == "__main__":
    main()
