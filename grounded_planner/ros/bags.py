"""rosbag2 files (MCAP or sqlite3) holding rclpy messages, through `rosbags` (no rosbag2_py needed)."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Iterable, Iterator

from grounded_planner.errors import InputError


STORAGES = ("mcap", "sqlite3")


class BagFileError(InputError):
    """A bag path that does not exist, has an unknown format, or holds no playable topic."""


def message_class(msgtype: str) -> Any:
    """``"sensor_msgs/msg/Image"`` -> the rclpy message class; raises BagFileError when not importable."""
    try:
        package, kind, name = msgtype.split("/")
        return getattr(importlib.import_module(f"{package}.{kind}"), name)
    except (ValueError, ImportError, AttributeError) as exc:
        raise BagFileError(f"message type {msgtype!r} is not importable here ({exc})") from exc


def msgtype_of(msg: Any) -> str:
    """The ROS type name of an rclpy message instance, e.g. ``sensor_msgs/msg/Image``."""
    module = type(msg).__module__.split(".")  # sensor_msgs.msg._image
    return f"{module[0]}/{module[1]}/{type(msg).__name__}"


def write_bag(path: str | Path, messages: Iterable[tuple[str, int, Any]], storage: str = "mcap") -> Path:
    """Write ``(topic, stamp_ns, rclpy message)`` triples to a new rosbag2 directory at ``path``.

    The CDR bytes come from rclpy's own serializer; rosbags adds the metadata and (for MCAP) the schemas.
    """
    from rclpy.serialization import serialize_message  # lazy: ROS package (rclpy), absent without a ROS install
    from rosbags.rosbag2 import StoragePlugin, Writer  # lazy: optional SDK (rosbags), not in install_requires
    from rosbags.typesys import Stores, get_typestore  # lazy: optional SDK (rosbags), not in install_requires

    if storage not in STORAGES:
        raise BagFileError(f"storage must be one of {', '.join(STORAGES)}, got {storage!r}")
    path = Path(path)
    if path.exists():
        raise BagFileError(f"bag {path} already exists (rosbag2 writes a new directory)")
    store = get_typestore(Stores.ROS2_KILTED)
    plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
    connections: dict[str, Any] = {}
    with Writer(path, version=9, storage_plugin=plugin) as writer:
        for topic, stamp_ns, msg in messages:
            if topic not in connections:
                msgtype = msgtype_of(msg)
                try:
                    connections[topic] = writer.add_connection(topic, msgtype, typestore=store)
                except Exception as exc:  # rosbags raises its own error types for unknown definitions
                    raise BagFileError(f"cannot add topic {topic} of type {msgtype} to the bag: {exc}") from exc
            writer.write(connections[topic], int(stamp_ns), serialize_message(msg))
    return path


def read_bag_raw(path: str | Path, topics: Iterable[str] = ()) -> Iterator[tuple[str, str, int, bytes]]:
    """``(topic, msgtype, log_time_ns, cdr_bytes)`` in log-time order from a rosbag2 directory or file.

    Raises
    ------
    BagFileError
        When ``path`` does not exist, is not a rosbag2 bag, or none of ``topics`` is in it.
    """
    from rosbags.rosbag2 import Reader  # lazy: optional SDK (rosbags), not in install_requires

    path = Path(path)
    if not path.exists():
        raise BagFileError(f"bag {path} does not exist")
    try:
        reader = Reader(path)
        reader.open()
    except Exception as exc:
        raise BagFileError(f"{path} is not a readable rosbag2 bag (MCAP or sqlite3): {exc}") from exc
    try:
        wanted = set(topics)
        connections = [c for c in reader.connections if not wanted or c.topic in wanted]
        if not connections:
            have = sorted({c.topic for c in reader.connections})
            raise BagFileError(f"bag {path} has none of the topics {sorted(wanted)} (it has {have})")
        for connection, stamp_ns, raw in reader.messages(connections=connections):
            yield connection.topic, connection.msgtype, int(stamp_ns), bytes(raw)
    finally:
        reader.close()


def bag_topics(path: str | Path) -> dict[str, str]:
    """Topic -> message type of every topic in the bag."""
    from rosbags.rosbag2 import Reader  # lazy: optional SDK (rosbags), not in install_requires

    path = Path(path)
    if not path.exists():
        raise BagFileError(f"bag {path} does not exist")
    try:
        with Reader(path) as reader:
            return {c.topic: c.msgtype for c in reader.connections}
    except Exception as exc:
        raise BagFileError(f"{path} is not a readable rosbag2 bag (MCAP or sqlite3): {exc}") from exc
