"""Several servers of the same model behind one backend: least-outstanding routing, failover, per-server counts.

vLLM and SGLang scale by running more servers; a client that talks to one of them leaves the rest idle. The
pool sends each request to the live server with the fewest requests in flight, and when a server cannot be
reached, times out or answers 429/5xx/garbage, it marks that server down for a while and sends the same
request to the next one. Only when every server has failed in a round does it back off and try another round
(``max_retries`` extra rounds, as a single backend retries), never past the request's deadline (the planner's
``timeout_s``): a server is not marked down for time the request no longer had. A request the server *rejects* (4xx: bad model
name, payload too large) is not retried elsewhere: every server of the same model would reject it too.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from grounded_planner.errors import InputError
from grounded_planner.vlm.backends.base import MAX_BACKOFF_S, VLMBackend, VLMRequest
from grounded_planner.vlm.errors import VLMProtocolError, VLMTimeoutError, VLMUnavailableError

log = logging.getLogger(__name__)
# How long a server that failed is skipped (doubles per consecutive failure, up to the cap); after that one
# request probes it again, so a restarted server comes back into rotation on its own.
DOWN_FOR_S = 2.0
MAX_DOWN_FOR_S = 30.0


@dataclass
class ServerState:
    """Book-keeping for one server of the pool."""

    backend: VLMBackend
    url: str
    in_flight: int = 0  # requests sent and not answered yet
    served: int = 0  # requests it answered
    failed: int = 0  # requests that failed on it (then retried elsewhere)
    consecutive_failures: int = 0
    down_until: float = 0.0  # monotonic time before which it is skipped
    last_error: str = ""


class ServerPool(VLMBackend):
    """One backend over several servers of the same model.

    Parameters
    ----------
    backends : sequence of VLMBackend
        One per server, each built with no retries of its own (the pool retries across servers).
    max_retries : int
        Extra rounds over all servers after every server failed in a round.
    retry_backoff_s : float
        Wait before the second round; doubles per round, capped at ``MAX_BACKOFF_S``.
    """

    name = "openai"  # what the servers speak; the response cache key uses it

    def __init__(
        self,
        backends: Sequence[VLMBackend],
        max_retries: int = 2,
        retry_backoff_s: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ):
        if not backends:
            raise InputError("a server pool needs at least one backend")
        models = {b.model for b in backends}
        if len(models) != 1:
            raise InputError(f"a server pool serves one model, got {sorted(models)}")
        super().__init__(backends[0].model)
        self.servers = [
            ServerState(b, str(getattr(b, "base_url", "") or f"server {i}")) for i, b in enumerate(backends)
        ]
        if len({s.url for s in self.servers}) != len(self.servers):
            raise InputError(f"a server pool needs distinct servers, got {[s.url for s in self.servers]}")
        # The pool's identity in the response cache: the same set of servers of one model, in any order.
        self.base_url = " ".join(sorted(s.url for s in self.servers))
        self.max_retries = int(max_retries)
        self.retry_backoff_s = float(retry_backoff_s)
        self._sleep, self._clock = sleep, clock
        self._lock = threading.Lock()
        self._turn = 0  # breaks ties between equally loaded servers, round robin

    # -- routing --------------------------------------------------------------------------------------
    def _pick(self, exclude: set[int]) -> int | None:
        """Index of the server for the next try: live ones by fewest in flight; if all are down, the one back
        soonest (a pool never refuses to try). None when every server was tried this round."""
        now = self._clock()
        with self._lock:
            candidates = [i for i in range(len(self.servers)) if i not in exclude]
            if not candidates:
                return None
            live = [i for i in candidates if self.servers[i].down_until <= now]
            n = len(self.servers)
            if live:
                best = min(live, key=lambda i: (self.servers[i].in_flight, (i - self._turn) % n))
            else:
                best = min(candidates, key=lambda i: self.servers[i].down_until)
            self._turn = (best + 1) % n
            self.servers[best].in_flight += 1
            return best

    def _done(self, index: int, error: Exception | None, counted: bool = True) -> None:
        with self._lock:
            state = self.servers[index]
            state.in_flight -= 1
            if not counted:
                return
            if error is None:
                state.served += 1
                state.consecutive_failures = 0
                state.down_until = 0.0
                return
            state.failed += 1
            state.consecutive_failures += 1
            state.last_error = f"{type(error).__name__}: {error}"[:300]
            down = min(MAX_DOWN_FOR_S, DOWN_FOR_S * 2 ** (state.consecutive_failures - 1))
            state.down_until = self._clock() + down

    def generate(self, request: VLMRequest) -> str:
        last: Exception | None = None

        def out_of_time(wait: float = 0.0) -> None:
            if request.deadline is not None and time.monotonic() + wait >= request.deadline:
                raise VLMTimeoutError(
                    f"no server of model {self.model!r} answered within the request's timeout_s; last error: {last}"
                ) from last

        for round_ in range(self.max_retries + 1):
            if round_:
                wait = min(MAX_BACKOFF_S, self.retry_backoff_s * 2 ** (round_ - 1))
                out_of_time(wait)
                log.warning(
                    "every server of the pool failed (last: %s); round %d/%d in %.2f s",
                    last,
                    round_ + 1,
                    self.max_retries + 1,
                    wait,
                )
                self._sleep(wait)
            tried: set[int] = set()
            while True:
                out_of_time()  # before a server is picked: none is to blame for the request's deadline
                index = self._pick(tried)
                if index is None:
                    break
                tried.add(index)
                state = self.servers[index]
                try:
                    answer = state.backend.generate(request)
                except (VLMUnavailableError, VLMProtocolError) as exc:  # dead, overloaded, timed out or garbled
                    self._done(index, exc)
                    last = exc
                    if len(tried) < len(self.servers):
                        log.warning("%s failed (%s); sending the request to another server", state.url, exc)
                    continue
                except BaseException:  # a rejected request (4xx) is the request's fault, not the server's
                    self._done(index, None, counted=False)
                    raise
                self._done(index, None)
                return answer
        raise VLMUnavailableError(
            f"all {len(self.servers)} servers of model {self.model!r} failed "
            f"{self.max_retries + 1} round(s); last error: {last}"
        ) from last

    # -- reporting ------------------------------------------------------------------------------------
    def server_counts(self) -> dict[str, dict[str, int | str]]:
        """Per server URL: requests ``served`` and ``failed`` (and the last error, when one failed)."""
        with self._lock:
            out: dict[str, dict[str, int | str]] = {}
            for s in self.servers:
                out[s.url] = {"served": s.served, "failed": s.failed}
                if s.last_error:
                    out[s.url]["last_error"] = s.last_error
            return out

    def seen_size(self, sent_size: tuple[int, int]) -> tuple[int, int]:
        return self.servers[0].backend.seen_size(sent_size)

    def close(self) -> None:
        for s in self.servers:
            s.backend.close()


def server_counts(planner) -> dict[str, dict[str, int | str]]:
    """Requests each server answered for ``planner`` (any planner: a single server counts as a pool of one)."""
    counts: dict[str, dict[str, int | str]] = {}
    grounder = getattr(getattr(planner, "grounder", None), "planner", None)  # the decoupled mode's VLM grounder
    for each in (planner, grounder):
        backend = getattr(each, "backend", None)
        if isinstance(backend, ServerPool):
            merge_counts(counts, backend.server_counts())
        elif getattr(backend, "base_url", "") and hasattr(each, "stats"):  # one server: the planner counted
            merge_counts(counts, {backend.base_url: {"served": each.stats.requests, "failed": 0}})
    return counts


def merge_counts(total: dict[str, dict[str, int | str]], part: dict[str, dict[str, int | str]]) -> None:
    """Add ``part`` (from one worker) into ``total`` in place."""
    for url, c in part.items():
        merged = total.setdefault(url, {"served": 0, "failed": 0})
        merged["served"] = int(merged["served"]) + int(c.get("served", 0))
        merged["failed"] = int(merged["failed"]) + int(c.get("failed", 0))
        if c.get("last_error"):
            merged["last_error"] = c["last_error"]


def served_line(counts: dict[str, dict[str, int | str]]) -> str:
    """One line for the end of a run: how many requests each server answered (and failed)."""
    parts = [
        f"{url} {c['served']}" + (f" ({c['failed']} failed)" if c.get("failed") else "") for url, c in counts.items()
    ]
    return "requests served per server: " + ", ".join(parts)
