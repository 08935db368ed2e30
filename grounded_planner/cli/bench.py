"""`grounded-planner bench score|run|report`: GroundedPlanBench-style scoring, batch planning and HTML reports."""

from __future__ import annotations

import argparse
import json
import sys

from grounded_planner.cli.main import CliError


def register(subparsers: argparse._SubParsersAction) -> None:
    bench = subparsers.add_parser("bench", help="score, run and report GroundedPlanBench-style episodes",
                                  description="GroundedPlanBench-style evaluation: TSR/ARR scoring (Table I layout), "
                                              "batch planning over an episode set, self-contained HTML reports.")
    sub = bench.add_subparsers(dest="bench_command", metavar="SUBCOMMAND")
    bench.set_defaults(func=lambda args: _usage(bench))

    score = sub.add_parser("score", help="score predictions against ground-truth episodes")
    score.add_argument("--episodes", required=True, help="ground-truth episodes JSONL")
    score.add_argument("--predictions", required=True, nargs="+", metavar="PREDICTIONS",
                       help="predictions JSONL ({id, plan, error} a line); several files give one table row each "
                            "and a paired test (exact McNemar on TSR) of the first against each other")
    score.add_argument("--json", action="store_true",
                       help="print exactly one JSON object instead of the table (one predictions file)")
    score.add_argument("--per-episode", metavar="PATH",
                       help="also write one JSON line per episode (success, ARR, precision, failure reasons) for the "
                            "first predictions file")
    score.set_defaults(func=_score)

    run = sub.add_parser("run", help="run the planner on every episode and append predictions (resumable)",
                         description="Plan every episode with the VLM planner and append {id, plan, error} lines to "
                                     "--out. Ids already there are skipped, so an interrupted run resumes; with a "
                                     "--cache-dir a repeated run sends no requests. Planner defaults come from the "
                                     "GP_VLM_* environment variables, then --config, then the flags.")
    run.add_argument("--episodes", required=True, help="ground-truth episodes JSONL")
    run.add_argument("--out", required=True, help="predictions JSONL to append to; ids already there are skipped")
    add_planner_arguments(run)
    run.add_argument("--concurrency", type=int, default=4, help="episodes in flight at once (default 4)")
    run.add_argument("--retry-errors", action="store_true", help="also re-run episodes whose last record is an error")
    run.add_argument("--limit", type=int, default=None, help="plan at most this many new episodes")
    run.set_defaults(func=_run)

    report = sub.add_parser("report", help="write a self-contained HTML report (table, overlays, failure reasons)")
    report.add_argument("--episodes", required=True, help="ground-truth episodes JSONL")
    report.add_argument("--predictions", required=True, help="predictions JSONL")
    report.add_argument("--out", required=True, help="HTML file to write")
    report.add_argument("--title", default=None, help="report title (default: the predictions file name)")
    report.add_argument("--failures-only", action="store_true", help="leave successful episodes' cards out")
    report.add_argument("--image-max-side", type=int, default=640,
                        help="shrink larger images to this many pixels (JPEG) in the report; 0 = embed as is")
    report.set_defaults(func=_report)


def add_planner_arguments(parser: argparse.ArgumentParser) -> None:
    """The planner flags of `bench run` (read back by :func:`_planner_config`); other commands may share them."""
    parser.add_argument("--config", help="YAML mapping of PlannerConfig fields (backend, model, base_url, ...)")
    parser.add_argument("--backend", choices=["openai", "gemini", "transformers", "replay", "decoupled"], default=None)
    parser.add_argument("--model", help="model name on the server / Gemini id / local path for transformers")
    parser.add_argument("--base-url", help="OpenAI-compatible server root incl. /v1, e.g. http://localhost:8000/v1")
    parser.add_argument("--api-key-env", help="name of the environment variable holding the API key")
    parser.add_argument("--prompt-family", choices=["auto", "qwen3", "gemini", "pixel"], default=None,
                        help="coordinate convention asked for (auto: from the model name)")
    parser.add_argument("--replay-file", help="JSONL of recorded plans (replay backend)")
    parser.add_argument("--mode", choices=("grounded", "decoupled"), default=None,
                        help="grounded: the VLM answers boxes and points; decoupled: it plans in words and a grounder "
                             "(--grounder) localizes each step; --backend then names the language planner's backend")
    parser.add_argument("--grounder", choices=["vlm", "embodied-r1", "sam3"], default=None, help="decoupled mode's grounder")
    parser.add_argument("--timeout", type=float, dest="timeout_s", default=None, help="seconds per request (default 60)")
    parser.add_argument("--cache-dir", help="response cache folder (a re-run with the same requests is free)")


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _load(episodes_path: str, predictions_path: str):
    from grounded_planner.bench.episodes import EpisodeError, load_episodes, load_predictions

    try:
        return load_episodes(episodes_path), load_predictions(predictions_path)
    except EpisodeError as exc:
        raise CliError(str(exc)) from None


