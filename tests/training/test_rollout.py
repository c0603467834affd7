"""A rollout turn as token ids: the policy's samples are trained, what the runtime adds is masked, and the
whole sequence is the very text the training template and the local backend render."""

import asyncio
import json
from types import SimpleNamespace

import torch

from harness.runtime import run_turn
from harness.simulator import SandboxTools
from serving.backends.hermes import render_chatml
from training.base_models import TINY, load_tokenizer
from training.rollout import Episode, PolicyBackend
from training.trajectories import TRAINING_NOW


class ScriptedPolicy(torch.nn.Module):
    """Stands in for the policy's sampler only: `generate` emits scripted text (the id bookkeeping is under test)."""

    def __init__(self, tokenizer, texts):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.tokenizer, self.texts, self.prompts = tokenizer, list(texts), []

    def generate(self, input_ids, **_):
        self.prompts.append(input_ids[0].tolist())
        ids = self.tokenizer(self.texts.pop(0), add_special_tokens=False)["input_ids"]
        scores = [torch.nn.functional.one_hot(torch.tensor([i]), len(self.tokenizer)).float() * 50 for i in ids]
        return SimpleNamespace(sequences=torch.cat([input_ids, torch.tensor([ids])], dim=1), scores=scores)


def test_turn_ids_mask_and_segments(mini_spec, mini_cases):
    tokenizer = load_tokenizer(TINY)
    case = next(c for c in mini_cases if c.expected.tools)
    link = case.expected.tools[0].arguments["link_id"]
    calls = [f'<tool_call>\n{{"name": "get_product_info_by_link_id", "arguments": {{"link_id": "{link}"}}}}\n'
             f'</tool_call><|im_end|>',
             '<tool_call>\n{"name": "load_skill", "arguments": {"name": "product-qa"}}\n</tool_call><|im_end|>',
             "Here it is!<|im_end|>"]
    model = ScriptedPolicy(tokenizer, calls)
    backend = PolicyBackend(model, tokenizer, max_new_tokens=64, temperature=1.0, max_completion_length=4096)
    episode = Episode(case=case, spec=mini_spec, fault_rates={}, seed=1)
    sandbox = SandboxTools(dict(case.room), seed=1)
    result = asyncio.run(run_turn(mini_spec, episode.turn(), backend, sandbox.registry(), now=TRAINING_NOW))
    assert result.outcome == "replied" and result.trace["skills_loaded"] == ["product-qa"]
    assert [c.name for c in sandbox.calls] == ["get_product_info_by_link_id"]

    ids, mask, segments = backend.completion_ids, backend.env_mask, backend.segment_ids
    assert len(ids) == len(mask) == len(segments) == len(backend.logprobs)
    trained = tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if m])
    assert trained == "".join(calls)  # exactly the sampled tokens carry the loss
    context = tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if not m])
    assert "<tool_response>" in context and "Look the product up" in context  # tool result, skill body: masked
    assert [s["kind"] for s in backend.segments] == ["tool", "tool", "reply"]
    assert set(segments) == {0, 1, 2} and segments[-1] == 2
    # each call saw exactly the ids so far (no re-tokenization), and the whole turn is the served rendering
    assert model.prompts[2] == backend.prompt_ids + ids[:len(model.prompts[2]) - len(backend.prompt_ids)]
    messages = episode.prompt()
    whole = tokenizer.decode(backend.prompt_ids + ids)
    assert whole.startswith(render_chatml(messages, json.loads(json.dumps(mini_tools(mini_spec)))))
    assert whole.endswith("Here it is!<|im_end|>")


def mini_tools(spec):
    from harness.spec import openai_tools

    return openai_tools(spec)


def test_rollout_func_runs_episodes_with_injected_faults(mini_spec, mini_cases):
    from training.rollout import HarnessRollout, prompt_key

    tokenizer = load_tokenizer(TINY)
    case = next(c for c in mini_cases if c.expected.tools)
    link = case.expected.tools[0].arguments["link_id"]
    call = (f'<tool_call>\n{{"name": "get_product_info_by_link_id", "arguments": {{"link_id": "{link}"}}}}\n'
            f'</tool_call><|im_end|>')
    episode = Episode(case=case, spec=mini_spec, fault_rates={"permission": 1.0}, seed=3)
    skill = '<tool_call>\n{"name": "load_skill", "arguments": {"name": "product-qa"}}\n</tool_call><|im_end|>'
    model = ScriptedPolicy(tokenizer, [call, skill, "Sorry, I can't check that right now.<|im_end|>"] * 2)
    trainer = SimpleNamespace(model=model, accelerator=SimpleNamespace(unwrap_model=lambda m: m))
    rollout = HarnessRollout({prompt_key(episode.prompt()): episode}, tokenizer, max_new_tokens=64, temperature=1.0,
                             max_completion_length=2048, deadline_s=60)
    out = rollout([episode.prompt(), episode.prompt()], trainer)  # two rollouts of one group
    assert {k: len(v) for k, v in out.items()} == {k: 2 for k in out}
    for trace, ids, mask in zip(out["trace"], out["completion_ids"], out["env_mask"], strict=True):
        errors = [s.get("error", "") for s in trace["steps"] if s["kind"] == "tool"]
        assert errors and errors[0].startswith("permission denied")  # the injected fault reached the model
        assert len(ids) == len(mask) and 0 in mask and 1 in mask
        assert trace["outcome"] == "replied"
    assert not model.texts  # each rollout ran its own whole turn
    assert json.loads(out["case"][0])["case_id"] == case.case_id
    try:
        rollout([[{"role": "user", "content": "not an episode"}]], trainer)
    except KeyError as error:
        assert "no HSA-RL episode" in str(error)
    else:
        raise AssertionError("an unknown prompt must not be rolled out")
