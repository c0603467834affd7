"""Choosing on the validation split: which checkpoint becomes a stage's model, which learning rate it trains with.

**The score** (`score_model`): every validation case (`holdout.ValidationSplit`) is answered once through the
runtime (`run_turn`, the simulator's sandbox, greedy decoding, `max_new_tokens` per model call) and graded by
the reference judge (effectiveness: 0, 0.5 or 1; a fallback or an error is a failure); every validation prompt
is answered as a plain chat and graded by IFEval's official checkers (1 when every instruction is followed).
The score is the mean over all those items. It is all selection reads: the eval sets of `data.exclude` are
never loaded here, and the split is drawn apart from them (`holdout.py`).

**Checkpoints** (`CheckpointSelection`): with a split, each checkpoint a stage saves (every `save_steps`, and
the last step: the trainer saves there too) is scored as it is saved, by the main process, and the best so far
is copied to `stages/NN-kind/best/` (the trainer's rotation may delete its checkpoint later). When the stage
has written its model, the best of them (ties: the later step) becomes the stage's model (`model/`, and
`adapter/` for LoRA); a final model no checkpoint scored (a resumed stage) is scored then. Scores are kept in `selection.json`, so a resumed stage does not score a checkpoint twice. The
record: `{"rule": "best validation score", "step", "score", "scores": {step: score}}`; without a split it is
`{"rule": "no validation: last checkpoint", "step"}` and nothing is scored.

**Learning rates** (`select_learning_rate`): each of a stage's `learning_rate_candidates` trains the stage from
the same input for `learning_rate_trial_steps`, in `stages/NN-kind/lr-trials/lr-<rate>/`; its final model is
scored, and the best (ties: the one listed first) trains the full stage. A trial's `trial.json` keeps its
score (its weights are deleted), so a resumed job does not train it again.

Scoring runs inside training (on a checkpoint save), so it leaves torch's and Python's random state as it found
it: an interrupted and resumed stage continues exactly as one that ran straight through.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import random
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evaluation.judges.reference import judge_reference
from evaluation.metrics.ifeval import check_record
from harness.model_protocol import ModelResponse
from harness.runtime import RoomContext, TurnInput, run_turn
from harness.simulator import SandboxTools
from harness.spec import HarnessSpec
from serving.backends.hermes import IM_END, parse_tool_calls, render_chatml
from training.holdout import ValidationSplit
from training.results import StageFailed
from training.trajectories import TRAINING_NOW

NO_VALIDATION = "no validation: last checkpoint"
BEST_SCORE = "best validation score"
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin")


class GreedyBackend:
    """A transformers model as a `ModelBackend`: prompts rendered as served (`render_chatml`, Hermes tool calls),
    greedy decoding, at most `max_new_tokens` a call where given (validation's CPU-time bound). The HAT
    experiment's transformers engine (`training.hat.evaluate`) is this backend too."""

    def __init__(self, model: Any, tokenizer: Any, *, max_new_tokens: int | None = None, name: str = "validation"):
        self.model, self.tokenizer, self.max_new_tokens, self.name = model, tokenizer, max_new_tokens, name
        self.end_id = tokenizer.convert_tokens_to_ids(IM_END)

    def generate(self, prompt: str, max_new_tokens: int) -> str:
        import torch

        ids = self.tokenizer(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"].to(self.model.device)
        with torch.no_grad():
            out = self.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                      max_new_tokens=max_new_tokens, eos_token_id=self.end_id,
                                      pad_token_id=self.tokenizer.pad_token_id)
        return self.tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=False).split(IM_END)[0]

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, max_tokens: int = 512,
                       temperature: float = 0.0, tool_choice: str = "auto") -> ModelResponse:
        budget = max_tokens if self.max_new_tokens is None else min(max_tokens, self.max_new_tokens)
        text = await asyncio.to_thread(self.generate, render_chatml(messages, tools), budget)
        content, calls = parse_tool_calls(text) if tools else (text.strip(), ())
        return ModelResponse(content=content, tool_calls=calls, tokens_in=0, tokens_out=0,
                             finish_reason="tool_calls" if calls else "stop")


