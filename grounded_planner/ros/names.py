"""The graph's service, action and topic names in one place (every node and client imports them from here)."""

PLAN_SERVICE = "/grounded_planner/plan"  # GetGroundedPlan (planner_node)
EXECUTE_ACTION = "/grounded_planner/execute"  # ExecutePlan (executor_node)
RECONNECT_SERVICE = "/grounded_planner/reconnect"  # std_srvs/Trigger (executor_node): reconnect a robot that dropped out
APPROVE_SERVICE = "/grounded_planner/approve"  # std_srvs/SetBool (executor_node, require_approval): true approves

LAST_PLAN = "/grounded_planner/last_plan"  # GroundedPlan, latched: every plan planner_node returned
PLAN_MARKERS = "/grounded_planner/plan_markers"  # MarkerArray, latched: the last plan's back-projected targets
OVERLAY = "/grounded_planner/overlay"  # Image, latched: the last plan drawn on its image
PLANNER_STATUS = "/grounded_planner/planner_status"  # PlannerStatus: one per answered plan request
TARGETS = "/grounded_planner/targets"  # GroundedPlan with its 3D targets (planner_node with backproject, backprojection_node)
PLAN_PIXELS = "/grounded_planner/plan_pixels"  # GroundedPlan in pixels, input of backprojection_node
PLAN_3D = "/grounded_planner/plan_3d"  # GroundedPlan with poses, output of backprojection_node
TARGET_MARKERS = "/grounded_planner/target_markers"  # MarkerArray of backprojection_node
EXECUTION_FEEDBACK = "/grounded_planner/execution/feedback"  # ExecutionEvent: one per executor event
EXECUTION_RESULT = "/grounded_planner/execution/result"  # ExecutionResult: how each execute goal ended
ROLLOUT_CLOSED = "/grounded_planner/rollout/closed"  # String (a path, plain text), latched: the folder of each finished rollout
# The frame set (colour rgb8, depth, camera_info; one instant) each plan was made on, published by planner_node just
# before the plan for the rollout logger to record: Image, Image, CameraInfo
PLAN_FRAMES_COLOR = "/grounded_planner/plan_frames/color"
PLAN_FRAMES_DEPTH = "/grounded_planner/plan_frames/depth"
PLAN_FRAMES_CAMERA_INFO = "/grounded_planner/plan_frames/camera_info"
