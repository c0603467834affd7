"""The harness-reading study (issue 42): the HAT reproduction's arms measured against the issue's targets, with
every recipe choice made on a validation split and the final figures from a test split judged once, resumable
across sessions that each start on a fresh machine.

    study = Study(StudyConfig(experiment=ExperimentConfig(...)), reporter)
    study.run()                        # every part not in the state yet; StudyPaused if stopped early
    study_result(study)                # the figures (training.hat.study_figures)
    study_status(config)               # what is done, what is left, from the state alone

- **Splits.** Validation (`validation_cases`, simulator seed `seed + EVAL_SEED_OFFSET`: the eval draw every
  earlier run judged, so choosing on it tunes nothing new) and test (`test_cases`, seed `seed +
  TEST_SEED_OFFSET`, a draw no earlier run has seen). Both skip cases whose content hash or normalised message
  occurs in training, the test split also the validation split's; each case has its own held-out edit. IFEval:
  `training.hat.ifeval_sets.ifeval_records(split)`. Both splits' cases and prompts are every training
  pipeline's `data.exclude`, so the pipelines' lineage guard proves neither was trained on.
- **Arms.** base, fixed_sft, hsa_sft, hsa_sft_opd (and hat, HSA-RL after OPD, with `with_rl`), trained as in
  `training.hat.experiment` (Fixed-SFT at HSA-SFT's training tokens; OPD continues from the merged SFT model).
- **Judging.** Every arm on both splits under decoding "constrained" and "free", on the original harness, the
  renamed one and all four held-out edits (the targets' conditions); on the `ablation_splits` (the test split)
  also under each other held-out edit kind (`training.hat.ablation`'s conditions); IFEval once per arm and split.
- **Order and choice.** Training, then the targets' conditions (original, names, all) and IFEval on the
  validation split for every arm, then the choice (`choice.json`: which arm ships and with which decoding,
  `choose_on_validation`, reading validation records only), then the targets' conditions on the test split, the
  shipped arm and its comparators first; the ablation's other edit kinds come last, so the targets are
  measured sessions before the whole ablation is. The test split never feeds a choice.
- **Targets.** `training.hat.targets.compute_targets` on the test split of the shipped arm under its decoding
  (Fixed-SFT under the same decoding for the drop ratio, the base for IFEval).
- **State.** Everything a later session needs is in `state_dir` (`training.hat.study_state`); `workdir`
  (var/) only holds what can be rebuilt: merged models, GGUFs, prepared data. A model is always the base with its
  stages' kept fp16 adapters merged in order (also the model the next stage trains from), so a session cut
  between stages goes on from exactly the model an uncut one would have.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from training.case_hashing import case_content_hash
from training.hat.ablation import CONDITIONS, DECODINGS, condition_items, judge_condition, kept_record
from training.hat.experiment import (
    ARM_STAGES,
    EVAL_SEED_OFFSET,
    STAGE_ARMS,
    Data,
    ExperimentConfig,
    compact_spec,
    eval_draw,
    training_draws,
)
from training.hat.heldout import heldout_variant
from training.hat.study_state import StudyState, earlier_segments, host, read_json, write_json
from training.hat.targets import accuracy_points, choose_recipe, compute_targets
from training.results import Reporter

TEST_SEED_OFFSET = 20_000
SPLITS = ("validation", "test")
# The stages whose adapters, merged into the base in this order, make each arm.
CHAINS = {"base": (), "fixed_sft": ("fixed_sft",), "hsa_sft": ("hsa_sft",), "hsa_sft_opd": ("hsa_sft", "hsa_sft_opd"),
          "hat": ("hsa_sft", "hsa_sft_opd", "hat")}
PIPELINE_ARMS = {"fixed": ("fixed_sft",), "hat": ("hsa_sft", "hsa_sft_opd", "hat")}
SHIPPABLE = ("hsa_sft", "hsa_sft_opd", "hat")
# The last tie-break of the choice: the served default (constrained) first, then the simpler model.
PREFERENCE = tuple((arm, decoding) for decoding in DECODINGS for arm in SHIPPABLE)
# Needed for the targets and the choice; the other conditions are judged after them.
TARGET_CONDITIONS = ("original", "names", "all")
# Seconds, for --status before anything was measured, on a 2-core CPU. A judged turn: the base 3.9 s with nothing
# else running (benchmarks/judging_throughput.py, 2026-12-07, Xeon), a trained arm 5 s from the 2026-12-01 run,
# which judged beside training (there the base took 12 s: llama.cpp's two threads slow down many times over when
# another process takes a core). SmolLM2 SFT with the compact LM head ~120 tokens/s in fp32 on the 2026-12-07
# AMD EPYC host, ~108 with bf16 before the compact head.
DEFAULT_TURN_S = {"base": 3.9, "trained": 5.0}
DEFAULT_IFEVAL_S = 3.0
DEFAULT_SFT_TOKENS_PER_S = {"fp32": 120.0, "bf16": 108.0}
DEFAULT_TOKENS_PER_ROW = 1620
DEFAULT_OPD_STEP_S = 25.0
DEFAULT_RL_STEP_S = 300.0


@dataclass(frozen=True)
class StudyConfig:
    experiment: ExperimentConfig = field(default_factory=ExperimentConfig)
    validation_cases: int = 40
    test_cases: int = 100
    ifeval_validation: int = 0          # IFEval prompts of the validation set used (0: all)
    ifeval_test: int = 0                # of the test set (0: all)
    with_rl: bool = False               # also the HAT arm (HSA-RL after OPD): hours on a CPU
    conditions: tuple[str, ...] = CONDITIONS  # judged per arm and decoding; must hold "original", "names", "all"
    # The splits judged under the ablation's other edit kinds too (the rest: the targets' conditions only). The
    # choice reads the targets' conditions alone, so the ablation on validation would only measure it again on
    # fewer cases.
    ablation_splits: tuple[str, ...] = ("test",)
    state_dir: str = "experiments/harness-reading"
    # How the run goes, not what it measures (outside the fingerprint):
    keep_checkpoint: bool = False       # a stage cut part way leaves its Trainer checkpoint in state_dir
    hours: float = 0.0                  # stop after this long (0: never): a stage checkpoints, judging ends a part
    commit_state: bool = False          # git-commit state_dir after each stage and every ~15 min of judging

    OPERATIONAL = ("state_dir", "keep_checkpoint", "hours", "commit_state")
    # ExperimentConfig fields the study does not read, or that do not change a figure
    UNUSED = ("cases", "ifeval", "eval_limit", "workdir", "eval_workers", "eval_threads", "parallel_training")
    # ExperimentConfig fields added after a study began, left out at these defaults so its identity holds
    ADDED_LATER = {"hsa": {}}

    def measured(self) -> dict[str, Any]:
        """What the figures depend on: the study's identity (`fingerprint`)."""
        own = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in (*self.OPERATIONAL, "experiment")}
        experiment = {k: v for k, v in asdict(self.experiment).items()
                      if k not in self.UNUSED and not (k in self.ADDED_LATER and v == self.ADDED_LATER[k])}
        return {**own, "conditions": list(self.conditions), "ablation_splits": list(self.ablation_splits),
                "experiment": experiment}

    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(self.measured(), sort_keys=True).encode()).hexdigest()

    @property
    def arms(self) -> tuple[str, ...]:
        return ("base", "fixed_sft", "hsa_sft", "hsa_sft_opd", *(("hat",) if self.with_rl else ()))

    @property
    def trained_arms(self) -> tuple[str, ...]:
        return tuple(arm for arm in self.arms if CHAINS[arm])

    @property
    def judged_conditions(self) -> tuple[str, ...]:
        """The targets' conditions first (a cut session has them soonest), then the others in ablation order."""
        return (*TARGET_CONDITIONS, *(c for c in CONDITIONS if c in self.conditions and c not in TARGET_CONDITIONS))

    def split_conditions(self, split: str) -> tuple[str, ...]:
        """What one split is judged under: every judged condition on an ablation split, else the targets'."""
        return self.judged_conditions if split in self.ablation_splits else TARGET_CONDITIONS

    def ifeval_limit(self, split: str) -> int:
        return self.ifeval_validation if split == "validation" else self.ifeval_test


