"""Test double of ``ros2 launch`` for machines without ``launch``/``launch_ros`` (CI: neither is on PyPI).

``python -m helpers.launch_double LAUNCH_FILE SECONDS name:=value ...`` evaluates the launch file with the
``launch``/``launch_ros`` stand-ins of helpers/fake_moveit_configs.py (arguments declared with their defaults, the
``name:=value`` assignments over them, the OpaqueFunction called with them), then starts every ``Node`` it returns
the way launch_ros 0.28 (Kilted/Rolling, ``launch_ros/actions/node.py``) does:

    <executable> --ros-args -r __node:=<name> [-r __ns:=/<namespace>] --params-file <file> ... --params-file <dict>

including its awkward parts: each string value of a parameters dict is read as YAML (``"12"`` becomes an int,
``""`` stays an empty string, a list must hold one type) and written under ``/**``; a parameters file that does not
exist is left out with a warning. Output lines are prefixed ``[<executable>-<n>]`` as launch prints them, a process
that dies before the end is reported ``[ERROR] [<executable>-<n>]: process has died [pid P, exit code C, ...]``, and
after SECONDS (or on SIGINT) every process gets SIGINT, then SIGTERM 5 s later and SIGKILL 5 s after that where it
still runs, announced as launch 3.7.1 announces them (``Shutdown`` and ExecuteLocal's shutdown timers).

The executable is the console script pip puts beside the interpreter (colcon puts it in lib/grounded_planner/).
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

from helpers.fake_moveit_configs import launch_modules

# launch's defaults (LaunchConfiguration 'sigterm_timeout' and 'sigkill_timeout', launch/actions/execute_local.py):
# SIGTERM this long after SIGINT, SIGKILL this long after SIGTERM, s
SIGTERM_TIMEOUT_S = 5.0
SIGKILL_TIMEOUT_S = 5.0


def evaluate(launch_file: str, assignments: dict[str, str]) -> list[dict]:
    """The ``Node(...)`` keyword arguments the launch file returns for ``assignments``."""
    nodes: list[dict] = []
    sys.modules.update(launch_modules(nodes))
    spec = importlib.util.spec_from_file_location("launch_file", launch_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    *declared, opaque = module.generate_launch_description()
    arguments = dict(declared)
    unknown = sorted(set(assignments) - set(arguments))
    if unknown:  # ros2 launch ignores them silently; a test must not
        raise SystemExit(f"launch_double: {launch_file} declares no argument(s) {', '.join(unknown)}")
    opaque({**arguments, **assignments})
    return nodes


def _yaml_value(name: str, value):
    """launch_ros' evaluate_parameter_dict on one value (strings are YAML, lists must be of one type)."""
    if isinstance(value, str):
        value = yaml.safe_load(value or "''")
        if not isinstance(value, (bool, int, float, str, bytes, list)):
            raise TypeError(f"launch_ros cannot pass {type(value).__name__} for parameter {name!r}")
    if isinstance(value, (list, tuple)):
        if not value or len({type(v) for v in value}) != 1 or type(value[0]) not in (bool, int, float, str):
            raise TypeError(f"launch_ros needs a non-empty list of one type for parameter {name!r}, got {value!r}")
        value = list(value)
    return value


def command(node: dict, workdir: str) -> list[str]:
    executable = str(Path(sys.executable).with_name(node["executable"]))
    cmd = [executable, "--ros-args", "-r", f"__node:={node['name']}"]
    namespace = node.get("namespace") or ""
    if namespace.strip("/"):  # launch_ros: a namespace other than '' or '/' becomes -r __ns:=/NS (absolute)
        cmd += ["-r", f"__ns:=/{namespace.strip('/')}"]
    for params in node.get("parameters") or []:
        if isinstance(params, dict):
            values = {name: _yaml_value(name, value) for name, value in params.items()}
            with tempfile.NamedTemporaryFile(
                "w", prefix="launch_params_", suffix=".yaml", dir=workdir, delete=False
            ) as handle:
                yaml.dump({"/**": {"ros__parameters": values}}, handle, default_flow_style=False)
            cmd += ["--params-file", handle.name]
        elif os.path.isfile(str(params)):
            cmd += ["--params-file", os.path.abspath(str(params))]
        else:
            print(f"[WARNING] [launch_ros.actions.node]: Parameter file path is not a file: {params}", flush=True)
    return cmd


