"""The HAT reproduction: five arms trained and judged under the original and held-out harness edits.

`run_experiment(ExperimentConfig(...), reporter)` returns the result dict that
`benchmarks/hat_experiment.py` writes to `docs/hat-reproduction.json` (and renders as the .md):

- **Data.** Simulator cases the compact harness can answer (`harness/demo/compact`: its reply skills
  and read tools; silent cases and write tools need hooks and tools it leaves out). Training cases
  (seed `seed`), HSA-RL episodes (`"<seed>/rl"`, the pipeline's own) and eval cases (seed
  `seed + EVAL_SEED_OFFSET`) are drawn apart; eval cases whose content hash or normalised message
  occurs in training are skipped, and the training pipelines get the eval hashes as `data.exclude`,
  so their lineage guard proves no eval case was trained on.
- **Arms.** `base` (untrained); `fixed_sft` (oracle trajectories under the original harness only);
  `hsa_sft` (original + one HSA variant per case) with the same number of training tokens as
  `fixed_sft` (Fixed-SFT takes original-harness trajectories until it reaches HSA-SFT's token count;
  both see every row `sft_epochs` times); `hsa_sft_opd` (+ General OPD); `hat` (+ a short HSA-RL).
  The last three are one chained pipeline (`training.pipeline`), so each starts from the previous.
- **Eval.** (1) `fixed`: the eval cases under the original harness; (2) `heldout`: the same cases,
  each under its own held-out edit (`training.hat.heldout`, generator seed `heldout_seed`); (3)
  `ifeval`: the shipped IFEval mini set plus `benchmarks/data/hat/ifeval_extra.jsonl`. Accuracy is the
  reference judge's (IFEval: prompt-level strict), with 95% bootstrap CIs.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from evaluation.metrics.ifeval.evaluate import mini_records, read_records
from harness.augmentation import HsaConfig
from harness.simulator import generate_cases
from harness.simulator.cases import Case
from harness.spec import HarnessSpec, parse_files, read_dir
from training.case_hashing import case_content_hash
from training.hat.heldout import HeldoutVariant, check_banks_disjoint, heldout_variant
from training.results import Reporter

ROOT = Path(__file__).resolve().parents[2]
COMPACT_HARNESS = ROOT / "harness" / "demo" / "compact"
IFEVAL_EXTRA = ROOT / "benchmarks" / "data" / "hat" / "ifeval_extra.jsonl"
EVAL_SEED_OFFSET = 10_000
MODELS = {"tiny": "tiny-random-smollm2", "smollm2": "smollm2-135m-instruct"}
# The oracle teacher's protocols: tools, skill, bare facts (the reproduction's); tools, skill, each fact after
# its tool-result field ("price 88"); skill, tools, named facts.
# Mistake-free, as in the runs docs/default-model.md and docs/hat-reproduction.md report (the oracle's default
# mistake rate came after them): the recipe those figures came from stays reproducible.
ORACLES = {"tools-first": {"mistake_rate": 0.0}, "tools-first-named": {"name_fields": True, "mistake_rate": 0.0},
           "skill-first": {"skill_first": True, "mistake_rate": 0.0}}
# HSA-SFT's rows: each case under the original and one HSA variant (the reproduction's), or each case under one
# of the two drawn per case (twice the distinct cases for the same rows and tokens).
HSA_STATES = ("pairs", "single")
ARMS = ("base", "fixed_sft", "hsa_sft", "hsa_sft_opd", "hat")
LORA_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@dataclass(frozen=True)
class ExperimentConfig:
    model: str = "smollm2"              # tiny | smollm2
    cases: int = 100                    # eval cases (each under the original and its own held-out edit)
    train_examples: int = 400           # HSA-SFT trajectories (half original, half HSA); Fixed-SFT matches tokens
    sft_epochs: int = 1
    opd_steps: int = 50                 # General OPD optimizer steps (2 prompts each, from the 2,400-prompt pool)
    rl_steps: int = 4                   # HSA-RL optimizer steps ("--steps")
    rl_cases: int = 8
    ifeval: int = 0                     # IFEval prompts used (0: all)
    seed: int = 13
    heldout_seed: int = 1301            # the held-out generator's own seed
    learning_rate: float = 2e-4         # SFT peak (LoRA; full fine-tuning wants ~5e-5)
    opd_learning_rate: float = 2e-5
    rl_learning_rate: float = 1e-5
    grad_accumulation: int = 4
    max_new_tokens: int = 96            # per model call at eval
    ifeval_new_tokens: int = 160
    eval_deadline_s: float = 600.0      # per turn; a CPU generates slowly, and a deadline is a failed answer
    finetune: str = "lora"              # lora (adapters on every linear layer, merged per stage) | full
    lora_r: int = 16
    device: str = "cpu"                 # cpu or cuda: training (model.device) and eval alike
    precision: str = "auto"             # training: fp32 | bf16 (mixed) | auto (bf16 where the device has it) — model.precision
    engine: str = ""                    # eval engine: llama.cpp | transformers ("" = llama.cpp on cpu)
    eval_workers: int = 2               # arms judged at once, beside training
    eval_limit: int = 0                 # judge only the first N eval cases (0: all); exclusions still cover all
    parallel_training: bool = False     # Fixed-SFT in a second process beside the HAT pipeline
    eval_threads: int = 1               # llama.cpp threads per judged arm
    workdir: str = "var/hat-experiment"
    oracle: str = "tools-first"         # one of ORACLES (training.teachers: the oracle's skill_first, name_fields)
    train_rooms: int = 1                # simulator rooms the training cases are set in (eval: one other room)
    hsa_states: str = "pairs"           # HSA-SFT rows: one of HSA_STATES
    hsa: dict[str, Any] = field(default_factory=dict)  # HsaConfig knobs for HSA-SFT's rows (and HSA-RL's)

    @property
    def base(self) -> str:
        return MODELS[self.model]

    @property
    def single_state(self) -> bool:
        return self.hsa_states == "single"


@dataclass
class Data:
    spec: HarnessSpec
    train_pool: list[Case]
    rl_cases: list[Case]
    eval_cases: list[Case]
    heldout: list[HeldoutVariant]
    ifeval: list[dict[str, Any]]
    skipped_near_duplicates: int = 0
    exclude: dict[str, list[str]] = field(default_factory=dict)


def compact_spec() -> HarnessSpec:
    return parse_files(read_dir(COMPACT_HARNESS))


def answerable(case: Case, spec: HarnessSpec) -> bool:
    skills = {s.name for s in spec.skills}
    tools = {t.name for t in spec.tools}
    return (not case.expected.silent and bool(case.expected.skills) and set(case.expected.skills) <= skills
            and {call.name for call in case.expected.tools} <= tools
            and set(case.meta.get("any_of_tools") or ()) <= tools)


def _normalised(message: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", message.lower()))


def _cases(seed: int | str, wanted: int, spec: HarnessSpec, *, skip_hashes: set[str] = frozenset(),
           skip_messages: set[str] = frozenset(), n_rooms: int = 1) -> tuple[list[Case], int]:
    """`wanted` answerable cases of a simulator seed (drawing more until there are enough), set in `n_rooms`
    rooms of that seed."""
    drawn, skipped = 4 * wanted + 16, 0
    while True:
        out, skipped = [], 0
        for case in generate_cases(seed, drawn, n_rooms=n_rooms):
            if not answerable(case, spec):
                continue
            if case_content_hash(case.to_dict()) in skip_hashes or _normalised(case.message) in skip_messages:
                skipped += 1
                continue
            out.append(case)
            if len(out) == wanted:
                return out, skipped
        drawn *= 2


def build_data(config: ExperimentConfig) -> Data:
    spec = compact_spec()
    train_pool, rl_cases = training_draws(config, spec)
    eval_cases, skipped = eval_draw(config.seed + EVAL_SEED_OFFSET, config.cases, spec, train_pool + rl_cases)
    heldout = [heldout_variant(spec, case, config.heldout_seed) for case in eval_cases]
    ifeval = [*mini_records(), *read_records(IFEVAL_EXTRA)]
    if config.ifeval:
        ifeval = ifeval[:config.ifeval]
    exclude = {"hat-lsqa": sorted({case_content_hash(c.to_dict()) for c in eval_cases}),
               "hat-ifeval": sorted({case_content_hash(r) for r in ifeval})}
    return Data(spec=spec, train_pool=train_pool, rl_cases=rl_cases, eval_cases=eval_cases, heldout=heldout,
                ifeval=ifeval, skipped_near_duplicates=skipped, exclude=exclude)


def training_draws(config: ExperimentConfig, spec: HarnessSpec) -> tuple[list[Case], list[Case]]:
    """The training pool (seed `seed`, `train_rooms` rooms) and the HSA-RL episodes (`"<seed>/rl"`), after checking
    that the held-out banks stay apart from HSA and the harness (`check_banks_disjoint`)."""
    from training.trajectories import simulator_cases

    if config.train_rooms < 1:
        raise ValueError(f"train_rooms must be at least 1, not {config.train_rooms}")
    check_banks_disjoint(spec)
    try:
        HsaConfig(**config.hsa)
    except (TypeError, ValueError) as error:
        raise ValueError(f"hsa: {error}") from None
    # Enough pool for Fixed-SFT to match HSA-SFT's tokens with original-harness rows only.
    # One room lets a model learn its products' prices by heart instead of reading the tool result.
    if config.hsa_states not in HSA_STATES:
        raise ValueError(f"hsa_states must be one of {', '.join(HSA_STATES)}, not {config.hsa_states!r}")
    # With one state a case, HSA-SFT uses a case a row, and Fixed-SFT (original prompts may be longer than a
    # variant's) needs a margin beyond that to match its tokens.
    pool = config.train_examples * 5 // 4 + 8 if config.single_state else config.train_examples + 8
    train_pool, _ = _cases(config.seed, pool, spec, n_rooms=config.train_rooms)
    return train_pool, simulator_cases(f"{config.seed}/rl", config.rl_cases)


def eval_draw(seed: int, wanted: int, spec: HarnessSpec, seen: Sequence[Case]) -> tuple[list[Case], int]:
    """`wanted` answerable cases of simulator seed `seed`, none of whose content hash or normalised message is one of
    `seen`'s, and how many were skipped for that."""
    return _cases(seed, wanted, spec, skip_hashes={case_content_hash(c.to_dict()) for c in seen},
                  skip_messages={_normalised(c.message) for c in seen})


