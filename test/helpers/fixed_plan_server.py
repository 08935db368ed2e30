"""A GetGroundedPlan server that answers every request with the plan in a JSON file (test peer, own process)."""

import sys

import rclpy
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node

from grounded_planner.plan import load_plan
from grounded_planner.ros.convert import plan_to_msg
from grounded_planner_interfaces.srv import GetGroundedPlan


class FixedPlanServer(Node):
    def __init__(self, plan_path: str):
        super().__init__("fixed_plan_server")
        self.plan = load_plan(plan_path)
        self.create_service(GetGroundedPlan, "/grounded_planner/plan", self.on_request)
        print("ready", flush=True)

    def on_request(self, request, response):
        plan = self.plan
        plan.instruction = request.instruction
        response.success = True
        response.message = plan.reason
        response.plan = plan_to_msg(plan, header=None)
        response.plan.header.frame_id = "camera_color_optical_frame"
        return response


def main(args=None):
    try:
        with rclpy.init(args=args):
            rclpy.spin(FixedPlanServer(sys.argv[1]))
    except (KeyboardInterrupt, ExternalShutdownException):
        pass


if __name__ == "__main__":
    main()
