"""Simulated viewers for a live experiment: each asks the real reply API, then browses items.

    manage.py simulate_traffic --workspace demo --room demo-room --viewers 300 --effect 0.15

Each viewer sends one message to POST /api/v1/rooms/{room}/reply (so the experiment assigns it an arm
and the trace records the arm), then produces Poisson(base_ipv × (1 + effect)) item-page views for
treatment arms (Poisson(base_ipv) for the control), posted to POST /api/v1/events in batches — with a
share of duplicated events to show that retries never count twice. Watch the dashboard meanwhile.
"""

import asyncio
import math
import random
import time
import uuid
from datetime import UTC, datetime

import httpx
from django.core.management.base import BaseCommand, CommandError

from serving.models import Experiment
from serving.services import api_key_create
from workspaces.access import Actor
from workspaces.models import Workspace

MESSAGES = ["how much is this one?", "is the sweater on screen in M?", "love this stream!", "any discount today?",
            "what's the return policy?", "show the jeans next please", "does this come in navy?"]


def poisson(rng: random.Random, lam: float) -> int:
    limit, k, p = math.exp(-lam), 0, 1.0
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


class Command(BaseCommand):
    help = __doc__.split("\n\n")[0]

    def add_arguments(self, parser):
        parser.add_argument("--url", default="http://127.0.0.1:8000")
        parser.add_argument("--workspace", required=True)
        parser.add_argument("--room", default="demo-room")
        parser.add_argument("--viewers", type=int, default=200)
        parser.add_argument("--effect", type=float, default=0.1, help="true relative IPV uplift of treatments")
        parser.add_argument("--base-ipv", type=float, default=1.5)
        parser.add_argument("--concurrency", type=int, default=8)
        parser.add_argument("--duplicate-rate", type=float, default=0.1)
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--token", help="an API key with read and ingest scopes (one is created if omitted)")

    def handle(self, url, workspace, room, viewers, effect, base_ipv, concurrency, duplicate_rate, seed, token,
               **options):
        space = Workspace.objects.filter(slug=workspace).first()
        if space is None:
            raise CommandError(f"No workspace “{workspace}”.")
        experiment = Experiment.objects.filter(workspace=space, status=Experiment.Status.RUNNING).first()
        if experiment is None:
            self.stderr.write("No running experiment: replies will follow the production label.")
        control = f"exp:{experiment.key}:{experiment.arms.first().name}" if experiment else None
        if not token:
            token = api_key_create(actor=Actor.system("simulate_traffic"), workspace=space, name="simulate-traffic",
                                   scopes=["read", "ingest"])[1]
        stats = asyncio.run(self._run(url.rstrip("/"), token, room, viewers, effect, base_ipv, concurrency,
                                      duplicate_rate, seed, control))
        self.stdout.write(" · ".join(f"{k}: {v}" for k, v in stats.items()))

    async def _run(self, url, token, room, viewers, effect, base_ipv, concurrency, duplicate_rate, seed, control):
        rng = random.Random(seed)
        headers = {"Authorization": f"Bearer {token}"}
        stats = {"replies": 0, "errors": 0, "events_sent": 0, "accepted": 0, "duplicates": 0}
        pending, queue = [], list(range(viewers))
        started = time.perf_counter()
        async with httpx.AsyncClient(headers=headers, timeout=60) as client:

            async def flush():
                batch, pending[:] = pending[:1000], pending[1000:]
                if not batch:
                    return
                response = await client.post(f"{url}/api/v1/events", json={"events": batch})
                body = response.json()
                stats["events_sent"] += len(batch)
                stats["accepted"] += body.get("accepted", 0)
                stats["duplicates"] += body.get("duplicates", 0)

            async def viewer_loop():
                while queue:
                    index = queue.pop()
                    viewer = f"sim-{seed}-{index}"
                    response = await client.post(f"{url}/api/v1/rooms/{room}/reply",
                                                 json={"message": rng.choice(MESSAGES), "viewer_id": viewer})
                    if response.status_code != 200:
                        stats["errors"] += 1
                        continue
                    stats["replies"] += 1
                    arm = response.json()["arm"]
                    lam = base_ipv * (1 + effect) if control and arm.startswith("exp:") and arm != control else base_ipv
                    for _ in range(poisson(rng, lam)):
                        event = {"event_id": uuid.uuid4().hex, "type": "item_page_view", "viewer_id": viewer,
                                 "room_id": room, "item_id": f"L{rng.randint(1, 24):03d}",
                                 "ts": datetime.now(UTC).isoformat()}
                        pending.append(event)
                        if rng.random() < duplicate_rate:
                            pending.append(dict(event))  # a retry: same event_id
                    if len(pending) >= 200:
                        await flush()

            await asyncio.gather(*(viewer_loop() for _ in range(concurrency)))
            while pending:
                await flush()
        stats["seconds"] = round(time.perf_counter() - started, 1)
        return stats
