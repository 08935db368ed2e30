"""Planner flags shared by the commands that build a planner (`bench run`, `replay`), and their reading."""

from __future__ import annotations

import argparse

from grounded_planner.cli.main import CliError
from grounded_planner.vlm.config import BACKENDS, PlannerConfig
from grounded_planner.yamlfile import read_yaml


def add_planner_arguments(parser: argparse.ArgumentParser) -> None:
    """The planner flags shared by `bench run` and `replay` (read back by :func:`planner_config_from_args`)."""
    parser.add_argument("--config", help="YAML mapping of PlannerConfig fields (backend, model, base_url, ...)")
    parser.add_argument("--backend", choices=BACKENDS, default=None)
    parser.add_argument("--model", help="model name on the server / Gemini id / local path for transformers")
    parser.add_argument(
        "--base-url",
        action="append",
        metavar="URL",
        help="OpenAI-compatible server root incl. /v1, e.g. http://localhost:8000/v1; repeat it for "
        "several servers of the same model (least-loaded first, a dead one is routed around)",
    )
    parser.add_argument("--api-key-env", help="name of the environment variable holding the API key")
    parser.add_argument(
        "--prompt-family",
        choices=["auto", "qwen3", "gemini", "pixel"],
        default=None,
        help="coordinate convention asked for (auto: from the model name)",
    )
    parser.add_argument("--replay-file", help="JSONL of recorded plans (replay backend)")
    parser.add_argument(
        "--mode",
        choices=("grounded", "decoupled"),
        default=None,
        help="grounded: the VLM answers boxes and points; decoupled: it plans in words and a grounder "
        "(--grounder) localizes each step; --backend then names the language planner's backend",
    )
    parser.add_argument(
        "--grounder", choices=["vlm", "embodied-r1", "sam3"], default=None, help="decoupled mode's grounder"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        dest="timeout_s",
        default=None,
        help="seconds one plan request may take, every try included (default 60)",
    )
    parser.add_argument("--cache-dir", help="response cache folder (a re-run with the same requests is free)")


def planner_config_from_args(args: argparse.Namespace):
    """PlannerConfig from GP_VLM_* variables, then --config YAML, then the flags (later wins)."""
    values: dict = {}
    if getattr(args, "config", None):
        loaded = read_yaml(args.config, "planner config", CliError) or {}
        if not isinstance(loaded, dict):
            raise CliError(f"planner config {args.config} must be a YAML mapping of PlannerConfig fields")
        values.update(loaded)
    if getattr(args, "base_url", None):  # the flags name every server: they replace a config's list
        values["base_url"], values["base_urls"] = list(args.base_url), []
    for name in (
        "backend",
        "model",
        "api_key_env",
        "prompt_family",
        "replay_file",
        "grounder",
        "timeout_s",
        "cache_dir",
    ):
        if getattr(args, name, None) is not None:  # commands sharing this reader may offer fewer flags
            values[name] = getattr(args, name)
    mode = getattr(args, "mode", None)
    if mode == "decoupled":
        if values.get("backend") not in (None, "decoupled"):
            values["language_backend"] = values["backend"]
        values["backend"] = "decoupled"
    elif mode == "grounded" and values.get("backend") == "decoupled":
        raise CliError("--mode grounded contradicts backend 'decoupled'; pick one")
    try:
        return PlannerConfig.from_env(**values)
    except (TypeError, ValueError) as exc:
        raise CliError(f"planner config: {exc}") from None