def teacher_config(config: ExperimentConfig) -> dict[str, Any]:
    if config.oracle not in ORACLES:
        raise ValueError(f"oracle must be one of {', '.join(ORACLES)}, not {config.oracle!r}")
    return dict(ORACLES[config.oracle])


def _token_counts(cases: Sequence[Case], spec: HarnessSpec, variants: int, tokenizer: Any, teacher: dict[str, Any],
                  *, single_state: bool = False, hsa: dict[str, Any] | None = None) -> tuple[list[int], list[Any]]:
    """Tokens of each kept trajectory (case order), as the SFT stage will count them."""
    from training.datasets import tokenize_rows
    from training.trajectories import TrajectoryConfig, generate_trajectories

    config = TrajectoryConfig(augmented_variants=variants, seed=0, teacher_config=teacher, single_state=single_state,
                              hsa=dict(hsa or {}))
    trajectories, _ = generate_trajectories(cases, [spec], config)
    rows = [t.to_row() for t in trajectories]
    tokenized, _ = tokenize_rows(rows, tokenizer, max_length=8192, overlong="error")
    return [len(row["input_ids"]) for row in tokenized], trajectories


def split_training(config: ExperimentConfig, data: Data, tokenizer: Any) -> dict[str, Any]:
    """HSA-SFT's cases, and as many original-harness cases for Fixed-SFT as reach the same tokens."""
    single = config.single_state
    hsa_cases = data.train_pool[:config.train_examples if single else math.ceil(config.train_examples / 2)]
    teacher = teacher_config(config)
    hsa_lengths, hsa_trajectories = _token_counts(hsa_cases, data.spec, 1, tokenizer, teacher, single_state=single,
                                                  hsa=config.hsa)
    target = sum(hsa_lengths)
    fixed_lengths, fixed_trajectories = _token_counts(data.train_pool, data.spec, 0, tokenizer, teacher)
    used, total = 0, 0
    while total < target and used < len(fixed_lengths):
        total += fixed_lengths[used]
        used += 1
    if total < target:
        raise ValueError(f"the training pool is too small for Fixed-SFT to match HSA-SFT's {target} tokens")
    fixed_ids = {t.case_id for t in fixed_trajectories[:used]}
    return {"hsa_cases": hsa_cases, "fixed_cases": [c for c in data.train_pool if c.case_id in fixed_ids],
            "hsa_rows": len(hsa_lengths), "fixed_rows": used, "hsa_tokens": target, "fixed_tokens": total,
            "hsa_variant_hashes": sorted({t.harness_hash for t in hsa_trajectories}),
            "hsa_variant_names": sorted({n for t in hsa_trajectories for n in _names_in(t.tools)})}


