"""Google Gemini through the official ``google-genai`` SDK (imported here only)."""

from __future__ import annotations

from grounded_planner.vlm.backends.base import RetryableError, VLMBackend, VLMRequest, retry_call
from grounded_planner.vlm.errors import VLMConfigError, VLMProtocolError, VLMRequestError, VLMTimeoutError

RETRY_STATUS = (408, 429, 500, 502, 503, 504)


class GeminiBackend(VLMBackend):
    """``client.models.generate_content`` with the image as inline bytes and the system prompt as
    ``system_instruction``. The SDK's own retries are off so that retries, backoff and errors behave
    exactly like the OpenAI-compatible backend's.

    Parameters
    ----------
    base_url : str
        Endpoint override (a proxy or a local test server); "" for Google's.
    """

    name = "gemini"

    def __init__(
        self,
        model: str,
        api_key: str = "",
        base_url: str = "",
        timeout_s: float = 60.0,
        max_retries: int = 2,
        retry_backoff_s: float = 0.5,
    ):
        super().__init__(model)
        from google import genai  # lazy: optional SDK (google-genai), not in install_requires
        from google.genai import types  # lazy: optional SDK (google-genai), not in install_requires

        if not api_key:
            raise VLMConfigError(
                "the gemini backend needs an API key: set GEMINI_API_KEY (or name another variable "
                "with --api-key-env / PlannerConfig.api_key_env)"
            )
        self._types = types
        options = types.HttpOptions(
            timeout=int(timeout_s * 1000),
            retry_options=types.HttpRetryOptions(attempts=1),
            **({"base_url": base_url} if base_url else {}),
        )
        self._client = genai.Client(api_key=api_key, http_options=options)
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        self.retry_backoff_s = float(retry_backoff_s)
        self.base_url = base_url
        self.where = base_url or "Gemini API"

    def close(self) -> None:
        close = getattr(self._client, "close", None)
        if callable(close):
            close()

    def contents(self, request: VLMRequest):
        """(system instruction, contents) for the SDK: image bytes go before the first user text."""
        types = self._types
        system = "\n\n".join(m["content"] for m in request.messages if m["role"] == "system")
        contents = []
        image_sent = request.image is None
        for message in request.messages:
            if message["role"] == "system":
                continue
            parts = []
            if message["role"] == "user" and not image_sent:
                parts.append(types.Part.from_bytes(data=request.image.data, mime_type=request.image.mime_type))
                image_sent = True
            parts.append(types.Part.from_text(text=message["content"]))
            contents.append(types.Content(role="model" if message["role"] == "assistant" else "user", parts=parts))
        return system, contents

    def generate(self, request: VLMRequest) -> str:
        system, contents = self.contents(request)
        config = self._types.GenerateContentConfig(
            system_instruction=system or None,
            temperature=request.temperature,
            max_output_tokens=request.max_tokens,
            response_mime_type="application/json" if request.json_mode else None,
        )
        response = retry_call(
            lambda: self._call_once(contents, config, request),
            max_retries=self.max_retries,
            backoff_s=self.retry_backoff_s,
            what=f"{self.where} (model {self.model!r})",
            deadline=request.deadline,
        )
        try:
            text = response.text
        except (ValueError, AttributeError) as exc:
            raise VLMProtocolError(f"Gemini answered without text: {exc}") from exc
        return text or ""

    def _call_once(self, contents, config, request: VLMRequest):
        from google.genai import errors  # lazy: optional SDK (google-genai), not in install_requires

        limit = request.time_left(self.timeout_s, self.where)
        if request.deadline is not None:  # the SDK merges a request's http_options over the client's
            config = config.model_copy(
                update={"http_options": self._types.HttpOptions(timeout=max(1, int(limit * 1000)))}
            )
        try:
            return self._client.models.generate_content(model=self.model, contents=contents, config=config)
        except errors.APIError as exc:
            if exc.code in RETRY_STATUS:
                raise RetryableError(f"HTTP {exc.code}: {exc.message or exc.status}") from exc
            hint = " (check the API key)" if exc.code in (401, 403) else ""
            raise VLMRequestError(
                f"{self.where} rejected the request: HTTP {exc.code}: {exc.message}{hint}", exc.code
            ) from exc
        except Exception as exc:  # the SDK's transport (httpx/httpx2) errors share no importable base class
            kind = type(exc).__name__
            if "Timeout" in kind:
                raise VLMTimeoutError(f"{self.where}: no answer within {limit:.1f} s ({kind})") from exc
            if any(k in kind for k in ("Connect", "Network", "Protocol", "ReadError", "WriteError", "Transport")):
                raise RetryableError(f"cannot reach the server: {exc or kind}") from exc
            raise
