"""The backend interface (one chat request with an image -> raw text) and the shared retry loop."""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Callable, TypeVar

from grounded_planner.errors import RunFailure
from grounded_planner.vlm.errors import VLMTimeoutError, VLMUnavailableError
from grounded_planner.vlm.image import EncodedImage

log = logging.getLogger(__name__)
T = TypeVar("T")
# Longest single wait between retries, whatever a server's Retry-After says.
MAX_BACKOFF_S = 8.0


@dataclass
class VLMRequest:
    """One chat request.

    ``messages`` are ``{"role": "system" | "user" | "assistant", "content": str}``; the image belongs to the
    first user message.
    """

    messages: list[dict[str, str]]
    image: EncodedImage | None = None
    max_tokens: int = 1024
    temperature: float = 0.0
    json_mode: bool = False  # the answer must be one JSON object (servers that support it enforce it)
    extra: dict = field(default_factory=dict)
    # time.monotonic() by which the whole plan request must be answered (the planner's timeout_s, shared by its
    # repair re-prompts and retries); None: each try has the backend's own timeout_s
    deadline: float | None = None

    def time_left(self, timeout_s: float, what: str) -> float:
        """Seconds one try may take: ``timeout_s``, cut to what is left before ``deadline``; raises
        VLMTimeoutError naming ``what`` when nothing is left."""
        if self.deadline is None:
            return timeout_s
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise VLMTimeoutError(f"{what}: the request's time (timeout_s) ran out before this try")
        return min(timeout_s, left)


class VLMBackend(ABC):
    """A model that answers chat requests with text."""

    name = "base"

    def __init__(self, model: str):
        self.model = model

    @abstractmethod
    def generate(self, request: VLMRequest) -> str:
        """Return the model's raw answer; raise a ``VLMError`` subclass on failure (never hang)."""

    def seen_size(self, sent_size: tuple[int, int]) -> tuple[int, int]:
        """(width, height) of the image as the model saw it, for an image sent at ``sent_size``.

        Pixel-convention answers refer to this size. Servers are sent the image as is; an in-process
        processor may resize it further.
        """
        return tuple(sent_size)

    def close(self) -> None:  # noqa: B027 - optional: most backends hold nothing to release
        """Release connections or memory."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class RetryableError(RunFailure):
    """Raised inside a retry loop for a failure worth another try (429, 5xx, connection lost)."""

    def __init__(self, message: str, retry_after_s: float | None = None):
        super().__init__(message)
        self.retry_after_s = retry_after_s


def retry_call(
    fn: Callable[[], T],
    *,
    max_retries: int,
    backoff_s: float,
    what: str,
    sleep: Callable[[float], None] = time.sleep,
    deadline: float | None = None,
) -> T:
    """Call ``fn``; on RetryableError wait (exponential backoff, Retry-After honoured) and try again.

    After ``max_retries`` extra tries the last failure becomes a VLMUnavailableError naming ``what``; when the
    wait would pass ``deadline`` (time.monotonic()), a VLMTimeoutError naming the last failure, at once.
    Other exceptions pass through at once.
    """
    attempt = 0
    while True:
        try:
            return fn()
        except RetryableError as exc:
            if attempt >= max_retries:
                raise VLMUnavailableError(f"{what}: {exc} (after {attempt + 1} tries)") from exc
            wait = backoff_s * (2**attempt)
            if exc.retry_after_s is not None:
                wait = max(wait, exc.retry_after_s)
            wait = min(wait, MAX_BACKOFF_S)
            if deadline is not None and time.monotonic() + wait >= deadline:
                raise VLMTimeoutError(
                    f"{what}: {exc} (after {attempt + 1} tries; no time left for another within "
                    "the request's timeout_s)"
                ) from exc
            log.warning("%s: %s; retry %d/%d in %.2f s", what, exc, attempt + 1, max_retries, wait)
            sleep(wait)
            attempt += 1
