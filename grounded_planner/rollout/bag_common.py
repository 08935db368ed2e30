"""What writing, reading and recovering rollout bags share: the error, the rosbags typestore, one read message."""

from __future__ import annotations

import errno
import importlib.metadata
import os
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, BinaryIO

from grounded_planner.errors import InputError, RunFailure
from grounded_planner.msgs.images import DEPTH_UNIT_16UC1_M


PROFILE = "ros2"
MESSAGE_ENCODING = "cdr"
SCHEMA_ENCODING = "ros2msg"
PLAN_MSGTYPE = "grounded_planner_interfaces/msg/GroundedPlan"
ACTION_MSGTYPE = "grounded_planner_interfaces/msg/GroundedAction"
# Depth in 16UC1 images is in these units (RealSense D400 default: 1 mm): the unit msgs.images defines.
DEFAULT_DEPTH_UNIT_M = DEPTH_UNIT_16UC1_M


@lru_cache(maxsize=1)
def library_name() -> str:
    """The MCAP Header's ``library`` field: who wrote the file (looked up once: importlib.metadata reads the
    installed packages' metadata, ~3 ms, which a campaign would pay at every episode)."""
    try:
        return f"grounded_planner; mcap-python {importlib.metadata.version('mcap')}"
    except importlib.metadata.PackageNotFoundError:
        return "grounded_planner; mcap-python"


class BagError(InputError):
    """A bag that cannot be read or written as asked (names the file and what was expected)."""


class BagWriteError(OSError, RunFailure):
    """The file system refused a write to a bag (full disk, quota, I/O error): not bad input, a failure at run
    time. The writer has cut the file back to its last complete chunk, so the bag stays readable; ``errno``
    is the refusal's (``errno.ENOSPC`` for a full disk). OSError comes first: its constructor sets ``errno``
    and ``strerror`` (after RuntimeError's, ``BagWriteError(errno, text).errno`` was None)."""


@dataclass
class BagMessage:
    """One message read back: topic, ROS type, log time (ns) and the deserialised rosbags object."""

    topic: str
    msgtype: str
    log_time_ns: int
    msg: Any


def _interfaces_msg_dirs() -> list[Path]:
    """Where the grounded_planner_interfaces .msg files may be: env override, source tree, ament prefixes."""
    candidates: list[Path] = []
    if os.environ.get("GROUNDED_PLANNER_MSG_DIR"):
        candidates.append(Path(os.environ["GROUNDED_PLANNER_MSG_DIR"]))
    candidates.append(Path(__file__).resolve().parents[2] / "grounded_planner_interfaces" / "msg")
    for prefix in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep):
        if prefix:
            candidates.append(Path(prefix) / "share" / "grounded_planner_interfaces" / "msg")
    candidates.append(Path(sys.prefix) / "share" / "grounded_planner_interfaces" / "msg")
    return [c for c in candidates if (c / "GroundedPlan.msg").is_file()]


@lru_cache(maxsize=1)
def typestore():
    """rosbags typestore: the newest ROS 2 standard types plus grounded_planner_interfaces messages."""
    # lazy: optional SDK (rosbags), not in install_requires
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    store_name = next((n for n in ("ROS2_KILTED", "ROS2_JAZZY", "LATEST") if hasattr(Stores, n)), "LATEST")
    store = get_typestore(getattr(Stores, store_name))
    dirs = _interfaces_msg_dirs()
    if not dirs:
        raise BagError(
            "cannot find grounded_planner_interfaces/msg/*.msg (set GROUNDED_PLANNER_MSG_DIR "
            "to the folder holding GroundedPlan.msg)"
        )
    types: dict = {}
    for path in sorted(dirs[0].glob("*.msg")):
        types.update(
            get_types_from_msg(path.read_text(encoding="utf-8"), f"grounded_planner_interfaces/msg/{path.stem}")
        )
    store.register(types)
    return store


class SchemaTypes:
    """Message types built from the schemas inside one file (``ros2msg`` definitions), as a reader needs them."""

    def __init__(self, where: Path):
        # lazy: optional SDK (rosbags), not in install_requires
        from rosbags.typesys import Stores, get_types_from_msg, get_typestore

        self._parse = get_types_from_msg
        self.store = get_typestore(Stores.EMPTY)
        self.where = where
        self._registered: set[str] = set()

    def deserialize(self, data: bytes, msgtype: str, encoding: str, definition: bytes) -> Any:
        if msgtype not in self._registered:
            if encoding != SCHEMA_ENCODING:
                raise BagError(
                    f"{self.where}: schema encoding {encoding!r} of {msgtype} is not supported "
                    f"(expected {SCHEMA_ENCODING})"
                )
            self.store.register(self._parse(definition.decode("utf-8"), msgtype))
            self._registered.add(msgtype)
        return self.store.deserialize_cdr(data, msgtype)


def write_fully(f: BinaryIO, data: bytes | bytearray | memoryview) -> None:
    """All of ``data`` to an unbuffered file, whose ``write`` may take only part of it (a signal, a full disk)."""
    view = memoryview(data)
    while view:
        n = f.write(view)
        if not n:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view = view[n:]
