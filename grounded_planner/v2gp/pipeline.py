"""`v2gp run`: every episode through stages 1-4 with per-stage caches (resume), progress, threads or Ray actors.

Output folder::

    OUT/cache/episode_XXXXXX/{segments,objects,grounding,plan}.json   per-stage results + the settings they used
    OUT/cache/vlm/                                                    VLM answers (the vlm layer's response cache)
    OUT/plans/episode_XXXXXX.json                                     canonical plans (grounded_planner.plan)
    OUT/images/episode_XXXXXX.png                                     first frames, as the planner would send them
    OUT/train.jsonl                                                   Qwen3-VL chat samples (explicit + implicit);
                                                                      image paths are relative to OUT
    OUT/report.json                                                   counts, drops by reason, timings

A stage is recomputed only when its cache is missing or was made with other settings, so an interrupted run
resumes where it stopped and a changed grounder re-runs stages 3-4 only.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from grounded_planner.fileio import write_json_atomic, write_jsonl_atomic
from grounded_planner.plan import save_plan
from grounded_planner.vlm.backends.pool import served_line, server_counts
from grounded_planner.v2gp.config import V2GPConfig
from grounded_planner.v2gp.dataset import DemoEpisode, open_dataset
from grounded_planner.v2gp.errors import DatasetError, V2GPError, VideoUnavailableError
from grounded_planner.v2gp.ground import Grounding, make_grounder
from grounded_planner.v2gp.identify import IdentifyError, ObjectIdentity, identify_with_oracle, identify_with_vlm
from grounded_planner.v2gp.ray_executor import run_on_ray
from grounded_planner.v2gp.plans import (
    EpisodePlan,
    build_episode_plan,
    clean_implicit,
    implicit_prompt,
    training_messages,
)
from grounded_planner.v2gp.segment import Segment
from grounded_planner.v2gp.stage1 import GripperPlan, plan_grippers, segment_episode
from PIL import Image
from grounded_planner.vlm.image import resized_size
from grounded_planner.vlm.factory import make_planner

STAGES = ("segments", "objects", "grounding", "plan")


@dataclass
class RunSummary:
    """What a run produced (printed as JSON by the CLI, written to report.json)."""

    dataset: str
    out: str
    episodes: int = 0
    episodes_with_plan: int = 0
    segments: int = 0
    segments_kept: int = 0
    dropped: dict[str, int] = field(default_factory=dict)  # reason -> count
    samples_explicit: int = 0
    samples_implicit: int = 0
    implicit_rejected: int = 0
    revised_instructions: int = 0
    cache_hits: dict[str, int] = field(default_factory=lambda: {s: 0 for s in STAGES})
    failed_episodes: dict[str, str] = field(default_factory=dict)  # episode -> error
    skipped_episodes: dict[str, str] = field(default_factory=dict)  # episode -> why (missing/unreadable video)
    servers: dict[str, dict[str, Any]] = field(default_factory=dict)  # VLM server -> requests served/failed
    notes: list[str] = field(default_factory=list)  # what the run left out and why, and what stage 1 assumed
    no_segments: dict[str, str] = field(default_factory=dict)  # episode -> why stage 1 found no segment in it
    seconds: float = 0.0
    train_jsonl: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class _Cache:
    """JSON files per episode and stage, each holding the settings it was made with."""

    def __init__(self, root: Path, episode: int):
        self.dir = root / "cache" / f"episode_{episode:06d}"

    def get(self, stage: str, key: dict[str, Any]) -> Any | None:
        path = self.dir / f"{stage}.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return None
        return data.get("value") if data.get("key") == key else None

    def put(self, stage: str, key: dict[str, Any], value: Any) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / f"{stage}.json"
        write_json_atomic(path, {"key": key, "value": value}, indent=None)  # a crash never leaves half a cache file


def _key(config: V2GPConfig, stage: str, episode: DemoEpisode) -> dict[str, Any]:
    return {**config.stage_key(stage), "source": episode.source, "length": episode.length}


class _LazyGrounder:
    """The run's stage-3 grounder, built on first use (a resumed run may never need it; SAM 3 loads once)."""

    def __init__(self, config: V2GPConfig, planner):
        self.config, self.planner = config, planner
        self._grounder = None
        self._lock = threading.Lock()

    def get(self):
        with self._lock:
            if self._grounder is None:
                self._grounder = make_grounder(
                    self.config.grounder, self.planner, self.config.sam3_model, self.config.sam3_threshold
                )
            return self._grounder


