"""The operator console in a real browser (headless Chromium through Selenium) against a real bringup in another
process (the replay profile: a bag as the camera, the planner against a local VLM server, the sim executor moving
for real): instruct, preview, approve, watch the steps complete, label and see the tally change; a second browser
sees the same state and its late Approve is refused; Stop mid-plan stops the arm; a non-local bind without the
token answers 401 and moves nothing; a path leaving the rollouts folder is 404. Screenshots: out/console/."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import re
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest

from conftest import REPO, requires_ros
from helpers.bringup import CLI
from helpers.browser import chromium, requires_browser, screenshot, wait_until
from helpers.console_stack import (
    InstantGraph,
    Output,
    StackProcess,
    graph_node,
    ros_domain_of_its_own,
    set_parameter,
    workcell_overrides,
    write_workcell,
)
from helpers.spabench_cards import make_cards
from helpers.tabletop import INSTRUCTION, SCENE_COLORS

pytestmark = [
    requires_ros,
    requires_browser,
    pytest.mark.ros,
    pytest.mark.skipif(importlib.util.find_spec("mujoco") is None, reason="MuJoCo not installed (sim extra)"),
]


# the sim arm paced to the wall clock: a plan takes seconds, so Stop can land in the middle of it
REALTIME = 1.0
VLM = []  # the stack's local VLM server (a test may script a slow answer)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """One bringup for the module (a random ROS domain, localhost only): (console URL, rollouts folder, output)."""
    from grounded_planner.vlm.fake_server import FakeVLMServer

    tmp = tmp_path_factory.mktemp("console")
    cell = write_workcell(tmp, realtime_factor=REALTIME)
    # an evaluation session's card folder; the logger writes under it, where the Spa-Bench contract puts rollouts
    session = tmp / "session"
    make_cards(
        session,
        [("relational_placement", "id", 0), ("relational_placement", "ood", 1)],
        INSTRUCTION,
        "the red cube ends on the table, clear of the gripper",  # as the card's instruction asks
    )
    rollouts = session / "rollouts"
    with ros_domain_of_its_own(), FakeVLMServer(SCENE_COLORS) as vlm:
        VLM[:] = [vlm]
        overrides = workcell_overrides(cell, vlm.base_url, rollouts)
        overrides.update({"planner.timeout_s": 20, "executor.approval_timeout_s": 30, "console.session_dir": session})
        graph = StackProcess(tmp, overrides)
        try:
            yield graph.url, rollouts, graph.output
        finally:
            text = graph.stop()
    assert graph.child.returncode == 0, text[-3000:]
    assert "Traceback" not in text, text


@pytest.fixture(scope="module")
def browser():
    driver = chromium()
    yield driver
    driver.quit()


@contextlib.contextmanager
def console_alone(rollouts, graph=None, session_dir: str = ""):
    """The console's own server on ``rollouts`` with ``graph``, by default one that answers at once (no bringup), and
    the evaluation session ``session_dir`` if given: (its app, its server)."""
    from grounded_planner.console.app import ConsoleApp
    from grounded_planner.console.server import ConsoleServer

    app = ConsoleApp(graph or InstantGraph(), rollouts_dir=rollouts, session_dir=session_dir, note=lambda _line: None)
    server = ConsoleServer(app, "127.0.0.1", 0).start()
    try:
        yield app, server
    finally:
        server.stop()


def one_frame_rollout(folder, instruction: str = INSTRUCTION) -> None:
    """A closed rollout in ``folder`` with one grey frame and nothing else (no plan, no step, no attempt)."""
    import numpy as np

    from grounded_planner.rollout.record import RolloutRecorder

    with RolloutRecorder(folder, instruction=instruction, fsync_every_s=None) as rec:
        rec.log_color(np.full((48, 64, 3), 90, np.uint8))


def copies(folder, n: int) -> None:
    """``n`` copies of the rollout ``folder`` beside it (a campaign's folder: more than a page of the rollouts list)."""
    import shutil

    for k in range(n):
        shutil.copytree(folder, folder.with_name(f"{folder.name}_{k:03d}"))


def rows(driver, table: str):
    """The cells of a table's rows, read in the page in one go (a state push rebuilds the rows at any moment)."""
    return driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0])).map("
        "tr => Array.from(tr.querySelectorAll('td')).map(td => td.innerText.trim()))",
        f"#{table} tbody tr",
    )


def click(driver, selector: str) -> None:
    from selenium.webdriver.common.by import By

    driver.find_element(By.CSS_SELECTOR, selector).click()


def plan_in(driver, instruction: str) -> None:
    from selenium.webdriver.common.by import By

    box = driver.find_element(By.ID, "instruction")
    box.clear()
    box.send_keys(instruction)
    click(driver, "#plan-btn")


def labelled_rollout(driver) -> str:
    """The rollout the live label panel is for ('' when none): the panel keeps the last episode of any test before,
    so a wait for "this episode's label" must see a rollout other than the one shown before the episode ran."""
    key = driver.execute_script("return document.getElementById('live-label').dataset.key || ''")
    return key.split("|")[0]


def camera_shown(driver) -> bool:
    return driver.execute_script("const i = document.getElementById('camera'); return i.complete && i.naturalWidth > 0")


def tally(driver) -> dict:
    return {(r[0], r[1]): r[2] for r in rows(driver, "tally")}


