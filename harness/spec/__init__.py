"""The harness spec: the pure, immutable core every other layer passes around.

A harness is a directory of plain files (docs/harness-format.md); this
package parses it into a `HarnessSpec`, validates it, writes it back in
canonical form, hashes, diffs and renders it. It imports no Django.
"""

from harness.spec.canonical import FORMAT, spec_to_dict, to_files
from harness.spec.diff import ModuleChange, SpecDiff, diff_specs
from harness.spec.errors import SpecError, SpecInvalid
from harness.spec.files import content_hash, parse_files, read_dir, write_dir
from harness.spec.model import (
    Condition,
    HarnessSpec,
    Hook,
    PromptBlock,
    Settings,
    Skill,
    Tool,
    ToolBinding,
)
from harness.spec.prompt import openai_tools, render_system_prompt, skills_catalogue, tools_catalogue
from harness.spec.validate import validate

__all__ = [
    "FORMAT", "Condition", "HarnessSpec", "Hook", "ModuleChange", "PromptBlock", "Settings", "Skill",
    "SpecDiff", "SpecError", "SpecInvalid", "Tool", "ToolBinding", "content_hash", "diff_specs",
    "openai_tools", "parse_files", "read_dir", "render_system_prompt", "skills_catalogue", "spec_to_dict",
    "to_files", "tools_catalogue", "validate", "write_dir",
]
