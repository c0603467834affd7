"""A generation batch's turns advance together: one batched generation serves every waiting turn, and each turn
records exactly the ids a one-at-a-time run records. The vLLM path's wiring (config → GRPOConfig → which
generation the rollout uses) is checked without vLLM, which this machine does not have."""

import asyncio
import json
from types import SimpleNamespace

import pytest
import torch

from tests.training.test_pipeline import RL, config
from tests.training.test_rollout import ScriptedPolicy
from training import rl as rl_module
from training import rl_config as rl_config_module
from training.base_models import TINY, load_model, load_tokenizer, materialize_base, model_cache
from training.pipeline import run_pipeline
from training.rl_config import RlConfig
from training.rollout import (
    Episode,
    GroupSampler,
    HarnessRollout,
    TransformersGeneration,
    VllmGeneration,
    prompt_key,
)
from training.validation import ConfigError

END = "<|im_end|>"


def tool_call(tool, **arguments):
    call = json.dumps({"name": tool, "arguments": arguments})
    return f"<tool_call>\n{call}\n</tool_call>{END}"


def trainer_for(model):
    return SimpleNamespace(model=model, accelerator=SimpleNamespace(unwrap_model=lambda m: m, num_processes=1))


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(TINY)


@pytest.fixture(scope="module")
def group(mini_spec, mini_cases):
    """Turns of different lengths: tool + skill + reply, skill + reply, a reply refused by the hook then the
    skill and a reply, two replies without a skill, and a tool call that fails by injected permission denial."""
    wash, bye, price, hello = (mini_cases[i] for i in (0, 2, 4, 5))
    scripts = {
        wash.message: [tool_call("get_product_info_by_link_id", link_id="L003"),
                       tool_call("load_skill", name="product-qa"), f"Hand wash it cold!{END}"],
        bye.message: [tool_call("load_skill", name="casual-chat"), f"Bye, thanks for watching!{END}"],
        hello.message: [f"Hi Seattle!{END}", tool_call("load_skill", name="casual-chat"),
                        f"Hi Seattle, welcome to the stream!{END}"],
        mini_cases[3].message: [f"It's a steal!{END}", f"Really, a steal!{END}"],
        price.message: [tool_call("get_product_info_by_link_id", link_id="L001"),
                        tool_call("load_skill", name="product-qa"), f"Sorry, I can't check that now.{END}"],
    }
    faults = {price.case_id: {"permission": 1.0}}
    episodes = [Episode(case=case, spec=mini_spec, fault_rates=faults.get(case.case_id, {}), seed=index)
                for index, case in enumerate((wash, bye, hello, mini_cases[3], price))]
    prompts = [e.prompt() for e in episodes]
    prompts.insert(1, prompts[0])  # a GRPO group: the same episode twice
    return {prompt_key(e.prompt()): e for e in episodes}, prompts, scripts


def run(group, tokenizer, *, batched, max_completion_length=2048):
    episodes, prompts, scripts = group
    model = ScriptedPolicy(tokenizer, scripts)
    rollout = HarnessRollout(episodes, tokenizer, max_new_tokens=64, temperature=1.0,
                             max_completion_length=max_completion_length, deadline_s=60, batched=batched)
    return rollout(prompts, trainer_for(model)), model, rollout


def test_a_batched_group_records_what_turns_run_one_at_a_time_record(group, tokenizer):
    batched, model, rollout = run(group, tokenizer, batched=True)
    alone, model_alone, rollout_alone = run(group, tokenizer, batched=False)

    for column in ("prompt_ids", "completion_ids", "logprobs", "env_mask", "segment_ids", "segments", "case"):
        assert batched[column] == alone[column], column
    for one, other in zip(batched["trace"], alone["trace"], strict=True):
        assert one["outcome"] == other["outcome"]
        assert [s["kind"] for s in one["steps"]] == [s["kind"] for s in other["steps"]]
    outcomes = [t["outcome"] for t in batched["trace"]]
    assert outcomes.count("replied") >= 4
    calls = [len(s) for s in batched["segments"]]
    assert len(set(calls)) > 1  # turns of different lengths shared the batches
    permission = [s.get("error", "") for s in batched["trace"][-1]["steps"] if s["kind"] == "tool"]
    assert permission and permission[0].startswith("permission denied")

    # every model call saw the same prefix either way (left padding stripped), in fewer generations
    assert sorted(model.prompts) == sorted(model_alone.prompts)
    assert rollout.model_calls == rollout_alone.model_calls == sum(calls) == len(model.prompts)
    assert rollout.batches == len(model.batches) == max(calls) < sum(calls)
    assert model.batches[0] == len(group[1]) and model_alone.batches == [1] * sum(calls)
    assert rollout_alone.batches == sum(calls)


