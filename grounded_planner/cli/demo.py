"""`grounded-planner demo`: the whole graph on a built-in simulated scene (what `make demo` runs)."""

from __future__ import annotations

import argparse

from grounded_planner.cli.main import CliError, add_command


def register(subparsers) -> None:
    parser = add_command(
        subparsers,
        "demo",
        description="Render a sample scene in the MuJoCo workcell, write it as an RGB-D rosbag, and run every node "
        "in this process: a recorded plan (or your VLM when GP_VLM_BASE_URL / GP_VLM_MODEL / an API key "
        "is set), back-projection, execution on the simulator, rollout logging.",
    )
    parser.add_argument("--out", default="out/demo", help="output folder (bag, calibration, overlay, rollouts)")
    parser.add_argument("--seed", type=int, default=0, help="scene randomisation seed")
    parser.set_defaults(func=_demo)


def _demo(args: argparse.Namespace) -> int:
    # lazy: a ROS command; the CLI runs without rclpy
    from grounded_planner.ros.demo import DemoError, how_to_plug_in_a_vlm, run_demo

    print("grounded_planner demo: a sample scene through the whole ROS 2 graph (no robot, camera or GPU needed)")
    try:
        report = run_demo(args.out, args.seed)
    except DemoError as exc:
        raise CliError(f"demo stopped: {exc}", 1) from exc
    print()
    print("summary")
    planner = report.planner
    used = (
        "a RECORDED plan (replay backend), not a live VLM"
        if planner.backend == "replay"
        else f"the {planner.backend} backend, model {planner.model or '(server default)'}"
    )
    print(f"  planner     : {used}")
    print(
        f"  execution   : {'success' if report.result and report.result.get('success') else 'failed'}; "
        f"task done in the simulator: {report.task_success}"
    )
    print(f"  overlay     : {report.overlay}")
    print(f"  rollout     : {report.rollout}  (inspect: grounded-planner rollouts summary {report.rollout.parent})")
    print(f"  camera bag  : {report.bag}  (replay it: {report.replay_command()})")
    if planner.backend == "replay":
        print()
        print(how_to_plug_in_a_vlm())
    return 0
