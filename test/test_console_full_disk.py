"""The console's label and evaluation-session trial on a real full disk: two small tmpfs mounts in a user+mount
namespace (``unshare -rm``, test/helpers/tmpfs.py; skipped with the reason where the machine does not permit it), one
for the rollouts folder and one for the session folder, each filled to its last byte in turn.

- rollouts full: the label is refused with 507 naming the disk's error, rollout.json keeps the stack's own label, and
  the trial stays running;
- session full, with trials.jsonl's last page 100 bytes short of full (blank lines, which readers skip), so the
  kernel takes part of the trial's line and then refuses: the label is saved, the trial is not recorded and the
  answer says why, and trials.jsonl is as it was (no half line);
- space again: the label saved again records the trial.

The console runs in the namespace's own process (its web app on aiohttp's test server; the graph is
test_console_app's RecordingGraph, a test double that answers the trial's plan and Approve) and prints what it saw as
one JSON line."""

from __future__ import annotations

import errno
import textwrap
from pathlib import Path

import pytest

from helpers.tmpfs import run_in_namespace

pytest.importorskip("aiohttp")
REPO = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent("""
    import asyncio, json, os, subprocess, sys
    import numpy as np
    sys.path.insert(0, sys.argv[2])
    from aiohttp.test_utils import TestClient, TestServer
    from helpers.spabench_cards import make_cards
    from test_console_app import RecordingGraph
    from grounded_planner.console.app import ConsoleApp
    from grounded_planner.rollout.record import RolloutRecorder

    out = sys.argv[1]
    mounts = {}
    for name in ("session", "rollouts"):
        mounts[name] = os.path.join(out, name)
        os.makedirs(mounts[name])
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", mounts[name]], check=True)
    session, rollouts = mounts["session"], mounts["rollouts"]
    cards = make_cards(__import__("pathlib").Path(session) / "cards", [("relational_placement", "id", 0)])
    session = os.path.join(session, "cards")
    trials = os.path.join(session, "trials.jsonl")
    with open(trials, "w") as f:  # blank lines (readers skip them) up to 100 bytes short of a page
        f.write("\\n" * (4096 - 100))
    episode = os.path.join(rollouts, "trial0")
    with RolloutRecorder(episode, instruction=cards[0]["instruction"], fsync_every_s=None) as rec:
        rec.log_color(np.full((24, 32, 3), 120, np.uint8))
        rec.set_label(True, None, source="simulator")

    def fill(folder):
        path = os.path.join(folder, "filler")
        with open(path, "wb", buffering=0) as f:
            for chunk in (b"x" * 4096, b"x"):
                try:
                    while True:
                        f.write(chunk)
                except OSError:
                    pass
        return path

    def label_source():
        return json.load(open(os.path.join(episode, "rollout.json"))).get("label_source")

    notes = []
    app = ConsoleApp(RecordingGraph(), rollouts_dir=rollouts, session_dir=session, note=notes.append)
    report = {}

    async def main():
        async with TestClient(TestServer(app.make_app())) as client:
            started = await client.post("/api/session/start", json={"trial_id": cards[0]["trial_id"]})
            report["started"] = started.status
            plan = (await (await client.post("/api/plan", json={"instruction": cards[0]["instruction"]})).json())
            approved = await client.post("/api/decision", json={"plan_id": plan["plan"]["id"], "approve": True})
            report["approved"] = approved.status
            app.on_rollout_closed(episode)  # the trial's episode, recorded above, closed after its Approve
            label = {"rollout": "trial0", "success": False, "failure_mode": "wrong_object"}
            filler = fill(rollouts)
            answer = await client.post("/api/label", json=label)
            report["rollouts_full"] = [answer.status, answer.content_type, (await answer.json()).get("error")]
            report["label_source_after_refusal"] = label_source()
            os.remove(filler)
            trials_before = open(trials, "rb").read()
            filler = fill(mounts["session"])
            answer = await (await client.post("/api/label", json=label)).json()
            report["session_full"] = [answer.get("trial"), answer.get("trial_error")]
            report["label_source_saved"] = label_source()
            report["trials_unchanged"] = open(trials, "rb").read() == trials_before
            os.remove(filler)
            answer = await (await client.post("/api/label", json=label)).json()
            report["space_again"] = [(answer.get("trial") or {}).get("trial_id"), answer.get("trial_error")]
            report["trial_ids"] = [json.loads(x)["trial_id"] for x in open(trials) if x.strip()]

    asyncio.run(main())
    report["notes"] = notes
    report["card"] = cards[0]["trial_id"]
    print("REPORT " + json.dumps(report))
""")


def test_a_full_disk_refuses_the_label_or_the_trial_with_the_reason_and_leaves_no_half_line(tmp_path):
    report, _ = run_in_namespace(SCRIPT, tmp_path, str(REPO / "test"))
    card = report["card"]
    assert report["started"] == 200 and report["approved"] == 200, report
    status, content_type, error = report["rollouts_full"]
    assert (status, content_type) == (507, "application/json")
    assert error.startswith(f"rollout trial0: [Errno {errno.ENOSPC}] No space left on device"), error
    assert report["label_source_after_refusal"] == "simulator"  # rollout.json as it was
    trial, trial_error = report["session_full"]
    assert trial is None and trial_error.startswith(f"trial {card} not recorded:"), report
    assert f"[Errno {errno.ENOSPC}]" in trial_error and "trials.jsonl" in trial_error
    assert report["label_source_saved"] == "human" and report["trials_unchanged"]
    assert report["space_again"] == [card, None] and report["trial_ids"] == [card]
    assert any(n.startswith("label of rollout trial0 from 127.0.0.1 not saved:") for n in report["notes"])
    assert any(n.startswith(f"trial {card} not recorded:") for n in report["notes"])
