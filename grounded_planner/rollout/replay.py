"""Offline replay: run a planner on the frames and instructions recorded in bags; bench-format predictions.

Which frame goes with which instruction (the input the live planner had):

1. each GroundedPlan message in the bag is one replay episode: its instruction, and the color frame whose
   header stamp equals the plan's header stamp, else the last color frame logged before the plan;
2. a bag without plan messages: one episode per instruction message (std_msgs/String on the instruction
   topic), with the last color frame logged at or before it, else the first one after it;
3. neither: one episode with the rollout.json instruction (or ``--instruction``) on the first color frame.

Episode ids are the rollout's ``episode_id`` (rollout.json), else the bag's name; ``#k`` is appended
when a bag yields more than one episode.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from grounded_planner.msgs.images import COMPRESSED_MSGTYPE, IMAGE_MSGTYPE, IMAGE_MSGTYPES, is_compressed_depth
from grounded_planner.rollout.bag import BagError, BagMessage, image_to_rgb, read_bag, resolve_bag_path, stamp_to_ns
from grounded_planner.rollout.record import JSON_NAME, RolloutTopics, load_rollout

log = logging.getLogger(__name__)
_COLOR_ENCODINGS = ("rgb8", "bgr8", "rgba8", "bgra8", "mono8")


@dataclass
class ReplayEpisode:
    """One planner input recovered from a bag."""

    id: str
    instruction: str
    image_rgb: np.ndarray  # (H, W, 3) uint8
    bag: Path
    frame_stamp_ns: int  # header stamp of the color frame used


@dataclass
class _FrameRef:
    """Where a color frame is in its topic, without its pixels."""

    index: int
    log_time_ns: int
    stamp_ns: int


def _rollout_meta(bag: Path) -> dict[str, Any]:
    folder = bag.parent if bag.is_file() else bag
    path = folder / JSON_NAME
    if path.is_file():
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise BagError(f"cannot read {path}: {exc}") from exc
    return {}


def episodes_from_bag(
    path: str | Path, topics: RolloutTopics | None = None, instruction: str = "", episode_id: str = ""
) -> list[ReplayEpisode]:
    """The planner inputs a bag holds (see the module docstring for the pairing rules)."""
    topics = topics or RolloutTopics()
    start_ns = end_ns = None
    if Path(path).is_dir() and (Path(path) / JSON_NAME).is_file():  # an episode folder (inside a session too)
        record = load_rollout(path)
        bag, (start_ns, end_ns) = record.bag_path, record.bag_window
        meta = record.data
    else:
        bag = resolve_bag_path(path)
        meta = _rollout_meta(bag)
    base_id = episode_id or str(meta.get("episode_id") or (bag.parent.name if bag.name == "rollout.mcap" else bag.stem))
    window = {"start_ns": start_ns, "end_ns": end_ns}
    # Pass 1 keeps plans, instructions and only the metadata of images: a 30 Hz camera bag does not fit in memory.
    frames_by_topic: dict[str, list[_FrameRef]] = {}
    plans: list[BagMessage] = []
    instructions: list[BagMessage] = []
    topic_types: dict[str, str] = {}
    for m in read_bag(bag, **window):
        topic_types.setdefault(m.topic, m.msgtype)
        if _is_color_frame(m, topics.color):
            refs = frames_by_topic.setdefault(m.topic, [])
            refs.append(_FrameRef(len(refs), m.log_time_ns, stamp_to_ns(m.msg.header.stamp)))
        elif m.topic == topics.plan and m.msgtype.endswith("/GroundedPlan"):
            plans.append(m)
        elif m.topic == topics.instruction and m.msgtype == "std_msgs/msg/String":
            instructions.append(m)
    color_topic = topics.color
    if color_topic not in frames_by_topic and topics.color_compressed in frames_by_topic:
        color_topic = topics.color_compressed  # image_transport's compressed twin of the colour topic
    if color_topic not in frames_by_topic:
        if color_topic in topic_types:
            raise BagError(
                f"{bag}: color topic {color_topic} has type {topic_types[color_topic]}; expected "
                f"{' or '.join(IMAGE_MSGTYPES)} (colour: rgb8/bgr8/rgba8/bgra8/mono8, jpeg or png)"
            )
        if len(frames_by_topic) != 1:
            raise BagError(
                f"{bag}: no color images on {topics.color}"
                + (
                    f"; several candidate topics {sorted(frames_by_topic)}, name one with --color-topic"
                    if frames_by_topic
                    else ""
                )
            )
        (color_topic,) = frames_by_topic
        log.info("%s: using color topic %s", bag, color_topic)
    colors = frames_by_topic[color_topic]

    def before(t_ns: int) -> _FrameRef | None:
        earlier = [c for c in colors if c.log_time_ns <= t_ns]
        return earlier[-1] if earlier else None

    pairs: list[tuple[str, _FrameRef]] = []
    if plans:
        latest_instruction = ""
        for p in plans:
            said = [i for i in instructions if i.log_time_ns <= p.log_time_ns]
            latest_instruction = said[-1].msg.data if said else latest_instruction
            text = p.msg.instruction or latest_instruction or instruction or meta.get("instruction", "")
            stamp = stamp_to_ns(p.msg.header.stamp)
            frame = next((c for c in colors if stamp and c.stamp_ns == stamp), None) or before(p.log_time_ns)
            if frame is None:
                raise BagError(f"{bag}: plan at {p.log_time_ns} ns has no color frame before it")
            pairs.append((text, frame))
    elif instructions:
        for i in instructions:
            frame = before(i.log_time_ns) or next(c for c in colors if c.log_time_ns > i.log_time_ns)
            pairs.append((i.msg.data, frame))
    else:
        text = instruction or meta.get("instruction", "")
        if not text:
            raise BagError(
                f"{bag}: no instruction recorded (no plan or instruction messages, no rollout.json); pass --instruction"
            )
        pairs.append((text, colors[0]))
    # Pass 2 decodes just the frames the episodes use.
    needed = {frame.index for _, frame in pairs}
    images: dict[int, np.ndarray] = {}
    k = 0
    for m in read_bag(bag, topics=[color_topic], **window):
        if _is_color_frame(m, color_topic):
            if k in needed:
                images[k] = image_to_rgb(m.msg)
            k += 1
    out = []
    for n, (text, frame) in enumerate(pairs):
        ep_id = base_id if len(pairs) == 1 else f"{base_id}#{n}"
        out.append(ReplayEpisode(ep_id, text, images[frame.index], bag, frame.stamp_ns))
    return out


def _is_color_frame(m: BagMessage, color_topic: str) -> bool:
    """A colour Image on any topic (or any Image on the colour topic), or a jpeg/png CompressedImage."""
    if m.msgtype == IMAGE_MSGTYPE:
        return m.topic == color_topic or m.msg.encoding in _COLOR_ENCODINGS
    return m.msgtype == COMPRESSED_MSGTYPE and not is_compressed_depth(m.msg)


def replay_episodes(
    episodes: Iterable[ReplayEpisode],
    plan_fn: Callable[[np.ndarray, str], Any],
    out_path: str | Path,
    error_types: tuple[type[BaseException], ...] = (),
) -> list[dict[str, Any]]:
    """Plan every episode and append ``{id, plan, error, bag, frame_stamp_ns}`` lines to ``out_path``.

    ``plan_fn(image_rgb, instruction) -> GroundedPlan`` (a ``Planner.plan``). Errors of ``error_types``
    (the planner's own, e.g. VLMError) become a null plan with the error text, as ``bench run`` records
    them; anything else propagates. Each line is flushed as written, so an interrupted replay keeps its work.
    """
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    records: list[dict[str, Any]] = []
    with out_path.open("w", encoding="utf-8") as f:
        for ep in episodes:
            try:
                plan = plan_fn(ep.image_rgb, ep.instruction)
                record = {"id": ep.id, "plan": plan.to_dict(), "error": ""}
            except error_types as exc:
                record = {"id": ep.id, "plan": None, "error": f"{type(exc).__name__}: {exc}"}
            record.update({"instruction": ep.instruction, "bag": str(ep.bag), "frame_stamp_ns": ep.frame_stamp_ns})
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
            f.flush()
            records.append(record)
    return records


def expand_bag_paths(paths: Sequence[str | Path]) -> list[Path]:
    """Bags as named; a folder that is no bag itself stands for every rollout/rosbag2 folder below it."""
    out: list[Path] = []
    for path in map(Path, paths):
        is_bag = path.is_file() or any((path / name).is_file() for name in (JSON_NAME, "rollout.mcap", "metadata.yaml"))
        is_session = (path / "session.json").is_file()  # its episodes, each its own window of session.mcap
        if is_bag or not path.is_dir() or (len(list(path.glob("*.mcap"))) == 1 and not is_session):
            out.append(path)  # resolve_bag_path names what is wrong with it, if anything
            continue
        below = sorted(
            {p.parent for pattern in (JSON_NAME, "rollout.mcap", "metadata.yaml") for p in path.rglob(pattern)}
        )
        if not below:
            raise BagError(f"{path} holds no bag (no rollout.mcap, metadata.yaml or .mcap file below it)")
        out.extend(below)
    return out


def episodes_for_replay(
    bags: Sequence[str | Path],
    gt_episodes: Sequence[Any] = (),
    topics: RolloutTopics | None = None,
    instruction: str = "",
) -> list[ReplayEpisode]:
    """Episodes from the bags, plus those a bench episodes file names by a bag ``image`` (episode id kept).

    A ground-truth episode whose id matches a bag episode gets its instruction from the episodes file
    (the ground truth refers to that wording).
    """
    found: dict[str, ReplayEpisode] = {}
    for bag in expand_bag_paths(bags):
        for ep in episodes_from_bag(bag, topics, instruction):
            if ep.id in found:
                raise BagError(f"episode id {ep.id!r} occurs in {found[ep.id].bag} and {ep.bag}")
            found[ep.id] = ep
    for gt in gt_episodes:
        image = Path(gt.image)
        if gt.id not in found and (image.suffix in (".mcap", ".db3") or image.is_dir()):
            from_bag = episodes_from_bag(image, topics, gt.instruction, episode_id=gt.id)
            if len(from_bag) != 1:
                raise BagError(
                    f"episode {gt.id}: bag {image} holds {len(from_bag)} planner inputs; "
                    "an episodes file can name only single-episode bags"
                )
            found[gt.id] = from_bag[0]
        if gt.id in found:
            found[gt.id].instruction = gt.instruction
    return list(found.values())
