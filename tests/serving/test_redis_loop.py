"""The event loop's own Redis connection (serving.redis_loop): the admission's answers as redis-py gives them,
commands pipelined by many tasks, and a connection that fails, hangs or is handed a cancelled request."""

import asyncio
import os
import uuid

import pytest
import redis

from serving import redis_loop
from serving.admission import _ADMIT, _ADMIT_SHA
from serving.redis_loop import LoopRedis, _packed, _reply, loop_redis, script_sha

REDIS_URL = os.environ.get("REDIS_URL", "")
needs_redis = pytest.mark.skipif(not REDIS_URL.startswith("redis://"), reason="needs REDIS_URL (a real Redis)")


def test_a_reply_split_anywhere_is_read_whole_and_errors_are_values():
    wire = b"*4\r\n:7\r\n$-1\r\n$6\r\nab\r\ncd\r\n*2\r\n+OK\r\n-NOSCRIPT No matching script\r\n"
    for cut in range(len(wire)):  # everything the network may hand over first
        assert _reply(bytearray(wire[:cut]), 0) is None
    value, end = _reply(bytearray(wire + b":1\r\n"), 0)
    assert end == len(wire) and value[:3] == [7, None, b"ab\r\ncd"] and value[3][0] == "OK"
    assert isinstance(value[3][1], redis.exceptions.NoScriptError)
    assert _packed((b"EVALSHA", "é", 2)) == b"*3\r\n$7\r\nEVALSHA\r\n$2\r\n\xc3\xa9\r\n$1\r\n2\r\n"
    with pytest.raises(ValueError):
        _reply(bytearray(b"?what\r\n"), 0)


@needs_redis
def test_the_admission_script_answers_as_redis_py_and_a_burst_of_tasks_shares_one_connection():
    prefix = f"test-loop-redis:{uuid.uuid4().hex}"
    keys = [f"{prefix}:window", f"{prefix}:generation", f"{prefix}:token"]
    plain = redis.Redis.from_url(REDIS_URL)
    plain.set(keys[1], 41)

    async def burst():
        client = await loop_redis(REDIS_URL)
        own = [f"{prefix}:own{i}" for i in range(60)]
        answers = await asyncio.gather(
            *[client.script(_ADMIT, _ADMIT_SHA, [own[i % 3], keys[1], keys[2]], [90, 7]) for i in range(60)])
        shared = await client.script(_ADMIT, _ADMIT_SHA, keys, [90, 8])
        assert await loop_redis(REDIS_URL) is client  # one connection for the loop
        client.close()
        return answers, shared

    try:
        answers, shared = asyncio.run(burst())
        by_redis_py = plain.register_script(_ADMIT)(keys=keys, args=[90, 9])
    finally:
        plain.delete(*plain.keys(f"{prefix}:*"))
    # The token, missing, is made by the first script that reads it (the fresh one it brings), then kept.
    assert shared == [1, b"41", b"7"] and by_redis_py == [2, b"41", b"7"]
    assert sorted(count for count, _generation, _token in answers) == sorted([*range(1, 21)] * 3)
    assert {token for _count, _generation, token in answers} == {b"7"}


@needs_redis
def test_a_script_redis_does_not_have_is_sent_whole_once():
    source = f"return '{uuid.uuid4().hex}'"  # never loaded: EVALSHA answers NOSCRIPT

    async def twice():
        client = await loop_redis(REDIS_URL)
        try:
            return [await client.script(source, script_sha(source), [], []) for _ in range(2)]
        finally:
            client.close()

    first, second = asyncio.run(twice())
    assert first == second == source.split("'")[1].encode()
    assert redis.Redis.from_url(REDIS_URL).script_exists(script_sha(source)) == [True]


class _Server:
    """A stand-in Redis on a local port: records what it reads, answers what the test hands it."""

    def __init__(self):
        self.received = bytearray()
        self.writers = []

    async def start(self):
        async def connected(reader, writer):
            self.writers.append(writer)
            try:
                while data := await reader.read(65536):
                    self.received += data
            except (asyncio.CancelledError, ConnectionError):  # the test's loop ending, or the client gone
                pass

        self.server = await asyncio.start_server(connected, "127.0.0.1", 0)
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    def answer(self, wire: bytes):
        self.writers[-1].write(wire)

    async def until(self, test):
        for _ in range(200):
            if test():
                return
            await asyncio.sleep(0.01)
        raise AssertionError("the stand-in server never got there")


