"""Builders for the training job tests: the mini harness (short prompts, so CPU steps take seconds) in a
workspace, and pipeline configs of a tiny random SmolLM2-shaped model."""

from harness import services as harness_services
from workspaces.access import Actor


def mini_harness(workspace, name: str = "mini"):
    from tests.training.conftest import MINI_HARNESS  # the pipeline tests' small harness

    return harness_services.harness_create(actor=Actor.system("test"), workspace=workspace, name=name,
                                           files=dict(MINI_HARNESS), message="mini")


def tiny_config(*stages: tuple[str, dict], seed: int = 0) -> dict:
    """A pipeline config (without harnesses and data) of the tiny random model on CPU."""
    return {
        "model": {"base": "tiny-random-smollm2", "finetune": "full", "device": "cpu"},
        "trajectories": {"teacher": "oracle", "augmented_variants": 1},
        "stages": [{"kind": kind, "config": config} for kind, config in stages],
        "seed": seed,
    }


def sft(max_steps: int, **extra) -> tuple[str, dict]:
    return "sft", {"max_steps": max_steps, "save_steps": extra.pop("save_steps", max_steps),
                   "logging_steps": 1, **extra}
