"""CEL's parser is built by the first process of an installation and loaded by the others (each process in
its own interpreter here: the parser is cel-python's one per process)."""

import json
import subprocess
import sys
from pathlib import Path

from django.conf import settings

from harness.spec import cel_parser

ROOT = Path(__file__).resolve().parents[2]

# Parses and runs conditions as the hook engine does; with BUILD_FORBIDDEN, building a parser fails.
PROCESS = """
import json, sys
from pathlib import Path
import celpy, lark
from harness.spec import cel_parser
from harness.spec.validate import cel_environment, cel_syntax_error
cel_parser.DIRECTORY = Path(sys.argv[1])
if sys.argv[2] == "BUILD_FORBIDDEN":
    def build(*args, **kwargs):
        raise AssertionError("the parser was built, not loaded")
    lark.Lark.__init__ = build
if sys.argv[2] == "SAVE_FAILS":  # e.g. a tree class pickle cannot name
    def save(*args, **kwargs):
        raise AttributeError("cannot pickle it")
    lark.Lark.save = save
env = cel_environment()
results = []
for expr, context in [("event.kind == 'message' && true", {"event": {"kind": "message"}}),
                      ("size(vars.items) >= 2 ? false : !(1 > 2)", {"vars": {"items": [1]}})]:
    program = env.program(env.compile(expr))
    results.append(str(program.evaluate({k: celpy.json_to_cel(v) for k, v in context.items()})))
results.append(cel_syntax_error("event.kind ==\\n  && true"))
print(json.dumps(results))
"""
EXPECTED = ["True", "True", "CEL syntax error at line 2, column 3"]


def run_process(directory: Path, mode: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PROCESS, str(directory), mode], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)


def test_the_first_process_saves_the_parser_and_the_next_ones_load_it(tmp_path):
    first = run_process(tmp_path, "BUILD")
    assert first.returncode == 0, first.stderr
    saved = list(tmp_path.iterdir())
    assert [path.suffix for path in saved] == [".pickle"]  # and no partial file left beside it

    later = run_process(tmp_path, "BUILD_FORBIDDEN")
    assert later.returncode == 0, later.stderr
    assert json.loads(later.stdout) == json.loads(first.stdout) == EXPECTED
    assert list(tmp_path.iterdir()) == saved


def test_a_damaged_saved_parser_is_built_again_and_replaced(tmp_path):
    assert run_process(tmp_path, "BUILD").returncode == 0
    (saved,) = tmp_path.iterdir()
    saved.write_bytes(b"not a parser")

    rebuilt = run_process(tmp_path, "BUILD")
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert json.loads(rebuilt.stdout) == EXPECTED
    assert "could not be loaded" in rebuilt.stderr

    loaded = run_process(tmp_path, "BUILD_FORBIDDEN")
    assert loaded.returncode == 0, loaded.stderr
    assert json.loads(loaded.stdout) == EXPECTED


def test_an_unwritable_directory_only_costs_each_process_its_own_build(tmp_path):
    blocked = tmp_path / "a-file-not-a-directory"
    blocked.write_text("")
    done = run_process(blocked, "BUILD")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == EXPECTED
    assert "could not be saved" in done.stderr


def test_a_saved_parser_that_others_could_have_written_is_not_loaded(tmp_path):
    assert run_process(tmp_path, "BUILD").returncode == 0
    (saved,) = tmp_path.iterdir()
    assert saved.stat().st_mode & 0o777 == 0o600
    saved.chmod(0o666)

    distrusted = run_process(tmp_path, "BUILD_FORBIDDEN")
    assert distrusted.returncode != 0 and "may be changed by other users" in distrusted.stderr
    rebuilt = run_process(tmp_path, "BUILD")
    assert rebuilt.returncode == 0 and json.loads(rebuilt.stdout) == EXPECTED
    assert saved.stat().st_mode & 0o777 == 0o600  # replaced by a private one
    assert run_process(tmp_path, "BUILD_FORBIDDEN").returncode == 0


def test_a_parser_that_cannot_be_saved_leaves_nothing_behind(tmp_path):
    done = run_process(tmp_path, "SAVE_FAILS")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == EXPECTED
    assert "could not be saved" in done.stderr and "AttributeError" in done.stderr
    assert list(tmp_path.iterdir()) == []  # no partial file


def test_the_installation_keeps_its_parser_beside_its_other_state():
    assert cel_parser.DIRECTORY == settings.VAR_DIR / "cache"
