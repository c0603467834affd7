"""What the console tells an operator about the model that answers: which one, its state, its measured speed,
and in plain words why a turn ended on the fallback line.

Load and warm-up states are this web process's own (the local model loads in the process that answers);
speeds are measured from the workspace's latest traces of that backend, whatever process served them.
"""

from django.conf import settings

from serving.models import Trace

SPEED_WINDOW = 20  # latest turns per backend used for the measured speed


def _measured_speed(workspace, name: str) -> dict | None:
    """Output tokens per second of model time over the latest turns answered by `name` (None without any)."""
    rows = list(Trace.objects.filter(workspace=workspace, backend=name, model_calls__gt=0).order_by("-created_at")
                .values_list("tokens_out", "data__model_latency_ms")[:SPEED_WINDOW])
    model_ms = sum(float(ms or 0) for _, ms in rows)
    if not rows or model_ms <= 0:
        return None
    return {"tokens_per_s": sum(tokens for tokens, _ in rows) / (model_ms / 1000), "turns": len(rows)}


def trained_default() -> dict | None:
    """The manifest of the HAT-trained default when it is what the `local` backend serves, else None."""
    from pathlib import Path

    from serving.model_config import local_model_path
    from serving.model_sources import local_default_manifest, local_default_path

    served = local_model_path()
    built = local_default_path(settings.VAR_DIR)
    if served is None or built is None or Path(served) != built:
        return None
    return local_default_manifest()


def _percent(value) -> str:
    return f"{100 * float(value):.0f}%" if isinstance(value, int | float) else "an unmeasured share"


def backend_description(name: str) -> dict:
    """What `name` is and what its answers are worth, for people."""
    if name == "local":
        from serving.backends import local

        state, seconds = local.load_state()
        from serving.warmup import WARMUP

        warm = {"done": f"prompt cache warmed ({WARMUP['tokens']} tokens)", "running": "warming its prompt cache now",
                "failed": "prompt-cache warm-up failed (the first turn is slow)", "idle": ""}[WARMUP["state"]]
        if state == "loaded":
            status = f"loaded in this process ({seconds:.2f} s to load)" + (f"; {warm}" if warm else "")
        elif state == "loading":
            status = f"loading now ({seconds:.0f} s so far)"
        else:
            status = "not loaded yet: the first answer loads it (about a second) and reads the whole prompt (slow)"
        trained = trained_default()
        if trained is not None:
            metrics = trained.get("metrics", {})
            return {"name": name, "model": f"{trained['name']} (SmolLM2-135M + a HAT-trained adapter) on llama.cpp, "
                                           "in process", "state": status, "small": True,
                    "note": f"The offline default is a 135M-parameter model trained for the compact avatar harness "
                            f"({trained.get('harness', {}).get('path', 'harness/demo/compact')}). Judged on that "
                            f"harness it answered {_percent(metrics.get('fixed'))} of viewer questions correctly "
                            f"({_percent(metrics.get('heldout'))} after harness edits it never saw; the untrained "
                            f"base: {_percent(metrics.get('base_fixed'))}); on long harnesses such as the full demo "
                            "avatar it is much weaker. Point HARNESSOPS_OPENAI_BASE_URL at a vLLM server for real "
                            "answers."}
        return {"name": name, "model": f"{local.MODEL_FILE} on llama.cpp, in process", "state": status,
                "small": True,
                "note": "The offline default is a 135M-parameter model. It often ignores the harness's skills and "
                        "formats, so the hooks reject its replies and the fallback line is sent; that says little "
                        "about the harness. Point HARNESSOPS_OPENAI_BASE_URL at a vLLM server for real answers."}
    if name == "openai":
        return {"name": name, "model": f"{settings.OPENAI_MODEL} at {settings.OPENAI_BASE_URL}",
                "state": "remote server (OpenAI-compatible, e.g. vLLM)", "small": False, "note": ""}
    if name == "scripted":
        return {"name": name, "model": "a fixed script (HARNESSOPS_SCRIPTED_STEPS)", "state": "always ready",
                "small": False, "note": "It replays the same steps on every turn: for demos and tests, not a model."}
    if name.startswith("checkpoint:"):
        return {"name": name, "model": f"training checkpoint #{name.partition(':')[2]} (transformers, in process)",
                "state": "loaded on first use", "small": False, "note": ""}
    return {"name": name, "model": name, "state": "", "small": False, "note": ""}


def backend_states(workspace, names: list[str]) -> list[dict]:
    """`backend_description` of each name, with its measured speed in this workspace."""
    return [{**backend_description(name), "speed": _measured_speed(workspace, name),
             "default": name == settings.MODEL_BACKEND} for name in names]


def outcome_explanation(trace: dict) -> str:
    """Why a turn did not end on the model's own reply, as a sentence (empty when it did)."""
    outcome, reason = trace.get("outcome"), trace.get("reason") or ""
    retries = [s for s in trace.get("steps", ()) if s.get("kind") == "retry"]
    if outcome == "fallback":
        if "retries exhausted" in reason:
            hook = reason.removeprefix("reply hook ").removesuffix(": retries exhausted")
            return (f"The hook {hook} rejected the model's reply {len(retries) + 1} time(s), so the harness's fallback "
                    "line was sent instead. The rejected replies and the hook's feedback are in the steps below.")
        if reason.startswith("still calling tools"):
            return (f"The model was {reason}; the harness's fallback line was sent. A stronger model, or a lower "
                    "tool budget in the prompt, helps.")
        if reason == "the model returned an empty reply":
            return "The model returned an empty reply, so the harness's fallback line was sent."
        return f"The turn ended on the harness's fallback line because of the {reason}." if reason else \
            "The turn ended on the harness's fallback line."
    if outcome == "silent":
        return f"No reply, on purpose: the {reason} blocked it." if reason else "No reply, on purpose."
    if outcome == "deadline":
        return "The model did not answer within the deadline, so the fallback line was sent."
    if outcome == "error":
        return f"The model could not be reached or failed ({reason.removeprefix('model backend: ')}); " \
               "the fallback line was sent." if reason else "The model failed; the fallback line was sent."
    return ""
