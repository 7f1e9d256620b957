"""The reference gateway: Sluice's data plane (an OpenAI-compatible ASGI proxy, no Django)."""
