from sluice_client.client import (
    AuthorizeResult,
    SluiceClient,
    SluiceUnavailable,
    UsageEvent,
)

__all__ = ["AuthorizeResult", "SluiceClient", "SluiceUnavailable", "UsageEvent"]
