"""serving.gathering: what callers on one loop wait for together, with no caller left waiting for ever."""

import asyncio

import pytest

from serving.gathering import Gathering


class Runs:
    """A run function that records what each run took and waits for the test to let it finish."""

    def __init__(self):
        self.taken: list[list] = []
        self.release = asyncio.Event()

    async def __call__(self, items: list) -> list:
        self.taken.append(list(items))
        await self.release.wait()
        return [ValueError(f"refused {item}") if item == "bad" else f"served {item}" for item in items]


def test_what_arrives_during_a_run_is_served_by_the_next_and_each_caller_gets_its_own_outcome():
    async def scenario():
        runs = Runs()
        gathering = Gathering(runs, most=3)
        first = gathering.submit("a")
        await asyncio.sleep(0.01)  # the first run under way, with "a" alone
        later = [gathering.submit(item) for item in ("b", "bad", "c", "d")]
        gone = gathering.submit("e")
        await asyncio.sleep(0)
        gone.cancel()  # its caller went away: its item is still served, in its turn
        runs.release.set()
        outcomes = await asyncio.gather(first, *later, return_exceptions=True)
        await asyncio.sleep(0)
        return runs.taken, outcomes, gone, gathering

    taken, outcomes, gone, gathering = asyncio.run(scenario())
    assert taken == [["a"], ["b", "bad", "c"], ["d", "e"]]  # at most three a run
    assert outcomes[:2] == ["served a", "served b"] and str(outcomes[2]) == "refused bad"
    assert outcomes[3:] == ["served c", "served d"] and gone.cancelled()
    assert not gathering.running and not gathering.waiting and not gathering.batch


def test_a_run_cancelled_before_or_while_it_runs_leaves_no_caller_waiting_and_the_next_item_starts_anew():
    async def scenario():
        runs = Runs()
        gathering = Gathering(runs)
        before = [gathering.submit(item) for item in ("a", "b")]
        [run] = [task for task in asyncio.all_tasks() if task.get_coro().__name__ == "_run"]
        run.cancel()  # before it started: a server's loop cancels what is left when it stops
        cancelled_before = await asyncio.gather(*before, return_exceptions=True)
        during = [gathering.submit(item) for item in ("c", "d")]
        await asyncio.sleep(0.01)
        [run] = [task for task in asyncio.all_tasks() if task.get_coro().__name__ == "_run"]
        run.cancel()  # while it runs
        cancelled_during = await asyncio.gather(*during, return_exceptions=True)
        runs.release.set()
        again = await gathering.submit("e")
        return cancelled_before, cancelled_during, again, runs.taken

    before, during, again, taken = asyncio.run(asyncio.wait_for(scenario(), 5))
    assert [type(outcome) for outcome in before + during] == [asyncio.CancelledError] * 4
    assert again == "served e" and taken == [["c", "d"], ["e"]]


def test_a_run_that_fails_fails_its_callers_and_the_next_caller_gets_a_new_run():
    calls = []

    async def failing_once(items):
        calls.append(items)
        if len(calls) == 1:
            raise RuntimeError("a fault in the run itself")
        return [f"served {item}" for item in items]

    async def scenario():
        gathering = Gathering(failing_once)
        with pytest.raises(RuntimeError, match="fault"):
            await gathering.submit("a")
        await asyncio.sleep(0)
        return await gathering.submit("b")

    assert asyncio.run(scenario()) == "served b" and calls == [["a"], ["b"]]
