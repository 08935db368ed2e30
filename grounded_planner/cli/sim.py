"""`grounded-planner sim ...`: export bench episodes, render a scenario's camera, run a scenario end to end."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from grounded_planner.cli.main import CliError


def register(subparsers) -> None:
    parser = subparsers.add_parser("sim", help="the simulated MuJoCo workcell: export episodes, render scenarios")
    sub = parser.add_subparsers(dest="sim_command", metavar="SIM_COMMAND")

    exp = sub.add_parser("export", help="render each scenario's first frame with its exact GT plan as bench episodes")
    exp.add_argument("--scenarios", required=True, help="a scenario YAML file or a folder of them (*.yaml)")
    exp.add_argument("--out", required=True, help="episodes folder: episodes.jsonl, images/, depth/, calibration/")
    exp.add_argument("--seeds", type=int, default=1, help="randomised variants per scenario (seeds 0..N-1; default 1)")
    exp.add_argument("--no-depth", action="store_true", help="write only the colour images and episodes.jsonl")
    exp.set_defaults(func=_export)

    ren = sub.add_parser("render", help="write a scenario's colour image, depth (uint16 mm) and true calibration")
    ren.add_argument("scenario", help="scenario YAML file")
    ren.add_argument("--seed", type=int, default=None, help="randomisation seed (default: nominal poses)")
    ren.add_argument("--out", required=True, help="output folder: rgb.png, depth.png, extrinsics.yaml, camera_info.yaml")
    ren.add_argument("--noise", action="store_true", help="add D435-like depth noise regardless of the scenario")
    ren.set_defaults(func=_render)
    run = sub.add_parser("run", help="run a scenario end to end: plan, targets, executor on the sim arm, success check")
    run.add_argument("scenario", help="scenario YAML file")
    run.add_argument("--seed", type=int, default=0, help="randomisation seed (default 0)")
    run.add_argument("--plan", help="canonical plan JSON to execute (default: the scenario's exact GT plan)")
    run.add_argument("--targets", choices=("depth", "gt"), default="depth",
                     help="depth: back-project from the rendered depth and true calibration (default); gt: exact")
    run.add_argument("--executor-config", help="ExecutorConfig YAML (default: the execution layer's defaults)")
    run.add_argument("--robot", choices=("gp5", "fr3"), help="arm model instead of the scenario's (fr3: franky-sim's "
                                                          "Franka FR3 MJCF)")
    run.add_argument("--gif", help="write an animated GIF of the run here")
    run.add_argument("--rollout", help="record the run into this new folder (rollout.json + rollout.mcap), "
                                       "labelled by the scenario's success predicates")
    run.set_defaults(func=_run)
    parser.set_defaults(func=lambda args: parser.print_help() or 2)


def _scenario_files(arg: str) -> list[Path]:
    path = Path(arg)
    if path.is_dir():
        files = sorted(path.glob("*.yaml")) + sorted(path.glob("*.yml"))
        if not files:
            raise CliError(f"--scenarios {arg}: no *.yaml scenario files in that folder")
        return files
    if path.is_file():
        return [path]
    raise CliError(f"--scenarios {arg}: no such file or folder")


def _export(args: argparse.Namespace) -> int:
    from grounded_planner.sim.export import export_episodes
    from grounded_planner.sim.scenario import ScenarioError
    from grounded_planner.sim.workcell import SimError

    if args.seeds < 1:
        raise CliError(f"--seeds must be >= 1, got {args.seeds}")
    try:
        records = export_episodes(_scenario_files(args.scenarios), args.out, seeds=range(args.seeds),
                                  write_depth=not args.no_depth)
    except (ScenarioError, SimError) as exc:
        raise CliError(str(exc)) from exc
    print(json.dumps({"episodes": len(records), "file": str(Path(args.out) / "episodes.jsonl")}))
    return 0


def _render(args: argparse.Namespace) -> int:
    import numpy as np
    from PIL import Image

    from grounded_planner.sim.scenario import ScenarioError
    from grounded_planner.sim.workcell import SimError, SimWorkcell

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        with SimWorkcell.from_scenario(args.scenario, seed=args.seed) as workcell:
            rgb, depth_m = workcell.render(noise=True if args.noise else None)
            Image.fromarray(rgb).save(out / "rgb.png")
            Image.fromarray(np.round(depth_m * 1000).astype(np.uint16)).save(out / "depth.png")
            workcell.write_calibration(out)
    except (ScenarioError, SimError) as exc:
        raise CliError(str(exc)) from exc
    print(json.dumps({"rgb": str(out / "rgb.png"), "depth_mm": str(out / "depth.png"),
                      "extrinsics": str(out / "extrinsics.yaml"), "camera_info": str(out / "camera_info.yaml")}))
    return 0


def _run(args: argparse.Namespace) -> int:
    from grounded_planner.execution.config import ConfigError, ExecutorConfig
    from grounded_planner.geometry.errors import GeometryError
    from grounded_planner.plan.model import PlanError, load_plan
    from grounded_planner.rollout.record import RolloutError
    from grounded_planner.sim.run import run_scenario
    from grounded_planner.sim.scenario import ScenarioError
    from grounded_planner.sim.workcell import SimError

    try:
        plan = load_plan(args.plan) if args.plan else None
        config = ExecutorConfig.load(args.executor_config) if args.executor_config else None
        if plan is not None and args.targets == "gt":
            raise CliError("--targets gt needs the scenario's own GT plan: drop --plan or use --targets depth")
        result = run_scenario(args.scenario, seed=args.seed, plan=plan, targets=args.targets,
                              executor_config=config, gif_path=args.gif, rollout_dir=args.rollout,
                              robot=args.robot)
    except (ScenarioError, SimError, PlanError, GeometryError, ConfigError, RolloutError) as exc:
        raise CliError(str(exc)) from exc
    print(json.dumps(result.to_dict()))
    return 0 if result.success else 1
