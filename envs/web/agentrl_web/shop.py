"""The shop site: a WebShop-style catalogue, instruction, pages and reward, all deterministic by seed.

What this is: a stdlib-only module used on both sides. On the host, `make_shop(seed)` gives the catalogue and
the instruction (the env shows the instruction and scores the purchase with `purchase_reward`). In the
sandbox, the browser driver imports this same file (the env uploads it next to `driver.py`) and `serve(seed)`
runs the site on 127.0.0.1 in a thread: a search page, paged results, product pages with option selects and
a Buy Now button; `/buy` records the purchase on the server object.

Reward (after WebShop's): 0 unless the bought product is of the asked category; otherwise the fraction of
the instruction's requirements met: each asked attribute the product has, each asked option chosen (colour,
and size where the category has sizes), and the price limit.

What this is not: an attempt at WebShop's real product data, its language model instructions or its
fuzzy title matching.
"""

from __future__ import annotations

import html
import random
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse

CATALOGUE_SIZE = 40
RESULTS_PER_PAGE = 5
CATEGORIES: dict[str, dict[str, Any]] = {
    "t-shirt": {
        "attrs": ["cotton", "slim fit", "organic", "v-neck", "long sleeve"],
        "sizes": ["S", "M", "L", "XL"],
    },
    "sneakers": {
        "attrs": ["waterproof", "leather", "lightweight", "non-slip"],
        "sizes": ["7", "8", "9", "10", "11"],
    },
    "backpack": {"attrs": ["waterproof", "laptop sleeve", "lightweight", "anti-theft"], "sizes": []},
    "mug": {"attrs": ["ceramic", "insulated", "dishwasher safe", "large"], "sizes": []},
    "headphones": {"attrs": ["wireless", "noise cancelling", "over-ear", "foldable"], "sizes": []},
}
COLORS = ["black", "white", "red", "blue", "green", "grey", "navy", "pink"]
BRANDS = ["Acme", "Northwind", "Globex", "Initech", "Umbra", "Vela"]


@dataclass(frozen=True)
class Product:
    id: str
    category: str
    title: str
    attrs: tuple[str, ...]
    colors: tuple[str, ...]
    sizes: tuple[str, ...]
    price: float


@dataclass(frozen=True)
class Goal:
    category: str
    attrs: tuple[str, ...]
    color: str
    size: str | None
    max_price: float
    target_id: str

    def instruction(self) -> str:
        size = f", size {self.size}" if self.size else ""
        return (
            f"Buy a {self.category} that is {' and '.join(self.attrs)}, in {self.color}{size}, "
            f"priced under ${self.max_price:.2f}."
        )


def make_catalogue(rng: random.Random) -> list[Product]:
    products = []
    for index in range(CATALOGUE_SIZE):
        category = rng.choice(sorted(CATEGORIES))
        spec = CATEGORIES[category]
        attrs = tuple(sorted(rng.sample(spec["attrs"], 2)))
        title = f"{rng.choice(BRANDS)} {' '.join(attrs)} {category}".title()
        products.append(
            Product(
                id=f"P{index:03d}",
                category=category,
                title=title,
                attrs=attrs,
                colors=tuple(rng.sample(COLORS, 3)),
                sizes=tuple(spec["sizes"]),
                price=round(rng.uniform(8, 120), 2),
            )
        )
    return products


def make_shop(seed: int) -> tuple[list[Product], Goal]:
    """The catalogue and the goal of shop `seed` (the same on host and sandbox)."""
    rng = random.Random(seed)
    products = make_catalogue(rng)
    target = rng.choice(products)
    goal = Goal(
        category=target.category,
        attrs=target.attrs,
        color=rng.choice(target.colors),
        size=rng.choice(target.sizes) if target.sizes else None,
        max_price=float(int(target.price) + rng.choice([1, 5, 10])),
        target_id=target.id,
    )
    return products, goal


def purchase_reward(seed: int, purchase: dict[str, Any] | None) -> float:
    """How well `purchase` ({"id", "color", "size"}) meets the goal of shop `seed`, in [0, 1]."""
    if not purchase:
        return 0.0
    products, goal = make_shop(seed)
    product = next((p for p in products if p.id == purchase.get("id")), None)
    if product is None or product.category != goal.category:
        return 0.0
    met = [attr in product.attrs for attr in goal.attrs]
    met.append(purchase.get("color") == goal.color)
    if goal.size is not None:
        met.append(purchase.get("size") == goal.size)
    met.append(product.price <= goal.max_price)
    return sum(met) / len(met)


