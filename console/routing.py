"""Websocket routes. Consumers authenticate and join workspace-scoped groups."""

websocket_urlpatterns: list = []
