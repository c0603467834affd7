"""WhiteNoise that leaves a request that is not for a static file on the event loop.

WhiteNoise's middleware is sync-only; in Django's ASGI chain a sync-only middleware costs every request two
thread hops (into its thread and back out to the async middleware inside it), the reply API included.
This subclass is both: a path outside STATIC_URL goes straight on; a static path is looked up and served as
WhiteNoise does, the lookup (a file-system search when it uses the finders) in a thread.
"""

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from whitenoise.middleware import WhiteNoiseMiddleware


class StaticFilesMiddleware(WhiteNoiseMiddleware):
    sync_capable = async_capable = True

    def __init__(self, get_response=None, *args, **kwargs):
        super().__init__(get_response, *args, **kwargs)
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request):
        if self.is_async:
            return self.__acall__(request)
        return super().__call__(request)

    def _static_file(self, path: str):
        return self.find_file(path) if self.autorefresh else self.files.get(path)

    async def __acall__(self, request):
        path = request.path_info
        if path.startswith(self.static_prefix):
            static_file = await sync_to_async(self._static_file)(path)
            if static_file is not None:
                return self.serve(static_file, request)
        return await self.get_response(request)
