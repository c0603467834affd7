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
from training.rollout import Episode, GroupSampler, PolicyBackend, TransformersGeneration
from training.trajectories import TRAINING_NOW


class ScriptedPolicy(torch.nn.Module):
    """Stands in for the policy's sampler only (the id bookkeeping is under test): `generate` takes a batch of
    left-padded rows and answers each with scripted text, by its turn and call number.

    `scripts` maps a text found in a turn's first prompt (its viewer message) to the outputs of that turn's model
    calls in order; a plain list scripts every turn alike. A row's turn is the first prompt it extends, and its
    call number is how many assistant headers it has beyond that prompt's.
    """

    def __init__(self, tokenizer, scripts):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.tokenizer = tokenizer
        self.scripts = scripts if isinstance(scripts, dict) else {"": list(scripts)}
        self.roots, self.prompts, self.batches = [], [], []

    def _script(self, prefix):
        root = next((r for r in self.roots if prefix[:len(r)] == r), None)
        if root is None:
            self.roots.append(root := prefix)
        first = self.tokenizer.decode(root)
        script = next(texts for key, texts in self.scripts.items() if key in first)
        call = self.tokenizer.decode(prefix).count("<|im_start|>assistant") - first.count("<|im_start|>assistant")
        return self.tokenizer(script[call], add_special_tokens=False)["input_ids"]

    def forward(self, input_ids, **_):  # the shared prefill of duplicate rows: a script has nothing to cache
        return SimpleNamespace(cache=SimpleNamespace(batch_select_indices=lambda indices: None))

    def generate(self, input_ids, attention_mask, **_):
        outputs = []
        for row, mask in zip(input_ids, attention_mask, strict=True):
            prefix = row[mask.bool()].tolist()
            self.prompts.append(prefix)
            outputs.append(self._script(prefix))
        self.batches.append(len(outputs))
        width = max(len(ids) for ids in outputs)
        new = torch.tensor([ids + [self.tokenizer.pad_token_id] * (width - len(ids)) for ids in outputs])
        scores = [torch.nn.functional.one_hot(new[:, step], len(self.tokenizer)).float() * 50 for step in range(width)]
        return SimpleNamespace(sequences=torch.cat([input_ids, new], dim=1), scores=scores)


def policy_backend(model, tokenizer, **kwargs):
    sampler = GroupSampler(TransformersGeneration(model, tokenizer, temperature=1.0))
    return PolicyBackend(sampler, tokenizer, **kwargs)


def test_turn_ids_mask_and_segments(mini_spec, mini_cases):
    tokenizer = load_tokenizer(TINY)
    case = next(c for c in mini_cases if c.expected.tools)
    link = case.expected.tools[0].arguments["link_id"]
    calls = [f'<tool_call>\n{{"name": "get_product_info_by_link_id", "arguments": {{"link_id": "{link}"}}}}\n'
             f'</tool_call><|im_end|>',
             '<tool_call>\n{"name": "load_skill", "arguments": {"name": "product-qa"}}\n</tool_call><|im_end|>',
             "Here it is!<|im_end|>"]
    model = ScriptedPolicy(tokenizer, calls)
    backend = policy_backend(model, tokenizer, max_new_tokens=64, max_completion_length=4096)
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
    model = ScriptedPolicy(tokenizer, [call, skill, "Sorry, I can't check that right now.<|im_end|>"])
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
    assert len(model.prompts) == 6 and model.batches == [2, 2, 2]  # each rollout ran its own whole turn, together
    assert json.loads(out["case"][0])["case_id"] == case.case_id
    try:
        rollout([[{"role": "user", "content": "not an episode"}]], trainer)
    except KeyError as error:
        assert "no HSA-RL episode" in str(error)
    else:
        raise AssertionError("an unknown prompt must not be rolled out")
