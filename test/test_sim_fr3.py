"""The optional FR3 arm of the simulated workcell (franky-sim's Franka FR3 MJCF): numeric IK against MuJoCo's
kinematics, and the executor putting a box into a bowl with it. Skipped when franky-sim is not installed."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import grounded_planner.sim  # noqa: F401  (picks the headless GL backend before MuJoCo is first imported)

pytest.importorskip("mujoco")
pytest.importorskip("franky_sim")

from grounded_planner.execution.config import ExecutorConfig, SafetyConfig  # noqa: E402
from grounded_planner.execution.executor import Executor  # noqa: E402
from grounded_planner.execution.outcomes import Outcome  # noqa: E402
from grounded_planner.geometry.targets import compute_targets  # noqa: E402
from grounded_planner.sim import IKError, SimBackend, SimWorkcell  # noqa: E402
from grounded_planner.sim.export import gt_plan  # noqa: E402

SCENARIOS = Path(__file__).resolve().parents[1] / "config" / "scenarios"
# The executor's motion time limit is wall-clock; the FR3's numeric IK makes a motion cost ~0.3 s of CPU, so a
# generous limit keeps these tests about the arm, not about how busy the machine is.
PATIENT = ExecutorConfig(safety=SafetyConfig(motion_timeout_s=300.0))


@pytest.fixture(scope="module")
def fr3_cell():
    with SimWorkcell.from_scenario(SCENARIOS / "box_in_bowl.yaml", seed=1, robot="fr3") as cell:
        yield cell


def test_fr3_is_attached_with_its_hand(fr3_cell):
    assert fr3_cell.robot.name == "fr3" and len(fr3_cell.robot.arm_joints) == 7
    assert abs(fr3_cell.gripper_width() - 0.08) < 1e-3  # starts open
    # the scene still renders, and the GT plan still finds both objects in view
    plan = gt_plan(fr3_cell)
    assert [a.type for a in plan.actions] == ["grasp", "place"]


def test_fr3_ik_matches_forward_kinematics(fr3_cell):
    import mujoco

    rng = np.random.default_rng(1)
    data = mujoco.MjData(fr3_cell.model)
    q = fr3_cell.arm_q()
    for _ in range(10):
        r, azimuth = rng.uniform(0.3, 0.65), rng.uniform(-0.9, 0.9)
        target = np.array([r * math.cos(azimuth), r * math.sin(azimuth), rng.uniform(0.03, 0.3)])
        yaw = rng.uniform(-math.pi / 2, math.pi / 2)
        q = fr3_cell.solve_ik(target, yaw, q)
        data.qpos[fr3_cell._arm_qadr] = q
        mujoco.mj_kinematics(fr3_cell.model, data)
        R = data.site_xmat[fr3_cell._tcp_site].reshape(3, 3)
        np.testing.assert_allclose(data.site_xpos[fr3_cell._tcp_site], target, atol=2e-4)
        np.testing.assert_allclose(R[:, 2], [0, 0, -1], atol=2e-3)
        assert abs(abs(R[:, 1] @ [-math.sin(yaw), math.cos(yaw), 0]) - 1) < 1e-4
        lo, hi = fr3_cell.model.jnt_range[[fr3_cell.model.joint(j).id for j in fr3_cell.robot.arm_joints]].T
        assert np.all(q >= lo - 1e-9) and np.all(q <= hi + 1e-9)
    with pytest.raises(IKError, match="out of reach"):
        fr3_cell.solve_ik([1.3, 0.0, 0.1], 0.0)


def test_fr3_puts_the_box_in_the_bowl_through_the_camera():
    with SimWorkcell.from_scenario(SCENARIOS / "box_in_bowl.yaml", seed=2, robot="fr3") as cell:
        _, depth_m = cell.render()
        plan = gt_plan(cell)
        targets = compute_targets(plan, depth_m, cell.camera_model, cell.extrinsics)
        with SimBackend(cell) as backend:
            result = Executor(backend, PATIENT).execute(plan, targets)
        cell.step(250)
        assert [s.outcome for s in result.steps] == [Outcome.OK, Outcome.OK], result.to_dict()
        assert cell.success(), [r.to_dict() for r in cell.evaluate()]


def test_fr3_opens_the_drawer():
    from grounded_planner.sim.export import gt_targets

    with SimWorkcell.from_scenario(SCENARIOS / "open_drawer.yaml", seed=3, robot="fr3") as cell:
        plan = gt_plan(cell)
        with SimBackend(cell) as backend:
            result = Executor(backend, PATIENT).execute(plan, gt_targets(cell, plan))
        assert result.success, result.to_dict()
        assert cell.drawer_opening_m("cabinet") > 0.10 and cell.success()