def process_episode(
    episode: DemoEpisode,
    out: Path,
    config: V2GPConfig,
    planner=None,
    grounder: _LazyGrounder | None = None,
    plans: list[GripperPlan] | None = None,
) -> dict[str, Any]:
    """Stages 1-4 for one episode; returns a JSON-able result (plan, drops, cache hits, implicit variant).

    ``plans``: how each gripper is segmented (:func:`~grounded_planner.v2gp.stage1.plan_grippers`); default: the
    episode's one gripper with the config's settings."""
    cache = _Cache(out, episode.index)
    hits: list[str] = []
    plans = plans or [GripperPlan("", "gripper", "gripper", config.segment_config())]
    seg_config = plans[0].config

    key = {**_key(config, "segments", episode), "grippers": [p.key() for p in plans]}
    cached = cache.get("segments", key)
    if cached is None:
        result = segment_episode(episode, plans)
        cached = {
            "segments": [dataclasses.asdict(s) for s in result.segments],
            "reason": result.reason,
            "dropped": [
                {
                    "segment": [f, None],
                    "reason": r,
                    "detail": "begins to close at this frame, not open again by the last frame",
                }
                for f, r in result.dropped
                if r == "not_reopened"
            ]
            + [
                {"segment": [f, None], "reason": r, "detail": "closed on nothing (at the rest level) at this frame"}
                for f, r in result.dropped
                if r == "empty_closure"
            ],
        }
        cache.put("segments", key, cached)
    else:
        hits.append("segments")
    segments = [Segment(**s) for s in cached["segments"]]
    incomplete = cached["dropped"]

    no_segment = cached.get("reason", "")
    key = {**_key(config, "objects", episode), "grippers": [p.key() for p in plans]}
    cached = cache.get("objects", key)
    if cached is None:
        identities = []
        for seg in segments:
            if config.identifier == "oracle":
                identities.append(identify_with_oracle(episode, seg))
                continue
            try:
                identities.append(identify_with_vlm(planner, episode, seg, config.keyframes))
            except IdentifyError as exc:
                identities.append(
                    ObjectIdentity(
                        object="", category="", interaction="pick_place", source="vlm", raw_response=str(exc)
                    )
                )
        cached = [i.to_dict() for i in identities]
        cache.put("objects", key, cached)
    else:
        hits.append("objects")
    identities = [ObjectIdentity.from_dict(d) for d in cached]

    key = {**_key(config, "grounding", episode), "grippers": [p.key() for p in plans]}
    cached = cache.get("grounding", key)
    if cached is None:
        stage3 = (grounder or _LazyGrounder(config, planner)).get() if segments else None
        cached = [stage3.ground(episode, seg, ident).to_dict() for seg, ident in zip(segments, identities)]
        cache.put("grounding", key, cached)
    else:
        hits.append("grounding")
    groundings = [Grounding.from_dict(d) for d in cached]

    first = episode.frame(0)
    image_size = (int(first.shape[1]), int(first.shape[0]))
    key = {**_key(config, "plan", episode), "grippers": [p.key() for p in plans]}
    cached = cache.get("plan", key)
    implicit_reject = ""
    if cached is None:
        result = build_episode_plan(
            episode.instruction,
            image_size,
            segments,
            identities,
            groundings,
            seg_config,
            config.min_box_px,
            config.min_motion_px,
        )
        result.dropped = incomplete + result.dropped
        if result.plan is not None and config.implicit and planner is not None:
            answer = planner.ask(first, implicit_prompt(result.plan.instruction))
            result.implicit, implicit_reject = clean_implicit(
                answer, result.plan.instruction, config.max_implicit_chars
            )
        cached = {"episode_plan": result.to_dict(), "implicit_rejected": implicit_reject}
        cache.put("plan", key, cached)
    else:
        hits.append("plan")
    episode_plan = EpisodePlan.from_dict(cached["episode_plan"])
    return {
        "index": episode.index,
        "segments": len(segments),
        "episode_plan": episode_plan,
        "hits": hits,
        "implicit_rejected": cached["implicit_rejected"],
        "image_size": image_size,
        "no_segment": no_segment,
    }