def _pump(stream, prefix: str) -> None:
    for line in stream:
        sys.stdout.write(f"{prefix} {line}")
        sys.stdout.flush()


def _escalate(processes: list, sigint_at: float) -> None:
    """Wait for every process after its SIGINT as launch 3.7.1's ExecuteLocal does (its shutdown timers): one still
    running SIGTERM_TIMEOUT_S later gets SIGTERM, one still running SIGKILL_TIMEOUT_S after that gets SIGKILL, each
    step announced with launch's own line."""
    sent: dict[str, str] = {}
    while any(proc.poll() is None for _, proc, _, _ in processes):
        waited = time.monotonic() - sigint_at
        for label, proc, _, _ in processes:
            if proc.poll() is not None:
                continue
            if waited >= SIGTERM_TIMEOUT_S + SIGKILL_TIMEOUT_S and sent.get(label) == "SIGTERM":
                # launch's timer period here is PythonExpression('float(5) + float(5)'): printed '10.0'
                after, to, timeout = "SIGTERM", "SIGKILL", str(float(SIGTERM_TIMEOUT_S + SIGKILL_TIMEOUT_S))
            elif waited >= SIGTERM_TIMEOUT_S and label not in sent:
                after, to, timeout = "SIGINT", "SIGTERM", f"{SIGTERM_TIMEOUT_S:g}"
            else:
                continue
            print(
                f"[ERROR] [{label}]: process[{label}] failed to terminate '{timeout}' seconds after receiving "
                f"'{after}', escalating to '{to}'",
                flush=True,
            )
            sent[label] = to
            proc.send_signal(getattr(signal, to))
        time.sleep(0.05)


def main(argv: list[str]) -> int:
    launch_file, seconds, *rest = argv
    assignments = dict(a.split(":=", 1) for a in rest)
    workdir = tempfile.mkdtemp(prefix="launch_double_")
    processes = []
    for number, node in enumerate(evaluate(launch_file, assignments), 1):
        label = f"{node['executable']}-{number}"
        cmd = command(node, workdir)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        print(f"[INFO] [{label}]: process started with pid [{proc.pid}]", flush=True)
        reader = threading.Thread(target=_pump, args=(proc.stdout, f"[{label}]"), daemon=True)
        reader.start()
        processes.append((label, proc, reader, cmd))
    end = time.monotonic() + float(seconds)
    interrupted = threading.Event()  # Ctrl-C ends the launch early, as it does `ros2 launch`
    signal.signal(signal.SIGINT, lambda *_: interrupted.set())
    reported = set()
    while time.monotonic() < end and not interrupted.is_set():
        for label, proc, _, cmd in processes:
            if label not in reported and proc.poll() is not None:
                reported.add(label)
                if proc.returncode != 0:
                    print(
                        f"[ERROR] [{label}]: process has died [pid {proc.pid}, exit code {proc.returncode}, "
                        f"cmd '{' '.join(cmd)}'].",
                        flush=True,
                    )
        time.sleep(0.1)
    for _, proc, _, _ in processes:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
    _escalate(processes, time.monotonic())
    for label, proc, reader, _ in processes:
        reader.join(timeout=5.0)
        if label not in reported:
            print(
                f"[INFO] [{label}]: process has finished cleanly [pid {proc.pid}]"
                if proc.returncode == 0
                else f"[ERROR] [{label}]: process has died [pid {proc.pid}, exit code {proc.returncode}].",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
