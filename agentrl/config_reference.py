"""The run config's reference, made from the typed config itself: every key, its type, default and meaning.

What this is: `field_docs` (a config class's per-field text, read from its docstring's "name: text" lines,
where "a, b: text" documents both), `reference_rows` (every leaf key of `RunConfig`, grouped by section) and
`reference_markdown` (docs/config.md, which the docs site builds; `agentrl config reference --write`
rewrites it and a test keeps it equal), plus `provenance`: where each value of an effective config came
from (the default, the run config file or a plugin's, or a `key=value` override), for `agentrl config show`.

What this is not: validation (each config checks its own values) or the loader (`agentrl.config`).
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

NAME_LINE = re.compile(
    r"^(?P<indent>\s*)(?P<names>[a-z_][a-z0-9_]*(?:\s*,\s*[a-z_][a-z0-9_]*)*):\s+(?P<text>\S.*)$"
)


@dataclasses.dataclass(frozen=True)
class Row:
    """One leaf key of the run config."""

    key: str
    type: str
    default: str
    doc: str


def field_docs(cls: type[Any]) -> dict[str, str]:
    """Per field of `cls`, the text its docstring gives it: a line "name: text" (or "a, b: text" for
    several), continued by the lines indented deeper than the name, up to the next name line or blank line."""
    fields = {field.name for field in dataclasses.fields(cls)}
    docs: dict[str, str] = {}
    names: list[str] = []
    indent = 0
    for line in (cls.__doc__ or "").splitlines():
        found = NAME_LINE.match(line)
        listed = [name.strip() for name in found.group("names").split(",")] if found else []
        if found and set(listed) <= fields:
            names, indent = listed, len(found.group("indent"))
            docs.update(dict.fromkeys(names, found.group("text").strip()))
        elif names and line.strip() and len(line) - len(line.lstrip()) > indent:
            docs.update({name: f"{docs[name]} {line.strip()}" for name in names})
        else:
            names = []
    return docs


def reference_rows(cls: type[Any], prefix: str = "") -> list[Row]:
    """Every leaf key of config class `cls` (nested config dataclasses followed), in declaration order."""
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    rows: list[Row] = []
    for field in dataclasses.fields(cls):
        key = f"{prefix}{field.name}"
        hint = hints[field.name]
        if dataclasses.is_dataclass(hint) and isinstance(hint, type):
            rows.extend(reference_rows(hint, f"{key}."))
            continue
        rows.append(Row(key, type_name(hint), default_text(field), docs.get(field.name, "")))
    return rows


def type_name(hint: Any) -> str:
    text = str(hint) if not isinstance(hint, type) else hint.__name__
    return text.replace("typing.", "").replace("collections.abc.", "")


def default_text(field: dataclasses.Field[Any]) -> str:
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return "(required)"
    return repr(value) if not isinstance(value, tuple) else repr(list(value))


def undocumented(rows: Sequence[Row]) -> list[str]:
    """The keys whose field has no text in its class's docstring."""
    return [row.key for row in rows if not row.doc]


def reference_markdown(cls: type[Any]) -> str:
    """docs/config.md: a table per top-level section."""
    rows = reference_rows(cls)
    lines = [
        "# Run config reference",
        "",
        "Every key of the run config (`agentrl.config.RunConfig`): its type, its default and what it",
        "means, generated from the typed config's own docstrings by",
        "`agentrl config reference --write docs/config.md` (a test fails when this page is stale or a key",
        "has no text). `agentrl config show --task NAME` prints a run's effective config and where each",
        "value came from. Keys are set in a run config file (`configs/NAME.yaml`) or on the command line as",
        "`key=value`.",
    ]
    section = None
    for row in rows:
        top = row.key.split(".", 1)[0] if "." in row.key else "(top level)"
        if top != section:
            section = top
            lines += ["", f"## {section}", "", "| key | type | default | meaning |", "|---|---|---|---|"]
        lines.append(f"| `{row.key}` | {cell(row.type)} | {cell(row.default)} | {cell(row.doc)} |")
    return "\n".join(lines) + "\n"


def cell(text: str) -> str:
    """A Markdown table cell's text: pipes escaped, one line."""
    return text.replace("|", "\\|").replace("\n", " ")


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as dotted keys ({"a": {"b": 1}} -> {"a.b": 1}); non-mapping values are leaves."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, f"{dotted}."))
        else:
            out[dotted] = value
    return out


def provenance(
    effective: Mapping[str, Any], file_data: Mapping[str, Any], file_label: str, overrides: Sequence[str]
) -> list[tuple[str, Any, str]]:
    """(key, value, source) for every leaf of the effective config: "override" when a `key=value` override
    set it (or a section above it), else `file_label` when the run config file did, else "default"."""
    overridden = {item.split("=", 1)[0].strip() for item in overrides}
    in_file = flatten(file_data)

    def source(key: str) -> str:
        parts = key.split(".")
        prefixes = {".".join(parts[: i + 1]) for i in range(len(parts))}
        if prefixes & overridden:
            return "override"
        if prefixes & set(in_file):
            return file_label
        return "default"

    return [(key, value, source(key)) for key, value in flatten(effective).items()]


def write_reference(path: Path, cls: type[Any]) -> None:
    path.write_text(reference_markdown(cls))