class StudyPaused(Exception):
    """The study stopped before the end (time budget, a signal, the caller's stop): run the same command again."""


class Stopper:
    """Whether the study should stop now: its time budget is spent, SIGTERM/SIGINT arrived (`install`), or the
    caller's own `stop()` says so. Training asks after every optimizer step, judging between parts."""

    def __init__(self, hours: float = 0.0, stop: Callable[[], bool] | None = None):
        self.deadline = time.monotonic() + hours * 3600 if hours else None
        self.stop, self.signalled = stop, False

    def __call__(self) -> bool:
        return (self.signalled or (self.deadline is not None and time.monotonic() >= self.deadline)
                or bool(self.stop and self.stop()))

    def install(self) -> None:
        """The first SIGTERM or SIGINT asks for a clean stop (checkpoint, state kept); a second one is obeyed."""
        def handler(signum: int, frame: Any) -> None:
            if self.signalled:
                signal.signal(signum, signal.SIG_DFL)
                signal.raise_signal(signum)
            self.signalled = True
            print(f"study: signal {signum}: stopping after the current step or part (again to stop at once)",
                  flush=True)

        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, handler)


def build_study_data(config: StudyConfig) -> dict[str, Data]:
    """The two splits as `Data` (module docstring): same training pool and exclusions, own cases, held-out edits
    and IFEval prompts."""
    from training.hat.ifeval_sets import ifeval_records  # written beside this study; imported when it runs

    experiment = config.experiment
    spec = compact_spec()
    train_pool, rl_cases = training_draws(experiment, spec)
    seen = train_pool + rl_cases
    validation, skipped_validation = eval_draw(experiment.seed + EVAL_SEED_OFFSET, config.validation_cases, spec, seen)
    test, skipped_test = eval_draw(experiment.seed + TEST_SEED_OFFSET, config.test_cases, spec, seen + validation)
    cases = {"validation": validation, "test": test}
    skipped = {"validation": skipped_validation, "test": skipped_test}
    prompts = {split: list(ifeval_records(split)) for split in SPLITS}
    for split in SPLITS:
        if config.ifeval_limit(split):
            prompts[split] = prompts[split][:config.ifeval_limit(split)]
    exclude = {}
    for split in SPLITS:
        exclude[f"hat-lsqa-{split}"] = sorted({case_content_hash(c.to_dict()) for c in cases[split]})
        exclude[f"hat-ifeval-{split}"] = sorted({case_content_hash(r) for r in prompts[split]})
    return {split: Data(spec=spec, train_pool=train_pool, rl_cases=rl_cases, eval_cases=cases[split],
                        heldout=[heldout_variant(spec, case, experiment.heldout_seed) for case in cases[split]],
                        ifeval=prompts[split], skipped_near_duplicates=skipped[split], exclude=exclude)
            for split in SPLITS}