def _save_image(episode: DemoEpisode, out: Path, max_side: int) -> tuple[str, tuple[int, int]]:
    """First frame resized like the planner sends it; returns (path relative to out, sent size)."""

    first = episode.frame(0)
    size = resized_size(first.shape[1], first.shape[0], max_side)
    rel = f"images/episode_{episode.index:06d}.png"
    path = out / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    image = Image.fromarray(first)
    if size != image.size:
        image = image.resize(size, Image.Resampling.BOX)
    image.save(path)
    return rel, size


EPISODE_ERRORS = (V2GPError, ValueError, OSError, RuntimeError)  # recorded per episode; the run goes on


class EpisodeWorker:
    """What one worker needs to run episodes: a dataset reader, its own VLM client, its own stage-3 grounder.

    The local executor shares one among its threads (an HTTP client serves concurrent requests); the Ray
    executor builds one per actor, so no two processes wait on one client. ``run`` never raises for an
    episode's failure: it returns ``{"index", "error"}`` (``{"index", "skipped"}`` for an unreadable video) instead,
    the same text whichever executor ran it.
    """

    def __init__(self, dataset: str, out: str, config: V2GPConfig, with_planner: bool):
        self.out = Path(out)
        self.config = config
        self.dataset = open_dataset(
            dataset,
            gripper=config.gripper,
            camera=config.camera or None,
            robot=config.robot if config.robot != "default" else None,
        )
        self.plans, self.warnings = plan_grippers(self.dataset, config)
        self.planner = _make_planner(config, self.out) if with_planner else None
        self.grounder = _LazyGrounder(config, self.planner)

    def run(self, index: int) -> dict[str, Any]:
        """One episode's result with the plan as a dict (JSON-able, cheap to send between processes)."""
        try:
            episode = self.dataset.episode(index)
            result = process_episode(episode, self.out, self.config, self.planner, self.grounder, self.plans)
            episode.frame(0)  # the training image: an unreadable video skips the episode here, not at the end
        except VideoUnavailableError as exc:
            return {"index": index, "skipped": str(exc)}
        except EPISODE_ERRORS as exc:
            return {"index": index, "error": f"{type(exc).__name__}: {exc}"}
        result["episode_plan"] = result["episode_plan"].to_dict()
        return result

    def server_counts(self) -> dict[str, dict[str, int | str]]:
        return server_counts(self.planner) if self.planner is not None else {}

    def close(self) -> None:
        if self.planner is not None:
            self.planner.close()


def _make_planner(config: V2GPConfig, out: Path):
    return make_planner(config.planner_config(cache_dir=str(out / "cache" / "vlm")))