def _score(args: argparse.Namespace) -> int:
    from pathlib import Path

    from grounded_planner.bench.episodes import EpisodeError, load_episodes, load_predictions
    from grounded_planner.bench.scoring import score, score_episodes
    from grounded_planner.bench.table import format_tables
    from grounded_planner.rollout.stats import mcnemar_exact

    if args.json and len(args.predictions) != 1:
        raise CliError(f"--json scores one predictions file, got {len(args.predictions)}")
    labels = [Path(p).stem for p in args.predictions]
    if len(set(labels)) != len(labels):
        labels = [str(p) for p in args.predictions]
    try:
        episodes = load_episodes(args.episodes)
        prediction_sets = [load_predictions(p) for p in args.predictions]
    except EpisodeError as exc:
        raise CliError(str(exc)) from None
    results = []
    for label, predictions in zip(labels, prediction_sets):
        result = score(episodes, predictions)
        overall = result["overall"]
        if overall["missing_predictions"]:
            print(f"warning: {label}: {overall['missing_predictions']} episode(s) have no prediction; scored as "
                  "null plans", file=sys.stderr)
        if overall["unknown_predictions"]:
            print(f"warning: {label}: {overall['unknown_predictions']} prediction id(s) name no episode in "
                  f"{args.episodes}; ignored", file=sys.stderr)
        results.append((label, result))
    if args.per_episode:
        _write_per_episode(args.per_episode, episodes, prediction_sets[0])
    if args.json:
        print(json.dumps(results[0][1]))
        return 0
    print(format_tables(results))
    if len(prediction_sets) > 1:
        base = [s.success for s in score_episodes(episodes, prediction_sets[0])]
        print("")
        for label, predictions in zip(labels[1:], prediction_sets[1:]):
            other = [s.success for s in score_episodes(episodes, predictions)]
            a_only = sum(1 for a, b in zip(base, other) if a and not b)
            b_only = sum(1 for a, b in zip(base, other) if b and not a)
            print(f"{labels[0]} vs {label}: task success on the same {len(episodes)} episodes differs in "
                  f"{a_only + b_only} ({labels[0]} only {a_only}, {label} only {b_only}); "
                  f"exact McNemar p = {mcnemar_exact(a_only, b_only):.3g}")
    return 0


def _write_per_episode(path: str, episodes, predictions) -> None:
    from grounded_planner.bench.report import diagnose

    lines = []
    for episode in episodes:
        d = diagnose(episode, predictions.get(episode.id))
        lines.append(json.dumps({"id": episode.id, "group": episode.group, "success": d.score.success,
                                 "arr": 100.0 * d.score.arr, "precision": 100.0 * d.score.precision,
                                 "gt_actions": d.score.gt_actions, "pred_actions": d.score.pred_actions,
                                 "matched_actions": d.score.matched_actions, "failures": d.categories,
                                 "reasons": [text for _, text in d.reasons]}, ensure_ascii=False))
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    except OSError as exc:
        raise CliError(f"cannot write {path}: {exc.strerror}") from None


def _planner_config(args: argparse.Namespace):
    from grounded_planner.vlm.config import PlannerConfig

    values: dict = {}
    if getattr(args, "config", None):
        import yaml

        try:
            with open(args.config, encoding="utf-8") as f:
                loaded = yaml.safe_load(f) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise CliError(f"cannot read planner config {args.config}: {exc}") from None
        if not isinstance(loaded, dict):
            raise CliError(f"planner config {args.config} must be a YAML mapping of PlannerConfig fields")
        values.update(loaded)
    for name in ("backend", "model", "base_url", "api_key_env", "prompt_family", "replay_file", "grounder",
                 "timeout_s", "cache_dir"):
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


def _run(args: argparse.Namespace) -> int:
    from grounded_planner.bench.episodes import EpisodeError, load_episodes
    from grounded_planner.bench.runner import run_bench
    from grounded_planner.vlm.errors import VLMError
    from grounded_planner.vlm.planner import make_planner

    if args.concurrency < 1:
        raise CliError(f"--concurrency must be >= 1, got {args.concurrency}")
    if args.limit is not None and args.limit < 0:
        raise CliError(f"--limit must be >= 0, got {args.limit}")
    try:
        episodes = load_episodes(args.episodes)
    except EpisodeError as exc:
        raise CliError(str(exc)) from None
    config = _planner_config(args)
    try:
        planner = make_planner(config)
    except (VLMError, ValueError, ImportError) as exc:
        raise CliError(f"cannot build the planner: {exc}") from None
    first_error: list[str] = []

    def remember(record: dict) -> None:
        if record["error"] and not first_error:
            first_error.append(record["error"])

    try:
        with planner:
            summary = run_bench(episodes, planner, args.out, concurrency=args.concurrency,
                                retry_errors=args.retry_errors, limit=args.limit, on_record=remember)
    except EpisodeError as exc:
        raise CliError(str(exc)) from None
    print(json.dumps({"out": str(args.out), **summary.to_dict()}))
    if summary.failed and not summary.done:
        raise CliError(f"all {summary.failed} episode(s) failed; first error: {first_error[0]}", 3)
    return 0


def _report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from grounded_planner.bench.report import write_report

    if args.image_max_side < 0:
        raise CliError(f"--image-max-side must be >= 0 pixels (0 = embed as is), got {args.image_max_side}")
    episodes, predictions = _load(args.episodes, args.predictions)
    try:
        out = write_report(episodes, predictions, args.out, title=args.title or f"GroundedPlanBench: {Path(args.predictions).name}",
                           image_max_side_px=args.image_max_side, failures_only=args.failures_only)
    except OSError as exc:
        raise CliError(f"cannot write report {args.out}: {exc.strerror}") from None
    print(out)
    return 0
