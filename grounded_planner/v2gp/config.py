"""V2GP configuration: dataset columns, segmentation per robot, VLM, grounder, filters, export, executor."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from grounded_planner.errors import InputError
from grounded_planner.v2gp.profiles import ROBOT_PROFILES, config_for_robot
from grounded_planner.v2gp.segment import SEGMENT_RULE, SegmentConfig
from grounded_planner.vlm.config import PlannerConfig
from grounded_planner.yamlfile import read_yaml

GROUNDERS = ("oracle", "vlm", "sam3")
IDENTIFIERS = ("vlm", "oracle")
EXECUTORS = ("local", "ray")


@dataclass
class V2GPConfig:
    """Every knob of ``grounded-planner v2gp run`` (YAML keys have the same names)."""

    # -- inputs
    # gripper column: NAME, NAME[INDEX] or NAME[ELEMENT_NAME]; "" = found by name through the robot profile
    # (every gripper of a two-armed robot; docs/v2gp.md "Which column is the gripper")
    gripper: str = ""
    camera: str = ""  # image/video feature of the third-person camera ("" = the first one; stages 2-4 only)
    # -- stage 1: segmentation (robot profile, then the explicit values that are not None)
    # profile in profiles.ROBOT_PROFILES (so101, koch, aloha, piper, xarm, widowx, droid, ur5, g1_inspire, ...);
    # "default": the dataset's robot_type picks one (LeRobot datasets), else 0..1 with fixed thresholds
    robot: str = "default"
    close_threshold: float | None = None  # normalised level at/above which the gripper is closed
    open_threshold: float | None = None  # normalised level at/below which it is released
    min_frames: int | None = None  # shortest grasp, frames
    # raw gripper value when fully open / closed, for any polarity (a hand where 1 = open: 1.0 / 0.0), or "auto":
    # learned from each episode's signal (levels: rest, open, holding); None = the robot profile's
    gripper_open_value: float | str | None = None
    gripper_closed_value: float | str | None = None
    # -- stages 2-4: models
    identifier: str = "vlm"  # who names the manipulated object: vlm | oracle (simulated data with known objects)
    grounder: str = "vlm"  # stage 3: oracle (known boxes) | vlm (ask the VLM) | sam3 (SAM 3 via transformers)
    sam3_model: str = ""  # sam3 grounder: local folder of a SAM 3 checkpoint (facebook/sam3)
    sam3_threshold: float = 0.3  # sam3 grounder: instances scoring below this are not found
    vlm_backend: str = "openai"  # PlannerConfig.backend of the VLM (openai | gemini | transformers | replay)
    vlm_base_url: str = ""  # OpenAI-compatible server root incl. /v1 (a YAML list: several servers)
    vlm_base_urls: list[str] = dataclasses.field(
        default_factory=list
    )  # more servers of the same model (least loaded first)
    vlm_model: str = ""  # model name on the server (decides the prompt family: qwen3, gemini, pixel)
    vlm_api_key_env: str = ""  # environment variable with the API key ("" = the backend's default)
    vlm_timeout_s: float = 120.0  # one VLM request, seconds
    implicit: bool = True  # write an implicit variant of each instruction with an LLM rewrite
    keyframes: int = 3  # frames of a segment shown to the VLM side by side (start, hold..., end)
    # -- filters
    min_box_px: float = 4.0  # grasp/open/close boxes narrower or lower than this are empty groundings
    min_motion_px: float = 3.0  # a picked object must move at least this far (oracle) or the grasp was empty
    max_implicit_chars: int = 200  # longer rewrites are rejected
    # -- export (training JSONL: the planner's prompt)
    max_image_side: int = 1280  # image stored for training is resized like the planner sends it (0 = as is)
    # -- execution
    workers: int = 1  # episodes in flight at once (threads; VLM requests are I/O bound)
    executor: str = "local"  # local (threads) | ray (episodes spread over Ray actors, `workers` of them)
    ray_address: str = ""  # ray executor: cluster to join (ray://host:10001 or host:6379); "" = start a local one

    def __post_init__(self) -> None:
        if isinstance(self.vlm_base_url, (list, tuple)):  # a list of servers: the first is vlm_base_url
            urls = [str(u) for u in self.vlm_base_url]
            self.vlm_base_url, self.vlm_base_urls = (urls[0] if urls else ""), urls[1:] + list(self.vlm_base_urls)
        if isinstance(self.vlm_base_urls, str) or not all(isinstance(u, str) and u for u in self.vlm_base_urls):
            raise InputError(f"V2GPConfig.vlm_base_urls must be a list of server URLs, got {self.vlm_base_urls!r}")
        if self.robot not in ROBOT_PROFILES:
            raise InputError(f"V2GPConfig.robot must be one of {', '.join(sorted(ROBOT_PROFILES))}, got {self.robot!r}")
        if self.grounder not in GROUNDERS:
            raise InputError(f"V2GPConfig.grounder must be one of {', '.join(GROUNDERS)}, got {self.grounder!r}")
        if self.identifier not in IDENTIFIERS:
            raise InputError(f"V2GPConfig.identifier must be one of {', '.join(IDENTIFIERS)}, got {self.identifier!r}")
        if self.executor not in EXECUTORS:
            raise InputError(f"V2GPConfig.executor must be one of {', '.join(EXECUTORS)}, got {self.executor!r}")
        if int(self.workers) < 1:
            raise InputError(f"V2GPConfig.workers must be >= 1, got {self.workers}")
        if int(self.keyframes) < 2:
            raise InputError(f"V2GPConfig.keyframes must be >= 2 (start and end), got {self.keyframes}")
        if self.min_box_px < 0 or self.min_motion_px < 0:
            raise InputError("V2GPConfig.min_box_px and min_motion_px must be >= 0 px")
        if self.vlm_timeout_s <= 0:
            raise InputError(f"V2GPConfig.vlm_timeout_s must be > 0 s, got {self.vlm_timeout_s}")
        self.segment_config()  # thresholds checked here, naming the bad value

    # -- derived ------------------------------------------------------------------------------------------
    def segment_config(self) -> SegmentConfig:
        """The robot profile with this config's values.

        Gripper values given (raw numbers or ``auto``) say the polarity; each episode's levels are then learned
        from its signal unless thresholds are given too. Both ``auto``: the profile's polarity, learned levels.
        """
        given = {
            "open_value": _gripper_value(self.gripper_open_value, "gripper_open_value"),
            "closed_value": _gripper_value(self.gripper_closed_value, "gripper_closed_value"),
        }
        given = {k: v for k, v in given.items() if v is not None}
        if given:
            if list(given.values()) == ["auto", "auto"]:
                given = {}  # the profile's polarity
            given["levels"] = "auto"  # (config_for_robot goes back to fixed when thresholds are given)
        return config_for_robot(
            self.robot,
            close_threshold=self.close_threshold,
            open_threshold=self.open_threshold,
            min_frames=self.min_frames,
            **given,
        )

    @property
    def needs_vlm(self) -> bool:
        return self.identifier == "vlm" or self.grounder == "vlm" or self.implicit

    def planner_config(self, cache_dir: str = ""):
        """The vlm layer's PlannerConfig for object naming, grounding requests and rewrites."""

        return PlannerConfig(
            backend=self.vlm_backend,
            model=self.vlm_model,
            base_url=self.vlm_base_url,
            base_urls=list(self.vlm_base_urls),
            api_key_env=self.vlm_api_key_env,
            timeout_s=self.vlm_timeout_s,
            cache_dir=cache_dir,
        )

    def stage_key(self, stage: str) -> dict[str, Any]:
        """The settings a stage's cached output depends on (a change invalidates that cache)."""
        seg = dataclasses.asdict(self.segment_config())
        keys: dict[str, Any] = {
            "gripper": self.gripper,
            "camera": self.camera,
            "segment": seg,
            "segment_rule": SEGMENT_RULE,
        }
        if stage == "segments":
            return keys
        keys.update({"identifier": self.identifier, "vlm_model": self.vlm_model, "keyframes": self.keyframes})
        if stage == "objects":
            return keys
        keys.update({"grounder": self.grounder})
        if self.grounder == "sam3":
            keys.update({"sam3_model": self.sam3_model, "sam3_threshold": self.sam3_threshold})
        if stage == "grounding":
            return keys
        keys.update(
            {
                "implicit": self.implicit,
                "min_box_px": self.min_box_px,
                "min_motion_px": self.min_motion_px,
                "max_image_side": self.max_image_side,
            }
        )
        return keys

    # -- construction -------------------------------------------------------------------------------------
    def with_overrides(
        self,
        *,
        vlm: str | list[str] | None = None,
        model: str | None = None,
        grounder: str | None = None,
        workers: int | None = None,
        executor: str | None = None,
        implicit: bool | None = None,
        identifier: str | None = None,
        ray_address: str | None = None,
    ) -> "V2GPConfig":
        """A copy with command-line values that are not None (``vlm``: a base URL or a list of them, which
        replaces the config's servers)."""
        changes: dict[str, Any] = {}
        if vlm:
            urls = [vlm] if isinstance(vlm, str) else list(vlm)
            changes["vlm_base_url"], changes["vlm_base_urls"] = urls[0], urls[1:]
        for name, value in (
            ("vlm_model", model),
            ("grounder", grounder),
            ("workers", workers),
            ("executor", executor),
            ("implicit", implicit),
            ("identifier", identifier),
            ("ray_address", ray_address),
        ):
            if value is not None:
                changes[name] = value
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "V2GP config") -> "V2GPConfig":
        if not isinstance(data, dict):
            raise InputError(f"{where}: expected a mapping of settings, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InputError(f"{where}: unknown setting(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
        return cls(**data)

    @classmethod
    def load(cls, path: str | Path) -> "V2GPConfig":
        """Read a YAML file; a top-level ``v2gp:`` key is unwrapped."""

        path = Path(path)
        data = read_yaml(path, "V2GP config", ValueError) or {}
        if isinstance(data, dict) and set(data) == {"v2gp"}:
            data = data["v2gp"]
        return cls.from_dict(data, str(path))


def _gripper_value(value: float | str | None, name: str) -> float | str | None:
    """A raw gripper value from YAML: a number, ``auto``, or None (the profile's); ValueError otherwise."""
    if value is None or value == "auto":
        return value
    if isinstance(value, bool):
        raise InputError(f"V2GPConfig.{name} must be a number or 'auto', got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InputError(f"V2GPConfig.{name} must be a number or 'auto', got {value!r}") from None
    if not number == number or number in (float("inf"), float("-inf")):
        raise InputError(f"V2GPConfig.{name} must be finite, got {value!r}")
    return number


def parse_episode_list(text: str) -> list[int]:
    """``"0,3,5-9"`` -> [0, 3, 5, 6, 7, 8, 9]."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise InputError(f"episode list {text!r}: expected numbers and ranges like 0,3,5-9, got {part!r}")
        a, b = int(m.group(1)), int(m.group(2) or m.group(1))
        if b < a:
            raise InputError(f"episode list {text!r}: range {part} runs backwards")
        out.extend(range(a, b + 1))
    return sorted(set(out))
