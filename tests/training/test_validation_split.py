"""Validation apart from the test: the held-out split (cases and IFEval-style prompts) is drawn apart from the
training data and the eval sets and guarded like them; checkpoints and learning rates are chosen on it; the eval
sets (`data.exclude`) are never read by selection."""

import json

import pytest
import torch
from safetensors.torch import load_file

from evaluation.metrics.ifeval import check_record
from tests.training.conftest import MINI_HARNESS, RecordingReporter
from training import data_prep, prompt_pool, selection
from training.case_hashing import case_content_hash
from training.holdout import IFEVAL_INSTRUCTIONS, UNCHECKED, ValidationSplit, draw_validation, ifeval_record
from training.lineage import LineageError, planned_case_hashes
from training.pipeline import PipelineConfig, run_pipeline
from training.selection import ValidationScore
from training.trajectories import simulator_cases
from training.validation import ConfigError

SFT = {"kind": "sft", "config": {"max_steps": 3, "save_steps": 1, "save_total_limit": 1, "learning_rate": 5e-3,
                                 "max_length": 1024, "per_device_train_batch_size": 1}}
OPD = {"kind": "opd", "config": {"max_steps": 1, "max_completion_length": 8, "max_prompts": 4}}
RL = {"kind": "rl", "config": {"max_steps": 1, "num_generations": 2, "per_device_train_batch_size": 2, "cases": 2}}


def job(*stages, validation, **data):
    return PipelineConfig.from_dict({
        "model": {"base": "tiny-random-smollm2", "device": "cpu"},
        "harnesses": [{"label": "mini@v1", "files": MINI_HARNESS}],
        "data": {"simulator_seed": 5, "simulator_cases": 3, "validation": validation, **data},
        "trajectories": {"augmented_variants": 1}, "stages": list(stages)})


def content(case) -> str:
    return case_content_hash(case.to_dict())


def test_the_split_is_drawn_apart_from_training_and_eval_cases_and_opd_leaves_its_prompts_out(tmp_path):
    wanted = {"cases": 4, "prompts": 3, "seed": 7}
    first_draw = draw_validation(job(SFT, OPD, RL, validation=wanted))
    # an eval set that holds the first case the split would have drawn, and a training file that holds the second
    eval_case, trained_case = first_draw.cases[0], first_draw.cases[1]
    imported = tmp_path / "imported.jsonl"
    imported.write_text(json.dumps(trained_case.to_dict()) + "\n")
    config = job(SFT, OPD, RL, validation=wanted, cases_jsonl=[str(imported)], exclude={"lsqa@v9": [content(eval_case)]})

    split = draw_validation(config)
    assert len(split.cases) == 4 and len(split.prompts) == 3
    held = set(split.case_hashes.values())
    assert content(eval_case) not in held and content(trained_case) not in held
    assert split.cases[:2] == first_draw.cases[2:4]  # the next candidates of the same seeded draw
    training = {k: v for k, v in planned_case_hashes(config).items() if not k.startswith("opd:")}
    assert not held & set(training.values())
    pool = set(prompt_pool.default_prompts())
    assert all(record["prompt"] in pool and record["instruction_id_list"] for record in split.prompts)
    record = split.record(config.data.exclude)
    assert record["cases"] == 4 and record["prompts"] == 3 and record["disjoint_from"] == ["training data", "lsqa@v9"]
    assert sum(record["prompt_instructions"].values()) >= 3
    assert ValidationSplit.from_dict(json.loads(json.dumps(split.to_dict()))) == split

    # OPD distils on the pool less the held-out prompts; the guard's check of its data then passes
    prepared = data_prep.prepare(config.stages[1], config, [h.spec() for h in config.harnesses], tmp_path / "data",
                                 RecordingReporter(), held_out_prompts=split.prompt_hashes.values())
    assert prepared.report == {"prompts": 4, "held_out_for_validation": 3}
    assert not set(prepared.case_hashes.values()) & set(split.prompt_hashes.values())


def test_training_data_that_overlaps_the_split_is_refused_before_anything_trains(tmp_path):
    config = job(SFT, validation={"cases": 2})
    split = draw_validation(config)
    trained = simulator_cases(5, 3)[1]  # one of the SFT stage's cases, slipped into a stored split
    tampered = ValidationSplit(cases=(split.cases[0], trained), prompts=(), seed=0, case_seed=split.case_seed)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "validation.json").write_text(json.dumps(tampered.to_dict()))
    with pytest.raises(LineageError, match=f"validation: {trained.case_id}"):
        run_pipeline(config, artifacts_dir=tmp_path, reporter=RecordingReporter(), should_stop=lambda: False)
    assert not (tmp_path / "stages").exists()


