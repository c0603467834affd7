"""Running service calls at the same moment in threads, each on its own database connection."""

import threading

from django.db import connection


def concurrently(*calls, timeout: float = 30) -> list[tuple[str, object]]:
    """Start every call at once (a barrier), each in a thread with its own connection (Django's are
    per thread); returns ("ok", value) or ("error", exception) per call, in order. Needs a
    `transaction=True` test, so the threads see each other's commits."""
    barrier = threading.Barrier(len(calls))
    results: list[tuple[str, object]] = [("error", TimeoutError("did not finish"))] * len(calls)

    def run(index, call):
        try:
            barrier.wait()
            results[index] = ("ok", call())
        except Exception as exc:  # reported to the test, which decides what was allowed
            results[index] = ("error", exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i, call)) for i, call in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    return results