@dataclass(frozen=True)
class ValidationScore:
    score: float           # the mean over every case and prompt
    cases: float | None    # mean effectiveness over the cases (None: no cases)
    prompts: float | None  # share of prompts with every instruction followed (None: no prompts)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def score_model(model: Any, tokenizer: Any, split: ValidationSplit, specs: Sequence[HarnessSpec], *,
                max_new_tokens: int, deadline_s: float) -> ValidationScore:
    """The model's score on the validation split (module docstring). The cases take the job's harnesses in turn."""
    backend = GreedyBackend(model, tokenizer, max_new_tokens=max_new_tokens)
    effectiveness = []
    for index, case in enumerate(split.cases):
        spec = specs[index % len(specs)]
        sandbox = SandboxTools(dict(case.room), seed=case.case_id)
        turn = TurnInput(message=case.message, viewer_id=case.viewer_id, room=RoomContext.from_dict(dict(case.room)),
                         recent_dialogue=case.dialogue)
        result = asyncio.run(run_turn(spec, turn, backend, sandbox.registry(), arm="train:validation",
                                      now=TRAINING_NOW, deadline_s=deadline_s))
        effectiveness.append(float(judge_reference(case, result.trace).effectiveness))
    followed = []
    for record in split.prompts:
        response = asyncio.run(backend.complete([{"role": "user", "content": record["prompt"]}], [],
                                                max_tokens=max_new_tokens))
        followed.append(float(check_record(record, response.content).prompt_strict))
    items = effectiveness + followed
    return ValidationScore(score=round(sum(items) / len(items), 6) if items else 0.0,
                           cases=round(sum(effectiveness) / len(effectiveness), 6) if effectiveness else None,
                           prompts=round(sum(followed) / len(followed), 6) if followed else None)


def load_candidate(path: str | Path, *, input_dir: str, use_cpu: bool) -> Any:
    """A model directory or a stage checkpoint as a model in eval mode (a LoRA checkpoint holds only its adapter:
    it is merged into the stage's input model)."""
    import torch
    from transformers import AutoModelForCausalLM

    dtype = torch.float32 if use_cpu else torch.bfloat16
    path = Path(path)
    if (path / "adapter_config.json").is_file() and not (path / "config.json").is_file():
        from peft import PeftModel

        base = AutoModelForCausalLM.from_pretrained(input_dir, dtype=dtype)
        model = PeftModel.from_pretrained(base, str(path)).merge_and_unload()
    else:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    return model.to("cpu" if use_cpu else "cuda").eval()


class _SameRandomState:
    """Leaves torch's and Python's random state as it was (scoring happens between training steps)."""

    def __enter__(self) -> None:
        import torch

        self._python = random.getstate()
        self._torch = torch.random.fork_rng(devices=list(range(torch.cuda.device_count())))
        self._torch.__enter__()

    def __exit__(self, *exc: Any) -> None:
        self._torch.__exit__(*exc)
        random.setstate(self._python)


@dataclass(frozen=True)
class ValidationScorer:
    """Loads a candidate (model directory or checkpoint) and scores it on the split."""

    split: ValidationSplit
    specs: tuple[HarnessSpec, ...]
    max_new_tokens: int
    deadline_s: float
    use_cpu: bool

    def load(self, path: str | Path, *, input_dir: str) -> tuple[Any, Any]:
        from training.base_models import load_tokenizer

        with _SameRandomState():  # building a model draws its initial weights
            return load_candidate(path, input_dir=input_dir, use_cpu=self.use_cpu), load_tokenizer(input_dir)

    def score(self, model: Any, tokenizer: Any) -> ValidationScore:
        with _SameRandomState():
            return score_model(model, tokenizer, self.split, self.specs, max_new_tokens=self.max_new_tokens,
                               deadline_s=self.deadline_s)

    def __call__(self, path: str | Path, *, input_dir: str) -> ValidationScore:
        model, tokenizer = self.load(path, input_dir=input_dir)
        return self.score(model, tokenizer)


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(temporary, path)