def _names_in(tools: Sequence[dict[str, Any]]) -> set[str]:
    """Tool names and the skill names load_skill offers: every module name a trajectory saw."""
    names = set()
    for tool in tools:
        function = tool.get("function", tool)
        names.add(function["name"])
        if function["name"] == "load_skill":
            names |= set(function.get("parameters", {}).get("properties", {}).get("name", {}).get("enum", ()))
    return names


def _write_cases(path: Path, cases: Sequence[Case]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(c.to_dict(), ensure_ascii=False) + "\n" for c in cases), encoding="utf-8")
    return str(path)


def _sft_stage(config: ExperimentConfig, rows: int) -> dict[str, Any]:
    steps = max(1, math.ceil(rows * config.sft_epochs / config.grad_accumulation))
    return {"kind": "sft", "config": {"max_steps": steps, "learning_rate": config.learning_rate,
                                      "per_device_train_batch_size": 1,
                                      "gradient_accumulation_steps": config.grad_accumulation,
                                      "max_length": 8192, "save_steps": max(steps, 1), "logging_steps": 1,
                                      "warmup_steps": min(2, steps - 1)}}


def _teacher_knob(config: ExperimentConfig) -> dict[str, Any]:
    teacher = teacher_config(config)
    return {"teacher_config": teacher} if teacher else {}


