"""Camera models, back-projection, extrinsics, grasp/place point estimation and hand-eye calibration."""
