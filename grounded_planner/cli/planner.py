"""`grounded-planner plan | parse | draw`: ask a VLM for a grounded plan, read raw model text, draw a plan."""

from __future__ import annotations

import argparse
import sys

import numpy as np
from PIL import Image, UnidentifiedImageError

from grounded_planner.cli.main import CliError, add_command
from grounded_planner.cli.planner_args import add_planner_arguments, planner_config_from_args
from grounded_planner.plan import PlanError, load_plan, save_plan
from grounded_planner.vlm.draw import draw_plan
from grounded_planner.vlm.errors import VLMError, VLMResponseError, VLMUnavailableError
from grounded_planner.vlm.factory import make_planner
from grounded_planner.vlm.parse import ParseError, parse_plan

# Exit codes of `plan` beyond argparse's 2: the model could not be reached / gave no valid plan.
EXIT_UNAVAILABLE = 3
EXIT_NO_PLAN = 4


def register(subparsers) -> None:
    p = add_command(
        subparsers,
        "plan",
        description="Send an image and an instruction to a VLM and print the canonical plan "
        "JSON (pixels of the image). Settings: GP_VLM_* variables, then --config, "
        "then the flags.",
    )
    p.add_argument("--image", required=True, help="RGB image file (PNG/JPEG)")
    p.add_argument("--instruction", required=True, help="what the robot should do")
    add_planner_arguments(p)
    p.add_argument(
        "--convention",
        choices=["auto", "qwen3", "gemini", "pixel"],
        default=None,
        help="how answers' coordinates are read (auto: the model family's, else by keys)",
    )
    p.add_argument("--max-image-side", type=int, default=None, help="longest image side sent, px (default 1280)")
    p.add_argument("--repair-attempts", type=int, default=None, help="re-prompts after an invalid answer (default 1)")
    p.add_argument(
        "--max-tokens", type=int, default=None, help="longest answer (default 1024; thinking models need more)"
    )
    p.add_argument(
        "--json-mode",
        action="store_const",
        const=True,
        default=None,
        help="ask the server for JSON only (OpenAI response_format; vLLM, SGLang, Ollama and Gemini support it)",
    )
    p.add_argument("--record-file", default=None, help="append the returned plan to this JSONL (for replay)")
    p.add_argument("--adapter", default=None, dest="adapter_path", help="PEFT LoRA adapter folder (transformers)")
    p.add_argument("--grounder-model", default=None, help="decoupled mode's grounder model (default: --model)")
    p.add_argument("--grounder-base-url", default=None, help="decoupled mode's grounder server (default: --base-url)")
    p.add_argument("--out", default=None, help="also write the plan JSON to this file")
    p.add_argument("--overlay", default=None, help="also draw the plan over the image into this PNG")
    p.set_defaults(func=cmd_plan)

    p = add_command(
        subparsers,
        "parse",
        description="Read raw VLM text on stdin and print the canonical plan JSON on stdout. "
        "Exit 0 on success, 2 with a one-line reason on stderr when no valid plan "
        "can be read.",
    )
    p.add_argument("--width", type=int, required=True, help="original image width, px")
    p.add_argument("--height", type=int, required=True, help="original image height, px")
    p.add_argument(
        "--convention",
        choices=["auto", "qwen3", "gemini", "pixel"],
        default="auto",
        help="how coordinates are written (auto: by keys; bbox_2d -> qwen3, box_2d -> gemini, else pixels)",
    )
    p.add_argument("--model-width", type=int, default=None, help="width of the image the model saw, if resized")
    p.add_argument("--model-height", type=int, default=None, help="height of the image the model saw, if resized")
    p.add_argument("--instruction", default="", help="copied into the plan")
    p.add_argument("--no-validate", action="store_true", help="skip the plan model's ordering rules")
    p.add_argument("--compact", action="store_true", help="one-line JSON")
    p.set_defaults(func=cmd_parse)

    p = add_command(subparsers, "draw")
    p.add_argument("--image", required=True)
    p.add_argument("--plan", required=True, help="canonical plan JSON")
    p.add_argument("--out", required=True, help="output PNG")
    p.set_defaults(func=cmd_draw)


def _load_rgb(path: str):
    try:
        with Image.open(path) as img:
            return np.asarray(img.convert("RGB"))
    except FileNotFoundError as exc:
        raise CliError(f"image file not found: {path}") from exc
    except (UnidentifiedImageError, OSError) as exc:
        raise CliError(f"cannot read image {path}: {exc}") from exc


def cmd_plan(args: argparse.Namespace) -> int:
    image = _load_rgb(args.image)
    config = planner_config_from_args(args)
    extras = {
        name: getattr(args, name)
        for name in (
            "convention",
            "max_image_side",
            "repair_attempts",
            "max_tokens",
            "json_mode",
            "record_file",
            "adapter_path",
            "grounder_model",
            "grounder_base_url",
        )
        if getattr(args, name) is not None
    }
    try:
        config = config.replace(**extras)
    except ValueError as exc:
        raise CliError(f"planner config: {exc}") from exc
    try:
        with make_planner(config) as planner:
            plan = planner.plan(image, args.instruction)
    except VLMUnavailableError as exc:
        raise CliError(f"model unavailable: {exc}", EXIT_UNAVAILABLE) from exc
    except VLMResponseError as exc:
        raise CliError(str(exc), EXIT_NO_PLAN) from exc
    except (VLMError, ValueError) as exc:
        raise CliError(str(exc)) from exc
    if args.out:
        save_plan(plan, args.out)
    if args.overlay:
        draw_plan(image, plan).save(args.overlay)
    print(plan.to_json())
    for warning in plan.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    return 0


def cmd_parse(args: argparse.Namespace) -> int:
    if args.width <= 0 or args.height <= 0:
        raise CliError(f"--width and --height must be positive pixels, got {args.width}x{args.height}")
    model_size = None
    if args.model_width or args.model_height:
        if not (args.model_width and args.model_height) or args.model_width <= 0 or args.model_height <= 0:
            raise CliError("--model-width and --model-height go together and must be positive")
        model_size = (args.model_width, args.model_height)
    raw = sys.stdin.buffer.read().decode("utf-8", errors="replace")
    try:
        plan = parse_plan(
            raw,
            (args.width, args.height),
            args.convention,
            args.instruction,
            model_image_size=model_size,
            validate=not args.no_validate,
        )
    except ParseError as exc:
        raise CliError(exc.reason, 2) from exc
    print(plan.to_json(indent=None if args.compact else 2))
    for warning in plan.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    return 0


def cmd_draw(args: argparse.Namespace) -> int:
    image = _load_rgb(args.image)
    try:
        plan = load_plan(args.plan)
    except PlanError as exc:
        raise CliError(f"{args.plan}: {exc}") from exc
    height, width = image.shape[:2]
    if tuple(plan.image_size) != (width, height):
        raise CliError(
            f"plan {args.plan} is for a {plan.image_size[0]}x{plan.image_size[1]} image, "
            f"{args.image} is {width}x{height}"
        )
    try:
        draw_plan(image, plan).save(args.out)
    except OSError as exc:
        raise CliError(f"cannot write {args.out}: {exc}") from exc
    return 0