def test_pool_prompts_become_ifeval_records_only_when_every_constraint_has_a_checker():
    assert {c.name for c in prompt_pool.CONSTRAINTS} == set(IFEVAL_INSTRUCTIONS) | set(UNCHECKED)
    record = ifeval_record('Write a short essay about rivers. Do not use a single comma. Use the word "delta" '
                           'at least 2 times.', key="k")
    assert record["instruction_id_list"] == ["punctuation:no_comma", "keywords:frequency"]
    assert record["kwargs"][1] == {"keyword": "delta", "relation": "at least", "frequency": 2}
    assert check_record(record, "A delta forms where a river slows. Every delta grows.").prompt_strict
    assert not check_record(record, "A delta, they say, is wide.").prompt_strict
    assert ifeval_record("Write a short essay about rivers.", key="k") is None  # no constraint to grade
    assert ifeval_record("Write a short essay about rivers. Avoid exclamation marks entirely.", key="k") is None
    assert ifeval_record("Write a short essay about rivers. Answer only in Dutch.", key="k") is None
    assert ifeval_record("Write a short essay about rivers. Do not use a single comma. Be nice.", key="k") is None


def test_learning_rate_candidates_need_a_split_and_short_trials():
    stage = {"kind": "sft", "config": {**SFT["config"], "learning_rate_candidates": [1e-4, 1e-3],
                                       "learning_rate_trial_steps": 1}}
    with pytest.raises(ConfigError) as refused:
        job(stage, validation={})
    assert refused.value.field == "stages[0].config.learning_rate_candidates"
    long_trials = {"kind": "sft", "config": {**stage["config"], "learning_rate_trial_steps": 4}}
    with pytest.raises(ConfigError) as refused:
        job(long_trials, validation={"cases": 1})
    assert refused.value.field == "stages[0].config.learning_rate_trial_steps"


def test_checkpoints_are_chosen_on_validation_and_the_eval_set_is_never_read(tmp_path, monkeypatch):
    eval_cases = simulator_cases("5/validation/0", 2)  # the split's own first candidates, now an eval set
    config = job(SFT, validation={"cases": 2, "prompts": 1, "max_new_tokens": 6},
                 exclude={"lsqa@v9": [content(c) for c in eval_cases]})
    judged_cases, judged_prompts, weights = [], [], []
    original_judge, original_check, original_score = (selection.judge_reference, selection.check_record,
                                                      selection.score_model)

    def judge(case, trace):
        judged_cases.append(content(case))
        return original_judge(case, trace)

    def check(record, response):
        judged_prompts.append(record["key"])
        return original_check(record, response)

    scripted = iter([0.2, 0.9, 0.5])  # steps 1, 2 and 3 (the last checkpoint is the final model)

    def score(model, tokenizer, split, specs, **options):
        real = original_score(model, tokenizer, split, specs, **options)
        weights.append({k: v.detach().clone() for k, v in model.state_dict().items()})
        return ValidationScore(score=next(scripted), cases=real.cases, prompts=real.prompts)

    monkeypatch.setattr(selection, "judge_reference", judge)
    monkeypatch.setattr(selection, "check_record", check)
    monkeypatch.setattr(selection, "score_model", score)
    reporter = RecordingReporter()
    result = run_pipeline(config, artifacts_dir=tmp_path, reporter=reporter, should_stop=lambda: False)[0]

    split = ValidationSplit.from_dict(json.loads((tmp_path / "data" / "validation.json").read_text()))
    evaluated = {content(c) for c in eval_cases}
    assert not set(split.case_hashes.values()) & evaluated
    # selection judged the validation cases and prompts, three checkpoints' worth, and nothing else
    assert judged_cases == [content(c) for c in split.cases] * 3 and not set(judged_cases) & evaluated
    assert judged_prompts == [split.prompts[0]["key"]] * 3 and len(weights) == 3

    chosen = result.resolved_config["selection"]["checkpoint"]
    assert (chosen["rule"], chosen["step"], chosen["scores"]) == ("best validation score", 2,
                                                                 {"1": 0.2, "2": 0.9, "3": 0.5})
    assert result.resolved_config["selection"]["learning_rate"] is None
    assert result.metrics["validation_score"] == 0.9 and result.metrics["selected_step"] == 2.0
    assert result.data_lineage["validation"]["disjoint_from"] == ["training data", "lsqa@v9"]
    # the stage's model is step 2's weights, though the trainer kept only checkpoint-3 (save_total_limit 1)
    assert [p.name for p in (tmp_path / "stages" / "00-sft" / "trainer").glob("checkpoint-*")] == ["checkpoint-3"]
    saved = load_file(tmp_path / "stages" / "00-sft" / "model" / "model.safetensors")
    assert all(torch.equal(saved[k], weights[1][k]) for k in saved)
    assert not all(torch.equal(saved[k], weights[2][k]) for k in saved)
    assert not (tmp_path / "stages" / "00-sft" / "best").exists()
    assert [(s, m["validation/score"]) for _, s, _, m in reporter.logs if "validation/score" in m] == [
        (1, 0.2), (2, 0.9), (3, 0.5)]
    assert any("validation picked step 2 of 3" in line for line in reporter.lines)


