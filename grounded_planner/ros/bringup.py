"""In-process bringup: the nodes a YAML profile names, in one process on one multi-threaded executor (the console in a
process of its own beside it)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from grounded_planner.errors import InputError, RunFailure
from grounded_planner.ros.malloc import keep_image_buffers
from grounded_planner.ros.names import NamespaceError, normalize_namespace
from grounded_planner.ros.shutdown import (
    CALLBACK_WAIT_S,
    SHUTDOWN_LIMIT_S,
    exit_watchdog,
    ignore_sigint,
    leave_stuck_callbacks,
    shutdown_executor,
    spinning,
)
from grounded_planner.threads import PR_SET_PDEATHSIG, PRCTL
from grounded_planner.yamlfile import read_yaml
import importlib

# Node name in a profile (the section key, as in a ROS 2 parameters file) -> "module:Class".
NODE_TYPES = {
    "camera": "grounded_planner.ros.camera_node:CameraNode",
    "bag_player": "grounded_planner.ros.bag_player_node:BagPlayerNode",
    "planner": "grounded_planner.ros.planner_node:PlannerNode",
    "backprojection": "grounded_planner.ros.backprojection_node:BackprojectionNode",
    "executor": "grounded_planner.ros.executor_node:ExecutorNode",
    "rollout_logger": "grounded_planner.ros.rollout_logger_node:RolloutLoggerNode",
    "console": "grounded_planner.ros.console_node:ConsoleNode",
}
# Start order: sources before consumers, so that nothing a node waits for comes up after it.
START_ORDER = ("rollout_logger", "camera", "bag_player", "planner", "backprojection", "executor", "console")
# Nodes that run in a process of their own beside the bringup's, with the line each prints once it serves. The
# console's Python work (HTTP, JSON, camera frames for its pages) would otherwise wait for the GIL behind the
# planner's, logger's and executor's, and hold theirs up: a plan asked through it took ~20 ms more in one process.
OWN_PROCESS = {"console": re.compile(r"console on http")}
OWN_PROCESS_START_S = 60.0  # how long such a node may take to serve before the bringup gives up, s
OWN_PROCESS_STOP_S = 15.0  # how long it may take to stop after Ctrl-C before it is killed, s


class ProfileError(InputError):
    """A bringup profile that cannot be used (missing file, unknown node, malformed section or override)."""


class NodeProcessError(RunFailure):
    """A node the bringup runs in a process of its own ended before it served (its last line says why)."""


class NodeProcess:
    """Node ``name`` of the profile in a child process: ``python -m MODULE --ros-args --params-file FILE -r
    __node:=NAME [-r __ns:=NS]`` in the same ROS domain, its output passed on line by line to this process's stdout.
    Returns once the node printed ``ready`` (NodeProcessError when it ended first or took longer than
    ``OWN_PROCESS_START_S``); :meth:`stop` is Ctrl-C, then a kill after ``OWN_PROCESS_STOP_S``. The child dies with
    the thread that started it (Linux: PR_SET_PDEATHSIG; the bringup's main thread), so a killed bringup leaves no
    console behind."""

    def __init__(self, name: str, values: dict[str, Any], namespace: str, domain_id: int | None, ready: re.Pattern):
        self.name = name
        self._folder = tempfile.TemporaryDirectory(prefix=f"grounded_planner_{name}_")
        params = Path(self._folder.name) / "params.yaml"
        params.write_text(yaml.safe_dump({f"/**/{name}": {"ros__parameters": values}}))
        command = [sys.executable, "-m", NODE_TYPES[name].split(":")[0], "--ros-args", "--params-file", str(params)]
        command += ["-r", f"__node:={name}"] + (["-r", f"__ns:={namespace}"] if namespace not in ("", "/") else [])
        env = dict(os.environ)
        if domain_id is not None:
            env["ROS_DOMAIN_ID"] = str(domain_id)
        self.proc = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            env=env,
            preexec_fn=_die_with_parent,
        )
        self._ready, self._last = threading.Event(), ""
        threading.Thread(target=self._pass_on, args=(ready,), name=f"{name}-output", daemon=True).start()
        deadline = time.monotonic() + OWN_PROCESS_START_S
        while not self._ready.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise NodeProcessError(
                    f"{name} (a process of its own) "
                    + (
                        f"ended at start: {self._last}"
                        if self.proc.returncode
                        else f"did not serve within {OWN_PROCESS_START_S:g} s"
                    )
                )

    def _pass_on(self, ready: re.Pattern) -> None:
        for line in self.proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            if line.strip():
                self._last = line.strip()
            if not self._ready.is_set() and ready.search(line):
                self._ready.set()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=OWN_PROCESS_STOP_S)
            except subprocess.TimeoutExpired:
                print(f"bringup: {self.name} did not stop within {OWN_PROCESS_STOP_S:g} s: killed", flush=True)
                self.proc.kill()
                self.proc.wait()
        self._folder.cleanup()


def _die_with_parent() -> None:
    """In the child before it runs: end it (SIGTERM) when the thread that started it ends, however that ends."""
    if PRCTL is not None:
        PRCTL(PR_SET_PDEATHSIG, int(signal.SIGTERM))


def node_of_key(key: str) -> str:
    """The node a parameters file's top-level key names: ``/**/executor`` (any namespace, as ROS 2 matches it: what
    our profiles use, so that a namespaced ``/robot1/executor`` gets its section), ``executor`` or ``/executor``."""
    return key[len("/**/") :] if key.startswith("/**/") else key.lstrip("/")


@dataclass
class Profile:
    """A ROS 2 parameters file whose top-level keys name nodes: ``/**/planner: {ros__parameters: {...}}`` (or a plain
    ``planner:``, which ``ros2 launch`` applies only to a node in the root namespace)."""

    path: Path | None
    params: dict[str, dict[str, Any]] = field(default_factory=dict)  # node name -> parameter values

    @classmethod
    def load(cls, path: str | Path) -> "Profile":
        path = Path(path)
        data = read_yaml(path, "profile", ProfileError) or {}
        return cls.from_dict(data, str(path), path)

    @classmethod
    def from_dict(cls, data: Any, source: str = "profile", path: Path | None = None) -> "Profile":
        if not isinstance(data, dict):
            raise ProfileError(f"{source}: expected a mapping of node names, got {type(data).__name__}")
        params: dict[str, dict[str, Any]] = {}
        for key, section in data.items():
            name = node_of_key(str(key))
            if name not in NODE_TYPES:
                raise ProfileError(
                    f"{source}: unknown node {str(key)!r} (known: {', '.join(NODE_TYPES)}, each as NAME or /**/NAME)"
                )
            if name in params:
                raise ProfileError(f"{source}: node {name!r} has two sections ({str(key)!r} and another)")
            # a section without ros__parameters is a typo ROS would silently ignore: every value falls back
            values = section.get("ros__parameters") if isinstance(section, dict) else None
            if not isinstance(values, dict) or (isinstance(section, dict) and set(section) != {"ros__parameters"}):
                raise ProfileError(
                    f"{source}: section {name!r} must be {{ros__parameters: {{name: value}}}}, got {section!r}"[:300]
                )
            params[name] = dict(values)
        return cls(path, params)

    def set(self, assignment: str) -> None:
        """Apply ``node.param=value`` (value parsed as YAML: 2.0, true, [a, b]); adds the node when missing."""
        key, sep, raw = assignment.partition("=")
        node, dot, param = key.strip().partition(".")
        if not sep or not dot or not param:
            raise ProfileError(f"override {assignment!r} must look like node.param=value (e.g. planner.backend=openai)")
        if node not in NODE_TYPES:
            raise ProfileError(f"override {assignment!r}: unknown node {node!r} (known: {', '.join(NODE_TYPES)})")
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError as exc:
            raise ProfileError(f"override {assignment!r}: value is not valid YAML: {exc}") from exc
        self.params.setdefault(node, {})[param] = "" if value is None else value


def _node_module(name: str):
    return importlib.import_module(NODE_TYPES[name].split(":")[0])


def _node_class(name: str):
    return getattr(_node_module(name), NODE_TYPES[name].split(":")[1])


def _default(name: str, param: str) -> Any:
    return next(p.default for p in _node_module(name).PARAMS if p.name == param)


def checked_values(name: str, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` for node ``name`` converted to the parameters' types (YAML ``5`` for 5.0) and checked.

    Raises ProfileError for a parameter the node does not have (a typo must not silently fall back to a default),
    a value of the wrong type, or one its check refuses (a missing file, a negative timeout).
    """
    from grounded_planner.ros.params import check_value  # lazy: a ROS command; the CLI runs without rclpy

    table = {p.name: p for p in getattr(_node_module(name), "PARAMS", [])}
    out = {}
    for key, value in values.items():
        if key not in table:
            raise ProfileError(f"node {name!r} has no parameter {key!r} (it has {', '.join(sorted(table))})")
        out[key], reason = check_value(table[key], value)
        if reason is not None:
            raise ProfileError(f"node {name!r}: parameter {key!r} {reason}")
    return out


