"""Conversions between the plan model and ROS messages, and the rclpy nodes (the only layer that imports rclpy)."""
