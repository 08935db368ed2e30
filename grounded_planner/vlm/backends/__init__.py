"""VLM backends behind one interface: OpenAI-compatible HTTP, Gemini, in-process transformers."""

from grounded_planner.vlm.backends.base import VLMBackend, VLMRequest, retry_call

__all__ = ["VLMBackend", "VLMRequest", "retry_call"]