def run_pipeline(
    dataset: str | Path,
    out: str | Path,
    config: V2GPConfig | None = None,
    episodes: list[int] | None = None,
    progress: TextIO | None = None,
) -> RunSummary:
    """Run V2GP over ``dataset`` into ``out`` (see the module docstring); resumes from the caches in ``out``."""
    config = config or V2GPConfig()
    t0 = time.monotonic()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    ds = open_dataset(
        dataset,
        gripper=config.gripper,
        camera=config.camera or None,
        robot=config.robot if config.robot != "default" else None,
    )
    if hasattr(ds, "require_camera"):
        ds.require_camera()  # stages 2-4 read frames: say which feature is missing before any work
    indices = ds.episode_indices if episodes is None else episodes
    missing = sorted(set(indices) - set(ds.episode_indices))
    if missing:
        raise DatasetError(f"{dataset}: no episode(s) {missing} (the dataset has {len(ds.episode_indices)})")
    with_planner = False
    _, stage1_notes = plan_grippers(ds, config)  # what stage 1 assumed (unknown robot, constant followers, ...)
    notes: list[str] = [f"stage 1: {line}" for line in stage1_notes]
    if progress:
        for line in notes:
            print(f"v2gp: {line}", file=progress, flush=True)
    if config.needs_vlm:
        if not config.vlm_base_url and config.vlm_backend == "openai":
            if config.identifier == "vlm" or config.grounder == "vlm":
                raise V2GPError(
                    "stage 2/3 need a VLM: give --vlm BASE_URL (an OpenAI-compatible server), "
                    "or use identifier: oracle and --grounder oracle for simulated data"
                )
            config = dataclasses.replace(config, implicit=False)  # no LLM for the rewrite: say so in the report
            notes.append("no VLM given: implicit rewrites are skipped")
            if progress:
                print(f"v2gp: {notes[-1]}", file=progress, flush=True)
        else:
            with_planner = True
    summary = RunSummary(dataset=str(dataset), out=str(out), notes=notes)
    results: dict[int, dict[str, Any]] = {}
    lock = threading.Lock()

    def collect(result: dict[str, Any]) -> None:
        """Record one episode's outcome and print its progress line (called from any executor thread)."""
        index = int(result["index"])
        with lock:
            if "skipped" in result:  # a missing or unreadable video: not the episode's failure
                summary.skipped_episodes[str(index)] = result["skipped"]
                if progress:
                    print(f"episode {index}: skipped ({result['skipped']})", file=progress, flush=True)
                return
            if "error" in result:
                summary.failed_episodes[str(index)] = result["error"]
            else:
                result["episode_plan"] = EpisodePlan.from_dict(result["episode_plan"])
                results[index] = result
            done = len(results) + len(summary.failed_episodes)
            if not progress:
                return
            if "error" in result:
                line = f"[{done}/{len(indices)}] episode {index}: FAILED {result['error']}"
            else:
                ep: EpisodePlan = result["episode_plan"]
                n_actions = len(ep.plan.actions) if ep.plan else 0
                cached = f", cached: {'+'.join(result['hits'])}" if result["hits"] else ""
                line = (
                    f"[{done}/{len(indices)}] episode {index}: {result['segments']} segments, "
                    f"{n_actions} actions, {len(ep.dropped)} dropped{cached} "
                    f"({time.monotonic() - t0:.1f} s)"
                )
            print(line, file=progress, flush=True)

    if config.executor == "ray":
        summary.servers = run_on_ray(
            EpisodeWorker,
            (str(dataset), str(out), config, with_planner),
            indices,
            workers=config.workers,
            address=config.ray_address,
            on_result=collect,
            progress=progress,
        )
    else:
        worker = EpisodeWorker(str(dataset), str(out), config, with_planner)
        try:
            if config.workers > 1:
                with ThreadPoolExecutor(max_workers=config.workers) as pool:
                    for future in as_completed([pool.submit(worker.run, i) for i in indices]):
                        collect(future.result())
            else:
                for i in indices:
                    collect(worker.run(i))
            summary.servers = worker.server_counts()
        finally:
            worker.close()
    if summary.servers and progress:
        print(f"v2gp: {served_line(summary.servers)}", file=progress, flush=True)

    # outputs, in episode order (deterministic whatever the executor)
    (out / "plans").mkdir(exist_ok=True)
    samples: list[dict[str, Any]] = []
    drops: list[dict[str, Any]] = []
    for index in sorted(results):
        result = results[index]
        ep: EpisodePlan = result["episode_plan"]
        summary.episodes += 1
        summary.segments += result["segments"]
        if result.get("no_segment"):
            summary.no_segments[str(index)] = result["no_segment"]
        for hit in result["hits"]:
            summary.cache_hits[hit] += 1
        for d in ep.dropped:
            summary.dropped[d["reason"]] = summary.dropped.get(d["reason"], 0) + 1
            drops.append({"episode": index, **d})
        if ep.plan is None:
            continue
        summary.episodes_with_plan += 1
        summary.segments_kept += sum(1 for a in ep.plan.actions if a.type != "place")
        summary.revised_instructions += int(ep.revised)
        save_plan(ep.plan, out / "plans" / f"episode_{index:06d}.json")
        image_rel, sent = _save_image(ds.episode(index), out, config.max_image_side)
        variants = [("explicit", ep.plan.instruction)]
        if ep.implicit:
            variants.append(("implicit", ep.implicit))
        elif result["implicit_rejected"]:
            summary.implicit_rejected += 1
        for variant, instruction in variants:
            samples.append(
                {
                    "id": f"episode_{index:06d}_{variant}",
                    "episode": index,
                    "variant": variant,
                    "source_instruction": ep.instruction,
                    "image_size": list(result["image_size"]),
                    # the image also as a top-level list, the layout TRL's vision SFT reads
                    "images": [image_rel],
                    "messages": training_messages(image_rel, sent, instruction, ep.plan),
                }
            )
            if variant == "explicit":
                summary.samples_explicit += 1
            else:
                summary.samples_implicit += 1
    train = out / "train.jsonl"
    write_jsonl_atomic(train, samples)
    summary.train_jsonl = str(train)
    summary.seconds = round(time.monotonic() - t0, 3)
    report_data = summary.to_dict()
    report_data["dropped_segments"] = drops
    (out / "report.json").write_text(json.dumps(report_data, indent=2, ensure_ascii=False), encoding="utf-8")
    return summary
