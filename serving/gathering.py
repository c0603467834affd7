"""Work that a loop's requests wait for together: one run at a time, and what arrives while it runs waits for
the next run, which serves all of it at once.

Under load most of a statement's cost on the event loop is its round trip (psycopg, the pool, the system calls:
≈ 150-330 µs of the process's CPU here) and PostgreSQL's per-statement and per-commit work, not its rows. So the
replies that finish while a trace insert runs are inserted together by the next one, and the replies that ask
for a room while its read runs share the next read (docs/performance.md). Every caller's answer comes from a
run that started after it asked, so nothing is older than the caller: a change committed before a request
arrived is seen by it. Alone (concurrency 1) a caller's item is a run of its own, as without gathering.
"""

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any


class Gathering:
    """`await gathering.submit(item)`: `run(items)` takes the items gathered (at most `most`) and returns one
    outcome each, in order; an outcome that is an exception is raised to its caller. Belongs to one loop."""

    def __init__(self, run: Callable[[list[Any]], Awaitable[list[Any]]], *, most: int = 64) -> None:
        self._run_items = run
        self._most = most
        self.waiting: list[tuple[Any, asyncio.Future]] = []
        self.batch: list[tuple[Any, asyncio.Future]] = []  # the items of the run under way
        self.running = False

    def submit(self, item: Any) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        self.waiting.append((item, done))
        if not self.running:  # started on the loop's next turn: what is ready by then goes with this item
            self.running = True
            loop.create_task(self._run()).add_done_callback(self._ended)
        return done

    async def _run(self) -> None:
        while self.waiting:
            self.batch, self.waiting = self.waiting[:self._most], self.waiting[self._most:]
            outcomes = await self._run_items([item for item, _done in self.batch])
            for (_item, done), outcome in zip(self.batch, outcomes, strict=True):
                if done.done():  # its caller was cancelled (a client gone): the item was served all the same
                    continue
                if isinstance(outcome, BaseException):
                    done.set_exception(outcome)
                else:
                    done.set_result(outcome)
        self.batch = []
        self.running = False  # at once after finding nothing waits: an item that comes later starts a new run

    def _ended(self, task: asyncio.Task) -> None:
        """A run cancelled (its loop ending, even before it started) or failed: no caller waits for ever."""
        if not task.cancelled() and task.exception() is None:
            return
        for _item, done in self.batch + self.waiting:
            if done.done():
                continue
            if task.cancelled():
                done.cancel()
            else:
                done.set_exception(task.exception())
        self.batch, self.waiting, self.running = [], [], False

