"""ASGI entry point: HTTP through Django, websockets through Channels (added by later features)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from console.routing import websocket_urlpatterns  # noqa: E402
from serving.lean_reply import lean_reply  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": lean_reply(django_asgi_app),  # the everyday reply request on the event loop
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