def choose_on_validation(turns: dict[str, dict[str, dict[str, list[dict[str, Any]]]]],
                         ifeval: dict[str, list[dict[str, Any]]], *, arms: Sequence[str]) -> dict[str, Any]:
    """Which shippable arm ships, and with which decoding, from the validation split's records alone: `turns`
    [arm][decoding][condition] and `ifeval`[arm] (`training.hat.targets.choose_recipe`'s rule)."""
    candidates = {}
    for arm in (a for a in arms if a in SHIPPABLE):
        for decoding in DECODINGS:
            targets = compute_targets(shipped=turns[arm][decoding], fixed=turns["fixed_sft"][decoding],
                                      ifeval=ifeval[arm], base_ifeval=ifeval["base"])
            candidates[(arm, decoding)] = {"targets": targets,
                                           "heldout": accuracy_points(turns[arm][decoding].get("all", ()))}
    choice = choose_recipe(candidates, preference=PREFERENCE)
    choice["validation_targets"] = {f"{arm}/{decoding}": figures["targets"]
                                    for (arm, decoding), figures in candidates.items()}
    return choice


def turns_and_verdicts(judged: dict[str, Any], ifeval: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """`Study.records`'s records reduced to what the targets read: turns[arm][decoding][condition] and IFEval
    verdicts[arm]."""
    turns = {arm: {decoding: {condition: record["turns"] for condition, record in conditions.items()}
                   for decoding, conditions in decodings.items()} for arm, decodings in judged.items()}
    return turns, {arm: record["verdicts"] if record else [] for arm, record in ifeval.items()}


class Study:
    """One run of the study (module docstring): `run()` does every part not yet in the state, in order."""

    def __init__(self, config: StudyConfig, reporter: Reporter, *, stopper: Stopper | None = None):
        self.config, self.experiment, self.reporter = config, config.experiment, reporter
        self.state = StudyState(Path(config.state_dir), commit=config.commit_state)
        self.workdir = Path(self.experiment.workdir)
        self.stopper = stopper or Stopper(config.hours)
        self._data: dict[str, Data] | None = None
        self._items: dict[tuple[str, str, str], list[tuple[Any, Any]]] = {}
        missing = [c for c in TARGET_CONDITIONS if c not in config.conditions]
        if missing or not set(config.conditions) <= set(CONDITIONS):
            raise ValueError(f"conditions must be among {', '.join(CONDITIONS)} and hold "
                             f"{', '.join(TARGET_CONDITIONS)}; got {', '.join(config.conditions)}")
        if not set(config.ablation_splits) <= set(SPLITS):
            raise ValueError(f"ablation splits must be among {', '.join(SPLITS)}; got "
                             f"{', '.join(config.ablation_splits)}")

    @property
    def data(self) -> dict[str, Data]:
        if self._data is None:
            self._data = build_study_data(self.config)
        return self._data

    def run(self) -> None:
        """Every part not yet in the state, in order; StudyPaused when stopped early. The figures:
        `training.hat.study_figures.study_result(study)`."""
        self.state.claim(self.config.fingerprint(), self.config.measured())
        self.pin_precision()
        try:
            self.train()
            for arm in self.config.arms:
                self.judge("validation", arm, TARGET_CONDITIONS)
            choice = self.choose()
            for arm in self.test_order(choice):
                self.judge("test", arm, TARGET_CONDITIONS)
            # the targets are measured by now; the ablation's other edit kinds, test split first
            for split in (s for s in reversed(SPLITS) if s in self.config.ablation_splits):
                for arm in self.ablation_order(choice):
                    self.judge(split, arm)
        finally:
            self.state.commit("harness-reading study: state at the end of a session", force=True)

    def pin_precision(self) -> None:
        """Train every stage in one precision: "auto" resolves on the first session's host and stays pinned, so a
        stage resumed, or the next arm trained, on a host with other CPU instructions trains as the first did."""
        if self.experiment.precision != "auto":
            return
        from training.base_models import resolve_bf16

        resolved = "bf16" if resolve_bf16("auto", use_cpu=self.experiment.device == "cpu") else "fp32"
        self.experiment = replace(self.experiment, precision=self.state.pinned_precision(resolved))

    def check_stop(self) -> None:
        if self.stopper():
            raise StudyPaused("stopped before the end: run the same command again to go on")

    # -- training
    def train(self) -> None:
        if all(self.state.stage_record(arm) is not None for arm in self.config.trained_arms):
            return
        from training.base_models import load_tokenizer
        from training.hat.experiment import pipeline_configs, split_training

        data = self.data["validation"]
        split = split_training(self.experiment, data, load_tokenizer(self.experiment.base))
        configs = pipeline_configs(self.experiment, data, split, self.workdir)
        if not self.config.with_rl:
            configs["hat"]["stages"] = configs["hat"]["stages"][:2]
        self.state.save_plan(_plan(split, configs))
        self.reporter.line(f"study: HSA-SFT {split['hsa_rows']} rows / {split['hsa_tokens']} tokens; Fixed-SFT "
                           f"{split['fixed_rows']} rows / {split['fixed_tokens']} tokens")
        for name in ("fixed", "hat"):
            arms = PIPELINE_ARMS[name][:len(configs[name]["stages"])]
            if any(self.state.stage_record(arm) is None for arm in arms):
                self._train_pipeline(name, configs[name], arms)

    def _train_pipeline(self, name: str, raw: dict[str, Any], arms: tuple[str, ...]) -> None:
        from training.pipeline import PipelineConfig, TrainingCancelled, run_pipeline

        artifacts = self.workdir / name
        for arm in arms:
            if self.state.stage_record(arm) is None:
                self._restore_checkpoint(arm)
                break
            self.stage_model(arm)  # kept by an earlier session: rebuilt here, and the pipeline skips it
        self.check_stop()
        keeper = _StageKeeper(self, name, artifacts)
        try:
            run_pipeline(PipelineConfig.from_dict(raw), artifacts_dir=artifacts, reporter=keeper,
                         should_stop=self.stopper)
        except TrainingCancelled as cancelled:
            arm = STAGE_ARMS[name][cancelled.stage]
            if self.config.keep_checkpoint and cancelled.checkpoint:
                earlier = self.state.checkpoint_meta(arm).get("wall_s", 0.0)
                kept = self.state.keep_checkpoint(arm, Path(cancelled.checkpoint),
                                                  wall_s=earlier + time.monotonic() - keeper.started,
                                                  segment=keeper.segment())
                size = sum(p.stat().st_size for p in kept.rglob("*") if p.is_file())
                self.reporter.line(f"study: kept {kept} ({size / 1e6:.1f} MB) for the next session")
            raise StudyPaused(f"{arm} stopped after step {cancelled.step}: run the same command again "
                              "to go on" + ("" if self.config.keep_checkpoint else
                                            " (from this machine's checkpoint; --keep-checkpoint keeps it in the "
                                            "state for another machine)")) from cancelled

    def _stage_folder(self, arm: str) -> tuple[Path, Path]:
        pipeline, stage = ARM_STAGES[arm]
        artifacts = self.workdir / pipeline
        return artifacts, artifacts / "stages" / stage

    def _restore_checkpoint(self, arm: str) -> None:
        kept = self.state.kept_checkpoint(arm)
        if kept is None:
            return
        trainer = self._stage_folder(arm)[1] / "trainer"
        if not (trainer / kept.name).exists():
            shutil.copytree(kept, trainer / kept.name)
            self.reporter.line(f"study: {arm} resumes from the kept {kept.name}")

    def stage_model(self, arm: str) -> Path:
        """The arm's model folder, made from the state: the base with the arm's kept adapters merged in order
        (rebuilt only when they changed), with the stage's adapter and result beside it, as the pipeline writes
        them, so a pipeline run skips the stage and the next stage starts from this model."""
        from training.base_models import load_tokenizer, materialize_base, model_cache
        from training.default_model import chain_digest, merge_adapters

        artifacts, directory = self._stage_folder(arm)
        model_dir = directory / "model"
        adapters = self.state.adapters(CHAINS[arm])
        digest = chain_digest(adapters)
        marker = model_dir / ".study-adapters"
        if not (marker.is_file() and marker.read_text().strip() == digest):
            base_dir = materialize_base(self.experiment.base, model_cache(), seed=self.experiment.seed)
            temporary = model_dir.with_name("model.study.tmp")
            shutil.rmtree(temporary, ignore_errors=True)
            merge_adapters(base_dir, adapters).save_pretrained(temporary)
            load_tokenizer(base_dir).save_pretrained(temporary)
            (temporary / ".study-adapters").write_text(digest + "\n")
            shutil.rmtree(model_dir, ignore_errors=True)
            temporary.rename(model_dir)
        if not (directory / "result.json").is_file():
            record = self.state.stage_record(arm)
            shutil.copytree(self.state.stage_dir(arm) / "adapter", directory / "adapter", dirs_exist_ok=True)
            located = {key: str(artifacts / record[key]) if record[key].startswith("stages/") else record[key]
                       for key in ("path", "parent_path")}
            write_json(directory / "result.json", {key: record.get(key) for key in (
                "stage", "base_model", "metrics", "data_lineage", "harness_hashes", "resolved_config")} | located)
        return model_dir

    # -- judging
    def model_id(self, arm: str) -> str:
        return self.state.model_id(arm, CHAINS[arm], self.experiment.base)

    def items(self, split: str, condition: str, decoding: str) -> list[tuple[Any, Any]]:
        key = (split, condition, decoding)
        if key not in self._items:
            data = self.data[split]
            self._items[key] = condition_items(data, condition, self.experiment.heldout_seed, len(data.eval_cases),
                                               decoding)
        return self._items[key]

    def _ifeval_kept(self, split: str, arm: str, model: str) -> dict[str, Any] | None:
        kept = read_json(self.state.ifeval_path(split, arm))
        keys = [case_content_hash(r) for r in self.data[split].ifeval]
        if kept and kept["model"] == model and [v["key"] for v in kept["verdicts"]] == keys:
            return kept
        return None

    def judge(self, split: str, arm: str, conditions: Sequence[str] = ()) -> None:
        """The `conditions` (default: every one the split is judged under) of one arm on one split under both
        decodings, and its
        IFEval, each kept as it finishes."""
        from training.hat.evaluate import Capped, ifeval_scores

        model = self.model_id(arm)
        todo = [(decoding, condition) for decoding in DECODINGS
                for condition in (conditions or self.config.split_conditions(split))
                if kept_record(self.state.judged_path(split, arm, decoding, condition), model=model,
                               decoding=decoding, items=self.items(split, condition, decoding)) is None]
        ifeval_todo = self._ifeval_kept(split, arm, model) is None
        if not todo and not ifeval_todo:
            return
        self.check_stop()
        served = self._served(arm)
        backend = Capped(served, self.experiment.max_new_tokens)
        for decoding, condition in todo:
            self.check_stop()
            self.reporter.line(f"study: judging {arm} on {split}, {decoding}, {condition}")
            judge_condition(backend, self.items(split, condition, decoding), model=model, condition=condition,
                            decoding=decoding, workdir=self.state.root, deadline_s=self.experiment.eval_deadline_s,
                            say=self.reporter.line, saved=self.state.judged_path(split, arm, decoding, condition),
                            extra={"split": split, "arm": arm, "host": host()})
            self.state.commit(f"harness-reading study: {arm} judged on {split}")
        if ifeval_todo:
            self.check_stop()
            self.reporter.line(f"study: IFEval for {arm} on {split}")
            records, started, machine = self.data[split].ifeval, time.monotonic(), host()
            scores = ifeval_scores(served, records, max_new_tokens=self.experiment.ifeval_new_tokens)
            write_json(self.state.ifeval_path(split, arm), {
                "model": model, "split": split, "arm": arm, "eval_s": round(time.monotonic() - started, 1),
                "host": machine, "verdicts": [{"key": case_content_hash(r), "strict": s}
                                              for r, s in zip(records, scores, strict=True)]})
            self.state.commit(f"harness-reading study: {arm} IFEval on {split}")

    def _served(self, arm: str) -> Any:
        from training.base_models import materialize_base, model_cache
        from training.hat.evaluate import eval_backend

        experiment = self.experiment
        model_dir = (self.stage_model(arm) if CHAINS[arm] else
                     materialize_base(experiment.base, model_cache(), seed=experiment.seed))
        engine = experiment.engine or ("llama.cpp" if experiment.device == "cpu" else "transformers")
        return eval_backend(str(model_dir), engine=engine, device=experiment.device, threads=experiment.eval_threads)

    # -- the choice and the test
    def records(self, split: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """One split's kept records of the arms' current models: judged[arm][decoding][condition] (a judging
        record) and ifeval[arm] (an IFEval record, or None); a part not judged yet is missing."""
        judged: dict[str, Any] = {}
        ifeval: dict[str, Any] = {}
        for arm in self.config.arms:
            model = self.model_id(arm) if all(self.state.stage_record(a) for a in CHAINS[arm]) else None
            judged[arm] = {decoding: {} for decoding in DECODINGS}
            for decoding in DECODINGS:
                for condition in self.config.split_conditions(split):
                    kept = model and kept_record(self.state.judged_path(split, arm, decoding, condition), model=model,
                                                 decoding=decoding, items=self.items(split, condition, decoding))
                    if kept:
                        judged[arm][decoding][condition] = kept
            ifeval[arm] = model and self._ifeval_kept(split, arm, model) or None
        return judged, ifeval

    def choose(self) -> dict[str, Any]:
        """The recipe choice on the validation split (kept in choice.json; made again only if the validation
        records it was made on changed)."""
        turns, verdicts = turns_and_verdicts(*self.records("validation"))
        # the rule reads the targets' conditions only: judging the ablation's others later changes no choice
        turns = {arm: {decoding: {c: t for c, t in conditions.items() if c in TARGET_CONDITIONS}
                       for decoding, conditions in decodings.items()} for arm, decodings in turns.items()}
        digest = hashlib.sha256(json.dumps([turns, verdicts], sort_keys=True).encode()).hexdigest()
        kept = read_json(self.state.choice_path)
        if kept and kept.get("validation_digest") == digest:
            return kept
        choice = {**choose_on_validation(turns, verdicts, arms=self.config.arms), "validation_digest": digest,
                  "made_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        write_json(self.state.choice_path, choice)
        self.reporter.line(f"study: chose on validation: {choice['reason']}")
        self.state.commit("harness-reading study: recipe chosen on the validation split", force=True)
        return choice

    def test_order(self, choice: dict[str, Any]) -> list[str]:
        """The shipped arm, then what its targets compare it with, then the rest."""
        first = [choice["arm"], "fixed_sft", "base"]
        return [*first, *(arm for arm in self.config.arms if arm not in first)]

    def ablation_order(self, choice: dict[str, Any]) -> list[str]:
        """The trained arms in test order, then the base: the ablation asks how each training bears each edit, and
        an untrained base that fails the protocol under its own harness has no accuracy left to lose."""
        return [*(arm for arm in self.test_order(choice) if arm != "base"), "base"]


class _StageKeeper:
    """The reporter a study's pipeline runs with: passes everything on, keeps each finished stage in the state
    (adapter, record, wall time, host; commits it), then replaces the stage's model with the one its kept adapters
    give, which the next stage starts from."""

    def __init__(self, study: Study, pipeline: str, artifacts: Path):
        self.study, self.pipeline, self.artifacts = study, pipeline, artifacts
        self.started = time.monotonic()
        self.logged: list[tuple[int, dict[str, Any]]] = []  # this session's logged steps of the running stage

    def log(self, stage: str, step: int, total: int, metrics: dict[str, Any]) -> None:
        self.logged.append((step, metrics))
        self.study.reporter.log(stage, step, total, metrics)

    def segment(self) -> dict[str, Any]:
        """What this session trained of the running stage: its steps, wall time, host, first and last loss and
        the tokens the trainer counted (which start again from 0 when a stage resumes)."""
        losses = [(step, m["loss"]) for step, m in self.logged if "loss" in m]
        tokens = [m["num_tokens"] for _, m in self.logged if "num_tokens" in m]
        return {"steps": [self.logged[0][0], self.logged[-1][0]] if self.logged else None,
                "wall_s": round(time.monotonic() - self.started, 1), "host": host(),
                "first_loss": losses[0][1] if losses else None, "last_loss": losses[-1][1] if losses else None,
                "num_tokens": tokens[-1] if tokens else None}

    def line(self, text: str) -> None:
        self.study.reporter.line(text)

    def checkpoint(self, result: Any) -> None:
        arm = STAGE_ARMS[self.pipeline].get(result.stage)
        if arm is None:
            return
        state = self.study.state
        if state.stage_record(arm) is None:
            meta = state.checkpoint_meta(arm)
            earlier = meta.get("wall_s", 0.0)
            wall = earlier + time.monotonic() - self.started
            segments = [*earlier_segments(meta), self.segment()]
            state.save_stage(arm, result.to_dict(), adapter=Path(result.path).parent / "adapter",
                             artifacts_dir=self.artifacts,
                             extra={"wall_s": round(wall, 1), "host": host(),
                                    "resumed_from_kept_checkpoint": bool(earlier), "segments": segments})
            state.drop_checkpoint(arm)
            state.commit(f"harness-reading study: {arm} trained", force=True)
            self.study.reporter.line(f"study: {arm} trained in {wall:.0f} s, kept in {state.stage_dir(arm)}")
            self.study.reporter.checkpoint(result)
        self.study.stage_model(arm)
        self.started = time.monotonic()
        self.logged = []



def _plan(split: dict[str, Any], configs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What the state keeps of the training split (the report and --status read it; training draws it again)."""
    steps = {arm: stage["config"]["max_steps"] for name, raw in configs.items()
             for arm, stage in zip(PIPELINE_ARMS[name], raw["stages"], strict=False)}
    return {"hsa_rows": split["hsa_rows"], "fixed_rows": split["fixed_rows"], "hsa_tokens": split["hsa_tokens"],
            "fixed_tokens": split["fixed_tokens"], "steps": steps,
            "hsa_variant_names": split["hsa_variant_names"]}


def study_status(config: StudyConfig) -> dict[str, Any]:
    """What is done and what is left, with an estimate of the time left, from the state alone (nothing is built:
    a judging counts as done when its record names the arm's current model and the decoding)."""
    state = StudyState(Path(config.state_dir))
    experiment = config.experiment
    stored = read_json(state.root / "study.json")
    plan = state.plan or {}
    parts: list[dict[str, Any]] = []
    rates = _measured_rates(state, config)
    for arm in config.trained_arms:
        record = state.stage_record(arm)
        kept = state.kept_checkpoint(arm)
        parts.append({"part": f"train {arm}", "done": record is not None,
                      "note": f"kept {kept.name}" if kept and record is None else "", "for_targets": True,
                      "estimate_s": 0.0 if record else _training_estimate(arm, config, plan, rates)
                      * (1 - _kept_share(kept, plan.get("steps", {}).get(arm)))})
    cases = {"validation": config.validation_cases, "test": config.test_cases}
    prompts = {split: _ifeval_count(config, split) for split in SPLITS}
    for split in SPLITS:
        for arm in config.arms:
            trained = all(state.stage_record(a) for a in CHAINS[arm])
            model = state.model_id(arm, CHAINS[arm], experiment.base) if trained else None
            kind = "trained" if CHAINS[arm] else "base"
            for decoding in DECODINGS:
                for condition in config.split_conditions(split):
                    per_turn = rates["condition_turn_s"][kind].get(condition, rates["turn_s"][kind])
                    kept = read_json(state.judged_path(split, arm, decoding, condition))
                    done = bool(kept and model and kept.get("model") == model and kept.get("decoding") == decoding)
                    note = f"{accuracy_points(kept['turns'])} % right of {len(kept['turns'])}" if done else ""
                    parts.append({"part": f"judge {arm} {split} {decoding} {condition}", "done": done, "note": note,
                                  "for_targets": condition in TARGET_CONDITIONS,
                                  "estimate_s": 0.0 if done else cases[split] * per_turn})
            kept = read_json(state.ifeval_path(split, arm))
            done = bool(kept and model and kept.get("model") == model)
            verdicts = kept["verdicts"] if done else ()
            note = f"{100 * sum(v['strict'] for v in verdicts) / len(verdicts):.1f} % strict of {len(verdicts)}" \
                if verdicts else ""
            parts.append({"part": f"ifeval {arm} {split}", "done": done, "note": note, "for_targets": True,
                          "estimate_s": 0.0 if done else prompts[split] * rates["ifeval_s"]})
        if split == "validation":
            choice = read_json(state.choice_path)
            parts.append({"part": "choose on validation", "done": choice is not None, "estimate_s": 0.0,
                          "for_targets": True,
                          "note": f"{choice['arm']} / {choice['decoding']}" if choice else ""})
    left = [p for p in parts if not p["done"]]
    return {"state_dir": str(state.root), "claimed": stored is not None,
            "same_config": stored is None or stored["fingerprint"] == config.fingerprint(),
            "parts": parts, "done": len(parts) - len(left), "left": len(left),
            "estimate_left_s": round(sum(p["estimate_s"] for p in left)),
            "targets_left_s": round(sum(p["estimate_s"] for p in left if p["for_targets"])), "rates": rates,
            "state_mb": round(state.size_bytes() / 1e6, 1)}


def _kept_share(kept: Path | None, steps: int | None) -> float:
    """The share of a stage's optimizer steps its kept checkpoint already holds."""
    done = kept.name.rsplit("-", 1)[-1] if kept else ""
    return min(int(done) / steps, 1.0) if done.isdigit() and steps else 0.0


def _ifeval_count(config: StudyConfig, split: str) -> int:
    limit = config.ifeval_limit(split)
    try:
        from training.hat.ifeval_sets import ifeval_records

        available = len(ifeval_records(split))
    except ImportError:
        available = 50 if split == "validation" else 100
    return min(limit, available) if limit else available


def _measured_rates(state: StudyState, config: StudyConfig) -> dict[str, Any]:
    """Seconds per judged turn (base, trained; and per condition, since an edit that leaves a model retrying
    names costs it several times the original harness's turn) and per IFEval prompt, and SFT tokens/s, from the
    state's records where there are any, else the defaults above."""
    from training.base_models import cpu_has_bf16

    turn = {"base": [0.0, 0], "trained": [0.0, 0]}
    by_condition: dict[str, dict[str, list[float]]] = {"base": {}, "trained": {}}
    ifeval = [0.0, 0]
    for path in (state.root / "judged").rglob("*.json") if (state.root / "judged").is_dir() else ():
        record = read_json(path)
        if not record:
            continue
        if path.name == "ifeval.json":
            ifeval[0] += record.get("eval_s", 0.0)
            ifeval[1] += len(record.get("verdicts", ()))
        else:
            kind = "base" if record.get("arm") == "base" else "trained"
            seconds, turns = record.get("eval_s", 0.0), len(record.get("turns", ()))
            for totals in (turn[kind], by_condition[kind].setdefault(path.stem, [0.0, 0])):
                totals[0] += seconds
                totals[1] += turns
    sft_rates = [r["metrics"]["tokens_per_s"] for arm in ("fixed_sft", "hsa_sft")
                 if (r := state.stage_record(arm)) and r.get("metrics", {}).get("tokens_per_s")]
    precision = (read_json(state.root / "precision.json") or {}).get("precision", config.experiment.precision)
    bf16 = precision == "bf16" or (precision == "auto" and cpu_has_bf16())
    return {"turn_s": {kind: round(total / n, 2) if n else DEFAULT_TURN_S[kind] for kind, (total, n) in turn.items()},
            "condition_turn_s": {kind: {condition: round(total / n, 2) for condition, (total, n) in sorted(rows.items())
                                        if n} for kind, rows in by_condition.items()},
            "ifeval_s": round(ifeval[0] / ifeval[1], 2) if ifeval[1] else DEFAULT_IFEVAL_S,
            "sft_tokens_per_s": round(sum(sft_rates) / len(sft_rates), 1) if sft_rates else
            DEFAULT_SFT_TOKENS_PER_S["bf16" if bf16 else "fp32"]}


def _training_estimate(arm: str, config: StudyConfig, plan: dict[str, Any], rates: dict[str, Any]) -> float:
    experiment = config.experiment
    if arm in ("fixed_sft", "hsa_sft"):
        key = "fixed_tokens" if arm == "fixed_sft" else "hsa_tokens"
        tokens = plan.get(key) or experiment.train_examples * DEFAULT_TOKENS_PER_ROW
        return tokens * experiment.sft_epochs / rates["sft_tokens_per_s"]
    if arm == "hsa_sft_opd":
        return experiment.opd_steps * DEFAULT_OPD_STEP_S
    return experiment.rl_steps * DEFAULT_RL_STEP_S


def format_status(status: dict[str, Any]) -> str:
    """`study_status` as lines for a terminal."""
    def hours(seconds: float) -> str:
        return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"

    lines = [f"state: {status['state_dir']} ({status['state_mb']} MB)"
             + ("" if status["same_config"] else " — HOLDS ANOTHER STUDY'S STATE (its config differs)"),
             f"done {status['done']} parts, {status['left']} left, about {hours(status['estimate_left_s'])} of work "
             f"left, {hours(status['targets_left_s'])} of it for the targets' parts (rates: "
             f"{ {k: v for k, v in status['rates'].items() if k != 'condition_turn_s'} })"]
    for kind, rates in status["rates"].get("condition_turn_s", {}).items():
        if rates:
            lines.append(f"  s a judged {kind} turn, by condition: "
                         + ", ".join(f"{condition} {seconds}" for condition, seconds in rates.items()))
    for part in status["parts"]:
        mark = "done" if part["done"] else f"todo ~{hours(part['estimate_s'])}"
        lines.append(f"  [{mark:>12}] {part['part']}" + (f" ({part['note']})" if part["note"] else ""))
    return "\n".join(lines)
