"""The RViz2 config and the Foxglove layout shipped for the console page's neighbours: they parse, they name only
topics the graph publishes (ros/names.py, and the camera's realsense-ros topic), and setup.py installs them."""

import json
import re

import yaml

from conftest import REPO
from grounded_planner.ros import names

RVIZ = REPO / "config" / "rviz" / "grounded_planner.rviz"
FOXGLOVE = REPO / "config" / "foxglove" / "grounded_planner.json"
CAMERA = "/camera/camera/color/image_raw"


def graph_topics() -> set[str]:
    return {"/" + value.lstrip("/") for key, value in vars(names).items() if key.isupper() and isinstance(value, str)}


def test_rviz_config_shows_overlay_plan_markers_and_tf_from_graph_topics():
    config = yaml.safe_load(RVIZ.read_text())
    displays = config["Visualization Manager"]["Displays"]
    classes = {d["Class"] for d in displays}
    assert {"rviz_default_plugins/TF", "rviz_default_plugins/MarkerArray", "rviz_default_plugins/Image"} <= classes
    topics = {d["Topic"]["Value"] for d in displays if "Topic" in d}
    assert topics <= graph_topics() | {CAMERA}, topics - graph_topics()
    assert "/" + names.OVERLAY.lstrip("/") in topics and "/" + names.PLAN_MARKERS.lstrip("/") in topics


def test_foxglove_layout_names_only_graph_topics_and_every_panel_is_placed():
    layout = json.loads(FOXGLOVE.read_text())
    panels = set(layout["configById"])
    placed = set(re.findall(r'"([A-Za-z0-9]+![a-z]+)"', json.dumps(layout["layout"])))
    assert placed == panels
    text = json.dumps(layout["configById"])
    topics = set(re.findall(r'"(/[a-z_/]+)"', text))
    assert topics <= graph_topics() | {CAMERA}, topics - graph_topics()
    assert "/" + names.OVERLAY.lstrip("/") in topics


def test_setup_installs_the_viewer_configs_and_the_console_page():
    setup = (REPO / "setup.py").read_text()
    assert 'glob("config/rviz/*.rviz")' in setup and 'glob("config/foxglove/*.json")' in setup
    assert '"grounded_planner.console": ["static/*.html", "static/*.js", "static/*.css"]' in setup
    static = REPO / "grounded_planner" / "console" / "static"
    page = (static / "index.html").read_text()
    # no CDN: every script and style the page loads ships in the package
    assert not re.search(r'(src|href)="(https?:)?//', page)
    for ref in re.findall(r'(?:src|href)="/static/([^"]+)"', page):
        assert (static / ref).is_file(), ref
