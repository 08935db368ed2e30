"""rclpy-free conversions between ROS messages (rclpy or rosbags objects, duck-typed) and the library's types."""
