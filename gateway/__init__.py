"""The reference gateway: Sluice's data plane (an OpenAI-compatible ASGI proxy, no Django).

`python -m gateway` serves it (see gateway/app.py and the README's "The reference gateway");
`python -m gateway.sim` serves the simulated upstream.
"""

import importlib.util
import sys
from pathlib import Path

# The Sluice client is its own package (clients/python: httpx, httptools). Installed, it is used as
# is; run from this repository, the gateway uses it from source, like the tests and demo do.
if importlib.util.find_spec("sluice_client") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "clients" / "python" / "src"))
