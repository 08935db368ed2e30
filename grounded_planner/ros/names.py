"""The graph's service, action and topic names in one place (every node and client imports them from here).

Every name is relative: it resolves against the namespace of the node that uses it, so two robots share one graph
under two namespaces (``/robot1/grounded_planner/plan``, ``/robot2/grounded_planner/plan``); in the root namespace
a name is the absolute one (``/grounded_planner/plan``). A client in another namespace names the stack it talks to
with :func:`in_namespace`.
"""

from grounded_planner.errors import InputError

PLAN_SERVICE = "grounded_planner/plan"  # GetGroundedPlan (planner_node)
EXECUTE_ACTION = "grounded_planner/execute"  # ExecutePlan (executor_node)
# the plan service's introspection events (metadata only: when each request came and was answered, no contents)
PLAN_SERVICE_EVENTS = PLAN_SERVICE + "/_service_event"
RECONNECT_SERVICE = "grounded_planner/reconnect"  # std_srvs/Trigger (executor_node): reconnect a robot that dropped out
# std_srvs/Trigger (executor_node): the simulator's scene back at its start between episodes (a robot's: refused)
RESET_SCENE_SERVICE = "grounded_planner/reset_scene"
APPROVE_SERVICE = "grounded_planner/approve"  # std_srvs/SetBool (executor_node, require_approval): true approves

LAST_PLAN = "grounded_planner/last_plan"  # GroundedPlan, latched: every plan planner_node returned
PLAN_MARKERS = "grounded_planner/plan_markers"  # MarkerArray, latched: the last plan's back-projected targets
OVERLAY = "grounded_planner/overlay"  # Image, latched: the last plan drawn on its image
PLANNER_STATUS = "grounded_planner/planner_status"  # PlannerStatus: one per answered plan request
TARGETS = (
    "grounded_planner/targets"  # GroundedPlan with its 3D targets (planner_node with backproject, backprojection_node)
)
PLAN_PIXELS = "grounded_planner/plan_pixels"  # GroundedPlan in pixels, input of backprojection_node
PLAN_3D = "grounded_planner/plan_3d"  # GroundedPlan with poses, output of backprojection_node
TARGET_MARKERS = "grounded_planner/target_markers"  # MarkerArray of backprojection_node
EXECUTION_FEEDBACK = "grounded_planner/execution/feedback"  # ExecutionEvent: one per executor event
EXECUTION_RESULT = "grounded_planner/execution/result"  # ExecutionResult: how each execute goal ended
ROLLOUT_CLOSED = (
    "grounded_planner/rollout/closed"  # String (a path, plain text), latched: the folder of each finished rollout
)
# The frame set (colour rgb8, depth, camera_info; one instant) each plan was made on, published by planner_node just
# before the plan for the rollout logger to record: Image, Image, CameraInfo
PLAN_FRAMES_COLOR = "grounded_planner/plan_frames/color"
PLAN_FRAMES_DEPTH = "grounded_planner/plan_frames/depth"
PLAN_FRAMES_CAMERA_INFO = "grounded_planner/plan_frames/camera_info"

# The camera's topics, relative as realsense-ros publishes them: its launch file starts the camera node in namespace
# ``camera_namespace`` (default ``camera``) with name ``camera_name`` (default ``camera``) and publishes under the
# node's private namespace, so a robot's stack in ``/robot1`` sees ``/robot1/camera/camera/color/image_raw``.
CAMERA_NAMESPACE = "camera"
CAMERA_NAME = "camera"
CAMERA_PREFIX = f"{CAMERA_NAMESPACE}/{CAMERA_NAME}"
# realsense-ros's streams under a camera's prefix, by the key the nodes give them
CAMERA_STREAMS = {
    "color": "color/image_raw",
    "color_info": "color/camera_info",
    "depth": "aligned_depth_to_color/image_raw",
    "depth_info": "aligned_depth_to_color/camera_info",
}


def camera_topics(prefix: str = CAMERA_PREFIX) -> dict[str, str]:
    """The camera's topics under ``prefix`` (``CAMERA_NAMESPACE/CAMERA_NAME``, as camera_node's camera_namespace
    parameter and the launch files' camera_namespace:=/camera_name:= give it), by CAMERA_STREAMS' keys."""
    return {key: f"{prefix.rstrip('/')}/{stream}" for key, stream in CAMERA_STREAMS.items()}


COLOR_IMAGE = camera_topics()["color"]
COLOR_CAMERA_INFO = camera_topics()["color_info"]
ALIGNED_DEPTH_IMAGE = camera_topics()["depth"]
ALIGNED_DEPTH_CAMERA_INFO = camera_topics()["depth_info"]


class NamespaceError(InputError):
    """A namespace that ROS would refuse (``robot 1``, ``1robot``, ``a//b``)."""


def normalize_namespace(namespace: str) -> str:
    """``namespace`` as an absolute ROS namespace (``robot1`` -> ``/robot1``; ``''`` and ``/`` -> ``/``).

    Raises :class:`NamespaceError` naming the namespace and the rule it breaks (ROS 2's: tokens of letters, digits
    and underscores that do not start with a digit, separated by single slashes).
    """
    text = (namespace or "").strip()
    if text in ("", "/"):
        return "/"
    tokens = text.strip("/").split("/")
    for token in tokens:
        if (
            not token
            or not (token[0].isalpha() or token[0] == "_")
            or not all(c.isalnum() or c == "_" for c in token)
            or not token.isascii()
        ):
            raise NamespaceError(
                f"namespace {namespace!r} is not a ROS namespace: each part between slashes must be "
                "letters, digits and underscores, not starting with a digit"
            )
    return "/" + "/".join(tokens)


def in_namespace(namespace: str, name: str) -> str:
    """The absolute name ``name`` (one of this module's relative names, or an absolute one, kept as it is) has for a
    node in ``namespace``: ``in_namespace('robot1', PLAN_SERVICE)`` -> ``/robot1/grounded_planner/plan``."""
    if name.startswith("/"):
        return name
    ns = normalize_namespace(namespace)
    return f"{ns.rstrip('/')}/{name}"