def _replace_dir(source: Path, target: Path) -> None:
    """`target` becomes a copy of `source` (copied beside it, then renamed: a kill never leaves half of it)."""
    temporary = target.with_name(target.name + ".selected.tmp")
    shutil.rmtree(temporary, ignore_errors=True)
    shutil.copytree(source, temporary)
    shutil.rmtree(target, ignore_errors=True)
    temporary.rename(target)


def best_step(scores: Mapping[str, Mapping[str, Any]]) -> int:
    """The step with the highest score; among equals, the later (more training, and what no selection keeps)."""
    return max((float(score["score"]), int(step)) for step, score in scores.items())[1]


class CheckpointSelection:
    """Scores a stage's checkpoints as they are saved and makes the best the stage's model (module docstring).

    Every process calls `checkpoint_saved` and `finish` at the same points; the main process does the work."""

    def __init__(self, scorer: ValidationScorer, *, stage: str, directory: Path, input_dir: Callable[[], str],
                 processes: Any, reporter: Any, total_steps: int):
        self.scorer, self.stage, self.directory = scorer, stage, directory
        self.input_dir, self.processes, self.reporter, self.total_steps = input_dir, processes, reporter, total_steps
        self.record_path, self.best_dir = directory / "selection.json", directory / "best"

    def _scores(self) -> dict[str, dict[str, Any]]:
        return dict(_read_json(self.record_path) or {})

    def checkpoint_saved(self, step: int, path: Path) -> None:
        """A trainer checkpoint was written at `step` (the reporter callback's `on_save`)."""
        input_dir = self.input_dir()
        self.processes.main_decides(lambda: self._score(step, path, input_dir=input_dir))

    def _score(self, step: int, path: Path, *, input_dir: str) -> None:
        scores = self._scores()
        if str(step) in scores:
            return
        model, tokenizer = self.scorer.load(path, input_dir=input_dir)
        score = self.scorer.score(model, tokenizer)
        scores[str(step)] = score.to_dict()
        self._report(step, score)
        if best_step(scores) == step and step != self.total_steps:  # the final step is the stage's model already
            temporary = self.best_dir.with_name("best.tmp")
            shutil.rmtree(temporary, ignore_errors=True)
            model.save_pretrained(temporary / "model")
            tokenizer.save_pretrained(temporary / "model")
            for name in ADAPTER_FILES:
                if (path / name).is_file():
                    (temporary / "adapter").mkdir(exist_ok=True)
                    shutil.copy2(path / name, temporary / "adapter" / name)
            _write_json(temporary / "step.json", {"step": step})
            shutil.rmtree(self.best_dir, ignore_errors=True)
            temporary.rename(self.best_dir)
        _write_json(self.record_path, scores)

    def _report(self, step: int, score: ValidationScore) -> None:
        parts = [f"{score.score:.3f}"] + ([f"cases {score.cases:.3f}"] if score.cases is not None else []) + (
            [f"prompts {score.prompts:.3f}"] if score.prompts is not None else [])
        self.reporter.line(f"{self.stage}: validation score at step {step}: {', '.join(parts)}")
        metrics = {"validation/score": score.score}
        if score.cases is not None:
            metrics["validation/cases"] = score.cases
        if score.prompts is not None:
            metrics["validation/prompts"] = score.prompts
        self.reporter.log(self.stage, step, self.total_steps, metrics)

    def finish(self, *, model_dir: Path, adapter_dir: Path) -> dict[str, Any]:
        """Score the stage's final model (unless its step was scored as a checkpoint), make the best the stage's
        model, and return the record."""
        input_dir = self.input_dir()
        return self.processes.main_decides(lambda: self._finish(model_dir, adapter_dir, input_dir=input_dir))

    def _finish(self, model_dir: Path, adapter_dir: Path, *, input_dir: str) -> dict[str, Any]:
        scores = self._scores()
        if str(self.total_steps) not in scores:
            score = self.scorer(model_dir, input_dir=input_dir)
            scores[str(self.total_steps)] = score.to_dict()
            self._report(self.total_steps, score)
            _write_json(self.record_path, scores)
        step = best_step(scores)
        if step != self.total_steps:
            kept = int((_read_json(self.best_dir / "step.json") or {}).get("step", -1))
            if kept != step:
                raise StageFailed(f"{self.stage}: the best checkpoint (step {step}) was not kept in {self.best_dir}")
            _replace_dir(self.best_dir / "model", model_dir)
            if (self.best_dir / "adapter").is_dir():
                _replace_dir(self.best_dir / "adapter", adapter_dir)
        ordered = {s: scores[s]["score"] for s in sorted(scores, key=int)}
        shown = ", ".join(f"step {s}: {v:.3f}" for s, v in ordered.items())
        self.reporter.line(f"{self.stage}: validation picked step {step} of {self.total_steps} ({shown})")
        return {"rule": BEST_SCORE, "step": step, "score": scores[str(step)]["score"],
                "detail": scores[str(step)], "scores": ordered}

    def cleanup(self) -> None:
        """Drop the copy of the best checkpoint once the stage's result is written (main process)."""
        shutil.rmtree(self.best_dir, ignore_errors=True)


