"""Is an OpenAI-compatible model server up, and what does it serve?"""

import time
from typing import Any

import httpx


async def check_health(base_url: str, *, timeout_s: float = 5.0) -> dict[str, Any]:
    """GET `/health` and `/v1/models`. Never raises for an unreachable or unhealthy server.

    `base_url` may carry the `/v1` prefix or not. Returns `{"ok", "status_code", "models",
    "latency_ms", "error"}`; `ok` means /health answered 200 and at least one model is served.
    """
    root = base_url.rstrip("/").removesuffix("/v1")
    result: dict[str, Any] = {"ok": False, "status_code": None, "models": [], "latency_ms": None, "error": None}
    started = time.perf_counter()
    try:
        async with httpx.AsyncClient(timeout=timeout_s) as client:
            health = await client.get(f"{root}/health")
            result["status_code"] = health.status_code
            result["latency_ms"] = (time.perf_counter() - started) * 1000
            if health.status_code != 200:
                result["error"] = f"/health answered HTTP {health.status_code}"
                return result
            models = await client.get(f"{root}/v1/models")
            models.raise_for_status()
            result["models"] = [model["id"] for model in models.json().get("data", [])]
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as error:
        result["error"] = f"{type(error).__name__}: {error}"
        return result
    result["ok"] = bool(result["models"])
    if not result["ok"]:
        result["error"] = "/v1/models lists no model"
    return result
