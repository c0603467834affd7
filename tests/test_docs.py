"""The commands in README.md and docs/ work as written.

Every `manage.py` line in a fenced shell block names a real command and its arguments parse; the safe ones
(first-run workspace set-up, printing the vLLM command) run against the test database; the scripted
experiment recipe's script makes both arms of an experiment reply.
"""

import asyncio
import json
import re
import shlex
from pathlib import Path

import pytest
from django.core.management import call_command, get_commands, load_command_class

from harness.runtime import RoomContext, TurnInput, react_baseline_spec, run_turn
from harness.spec import parse_files, read_dir
from serving.backends.scripted import ScriptedBackend, steps_from_json
from serving.vllm.profile import PROFILES

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MANAGE = re.compile(r"(?:^|\s)(?:\S*python3?\s+)?manage\.py\s+(.*)$")
RUNS_HERE = {"workspace_create", "member_add", "serve_model"}  # side effects only in the test database


def shell_commands(path: Path) -> list[str]:
    """Command lines of the fenced bash/sh blocks, continuation lines joined, comments dropped."""
    commands = []
    for block in re.findall(r"```(?:bash|sh|shell)\n(.*?)```", path.read_text(), re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words:
                commands.append(shlex.join(words))
    return commands


def manage_commands() -> list[tuple[str, list[str]]]:
    found = []
    for path in DOCS:
        for command in shell_commands(path):
            match = MANAGE.search(command)
            if match:
                words = shlex.split(match.group(1))
                found.append((f"{path.name}: {command}", words))
    return found


def test_docs_have_recipes():
    names = {words[0] for _, words in manage_commands()}
    assert {"simulate_traffic", "createsuperuser", "workspace_create", "serve_model"} <= names


@pytest.mark.parametrize(("where", "words"), manage_commands(), ids=lambda v: v if isinstance(v, str) else None)
def test_every_documented_command_exists_and_parses(where, words):
    name, *args = words
    commands = get_commands()
    assert name in commands, f"{where}: no manage.py command {name!r}"
    parser = load_command_class(commands[name], name).create_parser("manage.py", name)
    parser.parse_args(args)  # exits (SystemExit) on an unknown flag or a missing argument


@pytest.mark.django_db
def test_safe_recipes_run_as_written(capsys):
    from django.contrib.auth import get_user_model

    from workspaces.models import Membership

    ran = set()
    for where, (name, *args) in manage_commands():
        if name == "createsuperuser":  # interactive: make the user the next lines name
            get_user_model().objects.create_superuser(username="YOUR_USERNAME", password="x" * 12, email="")
        if name not in RUNS_HERE:
            continue
        call_command(name, *args)
        ran.add(name)
        out = capsys.readouterr().out
        if name == "serve_model":
            assert shlex.split(out.strip()) == PROFILES["qwen3-8b"].to_argv(), where
    assert {"workspace_create", "serve_model"} <= ran
    assert Membership.objects.get(workspace__slug="shop", user__username="YOUR_USERNAME").role == "admin"


def recipe_steps() -> list:
    match = re.search(r"HARNESSOPS_SCRIPTED_STEPS=('[^']*'|\S+)", (ROOT / "README.md").read_text())
    assert match, "README's scripted recipe is gone"
    return json.loads(shlex.split(match.group(1))[0])  # as the shell hands it to the process


@pytest.mark.parametrize("arm", ["harness", "react-control"])
def test_scripted_recipe_replies_in_both_arms(arm):
    """The script of README's experiment recipe, replayed per turn as the scripted backend does, answers
    viewers in the demo harness and in its ReAct control (not the fallback or an error)."""
    spec = parse_files(read_dir(ROOT / "harness" / "demo" / "avatar"))
    if arm == "react-control":
        spec = react_baseline_spec(spec)
    room = RoomContext.from_dict(json.loads((ROOT / "harness" / "demo" / "room.json").read_text()))
    for message in ("love this stream!", "how much is this one?"):
        turn = TurnInput(message=message, viewer_id="v1", room=room)
        result = asyncio.run(run_turn(spec, turn, ScriptedBackend(steps_from_json(recipe_steps()))))
        assert result.outcome == "replied" and result.reply == "Happy to help!", result.trace["steps"][-3:]
