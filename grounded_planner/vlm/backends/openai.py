"""OpenAI-compatible chat-completions backend (vLLM, SGLang, Ollama, LM Studio, OpenAI) over plain HTTP."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

from grounded_planner.vlm.backends.base import RetryableError, VLMBackend, VLMRequest, retry_call
from grounded_planner.vlm.errors import VLMProtocolError, VLMRequestError, VLMTimeoutError, VLMUnavailableError

RETRY_STATUS = (408, 409, 429, 500, 502, 503, 504)
# Connecting to a live local or LAN server takes milliseconds; waiting long only delays the error.
MAX_CONNECT_TIMEOUT_S = 5.0


def chat_messages(request: VLMRequest) -> list[dict[str, Any]]:
    """OpenAI chat messages with the image as a base64 data URL in the first user message."""
    out: list[dict[str, Any]] = []
    image_sent = request.image is None
    for message in request.messages:
        if message["role"] == "user" and not image_sent:
            out.append(
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": request.image.data_url}},
                        {"type": "text", "text": message["content"]},
                    ],
                }
            )
            image_sent = True
        else:
            out.append({"role": message["role"], "content": message["content"]})
    return out


def answer_text(body: Any) -> str:
    """The assistant's text of a chat-completions response body (string or list-of-parts content)."""
    try:
        message = body["choices"][0]["message"]
    except (KeyError, IndexError, TypeError) as exc:
        raise VLMProtocolError(f"the server's response has no choices[0].message: {str(body)[:200]}") from exc
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    if content is None:
        content = ""
    return str(content)


class OpenAIBackend(VLMBackend):
    """POST {base_url}/chat/completions with the image as a data URL; retries 429/5xx with backoff.

    Parameters
    ----------
    base_url : str
        Server root including ``/v1`` (vLLM/SGLang ``http://host:8000/v1``, Ollama ``http://host:11434/v1``).
    api_key : str
        Sent as ``Authorization: Bearer``; empty for local servers.
    timeout_s : float
        Wall-clock limit of one request, whole response included (a server that trickles bytes cannot
        stretch it).
    """

    name = "openai"

    def __init__(
        self,
        model: str,
        base_url: str,
        api_key: str = "",
        timeout_s: float = 60.0,
        max_retries: int = 2,
        retry_backoff_s: float = 0.5,
        extra_headers: dict[str, str] | None = None,
    ):
        super().__init__(model)
        if not base_url:
            raise VLMRequestError(
                "the openai backend needs a base URL (--base-url or GP_VLM_BASE_URL), "
                "e.g. http://localhost:8000/v1 for vLLM"
            )
        if not base_url.startswith(("http://", "https://")):
            raise VLMRequestError(f"base URL must start with http:// or https://, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.url = self.base_url + "/chat/completions"
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        self.retry_backoff_s = float(retry_backoff_s)
        headers = {"Content-Type": "application/json", **(extra_headers or {})}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._max_tokens_key = "max_tokens"
        self._send_temperature = True
        connect = min(self.timeout_s, MAX_CONNECT_TIMEOUT_S)
        # Proxy variables apply to remote servers; a server on this machine is always reached directly.
        host = (httpx.URL(self.base_url).host or "").strip("[]")
        local = host in ("localhost", "::1") or host.startswith("127.")
        self._client = httpx.Client(
            headers=headers, timeout=httpx.Timeout(self.timeout_s, connect=connect), trust_env=not local
        )

    def close(self) -> None:
        self._client.close()

    def payload(self, request: VLMRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": chat_messages(request),
            self._max_tokens_key: request.max_tokens,
        }
        if self._send_temperature:
            body["temperature"] = request.temperature
        if request.json_mode:
            body["response_format"] = {"type": "json_object"}
        body.update(request.extra)
        return body

    def generate(self, request: VLMRequest) -> str:
        what = f"{self.url} (model {self.model!r})"
        for _ in range(3):  # at most two parameter adaptations, then the error stands
            data = json.dumps(self.payload(request)).encode("utf-8")
            try:
                body = retry_call(
                    lambda data=data: self._post_once(data, request),
                    max_retries=self.max_retries,
                    backoff_s=self.retry_backoff_s,
                    what=what,
                    deadline=request.deadline,
                )
            except VLMRequestError as exc:
                if not self._adapt(exc):
                    raise
                continue
            return answer_text(body)
        raise VLMRequestError(f"{what}: the request was still rejected after adapting its parameters")

    def _adapt(self, exc: VLMRequestError) -> bool:
        """Follow a 400 that names a parameter this model does not take (OpenAI reasoning models reject
        ``max_tokens`` for ``max_completion_tokens`` and any temperature but the default). Kept for later
        requests; returns False when there is nothing to change."""
        message = str(exc).lower()
        if exc.status != 400:
            return False
        if "max_tokens" in message and "max_completion_tokens" in message and self._max_tokens_key == "max_tokens":
            self._max_tokens_key = "max_completion_tokens"
            return True
        if "temperature" in message and self._send_temperature:
            self._send_temperature = False
            return True
        return False

    def _post_once(self, data: bytes, request: VLMRequest) -> Any:
        limit = request.time_left(self.timeout_s, self.url)  # the request's deadline cuts this try short
        deadline = time.monotonic() + limit
        timeout = httpx.Timeout(limit, connect=min(limit, MAX_CONNECT_TIMEOUT_S))
        try:
            with self._client.stream("POST", self.url, content=data, timeout=timeout) as response:
                chunks = []
                for chunk in response.iter_bytes():
                    chunks.append(chunk)
                    if time.monotonic() > deadline:
                        raise VLMTimeoutError(f"{self.url}: no complete answer within {limit:.1f} s")
                raw = b"".join(chunks)
                status = response.status_code
                headers = response.headers
        except httpx.TimeoutException as exc:
            raise VLMTimeoutError(f"{self.url}: no answer within {limit:.1f} s ({type(exc).__name__})") from exc
        except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            raise RetryableError(f"cannot reach the server: {exc or type(exc).__name__}") from exc
        except httpx.HTTPError as exc:
            raise VLMUnavailableError(f"{self.url}: {type(exc).__name__}: {exc}") from exc
        text = raw.decode("utf-8", errors="replace")
        if status in RETRY_STATUS:
            raise RetryableError(f"HTTP {status}: {_error_detail(text)}", _retry_after(headers.get("retry-after")))
        if status >= 400:
            hint = " (check the API key environment variable)" if status in (401, 403) else ""
            raise VLMRequestError(
                f"{self.url} rejected the request: HTTP {status}: {_error_detail(text)}{hint}", status
            )
        try:
            return json.loads(text)
        except ValueError as exc:
            raise VLMProtocolError(
                f"the server answered HTTP {status} with a body that is not JSON: {text[:200]!r}"
            ) from exc


def _error_detail(text: str) -> str:
    try:
        body = json.loads(text)
        err = body.get("error", body) if isinstance(body, dict) else body
        if isinstance(err, dict):
            err = err.get("message", err)
        return " ".join(str(err).split())[:300]
    except ValueError:
        return " ".join(text.split())[:300] or "(empty body)"


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None