def test_learning_rate_candidates_are_tried_briefly_and_the_best_trains_the_stage(tmp_path, monkeypatch):
    stage = {"kind": "sft", "config": {**SFT["config"], "max_steps": 2, "save_steps": 10, "learning_rate": 1e-5,
                                       "learning_rate_candidates": [1e-4, 5e-3], "learning_rate_trial_steps": 1}}
    config = job(stage, validation={"cases": 1, "max_new_tokens": 4})
    original = selection.ValidationScorer.__call__
    scored = []

    def call(self, path, *, input_dir):
        real = original(self, path, input_dir=input_dir)
        scored.append(str(path))
        trial = {"lr-0.0001": 0.3, "lr-0.005": 0.8}.get(path.parent.name)
        return real if trial is None else ValidationScore(score=trial, cases=trial, prompts=None)

    monkeypatch.setattr(selection.ValidationScorer, "__call__", call)
    reporter = RecordingReporter()
    result = run_pipeline(config, artifacts_dir=tmp_path, reporter=reporter, should_stop=lambda: False)[0]

    record = result.resolved_config["selection"]["learning_rate"]
    assert record["chosen"] == 5e-3 and record["trial_steps"] == 1
    assert [(c["learning_rate"], c["score"]["score"]) for c in record["candidates"]] == [(1e-4, 0.3), (5e-3, 0.8)]
    assert result.resolved_config["stage"]["config"]["learning_rate"] == 5e-3
    # the full stage trained with it (its first step logs the peak; the trials log nothing)
    assert reporter.values("sft", "learning_rate")[0] == pytest.approx(5e-3)
    trials = tmp_path / "stages" / "00-sft" / "lr-trials"
    assert sorted(p.name for p in trials.iterdir()) == ["lr-0.0001", "lr-0.005"]
    assert all([f.name for f in t.iterdir()] == ["trial.json"] for t in trials.iterdir())  # weights dropped
    assert any(line.startswith("sft lr 0.005: ") for line in reporter.lines)
    assert len(scored) == 2  # the trials' models; the stage's own are scored as checkpoints (the last at step 2)
    assert list(result.resolved_config["selection"]["checkpoint"]["scores"]) == ["2"]


def test_a_lora_stage_keeps_the_best_checkpoints_adapter_and_merged_weights(tmp_path, monkeypatch):
    stage = {"kind": "sft", "config": {**SFT["config"], "max_steps": 2, "save_total_limit": 2}}
    config = PipelineConfig.from_dict({**job(stage, validation={"cases": 1, "max_new_tokens": 4}).to_dict(),
                                       "model": {"base": "tiny-random-smollm2", "device": "cpu", "finetune": "lora",
                                                 "lora_r": 4}})
    scripted, weights = iter([0.9, 0.1]), []

    def score(model, tokenizer, split, specs, **options):
        weights.append({k: v.detach().clone() for k, v in model.state_dict().items()})
        return ValidationScore(score=next(scripted), cases=0.0, prompts=None)

    monkeypatch.setattr(selection, "score_model", score)
    result = run_pipeline(config, artifacts_dir=tmp_path, reporter=RecordingReporter(), should_stop=lambda: False)[0]

    assert result.resolved_config["selection"]["checkpoint"]["step"] == 1
    stage_dir = tmp_path / "stages" / "00-sft"
    saved = load_file(stage_dir / "model" / "model.safetensors")  # merged, as every stage's output
    assert not any("lora" in k for k in saved) and all(torch.equal(saved[k], weights[0][k]) for k in saved)
    assert not all(torch.equal(saved[k], weights[1][k]) for k in saved)
    adapter = load_file(stage_dir / "adapter" / "adapter_model.safetensors")
    step_1 = load_file(stage_dir / "trainer" / "checkpoint-1" / "adapter_model.safetensors")
    assert adapter.keys() == step_1.keys() and all(torch.equal(adapter[k], step_1[k]) for k in adapter)


def test_the_job_page_says_how_each_stage_model_was_chosen():
    from training.selectors import selection_summary

    chosen = {"selection": {"checkpoint": {"rule": "best validation score", "step": 2, "score": 0.9,
                                           "scores": {"1": 0.2, "2": 0.9, "3": 0.5}},
                            "learning_rate": {"chosen": 0.005, "candidates": [
                                {"learning_rate": 0.0001, "score": {"score": 0.3}},
                                {"learning_rate": 0.005, "score": {"score": 0.8}}]}},
              "reasoning_penalty": "off: the model emits no reasoning"}
    assert selection_summary(chosen) == (
        "step 2 by validation score 0.900 (other checkpoints: step 1: 0.200, step 3: 0.500); learning rate 0.005 "
        "by validation score (tried 0.0001: 0.300, 0.005: 0.800); reasoning-length penalty off: the model emits "
        "no reasoning")
    last = {"selection": {"checkpoint": {"rule": "no validation: last checkpoint", "step": 20}, "learning_rate": None}}
    assert selection_summary(last) == "no validation: last checkpoint"
    assert selection_summary({}) == selection_summary(None) == ""  # checkpoints registered before selection existed
