"""V2GP stage 1 over a dataset: which signal of each gripper is segmented and with which settings (decided once
per dataset from its signals), then every gripper of an episode through the rule, and why an episode has no
segment. ``v2gp segment --dataset`` and ``v2gp run`` both go through here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from grounded_planner.v2gp.episode import DemoEpisode, GripperTrace
from grounded_planner.v2gp.grippers import GripperChannel, looks_like_a_gripper
from grounded_planner.v2gp.profiles import BY_NAME
from grounded_planner.v2gp.segment import _MIN_RANGE_FRACTION, Segment, SegmentConfig, SegmentResult, segment

#: episodes read to decide a dataset's gripper signals (range, polarity, constant followers)
SCAN_EPISODES = 64


@dataclass
class GripperPlan:
    """How one gripper of a dataset is segmented: its signal ("gripper", its "command", or "unused") and config."""

    hand: str
    label: str
    use: str
    config: SegmentConfig
    why_unused: str = ""

    def key(self) -> dict[str, Any]:
        return {"hand": self.hand, "label": self.label, "use": self.use, "config": dataclasses.asdict(self.config)}


@dataclass
class EpisodeSegments:
    """One episode's stage-1 result over all its grippers."""

    segments: list[Segment] = field(default_factory=list)  # sorted by start; each with its hand
    dropped: list[tuple[int, str]] = field(default_factory=list)
    reason: str = ""  # why there is no segment ("" when there is one)


def _user_gave_settings(config) -> bool:
    return any(
        v is not None
        for v in (config.close_threshold, config.open_threshold, config.gripper_open_value, config.gripper_closed_value)
    )


def plan_grippers(ds, config, robot: str | None = None) -> tuple[list[GripperPlan], list[str]]:
    """Per gripper of ``ds``: the signal and the settings to segment it with, and the warnings to show.

    ``config`` is the :class:`~grounded_planner.v2gp.config.V2GPConfig`; ``robot`` a profile name given on the
    command line. Reads up to :data:`SCAN_EPISODES` episodes' gripper columns (no video).
    """
    channels: list[GripperChannel] | None = getattr(ds, "channels", None)
    warnings = list(getattr(ds, "warnings", []))
    if not channels:  # a folder of rollouts: one gripper joint, the config's robot profile
        return [GripperPlan("", "gripper", "gripper", config.segment_config())], warnings
    traces: list[list[GripperTrace]] = []
    for index in ds.episode_indices[:SCAN_EPISODES]:
        try:
            traces.append(ds.gripper_traces(index))
        except (ValueError, OSError) as exc:  # DatasetError: that episode is reported when it is segmented
            warnings.append(f"episode {index} not read to learn the gripper's range: {exc}")
    plans = []
    assumed: list[str] = []  # no profile: what was assumed, said in one warning
    for k, ch in enumerate(channels):
        values = [t[k].values for t in traces]
        commands = [t[k].commanded for t in traces if t[k].commanded is not None]
        name = ch.label + (f" ({ch.hand})" if ch.hand else "")
        use, why = "gripper", looks_like_a_gripper(values)
        if why:
            cmd_why = looks_like_a_gripper(commands) if commands else "is absent"
            if not cmd_why:
                use = "command"
                warnings.append(
                    f"gripper {name} {why}; its commanded gripper {ch.command_label} moves like one: "
                    "segmented from the command instead"
                )
            elif "constant" in why or "no finite" in why:
                use = "unused"
                warnings.append(
                    f"gripper {name} {why} and its command "
                    f"{'(' + ch.command_label + ') ' if ch.command_label else ''}{cmd_why}: "
                    "an unused gripper, no segments from it"
                )
            else:
                warnings.append(
                    f"gripper {name} {why}; segmented anyway (name another column with gripper: "
                    "COLUMN[ELEMENT] if this is not the gripper)"
                )
        signal = values if use != "command" else commands
        seg_config, note = _settings(ch, signal, config, robot)
        if not ch.profile and not _user_gave_settings(config):
            assumed.append(
                f"the gripper {name}{' (its command)' if use == 'command' else ''} (found by name)"
                + (f", {note}" if note and use != "unused" else "")
            )
        elif note and use != "unused":
            warnings.append(f"gripper {name}: {note}")
        plans.append(
            GripperPlan(
                ch.hand,
                ch.label if use != "command" else ch.command_label,
                use,
                seg_config,
                why if use == "unused" else "",
            )
        )
    if assumed:
        warnings.insert(
            0,
            f"robot_type {getattr(ds, 'robot_type', None)!r} has no robot profile: assumed "
            + "; ".join(assumed)
            + ". Give --robot PROFILE, or gripper / gripper_open_value / "
            "gripper_closed_value in the config, if that is wrong",
        )
    return plans, warnings


