"""The training chat template: SmolLM2's ChatML with Hermes tool calls and `{% generation %}` markers.

SmolLM2's own template has no tools and no generation markers, and TRL does not patch it (it knows
Qwen, Llama 3, Phi-3, Gemma 3 …), so `assistant_only_loss` needs a template from us. This one renders
a conversation exactly as `serving.backends.hermes.render_chatml` does for the local backend (tool
signatures in the system turn, `<tool_call>` blocks, consecutive tool results as one user turn of
`<tool_response>` blocks), so the model is trained on the very text it is served with; a test checks
the two agree. Each assistant turn's text and its closing `<|im_end|>` sit inside
`{% generation %}…{% endgeneration %}`: those tokens, and only those, carry labels (the model learns
to stop; the `<|im_start|>assistant` header, the system prompt, the viewer, tool results and hook
feedback are context). An assistant message with `"weight": 0` (a rejected reply kept in a full-retry
trajectory, `trajectories.py`) is context too: the model learns the recovery, not the slip.
Tools are passed as `hermes.signatures(...)` (`datasets.tokenize_conversation` does), which the
template writes as minified JSON, one per line, as `hermes.tools_section` does.
"""

from __future__ import annotations

from serving.backends.hermes import DEFAULT_SYSTEM, TOOLS_INSTRUCTION, TOOLS_PREAMBLE

_TEMPLATE = r"""
{%- set default_system = DEFAULT_SYSTEM -%}
{%- if messages and messages[0].role == 'system' -%}
  {%- set system = messages[0].content or '' -%}
  {%- set rest = messages[1:] -%}
{%- else -%}
  {%- set system = default_system -%}
  {%- set rest = messages -%}
{%- endif -%}
{%- if tools -%}
  {%- set ns = namespace(section=PREAMBLE) -%}
  {%- for tool in tools -%}{%- set ns.section = ns.section ~ '\n' ~ (tool | tojson(separators=(',', ':'))) -%}{%- endfor -%}
  {%- set ns.section = ns.section ~ '\n' ~ INSTRUCTION -%}
  {%- set system = (system ~ '\n\n' ~ ns.section) if system else ns.section -%}
{%- endif -%}
{{- '<|im_start|>system\n' ~ system ~ '<|im_end|>\n' -}}
{%- for message in rest -%}
  {%- set previous = rest[loop.index0 - 1] if loop.index0 > 0 else none -%}
  {%- set following = rest[loop.index0 + 1] if loop.index0 + 1 < rest | length else none -%}
  {%- if message.role == 'tool' -%}
    {%- if previous is none or previous.role != 'tool' -%}{{- '<|im_start|>user\n' -}}{%- endif -%}
    {{- '<tool_response>\n' ~ (message.content or '') ~ '\n</tool_response>' -}}
    {%- if following is none or following.role != 'tool' -%}{{- '<|im_end|>\n' -}}{%- else -%}{{- '\n' -}}{%- endif -%}
  {%- elif message.role == 'assistant' -%}
    {{- '<|im_start|>assistant\n' -}}
    {%- set parts = namespace(text=message.content or '') -%}
    {%- for call in message.tool_calls or [] -%}
      {%- set function = call.function if call.function is defined else call -%}
      {%- set arguments = function.arguments if function.arguments is string else (function.arguments | tojson) -%}
      {%- set block = '<tool_call>\n{"name": ' ~ (function.name | tojson) ~ ', "arguments": ' ~ arguments ~ '}\n</tool_call>' -%}
      {%- set parts.text = (parts.text ~ '\n' ~ block) if parts.text else block -%}
    {%- endfor -%}
    {%- if message.weight is defined and message.weight == 0 -%}
      {{- parts.text ~ '<|im_end|>' -}}
    {%- else -%}
      {%- generation -%}{{- parts.text ~ '<|im_end|>' -}}{%- endgeneration -%}
    {%- endif -%}
    {{- '\n' -}}
  {%- else -%}
    {{- '<|im_start|>' ~ message.role ~ '\n' ~ (message.content or '') ~ '<|im_end|>\n' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}
"""


def _literal(text: str) -> str:
    """A Jinja string literal for `text`."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"


CHAT_TEMPLATE = (_TEMPLATE.replace("DEFAULT_SYSTEM", _literal(DEFAULT_SYSTEM))
                 .replace("PREAMBLE", _literal(TOOLS_PREAMBLE))
                 .replace("INSTRUCTION", _literal(TOOLS_INSTRUCTION))
                 .strip())