def pipeline_configs(config: ExperimentConfig, data: Data, split: dict[str, Any], workdir: Path
                     ) -> dict[str, dict[str, Any]]:
    model = {"base": config.base, "finetune": config.finetune, "device": config.device,
             "precision": config.precision}
    if config.finetune == "lora":
        model |= {"lora_r": config.lora_r, "lora_alpha": 2 * config.lora_r, "lora_target_modules": LORA_MODULES}
    common = {"model": model,
              "harnesses": [{"label": "compact@hat", "dir": str(COMPACT_HARNESS)}], "seed": config.seed}
    fixed = {**common,
             "data": {"simulator_cases": 0, "cases_jsonl": [_write_cases(workdir / "fixed-cases.jsonl",
                                                                         split["fixed_cases"])],
                      "exclude": data.exclude},
             "trajectories": {"augmented_variants": 0, **_teacher_knob(config)},
             "stages": [_sft_stage(config, split["fixed_rows"])]}
    hat = {**common,
           "data": {"simulator_seed": config.seed, "simulator_cases": 0,
                    "cases_jsonl": [_write_cases(workdir / "hsa-cases.jsonl", split["hsa_cases"])],
                    "exclude": data.exclude},
           "trajectories": {"augmented_variants": 1, "single_state": config.single_state,
                            **_teacher_knob(config), **({"hsa": dict(config.hsa)} if config.hsa else {})},
           "stages": [_sft_stage(config, split["hsa_rows"]),
                      {"kind": "opd", "config": {"max_steps": config.opd_steps, "learning_rate": config.opd_learning_rate,
                                                 "max_completion_length": 64, "per_device_train_batch_size": 2,
                                                 "save_steps": config.opd_steps, "max_prompts": 4 * config.opd_steps}},
                      {"kind": "rl", "config": {"max_steps": config.rl_steps, "learning_rate": config.rl_learning_rate,
                                                "num_generations": 2, "per_device_train_batch_size": 2,
                                                "cases": config.rl_cases, "max_new_tokens": 64,
                                                "max_completion_length": 768, "fault_rate": 0.1,
                                                "augmented_share": 0.5, "save_steps": config.rl_steps}}]}
    return {"fixed": fixed, "hat": hat}


def _arm_scores(model_dir: str, data: Data, config: ExperimentConfig, label: str,
                say: Any = None) -> dict[str, Any]:
    from training.hat.evaluate import Capped, bootstrap_ci, eval_backend, ifeval_scores, judge_turns, mean

    engine = config.engine or ("llama.cpp" if config.device == "cpu" else "transformers")
    served = eval_backend(model_dir, engine=engine, device=config.device, threads=config.eval_threads)
    backend = Capped(served, config.max_new_tokens)
    limit = config.eval_limit or len(data.eval_cases)
    fixed = judge_turns(backend, [(case, data.spec) for case in data.eval_cases[:limit]],
                        deadline_s=config.eval_deadline_s, label=f"{label}:fixed", say=say)
    held = judge_turns(backend, [(v.case, v.spec) for v in data.heldout[:limit]], deadline_s=config.eval_deadline_s,
                       label=f"{label}:heldout", say=say)
    ifeval = ifeval_scores(served, data.ifeval, max_new_tokens=config.ifeval_new_tokens)
    fixed_acc, held_acc = [s.accuracy for s in fixed], [s.accuracy for s in held]
    outcomes: dict[str, int] = {}
    for score in (*fixed, *held):
        outcomes[score.outcome] = outcomes.get(score.outcome, 0) + 1
    return {"model_dir": model_dir, "n": {"fixed": len(fixed), "heldout": len(held), "ifeval": len(ifeval)},
            "fixed": round(mean(fixed_acc), 4), "heldout": round(mean(held_acc), 4), "ifeval": round(mean(ifeval), 4),
            "fixed_ci": bootstrap_ci(fixed_acc, seed=config.seed),
            "heldout_ci": bootstrap_ci(held_acc, seed=config.seed + 1),
            "ifeval_ci": bootstrap_ci(ifeval, seed=config.seed + 2),
            "fixed_effectiveness": round(mean([s.effectiveness for s in fixed]), 4),
            "heldout_effectiveness": round(mean([s.effectiveness for s in held]), 4),
            "outcomes": dict(sorted(outcomes.items())),
            # per turn, for reading the failures (kept in the workdir, left out of the report)
            "turns": {"fixed": [_turn_record(s) for s in fixed], "heldout": [_turn_record(s) for s in held]}}


