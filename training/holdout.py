"""The validation split: cases and prompts held out to choose checkpoints and learning rates.

A job is reported on its eval sets (`data.exclude`), and those must be touched once, at the end: a
checkpoint or a learning rate picked by its eval score would make that score optimistic. So the choices
a job makes while it trains are made on a split of its own, `data.validation`:

- **cases**: simulator cases seeded apart from every training draw (`"<simulator_seed>/validation/<seed>"`),
  skipping any whose content equals a case the job trains on (SFT's simulator and imported cases, RL's)
  or a case of an excluded eval set. The lineage guard then checks it as it checks eval cases: the split
  against the eval sets, and every stage's prepared data against the split (`VALIDATION_LABEL`).
- **prompts**: IFEval-style prompts drawn (seeded) from the generated pool (`prompt_pool.default_prompts()`),
  among those whose every constraint IFEval's official checkers can grade (`ifeval_record`): the pool's
  constraints are worded in its own sentences, so each is recognised here and given the instruction id
  and arguments of the IFEval checker that tests it. General OPD distils on the pool less these prompts
  (`data_prep`), and the guard checks that too.

Pure: no torch, no Django. `draw_validation(config)` is called by the worker (through the pipeline,
which stores the split in `data/validation.json`) and by the console before a job is queued.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from harness.simulator.cases import Case
from training import prompt_pool
from training.case_hashing import case_content_hash, case_hashes
from training.lineage import check_disjoint, digest, planned_case_hashes
from training.trajectories import simulator_cases
from training.validation import ConfigError

VALIDATION_LABEL = "validation"  # how the split is named among the exclusions a stage's data is checked against
# The pool's languages that lm-eval's language checker knows (it has no Dutch: those prompts are not drawn).
LANGUAGE_CODES = {"French": "fr", "Spanish": "es", "German": "de", "Italian": "it", "Portuguese": "pt"}

# Pool constraint name → (IFEval instruction id, its arguments from the constraint's filled-in fields).
# The pool's other constraints (`UNCHECKED`) have no official checker that tests what they ask; a prompt
# holding one is not drawn for validation.
UNCHECKED = ("exact_sentences", "paragraphs", "verse_lines", "numbered", "table", "no_exclamations", "start_word",
             "restate")
Instruction = Callable[[Mapping[str, str]], tuple[str, dict[str, Any]]]
IFEVAL_INSTRUCTIONS: dict[str, Instruction] = {
    "under_words": lambda f: ("length_constraints:number_words", {"relation": "less than", "num_words": int(f["n"])}),
    "at_least_words": lambda f: ("length_constraints:number_words", {"relation": "at least",
                                                                     "num_words": int(f["n"])}),
    "max_sentences": lambda f: ("length_constraints:number_sentences", {"relation": "less than",
                                                                        "num_sentences": int(f["n"]) + 1}),
    "paragraph_divider": lambda f: ("length_constraints:number_paragraphs", {"num_paragraphs": int(f["n"])}),
    "bullets": lambda f: ("detectable_format:number_bullet_lists", {"num_bullets": int(f["n"])}),
    "json": lambda f: ("detectable_format:json_format", {}),
    "title": lambda f: ("detectable_format:title", {}),
    "highlights": lambda f: ("detectable_format:number_highlighted_sections", {"num_highlights": int(f["n"])}),
    "sections": lambda f: ("detectable_format:multiple_sections", {"section_spliter": f["header"],
                                                                   "num_sections": int(f["n"])}),
    "placeholders": lambda f: ("detectable_content:number_placeholders", {"num_placeholders": int(f["n"])}),
    "include": lambda f: ("keywords:existence", {"keywords": [f["k1"], f["k2"]]}),
    "repeat_word": lambda f: ("keywords:frequency", {"keyword": f["k1"], "relation": "at least",
                                                     "frequency": int(f["n"])}),
    "forbid": lambda f: ("keywords:forbidden_words", {"forbidden_words": [f["k1"], f["k2"]]}),
    "letter": lambda f: ("keywords:letter_frequency", {"letter": f["c"], "let_relation": "at least",
                                                       "let_frequency": int(f["n"])}),
    "few_letter": lambda f: ("keywords:letter_frequency", {"letter": f["c"], "let_relation": "less than",
                                                           "let_frequency": int(f["n"])}),
    "lowercase": lambda f: ("change_case:english_lowercase", {}),
    "uppercase": lambda f: ("change_case:english_capital", {}),
    "caps_words": lambda f: ("change_case:capital_word_frequency", {"capital_relation": "at least",
                                                                    "capital_frequency": int(f["n"])}),
    "no_commas": lambda f: ("punctuation:no_comma", {}),
    "language": lambda f: ("language:response_language", {"language": LANGUAGE_CODES[f["language"]]}),
    "end_phrase": lambda f: ("startend:end_checker", {"end_phrase": f["phrase"]}),
    "postscript": lambda f: ("detectable_content:postscript", {"postscript_marker": "P.S."}),
    "quoted": lambda f: ("startend:quotation", {}),
    "two_versions": lambda f: ("combination:two_responses", {}),
}
# What each field of a constraint's text can hold (prompt_pool.Constraint.render).
_FIELDS = {"n": r"\d+", "k1": r"[^\"]+", "k2": r"[^\"]+", "c": r"[a-z]", "word": r"\w+", "phrase": r"[^\"]+",
           "language": r"[A-Z][a-z]+", "a": r"[^\"]+", "b": r"[^\"]+", "header": r"\w+", "title": r"[^>]+",
           "placeholder": r"\w+", "topic": "|".join(re.escape(topic) for topic, _ in prompt_pool.TOPICS)}


def _pattern(text: str) -> re.Pattern[str]:
    """A template of the pool (`{n}`, `{k1}`, …) as a regex that captures its fields (a repeat refers back)."""
    seen: set[str] = set()

    def field(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in seen:
            return f"(?P={name})"
        seen.add(name)
        return f"(?P<{name}>(?:{_FIELDS[name]}))"

    return re.compile(re.sub(r"\\\{(\w+)\\\}", field, re.escape(text)))


_CONSTRAINTS = [(c.name, _pattern(c.text)) for c in prompt_pool.CONSTRAINTS]
_TASKS = [_pattern(t.text) for t in prompt_pool.TASKS]


def ifeval_record(prompt: str, key: str) -> dict[str, Any] | None:
    """The prompt as an IFEval record (`key`, `prompt`, `instruction_id_list`, `kwargs`), or None unless it is a
    pool task followed by at least one constraint and every one of its constraints has an official checker."""
    found, spans = [], []
    for name, pattern in _CONSTRAINTS:
        match = pattern.search(prompt)
        if match and not any(match.start() < end and start < match.end() for start, end in spans):
            found.append((match.start(), name, match.groupdict()))
            spans.append(match.span())
    rest = prompt
    for start, end in sorted(spans, reverse=True):
        rest = rest[:start] + rest[end:]
    if not found or not any(task.fullmatch(rest.strip()) for task in _TASKS):
        return None  # no constraint, or text that is neither the task nor a constraint recognised here
    try:
        instructions = [IFEVAL_INSTRUCTIONS[name](fields) for _, name, fields in sorted(found, key=lambda f: f[0])]
    except KeyError:  # a constraint without a checker, or a language the checker does not know
        return None
    return {"key": key, "prompt": prompt, "instruction_id_list": [i for i, _ in instructions],
            "kwargs": [kwargs for _, kwargs in instructions]}


@dataclass(frozen=True)
class ValidationSplit:
    """The held-out cases and prompts (IFEval records) of a job (module docstring)."""

    cases: tuple[Case, ...]
    prompts: tuple[dict[str, Any], ...]
    seed: int
    case_seed: str

    @property
    def case_hashes(self) -> dict[str, str]:
        return case_hashes(self.cases)

    @property
    def prompt_hashes(self) -> dict[str, str]:
        return {str(record["key"]): case_content_hash({"prompt": record["prompt"]}) for record in self.prompts}

    def hashes(self) -> dict[str, str]:
        """Every held-out item (case id or prompt key) → content hash: what training data is checked against."""
        return {**self.case_hashes, **self.prompt_hashes}

    def record(self, exclusions: Mapping[str, Any]) -> dict[str, Any]:
        """What each stage result stores about the split (JSON-ready)."""
        counts: dict[str, int] = {}
        for prompt in self.prompts:
            for instruction in prompt["instruction_id_list"]:
                counts[instruction] = counts.get(instruction, 0) + 1
        return {"seed": self.seed,
                "cases": len(self.cases), "case_source": {"kind": "simulator", "seed": self.case_seed},
                "cases_digest": digest(self.case_hashes.values()),
                "prompts": len(self.prompts), "prompt_source": {"kind": "prompt_pool", "module": "training.prompt_pool",
                                                                "seed": prompt_pool.POOL_SEED},
                "prompts_digest": digest(self.prompt_hashes.values()), "prompt_instructions": counts,
                "disjoint_from": ["training data", *sorted(exclusions)]}

    def to_dict(self) -> dict[str, Any]:
        return {"cases": [case.to_dict() for case in self.cases], "prompts": list(self.prompts), "seed": self.seed,
                "case_seed": self.case_seed}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ValidationSplit:
        return cls(cases=tuple(Case.from_dict(c) for c in data["cases"]), prompts=tuple(data["prompts"]),
                   seed=int(data["seed"]), case_seed=str(data["case_seed"]))


def draw_validation(config: Any) -> ValidationSplit | None:
    """The split `config.data.validation` asks for (None when it asks for none), disjoint from the job's
    training data and its eval sets; `LineageError` if, drawn, it still overlaps one (it cannot, by
    construction: the check is the guard's, as for eval cases), `ConfigError` when the sources run short."""
    wanted = config.data.validation
    if not wanted.enabled:
        return None
    # OPD's prompts are left out here: it distils on the pool less the held-out prompts (data_prep), and its
    # prepared prompts are checked against the split when the stage prepares them.
    training = {key: h for key, h in planned_case_hashes(config).items() if not key.startswith("opd:")}
    evaluated = {h for hashes in config.data.exclude.values() for h in hashes}
    taken = set(training.values()) | evaluated
    case_seed = f"{config.data.simulator_seed}/validation/{wanted.seed}"
    cases: list[Case] = []
    if wanted.cases:
        candidates = simulator_cases(case_seed, 2 * wanted.cases + 8, n_rooms=config.data.simulator_rooms)
        cases = [c for c in candidates if case_content_hash(c.to_dict()) not in taken][:wanted.cases]
        if len(cases) < wanted.cases:
            raise ConfigError("data.validation.cases", f"only {len(cases)} simulator cases apart from the training "
                                                       f"data and the eval sets; ask for fewer")
    prompts: list[dict[str, Any]] = []
    if wanted.prompts:
        pool = prompt_pool.default_prompts()
        order = list(range(len(pool)))
        random.Random(f"validation:{wanted.seed}").shuffle(order)
        for index in order:
            if len(prompts) == wanted.prompts:
                break
            if case_content_hash({"prompt": pool[index]}) in evaluated:
                continue
            record = ifeval_record(pool[index], key=f"validation-prompt-{index:05d}")
            if record is not None:
                prompts.append(record)
        if len(prompts) < wanted.prompts:
            raise ConfigError("data.validation.prompts", f"the pool has only {len(prompts)} prompts IFEval's "
                                                         f"checkers can grade; ask for fewer")
    split = ValidationSplit(cases=tuple(cases), prompts=tuple(prompts), seed=wanted.seed, case_seed=case_seed)
    check_disjoint(split.hashes(), config.data.exclude)
    check_disjoint(training, {VALIDATION_LABEL: split.hashes().values()})
    return split