def parameter_overrides(name: str, values: dict[str, Any]) -> list:
    """rclpy Parameters for node ``name`` (see :func:`checked_values` for what is refused)."""
    from rclpy.parameter import Parameter  # lazy: ROS package (rclpy), absent without a ROS install

    return [Parameter(key, value=value) for key, value in checked_values(name, values).items()]


class Bringup:
    """Creates the profile's nodes in a private rclpy context and spins them on a MultiThreadedExecutor.

    ``factories`` maps a node name to extra constructor keyword arguments (the demo hands the executor
    node its simulator backend). Lifecycle nodes with ``autostart`` are configured and activated.
    """

    def __init__(
        self,
        profile: Profile,
        factories: dict[str, dict[str, Any]] | None = None,
        domain_id: int | None = None,
        num_threads: int = 8,
        namespace: str = "",
    ):
        import rclpy  # lazy: ROS package (rclpy), absent without a ROS install
        from rclpy.context import Context  # lazy: ROS package (rclpy), absent without a ROS install
        from rclpy.executors import MultiThreadedExecutor  # lazy: ROS package (rclpy), absent without a ROS install

        try:
            self.namespace = normalize_namespace(namespace)  # every node's: a robot's stack beside another's
        except NamespaceError as exc:
            raise ProfileError(str(exc)) from exc
        checked = {
            name: checked_values(name, values) for name, values in profile.params.items()
        }  # before any node starts
        if "planner" in checked:  # a thread per VLM request the planner lets into flight, on top of the shared ones
            num_threads += checked["planner"].get(
                "max_concurrent_requests", _default("planner", "max_concurrent_requests")
            )
        self.profile = profile
        self.context = Context()
        rclpy.init(context=self.context, domain_id=domain_id)
        self.nodes: dict[str, Any] = {}
        self.processes: dict[str, NodeProcess] = {}  # the nodes in processes of their own (OWN_PROCESS)
        self.executor = MultiThreadedExecutor(num_threads=num_threads, context=self.context)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._extra_nodes: list[Any] = []
        self.stuck_callbacks: list[str] = []  # worker threads still in a callback when shutdown gave up on them
        try:
            for name in START_ORDER:
                if name in profile.params and name in OWN_PROCESS and not (factories or {}).get(name):
                    self.processes[name] = NodeProcess(
                        name, checked[name], self.namespace, domain_id, OWN_PROCESS[name]
                    )
                elif name in profile.params:
                    self.nodes[name] = self._create(name, (factories or {}).get(name, {}))
        except BaseException:
            self.shutdown()
            raise

    def _create(self, name: str, extra: dict[str, Any]):
        # lazy: a ROS command; the CLI runs without rclpy
        from grounded_planner.ros.node_main import ConfigureError, autostart

        overrides = parameter_overrides(name, self.profile.params[name])
        node = _node_class(name)(
            node_name=name,
            namespace=self.namespace,
            context=self.context,
            parameter_overrides=overrides,
            use_global_arguments=False,
            **extra,
        )
        self.executor.add_node(node)
        try:
            autostart(node)
        except ConfigureError as exc:
            raise ProfileError(str(exc)) from exc
        return node

    def add_node(self, node) -> None:
        """Spin a caller's node (a client) with the graph; :meth:`shutdown` destroys it after the spin loop stopped,
        never under a running callback (destroying it earlier left "cannot use Destroyable" errors in futures)."""
        self.executor.add_node(node)
        self._extra_nodes.append(node)

    def stop_spinning(self) -> None:
        """End :meth:`spin` after the callbacks running now (safe from a signal handler: it only sets a flag)."""
        self._stop.set()

    def start(self) -> "Bringup":
        """Spin in a background thread (for callers that drive the graph themselves, like the demo)."""
        self._thread = threading.Thread(target=self.spin, name="bringup", daemon=True)
        self._thread.start()
        return self

    def spin(self) -> None:
        """Spin until :meth:`shutdown` or Ctrl-C. Spins in short slices so that shutdown can stop the loop
        *before* it shuts the executor down (shutting it down under a spinning thread races inside rclpy)."""
        from rclpy.executors import ExternalShutdownException  # lazy: ROS package (rclpy), absent without a ROS install

        # lazy: a ROS command; the CLI runs without rclpy
        from grounded_planner.ros.node_main import survivable_rcl_error

        try:
            while self.context.ok() and not self._stop.is_set():
                try:
                    self.executor.spin_once(timeout_sec=0.1)
                except Exception as exc:  # an undeliverable response, an entity gone: not the graph's end
                    warning = survivable_rcl_error(exc)
                    if not warning:
                        raise
                    print(f"bringup: {warning}", file=sys.stderr, flush=True)
        except ExternalShutdownException:
            pass

    def _reap_shutdown_tasks(self) -> None:
        """A callback that the executor had already handed to a worker when shutdown began can end with rclpy's
        InvalidHandle ("cannot use Destroyable because destruction was requested"): expected while the graph is
        being torn down. Read those from the executor's finished tasks so that their garbage collection does not
        print "exception was never retrieved"; any other exception is reported."""
        from rclpy.exceptions import InvalidHandle  # lazy: ROS package (rclpy), absent without a ROS install

        for task, _entity, _node in list(getattr(self.executor, "_tasks", ())):
            try:
                if not task.done():
                    continue
                exc = task.exception()
            except Exception:  # noqa: BLE001 - a task that cannot even say how it ended has nothing to report
                continue
            if exc is not None and not isinstance(exc, InvalidHandle):
                print(f"bringup: a callback failed during shutdown: {exc}", file=sys.stderr, flush=True)

    def shutdown(self) -> None:
        import rclpy  # lazy: ROS package (rclpy), absent without a ROS install

        # Stop the spin loop, then the executor (waits for running callbacks), then destroy the nodes: doing it
        # the other way round made worker threads trip over destroyed handles ("InvalidHandle").
        self._stop.set()
        for child in reversed(list(getattr(self, "processes", {}).values())):  # consumers first, as nodes below
            child.stop()
        self.processes = {}
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        self.stuck_callbacks = shutdown_executor(self.executor, CALLBACK_WAIT_S)
        for node in self._extra_nodes + list(reversed(list(self.nodes.values()))):
            try:
                node.destroy_node()
            except Exception:  # noqa: BLE001 - a node that fails to clean up must not keep the others alive
                pass
        self.nodes = {}
        self._extra_nodes = []
        self._reap_shutdown_tasks()
        try:
            rclpy.try_shutdown(context=self.context)
        except Exception as exc:  # noqa: BLE001 - a half-built node failing to clean up must not hide the error that stopped bringup
            print(f"bringup: while shutting down: {exc}", file=sys.stderr, flush=True)

    def __enter__(self) -> "Bringup":
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()


