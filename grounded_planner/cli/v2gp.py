"""`grounded-planner v2gp ...` (demonstrations to grounded-plan training data) and `grounded-planner finetune`."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from grounded_planner.cli.main import CliError, add_command
from grounded_planner.errors import InputError
from grounded_planner.v2gp.config import V2GPConfig, parse_episode_list
from grounded_planner.v2gp.dataset import open_dataset
from grounded_planner.v2gp.errors import V2GPError
from grounded_planner.v2gp.finetune import FinetuneConfig, finetune
from grounded_planner.v2gp.pipeline import run_pipeline
from grounded_planner.v2gp.grippers import load_gripper_csv
from grounded_planner.v2gp.profiles import ROBOT_PROFILES, config_for_robot
from grounded_planner.v2gp.segment import SignalError, segment
from grounded_planner.v2gp.stage1 import plan_grippers, segment_episode
from grounded_planner.v2gp.synthetic import SyntheticConfig, write_synthetic_dataset
from grounded_planner.vlm.errors import VLMError


def register(subparsers) -> None:
    v2gp = add_command(subparsers, "v2gp")
    sub = v2gp.add_subparsers(dest="v2gp_command", metavar="V2GP_COMMAND")
    v2gp.set_defaults(func=lambda args: (v2gp.print_help(), 2)[1])

    seg = sub.add_parser(
        "segment",
        help="stage 1 only: grasp segments of a frame,gripper CSV or of every episode of a dataset",
        description='With --gripper: print {"segments": [[start, end], ...]}. With --dataset: print '
        '{"episodes": {"<episode index>": [[start, end], ...], ...}} (no model, no video; '
        'a dataset without cameras is fine), with "reasons": {"<episode>": "why no '
        'segment"} for every episode without one and, on a robot with several grippers, '
        '"hands": {"<episode>": ["left", ...]} (the gripper of each segment). '
        "start = frame where the gripper starts closing, end = frame where it is fully open again.",
    )
    source = seg.add_mutually_exclusive_group(required=True)
    source.add_argument("--gripper", metavar="SIGNAL.csv", help="CSV with columns frame,gripper")
    source.add_argument("--dataset", metavar="PATH", help="LeRobot v2.x/v3.0 dataset folder or a folder of rollouts")
    seg.add_argument(
        "--config", default=None, help="V2GP YAML config (gripper column, robot, gripper values); --dataset"
    )
    seg.add_argument(
        "--robot",
        default=None,
        help=f"robot profile ({', '.join(sorted(ROBOT_PROFILES))}); a dataset's LeRobot robot_type "
        "picks one when neither this nor the config names it (docs/v2gp.md, robot profiles)",
    )
    seg.add_argument("--close-threshold", type=float, default=None, help="level at/above which the gripper is closed")
    seg.add_argument("--open-threshold", type=float, default=None, help="level at/below which it is released")
    seg.add_argument(
        "--min-frames", type=int, default=None, help="shortest grasp (and longest bridged dropout), frames"
    )
    seg.set_defaults(func=_segment)

    run = sub.add_parser("run", help="all stages over a dataset: segments, objects, grounding, plans, training JSONL")
    run.add_argument("--dataset", required=True, help="LeRobot v2.x/v3 dataset folder or a folder of rollouts")
    run.add_argument("--out", required=True, metavar="DIR", help="output folder (caches live here; reruns resume)")
    run.add_argument("--config", default=None, help="V2GP YAML config (see config/v2gp.yaml)")
    run.add_argument(
        "--vlm",
        "--base-url",
        dest="vlm",
        action="append",
        default=None,
        metavar="BASE_URL",
        help="VLM for object naming (stage 2), the vlm grounder and rewrites: an OpenAI-compatible base "
        "URL; repeat it for several servers of the same model (least-loaded first, failover)",
    )
    run.add_argument("--model", default=None, help="model name sent to the VLM server")
    run.add_argument(
        "--identifier",
        default=None,
        choices=["vlm", "oracle"],
        help="stage 2: who names the manipulated object (oracle: simulated data with known objects)",
    )
    run.add_argument("--grounder", default=None, choices=["oracle", "vlm", "sam3"], help="stage 3 grounder")
    run.add_argument("--workers", type=int, default=None, help="episodes processed in parallel (threads)")
    run.add_argument(
        "--executor",
        default=None,
        choices=["local", "ray"],
        help="local: threads in this process; ray: --workers Ray actors, each with its own dataset "
        "reader and VLM client",
    )
    run.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDR",
        help="ray executor: the cluster to join (host:6379 or ray://host:10001); default: start a local "
        "one for this run and shut it down after",
    )
    run.add_argument("--episodes", default=None, help="only these episode indices, e.g. 0,3,5-9")
    run.add_argument("--no-implicit", action="store_true", help="skip the implicit-instruction rewrite")
    run.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    run.set_defaults(func=_run)

    synth = sub.add_parser("synth", help="write a synthetic demonstration dataset (LeRobot layout, known object boxes)")
    synth.add_argument("--out", required=True, metavar="DIR")
    synth.add_argument("--episodes", type=int, default=4)
    synth.add_argument("--format", default="v2.1", choices=["v2.1", "v3.0"])
    synth.add_argument("--video", action="store_true", help="store frames as MP4 videos instead of images in parquet")
    synth.add_argument("--seed", type=int, default=0)
    synth.set_defaults(func=_synth)

    ft = add_command(
        subparsers,
        "finetune",
        description="transformers Trainer + accelerate. Several processes: accelerate launch "
        "[--config_file fsdp.yaml] $(which grounded-planner) finetune ... "
        "(see docs/scale.md).",
    )
    ft.add_argument("--data", required=True, metavar="TRAIN.jsonl", help="training JSONL written by 'v2gp run'")
    ft.add_argument("--base-model", required=True, metavar="PATH", help="local Hugging Face model folder")
    ft.add_argument("--out", required=True, metavar="ADAPTER_DIR", help="where the LoRA adapter is saved")
    ft.add_argument("--epochs", type=float, default=None, help="passes over the data (default 3)")
    ft.add_argument("--max-steps", type=int, default=None, help="optimizer steps (overrides --epochs)")
    ft.add_argument("--lr", type=float, default=None, help="learning rate")
    ft.add_argument("--rank", type=int, default=None, help="LoRA rank")
    ft.add_argument("--dropout", type=float, default=None, help="LoRA dropout")
    ft.add_argument(
        "--target-modules",
        default=None,
        metavar="REGEX",
        help="modules that get LoRA adapters (default: the language model's attention and MLP projections)",
    )
    ft.add_argument(
        "--batch-size", type=int, default=None, help="samples per optimizer step over all processes (the global batch)"
    )
    ft.add_argument(
        "--micro-batch-size",
        type=int,
        default=None,
        help="samples per forward pass and process (the rest is gradient accumulation)",
    )
    ft.add_argument("--eval-fraction", type=float, default=None, help="share of samples held out for the eval loss")
    ft.add_argument("--eval-every", type=int, default=None, help="eval loss every N steps (default: at the end)")
    ft.add_argument(
        "--save-every",
        type=int,
        default=None,
        help="checkpoint every N steps under ADAPTER_DIR/checkpoints (default: at the end)",
    )
    ft.add_argument(
        "--resume",
        action="store_true",
        default=None,
        help="continue from the newest checkpoint in ADAPTER_DIR/checkpoints",
    )
    ft.add_argument(
        "--dataloader-workers",
        type=int,
        default=None,
        help="processes rendering samples beside each trainer process (GPU runs: keep the GPU fed)",
    )
    ft.add_argument(
        "--report-to",
        default=None,
        choices=["auto", "tensorboard", "wandb", "none"],
        help="training logs: auto = TensorBoard (ADAPTER_DIR/runs), plus W&B when installed and configured",
    )
    ft.add_argument("--max-image-side", type=int, default=None, help="resize images so the longer side is at most this")
    ft.add_argument(
        "--gradient-checkpointing",
        action="store_true",
        default=None,
        help="recompute activations in the backward pass (less GPU memory for large models)",
    )
    ft.add_argument(
        "--device",
        default=None,
        help="cpu, cuda, cuda:0 (default: cuda if available); under accelerate launch / torchrun each "
        "process gets its own device (cpu: gloo)",
    )
    ft.add_argument("--seed", type=int, default=None, help="data order and LoRA initialisation")
    ft.set_defaults(func=_finetune)


def _segment(args: argparse.Namespace) -> int:
    if args.dataset:
        return _segment_dataset(args)
    if args.config:
        raise CliError("--config goes with --dataset (a CSV is segmented with --robot and the threshold flags)", 2)
    try:
        config = config_for_robot(
            args.robot or "default",
            close_threshold=args.close_threshold,
            open_threshold=args.open_threshold,
            min_frames=args.min_frames,
        )
    except ValueError as exc:
        raise CliError(str(exc), 2) from exc
    try:
        frames, values = load_gripper_csv(args.gripper)
        result = segment(values, frames, config)
    except SignalError as exc:
        raise CliError(str(exc), 2) from exc
    if not result.segments and result.dropped:
        print(f"warning: no segment: the gripper {result.explain()}", file=sys.stderr)
    else:
        for frame, reason in result.dropped:
            if reason == "not_reopened":
                print(
                    f"warning: the gripper closes at frame {frame} and is not open again by the last frame; "
                    "no segment reported",
                    file=sys.stderr,
                )
    print(json.dumps(result.to_dict()))
    return 0


def _segment_dataset(args: argparse.Namespace) -> int:
    """Stage 1 over every episode of a dataset: gripper signals only, no video, no model."""
    try:
        config = V2GPConfig.load(args.config) if args.config else V2GPConfig()
        changes = {
            name: getattr(args, name)
            for name in ("close_threshold", "open_threshold", "min_frames")
            if getattr(args, name) is not None
        }
        if args.robot:
            changes["robot"] = args.robot
        config = dataclasses.replace(config, **changes)
        robot = config.robot if config.robot != "default" else None
        ds = open_dataset(args.dataset, gripper=config.gripper, camera=config.camera or None, robot=robot)
        plans, warnings = plan_grippers(ds, config)
    except (ValueError, V2GPError) as exc:
        raise CliError(str(exc), 2) from exc
    for line in warnings:
        print(f"warning: {line}", file=sys.stderr)
    episodes: dict[str, list[list[int]]] = {}
    hands: dict[str, list[str]] = {}
    reasons: dict[str, str] = {}
    failed = 0
    for index in ds.episode_indices:
        try:
            result = segment_episode(ds.episode(index), plans)
        except (V2GPError, SignalError, ValueError, OSError) as exc:
            failed += 1
            reasons[str(index)] = f"not read: {exc}"
            print(f"warning: episode {index} skipped: {exc}", file=sys.stderr)
            continue
        episodes[str(index)] = [s.to_list() for s in result.segments]
        hands[str(index)] = [s.hand for s in result.segments]
        if result.reason:
            reasons[str(index)] = result.reason
    out: dict = {"episodes": episodes}
    if len(plans) > 1:
        out["hands"] = hands
    if reasons:
        out["reasons"] = reasons
    print(json.dumps(out))
    return 1 if failed and not episodes else 0


def _run(args: argparse.Namespace) -> int:
    try:
        config = V2GPConfig.load(args.config) if args.config else V2GPConfig()
        config = config.with_overrides(
            vlm=args.vlm,
            model=args.model,
            grounder=args.grounder,
            workers=args.workers,
            executor=args.executor,
            implicit=False if args.no_implicit else None,
            identifier=args.identifier,
            ray_address=args.ray_address,
        )
        if config.ray_address and config.executor != "ray":
            raise InputError("--ray-address needs --executor ray")
        episodes = parse_episode_list(args.episodes) if args.episodes else None
    except ValueError as exc:
        raise CliError(str(exc), 2) from exc

    try:
        summary = run_pipeline(
            args.dataset, args.out, config, episodes=episodes, progress=None if args.quiet else sys.stderr
        )
    except (V2GPError, VLMError) as exc:  # VLMConfigError: a VLM named without a model, ...
        raise CliError(str(exc), 1) from exc
    print(json.dumps(summary.to_dict(), indent=2))
    if summary.skipped_episodes:
        print(
            f"v2gp run: {len(summary.skipped_episodes)} episode(s) skipped (see skipped_episodes): "
            + "; ".join(f"{k}: {v}" for k, v in sorted(summary.skipped_episodes.items())),
            file=sys.stderr,
        )
    if summary.failed_episodes:
        print(
            f"v2gp run: {len(summary.failed_episodes)} episode(s) failed (see failed_episodes); "
            "a rerun retries them and resumes the rest from the caches",
            file=sys.stderr,
        )
        return 1
    return 0


def _synth(args: argparse.Namespace) -> int:
    try:
        cfg = SyntheticConfig(episodes=args.episodes, seed=args.seed, video=args.video)
        path = write_synthetic_dataset(args.out, cfg, version=args.format)
    except (ValueError, OSError) as exc:
        raise CliError(str(exc), 2) from exc
    print(path)
    return 0


def _finetune(args: argparse.Namespace) -> int:
    overrides = {
        "epochs": args.epochs,
        "max_steps": args.max_steps,
        "learning_rate": args.lr,
        "lora_rank": args.rank,
        "lora_dropout": args.dropout,
        "target_modules": args.target_modules,
        "batch_size": args.batch_size,
        "max_image_side": args.max_image_side,
        "device": args.device,
        "gradient_checkpointing": args.gradient_checkpointing,
        "micro_batch_size": args.micro_batch_size,
        "eval_fraction": args.eval_fraction,
        "eval_every": args.eval_every,
        "save_every": args.save_every,
        "resume": args.resume,
        "report_to": args.report_to,
        "dataloader_workers": args.dataloader_workers,
        "seed": args.seed,
    }
    try:
        config = FinetuneConfig(**{k: v for k, v in overrides.items() if v is not None})
        report = finetune(args.data, args.base_model, args.out, config, progress=sys.stderr)
    except (ValueError, V2GPError) as exc:
        raise CliError(str(exc), 2) from exc
    if report:  # under a distributed launch only the main process reports
        print(json.dumps(report, indent=2))
    return 0