def test_a_turn_cut_at_max_completion_length_leaves_the_group_the_rest_go_on(group, tokenizer):
    batched, _, _ = run(group, tokenizer, batched=True, max_completion_length=40)
    alone, _, _ = run(group, tokenizer, batched=False, max_completion_length=40)
    assert batched["completion_ids"] == alone["completion_ids"] and batched["env_mask"] == alone["env_mask"]
    assert "error" in [t["outcome"] for t in batched["trace"]]
    for mask in batched["env_mask"]:  # each call sampled within what the turn had left
        assert max(i for i, trained in enumerate(mask) if trained) < 40


def echo_generation(calls):
    def generate(prefixes, budgets):
        calls.append((list(prefixes), list(budgets)))
        return [(prefix[-1:] * budget, [-1.0] * budget) for prefix, budget in zip(prefixes, budgets, strict=True)]
    return generate


def test_a_turn_past_its_deadline_leaves_the_group_without_holding_it_up():
    calls = []

    async def scenario():
        sampler = GroupSampler(echo_generation(calls), turns=3)

        async def past_its_deadline():
            try:
                async with asyncio.timeout(0.05):
                    return await sampler.sample(0, [7], 2)
            except TimeoutError:
                return "deadline"
            finally:
                sampler.finished()

        async def in_a_slow_tool_then_done():
            await asyncio.sleep(0.2)
            sampler.finished()

        async def waiting():
            try:
                return await sampler.sample(1, [5, 6], 3)
            finally:
                sampler.finished()

        return await asyncio.gather(past_its_deadline(), waiting(), in_a_slow_tool_then_done())

    first, second, _ = asyncio.run(scenario())
    assert first == "deadline"
    assert second == ([6, 6, 6], [-1.0, -1.0, -1.0])
    assert calls == [([[5, 6]], [3])]  # one batch, without the turn that left


def test_slots_are_served_in_order_and_a_generation_error_reaches_every_waiting_turn():
    calls = []

    async def scenario(generation):
        sampler = GroupSampler(generation, turns=2)
        return await asyncio.gather(sampler.sample(1, [1], 1), sampler.sample(0, [2], 2), return_exceptions=True)

    assert asyncio.run(scenario(echo_generation(calls))) == [([1], [-1.0]), ([2, 2], [-1.0, -1.0])]
    assert calls == [([[2], [1]], [2, 1])]  # by slot, not by arrival

    def broken(prefixes, budgets):
        raise RuntimeError("out of memory")

    errors = asyncio.run(scenario(broken))
    assert [str(e) for e in errors] == ["out of memory"] * 2


@pytest.fixture(scope="module")
def tiny_model():
    return load_model(materialize_base(TINY, model_cache(), seed=0), use_cpu=True)


@pytest.mark.parametrize("rows", [[0, 1, 2], [0, 1, 2, 0, 1, 0]], ids=["distinct", "shared prefill"])
def test_left_padded_rows_sample_what_the_model_gives_each_row_alone(tiny_model, tokenizer, rows):
    """Each row's logprobs are the model's own at temperature 0.7 on that row unpadded (also when rows with one
    prefix share its prefill), each row stops at its budget, and under a fixed seed the batch samples the same
    again."""
    generation = TransformersGeneration(tiny_model, tokenizer, temperature=0.7)
    texts = ["Hello there, how are you?", "Hi", "What's the price of the red one on screen"]
    prefixes = [tokenizer(texts[row], add_special_tokens=False)["input_ids"] for row in rows]
    budgets = [5, 9, 3, 4, 6, 2][:len(rows)]
    forwards = []
    hook = tiny_model.register_forward_pre_hook(
        lambda module, args, kwargs: forwards.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True)
    try:
        torch.manual_seed(0)
        rows = generation(prefixes, budgets)
    finally:
        hook.remove()
    assert forwards[0][0] == 3 and forwards[1] == (len(rows), 1)  # one prefill row per distinct prefix
    torch.manual_seed(0)
    assert generation(prefixes, budgets) == rows
    assert generation.calls == 2
    end = tokenizer.convert_tokens_to_ids(END)
    for prefix, budget, (ids, logprobs) in zip(prefixes, budgets, rows, strict=True):
        assert len(ids) == len(logprobs) and (len(ids) == budget or ids[-1] == end)
        with torch.no_grad():
            logits = tiny_model(torch.tensor([prefix + ids])).logits[0, len(prefix) - 1:-1].float()
        alone = torch.log_softmax(logits / 0.7, dim=-1).gather(1, torch.tensor(ids)[:, None])[:, 0]
        assert torch.allclose(alone, torch.tensor(logprobs), atol=1e-4)