def _settings(ch: GripperChannel, signals: list[np.ndarray], config, robot: str | None) -> tuple[SegmentConfig, str]:
    """The SegmentConfig of one gripper and, when something was assumed or learned, a note saying what."""
    named = robot or config.robot
    if _user_gave_settings(config) or (named != "default" and named not in BY_NAME):
        return config.segment_config(), ""
    finite = [s[np.isfinite(s)] for s in signals if s is not None and np.isfinite(s).any()]
    lo = min((float(s.min()) for s in finite), default=0.0)
    hi = max((float(s.max()) for s in finite), default=1.0)
    open_value, closed_value, note = ch.open_value, ch.closed_value, ""
    extra: dict[str, Any] = {}
    profile = BY_NAME.get(ch.profile)
    if profile is not None:
        extra.update(profile.segment)
    if open_value is not None and closed_value is not None:
        a, b = sorted((open_value, closed_value))
        stroke = b - a
        if finite and (lo < a - 0.1 * stroke or hi > b + 0.1 * stroke):
            note = (
                f"values {lo:.4g}..{hi:.4g} lie outside the {ch.profile or 'assumed'} range "
                f"{open_value:g} (open) .. {closed_value:g} (closed): the polarity is kept, the range is "
                "learned from the data"
            )
            open_value, closed_value = (hi if open_value > closed_value else lo), None
    elif open_value is None and closed_value is None:
        words = " ".join(ch.names + [ch.column]).lower()
        if "clos" in words:
            open_value, what = lo, f"larger = more closed (the name says so), range learned ({lo:.4g}..{hi:.4g})"
        elif -1.0 <= lo and hi <= 101.0 and hi > 1.5 and hi - lo >= _MIN_RANGE_FRACTION * 100.0:
            # LeRobot's percent range only where the signal spans as much of it as a gripper that moved at all
            # does: a gripper in radians (a Reachy's 1.3..2.3) lies inside 0..100 too, but would read as still
            open_value, closed_value, what = 100.0, 0.0, "LeRobot's 0..100 range (RANGE_0_100: 0 closed, 100 open)"
        else:
            unit = -0.05 <= lo and hi <= 1.05
            larger_open = (1.0, 0.0) if unit else (hi, None)
            smaller_open = (0.0, 1.0) if unit else (lo, None)
            # the polarity under which more episodes hold a closing between two openings: with the wrong one a
            # gripper resting open has none (its grasps read as openings); a tie keeps "larger = more open"
            votes = [_episodes_with_a_grasp(finite, *pol) for pol in (larger_open, smaller_open)]
            (open_value, closed_value) = smaller_open if votes[1] > votes[0] else larger_open
            side = "larger = more open" if (open_value, closed_value) == larger_open else "smaller = more open"
            what = (
                f"0..1 with {'1' if side.startswith('larger') else '0'} = open"
                if unit
                else f"{side}, range learned ({lo:.4g}..{hi:.4g})"
            )
            what += (
                f" (the polarity under which {max(votes)} of {len(finite)} episodes read have a closing "
                f"between two openings, against {min(votes)})"
            )
        note = f"values {lo:.4g}..{hi:.4g}: assumed {what}"
    if config.min_frames is not None:
        extra["min_frames"] = config.min_frames
    extra.setdefault("levels", "auto")
    if extra["levels"] == "fixed" and (open_value is None or closed_value is None):
        extra["levels"] = "auto"
    return SegmentConfig(
        open_value=open_value, closed_value=closed_value, prominence=extra.pop("prominence", 0.15), **extra
    ), note


def _episodes_with_a_grasp(signals: list[np.ndarray], open_value: float | None, closed_value: float | None) -> int:
    config = SegmentConfig(open_value=open_value, closed_value=closed_value, levels="auto", prominence=0.15)
    return sum(1 for s in signals if segment(s, None, config).segments)


def segment_episode(episode: DemoEpisode, plans: list[GripperPlan]) -> EpisodeSegments:
    """Every gripper of one episode through the rule; the reason in words when none gives a segment."""
    traces = episode.grippers or [GripperTrace("", "gripper", episode.gripper, episode.commanded)]
    out = EpisodeSegments()
    reasons = []
    for plan, trace in zip(plans, traces):
        name = f"gripper {plan.label}" + (f" ({plan.hand})" if plan.hand else "")
        if plan.use == "unused":
            reasons.append(f"{name} {plan.why_unused} (unused)")
            continue
        if plan.use == "command":
            values, commanded = trace.commanded, None
            if values is None:
                reasons.append(f"{name}: this episode has no commanded gripper")
                continue
        else:
            values, commanded = trace.values, trace.commanded
        result: SegmentResult = segment(values, episode.frame_indices, plan.config, commanded=commanded)
        for s in result.segments:
            s.hand = plan.hand
        out.segments += result.segments
        out.dropped += result.dropped
        if not result.segments:
            reasons.append(f"{name} {result.explain() or 'gives no segment'}")
    out.segments.sort(key=lambda s: (s.start, s.hand))
    if not out.segments:
        out.reason = "; ".join(reasons) or "no gripper signal"
    return out
