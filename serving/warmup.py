"""Pre-filling the offline model's prompt cache, so a room's first viewer is not the one who waits.

llama.cpp on two CPU cores evaluates a prompt at ~200 tokens/s, and the demo
harness's prompt is ~4,600 tokens: a cold first turn would spend its whole 15 s
deadline on the prompt. The static and session blocks are identical for every
viewer of a room, and llama.cpp reuses a matching prefix, so evaluating them
once makes later turns take ~1-2 s per model call.
"""

import asyncio
import logging
import threading

from django.conf import settings

from harness import selectors as harness_selectors
from harness.runtime import RoomContext, TurnInput
from harness.runtime.messages import assemble_messages
from harness.spec.prompt import openai_tools
from serving.model_config import backend_for
from serving.models import Room
from serving.selection import DEFAULT_LABEL

log = logging.getLogger(__name__)


def warm_local_model(room: Room | None = None) -> int:
    """Evaluate one room's production prompt on the local model (the first room with a harness by default).

    Returns the number of prompt tokens evaluated (0 when there is nothing to warm).
    """
    room = room or Room.objects.select_related("harness").exclude(harness=None).order_by("id").first()
    if room is None:
        return 0
    label = room.harness.labels.filter(name=DEFAULT_LABEL).select_related("version").first()
    version = label.version if label else room.harness.head
    spec = harness_selectors.version_spec(version)
    turn = TurnInput(message="hi", viewer_id="warmup", room=RoomContext.from_dict({**room.context, "room_id": room.room_id}))
    backend = backend_for("local")
    response = asyncio.run(backend.complete(assemble_messages(spec, turn), openai_tools(spec), max_tokens=1))
    return response.tokens_in


# This process's warm-up, for the console's model state: idle | running | done | failed (and prompt tokens).
WARMUP = {"state": "idle", "tokens": 0}


def warm_in_background() -> None:
    """Start `warm_local_model` in a daemon thread (embedded mode with the local backend only)."""
    if settings.MODEL_BACKEND != "local":
        return

    def run():
        WARMUP["state"] = "running"
        try:
            tokens = warm_local_model()
            WARMUP.update(state="done", tokens=tokens)
            log.info("offline model warmed with a %d-token prompt", tokens)
        except Exception:  # warming is an optimisation; the first turn will just be slow
            WARMUP["state"] = "failed"
            log.exception("could not warm the offline model")

    threading.Thread(target=run, name="model-warmup", daemon=True).start()