def search(products: list[Product], query: str) -> list[Product]:
    """Products sharing a word with the query, best overlap first (ties in catalogue order)."""
    words = set(query.lower().replace("-", " ").split())
    scored = []
    for product in products:
        text = set(
            f"{product.title} {product.category} {' '.join(product.attrs)}".lower().replace("-", " ").split()
        )
        overlap = len(words & text)
        if overlap:
            scored.append((-overlap, product.id, product))
    return [product for _, _, product in sorted(scored, key=lambda item: (item[0], item[1]))]


def page(title: str, body: str) -> str:
    return f"<!DOCTYPE html><html><head><title>{html.escape(title)}</title></head><body>{body}</body></html>"


def home_page(goal: Goal) -> str:
    return page(
        "Shop",
        f"<div id='instruction'>Instruction: {html.escape(goal.instruction())}</div>"
        "<form action='/search'><input type='text' name='q' placeholder='search'>"
        "<button type='submit'>Search</button></form>",
    )


def results_page(products: list[Product], query: str, number: int) -> str:
    hits = search(products, query)
    start = number * RESULTS_PER_PAGE
    rows = "".join(
        f"<li><a href='/item/{p.id}'>{html.escape(p.title)}</a> <span>${p.price:.2f}</span></li>"
        for p in hits[start : start + RESULTS_PER_PAGE]
    )
    more = ""
    if start + RESULTS_PER_PAGE < len(hits):
        more = f"<a href='/search?{urlencode({'q': query, 'page': number + 1})}'>Next page</a>"
    return page(
        "Results",
        f"<div>{len(hits)} results for {html.escape(query)} (page {number + 1})</div><ul>{rows}</ul>{more}"
        "<a href='/'>Back to search</a>",
    )


def item_page(product: Product) -> str:
    def select(name: str, values: tuple[str, ...]) -> str:
        options = "".join(f"<option value='{html.escape(v)}'>{html.escape(v)}</option>" for v in values)
        return f"<label>{name}</label><select name='{name}'>{options}</select>"

    sizes = select("size", product.sizes) if product.sizes else ""
    return page(
        product.title,
        f"<h1>{html.escape(product.title)}</h1><div>Price: ${product.price:.2f}</div>"
        f"<div>Features: {html.escape(', '.join(product.attrs))}</div>"
        f"<form action='/buy'><input type='hidden' name='id' value='{product.id}'>"
        f"{select('color', product.colors)}{sizes}<button type='submit'>Buy Now</button></form>"
        "<a href='javascript:history.back()'>Back</a>",
    )


class ShopServer(ThreadingHTTPServer):
    def __init__(self, seed: int) -> None:
        super().__init__(("127.0.0.1", 0), ShopHandler)
        self.products, self.goal = make_shop(seed)
        self.purchase: dict[str, Any] | None = None


class ShopHandler(BaseHTTPRequestHandler):
    server: ShopServer

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        url = urlparse(self.path)
        query = {key: values[0] for key, values in parse_qs(url.query).items()}
        shop = self.server
        by_id = {p.id: p for p in shop.products}
        if url.path == "/":
            body = home_page(shop.goal)
        elif url.path == "/search":
            body = results_page(shop.products, query.get("q", ""), int(query.get("page", "0") or 0))
        elif url.path.startswith("/item/") and url.path[6:] in by_id:
            body = item_page(by_id[url.path[6:]])
        elif url.path == "/buy" and query.get("id") in by_id:
            if shop.purchase is None:
                shop.purchase = {"id": query["id"], "color": query.get("color"), "size": query.get("size")}
            body = page("Done", f"<div>Thank you for buying {html.escape(by_id[query['id']].title)}.</div>")
        else:
            self.send_error(404)
            return
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        return


def serve(seed: int) -> ShopServer:
    """Start shop `seed` on 127.0.0.1 (a free port) in a daemon thread."""
    server = ShopServer(seed)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