def test_a_later_call_prefills_only_what_was_appended_to_a_kept_cache(tiny_model, tokenizer):
    """The second call's prefixes extend the first call's rows (sampled ids, then env tokens of different lengths):
    the forward before sampling runs only the appended tokens (plus no row twice), and every row's logprobs are
    still the model's own on that row alone; without carrying, the whole prefix is prefilled again."""
    generation = TransformersGeneration(tiny_model, tokenizer, temperature=0.7)
    first = [tokenizer(text, add_special_tokens=False)["input_ids"]
             for text in ("Hello there, how are you?", "What's the price of the red one on screen")]
    torch.manual_seed(1)
    sampled = generation(first, [4, 6])
    env = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in ("<tool_response>ok", "no")]
    second = [prefix + ids + extra for prefix, (ids, _), extra in zip(first, sampled, env, strict=True)]
    forwards = []
    hook = tiny_model.register_forward_pre_hook(
        lambda module, args, kwargs: forwards.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True)
    try:
        torch.manual_seed(2)
        rows = generation(second, [5, 5])
    finally:
        hook.remove()
    held = [min(len(ids), max(len(i) for i, _ in sampled) - 1) for ids, _ in sampled]
    appended = [len(s) - len(p) - h for s, p, h in zip(second, first, held, strict=True)]
    assert forwards[0] == (2, max(appended) - 1) and forwards[1] == (2, 1)
    assert generation.reused_tokens == sum(len(p) + h for p, h in zip(first, held, strict=True))
    for prefix, (ids, logprobs) in zip(second, rows, strict=True):
        with torch.no_grad():
            logits = tiny_model(torch.tensor([prefix + ids])).logits[0, len(prefix) - 1:-1].float()
        alone = torch.log_softmax(logits / 0.7, dim=-1).gather(1, torch.tensor(ids)[:, None])[:, 0]
        assert torch.allclose(alone, torch.tensor(logprobs), atol=1e-4)

    fresh = TransformersGeneration(tiny_model, tokenizer, temperature=0.7, carry_cache=False)
    fresh(first, [4, 6])
    forwards.clear()
    hook = tiny_model.register_forward_pre_hook(
        lambda module, args, kwargs: forwards.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True)
    try:
        fresh(second, [5, 5])
    finally:
        hook.remove()
    assert forwards[0] == (2, max(len(s) for s in second) - 1) and fresh.reused_tokens == 0


class FakeVllmEngine:
    """TRL's `VLLMGeneration` as the rollout uses it: `generate` over token ids, settings read at call time."""

    mode = "colocate"

    def __init__(self):
        self.max_completion_length, self.generation_kwargs = 512, {"seed": 1}
        self.seen = []

    def generate(self, prompts, images, num_generations):
        self.seen.append((prompts, self.max_completion_length, dict(self.generation_kwargs), num_generations))
        completions = [[11, 12, 2, 2], [13] * self.max_completion_length]  # vLLM stops at <|im_end|> (id 2)
        logprobs = [[[-0.5, -2.0]] * len(c) for c in completions]
        return prompts, completions, logprobs, None


def test_vllm_generation_asks_for_each_call_budget_and_stops_at_im_end(tokenizer):
    engine = FakeVllmEngine()
    rows = VllmGeneration(engine, tokenizer)([[1, 5], [1, 6, 7]], [6, 4])
    assert engine.seen == [([[1, 5], [1, 6, 7]], 6, {"seed": 1, "stop_token_ids": [2]}, 1)]
    assert (engine.max_completion_length, engine.generation_kwargs) == (512, {"seed": 1})  # restored
    assert rows == [([11, 12, 2], [-0.5] * 3), ([13] * 4, [-0.5] * 4)]


def test_the_rollout_samples_with_the_configured_generation(tokenizer):
    model = torch.nn.Linear(1, 1)
    trainer = SimpleNamespace(**vars(trainer_for(model)), vllm_generation=FakeVllmEngine())
    rollout = HarnessRollout({}, tokenizer, max_new_tokens=8, temperature=1.0, max_completion_length=64,
                             deadline_s=60)
    assert isinstance(rollout.sampler_generation(trainer), TransformersGeneration)
    for generation in ("vllm-colocate", "vllm-server"):
        rollout.generation = generation
        assert isinstance(rollout.sampler_generation(trainer), VllmGeneration)
    trainer.vllm_generation.mode = "server"
    trainer.accelerator.num_processes = 2
    with pytest.raises(RuntimeError, match="vllm-server drives the server from one training process"):
        rollout.sampler_generation(trainer)


