"""Pagination and sorting of the viewer's tables: query parameters in, a store `Window` and links out.

What this is: `window(...)` turns `?page=&limit=&sort=&order=` into the `agentrl.store.pages.Window` a
reader takes (page numbers from 1, `limit` clamped to 1..MAX_LIMIT); `Pager` makes the previous / next
links and the "page 2 of 9" line of a listing; `Sorter` makes a column header's link (a second click on the
sorted column flips its direction). Both keep the page's other parameters (split, filter, search terms).
Template `PAGING` (registered as "paging.html") holds the two macros that draw them.

What this is not: a reader; nothing here touches the store.
"""

# ruff: noqa: E501 (HTML lines are kept whole)
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlencode

from agentrl.errors import NotFound
from agentrl.store.pages import Window

MAX_LIMIT = 500
Order = Literal["asc", "desc"]
Params = Mapping[str, str | int | None]


def query_string(params: Params) -> str:
    """`?a=1&b=x` of the parameters that are set (None and "" left out); "" when none is."""
    kept = {key: value for key, value in params.items() if value is not None and value != ""}
    return "?" + urlencode(kept) if kept else ""


def window(page: int, limit: int, sort: str = "", order: str = "asc") -> Window:
    """The rows a page shows; a page below 1 or an order other than asc / desc is a NotFound."""
    if page < 1:
        raise NotFound(f"page {page} does not exist; pages are numbered from 1")
    if order not in ("asc", "desc"):
        raise NotFound(f"unknown order {order!r}; use asc or desc")
    size = min(max(limit, 1), MAX_LIMIT)
    return Window(offset=(page - 1) * size, limit=size, sort=sort, descending=order == "desc")


@dataclass(frozen=True)
class Pager:
    """Where a page sits in its listing: `total` rows in all (None when not counted: then `more` says
    whether a next page exists), `noun` names the rows."""

    path: str
    window: Window
    total: int | None
    noun: str
    params: Mapping[str, str | int | None] = field(default_factory=dict)
    more: bool = False

    @property
    def page(self) -> int:
        return self.window.offset // self.window.limit + 1

    @property
    def pages(self) -> int | None:
        return None if self.total is None else max(1, math.ceil(self.total / self.window.limit))

    def url(self, page: int) -> str:
        return self.path + query_string({**self.params, "page": page, "limit": self.window.limit})

    @property
    def previous_url(self) -> str | None:
        return self.url(self.page - 1) if self.page > 1 else None

    @property
    def next_url(self) -> str | None:
        last = self.pages
        has_next = self.more if last is None else self.page < last
        return self.url(self.page + 1) if has_next else None


@dataclass(frozen=True)
class Sorter:
    """A listing's sort state: the column `key` it is sorted by and the direction; `url(column)` sorts by
    another column (ascending) or flips the direction of the current one, back on page 1."""

    path: str
    key: str
    descending: bool
    params: Mapping[str, str | int | None] = field(default_factory=dict)

    def url(self, column: str) -> str:
        order: Order = "desc" if column == self.key and not self.descending else "asc"
        return self.path + query_string({**self.params, "sort": column, "order": order})

    def arrow(self, column: str) -> str:
        if column != self.key:
            return ""
        return " ▼" if self.descending else " ▲"


PAGING = """{% macro page_links(p) %}<p class="pager">{% if p.previous_url %}<a href="{{ p.previous_url }}" rel="prev">‹ previous</a> · {% endif %}page {{ p.page }}{% if p.pages %} of {{ p.pages }}{% endif %}{% if p.total is not none %} · {{ p.total }} {{ p.noun }}{% endif %}{% if p.next_url %} · <a href="{{ p.next_url }}" rel="next">next ›</a>{% endif %}</p>{% endmacro %}
{% macro sort_header(s, column, label) %}<th><a class="sort" href="{{ s.url(column) }}">{{ label }}{{ s.arrow(column) }}</a></th>{% endmacro %}
"""
"""The `paging.html` macros: `page_links(Pager)` (previous / next links and the page line) and
`sort_header(Sorter, column, label)` (a table header that sorts by its column)."""
