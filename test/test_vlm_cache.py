"""The on-disk response cache: keys follow every part of a request; concurrent writers never corrupt an entry."""

from __future__ import annotations

import threading

from grounded_planner.vlm.cache import ResponseCache, cache_key


def test_key_changes_with_every_part():
    base = dict(backend="openai", model="m", messages=[{"role": "user", "content": "hi"}], image="abc", max_tokens=10)
    key = cache_key(**base)
    assert key == cache_key(**dict(reversed(list(base.items()))))  # order of arguments does not matter
    for name, other in (("backend", "gemini"), ("model", "n"), ("messages", []), ("image", "abd"), ("max_tokens", 11)):
        assert cache_key(**{**base, name: other}) != key, name


def test_concurrent_writers_of_one_key(tmp_path):
    cache = ResponseCache(tmp_path)
    key = cache_key(x=1)
    errors = []

    def write(i):
        try:
            for _ in range(30):
                cache.put(key, f"answer {i}")
                assert cache.get(key).startswith("answer ")
        except Exception as exc:  # collected: a failure in a thread must fail the test
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert cache.get(key).startswith("answer ")
    assert not list(tmp_path.rglob("*.tmp"))