def test_instruct_preview_approve_watch_label_and_tally(stack, browser):
    url, rollouts, output = stack
    browser.get(url)
    wait_until(lambda: camera_shown(browser), 30, "the camera image", browser, "live_no_camera")
    # the cube where the camera sees it, whichever test ran before: the console offers a reset on the simulator
    wait_until(lambda: browser.find_element("id", "reset-btn").is_displayed(), 30, "the Reset scene button", browser)
    click(browser, "#reset-btn")
    wait_until(
        lambda: browser.find_element("id", "toast").text == "scene reset: sim: the scene is back at its start",
        15,
        "the executor's answer to the reset",
        browser,
        "live_no_reset",
    )
    assert "scene reset from 127.0.0.1: sim: the scene is back at its start" in browser.find_element("id", "log").text
    before, title = tally(browser), browser.find_element("id", "plan-title").text
    plan_in(browser, INSTRUCTION)
    steps = wait_until(
        lambda: (
            browser.find_element("id", "plan-title").text not in ("", title)
            and len(rows(browser, "steps")) == 2
            and rows(browser, "steps")
        ),
        60,
        "the plan preview",
        browser,
        "live_no_plan",
    )
    # the planner's status: this instruction's plan, planned
    assert browser.find_element("id", "planner-status").text.startswith(f"ok: {INSTRUCTION} — 2 action(s)")
    # before anything moves: each step with its 3D target in the base frame, the grasp width and the envelope's verdict
    assert [s[1].split()[0] for s in steps] == ["grasp", "place"]
    assert all("fr3_link0" in s[2] for s in steps) and steps[0][3].endswith("cm")
    assert [s[4] for s in steps] == ["ok", "ok"] and [s[5] for s in steps] == ["—", "—"]
    assert browser.execute_script("return document.querySelectorAll('#overlay rect').length") == 1  # the grasp box
    assert browser.execute_script("return document.querySelectorAll('#overlay circle').length") == 1  # the place point
    screenshot(browser, "live_preview")
    # nothing moved: the episode this plan opened has no execution and no step yet
    newest = json.loads(max(rollouts.glob("*/rollout.json"), key=lambda p: p.parent.name).read_text())
    assert (
        newest["execution"] is None
        and newest["steps"] == []
        and browser.find_element("id", "exec-badge").text == "executor: idle"
    )
    shown_before = labelled_rollout(browser)
    click(browser, "#approve-btn")
    wait_until(
        lambda: rows(browser, "steps")[0][5] not in ("—", "waiting"),
        30,
        "the first step to start",
        browser,
        "live_not_started",
    )
    screenshot(browser, "live_running")
    wait_until(
        lambda: browser.find_element("id", "executor-state").text.startswith("running step"),
        10,
        "the executor's state: running",
        browser,
    )
    done = wait_until(
        lambda: [s[5] for s in rows(browser, "steps")] == ["ok", "ok"] and rows(browser, "steps"),
        90,
        "both steps to complete",
        browser,
        "live_not_done",
    )
    assert done
    wait_until(lambda: "succeeded" in browser.find_element("id", "decision-msg").text, 30, "the plan's result", browser)
    # the episode ended: its rollout waits for a label, the stack's own (the simulator's: success) preselected
    wait_until(
        lambda: (
            labelled_rollout(browser) not in ("", shown_before)
            and "label from: simulator (success)"
            in browser.find_element("css selector", "#live-label .label-info").text
        ),
        30,
        "the episode's label panel",
        browser,
        "live_no_label",
    )
    assert "chosen" in browser.find_element("css selector", "#live-label button[data-outcome='true']").get_attribute(
        "class"
    )
    k, n = map(int, before.get((INSTRUCTION, "—"), "0/0").split("/"))  # earlier tests' episodes, if any ran
    wait_until(
        lambda: tally(browser).get((INSTRUCTION, "—")) == f"{k + 1}/{n + 1}",
        10,
        "the simulator's label in the tally",
        browser,
    )
    screenshot(browser, "live_label")
    # the operator saw it differently: a failure, with its failure mode
    click(browser, "#live-label button[data-outcome='false']")
    click(browser, "#live-label button[data-mode='incorrect_spatial_outcome']")
    click(browser, "#live-label .save-label")
    wait_until(
        lambda: (
            "labelled by a person: failure, incorrect_spatial_outcome"
            in browser.find_element("css selector", "#live-label .label-info").text
        ),
        10,
        "the label to be saved",
        browser,
    )
    wait_until(
        lambda: tally(browser).get((INSTRUCTION, "—")) == f"{k}/{n + 1}",
        10,
        "the tally to change",
        browser,
        "live_tally_unchanged",
    )
    screenshot(browser, "live_tally")
    labelled = {p.parent.name: json.loads(p.read_text()) for p in rollouts.glob("*/rollout.json")}
    (episode,) = [
        name
        for name, d in labelled.items()
        if (d["success"], d["failure_mode"], d["label_source"]) == (False, "incorrect_spatial_outcome", "human")
    ]
    assert re.search(r"plan \d+ approved by 127\.0\.0\.1", output.text())

    # the rollouts pages: the list filtered by outcome (the filter kept in the address), then this episode's rollout
    # with its overlay, frames, plan and steps, and its label edited there
    from selenium.webdriver.support.ui import Select

    def listed() -> list[str]:
        return browser.execute_script(
            "return Array.from(document.querySelectorAll('#rollout-list tbody a')).map(a => a.href)"
        )

    browser.get(url + "rollouts")
    wait_until(lambda: any(episode in h for h in listed()), 10, "the episode in the rollouts list", browser)
    screenshot(browser, "rollouts")
    Select(browser.find_element("id", "f-outcome")).select_by_value("success")
    wait_until(lambda: browser.current_url.endswith("/rollouts?outcome=success"), 10, "the filter in the address")
    wait_until(lambda: not any(episode in h for h in listed()), 10, "the failure filtered out", browser)
    browser.get(url + "rollouts?outcome=failure")
    wait_until(lambda: any(episode in h for h in listed()), 10, "the failure listed under failure", browser)
    assert all("failure" in r[5] for r in rows(browser, "rollout-list"))
    (link,) = [h for h in listed() if episode in h]
    browser.get(link)
    wait_until(lambda: len(rows(browser, "rollout-steps")) == 2, 10, "the rollout page", browser)
    assert browser.execute_script("return document.querySelectorAll('#frames > *').length") >= 1
    assert browser.execute_script("return document.querySelectorAll('#rollout-overlay rect').length") == 1
    wait_until(
        lambda: browser.execute_script("return document.getElementById('rollout-image').naturalWidth > 0"),
        10,
        "a frame of the rollout",
        browser,
    )
    assert [r[2] for r in rows(browser, "rollout-steps")] == ["ok", "ok"]
    assert not browser.find_element("id", "rollout-steps-empty").is_displayed()
    # an open-loop episode tried each step once: the attempts panel says why it is empty
    assert "None recorded" in browser.find_element("id", "rollout-attempts-empty").text
    screenshot(browser, "rollout")
    # the label is editable there too: the person changes their mind, a success after all
    click(browser, "#rollout-label button[data-outcome='true']")
    click(browser, "#rollout-label .save-label")
    wait_until(
        lambda: "labelled by a person: success" in browser.find_element("css selector", "#rollout-label").text,
        10,
        "the edited label on the rollout page",
        browser,
    )
    edited = json.loads((rollouts / episode / "rollout.json").read_text())
    assert (edited["success"], edited["failure_mode"], edited["label_source"]) == (True, None, "human")


