"""What the console needs of the ROS graph, as a Protocol: ``ros/console_node.py`` implements it with rclpy, and the
web app (``console/app.py``) is written and tested against it without a ROS graph."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from grounded_planner.errors import RunFailure


class GraphError(RunFailure):
    """The graph could not do what the console asked (no executor, a goal rejected, a service not answering)."""

    @classmethod
    def no_executor(cls, name: str) -> GraphError:
        """The refusal of a call that would go to an executor when none offers ``name`` (a ``ros/names.py`` service
        or action): ConsoleNode's, and that of every console graph double with no executor behind it."""
        return cls(f"no executor offers {name}")


@dataclass
class StepPreview:
    """One step of a previewed plan, as the operator sees it before anything moves."""

    index: int
    type: str
    object: str = ""
    target: str = ""
    bbox: list[float] | None = None  # x1, y1, x2, y2, pixels of the plan's image
    point: list[float] | None = None  # x, y, pixels
    position_m: list[float] | None = None  # 3D target, metres, in ``frame``
    frame: str = ""
    width_m: float | None = None  # grasp width, metres
    verdict: str = ""  # the safety envelope's verdict: "ok", or an outcome such as "outside_workspace"
    verdict_message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class PlanAnswer:
    """The planner's answer to one instruction, with the envelope's verdict per step."""

    success: bool
    message: str = ""
    plan: dict[str, Any] | None = None  # the plan model's dict (pixels, and target_3d once back-projected)
    steps: list[StepPreview] = field(default_factory=list)
    duration_s: float = 0.0


@dataclass
class Frame:
    """One camera image, JPEG-encoded for the browser."""

    seq: int  # counts the images the console took, from 1 (a newer image has a larger seq)
    stamp_ns: int  # the image's header stamp
    width: int
    height: int
    jpeg: bytes


class SentGoal(Protocol):
    """An execute goal the executor accepted."""

    def ended(self) -> bool:
        """True once the executor ended the goal (succeeded, aborted, cancelled, or refused at the approval gate)."""


class ConsoleGraph(Protocol):
    """The graph seen from the console. Calls may block (the app runs them on worker threads); the graph reports
    topics (planner status, executor feedback and results, closed rollouts) to ``ConsoleState``'s ``on_*``
    methods from its own threads."""

    def plan(self, instruction: str, timeout_s: float, sent: Callable[[], None]) -> PlanAnswer:
        """Ask ``/grounded_planner/plan`` (back-projected) and check each step against the safety envelope.
        ``sent()`` is called from the calling thread as soon as the request is on its way to the planner (not at all
        where none went out: no planner); the live view pauses from then, not before, so that what the pause does
        (the graph leaving the camera topic, the pages told) runs while the planner works, not before the request
        went out."""

    def requires_approval(self) -> bool:
        """The executor's ``require_approval`` parameter (GraphError when the executor does not answer)."""

    def execute(self, plan: dict[str, Any], hold: bool = False) -> SentGoal:
        """Send ``plan`` to ``/grounded_planner/execute``; returns once the executor accepted the goal
        (GraphError when it rejects it or is not there). Progress arrives on the feedback topic. ``hold``: the goal
        asks the executor to hold it for ``/grounded_planner/approve`` before anything runs (whatever the executor's
        own ``require_approval``): a preview that nothing can move without an Approve."""

    def answer_approval(self, approved: bool, wait_s: float) -> tuple[bool, str]:
        """Answer ``/grounded_planner/approve`` (waiting up to ``wait_s`` for a plan to be held):
        (taken, the executor's message)."""

    def stop(self) -> bool:
        """Cancel every running execute goal (and reject one held for approval); True when a goal was cancelled."""

    def reset_scene(self) -> tuple[bool, str]:
        """Ask ``/grounded_planner/reset_scene`` to put the simulator's scene back at its start: (done, the executor's
        message; it refuses while a plan runs or is held, and on a robot). GraphError when no executor offers it or it
        does not answer."""

    def latest_frame(self, after_seq: int, width: int = 0, wanted: Callable[[], bool] | None = None) -> Frame | None:
        """The newest camera image when it is newer than frame ``after_seq``, else None (never blocks long).
        ``width``: the pixels across that the pages show it at (0 = as it came); an image wider than that is scaled
        down to it before it is encoded (never up). ``wanted``: asked before the image is encoded; False (the live
        view paused meanwhile) drops it there, and None is returned."""

    def frames_paused(self) -> None:
        """The live view paused (the planner answers a request and the arm is still): no frame is wanted until the
        next ``latest_frame``, so the graph may stop receiving camera images meanwhile (never blocks long)."""