@pytest.mark.parametrize("values, field, message", [
    ({"generation": "vllm"}, "rl.generation", "must be one of transformers, vllm-colocate, vllm-server"),
    ({"generation": "vllm-server"}, "rl.vllm_server_url", "required when generation is vllm-server"),
    ({"generation": "vllm-server", "vllm_server_url": "localhost:8000"}, "rl.vllm_server_url", "http(s)://host"),
    ({"vllm_server_url": "http://gpu-1:80a0"}, "rl.vllm_server_url", "does not parse"),
    ({"vllm_server_url": "http://gpu-1:8000/v1"}, "rl.vllm_server_url", "has a path"),
    ({"vllm_gpu_memory_utilization": 1.5}, "rl.vllm_gpu_memory_utilization", "within (0, 1)"),
])
def test_generation_settings_are_checked_naming_the_field(values, field, message):
    with pytest.raises(ConfigError) as error:
        RlConfig.from_dict(values)
    assert error.value.field == field and message in error.value.message


def test_the_generation_arguments_and_a_host_without_vllm(monkeypatch):
    assert RlConfig.from_dict({}).generation_arguments() == {"use_vllm": False}
    server = RlConfig.from_dict({"generation": "vllm-server", "vllm_server_url": "http://gpu-1:8000/"})
    colocate = RlConfig.from_dict({"generation": "vllm-colocate", "vllm_gpu_memory_utilization": 0.4})
    with pytest.raises(ConfigError) as error:  # vLLM is not installed here
        server.generation_arguments()
    assert str(error.value) == "rl.generation: vLLM is not installed on this host"
    monkeypatch.setattr(rl_config_module, "vllm_installed", lambda: True)
    assert server.generation_arguments() == {"use_vllm": True, "vllm_mode": "server",
                                             "vllm_server_base_url": "http://gpu-1:8000"}
    assert colocate.generation_arguments() == {"use_vllm": True, "vllm_mode": "colocate",
                                               "vllm_gpu_memory_utilization": 0.4}


class TrainerBuilt(Exception):
    pass


def test_run_rl_hands_the_generation_to_grpo_and_the_rollout(tmp_path, monkeypatch):
    """The RL stage as far as building the trainer: vLLM refused before it on this host; with vLLM (pretended)
    the GRPOConfig asks TRL for its server and the rollout samples through it."""
    built = []

    def stub_trainer(**kwargs):
        built.append(kwargs)
        raise TrainerBuilt

    monkeypatch.setattr(rl_module, "HarnessGRPOTrainer", stub_trainer)
    stage = {"kind": "rl", "config": {**RL["config"], "generation": "vllm-server",
                                      "vllm_server_url": "http://10.0.0.5:8000"}}
    with pytest.raises(ConfigError, match=r"stages\[0\]\.config\.generation: vLLM is not installed on this host"):
        run_pipeline(config(stage), artifacts_dir=tmp_path / "a", reporter=SimpleNamespace(line=print),
                     should_stop=lambda: False)
    assert not built

    monkeypatch.setattr(rl_config_module, "vllm_installed", lambda: True)
    with pytest.raises(TrainerBuilt):
        run_pipeline(config(stage), artifacts_dir=tmp_path / "b", reporter=SimpleNamespace(line=print),
                     should_stop=lambda: False)
    args, rollout = built[0]["args"], built[0]["rollout_func"]
    assert (args.use_vllm, args.vllm_mode, args.vllm_server_base_url) == (True, "server", "http://10.0.0.5:8000")
    assert rollout.generation == "vllm-server" and rollout.batched

    built.clear()
    with pytest.raises(TrainerBuilt):
        run_pipeline(config(RL), artifacts_dir=tmp_path / "c", reporter=SimpleNamespace(line=print),
                     should_stop=lambda: False)
    assert built[0]["args"].use_vllm is False and built[0]["rollout_func"].generation == "transformers"


def test_a_vllm_stage_is_refused_before_anything_trains_on_a_host_without_vllm(tmp_path):
    sft = {"kind": "sft", "config": {"max_steps": 1, "save_steps": 1, "max_length": 2048}}
    vllm_rl = {**RL, "config": {**RL["config"], "generation": "vllm-server",
                                "vllm_server_url": "http://gpu-1:8000"}}
    with pytest.raises(ConfigError) as error:
        run_pipeline(config(sft, vllm_rl), artifacts_dir=tmp_path / "job", reporter=None,
                     should_stop=lambda: False)
    assert error.value.field == "stages[1].config.generation"
    assert "vLLM is not installed" in error.value.message
    assert not (tmp_path / "job").exists()  # nothing claimed, prepared or trained (the SFT stage included)
