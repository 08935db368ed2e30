"""Threads and processes as the operating system sees them: libc's ``prctl``, and threads named for it.

A Python thread's ``name`` stays inside Python: before 3.14, every thread of a process shows in ``top -H``,
``/proc/PID/task/TID/comm`` and py-spy under the process's own name ("python"). A node whose CPU is measured thread by
thread (``benchmarks/bench_console.py`` reads ``comm`` for each of the console's threads) names its threads here.
"""

from __future__ import annotations

import ctypes
import threading

PR_SET_PDEATHSIG = 1  # linux/prctl.h
PR_SET_NAME = 15
TASK_COMM_LEN = 16  # the kernel keeps 15 bytes of a task's name and the terminating NUL


def _libc_prctl():
    try:
        return ctypes.CDLL(None).prctl
    except (OSError, AttributeError):  # not Linux
        return None


# libc's prctl, None where there is none. Looked up once, at import: a forked child may call it before it runs its
# program, but must not look anything up then (no import, no lock).
PRCTL = _libc_prctl()


def name_native_thread(name: str | None = None) -> None:
    """(in the thread to be named) Give the calling thread ``name`` (default: its Python name) as the kernel's name of
    the task, cut to the 15 bytes Linux keeps. Where there is no prctl nothing happens: the name is for people and
    tools reading the process, never needed to run."""
    if PRCTL is None:
        return
    text = (name if name is not None else threading.current_thread().name).encode("utf-8", "replace")
    PRCTL(PR_SET_NAME, ctypes.c_char_p(text[: TASK_COMM_LEN - 1]), 0, 0, 0)
