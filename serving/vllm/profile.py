"""How the production model is served: one frozen profile per model, turned into a `vllm serve` argv.

This file imports only the standard library, so it also runs on its own inside the vLLM image, where
docker-compose.yml starts the server with it (the profile is the single source of the flags):

    python -m serving.vllm.profile qwen3-8b          # print the command line
    python3 profile.py --exec qwen3-8b               # become `vllm serve …` (the compose service)

The flags follow the harness's needs (see shared/reference/harness-formats.md §4):
- tool calls: Qwen3 (2504/2507) writes Hermes `<tool_call>` JSON, read by `--tool-call-parser hermes`;
  `--enable-auto-tool-choice` lets the model decide. The local backend renders the same format.
- reasoning: `--reasoning-parser qwen3` moves thinking into `message.reasoning`, so the runtime never
  shows it to viewers; thinking is off by default (`enable_thinking: false`) for the 15 s deadline.
- prefix caching: the harness puts static prompt blocks first, so the system prompt and tool list are
  a shared prefix across viewers; sha256 block hashes because several workspaces share one server.
- speculative decoding: MTP only for checkpoints with native MTP heads (Qwen3-Next, Qwen3.5/3.6, …).
  Plain Qwen3 dense and 30B-A3B checkpoints have none, so:
  * `qwen3-8b` uses EAGLE-3 with RedHatAI's published draft head: the best time-per-output-token
    at the low concurrency of live replies, for a small extra model the GPU host must pre-fetch.
  * `qwen3-30b-a3b` uses n-gram prompt lookup: no draft model to match the MoE checkpoint, and
    replies often copy product names and prices from tool results, which n-gram lookup predicts.
"""

import argparse
import json
import os
import shlex
import sys
from dataclasses import dataclass, field
from typing import Any

EAGLE3_QWEN3_8B = {"method": "eagle3", "model": "RedHatAI/Qwen3-8B-speculator.eagle3", "num_speculative_tokens": 3}
NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 4}
MTP_1 = {"method": "mtp", "num_speculative_tokens": 1}  # only for checkpoints with native MTP heads


@dataclass(frozen=True)
class VllmProfile:
    model: str  # Hugging Face id or local path
    served_model_name: str  # the `model` the OpenAI backend sends
    tool_call_parser: str = "hermes"
    reasoning_parser: str | None = "qwen3"
    enable_prefix_caching: bool = True
    prefix_caching_hash_algo: str = "sha256"
    max_model_len: int = 16384
    gpu_memory_utilization: float = 0.9
    speculative_config: dict[str, Any] | None = None
    default_chat_template_kwargs: dict[str, Any] = field(default_factory=lambda: {"enable_thinking": False})
    host: str = "0.0.0.0"
    port: int = 8000
    extra_args: tuple[str, ...] = ()

    def to_argv(self) -> list[str]:
        """The `vllm serve …` command line, ready for `os.execvp(argv[0], argv)`."""
        argv = ["vllm", "serve", self.model,
                "--served-model-name", self.served_model_name,
                "--host", self.host, "--port", str(self.port),
                "--max-model-len", str(self.max_model_len),
                "--gpu-memory-utilization", str(self.gpu_memory_utilization),
                "--enable-auto-tool-choice", "--tool-call-parser", self.tool_call_parser]
        if self.reasoning_parser:
            argv += ["--reasoning-parser", self.reasoning_parser]
        if self.enable_prefix_caching:
            argv += ["--enable-prefix-caching", "--prefix-caching-hash-algo", self.prefix_caching_hash_algo]
        else:
            argv += ["--no-enable-prefix-caching"]
        if self.default_chat_template_kwargs:
            argv += ["--default-chat-template-kwargs", _json(self.default_chat_template_kwargs)]
        if self.speculative_config:
            argv += ["--speculative-config", _json(self.speculative_config)]
        return argv + list(self.extra_args)

    @property
    def base_url(self) -> str:
        """The URL the `openai` backend uses for a server on this machine."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        return f"http://{host}:{self.port}/v1"


def _json(value: dict[str, Any]) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


PROFILES: dict[str, VllmProfile] = {
    "qwen3-8b": VllmProfile(model="Qwen/Qwen3-8B", served_model_name="qwen3-8b",
                            speculative_config=EAGLE3_QWEN3_8B),
    "qwen3-30b-a3b": VllmProfile(model="Qwen/Qwen3-30B-A3B", served_model_name="qwen3-30b-a3b",
                                 speculative_config=NGRAM),
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Print (or exec) the `vllm serve` command of a profile.")
    parser.add_argument("profile", choices=sorted(PROFILES))
    parser.add_argument("--json", action="store_true", help="print the argv as a JSON list")
    parser.add_argument("--exec", action="store_true", help="replace this process with the vLLM server")
    args = parser.parse_args(argv)
    command = PROFILES[args.profile].to_argv()
    if args.exec:
        sys.stdout.flush()
        os.execvp(command[0], command)
    print(json.dumps(command) if args.json else shlex.join(command))


if __name__ == "__main__":
    main()
