"""Starting our nodes and waiting on conditions in a ROS graph (never on fixed sleeps): spin until a predicate holds
or a deadline passes."""

import time
from typing import Callable

LEASE_S = 20.0  # rmw_fastrtps' participant lease: a SIGKILLed process leaves the graph within it (+ announcements)


def spin_until(executor, predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Spin ``executor`` until ``predicate()`` is true; AssertionError naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        executor.spin_once(timeout_sec=0.05)


def reach(executor, node, name: str, timeout_s: float, action: bool = False) -> None:
    """After wait_for_service/wait_for_server: make sure the server has discovered ``node``'s clients, or the
    first request can be lost for good (grounded_planner/ros/reach.py says why). Clients must exist already."""
    from grounded_planner.ros.reach import confirm_reachable, wait_spinning

    assert confirm_reachable(node, name, wait_spinning(executor), timeout_s, action), f"{name} did not answer a probe"


def call(executor, client, request, timeout_s: float, what: str):
    """Call a service and spin until the response arrives; AssertionError naming ``what`` on timeout."""
    assert client.wait_for_service(timeout_sec=timeout_s), f"service for {what} never appeared"
    owner = next(node for node in executor.get_nodes() if client in node.clients)
    reach(executor, owner, client.srv_name, timeout_s)
    future = client.call_async(request)
    spin_until(executor, future.done, timeout_s, what)
    return future.result()


def stop_process(proc, timeout_s: float = 10.0) -> str:
    """Terminate a child process (SIGINT first, like Ctrl-C) and return its output."""
    import signal

    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=timeout_s)
        except Exception:
            proc.kill()
            proc.wait(timeout=timeout_s)
    return proc.stdout.read() if proc.stdout else ""


def output_of(proc, timeout_s: float) -> str:
    """Wait for a child that ends by itself (a timed launch); killed after ``timeout_s``. Its output."""
    import subprocess

    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    return out or ""


def start_node(executable: str, *params: str):
    """``python -m grounded_planner.ros.EXECUTABLE --ros-args -p NAME:=VALUE ...`` as a child process (the test's
    ROS domain inherited; output and errors in its stdout, as :func:`stop_process` returns them)."""
    from conftest import spawn_python

    return spawn_python(
        ["-m", f"grounded_planner.ros.{executable}", "--ros-args", *[a for p in params for a in ("-p", p)]]
    )


def first_camera_frames(context, params: list[str], what: str, timeout_s: float = 60.0) -> tuple[dict, str]:
    """camera_node in a child process with ``-p`` ``params``: the first colour image, aligned depth image and colour
    camera_info it publishes (keys color, depth, info) and the child's output once stopped with Ctrl-C."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import QoSProfile
    from sensor_msgs.msg import CameraInfo, Image

    child = start_node("camera_node", *params)
    node = rclpy.create_node("playback_probe", context=context)
    got: dict[str, list] = {"color": [], "depth": [], "info": []}
    try:
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(node)
        qos = QoSProfile(depth=10)
        node.create_subscription(Image, "/camera/camera/color/image_raw", got["color"].append, qos)
        node.create_subscription(Image, "/camera/camera/aligned_depth_to_color/image_raw", got["depth"].append, qos)
        node.create_subscription(CameraInfo, "/camera/camera/color/camera_info", got["info"].append, qos)
        spin_until(executor, lambda: all(got.values()), timeout_s, what)
    finally:
        node.destroy_node()
        out = stop_process(child)
    return {key: messages[0] for key, messages in got.items()}, out
