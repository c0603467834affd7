"""ASGI entry point: HTTP through Django, websockets through Channels (added by later features)."""

import gc
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from console.routing import websocket_urlpatterns  # noqa: E402
from serving.lean_reply import lean_reply, lifespan, reply_path  # noqa: E402


def _freeze_what_start_up_loaded() -> None:
    """Load the URLconf (every view module, and its reverse map) and CEL's parser now, then move what start-up made to the
    collector's permanent generation. Those ~200,000 objects live as long as the process; left tracked, every
    full collection walks them: 110-170 ms with the event loop stopped, every ~2,500 replies under load, which
    held a whole wave of requests (docs/performance.md). After this a full collection walks only what came
    later (~10 ms). A process that imports this module for other reasons (a test run) freezes too: harmless,
    reference counting still frees."""
    from django.urls import get_resolver

    from harness.spec.validate import cel_environment

    get_resolver().url_patterns  # noqa: B018 (imports the views: loaded lazily, on the first request, otherwise)
    reply_path()  # the resolver's reverse map, otherwise built by the first request
    cel_environment()  # CEL's parser, otherwise loaded by the first reply's hook conditions
    gc.collect()  # garbage now would otherwise be frozen with the rest, never freed
    gc.freeze()


application = ProtocolTypeRouter(
    {
        "http": lean_reply(django_asgi_app),  # the everyday reply request on the event loop
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
        "lifespan": lifespan,  # the reply route warmed before the first request (servers that send it: uvicorn)
    }
)
_freeze_what_start_up_loaded()
