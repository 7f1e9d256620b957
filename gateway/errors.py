"""OpenAI's error shape: {"error": {"message", "type", "code", "param"}}.

`code` is Sluice's stable code where Sluice refused (tps_exceeded, daily_quota_exhausted, ...),
so a client can tell the limits apart; `type` is OpenAI's class for the status.
"""

import orjson

from gateway.asgi import Answer

TYPES = {400: "invalid_request_error", 401: "invalid_request_error",
         403: "permission_error", 404: "invalid_request_error", 405: "invalid_request_error",
         409: "invalid_request_error", 413: "invalid_request_error", 429: "rate_limit_error",
         502: "server_error", 503: "server_error", 504: "server_error"}
# Refusals that say the caller is out of money or quota rather than rate.
QUOTA_CODES = {"daily_quota_exhausted", "spend_cap_reached"}


def error_body(*, status: int, message: str, code: str | None, param: str | None = None) -> dict:
    kind = "insufficient_quota" if code in QUOTA_CODES else TYPES.get(
        status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "code": code, "param": param}}


def error_response(*, status: int, message: str, code: str | None, param: str | None = None,
                   headers: dict | None = None) -> Answer:
    return Answer(orjson.dumps(error_body(status=status, message=message, code=code,
                                          param=param)),
                  status=status, headers=headers)


def sse_error(*, message: str, code: str) -> bytes:
    """The event that ends a stream the upstream broke: the OpenAI SDKs raise APIError on a
    data event carrying "error"."""
    return b"data: " + orjson.dumps(error_body(status=502, message=message, code=code)) + b"\n\n"