def set_executor_parameter(name: str, value) -> None:
    """`ros2 param set /executor NAME VALUE`, from this process (rclpy's parameter client)."""
    with graph_node() as (node, executor):
        set_parameter(node, executor, "executor", name, value)


def reset_workcell() -> None:
    """The executor's /grounded_planner/reset_scene (as `ros2 service call` does): the sim scene back at its start,
    the cube where the camera sees it."""
    from std_srvs.srv import Trigger

    with graph_node() as (node, executor):
        client = node.create_client(Trigger, "/grounded_planner/reset_scene")
        assert client.wait_for_service(timeout_sec=20.0), "the executor's reset_scene service"
        future = client.call_async(Trigger.Request())
        executor.spin_until_future_complete(future, timeout_sec=30.0)
        assert future.done() and future.result().success, future.result()


def test_second_browser_sees_the_same_state_its_late_approve_is_refused_and_stop_stops_the_arm(stack, browser):
    url, rollouts, output = stack
    # this time the executor holds every plan for approval: Approve answers /grounded_planner/approve
    set_executor_parameter("require_approval", True)
    second = chromium()
    try:
        browser.get(url)
        second.get(url)
        wait_until(lambda: camera_shown(second), 30, "the camera in the second browser", second)
        before = browser.find_element("id", "plan-title").text
        plan_in(browser, INSTRUCTION)
        title = wait_until(
            lambda: (
                browser.find_element("id", "plan-title").text not in ("", before)
                and browser.find_element("id", "plan-title").text
            ),
            60,
            "the new plan",
            browser,
        )
        wait_until(
            lambda: (
                second.find_element("id", "plan-title").text == title
                and [r[4] for r in rows(second, "steps")] == ["ok", "ok"]
            ),
            10,
            "the first browser's plan in the second browser",
            second,
            "second_no_plan",
        )
        click(browser, "#approve-btn")
        wait_until(
            lambda: rows(second, "steps")[0][5] not in ("—", "waiting"),
            30,
            "the second browser to see the first step running",
            second,
            "second_not_running",
        )
        # the decided plan's buttons are dimmed in the second browser too, and still answer (with the refusal)
        late = second.find_element("id", "approve-btn")
        assert "decided" in late.get_attribute("class") and "refuses a second decision" in late.get_attribute("title")
        click(second, "#approve-btn")  # late: the plan was approved in the first browser
        refused = wait_until(
            lambda: second.find_element("id", "decision-msg").text.startswith("Approve refused"),
            10,
            "the refusal in the second browser",
            second,
        )
        assert refused
        message = second.find_element("id", "decision-msg").text
        assert "was already approved by 127.0.0.1" in message and "one plan gets one decision" in message
        screenshot(second, "second_browser_refused")
        # Stop from the second browser, mid-plan: the goal is cancelled and the arm stops
        click(second, "#stop-btn")
        wait_until(
            lambda: "stopped" in browser.find_element("id", "decision-msg").text,
            30,
            "the first browser to show the plan stopped",
            browser,
            "stop_not_shown",
        )
        progress = [s[5] for s in rows(browser, "steps")]
        assert "cancelled" in progress and progress != ["ok", "ok"], progress
        # a step after the cancelled one never ran: it says so (it said "waiting", as if it still might)
        assert all(p == "not run" for p in progress[progress.index("cancelled") + 1 :]), progress
        # the message names the cancelled step by the table's number (counted from 1), not the executor's index
        cancelled = rows(browser, "steps")[progress.index("cancelled")]
        said = re.search(r"stopped: step (\d+) \((\w+)\): cancelled", browser.find_element("id", "decision-msg").text)
        assert said and said[1] == cancelled[0] and cancelled[1].split()[0] == said[2], (said, cancelled)
        # its episode is up for a label, saying how it ended (its recording is complete: not said, not "(complete)")
        ended = f"stopped: step {said[1]} ({said[2]}): cancelled"
        wait_until(
            lambda: browser.find_element("id", "label-ended").text.startswith(ended),
            30,
            "the stopped episode on the label panel",
            browser,
            "stopped_not_for_label",
        )
        screenshot(browser, "stopped")  # the plan stopped and its episode up for a label, as the docs show it
        assert browser.find_element("id", "label-title").text == INSTRUCTION
        assert re.search(r"STOP from 127\.0\.0\.1: the running goal was cancelled", output.text())
        assert "refused approve of plan" in output.text()
        assert re.search(
            r"approved by 127\.0\.0\.1: sent to /grounded_planner/execute at its preview, held by the executor, and "
            r"approved on /grounded_planner/approve",
            output.text(),
        )
    finally:
        second.quit()
        set_executor_parameter("require_approval", False)