def _summary(scores: dict[str, Any]) -> dict[str, Any]:
    """An arm's scores for the report: per-turn records left out, the wrong answers counted (a reply the judge
    failed: the model spoke and was wrong, which a viewer sees, unlike a fallback line)."""
    turns = scores.get("turns", {})
    return {**{k: v for k, v in scores.items() if k != "turns"},
            "wrong_answers": {part: sum(1 for t in turns.get(part, ()) if t["outcome"] == "replied"
                                        and not t["accuracy"]) for part in ("fixed", "heldout")}}


def paired_comparisons(raw: dict[str, dict[str, Any]], *, seed: int) -> dict[str, Any]:
    """The experiment's questions asked case by case (every arm answered the same cases, so the paired
    difference is far tighter than two independent intervals): each trained arm vs Fixed-SFT under the
    held-out edits, and each arm's own drop from the original harness to its held-out edit. Paired
    percentile bootstrap of the mean difference and the exact McNemar p (`evaluation.metrics.compare`).
    Also the report's headline figure: the share of the base's held-out errors an arm removes."""
    def run(arm: str, part: str) -> list[dict[str, Any]]:
        return list(raw[arm].get("turns", {}).get(part, ()))

    def summary(baseline: list[dict[str, Any]], candidate: list[dict[str, Any]], salt: int) -> dict[str, Any]:
        return paired_accuracy(baseline, candidate, seed=seed + salt)

    trained = [arm for arm in ARMS if arm not in ("base", "fixed_sft")]
    base_errors = 1.0 - raw["base"]["heldout"]
    return {
        "heldout_vs_fixed_sft": {arm: summary(run("fixed_sft", "heldout"), run(arm, "heldout"), 11)
                                 for arm in trained},
        "drop": {arm: summary(run(arm, "fixed"), run(arm, "heldout"), 17) for arm in ARMS},
        "heldout_error_reduction_vs_base": {
            arm: round((base_errors - (1.0 - raw[arm]["heldout"])) / base_errors, 4) if base_errors else None
            for arm in ARMS if arm != "base"},
    }


def paired_accuracy(baseline: Sequence[dict[str, Any]], candidate: Sequence[dict[str, Any]], *,
                    seed: int) -> dict[str, Any]:
    """Two runs' per-turn records (`case_id`, `accuracy`) compared case by case: the mean difference with its paired
    bootstrap 95% CI, the exact McNemar p, and how many cases got worse and better."""
    from evaluation.metrics.compare import compare_metric

    c = compare_metric({t["case_id"]: {"accuracy": t["accuracy"]} for t in baseline},
                       {t["case_id"]: {"accuracy": t["accuracy"]} for t in candidate}, "accuracy", seed=seed,
                       n_resamples=5000)
    return {"n": c.n, "delta": round(c.delta, 4) if c.n else None,
            "ci": [round(c.ci_low, 4), round(c.ci_high, 4)] if c.n else None,
            "mcnemar_p": None if c.mcnemar_p is None else round(c.mcnemar_p, 4),
            "worse": len(c.regressed), "better": len(c.improved)}


def _turn_record(score: Any) -> dict[str, Any]:
    return {"case_id": score.case_id, "accuracy": score.accuracy, "outcome": score.outcome,
            "reasons": list(score.reasons)}


def disjointness(data: Data, split: dict[str, Any], trained_hashes: set[str]) -> dict[str, Any]:
    """Held-out variants vs everything training saw: harness hashes and module names (must not meet)."""
    heldout_hashes = {v.spec.content_hash for v in data.heldout}
    heldout_names = {m.name for v in data.heldout for m in (*v.spec.skills, *v.spec.tools)}
    original = {m.name for m in (*data.spec.skills, *data.spec.tools)}
    train_names = set(split["hsa_variant_names"]) | original
    return {"heldout_variants": len(heldout_hashes),
            "heldout_hashes_in_training": sorted(heldout_hashes & trained_hashes),
            "heldout_names_in_training": sorted((heldout_names - {"load_skill"}) & train_names),
            "training_harness_hashes": len(trained_hashes)}


