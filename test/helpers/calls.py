"""Replacing a library call a command makes with a recorder: what a command-line test checks is what the command
hands on (the settings its flags became), not what the library then does with them (tested where it lives)."""

from __future__ import annotations


def record_calls(monkeypatch, where: str, result=None, error: Exception | None = None) -> list:
    """Replace the callable at ``where`` (a dotted path) with one that notes ``(args, kwargs)`` of each call and
    returns ``result``, or raises ``error`` (a refusal the command handles, to end it there)."""
    calls: list = []

    def record(*args, **kwargs):
        calls.append((args, kwargs))
        if error is not None:
            raise error
        return result

    monkeypatch.setattr(where, record)
    return calls