def test_a_non_local_bind_without_the_token_answers_401_and_moves_nothing(stack, browser, tmp_path):
    url, rollouts, output = stack
    child = subprocess.Popen(
        [*CLI, "console", "--host", "0.0.0.0", "--port", "0", "--rollouts-dir", str(rollouts)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    guarded = Output(child)
    try:
        token = guarded.wait_for(re.compile(r"console: token (\S+) "), 60).group(1)
        port = guarded.wait_for(re.compile(r"console on http://0\.0\.0\.0:(\d+)/"), 30).group(1)
        base = f"http://127.0.0.1:{port}"
        executed_before = len(re.findall(r"plan .*: ok \(", output.text()))
        for path, body in (
            ("/api/plan", {"instruction": INSTRUCTION}),
            ("/api/decision", {"plan_id": 1, "approve": True}),
            ("/api/stop", {}),
        ):
            request = urllib.request.Request(
                base + path, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"}
            )
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=10)
            assert refused.value.code == 401
        browser.get(base + "/")
        assert "a valid token is required" in browser.page_source
        screenshot(browser, "unauthorised")
        # the same console with the token: the page opens (the token becomes a cookie) and the API answers
        browser.get(f"{base}/?token={token}")
        wait_until(
            lambda: browser.current_url == base + "/" and camera_shown(browser),
            30,
            "the console opened with its token",
            browser,
            "token_page",
        )
        request = urllib.request.Request(base + "/api/state", headers={"Authorization": f"Bearer {token}"})
        assert json.loads(urllib.request.urlopen(request, timeout=10).read())["plan"] is None  # nothing was planned
        assert len(re.findall(r"plan .*: ok \(", output.text())) == executed_before  # nothing moved
        assert guarded.text().count("no valid token") >= 4
        assert guarded.text().count("console: token") == 1  # printed once
    finally:
        child.send_signal(2)
        child.wait(timeout=30)


def test_the_live_view_is_sent_no_wider_than_the_page_shows_it(stack, browser):
    """Where the page shows the camera narrower than the camera is, its frames arrive at the width shown, rounded up
    to 64 px: fewer pixels to encode, send and decode; shown wider, as the camera gives it (its W = 320 px). The
    camera's box is made 200 px wide here: on a phone the camera fills the page's width, 500 px at the least in
    this browser, wider than this stack's camera."""
    from helpers.tabletop import W

    url, rollouts, output = stack
    shown = "const i = document.getElementById('camera'); return [i.naturalWidth, i.clientWidth * devicePixelRatio]"
    browser.get(url)
    wait_until(lambda: camera_shown(browser), 30, "the camera image", browser, "live_narrow_no_camera")
    browser.execute_script("document.getElementById('camera-box').style.width = '200px'")
    natural, width = wait_until(
        lambda: (got := browser.execute_script(shown))[0] == -(-got[1] // 64) * 64 and got,
        10,
        "a frame as wide as the narrow box shows it",
        browser,
        "live_narrow",
    )
    assert width <= natural < min(W, width + 64), (natural, width)
    browser.get(url)  # a new page: the box as wide as the layout makes it
    wait_until(lambda: browser.execute_script(shown)[0] == W, 30, "the camera's own width, shown wider", browser)


def test_the_live_view_pauses_while_another_clients_plan_is_answered(stack, browser):
    """A plan request from another node (the console hears of it from the plan service's introspection events): the
    page says the live view is paused and gets no frame until the planner answers, then frames flow again."""
    from grounded_planner.ros.client import GroundedPlannerClient
    from grounded_planner.vlm.fake_server import Reply

    url, rollouts, output = stack
    browser.get(url)
    wait_until(lambda: camera_shown(browser), 30, "the camera image", browser)

    def last_shown() -> float:
        return browser.execute_script("const s = window.gpShown; return s.length ? s[s.length - 1].shown_ms : 0")

    def paused() -> bool:
        return browser.execute_script("return !document.getElementById('camera-paused').hidden")

    assert not paused()
    release = threading.Event()
    VLM[0].script.append(Reply(release=release))  # the model answers this request once the page has been checked
    answers = []
    with graph_node() as (node, executor):
        client = GroundedPlannerClient(node, executor=executor)
        asking = threading.Thread(target=lambda: answers.append(client.plan(INSTRUCTION, timeout_s=30.0)))
        asking.start()
        try:
            wait_until(paused, 10, "the page to say the live view is paused", browser, "live_not_paused")
            time.sleep(0.5)  # a frame already on its way when the pause began may still land
            before = last_shown()
            time.sleep(1.5)
            assert last_shown() == before, "frames were shown while the planner answered"
            screenshot(browser, "live_paused")
        finally:
            release.set()
            asking.join(40)
    assert answers and answers[0].succeeded, client.last_error
    wait_until(lambda: not paused(), 10, "the pause note to go once the plan is answered", browser)
    shown = last_shown()
    wait_until(lambda: last_shown() > shown, 10, "frames again after the answer", browser, "live_not_resumed")


def test_a_rollout_path_leaving_the_folder_is_404_and_logged(stack, browser):
    url, rollouts, output = stack
    for query in ("id=..%2F..%2F..%2Fetc", "id=%2Fetc%2Fpasswd"):
        for path in ("api/rollout", "api/rollout/frame"):
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(f"{url}{path}?{query}", timeout=10)
            assert refused.value.code == 404
    browser.get(url + "rollout?id=../../etc")
    wait_until(
        lambda: browser.find_element("id", "rollout-title").text == "Rollout not found",
        10,
        "the rollout page to say not found",
        browser,
    )
    wait_until(lambda: output.text().count("leaves") >= 3, 10, "the refusals in the log")


def test_an_evaluation_session_card_by_card(stack, browser):
    url, rollouts, output = stack
    session = rollouts.parent
    reset_workcell()
    browser.get(url)
    wait_until(lambda: browser.find_element("id", "session-panel").is_displayed(), 20, "the session panel", browser)
    first = json.loads((session / "cards.jsonl").read_text().splitlines()[0])
    wait_until(
        lambda: first["trial_id"] in browser.find_element("id", "session-card").text, 10, "the first card", browser
    )
    assert browser.execute_script("return document.querySelector('#session-card img').naturalWidth") == 160
    browser.execute_script("document.getElementById('session-panel').scrollIntoView()")
    screenshot(browser, "session")
    click(browser, "#session-start")
    wait_until(
        lambda: browser.find_element("id", "instruction").get_attribute("value") == INSTRUCTION,
        10,
        "the card's instruction in the box",
        browser,
    )
    before = browser.find_element("id", "plan-title").text
    click(browser, "#plan-btn")
    wait_until(
        lambda: (
            browser.find_element("id", "plan-title").text not in ("", before)
            and [s[4] for s in rows(browser, "steps")] == ["ok", "ok"]
            and [s[5] for s in rows(browser, "steps")] == ["—", "—"]
        ),
        60,
        "the trial's plan",
        browser,
        "session_no_plan",
    )
    shown_before = labelled_rollout(browser)
    click(browser, "#approve-btn")
    wait_until(
        lambda: "succeeded" in browser.find_element("id", "decision-msg").text,
        90,
        "the trial to run",
        browser,
        "session_not_run",
    )
    wait_until(
        lambda: (
            labelled_rollout(browser) not in ("", shown_before)
            and "label from: simulator" in browser.find_element("css selector", "#live-label .label-info").text
        ),
        30,
        "the trial's rollout to be labelled",
        browser,
        "session_no_label",
    )
    click(browser, "#live-label button[data-outcome='true']")
    click(browser, "#live-label .save-label")
    wait_until(
        lambda: browser.find_element("id", "session-progress").text == "1/2",
        10,
        "the session to move on",
        browser,
        "session_not_moved",
    )
    second = json.loads((session / "cards.jsonl").read_text().splitlines()[1])
    assert second["trial_id"] in browser.find_element("id", "session-card").text
    screenshot(browser, "session_next")
    (line,) = [json.loads(x) for x in (session / "trials.jsonl").read_text().splitlines()]
    assert (line["trial_id"], line["success"], line["failure_mode"], line["outcome_source"]) == (
        first["trial_id"],
        True,
        None,
        "operator",
    )
    assert line["rollout"].startswith("rollouts/") and (session / line["rollout"] / "rollout.json").is_file()
    assert line["grasp_attempted"] is True and line["planner"] == "qwen3-vl-test" and line["wall_s"] > 0


def test_a_bad_line_in_trials_jsonl_is_shown_in_the_session_panel_until_it_is_fixed(browser, tmp_path):
    """The console's own server on a session whose trials.jsonl ends in half a line (a full disk): the panel says
    which line, in red, with no Run button; once the line is gone, the page opened again shows the next card."""
    session = tmp_path / "session"
    cards = make_cards(session, [("relational_placement", "id", 0), ("relational_placement", "ood", 1)])
    trials = session / "trials.jsonl"
    trials.write_text('{"trial_id": "' + cards[0]["trial_id"] + '", "task": "relat')
    with console_alone(tmp_path / "rollouts", session_dir=str(session)) as (_app, server):
        browser.get(server.url)
        wait_until(lambda: browser.find_element("id", "session-error").is_displayed(), 10, "the error", browser)
        error = browser.find_element("id", "session-error")
        assert "trials.jsonl line 1: not JSON" in error.text and "Fix or remove that line" in error.text
        colour = "return getComputedStyle(arguments[0]).color"
        red, text = (
            browser.execute_script(colour, error),
            browser.execute_script(colour, browser.find_element("tag name", "body")),
        )
        assert red != text and red.startswith("rgb(185,"), (red, text)  # console.css's .bad, not the text's colour
        assert browser.find_element("id", "session-progress").text == "?/2"
        assert not browser.find_elements("id", "session-start")
        browser.execute_script("document.getElementById('session-panel').scrollIntoView()")
        screenshot(browser, "session_error")
        trials.write_text("")
        browser.get(server.url)
        wait_until(
            lambda: cards[0]["trial_id"] in browser.find_element("id", "session-card").text,
            10,
            "the first card once the line is gone",
            browser,
            "session_error_fixed",
        )
        assert browser.find_element("id", "session-progress").text == "0/2"
        assert browser.find_elements("id", "session-start") and not browser.find_elements("id", "session-error")


def test_a_closed_loop_rollout_page_shows_every_attempt(stack, browser):
    """A rollout of the closed loop (a grasp that came up empty, re-grounded, then held) on its page: each try of each
    step with the check that judged it."""
    import numpy as np

    from grounded_planner.execution.closed_loop import Attempt
    from grounded_planner.rollout.record import RolloutRecorder

    url, rollouts, output = stack
    tries = [
        Attempt(step=0, attempt=1, plan_index=0, type="grasp", object="red cube", outcome="grasp_failed",
                check="grasp_failure", message="the gripper closed on nothing", duration_s=1.5, recovery="reground"),
        Attempt(step=0, attempt=2, plan_index=1, type="grasp", object="red cube", outcome="ok", check="ok",
                message="", duration_s=1.25),
    ]  # fmt: skip
    with RolloutRecorder(
        rollouts / "closed_loop_episode", instruction=INSTRUCTION, condition="closed_loop", fsync_every_s=None
    ) as rec:
        rec.log_color(np.full((48, 64, 3), 90, np.uint8))
        for attempt in tries:
            rec.log_attempt(attempt)
    browser.get(url + "rollout?id=closed_loop_episode")
    attempts = wait_until(lambda: rows(browser, "rollout-attempts"), 10, "the attempts table", browser, "no_attempts")
    assert attempts == [
        ["1", "1", "grasp_failure", "grasp_failed", "the gripper closed on nothing"],
        ["1", "2", "ok", "ok", ""],
    ]
    assert not browser.find_element("id", "rollout-attempts-empty").is_displayed()
    assert browser.find_element("id", "rollout-steps-empty").text == "No step ran."  # only attempts were logged


def test_an_empty_tally_says_so_until_the_first_episode_ends(browser, tmp_path):
    """The console's own server on an empty rollouts folder (a graph that answers at once: no bringup needed): the
    tally says there are no rollouts yet; once an episode is closed the tally counts it and the note goes."""
    rollouts = tmp_path / "rollouts"
    rollouts.mkdir()
    with console_alone(rollouts) as (app, server):
        browser.get(server.url)
        empty = browser.find_element("id", "tally-empty")
        wait_until(empty.is_displayed, 10, "the empty tally's note", browser, "tally_empty")
        assert "No rollouts yet" in empty.text and rows(browser, "tally") == []
        assert not browser.find_element("id", "reset-btn").is_displayed()  # no simulator said: no scene reset
        one_frame_rollout(rollouts / "first")
        app.on_rollout_closed(str(rollouts / "first"))
        wait_until(lambda: len(rows(browser, "tally")) == 1, 10, "the episode in the tally", browser, "tally_first")
        assert not empty.is_displayed()


def test_a_label_that_is_not_saved_says_why_on_the_panel_and_keeps_the_choice(browser, tmp_path):
    """The console's own server; the episode's rollout folder goes (moved away by hand, a disk unmounted) after the
    label panel showed it: the panel says in red that the label was not saved and why, not only in a passing toast,
    and the operator's choice stays to be saved again."""
    import shutil

    rollouts = tmp_path / "rollouts"
    rollouts.mkdir()
    with console_alone(rollouts) as (app, server):
        browser.get(server.url)
        one_frame_rollout(rollouts / "episode")
        app.on_rollout_closed(str(rollouts / "episode"))
        wait_until(lambda: labelled_rollout(browser) == "episode", 10, "the episode's label panel", browser)
        shutil.rmtree(rollouts / "episode")
        click(browser, "#live-label button[data-outcome='true']")
        click(browser, "#live-label .save-label")
        info = browser.find_element("css selector", "#live-label .label-info")
        wait_until(lambda: "label not saved:" in info.text, 10, "the refusal on the panel", browser, "label_not_saved")
        assert "episode" in info.text and "bad" in info.get_attribute("class").split()
        assert "chosen" in browser.find_element(
            "css selector", "#live-label button[data-outcome='true']"
        ).get_attribute("class")
        assert not browser.find_element("css selector", "#live-label .save-label").get_attribute("disabled")
        screenshot(browser, "label_not_saved")


@pytest.mark.parametrize("size", [(500, 900), (820, 1180)], ids=["phone", "tablet_upright"])
def test_on_a_phone_or_an_upright_tablet_stop_stays_on_screen_and_nothing_scrolls_sideways(size, tmp_path):
    """The console on a narrow screen (500 px, this browser's narrowest window, and an upright tablet's 820 px): one
    column, the camera on top; the STOP button whole on screen, also scrolled to the page's end (the header stays);
    no page scrolls sideways (a table wider than its panel scrolls inside it). The console's own server with a
    graph that answers at once, a rollout with a long instruction in the folder."""
    rollouts = tmp_path / "rollouts"
    one_frame_rollout(rollouts / "narrow", "put the red cube in the bowl left of the tallest mug")
    copies(rollouts / "narrow", 100)  # the rollouts list with its pager
    driver = chromium(*size)
    layout = """
        window.scrollTo(0, document.documentElement.scrollHeight);
        const stop = document.getElementById('stop-btn').getBoundingClientRect();
        const camera = document.getElementById('camera-box');
        return {sideways: document.documentElement.scrollWidth - document.documentElement.clientWidth,
                stop: [stop.left, stop.top, stop.right, stop.bottom], view: [innerWidth, innerHeight],
                camera: camera ? camera.getBoundingClientRect().width : 0};"""
    try:
        with console_alone(rollouts) as (_app, server):
            url = server.url
            for page in ("", "rollouts", "rollout?id=narrow"):
                driver.get(url + page)
                wait_until(
                    lambda: driver.find_element("id", "conn").text == "online",
                    10,
                    "the console",
                    driver,
                    "narrow_offline",
                )
                if page == "rollouts":
                    wait_until(lambda: rows(driver, "rollout-list"), 10, "the rollouts list", driver, "narrow_no_list")
                    assert driver.find_element("id", "rollouts-older").is_displayed()
                got = driver.execute_script(layout)
                name = f"narrow_{size[0]}_{page.split('?')[0] or 'live'}"
                screenshot(driver, name)
                assert got["sideways"] <= 0, (page, got)  # nothing scrolls sideways
                left, top, right, bottom = got["stop"]
                width, height = got["view"]
                assert 0 <= left and right <= width and 0 <= top and bottom <= height, (page, got)
                if page == "":  # one column: the camera as wide as the page, less its margins
                    assert got["camera"] >= width - 40, got
    finally:
        driver.quit()


def test_on_a_touch_screen_every_button_is_a_finger_wide(tmp_path):
    """On a touch screen (Chromium's touch emulation: the pointer is coarse, as on the operator's tablet) every button
    the live page, the rollouts list (its pager) and a rollout's page show, the label's failure modes included, and the instruction box are at
    least 44 px high and wide (WCAG 2.5.5): with a mouse they are 24-40 px high."""
    rollouts = tmp_path / "rollouts"
    one_frame_rollout(rollouts / "touch")
    copies(rollouts / "touch", 100)  # the rollouts list with its pager
    driver = chromium(820, 1180)
    sizes = """return Array.from(document.querySelectorAll('button, #instruction')).filter(b => b.offsetParent)
        .map(b => [b.id || b.textContent.trim(), b.getBoundingClientRect().width, b.getBoundingClientRect().height]);"""
    try:
        driver.execute_cdp_cmd("Emulation.setTouchEmulationEnabled", {"enabled": True, "maxTouchPoints": 5})
        with console_alone(rollouts) as (_app, server):
            url = server.url
            for page, expected in (("", "stop-btn"), ("rollout?id=touch", "refused"), ("rollouts", "rollouts-older")):
                driver.get(url + page)
                assert driver.execute_script("return matchMedia('(pointer: coarse)').matches")
                shown = wait_until(
                    lambda: (
                        (got := driver.execute_script(sizes)) and any(name == expected for name, _w, _h in got) and got
                    ),
                    10,
                    f"the buttons of {page or 'the live page'}",
                    driver,
                    "touch_no_buttons",
                )
                screenshot(driver, f"touch_{page.split('?')[0] or 'live'}")
                small = [(name, round(w), round(h)) for name, w, h in shown if w < 44 or h < 44]
                assert not small, small
    finally:
        driver.quit()


class ScriptedStopGraph(InstantGraph):
    """Test double of the console's graph (ConsoleGraph) whose STOP is scripted: it raises ``fails_with`` where set
    (as ConsoleNode.stop raises GraphError when no executor offers the action), else waits for ``release`` (the
    executor's cancel answering late) and reports a goal cancelled."""

    def __init__(self):
        self.fails_with: Exception | None = None
        self.release = threading.Event()

    def stop(self) -> bool:
        if self.fails_with is not None:
            raise self.fails_with
        self.release.wait(30)
        return True


def test_a_stop_the_console_does_not_confirm_stays_on_screen_with_its_reason(browser, tmp_path):
    """A STOP that fails (no executor), that the console has not answered after 2 s, or that cannot reach the console
    at all is said so in the header, which stays on screen, with the reason and the robot's own emergency stop, until
    a STOP is confirmed (a toast that fades is not enough for a STOP that did not happen)."""
    from grounded_planner.console.graph import GraphError
    from grounded_planner.ros import names

    graph = ScriptedStopGraph()
    graph.fails_with = GraphError.no_executor(names.EXECUTE_ACTION)
    alert, alert_text = "stop-alert", "stop-alert-text"
    with console_alone(tmp_path / "rollouts", graph) as (_app, server):
        browser.get(server.url)
        wait_until(lambda: browser.find_element("id", "conn").text == "online", 10, "the page online", browser)
        click(browser, "#stop-btn")
        wait_until(
            browser.find_element("id", alert).is_displayed, 10, "the failed STOP's alert", browser, "stop_failed"
        )
        text = browser.find_element("id", alert_text).text
        assert "STOP NOT CONFIRMED" in text and "502: no executor offers grounded_planner/execute" in text, text
        assert "emergency stop" in text, text
        # the alert is in the sticky header: on screen wherever the page is scrolled
        browser.execute_script("window.scrollTo(0, document.body.scrollHeight)")
        box = browser.execute_script(f"return document.getElementById('{alert}').getBoundingClientRect().toJSON()")
        assert box["top"] >= 0 and box["bottom"] <= browser.execute_script("return innerHeight"), box
        screenshot(browser, "stop_not_confirmed")

        graph.fails_with = None  # the next STOP's cancel answers only once released
        click(browser, "#stop-btn")
        wait_until(
            lambda: "no answer from the console after 2 s" in browser.find_element("id", alert_text).text,
            10,
            "the unanswered STOP said so",
            browser,
            "stop_unanswered",
        )
        assert browser.find_element("id", alert).is_displayed()
        graph.release.set()
        wait_until(
            lambda: not browser.find_element("id", alert).is_displayed(), 10, "the alert gone", browser, "stop_ok"
        )
        assert browser.find_element("id", "toast").text == "STOP: the running goal was cancelled"

        server.stop()  # the console is gone: the page's STOP cannot reach it
        click(browser, "#stop-btn")
        wait_until(browser.find_element("id", alert).is_displayed, 10, "the unreachable STOP's alert", browser)
        text = browser.find_element("id", alert_text).text
        assert "the console cannot be reached" in text and "emergency stop" in text, text


class FrameGraph(InstantGraph):
    """Test double of the console's graph (ConsoleGraph) with a camera the test turns on and off: while
    ``streaming`` is set, each ask gets a newer grey JPEG (20 a second at most), as the real graph's ``latest_frame``
    gives the newest image it took, or None when none came since ``after_seq``."""

    def __init__(self):
        import cv2
        import numpy as np

        self.streaming = threading.Event()
        self._jpeg = cv2.imencode(".jpg", np.full((48, 64, 3), 120, np.uint8))[1].tobytes()
        self._t0 = time.monotonic()
        self._last = 0

    def latest_frame(self, after_seq: int, width: int = 0, wanted=None):
        from grounded_planner.console.graph import Frame

        if self.streaming.is_set():
            self._last = max(self._last, int((time.monotonic() - self._t0) * 20))
        if self._last <= after_seq:
            return None
        return Frame(self._last, time.time_ns(), 64, 48, self._jpeg)


def test_a_camera_that_stops_is_said_so_on_the_image_and_a_paused_live_view_is_not(browser, tmp_path):
    """The live view keeps the last image when the camera stops: after 3 s with none newer the page says on the image
    that the camera may have stopped and the image is old, and stops saying so when images come again. While the live
    view is paused for the planner no image is expected, and none is flagged missing."""
    graph = FrameGraph()
    graph.streaming.set()
    stale = "camera-stale"
    with console_alone(tmp_path / "rollouts", graph) as (app, server):
        browser.get(server.url)
        wait_until(
            lambda: browser.execute_script("return window.gpShown.length") > 5, 10, "frames shown", browser, "no_frames"
        )
        graph.streaming.clear()  # the camera died
        wait_until(browser.find_element("id", stale).is_displayed, 10, "the stale camera said so", browser, "no_stale")
        text = browser.find_element("id", stale).text
        assert re.fullmatch(r"no new camera image for [3-9] s: the camera may have stopped, this image is old", text)
        screenshot(browser, "camera_stale")
        graph.streaming.set()
        wait_until(lambda: not browser.find_element("id", stale).is_displayed(), 10, "the note gone", browser)

        request = object()  # another client's plan request: the live view pauses, and no frame comes meanwhile
        graph.streaming.clear()
        app.plan_requests.started(request)
        paused = browser.find_element("id", "camera-paused")
        wait_until(paused.is_displayed, 10, "the live view paused", browser, "not_paused")
        time.sleep(4.0)  # longer than a stopped camera takes to be flagged
        assert paused.is_displayed() and not browser.find_element("id", stale).is_displayed()
        app.plan_requests.answered(request)  # the pause ends, and still no image comes: flagged again
        wait_until(browser.find_element("id", stale).is_displayed, 10, "the stale camera after the pause", browser)
        assert not paused.is_displayed()


def test_an_executor_that_left_the_graph_is_shown_gone_in_red_until_it_is_back(browser, tmp_path):
    """What the console's state says of an executor that left (test_console_node.py kills a real one) reaches the
    page: the header's badge and the executor's line say GONE, in red, with the reason, and the simulator's Reset scene
    is hidden; back, they say idle."""
    with console_alone(tmp_path / "rollouts") as (app, server):
        browser.get(server.url)
        badge, line = browser.find_element("id", "exec-badge"), browser.find_element("id", "executor-state")
        wait_until(lambda: badge.text == "executor: idle", 10, "the page's first state", browser)
        reset = browser.find_element("id", "reset-btn")
        app.state.on_executor_backend("sim")
        wait_until(reset.is_displayed, 10, "Reset scene offered by a simulator", browser)
        app.state.on_executor_presence(False)
        wait_until(lambda: badge.text == "executor: gone", 10, "the executor shown gone", browser, "executor_gone")
        assert not reset.is_displayed()  # no executor to reset a scene: no button a click would fail on
        assert "gone" in badge.get_attribute("class").split()
        assert line.text == "GONE: the executor left the graph: nothing can run until it is back"
        assert line.get_attribute("class") == "bad"
        red = browser.execute_script("return getComputedStyle(arguments[0]).backgroundColor", badge)
        assert red == "rgb(185, 28, 28)", red  # --bad
        app.state.on_executor_presence(True)
        wait_until(lambda: badge.text == "executor: idle", 10, "the executor shown back", browser, "executor_back")
        assert line.text == "idle — the executor is back" and line.get_attribute("class") == ""


class OneStepGraph(InstantGraph):
    """Test double of the console's graph (ConsoleGraph) that answers every instruction at once with a one-step plan
    the envelope passes, so the page's Approve is on; nothing is sent to an executor (``require_approval`` off, and
    the test never approves)."""

    def plan(self, instruction: str, timeout_s: float, sent):
        from grounded_planner.console.graph import PlanAnswer, StepPreview

        sent()
        plan = {
            "instruction": instruction,
            "image_size": [64, 48],
            "actions": [{"type": "grasp", "object": "cube", "bbox": [10, 10, 30, 30]}],
        }
        return PlanAnswer(True, "", plan, [StepPreview(0, "grasp", object="cube", verdict="ok")], 0.01)


def test_while_the_console_cannot_be_reached_approve_is_off_and_a_restarted_console_s_page_keeps_no_old_plan(
    browser, tmp_path
):
    """The page's view of a plan may be out of date while its push channel is down: Approve and Reject are off and
    the page says why. A console started again on the same address knows no earlier plan, and the page, back
    online, shows none (no title, no steps, no decision) rather than the old one."""
    from grounded_planner.console.app import ConsoleApp
    from grounded_planner.console.server import ConsoleServer

    with console_alone(tmp_path / "rollouts", OneStepGraph()) as (_app, server):
        browser.get(server.url)
        plan_in(browser, "pick up the cube")
        approve = browser.find_element("id", "approve-btn")
        wait_until(approve.is_enabled, 10, "Approve on for the plan", browser, "offline_no_plan")
        port = server.port
        server.stop()  # the console went (a crash, a restart)
        wait_until(lambda: not approve.is_enabled(), 10, "Approve off while offline", browser, "offline_approve_on")
        assert not browser.find_element("id", "reject-btn").is_enabled()
        assert browser.find_element("id", "exec-badge").text == "executor: ?"  # no longer known: not "idle"
        message = browser.find_element("id", "plan-message").text
        assert message.startswith("offline: the console cannot be reached"), message
        colour = browser.find_element("id", "plan-message").value_of_css_property("color")
        assert colour == "rgba(185, 28, 28, 1)", colour  # --bad: said in red, not as the muted hint
        screenshot(browser, "offline")
        again = ConsoleServer(ConsoleApp(OneStepGraph(), rollouts_dir=tmp_path / "rollouts"), "127.0.0.1", port).start()
        try:
            wait_until(lambda: browser.find_element("id", "conn").text == "online", 15, "the page back online", browser)
            wait_until(
                lambda: browser.find_element("id", "plan-message").text.startswith("Type an instruction"),
                10,
                "no plan shown once back",
                browser,
                "offline_old_plan",
            )
            assert browser.find_element("id", "plan-title").text == "" and rows(browser, "steps") == []
            assert not approve.is_enabled()
        finally:
            again.stop()


def test_a_campaign_s_rollouts_are_listed_a_page_at_a_time_and_the_page_stays_in_the_address(browser, tmp_path):
    """A campaign's rollouts folder (250 rollouts, every tenth a failure): the list shows 100 rows at a time, newest
    first, with how many there are; older and newer move by a page, the page stays in the address (a reload keeps
    it), a filter starts again at its first page with no pager when one page holds it, "all" lifts the filter the
    address had, and a page past the end shows the last one."""
    import shutil

    from selenium.webdriver.support.ui import Select

    rollouts = tmp_path / "rollouts"
    one_frame_rollout(rollouts / "r000")
    for k in range(250):
        folder = rollouts / f"r{k:03d}"
        if k:
            shutil.copytree(rollouts / "r000", folder)
        data = json.loads((folder / "rollout.json").read_text())
        failed = k % 10 == 0
        data.update(task="pick", success=not failed, failure_mode="grasp_failure" if failed else None)
        (folder / "rollout.json").write_text(json.dumps(data))

    def shown() -> tuple[str, str, list[str]]:
        pager = browser.find_element("id", "rollout-pager")
        return (
            browser.find_element("id", "rollout-count").text,
            browser.find_element("id", "rollout-page").text if pager.is_displayed() else "",
            browser.execute_script(
                "return Array.from(document.querySelectorAll('#rollout-list tbody a'))"
                ".map(a => new URL(a.href).searchParams.get('id'))"
            ),
        )

    def showing(count: str, page: str, first: str, n: int, what: str) -> None:
        wait_until(lambda: shown()[:2] == (count, page) and shown()[2][:1] == [first], 10, what, browser)
        assert len(shown()[2]) == n, shown()

    with console_alone(rollouts) as (_app, server):
        browser.get(server.url + "rollouts")
        showing("1–100 of 250 rollouts", "page 1 of 3", "r249", 100, "the first page, newest first")
        assert shown()[2][-1] == "r150"
        assert not browser.find_element("id", "rollouts-newer").is_enabled()
        screenshot(browser, "rollouts_paged")
        click(browser, "#rollouts-older")
        showing("101–200 of 250 rollouts", "page 2 of 3", "r149", 100, "the second page")
        assert browser.current_url.endswith("/rollouts?page=2")
        browser.get(browser.current_url)  # a reload (or the address sent to a colleague) opens the same page
        showing("101–200 of 250 rollouts", "page 2 of 3", "r149", 100, "the second page after a reload")
        click(browser, "#rollouts-older")
        showing("201–250 of 250 rollouts", "page 3 of 3", "r049", 50, "the last page")
        assert not browser.find_element("id", "rollouts-older").is_enabled()
        Select(browser.find_element("id", "f-outcome")).select_by_value("failure")
        showing("25 rollout(s)", "", "r240", 25, "the failures, on one page and no pager")
        assert browser.current_url.endswith("/rollouts?outcome=failure")
        Select(browser.find_element("id", "f-outcome")).select_by_value("")
        showing("1–100 of 250 rollouts", "page 1 of 3", "r249", 100, "every rollout again, the filter lifted")
        assert browser.current_url.endswith("/rollouts")
        browser.get(server.url + "rollouts?task=pick&page=9")
        showing("201–250 of 250 rollouts", "page 3 of 3", "r049", 50, "a page past the end: the last one")
        assert browser.current_url.endswith("/rollouts?task=pick&page=3")


class CountingStopGraph(InstantGraph):
    """Test double of the console's graph (ConsoleGraph) that counts its STOPs and reports a goal cancelled, as
    ConsoleNode.stop does when the executor cancels one."""

    def __init__(self):
        self.stops = 0

    def stop(self) -> bool:
        self.stops += 1
        return True


def test_escape_is_stop_on_every_page_even_while_an_instruction_is_typed(browser, tmp_path):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    graph = CountingStopGraph()
    with console_alone(tmp_path / "rollouts", graph) as (_app, server):
        browser.get(server.url)
        wait_until(lambda: browser.find_element("id", "conn").text == "online", 10, "the page online", browser)
        box = browser.find_element(By.ID, "instruction")
        box.send_keys("put the red blo")
        box.send_keys(Keys.ESCAPE)
        wait_until(lambda: graph.stops == 1, 10, "the STOP from Esc in the instruction box", browser, "esc_typing")
        # the graph heard the STOP before the page read the answer: the toast comes a moment later
        wait_until(
            lambda: browser.find_element(By.ID, "toast").text == "STOP: the running goal was cancelled",
            10,
            "the STOP's answer on the page",
            browser,
            "esc_typing_answer",
        )
        assert box.get_attribute("value") == "put the red blo"  # what was typed stays
        browser.get(server.url + "rollouts")  # another page, the focus on nothing in particular
        wait_until(lambda: browser.find_element("id", "conn").text == "online", 10, "the rollouts page", browser)
        ActionChains(browser).send_keys(Keys.ESCAPE).perform()
        wait_until(lambda: graph.stops == 2, 10, "the STOP from Esc on the rollouts page", browser, "esc_rollouts")
        ActionChains(browser).send_keys("x").perform()  # any other key is not STOP
        time.sleep(0.5)
        assert graph.stops == 2
