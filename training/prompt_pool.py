"""General OPD's prompt pool: general instructions built from templates, task × topic × constraints.

General OPD pulls the student back towards the base model on prompts that have nothing to do with the
live room, so those prompts should be many and varied: a few dozen let the student fit them instead of
keeping its general behaviour. `build_pool(size, seed)` composes instruction-following prompts in the
style of such data (Tulu 3's, IFEval's kinds of constraint) from parts written here:

- a task (`TASKS`: essays, explanations, letters, stories, verse, lists, questions, taglines, …),
- a general-knowledge topic (`TOPICS`, each with three words of its own for keyword constraints),
- zero to three constraints (`CONSTRAINTS`): length (words, sentences, paragraphs), format (numbered or
  bulleted lists, JSON, a title, highlights, sections, placeholders, a table), keywords (required,
  repeated, forbidden; a letter's frequency), casing, punctuation, the response language, a required
  start or end, quoting, two versions, restating the request. Each constraint says which task kinds
  it suits and which other constraints it cannot stand beside (JSON and a P.S., French and an English
  keyword), so a prompt never asks for the impossible.

The constraints are phrased in this module's own words, not IFEval's: the eval measures whether the
instruction is followed, and training on its exact sentences would teach the sentences. The pool is
deterministic from its seed (`random.Random`, stable across Python versions for these calls) and, as
it is built, every candidate that is an IFEval prompt the project evaluates on or a near-duplicate of
one (`training.lineage.PromptGuard`: normalised text equal, or character-shingle Jaccard ≥ 0.8) is
skipped, as is a repeat of a prompt already drawn.

Generated when a job prepares its data rather than committed as a file: the recipe is this readable
module, the pool it makes is a function of (code, seed) that a test pins, and a 2,400-line data file
would be a diff no reviewer reads. `default_prompts()` is the pool a job uses when `opd.prompts` names
no file; `load_prompts(path)` reads such a file (`{"prompt": text}` per line) or returns the pool.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from training.lineage import PromptGuard, ifeval_prompts

POOL_SEED = 0
POOL_SIZE = 2400
# The share of prompts with 0, 1, 2 and 3 constraints.
CONSTRAINT_COUNTS = ((0, 0.15), (1, 0.45), (2, 0.32), (3, 0.08))


@dataclass(frozen=True)
class Task:
    text: str   # with {topic}
    kind: str   # prose | verse | list | short: which constraints suit it


TASKS = (
    Task("Write a short essay about {topic}.", "prose"),
    Task("Explain the basics of {topic} to a ten-year-old.", "prose"),
    Task("Write a blog post introducing {topic} to complete beginners.", "prose"),
    Task("Summarise the most important facts about {topic}.", "prose"),
    Task("Describe a common misconception about {topic} and correct it.", "prose"),
    Task("Write a short story in which {topic} plays a central role.", "prose"),
    Task("Write a letter to a friend explaining why you find {topic} fascinating.", "prose"),
    Task("Draft an email to a librarian asking for reading suggestions on {topic}.", "prose"),
    Task("Write a dialogue between a curious student and a patient teacher about {topic}.", "prose"),
    Task("Write a news-style report about a new discovery related to {topic}.", "prose"),
    Task("Write a persuasive paragraph arguing that everyone should learn a little about {topic}.", "prose"),
    Task("Compare two different ways of thinking about {topic}.", "prose"),
    Task("Write a short speech for a school assembly on {topic}.", "prose"),
    Task("Write an encyclopedia-style entry on {topic}.", "prose"),
    Task("Write a diary entry by someone who spent the whole day learning about {topic}.", "prose"),
    Task("Explain what {topic} has to do with everyday life.", "prose"),
    Task("Give a brief history of {topic}.", "prose"),
    Task("Write a review of an imaginary book about {topic}.", "prose"),
    Task("Write a bedtime story that gently teaches a child about {topic}.", "prose"),
    Task("Write a job advertisement for a researcher who studies {topic}.", "prose"),
    Task("Write the opening paragraph of a mystery novel that revolves around {topic}.", "prose"),
    Task("Describe {topic} to someone who knows nothing about the subject.", "prose"),
    Task("Write a poem about {topic}.", "verse"),
    Task("Write a haiku about {topic}.", "verse"),
    Task("Write a limerick about {topic}.", "verse"),
    Task("Write the chorus of a song about {topic}.", "verse"),
    Task("Write a four-line rhyme that helps children remember something about {topic}.", "verse"),
    Task("List ways a beginner could start learning about {topic}.", "list"),
    Task("List questions a curious child might ask about {topic}.", "list"),
    Task("Give practical tips for a class project on {topic}.", "list"),
    Task("Write a short quiz about {topic}, with the answers.", "list"),
    Task("Outline a 30-minute lesson on {topic}.", "list"),
    Task("List surprising facts about {topic}.", "list"),
    Task("Write a frequently-asked-questions section about {topic}.", "list"),
    Task("Why do so many people find {topic} interesting?", "short"),
    Task("Would {topic} make a good subject for a school project? Explain briefly.", "short"),
    Task("What is one thing most people get wrong about {topic}?", "short"),
    Task("Suggest a catchy title for a documentary about {topic}.", "short"),
    Task("Write a one-line slogan for a museum exhibition on {topic}.", "short"),
    Task("Write a riddle whose answer is connected to {topic}.", "short"),
    Task("Write a social media post sharing a surprising fact about {topic}.", "short"),
)

# (topic, three words of its own) — general knowledge, nothing from the live room the agent serves.
TOPICS = (
    ("the water cycle", ("evaporation", "clouds", "rain")),
    ("compound interest", ("savings", "growth", "patience")),
    ("bird migration", ("flight", "seasons", "navigation")),
    ("the rules of chess", ("pawn", "checkmate", "strategy")),
    ("volcanoes", ("lava", "eruption", "magma")),
    ("the human heart", ("blood", "rhythm", "muscle")),
    ("photosynthesis", ("sunlight", "leaves", "oxygen")),
    ("the printing press", ("books", "ink", "Gutenberg")),
    ("public libraries", ("books", "community", "quiet")),
    ("honeybees", ("hive", "pollen", "queen")),
    ("black holes", ("gravity", "light", "stars")),
    ("the Roman Empire", ("emperor", "roads", "legions")),
    ("baking bread at home", ("yeast", "flour", "oven")),
    ("recycling", ("plastic", "waste", "reuse")),
    ("solar power", ("panels", "sunlight", "electricity")),
    ("the first moon landing", ("astronauts", "rocket", "footprint")),
    ("coral reefs", ("fish", "ocean", "bleaching")),
    ("time management", ("schedule", "priorities", "focus")),
    ("learning a second language", ("vocabulary", "grammar", "practice")),
    ("sleep", ("dreams", "rest", "night")),
    ("the immune system", ("cells", "germs", "defence")),
    ("marathon running", ("training", "stamina", "pace")),
    ("growing vegetables on a balcony", ("soil", "seeds", "pots")),
    ("the history of jazz", ("trumpet", "improvisation", "rhythm")),
    ("earthquakes", ("plates", "tremor", "fault")),
    ("the Silk Road", ("trade", "caravans", "spices")),
    ("electric cars", ("battery", "charging", "motor")),
    ("climate change", ("emissions", "temperature", "ice")),
    ("the invention of the telephone", ("signal", "wires", "voice")),
    ("the Olympic Games", ("athletes", "medals", "torch")),
    ("origami", ("paper", "fold", "crane")),
    ("the periodic table", ("elements", "atoms", "Mendeleev")),
    ("supply and demand", ("price", "market", "buyers")),
    ("meditation", ("breath", "calm", "attention")),
    ("the Great Wall of China", ("bricks", "dynasty", "watchtowers")),
    ("rainforests", ("canopy", "species", "humidity")),
    ("basic first aid", ("bandage", "emergency", "calm")),
    ("how the internet works", ("network", "data", "routers")),
    ("dinosaurs", ("fossils", "extinction", "reptiles")),
    ("public speaking", ("audience", "nerves", "voice")),
    ("the solar system", ("planets", "orbit", "sun")),
    ("composting", ("worms", "soil", "scraps")),
    ("ancient Egypt", ("pyramids", "pharaoh", "Nile")),
    ("the French Revolution", ("liberty", "king", "Paris")),
    ("video game design", ("levels", "players", "story")),
    ("birdwatching", ("binoculars", "feathers", "patience")),
    ("ocean tides", ("moon", "shore", "gravity")),
    ("the history of chocolate", ("cacao", "Aztecs", "sugar")),
    ("cloud computing", ("servers", "storage", "network")),
    ("vaccines", ("immunity", "doctors", "disease")),
    ("wind power", ("turbines", "blades", "grid")),
    ("the Renaissance", ("art", "Florence", "painters")),
    ("deserts", ("sand", "cactus", "heat")),
    ("cycling to work", ("helmet", "traffic", "pedals")),
    ("learning the piano", ("keys", "melody", "scales")),
    ("mountain climbing", ("summit", "rope", "altitude")),
    ("saving money", ("budget", "habits", "goals")),
    ("the history of writing", ("alphabet", "clay", "scribes")),
    ("snowflakes", ("crystals", "ice", "winter")),
    ("friendship", ("trust", "loyalty", "kindness")),
    ("the metric system", ("metres", "grams", "measure")),
    ("whales", ("ocean", "song", "migration")),
    ("glaciers", ("ice", "valleys", "melting")),
    ("robots", ("sensors", "machines", "programming")),
    ("the history of flight", ("wings", "engines", "pilots")),
    ("mushrooms", ("fungi", "spores", "forest")),
    ("board games", ("dice", "rules", "players")),
    ("the human brain", ("neurons", "memory", "thought")),
    ("lighthouses", ("keeper", "beam", "coast")),
    ("the scientific method", ("hypothesis", "experiment", "evidence")),
    ("stargazing", ("constellations", "telescope", "darkness")),
    ("the deep ocean floor", ("trenches", "pressure", "creatures")),
    ("ancient Greece", ("Athens", "democracy", "philosophers")),
    ("volunteering", ("community", "time", "helping")),
    ("handwriting", ("pen", "letters", "practice")),
    ("rivers", ("current", "delta", "source")),
    ("weather forecasting", ("radar", "clouds", "prediction")),
    ("fractions", ("numerator", "denominator", "parts")),
    ("reading maps", ("compass", "scale", "legend")),
    ("the history of money", ("coins", "barter", "banks")),
    ("octopuses", ("tentacles", "camouflage", "ink")),
    ("bridges", ("arch", "steel", "engineers")),
    ("caring for houseplants", ("water", "light", "leaves")),
    ("museums", ("exhibits", "history", "curators")),
    ("flying kites", ("wind", "string", "tail")),
    ("the history of tea", ("leaves", "ceremony", "kettle")),
    ("minimalism", ("simplicity", "clutter", "space")),
    ("sharks", ("fins", "teeth", "ocean")),
    ("the northern lights", ("aurora", "sky", "solar")),
    ("hiking safety", ("map", "water", "trail")),
    ("penguins", ("ice", "colony", "swim")),
    ("the theatre", ("stage", "actors", "audience")),
    ("clean drinking water", ("filters", "wells", "health")),
    ("the history of the calendar", ("months", "moon", "Romans")),
    ("procrastination", ("deadlines", "habits", "focus")),
    ("the life cycle of a butterfly", ("caterpillar", "chrysalis", "wings")),
    ("telescopes", ("lenses", "mirrors", "galaxies")),
    ("the Amazon river", ("rainforest", "dolphins", "basin")),
    ("healthy breakfasts", ("oats", "fruit", "energy")),
    ("the Industrial Revolution", ("factories", "steam", "cities")),
)


@dataclass(frozen=True)
class Constraint:
    name: str
    group: str                 # at most one constraint of a group per prompt
    text: str                  # with {n}, {k1}, {k2}, {c}, {word}, {phrase}, {language}, {a}, {b}, {header}
    kinds: frozenset[str]      # the task kinds it suits
    clashes: frozenset[str] = frozenset()  # groups it cannot stand beside
    numbers: tuple[int, ...] = ()

    def render(self, rng: random.Random, keywords: Sequence[str]) -> str:
        k1, k2 = rng.sample(list(keywords), 2)
        a, b = rng.choice(JSON_KEYS)
        return self.text.format(
            n=rng.choice(self.numbers) if self.numbers else 0, k1=k1, k2=k2, c=rng.choice("bcdfgmpstw"),
            word=rng.choice(START_WORDS), phrase=rng.choice(END_PHRASES), language=rng.choice(LANGUAGES),
            a=a, b=b, header=rng.choice(SECTION_HEADERS), title=rng.choice(TITLE_EXAMPLES),
            placeholder=rng.choice(PLACEHOLDERS))


START_WORDS = ("Imagine", "Today", "Honestly", "Surprisingly", "Remember", "First")
END_PHRASES = ("That is all for now.", "Thanks for reading!", "Stay curious.", "Let me know what you think.",
               "Happy learning!")
LANGUAGES = ("French", "Spanish", "German", "Italian", "Portuguese", "Dutch")
JSON_KEYS = (("title", "summary"), ("question", "answer"), ("topic", "points"), ("headline", "details"))
SECTION_HEADERS = ("Part", "Step", "Chapter", "Section")
TITLE_EXAMPLES = ("A Fresh Look", "Small Wonders", "The Big Picture", "Notes From Afar")
PLACEHOLDERS = ("name", "date", "city", "school")

ALL = frozenset({"prose", "verse", "list", "short"})
PROSE = frozenset({"prose"})
PROSE_LIST = frozenset({"prose", "list"})
NOT_VERSE = frozenset({"prose", "list", "short"})
# Constraints that fix the first or last words, or the whole answer's shape, clash with each other.
SHAPE = frozenset({"start", "ending", "wrapper", "json", "repeat"})

CONSTRAINTS = (
    # length
    Constraint("under_words", "length", "Keep the whole answer under {n} words.", NOT_VERSE,
               numbers=(40, 60, 80, 100, 150)),
    Constraint("at_least_words", "length", "Make the answer at least {n} words long.", PROSE,
               numbers=(120, 150, 200, 250, 300)),
    Constraint("exact_sentences", "length", "Use exactly {n} sentences.", frozenset({"prose", "short"}),
               numbers=(2, 3, 4, 5, 6)),
    Constraint("max_sentences", "length", "Write no more than {n} sentences in total.",
               frozenset({"prose", "short"}), numbers=(2, 3, 4, 5)),
    Constraint("paragraphs", "length", "Organise the answer into {n} paragraphs with a blank line between them.",
               PROSE, clashes=frozenset({"json", "format"}), numbers=(2, 3, 4)),
    Constraint("paragraph_divider", "length", "Write {n} paragraphs and put a line of three asterisks (***) "
               "between consecutive paragraphs.", PROSE, clashes=frozenset({"json", "format"}), numbers=(2, 3)),
    Constraint("verse_lines", "length", "Keep it to at most {n} lines.", frozenset({"verse"}), numbers=(4, 6, 8)),
    # format
    Constraint("numbered", "format", "Present it as a numbered list of exactly {n} items.", PROSE_LIST,
               numbers=(3, 4, 5, 6, 7)),
    Constraint("bullets", "format", "Give exactly {n} Markdown bullet points (lines starting with '* ') and no "
               "other text.", PROSE_LIST, clashes=frozenset({"start", "ending", "wrapper", "repeat"}),
               numbers=(3, 4, 5)),
    Constraint("json", "format", "Reply with a JSON object only, with the keys \"{a}\" and \"{b}\".",
               frozenset({"prose", "list", "short"}), clashes=SHAPE | {"length", "case", "language"}),
    Constraint("title", "title", "Put a title on the first line inside double angle brackets, for example "
               "<<{title}>>.", ALL, clashes=frozenset({"start", "json", "repeat", "wrapper"})),
    Constraint("highlights", "format", "Emphasise at least {n} key phrases with single asterisks, like "
               "*this phrase*.", NOT_VERSE, clashes=frozenset({"json"}), numbers=(2, 3, 4)),
    Constraint("sections", "format", "Split it into {n} sections, each introduced by a line such as "
               "'{header} 1', '{header} 2' and so on.", PROSE_LIST, clashes=frozenset({"json", "length"}),
               numbers=(2, 3, 4)),
    Constraint("placeholders", "format", "Leave at least {n} blanks for the reader to fill in, written in "
               "square brackets like [{placeholder}].", PROSE, clashes=frozenset({"json"}), numbers=(2, 3, 4)),
    Constraint("table", "format", "Lay the answer out as a Markdown table with {n} rows.", frozenset({"list"}),
               clashes=frozenset({"json", "wrapper"}), numbers=(3, 4, 5)),
    # keywords and letters
    Constraint("include", "keywords", "Mention the words \"{k1}\" and \"{k2}\" somewhere in the answer.", ALL,
               clashes=frozenset({"language"})),
    Constraint("repeat_word", "keywords", "Use the word \"{k1}\" at least {n} times.", NOT_VERSE,
               clashes=frozenset({"language"}), numbers=(2, 3, 4)),
    Constraint("forbid", "forbidden", "Do not use the words \"{k1}\" or \"{k2}\" anywhere.", ALL,
               clashes=frozenset({"keywords"})),
    Constraint("letter", "letter", "Make sure the letter '{c}' appears at least {n} times.", NOT_VERSE,
               clashes=frozenset({"language"}), numbers=(5, 8, 10, 12)),
    Constraint("few_letter", "letter", "Use the letter '{c}' fewer than {n} times.", ALL,
               clashes=frozenset({"language", "repeat"}), numbers=(3, 5, 8)),
    # casing and punctuation
    Constraint("lowercase", "case", "Write every word in lowercase; no capital letters at all.", ALL,
               clashes=frozenset({"json", "caps_words"})),
    Constraint("uppercase", "case", "Write the entire answer in capital letters.", ALL,
               clashes=frozenset({"json", "caps_words"})),
    Constraint("caps_words", "caps_words", "Include at least {n} words written fully in capitals for emphasis.",
               NOT_VERSE, clashes=frozenset({"case", "json"}), numbers=(2, 3, 4)),
    Constraint("no_commas", "punctuation", "Do not use a single comma.", ALL),
    Constraint("no_exclamations", "punctuation", "Avoid exclamation marks entirely.", ALL,
               clashes=frozenset({"ending"})),
    # language
    Constraint("language", "language", "Answer only in {language}.", ALL,
               clashes=frozenset({"keywords", "letter", "start", "ending", "json", "repeat"})),
    # start and end
    Constraint("start_word", "start", "Begin your answer with the word \"{word}\".", ALL,
               clashes=SHAPE - {"start"} | {"title", "language"}),
    Constraint("end_phrase", "ending", "End with the exact sentence \"{phrase}\" and write nothing after it.", ALL,
               clashes=SHAPE - {"ending"} | {"language", "punctuation"}),
    Constraint("postscript", "ending", "Close with a postscript on its own line that begins with \"P.S.\".",
               NOT_VERSE, clashes=SHAPE - {"ending"}),
    # the whole answer's shape
    Constraint("quoted", "wrapper", "Put the whole answer inside double quotation marks.", ALL,
               clashes=SHAPE - {"wrapper"} | {"title", "format"}),
    Constraint("two_versions", "wrapper", "Give two different versions, separated by a line of six asterisks "
               "(******).", frozenset({"verse", "short"}), clashes=SHAPE - {"wrapper"} | {"title"}),
    Constraint("restate", "repeat", "Start by copying this request exactly as written, then give your answer.",
               NOT_VERSE, clashes=SHAPE - {"repeat"} | {"language", "case", "title", "format"}),
)


def _constraint_count(rng: random.Random) -> int:
    draw, total = rng.random(), 0.0
    for count, share in CONSTRAINT_COUNTS:
        total += share
        if draw < total:
            return count
    return CONSTRAINT_COUNTS[-1][0]


def compose(rng: random.Random) -> str:
    """One prompt: a task on a topic with compatible constraints (see the module docstring)."""
    task = rng.choice(TASKS)
    topic, keywords = rng.choice(TOPICS)
    chosen: list[Constraint] = []
    for _ in range(_constraint_count(rng)):
        groups = {c.group for c in chosen}
        blocked = groups | {g for c in chosen for g in c.clashes}
        fitting = [c for c in CONSTRAINTS if task.kind in c.kinds and c.group not in blocked
                   and not (c.clashes & groups)]
        if not fitting:
            break
        chosen.append(rng.choice(fitting))
    # Keyword constraints use the topic's own words (required and forbidden words never meet: they clash).
    return " ".join([task.text.format(topic=topic), *(constraint.render(rng, keywords) for constraint in chosen)])


def build_pool(size: int = POOL_SIZE, seed: int = POOL_SEED) -> list[str]:
    """`size` distinct prompts, deterministic from `seed`; none an IFEval prompt or a near-duplicate of one."""
    guard = PromptGuard(ifeval_prompts())
    rng = random.Random(seed)
    pool: list[str] = []
    seen: set[str] = set()
    for _ in range(size * 50):
        if len(pool) == size:
            return pool
        prompt = compose(rng)
        key = guard.normalise(prompt)
        if key in seen or guard.closest(prompt) is not None:
            continue
        seen.add(key)
        pool.append(prompt)
    raise ValueError(f"the templates make fewer than {size} distinct prompts (got {len(pool)})")


@lru_cache(maxsize=1)
def _default_pool() -> tuple[str, ...]:
    return tuple(build_pool())


def default_prompts() -> list[str]:
    """The pool General OPD uses when `opd.prompts` names no file (`POOL_SIZE` prompts, seed `POOL_SEED`)."""
    return list(_default_pool())


def read_prompts(path: str | Path) -> list[str]:
    """The prompts of a `{"prompt": text}` JSONL file; a bad line names its number."""
    source = Path(path)
    prompts = []
    for number, line in enumerate(source.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            row = None
        text = row.get("prompt") if isinstance(row, dict) else None
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"{source}:{number}: expected {{\"prompt\": text}}")
        prompts.append(text)
    return prompts


def load_prompts(path: str = "") -> list[str]:
    """`opd.prompts`: the file's prompts, or the generated pool when `path` is empty."""
    return read_prompts(path) if path else default_prompts()


def source_record(path: str, prompts: Sequence[str]) -> dict[str, Any]:
    """What a stage's lineage says about its prompts: the file, or the pool's recipe, and a digest of the text."""
    digest = hashlib.sha256("\n".join(prompts).encode()).hexdigest()
    if path:
        return {"kind": "prompts", "path": path, "prompts": len(prompts), "sha256": digest}
    return {"kind": "prompt_pool", "module": "training.prompt_pool", "seed": POOL_SEED, "prompts": len(prompts),
            "sha256": digest}
