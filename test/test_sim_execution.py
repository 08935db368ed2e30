"""The executor (execution layer) on the `sim` backend: GT plans run to the scenario's success predicates,
closing on empty space ends in ``grasp_failed``, a drawer opens, cancel and time limits stop the arm, and
``sim run`` works end to end."""

from __future__ import annotations

import copy
import json
import threading
from pathlib import Path

import numpy as np
import pytest

import grounded_planner.sim  # noqa: F401  (picks the headless GL backend before MuJoCo is first imported)

pytest.importorskip("mujoco")

from grounded_planner.cli.main import main  # noqa: E402
from grounded_planner.execution.backends import make_backend  # noqa: E402
from grounded_planner.execution.config import ExecutorConfig  # noqa: E402
from grounded_planner.execution.executor import Executor  # noqa: E402
from grounded_planner.execution.outcomes import Outcome  # noqa: E402
from grounded_planner.geometry.targets import compute_targets  # noqa: E402
from grounded_planner.sim import SimBackend, SimWorkcell  # noqa: E402
from grounded_planner.sim.backend import SimBackendConfig  # noqa: E402
from grounded_planner.sim.export import gt_plan, gt_targets  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = REPO / "config" / "scenarios"


def _execute(cell: SimWorkcell, plan, targets):
    with SimBackend(cell) as backend:
        result = Executor(backend, ExecutorConfig()).execute(plan, targets)
    cell.step(250)  # let released objects come to rest
    return result


def test_box_into_bowl_from_gt_targets():
    with SimWorkcell.from_scenario(SCENARIOS / "box_in_bowl.yaml", seed=4) as cell:
        assert not cell.success()
        plan = gt_plan(cell)
        result = _execute(cell, plan, gt_targets(cell, plan))
        assert result.success, result.to_dict()
        assert [s.outcome for s in result.steps] == [Outcome.OK, Outcome.OK]
        assert cell.success(), [r.to_dict() for r in cell.evaluate()]


def test_box_into_bowl_through_the_camera():
    # the real pipeline: plan boxes in pixels -> rendered (noisy) depth + written calibration -> 3D targets
    with SimWorkcell.from_scenario(SCENARIOS / "box_in_bowl.yaml", seed=5) as cell:
        cell.scenario.camera.depth_noise = True
        _, depth_m = cell.render()
        plan = gt_plan(cell)
        targets = compute_targets(plan, depth_m, cell.camera_model, cell.extrinsics)
        exact = gt_targets(cell, plan)
        for estimated, true in zip(targets.targets, exact.targets):
            assert np.linalg.norm(estimated.position - true.position) < 0.005
        result = _execute(cell, plan, targets)
        assert result.success, result.to_dict()
        assert cell.success(), [r.to_dict() for r in cell.evaluate()]


def test_grasp_on_empty_space_reports_grasp_failed():
    with SimWorkcell.from_scenario(SCENARIOS / "box_in_bowl.yaml", seed=0) as cell:
        plan = gt_plan(cell)
        targets = copy.deepcopy(gt_targets(cell, plan))
        box_before, _ = cell.object_pose("red_box")
        # 3 cm above the bare table, far from both objects (a grasp point on the table itself is refused by the
        # executor's floor check before anything moves)
        targets.targets[0].position = np.array([0.6, 0.3, 0.03])
        result = _execute(cell, plan, targets)
        assert not result.success
        assert [s.outcome for s in result.steps] == [Outcome.GRASP_FAILED]
        assert "nothing held" in result.steps[0].message
        assert cell.held_body is None and cell.gripper_width() > 0.07  # the executor reopened the gripper
        np.testing.assert_allclose(cell.object_pose("red_box")[0], box_before, atol=2e-3)
        assert not cell.success()


def test_drawer_open_succeeds():
    with SimWorkcell.from_scenario(SCENARIOS / "open_drawer.yaml", seed=1) as cell:
        assert cell.drawer_opening_m("cabinet") < 0.005 and not cell.success()
        plan = gt_plan(cell)
        result = _execute(cell, plan, gt_targets(cell, plan))
        assert result.success, result.to_dict()
        # the executor pulls 12 cm by default and the drawer follows the hand; the release rises straight up,
        # so the open fingers do not drag it further
        pull = ExecutorConfig().open_pull_distance_m
        assert pull - 0.01 <= cell.drawer_opening_m("cabinet") <= pull + 0.01
        assert cell.success()


def test_drawer_close_succeeds_and_stays_shut():
    with SimWorkcell.from_scenario(SCENARIOS / "close_drawer.yaml", seed=1) as cell:
        assert cell.drawer_opening_m("cabinet") > 0.05 and not cell.success()
        plan = gt_plan(cell)
        result = _execute(cell, plan, gt_targets(cell, plan))
        assert result.success, result.to_dict()
        # backing off sideways with open fingers around the handle used to drag the drawer ~5 cm back out
        assert cell.drawer_opening_m("cabinet") < 0.02
        assert cell.success()


