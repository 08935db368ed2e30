"""The Ray executor of `v2gp run`: episodes spread over Ray actors, each with its own dataset reader and VLM client.

Without an address it starts a local Ray cluster for the run (``workers`` CPUs, no dashboard, no usage
reporting) and shuts it down after; with one it joins that cluster and leaves it running. Every node must
see the dataset and the output folder at the same paths (a shared filesystem): the actors write the
per-episode caches there, the driver writes plans, images and the training JSONL in episode order, so the
outputs are the local executor's byte for byte.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from grounded_planner.v2gp.errors import V2GPError, require
from grounded_planner.vlm.backends.pool import merge_counts

log = logging.getLogger(__name__)
# Episodes queued on one actor at once: one running, one waiting, so an actor never idles on a round trip.
IN_FLIGHT_PER_ACTOR = 2
# An actor whose episodes crash its process this many times in a row is retired (its work goes elsewhere).
MAX_ACTOR_CRASHES = 3
# Object store of a local cluster: results are small dicts, and a 2-core CI machine has little /dev/shm.
LOCAL_OBJECT_STORE_BYTES = 128 * 1024**2
# The folder holding the grounded_planner package: workers import it from where the driver does.
PROJECT_ROOT = Path(__file__).resolve().parents[2]


def start_ray(address: str, workers: int):
    """Connect to ``address`` or start a local cluster sized for ``workers``; returns (ray, started_here)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no usage reports to the network
    ray = require("ray", "scale", "the ray executor")
    if ray.is_initialized():
        return ray, False
    # Workers import this project from where the driver does (an editable install or PYTHONPATH).
    path = os.pathsep.join(p for p in (str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    runtime_env = {"env_vars": {"PYTHONPATH": path, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}}
    try:
        if address:
            ray.init(address=address, runtime_env=runtime_env, log_to_driver=True)
        else:
            ray.init(
                num_cpus=workers,
                include_dashboard=False,
                object_store_memory=LOCAL_OBJECT_STORE_BYTES,
                runtime_env=runtime_env,
                log_to_driver=True,
            )
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = f"the Ray cluster at {address!r}" if address else "a local Ray cluster"
        raise V2GPError(f"cannot start or join {where}: {exc}") from exc
    return ray, True


def run_on_ray(
    worker_cls: type,
    worker_args: Sequence[Any],
    indices: Sequence[int],
    *,
    workers: int,
    address: str,
    on_result: Callable[[dict[str, Any]], None],
    progress: TextIO | None = None,
) -> dict[str, dict[str, Any]]:
    """Run ``worker_cls(*worker_args).run(index)`` for every index on ``workers`` Ray actors.

    ``on_result`` gets each episode's result (or ``{"index", "error"}``) as it arrives. An actor that dies
    fails the episodes it held, is restarted by Ray, and is retired after ``MAX_ACTOR_CRASHES`` crashes in a row;
    nothing stops the run. Returns the requests each VLM server answered, summed over the actors.
    """
    ray, started = start_ray(address, workers)
    try:
        n_actors = workers
        if not started or address:
            cpus = int(ray.cluster_resources().get("CPU", 0))
            if cpus < 1:
                raise V2GPError(f"the Ray cluster at {address!r} has no CPUs to run episodes on")
            if cpus < n_actors:
                n_actors = cpus
                if progress:
                    print(
                        f"v2gp: the Ray cluster has {cpus} CPUs: {n_actors} actors instead of {workers}",
                        file=progress,
                        flush=True,
                    )
        actor_cls = ray.remote(num_cpus=1, max_restarts=MAX_ACTOR_CRASHES, max_task_retries=0)(worker_cls)
        actors = [actor_cls.remote(*worker_args) for _ in range(n_actors)]
        if progress:
            print(
                f"v2gp: {len(indices)} episodes on {n_actors} Ray actors "
                f"({'cluster ' + address if address else 'local cluster'})",
                file=progress,
                flush=True,
            )
        return _dispatch(ray, actors, list(indices), on_result)
    finally:
        if started:
            ray.shutdown()


def _dispatch(
    ray, actors: list, todo: list[int], on_result: Callable[[dict[str, Any]], None]
) -> dict[str, dict[str, Any]]:
    queue = list(reversed(todo))  # pop() takes the lowest index first
    pending: dict[Any, tuple[int, int]] = {}  # object ref -> (actor slot, episode)
    live = set(range(len(actors)))
    crashes = [0] * len(actors)
    load = [0] * len(actors)

    def feed() -> None:
        for slot in sorted(live, key=lambda s: load[s]):
            while queue and load[slot] < IN_FLIGHT_PER_ACTOR:
                index = queue.pop()
                pending[actors[slot].run.remote(index)] = (slot, index)
                load[slot] += 1

    feed()
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        slot, index = pending.pop(ready[0])
        load[slot] -= 1
        try:
            result = ray.get(ready[0])
            crashes[slot] = 0
        except ray.exceptions.RayError as exc:  # the actor process died (or the task was lost) on this episode
            crashes[slot] += 1
            if crashes[slot] >= MAX_ACTOR_CRASHES and slot in live:
                live.discard(slot)
                log.warning("Ray actor %d crashed %d times in a row; retiring it", slot, crashes[slot])
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            result = {"index": index, "error": f"{type(exc).__name__}: {first}"}
        on_result(result)
        if not live:
            while queue:
                on_result({"index": queue.pop(), "error": "V2GPError: every Ray actor crashed; episode not run"})
        feed()
    counts: dict[str, dict[str, Any]] = {}
    for slot in live:
        try:
            merge_counts(counts, ray.get(actors[slot].server_counts.remote()))
        except ray.exceptions.RayError:
            pass  # a restarted actor's counts died with its process
    return counts
