"""The production ASGI application (config/asgi.py: authorize on the event loop, everything
else through the bridge) around bench/wsgi_ceiling.py's benchmark endpoints, which the bridge
serves at the WSGI layer: /bench/empty, the ceiling of this server and load generator for a
request that does no work there. Benchmarks only."""

from bench.wsgi_ceiling import application as wsgi_application
from config.asgi import asgi_application

application = asgi_application(wsgi_application)
