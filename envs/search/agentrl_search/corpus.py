"""An offline corpus from real text on this machine: docstrings of Python's standard library.

What this is: `stdlib_passages()` walks a fixed list of standard-library modules with `inspect` and makes
one passage per documented public module-level function or class and per public method documented in its
own class (inherited docstrings are skipped, so "Return self==value." does not appear a hundred times).
Each passage is `{"id", "title", "text", "module", "kind", "name", "first_sentence", "defaults"}`: the
title is the qualified name (`json.dumps`); the text is "<kind> <qualified name><signature>. <docstring>",
cut to `max_words` words; `defaults` maps each parameter with a literal default to its repr. Only `id`,
`title` and `text` go into the corpus file; the rest feeds the question generator.

What this is not: a question generator (`agentrl_search.make_tasks`) or an index (`agentrl_search.
retriever`). The text depends on the Python that runs it; the manifest records its version.
"""

from __future__ import annotations

import importlib
import inspect
import re
import warnings
from collections.abc import Iterator
from typing import Any

# Pure-library modules with no import-time side effects (no windows, sounds or network), chosen for
# their documented public API.
MODULES: tuple[str, ...] = tuple(
    "abc argparse array ast base64 binascii bisect bz2 calendar cmath codecs collections colorsys "
    "concurrent.futures configparser contextlib copy csv dataclasses datetime decimal difflib dis email "
    "enum filecmp fnmatch fractions ftplib functools getopt gettext glob graphlib gzip hashlib heapq hmac "
    "html html.parser http.client http.cookies imaplib inspect io ipaddress itertools json keyword "
    "linecache locale logging logging.handlers lzma mailbox math mimetypes netrc numbers operator os "
    "os.path pathlib pickle pkgutil platform plistlib poplib pprint queue quopri random re reprlib "
    "sched secrets selectors shelve shlex shutil signal smtplib socket sqlite3 ssl statistics string "
    "stringprep struct subprocess symtable sysconfig tabnanny tarfile tempfile textwrap threading time "
    "timeit tokenize tomllib trace traceback types typing unicodedata urllib.parse urllib.request uuid "
    "warnings wave weakref xml.dom.minidom xml.etree.ElementTree zipfile zipimport zlib zoneinfo".split()
)
MAX_WORDS = 90
_SENTENCE_END = re.compile(r"(?<=[.!?])\s")
_ADDRESS = re.compile(r" at 0x[0-9a-f]+")


def stdlib_passages(modules: tuple[str, ...] = MODULES, max_words: int = MAX_WORDS) -> list[dict[str, Any]]:
    """Every passage of `modules`, sorted by title, one per object (aliases of one object appear once)."""
    seen: set[int] = set()
    passages: dict[str, dict[str, Any]] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for module_name in modules:
            for kind, title, obj in documented_objects(module_name):
                if id(obj) in seen or title in passages:
                    continue
                seen.add(id(obj))
                passages[title] = make_passage(kind, title, obj, module_name, max_words)
    return [passages[title] for title in sorted(passages)]


def documented_objects(module_name: str) -> Iterator[tuple[str, str, Any]]:
    """(kind, qualified name, object) of a module's public functions and classes and their own methods."""
    module = importlib.import_module(module_name)
    names = getattr(module, "__all__", None) or [name for name in dir(module) if not name.startswith("_")]
    for name in sorted(set(names)):
        obj = getattr(module, name, None)
        if not _defined_in(obj, module_name) or not own_doc(obj):
            continue
        if inspect.isclass(obj):
            yield "class", f"{module_name}.{name}", obj
            yield from _methods(obj, f"{module_name}.{name}")
        elif callable(obj):
            yield "function", f"{module_name}.{name}", obj


def _methods(cls: type, prefix: str) -> Iterator[tuple[str, str, Any]]:
    for name, member in sorted(vars(cls).items()):
        if name.startswith("_") or not callable(member) or not own_doc(member):
            continue
        yield "method", f"{prefix}.{name}", member


def _defined_in(obj: Any, module_name: str) -> bool:
    """True for functions and classes defined in the module (or its C accelerator `_module`)."""
    if not (inspect.isclass(obj) or inspect.isroutine(obj)):
        return False
    home = getattr(obj, "__module__", None) or ""
    return home.lstrip("_") == module_name.lstrip("_") or home.startswith(module_name + ".")


def own_doc(obj: Any) -> str:
    """The object's own docstring, cleaned; "" when it has none (inherited ones do not count)."""
    doc = getattr(obj, "__doc__", None)
    return inspect.cleandoc(doc) if isinstance(doc, str) and doc.strip() else ""


def make_passage(kind: str, title: str, obj: Any, module_name: str, max_words: int) -> dict[str, Any]:
    signature = signature_text(obj)
    doc = " ".join(own_doc(obj).split())
    words = f"{kind} {title}{signature}. {doc}".split()
    text = " ".join(words[:max_words]) + (" ..." if len(words) > max_words else "")
    return {
        "id": f"py:{title}",
        "title": title,
        "text": text,
        "module": module_name,
        "kind": kind,
        "name": title.rsplit(".", 1)[1],
        "first_sentence": first_sentence(doc),
        "defaults": literal_defaults(obj),
    }


def signature_text(obj: Any) -> str:
    """ "(a, b=1)" or "" when Python cannot tell the signature (many builtins)."""
    try:
        return _ADDRESS.sub("", str(inspect.signature(obj)))
    except (TypeError, ValueError):
        return ""


def literal_defaults(obj: Any) -> dict[str, str]:
    """{parameter: repr of its default} for defaults that are plain literals (numbers, strings, tuples)."""
    try:
        parameters = inspect.signature(obj).parameters.values()
    except (TypeError, ValueError):
        return {}
    defaults = {}
    for parameter in parameters:
        value = parameter.default
        if value is inspect.Parameter.empty or not isinstance(value, int | float | str | bytes | tuple):
            continue
        defaults[parameter.name] = repr(value)
    return defaults


def first_sentence(doc: str) -> str:
    return _SENTENCE_END.split(doc, maxsplit=1)[0].strip() if doc else ""
