"""Django's own middleware, run on the event loop under ASGI.

Under ASGI, Django's `MiddlewareMixin` runs every hook of a middleware in a thread (`sync_to_async`), whether
or not the hook does I/O: the built-in middleware cost each request 13 of a reply's 17 thread hops. Most of
these hooks only read headers and cookies or set lazy objects; these subclasses run those on the loop and go to
a thread only when a hook is about to touch the database: a modified session to save, messages to load or
store (≈ 0.8 ms less CPU a reply, docs/performance-history.md). Under WSGI and the test client (a sync chain) nothing
changes.

Django's security, CSRF and clickjacking middleware stay Django's own (6 of the hops): `check --deploy` finds
them by their dotted paths, and its HSTS, SSL-redirect and secure-cookie checks only run when it does.
"""

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth import middleware as auth
from django.contrib.messages import middleware as messages
from django.contrib.sessions import middleware as sessions
from django.middleware import common


class OnLoopMixin:
    """A `MiddlewareMixin` whose hooks run on the event loop in async mode: process_request always (the ones
    below do no I/O), process_response in a thread when `response_needs_thread` says it will do I/O this time."""

    def response_needs_thread(self, request, response) -> bool:
        return False

    async def __acall__(self, request):
        response = None
        if hasattr(self, "process_request"):
            response = self.process_request(request)
        response = response or await self.get_response(request)
        if hasattr(self, "process_response"):
            if self.response_needs_thread(request, response):
                response = await sync_to_async(self.process_response, thread_sensitive=True)(request, response)
            else:
                response = self.process_response(request, response)
        return response


class SessionMiddleware(OnLoopMixin, sessions.SessionMiddleware):
    """The session is loaded lazily (by whoever reads it, in their thread); saving it is I/O."""

    def response_needs_thread(self, request, response) -> bool:
        session = getattr(request, "session", None)
        return session is not None and (session.modified or settings.SESSION_SAVE_EVERY_REQUEST)


class CommonMiddleware(OnLoopMixin, common.CommonMiddleware):
    """User-agent checks, the slash redirect (a URL resolution) and Content-Length: no I/O."""


class AuthenticationMiddleware(OnLoopMixin, auth.AuthenticationMiddleware):
    """Sets request.user as a lazy object; the user is loaded by whoever reads it."""


class MessageMiddleware(OnLoopMixin, messages.MessageMiddleware):
    """Storing messages reads the session (and may write it) once messages were read or added."""

    def response_needs_thread(self, request, response) -> bool:
        storage = getattr(request, "_messages", None)
        return storage is not None and (getattr(storage, "used", True) or getattr(storage, "added_new", True))
