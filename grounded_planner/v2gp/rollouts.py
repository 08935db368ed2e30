"""V2GP input from this project's own rollouts: folders of rollout.json + rollout.mcap (grounded_planner.rollout).

Each rollout folder is one episode: the instruction from rollout.json, the frames of the color topic, and
the gripper signal from ``sensor_msgs/JointState`` on the joint-states topic, sampled at every color frame
(the last joint state logged at or before the frame; NaN before the first one). The gripper joint is named
by config (``gripper``: a joint name such as ``fr3_finger_joint1``); left at the LeRobot default, the first
joint whose name contains "finger" or "gripper" is used. Raw joint values are normalised by the robot
profile (``franka_finger``: 0.04 m open per finger, 0 closed; ``so101``: 100 open, 0 closed).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path

import numpy as np

from grounded_planner.v2gp.episode import DemoEpisode
from grounded_planner.v2gp.errors import DatasetError
from grounded_planner.rollout.record import RolloutError, RolloutRecord, RolloutTopics, find_rollouts
from grounded_planner.rollout.bag import IMAGE_MSGTYPES, BagError, image_to_rgb

_COLOR_ENCODINGS = ("rgb8", "bgr8", "rgba8", "bgra8", "mono8")


class RolloutDataset:
    """Rollout folders at or below ``root`` as V2GP episodes (index = position in path order)."""

    def __init__(self, root: str | Path, gripper: str = "", camera: str | None = None):
        self.root = Path(root)
        try:
            self.records = [r for r in find_rollouts([self.root])]
        except RolloutError as exc:
            raise DatasetError(str(exc)) from exc
        if not self.records:
            raise DatasetError(f"{self.root}: no rollout folders (rollout.json) found")
        self.topics = RolloutTopics()
        self.color_topic = camera or self.topics.color
        # a rollout holds raw or compressed colour (image_transport's .../compressed beside the raw topic)
        self.color_topics = (self.color_topic, f"{self.color_topic}/compressed")
        self.gripper_joint = "" if gripper.startswith("observation.") else gripper
        self.version = "rollout"

    @property
    def episode_indices(self) -> list[int]:
        return list(range(len(self.records)))

    def episode(self, index: int) -> DemoEpisode:
        if not 0 <= index < len(self.records):
            raise DatasetError(f"{self.root}: no episode {index} (have {len(self.records)} rollouts)")
        record = self.records[index]
        frame_times: list[int] = []
        joint_times: list[int] = []
        joint_values: list[float] = []
        joint_name = self.gripper_joint
        try:
            for m in record.messages(topics=[*self.color_topics, self.topics.joint_states]):
                if m.topic in self.color_topics and m.msgtype in IMAGE_MSGTYPES:
                    frame_times.append(m.log_time_ns)
                elif m.msgtype == "sensor_msgs/msg/JointState":
                    names = list(m.msg.name)
                    if not joint_name:
                        joint_name = next((n for n in names if "finger" in n or "gripper" in n), "")
                    if joint_name in names:
                        joint_times.append(m.log_time_ns)
                        joint_values.append(float(m.msg.position[names.index(joint_name)]))
        except BagError as exc:
            raise DatasetError(f"{record.directory}: {exc}") from exc
        if not frame_times:
            raise DatasetError(f"{record.bag_path}: no color images on {self.color_topic}")
        if not joint_values:
            raise DatasetError(
                f"{record.bag_path}: no gripper joint "
                f"{joint_name or '(none named finger/gripper)'} on {self.topics.joint_states}; "
                "name it with gripper: JOINT"
            )
        jt = np.asarray(joint_times)
        jv = np.asarray(joint_values)
        pick = np.searchsorted(jt, np.asarray(frame_times), side="right") - 1
        gripper = np.where(pick >= 0, jv[np.clip(pick, 0, None)], np.nan)
        duration_s = (frame_times[-1] - frame_times[0]) / 1e9 if len(frame_times) > 1 else 0.0
        fps = (len(frame_times) - 1) / duration_s if duration_s > 0 else 30.0
        frames = _BagFrames(record, self.color_topics)
        return DemoEpisode(
            index=index,
            instruction=str(record.data.get("instruction") or ""),
            fps=fps,
            gripper=gripper,
            frame_indices=np.arange(len(frame_times)),
            source=f"{record.directory}",
            camera=self.color_topic,
            _reader=frames.get,
        )


class _BagFrames:
    """Color frames by index, decoded on demand (one pass over the bag per batch of misses, LRU of 32)."""

    def __init__(self, record: RolloutRecord, topics: tuple[str, ...]):
        self.record, self.topics = record, topics
        self.bag, self.topic = record.bag_path, " or ".join(topics)
        self._cache: OrderedDict[int, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, i: int) -> np.ndarray:
        with self._lock:
            if i in self._cache:
                self._cache.move_to_end(i)
                return self._cache[i]
            k = 0
            for m in self.record.messages(topics=list(self.topics)):
                if m.msgtype not in IMAGE_MSGTYPES:
                    continue
                if k == i:
                    image = image_to_rgb(m.msg)
                    self._cache[i] = image
                    if len(self._cache) > 32:
                        self._cache.popitem(last=False)
                    return image
                k += 1
            raise DatasetError(f"{self.bag}: no color frame {i} on {self.topic}")
