"""Typed errors of the VLM layer: unreachable servers, answers that stay invalid, bad requests, unreadable answers."""

from __future__ import annotations

from grounded_planner.errors import InputError, RunFailure


class VLMError(RunFailure):
    """Base class of every failure of a VLM backend or planner."""


class VLMUnavailableError(VLMError):
    """The model cannot be reached: connection refused, DNS failure, timeout, or 429/5xx after all retries."""


class VLMTimeoutError(VLMUnavailableError):
    """The request did not finish within ``timeout_s`` (counted over the whole response, not per read)."""


class VLMRequestError(VLMError):
    """The server rejected the request (4xx other than 429): wrong model name, bad key, payload too large.

    Attributes
    ----------
    status : int or None
        HTTP status code (None when the backend is not HTTP).
    """

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class VLMResponseError(VLMError):
    """The model answered, but no valid plan could be read even after the repair re-prompts.

    Attributes
    ----------
    reason : str
        The last parse or validation error, one line.
    raw_response : str
        The last raw answer of the model.
    attempts : int
        How many answers were tried (1 + repair attempts used).
    """

    def __init__(self, reason: str, raw_response: str = "", attempts: int = 1):
        super().__init__(f"no valid plan after {attempts} answer(s): {reason}")
        self.reason = reason
        self.raw_response = raw_response
        self.attempts = attempts


class VLMConfigError(VLMError, InputError):
    """The planner configuration cannot work (unknown backend, missing base URL, missing optional package)."""


class VLMProtocolError(VLMError):
    """The server answered, but not in the API's format (body not JSON, no choices, no candidates)."""


class ParseError(InputError):
    """No valid plan can be read from a model answer.

    Attributes
    ----------
    reason : str
        One line saying what is wrong (no plan found, unknown type, box outside the image, ...).
    index : int or None
        Index of the offending action, or None for answer-level problems.
    rule : str
        Short machine-readable name of the problem (``no_plan``, ``type``, ``bbox_outside``, ...).
    """

    def __init__(self, reason: str, *, index: int | None = None, rule: str = "parse"):
        reason = " ".join(str(reason).split())  # always one line: the CLI prints it on stderr as is
        self.reason = reason
        self.index = index
        self.rule = rule
        super().__init__(reason)


class ParseDeadlineError(ParseError):
    """Parsing ran past the request's deadline (rule ``deadline``): the planner reports a timeout, not a bad answer."""


class VLMBusyError(VLMError):
    """Refused at once: as many model requests as allowed are already in flight (the message starts ``busy:``)."""
