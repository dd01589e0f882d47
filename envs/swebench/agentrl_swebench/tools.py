"""The agent's tools: their specs, the in-sandbox scripts behind `view` and `str_replace`, and observations.

What this is: pure parts. The tool specs (OpenAI function format), the two small Python scripts the env runs
inside the sandbox (through the exec channel, as the sandbox user, in the workdir) and the mini-swe-agent
style observation text: `<returncode>N</returncode>` and the output, its middle cut out past a byte limit
with a warning saying so, and a note when the command was killed for time or memory.

What this is not: the env loop (`agentrl_swebench.env`) or a sandbox.
"""

from __future__ import annotations

from agentrl.env import render_tool_call, tool_spec
from agentrl.sandbox.base import ExecResult, truncate_output

BASH_TOOL = tool_spec(
    "bash",
    "Run a bash command in the repository (your working directory); returns its exit code and output",
    {"command": {"type": "string", "description": "a bash command, e.g. `grep -n 'def foo' -r .`"}},
)
VIEW_TOOL = tool_spec(
    "view",
    "Show lines start..end (1-based, inclusive; end -1 means to the end) of a file, numbered; "
    "for a folder, list its entries",
    {
        "path": {"type": "string", "description": "a path relative to the repository root"},
        "start": {"type": "integer", "description": "first line, from 1"},
        "end": {"type": "integer", "description": "last line, or -1"},
    },
)
STR_REPLACE_TOOL = tool_spec(
    "str_replace",
    "Replace the one occurrence of `old` in a file with `new` (fails unless `old` occurs exactly once)",
    {
        "path": {"type": "string", "description": "a path relative to the repository root"},
        "old": {
            "type": "string",
            "description": "the exact text to replace, with enough context to be unique",
        },
        "new": {"type": "string", "description": "the replacement text"},
    },
)
SUBMIT_TOOL = tool_spec("submit", "Submit your changes for grading; this ends the episode", {})
TOOLS = (BASH_TOOL, VIEW_TOOL, STR_REPLACE_TOOL, SUBMIT_TOOL)

VIEW_LINE_LIMIT = 400
# argv: path start end; prints numbered lines (or a folder listing); exit 1 with a message on a bad path
VIEW_SCRIPT = r"""
import os, sys
path, start, end = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if os.path.isdir(path):
    for name in sorted(os.listdir(path)):
        print(name + ("/" if os.path.isdir(os.path.join(path, name)) else ""))
    sys.exit(0)
try:
    with open(path, encoding="utf-8", errors="replace") as handle:
        lines = handle.read().splitlines()
except OSError as error:
    print(f"cannot read {path}: {error.strerror}")
    sys.exit(1)
start = max(start, 1)
end = len(lines) if end < 0 else min(end, len(lines))
end = min(end, start + LIMIT - 1)
for number in range(start, end + 1):
    print(f"{number:6d}\t{lines[number - 1]}")
if end < len(lines):
    print(f"[{len(lines) - end} more lines; the file has {len(lines)}]")
""".replace("LIMIT", str(VIEW_LINE_LIMIT))
# stdin: {"path", "old", "new"} as JSON; exit 1 unless `old` occurs exactly once
STR_REPLACE_SCRIPT = r"""
import json, sys
request = json.load(sys.stdin)
path, old, new = request["path"], request["old"], request["new"]
try:
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
except (OSError, UnicodeDecodeError) as error:
    print(f"cannot read {path}: {error}")
    sys.exit(1)
count = text.count(old) if old else 0
if count != 1:
    print(f"`old` occurs {count} times in {path}; it must occur exactly once (add surrounding lines)")
    sys.exit(1)
position = text.index(old)
text = text[:position] + new + text[position + len(old):]
with open(path, "w", encoding="utf-8") as handle:
    handle.write(text)
line = text[:position].count("\n") + 1
lines = text.splitlines()
for number in range(max(1, line - 3), min(len(lines), line + new.count("\n") + 3) + 1):
    print(f"{number:6d}\t{lines[number - 1]}")
"""


FORMAT_HELP = (
    "Call exactly one tool per turn, written like this: "
    + render_tool_call("bash", {"command": "grep -rn 'def camelize' ."})
    + " and, when the failing tests pass, "
    + render_tool_call("submit", {})
)


def command_observation(result: ExecResult, limit: int) -> str:
    """mini-swe-agent style: the return code, then the output (head and tail past `limit` bytes)."""
    output, truncated = truncate_output(result.stdout + result.stderr, limit)
    parts = [f"<returncode>{result.exit_code}</returncode>"]
    if result.timed_out:
        parts.append("<warning>The command timed out and was killed; try a quicker command.</warning>")
    elif result.oom:
        parts.append("<warning>The command ran out of memory and was killed.</warning>")
    if truncated or result.truncated:
        parts.append(
            "<warning>The output was too long; its middle was cut. Narrow the command (grep, head, "
            "tail, view with a line range).</warning>"
        )
    parts.append(f"<output>\n{output}</output>")
    return "\n".join(parts)


def task_observation(problem_statement: str, workdir: str) -> str:
    return (
        f"<issue>\n{problem_statement}\n</issue>\n"
        f"The repository is in {workdir} (your working directory); run the tests with "
        "`python3 -m pytest -q <test file>`. Tools: bash, view, str_replace, submit. " + FORMAT_HELP
    )
