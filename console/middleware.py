"""Django's own middleware, run on the event loop under ASGI.

Under ASGI, Django's `MiddlewareMixin` runs every hook of a middleware in a thread (`sync_to_async`), whether
or not the hook does I/O: the chain of settings.MIDDLEWARE cost each request 15 thread hops, the reply API's
included (benchmarks/reply_path.py --asgi; about half the CPU time ASGI added to a reply). Most of these
hooks only read headers and cookies or set lazy objects; these subclasses run those on the loop and go to
a thread only when a hook is about to touch the database: a modified session to save, messages to load or
store, a CSRF secret kept in the session. Under WSGI and the test client (a sync chain) nothing changes.
"""

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth import middleware as auth
from django.contrib.messages import middleware as messages
from django.contrib.sessions import middleware as sessions
from django.middleware import clickjacking, common, csrf, security


class OnLoopMixin:
    """A `MiddlewareMixin` whose hooks run on the event loop in async mode, each in a thread only when its
    `*_needs_thread` says the hook will do I/O this time."""

    def __init__(self, get_response):
        super().__init__(get_response)
        if self.async_mode and hasattr(self, "process_view"):
            # The handler adapts process_view by its kind: a coroutine function stays on the loop.
            self.process_view = self._process_view_on_loop

    def request_needs_thread(self, request) -> bool:
        return False

    def response_needs_thread(self, request, response) -> bool:
        return False

    def view_needs_thread(self, request, callback) -> bool:
        return self.request_needs_thread(request)

    async def __acall__(self, request):
        response = None
        if hasattr(self, "process_request"):
            if self.request_needs_thread(request):
                response = await sync_to_async(self.process_request, thread_sensitive=True)(request)
            else:
                response = self.process_request(request)
        response = response or await self.get_response(request)
        if hasattr(self, "process_response"):
            if self.response_needs_thread(request, response):
                response = await sync_to_async(self.process_response, thread_sensitive=True)(request, response)
            else:
                response = self.process_response(request, response)
        return response

    async def _process_view_on_loop(self, request, callback, callback_args, callback_kwargs):
        hook = type(self).process_view.__get__(self)
        if self.view_needs_thread(request, callback):
            return await sync_to_async(hook, thread_sensitive=True)(request, callback, callback_args, callback_kwargs)
        return hook(request, callback, callback_args, callback_kwargs)


class SecurityMiddleware(OnLoopMixin, security.SecurityMiddleware):
    """Headers and the HTTPS redirect: no I/O."""


class SessionMiddleware(OnLoopMixin, sessions.SessionMiddleware):
    """The session is loaded lazily (by whoever reads it, in their thread); saving it is I/O."""

    def response_needs_thread(self, request, response) -> bool:
        session = getattr(request, "session", None)
        return session is not None and (session.modified or settings.SESSION_SAVE_EVERY_REQUEST)


class CommonMiddleware(OnLoopMixin, common.CommonMiddleware):
    """User-agent checks, the slash redirect (a URL resolution) and Content-Length: no I/O."""


class CsrfViewMiddleware(OnLoopMixin, csrf.CsrfViewMiddleware):
    """The secret comes from a cookie (no I/O) unless CSRF_USE_SESSIONS keeps it in the session. The check
    itself stays in a thread for an unsafe request to a protected view: a rejection renders the failure view,
    which may read the user."""

    def request_needs_thread(self, request) -> bool:
        return settings.CSRF_USE_SESSIONS

    def view_needs_thread(self, request, callback) -> bool:
        exempt = getattr(callback, "csrf_exempt", False) or request.method in ("GET", "HEAD", "OPTIONS", "TRACE")
        return settings.CSRF_USE_SESSIONS or not exempt

    def response_needs_thread(self, request, response) -> bool:
        return settings.CSRF_USE_SESSIONS


class AuthenticationMiddleware(OnLoopMixin, auth.AuthenticationMiddleware):
    """Sets request.user as a lazy object; the user is loaded by whoever reads it."""


class MessageMiddleware(OnLoopMixin, messages.MessageMiddleware):
    """Storing messages reads the session (and may write it) once messages were read or added."""

    def response_needs_thread(self, request, response) -> bool:
        storage = getattr(request, "_messages", None)
        return storage is not None and (getattr(storage, "used", True) or getattr(storage, "added_new", True))


class XFrameOptionsMiddleware(OnLoopMixin, clickjacking.XFrameOptionsMiddleware):
    """One header: no I/O."""
