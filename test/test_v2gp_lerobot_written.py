"""V2GP's LeRobot reader (pyarrow, no lerobot import) on a dataset that LeRobot 0.4.4 itself writes here, shaped as
an SO-101 recording (6 joints named as SOFollower names them, the gripper last, one camera, two episodes, two tasks).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("lerobot.datasets.lerobot_dataset", reason="LeRobot is installed by make setup")

from lerobot.datasets.lerobot_dataset import LeRobotDataset as RealLeRobotDataset  # noqa: E402

from grounded_planner.v2gp.dataset import LeRobotDataset, open_dataset  # noqa: E402

JOINTS = ["shoulder_pan.pos", "shoulder_lift.pos", "elbow_flex.pos", "wrist_flex.pos", "wrist_roll.pos", "gripper.pos"]
TASKS = ["put the red box in the blue bowl", "put the cup on the plate"]
FRAMES = 24


def _gripper(episode: int) -> np.ndarray:
    """Opens, closes on an object part way (not to 0), opens again: a real SO-101 grasp's shape."""
    t = np.arange(FRAMES)
    return np.where(t < 6, 2.0 + 5 * t, np.where(t < 16, 28.0 - episode, 45.0)).astype(np.float32)


def _image(episode: int, k: int) -> np.ndarray:
    image = np.zeros((32, 48, 3), dtype=np.uint8)
    image[..., 0] = 7 * k
    image[..., 1] = 100 + 50 * episode
    return image


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    root = tmp_path_factory.mktemp("lerobot") / "so101_demo"
    features = {
        "observation.images.front": {"dtype": "image", "shape": (32, 48, 3), "names": ["height", "width", "channels"]},
        "observation.state": {"dtype": "float32", "shape": (6,), "names": JOINTS},
        "action": {"dtype": "float32", "shape": (6,), "names": JOINTS},
    }
    dataset = RealLeRobotDataset.create(
        repo_id="local/so101_demo", fps=15, features=features, root=root, robot_type="so101_follower", use_videos=False
    )
    for episode in range(2):
        grip = _gripper(episode)
        for k in range(FRAMES):
            state = np.array([0.5 * k, -10.0, 20.0, 30.0, 0.0, grip[k]], dtype=np.float32)
            dataset.add_frame(
                {
                    "observation.images.front": _image(episode, k),
                    "observation.state": state,
                    "action": state,
                    "task": TASKS[episode],
                }
            )
        dataset.save_episode()
    dataset.finalize()
    return root


def test_v2gp_reads_what_lerobot_wrote(written):
    dataset = open_dataset(written)
    assert isinstance(dataset, LeRobotDataset) and dataset.v3  # LeRobot 0.4 writes codebase v3.0
    assert list(dataset.episode_indices) == [0, 1]
    for index in (0, 1):
        episode = dataset.episode(index)
        assert episode.instruction == TASKS[index]
        assert episode.fps == 15 and episode.camera == "observation.images.front"
        assert episode.length == FRAMES and list(episode.frame_indices) == list(range(FRAMES))
        assert episode.gripper == pytest.approx(_gripper(index))  # observation.state[-1]: gripper.pos
        for k in (0, 9, FRAMES - 1):
            assert np.array_equal(episode.frame(k), _image(index, k))


def test_v2gp_names_the_gripper_by_its_lerobot_feature_name(written):
    episode = open_dataset(written, gripper="observation.state[gripper.pos]").episode(1)
    assert episode.gripper == pytest.approx(_gripper(1))
    pan = open_dataset(written, gripper="action[shoulder_pan.pos]").episode(0)
    assert pan.gripper == pytest.approx(0.5 * np.arange(FRAMES))