def run_experiment(config: ExperimentConfig, reporter: Reporter) -> dict[str, Any]:
    from training.base_models import load_tokenizer, materialize_base, model_cache
    from training.pipeline import PipelineConfig, run_pipeline

    started = time.monotonic()
    workdir = Path(config.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    data = build_data(config)
    reporter.line(f"hat: {len(data.eval_cases)} eval cases ({data.skipped_near_duplicates} skipped as in training), "
                  f"{len(data.ifeval)} IFEval prompts")
    tokenizer = load_tokenizer(config.base)
    split = split_training(config, data, tokenizer)
    reporter.line(f"hat: HSA-SFT {split['hsa_rows']} rows / {split['hsa_tokens']} tokens; "
                  f"Fixed-SFT {split['fixed_rows']} rows / {split['fixed_tokens']} tokens")
    configs = pipeline_configs(config, data, split, workdir)
    timings: dict[str, float] = {}
    results = {}
    # Each arm is judged as soon as its model exists, beside the training that continues (base at once).
    if config.parallel_training:
        import torch

        torch.set_num_threads(1)
    with ArmEvaluations(config, data, workdir / "eval", reporter, timings) as evaluations:
        evaluations.submit("base", materialize_base(config.base, model_cache(), seed=config.seed))
        # Fixed-SFT trains in a second process beside the HAT pipeline when asked (two half-busy trainers
        # use a shared machine better than one); the main process then resumes it, every stage done.
        side = _train_aside(configs["fixed"], workdir / "fixed") if config.parallel_training else None
        for name, raw in sorted(configs.items(), key=lambda item: item[0] == "fixed"):
            t0 = time.monotonic()
            if name == "fixed" and side is not None:
                side.join()
                if side.exitcode != 0:
                    raise RuntimeError(f"the Fixed-SFT training process failed (exit code {side.exitcode})")
            watcher = _StageWatcher(reporter, evaluations, STAGE_ARMS[name])
            results[name] = run_pipeline(PipelineConfig.from_dict(raw), artifacts_dir=workdir / name,
                                         reporter=watcher, should_stop=lambda: False)
            timings[f"train_{name}"] = round(time.monotonic() - t0, 1)
            for result in results[name]:  # stages resumed from an earlier run report no checkpoint
                watcher.checkpoint(result, quiet=True)
        arms = evaluations.results()
        paired = paired_comparisons(evaluations.raw(), seed=config.seed)
    hat_results = results["hat"]
    return {
        "model": config.base,
        # n: the smallest per-arm sample (each arm's own is in arms[arm]["n"])
        "n": {key: min(arms[arm]["n"][key] for arm in ARMS) for key in ("fixed", "heldout", "ifeval")},
        "arms": arms,
        "paired": paired,
        "train_tokens": {"fixed_sft": split["fixed_tokens"], "hsa_sft": split["hsa_tokens"],
                         "fixed_sft_rows": split["fixed_rows"], "hsa_sft_rows": split["hsa_rows"],
                         "opd_tokens": hat_results[1].metrics.get("num_tokens"),
                         "rl_tokens": hat_results[2].metrics.get("num_tokens")},
        "steps": {"fixed_sft": configs["fixed"]["stages"][0]["config"]["max_steps"],
                  "hsa_sft": configs["hat"]["stages"][0]["config"]["max_steps"],
                  "opd": config.opd_steps, "rl": config.rl_steps},
        "harness": harness_info(data, tokenizer),
        "heldout_edits": [{"case_id": v.case.case_id, "variant": v.label, "harness_hash": v.spec.content_hash,
                           "skills": dict(v.mapping.skills), "tools": dict(v.mapping.tools),
                           "late_skill": v.late_skill,
                           "settings": {k: list(pair) for k, pair in v.mapping.settings.items()}}
                          for v in data.heldout],
        "lineage": _lineage(data, split, {f"{name}:{r.stage}": r for name, rs in results.items() for r in rs}),
        "config": asdict(config),
        "timings_s": timings,
        "wall_s": round(time.monotonic() - started, 1),
    }


def run_default_candidate(config: ExperimentConfig, reporter: Reporter,
                          base_scores: dict[str, Any] | None = None) -> dict[str, Any]:
    """The embedded default's candidate alone: the HAT pipeline's HSA-SFT stage, trained exactly as in
    `run_experiment` (same data rules, exclusions and lineage guard) but without Fixed-SFT, OPD and RL, and
    judged on the same three sets. The base is judged too unless `base_scores` (an earlier judging of the
    same base model, e.g. the reproduction's) is given; the result says which. Cheaper than the whole
    experiment, so a CPU session can spend its time on more HSA-SFT rows."""
    from training.base_models import load_tokenizer, materialize_base, model_cache
    from training.pipeline import PipelineConfig, run_pipeline

    started = time.monotonic()
    workdir = Path(config.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    data = build_data(config)
    tokenizer = load_tokenizer(config.base)
    split = split_training(config, data, tokenizer)
    reporter.line(f"default: HSA-SFT {split['hsa_rows']} rows / {split['hsa_tokens']} tokens; "
                  f"{len(data.eval_cases)} eval cases")
    raw = pipeline_configs(config, data, split, workdir)["hat"]
    raw["stages"] = raw["stages"][:1]
    timings: dict[str, float] = {}
    with ArmEvaluations(config, data, workdir / "eval", reporter, timings) as evaluations:
        if base_scores is None:
            evaluations.submit("base", materialize_base(config.base, model_cache(), seed=config.seed))
        t0 = time.monotonic()
        (result,) = run_pipeline(PipelineConfig.from_dict(raw), artifacts_dir=workdir / "hat", reporter=reporter,
                                 should_stop=lambda: False)
        timings["train_hsa_sft"] = round(time.monotonic() - t0, 1)
        evaluations.submit("hsa_sft", str(result.path))
        arms = {arm: _summary(future.result()) for arm, future in evaluations.futures.items()}
    if base_scores is not None:
        arms["base"] = {**base_scores, "judged_in": "an earlier run (base_from)"}
    return {
        "model": config.base,
        "candidate": "hsa_sft",
        "n": {key: min(arms[arm]["n"][key] for arm in ("base", "hsa_sft")) for key in ("fixed", "heldout", "ifeval")},
        "arms": {arm: arms[arm] for arm in ("base", "hsa_sft")},
        "train_tokens": {"hsa_sft": split["hsa_tokens"], "hsa_sft_rows": split["hsa_rows"]},
        "steps": {"hsa_sft": raw["stages"][0]["config"]["max_steps"]},
        # the stage's own record (also when this call resumed a stage trained earlier)
        "training": {key: result.metrics.get(key) for key in ("num_tokens", "tokens_per_s", "first_loss", "loss")},
        "harness": harness_info(data, tokenizer),
        "lineage": _lineage(data, split, {f"hat:{result.stage}": result}),
        "config": asdict(config),
        "timings_s": {**timings, **{f"eval_{arm}": arms[arm].get("eval_s", 0.0) for arm in arms
                                    if arm != "base" or base_scores is None}},
        "wall_s": round(time.monotonic() - started, 1),
    }


def harness_info(data: Data, tokenizer: Any) -> dict[str, Any]:
    return {"path": str(COMPACT_HARNESS.relative_to(ROOT)), "content_hash": data.spec.content_hash,
            "system_prompt_tokens": system_prompt_tokens(data.spec, data.eval_cases[0], tokenizer)}


def _lineage(data: Data, split: dict[str, Any], stages: dict[str, Any]) -> dict[str, Any]:
    """What kept the eval sets out of training, per trained stage (`stages`: name → stage result)."""
    trained_hashes = {h for result in stages.values() for h in result.harness_hashes}
    return {"excluded_eval_sets": {k: len(v) for k, v in data.exclude.items()},
            "checked_by_pipeline_guard": True,
            "skipped_near_duplicates": data.skipped_near_duplicates,
            "stages": {name: {key: r.data_lineage[key] for key in ("cases", "cases_digest", "checked_disjoint")}
                       for name, r in stages.items()},
            "disjoint": disjointness(data, split, trained_hashes)}


ARM_STAGES = {"fixed_sft": ("fixed", "00-sft"), "hsa_sft": ("hat", "00-sft"), "hsa_sft_opd": ("hat", "01-opd"),
              "hat": ("hat", "02-rl")}


def judge_arm(config: ExperimentConfig, arm: str, reporter: Reporter) -> dict[str, Any]:
    """Judge one arm of a run (the base, or a trained one) into its workdir's eval cache (`eval/<arm>.json`),
    as the run would, so another process can share a run's judging."""
    if arm == "base":
        from training.base_models import materialize_base, model_cache

        model_dir = materialize_base(config.base, model_cache(), seed=config.seed)
    else:
        pipeline, stage = ARM_STAGES[arm]
        model_dir = Path(config.workdir) / pipeline / "stages" / stage / "model"
        if not (model_dir / "config.json").is_file():
            raise FileNotFoundError(f"{arm} is not trained yet: no model in {model_dir}")
    data = build_data(config)
    with ArmEvaluations(config, data, Path(config.workdir) / "eval", reporter, {}) as evaluations:
        return evaluations._evaluate(arm, str(model_dir))


def _train_aside(raw: dict[str, Any], artifacts_dir: Path) -> Any:
    import multiprocessing

    process = multiprocessing.get_context("spawn").Process(target=_train_pipeline, args=(raw, str(artifacts_dir)),
                                                           name="hat-fixed-sft")
    process.start()
    return process


def _train_pipeline(raw: dict[str, Any], artifacts_dir: str) -> None:
    """A pipeline trained in a child process; its stages' checkpoints are what the parent resumes from."""
    import torch

    from training.pipeline import PipelineConfig, run_pipeline

    torch.set_num_threads(1)

    class Printing:
        def log(self, stage: str, step: int, total: int, metrics: dict[str, float]) -> None:
            print(f"  fixed {stage} {step}/{total} loss={metrics.get('loss')}", flush=True)

        def line(self, text: str) -> None:
            print(f"fixed: {text}", flush=True)

        def checkpoint(self, result: Any) -> None:
            pass

    run_pipeline(PipelineConfig.from_dict(raw), artifacts_dir=Path(artifacts_dir), reporter=Printing(),
                 should_stop=lambda: False)


STAGE_ARMS = {"fixed": {"sft": "fixed_sft"}, "hat": {"sft": "hsa_sft", "opd": "hsa_sft_opd", "rl": "hat"}}


class ArmEvaluations:
    """Judges arms in worker threads (llama.cpp and torch release the GIL) while training goes on; an
    arm's scores are kept in `directory/<arm>.json`, so a rerun with the same workdir skips it."""

    def __init__(self, config: ExperimentConfig, data: Data, directory: Path, reporter: Reporter,
                 timings: dict[str, float]):
        from concurrent.futures import ThreadPoolExecutor

        self.config, self.data, self.directory, self.reporter, self.timings = config, data, directory, reporter, timings
        self.pool = ThreadPoolExecutor(max_workers=config.eval_workers, thread_name_prefix="hat-eval")
        self.futures: dict[str, Any] = {}
        directory.mkdir(parents=True, exist_ok=True)

    def __enter__(self) -> ArmEvaluations:
        return self

    def __exit__(self, *exc: object) -> None:
        self.pool.shutdown(wait=exc[0] is None, cancel_futures=exc[0] is not None)

    def submit(self, arm: str, model_dir: str) -> None:
        if arm not in self.futures:
            self.futures[arm] = self.pool.submit(self._evaluate, arm, model_dir)

    def _evaluate(self, arm: str, model_dir: str) -> dict[str, Any]:
        saved = self.directory / f"{arm}.json"
        if saved.is_file() and json.loads(saved.read_text())["model_dir"] == model_dir:
            scores = json.loads(saved.read_text())
            # scores kept before per-arm n was recorded were judged on every drawn case
            scores.setdefault("n", {"fixed": len(self.data.eval_cases), "heldout": len(self.data.heldout),
                                    "ifeval": len(self.data.ifeval)})
            return scores
        t0 = time.monotonic()
        self.reporter.line(f"hat: evaluating {arm}")
        scores = _arm_scores(model_dir, self.data, self.config, arm, say=self.reporter.line)
        scores["eval_s"] = round(time.monotonic() - t0, 1)
        saved.write_text(json.dumps(scores, indent=1))
        self.reporter.line(f"hat: {arm} fixed={scores['fixed']} heldout={scores['heldout']} ifeval={scores['ifeval']}")
        return scores

    def raw(self) -> dict[str, dict[str, Any]]:
        """Every arm's scores with its per-turn records (what the paired comparisons read)."""
        return {arm: self.futures[arm].result() for arm in ARMS}

    def results(self) -> dict[str, dict[str, Any]]:
        arms = {arm: _summary(scores) for arm, scores in self.raw().items()}
        for arm, scores in arms.items():
            self.timings[f"eval_{arm}"] = scores.get("eval_s", 0.0)
        return arms


class _StageWatcher:
    """The reporter a pipeline runs with: passes everything on, and queues each stage's model for judging."""

    def __init__(self, reporter: Reporter, evaluations: ArmEvaluations, arms: dict[str, str]):
        self.reporter, self.evaluations, self.arms = reporter, evaluations, arms

    def log(self, *args: Any) -> None:
        self.reporter.log(*args)

    def line(self, text: str) -> None:
        self.reporter.line(text)

    def checkpoint(self, result: Any, *, quiet: bool = False) -> None:
        if not quiet:
            self.reporter.checkpoint(result)
        if result.stage in self.arms:
            self.evaluations.submit(self.arms[result.stage], str(result.path))


def system_prompt_tokens(spec: HarnessSpec, case: Case, tokenizer: Any) -> int:
    """Tokens of the first model call's prompt: system prompt with tool schemas, and the viewer message."""
    from harness.runtime import RoomContext, TurnInput
    from harness.runtime.messages import assemble_messages
    from harness.spec.prompt import openai_tools
    from serving.backends.hermes import render_chatml
    from training.trajectories import TRAINING_NOW

    turn = TurnInput(message=case.message, viewer_id=case.viewer_id, room=RoomContext.from_dict(dict(case.room)),
                     recent_dialogue=case.dialogue)
    prompt = render_chatml(assemble_messages(spec, turn, TRAINING_NOW), openai_tools(spec))
    return len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
