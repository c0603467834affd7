"""HSA-RL knobs (`rl.py`)."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from training.rewards import DEFAULT_REWARDS, reward_names
from training.stage_config import StageConfig
from training.validation import ConfigError, build, knob, require

FAULT_KINDS = ("timeout", "malformed", "permission")
GENERATIONS = ("transformers", "vllm-colocate", "vllm-server")


def vllm_installed() -> bool:
    """Whether this host can import vLLM (looked up, not imported: importing it initialises CUDA)."""
    return importlib.util.find_spec("vllm") is not None


def _url_problem(url: str) -> str | None:
    """Why `url` is not a vLLM server base URL (http(s)://host[:port]), or None."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises on a port that is not a number in 0..65535)
    except ValueError as error:
        return f"“{url}” does not parse as a URL ({error})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"“{url}” is not an http(s)://host[:port] URL"
    if parts.path.strip("/") or parts.query or parts.fragment:
        return f"“{url}” has a path; give the server's base URL (TRL appends /v1/…)"
    return None


@dataclass(frozen=True)
class RlConfig(StageConfig):
    learning_rate: float = knob(1e-6, "Peak learning rate.")
    per_device_train_batch_size: int = knob(4, "Completions per device per micro-batch (a multiple of "
                                               "num_generations keeps whole groups together).")
    num_generations: int = knob(4, "Rollouts per prompt (the group GRPO normalises within), >= 2.")
    cases: int = knob(16, "Simulator cases the rollouts are drawn from (seeded apart from the SFT cases).")
    augmented_share: float = knob(0.5, "Share of episodes under an HSA-augmented harness; the rest use the "
                                       "original (the report trains on both).")
    fault_rate: float = knob(0.1, "Probability that a sandbox tool call fails by injection, split evenly over "
                                  "timeout, malformed output and permission denial.")
    temperature: float = knob(1.0, "Sampling temperature of the rollouts.")
    max_new_tokens: int = knob(96, "Tokens per model call of a rollout.")
    max_completion_length: int = knob(512, "Tokens of a whole turn (model calls plus tool results and hook "
                                           "feedback). A longer turn is cut there and masked out of the loss.")
    turn_deadline_s: float = knob(300.0, "Deadline of one rollout turn (generation on a CPU is slow).")
    beta: float = knob(0.0, "KL coefficient against the stage's starting model (0: no reference model).")
    epsilon: float = knob(3e-4, "Clipping range of the sequence-level ratio (GSPO uses a small one).")
    num_iterations: int = knob(2, "Optimisation passes over each generation. GSPO's ratio and its clipping act "
                                  "only from the second pass (with 1 the ratio is exactly 1); rollouts are the "
                                  "costly part, so reusing each twice is cheap.")
    steps_per_generation: int | None = knob(None, "Optimiser micro-steps each generation is split into (empty: "
                                                  "gradient_accumulation_steps, one optimiser step a generation).")
    rewards: tuple[str, ...] = knob(DEFAULT_REWARDS, "Reward functions by name (training/rewards.py).")
    reward_weights: tuple[float, ...] = knob((), "One weight per reward (empty: all 1).")
    segment_advantages: bool = knob(True, "Tool-call tokens and reply tokens get advantages from their own "
                                          "rewards (rewards.SEGMENT_OF) instead of one per completion.")
    drop_zero_spread_groups: bool = knob(True, "Groups whose rewards do not vary carry no gradient (TRL keeps "
                                               "them; with GDPO's batch re-centring they would get a spurious one).")
    generation: str = knob("transformers", "What samples the rollouts' model calls (batched over a generation "
                                           "batch's turns either way): transformers (the policy in process, CPU "
                                           "or GPU), vllm-colocate (TRL's vLLM engine on the training GPUs) or "
                                           "vllm-server (a `vllm serve` server at vllm_server_url). vLLM modes "
                                           "need vLLM installed on the training host.")
    vllm_server_url: str = knob("", "Base URL of the vLLM server for generation vllm-server, e.g. "
                                    "http://10.0.0.5:8000.")
    vllm_gpu_memory_utilization: float = knob(0.3, "Share of each GPU's memory vLLM reserves in vllm-colocate "
                                                   "(weights, activations, KV cache); the rest is training's.")

    def check(self) -> None:
        super().check()
        require(2 <= self.num_generations <= 64, "num_generations", "must be within 2..64")
        require(self.per_device_train_batch_size % self.num_generations == 0, "per_device_train_batch_size",
                "must be a multiple of num_generations")
        require(1 <= self.cases <= 100_000, "cases", "must be within 1..100000")
        require(0.0 <= self.augmented_share <= 1.0, "augmented_share", "must be within 0..1")
        require(0.0 <= self.fault_rate <= 1.0, "fault_rate", "must be within 0..1")
        require(0.0 < self.temperature <= 2.0, "temperature", "must be within (0, 2]")
        require(1 <= self.max_new_tokens <= 8192, "max_new_tokens", "must be within 1..8192")
        require(self.max_new_tokens <= self.max_completion_length <= 65536, "max_completion_length",
                "must be within max_new_tokens..65536")
        require(self.turn_deadline_s > 0, "turn_deadline_s", "must be positive")
        require(self.beta >= 0, "beta", "must be >= 0")
        require(0 < self.epsilon < 1, "epsilon", "must be within (0, 1)")
        require(1 <= self.num_iterations <= 16, "num_iterations", "must be within 1..16")
        require(self.steps_per_generation is None or 1 <= self.steps_per_generation <= 1024,
                "steps_per_generation", "must be empty or within 1..1024")
        require(len(self.rewards) > 0, "rewards", "name at least one reward")
        unknown = [name for name in self.rewards if name not in reward_names()]
        require(not unknown, "rewards", f"unknown reward “{unknown[0] if unknown else ''}”; registered: "
                                        f"{', '.join(reward_names())}")
        require(not self.reward_weights or len(self.reward_weights) == len(self.rewards), "reward_weights",
                "must be empty or one weight per reward")
        require(self.generation in GENERATIONS, "generation", f"must be one of {', '.join(GENERATIONS)}")
        problem = _url_problem(self.vllm_server_url) if self.vllm_server_url else None
        require(problem is None, "vllm_server_url", problem or "")
        require(self.generation != "vllm-server" or bool(self.vllm_server_url), "vllm_server_url",
                "required when generation is vllm-server")
        require(0.0 < self.vllm_gpu_memory_utilization < 1.0, "vllm_gpu_memory_utilization",
                "must be within (0, 1)")

    def generation_arguments(self, where: str = "rl") -> dict[str, Any]:
        """GRPOConfig's generation keyword arguments. Checks this host first (the config itself is valid on
        any host, e.g. the console's): a vLLM mode where vLLM is not installed raises `ConfigError`."""
        if self.generation == "transformers":
            return {"use_vllm": False}
        if not vllm_installed():
            raise ConfigError(f"{where}.generation", "vLLM is not installed on this host")
        if self.generation == "vllm-colocate":
            return {"use_vllm": True, "vllm_mode": "colocate",
                    "vllm_gpu_memory_utilization": self.vllm_gpu_memory_utilization}
        return {"use_vllm": True, "vllm_mode": "server", "vllm_server_base_url": self.vllm_server_url.rstrip("/")}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, where: str = "rl") -> RlConfig:
        return build(cls, data, where)