def run(
    config: str | Path,
    overrides: list[str] = (),
    on_ready: Callable[[Bringup], None] | None = None,
    namespace: str = "",
) -> int:
    """Bring up ``config`` with ``overrides`` (every node in ``namespace``) and spin until Ctrl-C; returns an exit
    code."""
    keep_image_buffers()  # this process is the nodes' process, as run_node's is theirs
    if threading.current_thread() is threading.main_thread():
        from grounded_planner.ros.node_main import stop_on_sigint  # lazy: a ROS command; the CLI runs without rclpy

        stop_on_sigint()
    profile = Profile.load(config)
    for assignment in overrides:
        profile.set(assignment)
    if not profile.params:
        raise ProfileError(f"profile {config} names no node")
    with Bringup(profile, namespace=namespace) as bringup:
        where = "" if bringup.namespace == "/" else f" in namespace {bringup.namespace}"
        for name, child in bringup.processes.items():
            print(f"bringup: {name} in a process of its own (pid {child.proc.pid})", flush=True)
        names = [name for name in START_ORDER if name in bringup.nodes or name in bringup.processes]
        print(f"bringup: {', '.join(names)} running{where} from {config} (Ctrl-C to stop)", flush=True)
        if on_ready is not None:
            on_ready(bringup)
        try:
            spinning(True, on_sigint=bringup.stop_spinning)  # rclpy's handler leaves a private context running
            bringup.spin()
        except KeyboardInterrupt:
            pass
        finally:
            spinning(False)
            ignore_sigint()  # shutting down: a second Ctrl-C (ros2 launch forwards one) must not cut it short
        watchdog = exit_watchdog(SHUTDOWN_LIMIT_S, "bringup")
    watchdog.through_exit()  # shut down (Bringup.__exit__); the process ends next, its interpreter's exit bounded too
    leave_stuck_callbacks(bringup.stuck_callbacks, "bringup")
    return 0