def test_auth_and_select_come_from_the_url_and_a_refused_password_is_an_error():
    async def run():
        server = _Server()
        address = await server.start()
        connecting = asyncio.create_task(LoopRedis.connect(f"redis://ops:s3cret@{address}/3"))
        await server.until(lambda: server.received.count(b"\r\n") >= 12)
        server.answer(b"+OK\r\n+OK\r\n")
        client = await connecting
        assert bytes(server.received) == _packed((b"AUTH", "ops", "s3cret")) + _packed((b"SELECT", 3))
        client.close()
        refused = asyncio.create_task(LoopRedis.connect(f"redis://:wrong@{address}"))
        await server.until(lambda: len(server.writers) == 2)
        server.answer(b"-WRONGPASS invalid username-password pair\r\n")
        with pytest.raises(redis.ResponseError, match="WRONGPASS"):
            await refused
        server.server.close()

    asyncio.run(run())


def test_a_cancelled_request_keeps_its_turn_and_the_others_get_their_own_answers():
    async def run():
        server = _Server()
        address = await server.start()
        client = await LoopRedis.connect(f"redis://{address}")
        first, second, third = (asyncio.create_task(client.script("s", "sha", [], [n])) for n in range(3))
        await server.until(lambda: server.received.count(b"EVALSHA") == 3)
        second.cancel()
        await asyncio.sleep(0)
        server.answer(b":10\r\n:11\r\n:12\r\n")
        assert [await first, await third] == [10, 12]
        assert second.cancelled() and client.usable
        client.close()
        server.server.close()

    asyncio.run(run())


def test_a_silent_or_closed_connection_fails_what_waits_and_the_next_request_connects_again(monkeypatch):
    monkeypatch.setattr(redis_loop, "REPLY_TIMEOUT_S", 0.2)

    async def run():
        server = _Server()
        address = await server.start()
        client = await loop_redis(f"redis://{address}")
        with pytest.raises(redis.TimeoutError):
            await client.script("s", "sha", [], [])  # the stand-in never answers
        with pytest.raises(redis.TimeoutError):
            await client.script("s", "sha", [], [])  # a connection that timed out takes nothing more
        again = await loop_redis(f"redis://{address}")
        assert again is not client and len(server.writers) == 2
        waiting = asyncio.create_task(again.script("s", "sha", [], []))
        await server.until(lambda: server.received.count(b"EVALSHA") == 2)
        server.writers[-1].close()  # Redis went away
        with pytest.raises(redis.ConnectionError):
            await waiting
        server.server.close()
        await server.server.wait_closed()
        with pytest.raises(redis.ConnectionError):
            await loop_redis(f"redis://{address}")  # nothing listens there now

    asyncio.run(run())


@needs_redis
def test_the_admission_and_a_lone_token_read_answer_alike_through_redis_py_and_the_loops_connection(
        monkeypatch, settings):
    """A URL the loop's connection does not take (rediss://) goes through redis-py's asyncio client: the same
    scripts, the same answers. A token made by the admission is the one a lone read finds, and the reverse."""
    from serving import admission

    settings.REDIS_URL = REDIS_URL
    harness_id, room = 2**40 + uuid.uuid4().int % 2**20, (2**40, uuid.uuid4().hex)

    async def both():
        admitted = await admission.reply_admit_async(key=uuid.uuid4().hex, limit_per_minute=5, harness_id=harness_id,
                                                     room=room)
        return admitted, await admission.routing_token_async(harness_id), await admission.routing_token_async(
            harness_id + 1)

    answers = {}
    for way, supported in (("redis-py", False), ("loop", True)):
        monkeypatch.setattr(admission.redis_loop, "supported", lambda _url, supported=supported: supported)
        answers[way] = asyncio.run(both())
    for admitted, token, other in answers.values():
        assert not admitted.over_limit and admitted.room_token
        assert admitted.routing_tokens == {harness_id: token} and other and other != token
    (first, *tokens_first), (second, *tokens_second) = answers.values()
    assert tokens_first == tokens_second and first.room_token == second.room_token  # made once, then read
