"""Benchmark episodes (ground truth) and prediction records: JSONL reading, strict for GT, lenient for plans."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from grounded_planner.errors import InputError
from grounded_planner.plan.model import ACTION_TYPES, GroundedAction, pairing_error

INSTRUCTION_TYPES = ("explicit", "implicit")


class EpisodeError(InputError):
    """A ground-truth episode or prediction file that breaks the benchmark format.

    The message names the file, the line and the field, and says what was expected.
    """


@dataclass
class Episode:
    """One benchmark episode: an image, an instruction and its ground-truth grounded plan.

    ``actions`` are in pixels of ``image``; in ground truth a place carries a ``bbox`` (the target
    region), not a point. ``unordered`` lists blocks of *step* indices whose order does not matter
    (a step is a grasp-place pair or a single open/close).
    """

    id: str
    image: Path
    instruction: str
    instruction_type: str
    actions: list[GroundedAction]
    unordered: list[list[int]] = field(default_factory=list)

    @property
    def n_actions(self) -> int:
        return len(self.actions)

    @property
    def horizon(self) -> str:
        """``short`` (1-4 actions), ``medium`` (5-8) or ``long`` (9 and more)."""
        return horizon_of(len(self.actions))

    @property
    def group(self) -> str:
        """Table I cell this episode belongs to, e.g. ``explicit/short``."""
        return f"{self.instruction_type}/{self.horizon}"

    def to_dict(self) -> dict[str, Any]:
        """The episode as a JSONL record (``image`` as given, i.e. relative when it was)."""
        return {
            "id": self.id,
            "image": self.image.as_posix(),
            "instruction": self.instruction,
            "instruction_type": self.instruction_type,
            "actions": [a.to_dict() for a in self.actions],
            "unordered": [list(b) for b in self.unordered],
        }


@dataclass
class Prediction:
    """One line of a predictions file: the episode id, the raw plan (dict or None) and an error text."""

    id: str
    plan: Any
    error: str = ""


def horizon_of(n_actions: int) -> str:
    """Horizon bucket of a plan with ``n_actions`` ground-truth actions (1-4 short, 5-8 medium, 9+ long)."""
    if n_actions <= 4:
        return "short"
    if n_actions <= 8:
        return "medium"
    return "long"


def gt_step_count(actions: list[GroundedAction]) -> int:
    """Number of steps of a valid ground-truth action list (a pair counts once)."""
    return sum(1 for a in actions if a.type != "place")


def _box(value: Any, where: str) -> tuple[float, float, float, float]:
    try:
        box = tuple(float(v) for v in value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: a 400-digit integer
        raise EpisodeError(f"{where}: 'bbox' must be [x1, y1, x2, y2] numbers, got {value!r}") from None
    if len(box) != 4 or not all(math.isfinite(v) for v in box):
        raise EpisodeError(f"{where}: 'bbox' must be 4 finite numbers [x1, y1, x2, y2], got {value!r}")
    if not (box[0] < box[2] and box[1] < box[3]):
        raise EpisodeError(f"{where}: 'bbox' needs x1 < x2 and y1 < y2, got {value!r}")
    return box  # type: ignore[return-value]


def parse_episode(data: Any, where: str, base_dir: Path) -> Episode:
    """Check one ground-truth record and build an :class:`Episode` (``where`` names file and line in errors)."""
    if not isinstance(data, dict):
        raise EpisodeError(f"{where}: an episode must be a JSON object, got {type(data).__name__}")
    for key in ("id", "image", "instruction", "instruction_type", "actions"):
        if key not in data:
            raise EpisodeError(f"{where}: episode has no {key!r}")
    ep_id = str(data["id"])
    where = f"{where} (episode {ep_id})"
    itype = data["instruction_type"]
    if isinstance(itype, str):
        itype = itype.strip().lower()  # "Explicit" and "explicit" name the same Table I column
    if itype not in INSTRUCTION_TYPES:
        raise EpisodeError(f"{where}: 'instruction_type' must be one of {', '.join(INSTRUCTION_TYPES)}, got {itype!r}")
    raw_actions = data["actions"]
    if not isinstance(raw_actions, list) or not raw_actions:
        raise EpisodeError(f"{where}: 'actions' must be a non-empty list of actions")
    actions: list[GroundedAction] = []
    for i, raw in enumerate(raw_actions):
        at = f"{where} action {i}"
        if not isinstance(raw, dict):
            raise EpisodeError(f"{at}: an action must be a JSON object, got {type(raw).__name__}")
        atype = raw.get("type")
        if atype not in ACTION_TYPES:
            raise EpisodeError(f"{at}: 'type' must be one of {', '.join(ACTION_TYPES)}, got {atype!r}")
        if "bbox" not in raw:
            raise EpisodeError(f"{at}: a ground-truth {atype} needs a 'bbox' (a place's bbox is its target region)")
        actions.append(
            GroundedAction(
                type=atype,
                object=str(raw.get("object") or ""),
                target=str(raw.get("target") or ""),
                bbox=_box(raw["bbox"], at),
            )
        )
    # Ground truth is always well formed: every grasp is immediately followed by its place.
    broken = pairing_error([action.type for action in actions])
    if broken is not None:
        raise EpisodeError(f"{where} action {broken[0]}: ground truth breaks the plan rule: {broken[2]}")
    n_steps = gt_step_count(actions)
    raw_blocks = data.get("unordered") or []
    if not isinstance(raw_blocks, list):
        raise EpisodeError(f"{where}: 'unordered' must be a list of lists of step indices, got {raw_blocks!r}")
    blocks: list[list[int]] = []
    seen: set[int] = set()
    for raw in raw_blocks:
        if not isinstance(raw, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in raw):
            raise EpisodeError(f"{where}: each 'unordered' block must be a list of step indices, got {raw!r}")
        for v in raw:
            if not 0 <= v < n_steps:
                raise EpisodeError(
                    f"{where}: 'unordered' step index {v} is out of range: the plan has {n_steps} steps "
                    "(indices count steps, a grasp-place pair being one step)"
                )
            if v in seen:
                raise EpisodeError(f"{where}: step {v} appears in more than one place of 'unordered'")
            seen.add(v)
        if len(raw) >= 2:  # a block of one step constrains nothing
            blocks.append(sorted(raw))
    image = Path(str(data["image"]))
    return Episode(
        id=ep_id,
        image=image if image.is_absolute() else base_dir / image,
        instruction=str(data["instruction"]),
        instruction_type=itype,
        actions=actions,
        unordered=blocks,
    )


def _iter_jsonl(path: Path) -> Iterator[tuple[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise EpisodeError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[: exc.start].count(b"\n") + 1
        raise EpisodeError(
            f"{path}:{line}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start}); "
            "expected JSON lines"
        ) from None
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            yield where, json.loads(line)
        except json.JSONDecodeError as exc:
            raise EpisodeError(f"{where}: not valid JSON ({exc.msg})") from None


def load_episodes(path: str | Path) -> list[Episode]:
    """Read a ground-truth JSONL file (one episode a line; image paths relative to the file).

    Raises
    ------
    EpisodeError
        Naming the file, line, episode and field of the first problem; also on duplicate ids or an empty file.
    """
    path = Path(path)
    episodes: list[Episode] = []
    ids: set[str] = set()
    for where, data in _iter_jsonl(path):
        episode = parse_episode(data, where, path.parent)
        if episode.id in ids:
            raise EpisodeError(f"{where}: duplicate episode id {episode.id!r}")
        ids.add(episode.id)
        episodes.append(episode)
    if not episodes:
        raise EpisodeError(f"{path}: no episodes in the file")
    return episodes


class Predictions(dict):
    """{episode id: Prediction} read from a file, with ``duplicates``: {id: [``file:line``, ...]} of every id that
    appears on more than one line (the last line is the one kept)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.duplicates: dict[str, list[str]] = {}


def load_predictions(path: str | Path) -> Predictions:
    """Read a predictions JSONL file into {episode id: prediction}.

    Each line is ``{"id": ..., "plan": <canonical plan JSON or null>, "error": "..."}``. Plans are kept
    raw: the scorer reads them leniently, so an invalid plan scores as invalid steps instead of being
    rejected. When an id appears twice the later line wins (a resumed run appends retried episodes); the
    lines of each repeated id are listed in ``duplicates`` so that callers say so.
    """
    path = Path(path)
    out = Predictions()
    seen: dict[str, list[str]] = {}
    for where, data in _iter_jsonl(path):
        if not isinstance(data, dict) or "id" not in data:
            raise EpisodeError(f"{where}: a prediction must be a JSON object with an 'id'")
        ep_id = str(data["id"])
        seen.setdefault(ep_id, []).append(where)
        out[ep_id] = Prediction(id=ep_id, plan=data.get("plan"), error=str(data.get("error") or ""))
    out.duplicates = {ep_id: wheres for ep_id, wheres in seen.items() if len(wheres) > 1}
    return out
