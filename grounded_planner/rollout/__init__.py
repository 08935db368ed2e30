"""Rollout records, rosbag writing/reading and replay."""