def test_three_pairs_into_bowls_and_onto_the_plate():
    with SimWorkcell.from_scenario(SCENARIOS / "tidy_table.yaml", seed=2) as cell:
        plan = gt_plan(cell)
        result = _execute(cell, plan, gt_targets(cell, plan))
        assert result.success, result.to_dict()
        assert all(r.ok for r in cell.evaluate()), [r.to_dict() for r in cell.evaluate()]


def test_cup_onto_plate_through_the_camera():
    # a hollow cup held by its rim, set down on a plate: the `on` predicate and the guarded descent
    with SimWorkcell.from_scenario(SCENARIOS / "cup_on_plate.yaml", seed=3) as cell:
        _, depth_m = cell.render()
        plan = gt_plan(cell)
        result = _execute(cell, plan, compute_targets(plan, depth_m, cell.camera_model, cell.extrinsics))
        assert result.success, result.to_dict()
        assert cell.success(), [r.to_dict() for r in cell.evaluate()]
        _, rot = cell.object_pose("cup")
        assert rot[2, 2] > 0.99  # standing upright on the plate


def test_make_backend_sim_loads_the_default_scenario():
    backend = make_backend("sim", ExecutorConfig(backends={"sim": {"seed": 2}}))
    assert isinstance(backend, SimBackend) and backend.config.seed == 2
    with backend:
        assert backend.workcell.scenario.name == "box_in_bowl"
        assert backend.gripper_width() > 0.07


def test_sim_run_cli_end_to_end(tmp_path, capsys):
    gif, rollout = tmp_path / "run.gif", tmp_path / "rollout"
    code = main(
        ["sim", "run", str(SCENARIOS / "box_in_bowl.yaml"), "--seed", "1", "--gif", str(gif), "--rollout", str(rollout)]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["success"] is True and out["execution"]["success"] is True
    assert out["predicates"][0]["ok"] and out["targets"]["frame"] == "base_link"
    record = json.loads((rollout / "rollout.json").read_text())
    assert record["status"] == "complete" and record["success"] is True and record["label_source"] == "sim"
    assert record["plan"]["actions"][0]["object"] == "red box" and len(record["steps"]) == 2
    assert "inside red_box" in record["notes"] and record["bag"]["messages"] > 20
    from PIL import Image

    with Image.open(gif) as im:
        assert im.n_frames >= 10 and im.size == (320, 240)


def test_sim_run_cli_reports_failure_with_exit_1(tmp_path, capsys):
    # a plan that puts the box down where it already is: it executes fine but the task is not done
    with SimWorkcell.from_scenario(SCENARIOS / "box_in_bowl.yaml", seed=0) as cell:
        plan = gt_plan(cell)
    plan.actions[1].point = tuple(np.add(plan.actions[0].bbox[:2], plan.actions[0].bbox[2:]) / 2)
    path = tmp_path / "plan.json"
    path.write_text(plan.to_json())
    code = main(["sim", "run", str(SCENARIOS / "box_in_bowl.yaml"), "--seed", "0", "--plan", str(path)])
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and out["execution"]["success"] is True and out["success"] is False
    assert main(["sim", "run", str(SCENARIOS / "box_in_bowl.yaml"), "--plan", str(path), "--targets", "gt"]) == 2
    assert "--targets gt needs the scenario's own GT plan" in capsys.readouterr().err


def test_cancel_during_a_motion_stops_the_sim_arm():
    # paced to the wall clock so that the cancel lands in the middle of the first approach
    with (
        SimWorkcell.from_scenario(SCENARIOS / "box_in_bowl.yaml", seed=0) as cell,
        SimBackend(cell, SimBackendConfig(realtime_factor=1.0)) as backend,
    ):
        plan = gt_plan(cell)
        cancel = threading.Event()
        timer = threading.Timer(0.4, cancel.set)
        timer.start()
        result = Executor(backend, ExecutorConfig()).execute(plan, gt_targets(cell, plan), cancel=cancel)
        timer.join()
        assert [s.outcome for s in result.steps] == [Outcome.CANCELLED], result.to_dict()
        q = cell.arm_q()
        cell.realtime_factor = 0.0
        cell.step(200)
        np.testing.assert_allclose(cell.arm_q(), q, atol=2e-3)  # standing still where it stopped
        assert cell.held_body is None and not cell.success()


def test_a_motion_over_the_time_limit_ends_in_timeout():
    from grounded_planner.execution.config import SafetyConfig

    with (
        SimWorkcell.from_scenario(SCENARIOS / "box_in_bowl.yaml", seed=0) as cell,
        SimBackend(cell, SimBackendConfig(realtime_factor=1.0)) as backend,
    ):
        plan = gt_plan(cell)
        config = ExecutorConfig(safety=SafetyConfig(motion_timeout_s=0.3))
        result = Executor(backend, config).execute(plan, gt_targets(cell, plan))
        assert [s.outcome for s in result.steps] == [Outcome.TIMEOUT], result.to_dict()
        assert "exceeded 0.3 s" in result.steps[0].message
