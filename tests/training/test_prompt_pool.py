"""General OPD's prompt pool: at least 2,000 distinct prompts from templates, deterministic, clear of the IFEval
prompts the project evaluates on (exact and near duplicates), and a prompt file that overlaps them refused
before training, naming the field."""

import json

import pytest

from tests.training.conftest import MINI_HARNESS
from training.lineage import (
    NEAR_DUPLICATE_JACCARD,
    LineageError,
    PromptGuard,
    check_prompts_disjoint,
    ifeval_prompts,
    jaccard,
    normalise_prompt,
    planned_case_hashes,
    prompt_shingles,
)
from training.opd_config import OpdConfig
from training.pipeline_config import PipelineConfig
from training.prompt_pool import (
    CONSTRAINTS,
    POOL_SIZE,
    TASKS,
    TOPICS,
    build_pool,
    default_prompts,
    load_prompts,
    read_prompts,
    source_record,
)
from training.validation import ConfigError


@pytest.fixture(scope="module")
def pool():
    return default_prompts()


@pytest.fixture(scope="module")
def ifeval():
    return ifeval_prompts()


def test_the_pool_holds_at_least_2000_distinct_prompts_and_is_deterministic(pool):
    assert len(pool) == POOL_SIZE >= 2000
    assert len({normalise_prompt(p) for p in pool}) == len(pool)
    assert build_pool(seed=0) == pool and load_prompts("") == pool
    other = build_pool(size=200, seed=1)
    assert other != pool[:200] and len(set(other)) == 200
    assert all(20 <= len(p) <= 400 and p == p.strip() for p in pool)


def test_the_pool_spans_every_task_topic_and_constraint(pool):
    text = "\n".join(pool)
    for task in TASKS:
        assert task.text.split("{topic}")[0] in text, task.text
    for topic, _ in TOPICS:
        assert topic in text, topic
    for constraint in CONSTRAINTS:
        head = constraint.text.split("{")[0]
        assert head in text, constraint.name
    bare = [p for p in pool if p.count(". ") == 0 and p.count("? ") == 0]
    assert 0.05 * len(pool) < len(bare) < 0.3 * len(pool)  # some plain instructions among the constrained ones


def test_no_prompt_asks_for_the_impossible(pool):
    for prompt in pool:
        assert not ("lowercase" in prompt and "entire answer in capital letters" in prompt), prompt
        assert not ("Mention the words" in prompt and "Do not use the words" in prompt), prompt
        assert not ("JSON object only" in prompt and ("P.S." in prompt or "Begin your answer" in prompt)), prompt
        assert not ("Answer only in" in prompt and "Mention the words" in prompt), prompt
        assert not ("End with the exact sentence" in prompt and "Begin your answer" in prompt), prompt


def test_no_prompt_is_an_ifeval_prompt_or_a_near_duplicate_of_one(pool, ifeval):
    assert len(ifeval) >= 50  # the shipped mini set and the HAT experiment's extra prompts
    check_prompts_disjoint(pool)  # raises on any overlap
    eval_norms = {normalise_prompt(t) for t in ifeval.values()}
    assert not eval_norms & {normalise_prompt(p) for p in pool}
    eval_shingles = [prompt_shingles(t) for t in ifeval.values()]
    closest = max(jaccard(prompt_shingles(p), s) for p in pool for s in eval_shingles)
    assert closest < NEAR_DUPLICATE_JACCARD, closest


def test_the_guard_finds_copies_and_near_copies_but_not_mere_likeness(ifeval):
    label, text = next(iter(ifeval.items()))
    guard = PromptGuard(ifeval)
    assert guard.closest(text) == (label, 1.0)
    assert guard.closest("  " + text.upper().replace(". ", " .  ") + "!") == (label, 1.0)  # spacing, case, stops
    words = text.split()
    words[3] = "chunky"  # one word changed
    near = guard.closest(" ".join(words))
    assert near is not None and near[0] == label and NEAR_DUPLICATE_JACCARD <= near[1] < 1.0
    assert guard.closest("Write a short essay about volcanoes. Do not use a single comma.") is None


def write(path, prompts):
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts), encoding="utf-8")
    return str(path)


def test_a_prompt_file_overlapping_the_ifeval_prompts_is_refused_before_training_naming_the_field(
        tmp_path, pool, ifeval):
    eval_prompt = next(iter(ifeval.values()))
    overlapping = write(tmp_path / "overlap.jsonl", [*pool[:50], eval_prompt.replace(" ", "  ").lower()])
    with pytest.raises(LineageError, match=r"opd\.prompts: 1 prompt\(s\) are IFEval eval prompts"):
        check_prompts_disjoint(read_prompts(overlapping))
    with pytest.raises(ConfigError) as error:
        OpdConfig.from_dict({"prompts": overlapping})
    assert error.value.field == "opd.prompts" and "prompt 51" in str(error.value)
    job = {"model": {"base": "tiny-random-smollm2", "device": "cpu"},
           "harnesses": [{"label": "mini@v1", "files": MINI_HARNESS}],
           "stages": [{"kind": "opd", "config": {"max_steps": 1, "prompts": overlapping}}]}
    with pytest.raises(ConfigError) as error:
        PipelineConfig.from_dict(job)
    assert error.value.field == "stages[0].config.prompts"
    with pytest.raises(ConfigError) as error:
        OpdConfig.from_dict({"prompts": str(tmp_path / "missing.jsonl")})
    assert error.value.field == "opd.prompts" and "cannot read" in str(error.value)
    (tmp_path / "bad.jsonl").write_text('{"prompt": "fine"}\n{"text": "no"}\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="bad.jsonl:2"):
        OpdConfig.from_dict({"prompts": str(tmp_path / "bad.jsonl")})
    clean = write(tmp_path / "clean.jsonl", pool[:50])
    assert OpdConfig.from_dict({"prompts": clean}).prompt_texts() == pool[:50]


def test_the_default_opd_stage_draws_on_the_pool_and_a_path_overrides_it(tmp_path, pool):
    job = {"model": {"base": "tiny-random-smollm2", "device": "cpu"},
           "harnesses": [{"label": "mini@v1", "files": MINI_HARNESS}],
           "stages": [{"kind": "opd", "config": {"max_steps": 1}}]}
    config = PipelineConfig.from_dict(job)
    assert config.stages[0].config.prompt_texts() == pool
    planned = planned_case_hashes(config)
    assert len(planned) == len(pool) and all(key.startswith("opd:prompt-") for key in planned)
    own = write(tmp_path / "own.jsonl", ["Name three rivers.", "Write a haiku about rain."])
    job["stages"][0]["config"] = {"max_steps": 1, "prompts": own, "max_prompts": 1}
    assert PipelineConfig.from_dict(job).stages[0].config.prompt_texts() == ["Name three rivers."]
    assert source_record("", pool)["kind"] == "prompt_pool" and source_record(own, pool[:2])["path"] == own
