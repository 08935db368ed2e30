"""fileio.append_line, the one append of trials.jsonl's three writers (`spabench run`, `spabench session`, the
console's evaluation session): a file whose last line lost its newline (an editor that strips it) must not have the
next trial run into that line, which would make both unreadable to `spabench report`."""

from __future__ import annotations

import json

from grounded_planner.fileio import append_line
from grounded_planner.spabench.report import load_trials, trials_path
from helpers.spabench_cards import trial_record


def trial(seed: int) -> str:
    record = trial_record("relational_placement", "id", seed, "put the red cube in the tray", planner="p")
    return json.dumps({**record.to_dict(), "success": True})


def test_a_line_appended_after_a_last_line_with_no_newline_is_a_line_of_its_own(tmp_path):
    path = trials_path(tmp_path)
    path.write_text(trial(0))  # its newline stripped by an editor
    written = append_line(path, trial(1))
    assert written == len(trial(1)) + 2  # the newline the last line lacked, then the line and its own
    assert [r["seed"] for r in load_trials(tmp_path)] == [0, 1]
    assert path.read_text().endswith("\n")


def test_a_first_line_starts_the_file_and_the_next_follows_it_with_nothing_between(tmp_path):
    path = trials_path(tmp_path)
    assert append_line(path, trial(0)) == len(trial(0)) + 1
    assert append_line(path, trial(1)) == len(trial(1)) + 1
    assert path.read_text() == trial(0) + "\n" + trial(1) + "\n"


# A write the kernel cuts short: RLIMIT_FSIZE lets write(2) take the bytes up to the limit and return that short count,
# then refuses the next write with EFBIG, as a full disk does with ENOSPC (SIGXFSZ ignored, as a process that handles
# its errors does). A process of its own, so the limit binds nothing else.
CUT_SHORT = """
import json, os, resource, signal, sys
from grounded_planner.fileio import append_line
path, line = sys.argv[1], sys.argv[2]
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
limit = os.path.getsize(path) + 10  # room for ten bytes of the line
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
try:
    append_line(path, line)
    print(json.dumps({"raised": None}))
except OSError as exc:
    print(json.dumps({"raised": exc.errno}))
"""


def test_a_line_the_file_system_cuts_short_is_not_left_half_written(tmp_path):
    import errno
    import subprocess
    import sys

    path = trials_path(tmp_path)
    append_line(path, trial(0))
    before = path.read_bytes()
    run = subprocess.run(
        [sys.executable, "-c", CUT_SHORT, str(path), trial(1)], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["raised"] == errno.EFBIG
    assert path.read_bytes() == before  # the ten bytes written are gone: no half line for the next reader
    append_line(path, trial(1))  # with room again (no limit here)
    assert [r["seed"] for r in load_trials(tmp_path)] == [0, 1]
