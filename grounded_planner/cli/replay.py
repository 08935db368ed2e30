"""`grounded-planner replay BAG...`: the planner offline on recorded frames; bench-format predictions, scored if GT exists."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace

from grounded_planner.bench.episodes import EpisodeError, Prediction, load_episodes
from grounded_planner.bench.scoring import score
from grounded_planner.cli.main import CliError, add_command
from grounded_planner.cli.planner_args import add_planner_arguments, planner_config_from_args
from grounded_planner.rollout.bag import BagError
from grounded_planner.rollout.record import RolloutTopics
from grounded_planner.rollout.replay import episodes_for_replay, replay_episodes
from grounded_planner.vlm.backends.pool import served_line, server_counts
from grounded_planner.vlm.errors import VLMError, VLMUnavailableError
from grounded_planner.vlm.factory import make_planner


def register(subparsers: argparse._SubParsersAction) -> None:
    p = add_command(
        subparsers,
        "replay",
        description="Offline evaluation on old rollouts: each plan (or instruction) in a bag is planned again "
        "on the color frame it was made on. Predictions are JSONL lines {id, plan, error} as "
        "`bench score` reads them; with --episodes they are scored against that ground truth.",
    )
    p.add_argument(
        "bags",
        nargs="*",
        metavar="BAG",
        help="rollout folders, rosbag2 folders or .mcap/.db3 files (a cut-short MCAP is read up to its end)",
    )
    p.add_argument(
        "--episodes",
        metavar="E.jsonl",
        help="bench ground truth: scores the ids it shares with the bags; an episode whose image is "
        "a bag is replayed from it",
    )
    p.add_argument("--out", required=True, metavar="P.jsonl", help="predictions file to write")
    p.add_argument("--score-out", metavar="S.json", help="also write the score JSON here")
    p.add_argument("--instruction", default="", help="instruction for bags that recorded none")
    recorded = RolloutTopics()  # the topics a rollout bag records: the defaults, named once there
    p.add_argument("--color-topic", default=None, help=f"color image topic [{recorded.color}]")
    p.add_argument("--plan-topic", default=None, help=f"GroundedPlan topic [{recorded.plan}]")
    p.add_argument("--instruction-topic", default=None, help=f"instruction topic [{recorded.instruction}]")
    add_planner_arguments(p)  # the settings `bench run` takes (GP_VLM_* variables, then --config, then flags)
    p.set_defaults(func=_replay)


def _replay(args: argparse.Namespace) -> int:
    if not args.bags and not args.episodes:
        raise CliError("name at least one BAG or an --episodes file whose images are bags")
    gt = []
    if args.episodes:
        try:
            gt = load_episodes(args.episodes)
        except (EpisodeError, OSError) as exc:
            raise CliError(str(exc)) from exc
    topics = RolloutTopics()
    changes = {
        k: v
        for k, v in (("color", args.color_topic), ("plan", args.plan_topic), ("instruction", args.instruction_topic))
        if v
    }
    topics = replace(topics, **changes)
    try:
        episodes = episodes_for_replay(args.bags, gt, topics, args.instruction)
    except BagError as exc:
        raise CliError(str(exc)) from exc
    if not episodes:
        raise CliError("the bags hold no planner inputs", 1)
    try:
        planner = make_planner(planner_config_from_args(args))
    except (ValueError, ImportError, VLMError) as exc:
        raise CliError(f"cannot build the planner: {exc}") from exc

    def plan_fn(image, instruction):
        try:
            return planner.plan(image, instruction)
        except VLMUnavailableError as exc:  # a dead server fails every episode: stop, say so once
            raise CliError(f"model unavailable: {exc}", 3) from exc

    try:
        records = replay_episodes(episodes, plan_fn, args.out, error_types=(VLMError,))
    finally:
        servers = server_counts(planner)
        planner.close()
    if servers:
        print(served_line(servers), file=sys.stderr)
    errors = sum(1 for r in records if r["error"])
    print(
        f"replayed {len(records)} episode(s) from {len({str(e.bag) for e in episodes})} bag(s) -> {args.out}"
        f"{f'; {errors} planner error(s)' if errors else ''}",
        file=sys.stderr,
    )

    scored_ids = {r["id"] for r in records} & {ep.id for ep in gt}
    if gt:
        if not scored_ids:
            raise CliError(
                f"no replayed episode id is in {args.episodes} (ids: "
                f"{', '.join(sorted(r['id'] for r in records)[:5])}...)",
                1,
            )
        result = score(
            [ep for ep in gt if ep.id in scored_ids],
            [Prediction(r["id"], r["plan"], r["error"]) for r in records if r["id"] in scored_ids],
        )
        text = json.dumps(result, indent=2)
        if args.score_out:
            with open(args.score_out, "w", encoding="utf-8") as f:
                f.write(text + "\n")
        print(text)
    return 0