def last_checkpoint_record(total_steps: int) -> dict[str, Any]:
    """The selection record of a stage that has no validation split: today's rule, the last checkpoint."""
    return {"rule": NO_VALIDATION, "step": total_steps}


class TrialReporter:
    """What a learning-rate trial reports to: its lines, prefixed, go to the job's log; its curve points and
    its model are not the job's (the live page would draw them as the stage)."""

    def __init__(self, reporter: Any, stage: str, rate: float):
        self.reporter, self.stage, self.prefix = reporter, stage, f"{stage} lr {rate:g}"

    def log(self, stage: str, step: int, total_steps: int, metrics: dict[str, float]) -> None:
        pass

    def line(self, text: str) -> None:
        self.reporter.line(f"{self.prefix}: {text.removeprefix(self.stage + ': ')}")

    def checkpoint(self, result: Any) -> None:
        pass


def select_learning_rate(config: Any, context: Any, runner: Callable[[Any, Any], Any],
                         scorer: ValidationScorer) -> tuple[Any, dict[str, Any]]:
    """Train a short trial per candidate learning rate, score each on the split, and return the stage config with
    the best learning rate and the record (module docstring)."""
    trials: list[dict[str, Any]] = []
    for rate in config.learning_rate_candidates:
        directory = context.directory / "lr-trials" / f"lr-{rate:g}"
        done = directory / "trial.json"
        trial = context.processes.main_decides(lambda done=done: _read_json(done))
        if trial is None:
            trial_context = dataclasses.replace(
                context, directory=directory, reporter=TrialReporter(context.reporter, context.stage, rate),
                selection=None, notes={})
            trial_config = dataclasses.replace(config, learning_rate=rate, max_steps=config.learning_rate_trial_steps,
                                               learning_rate_candidates=())
            context.reporter.line(f"{context.stage}: trying learning rate {rate:g} for "
                                  f"{config.learning_rate_trial_steps} step(s)")
            runner(trial_config, trial_context)
            input_dir = context.input_model_dir()
            trial = context.processes.main_decides(
                lambda rate=rate, trial_context=trial_context, done=done, input_dir=input_dir: _score_trial(
                    rate, trial_context, done, scorer, input_dir=input_dir))
        trials.append(trial)
    best = max(range(len(trials)), key=lambda i: (trials[i]["score"]["score"], -i))
    chosen = trials[best]["learning_rate"]
    shown = ", ".join(f"{t['learning_rate']:g}: {t['score']['score']:.3f}" for t in trials)
    context.reporter.line(f"{context.stage}: validation picked learning rate {chosen:g} ({shown})")
    record = {"rule": BEST_SCORE, "trial_steps": config.learning_rate_trial_steps, "chosen": chosen,
              "candidates": trials}
    return dataclasses.replace(config, learning_rate=chosen), record


def _score_trial(rate: float, context: Any, done: Path, scorer: ValidationScorer, *, input_dir: str
                 ) -> dict[str, Any]:
    score = scorer(context.model_dir, input_dir=input_dir)
    trial = {"learning_rate": rate, "score": score.to_dict()}
    _write_json(done, trial)
    for leftover in (context.trainer_dir, context.model_dir, context.adapter_dir):  # its score is what it was for
        shutil.rmtree(leftover, ignore_errors=True)
    return trial
