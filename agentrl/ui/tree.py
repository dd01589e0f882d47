"""A tree rollout's group as its tree, for the viewer's step page (`rollout.tree`, agentrl/agent/tree.py).

What this is: `group_tree(rows)` turns one task group's stored episodes (dicts from
`repository.load_episodes`, with `parent_uid` / `branch_turn`) into nested `TreeNode`s: each episode is a
node that owns its turns from its branch turn on (the turns before are its parent's, copied); a node's
`branches` are its branch points, each listing the siblings that continue from that same forked state side
by side: the node itself (it goes on in its session) and the episodes that branched from it there. Each
sibling shows its return, the advantage of its first own turn and the mean return of the leaves under it
(what Tree-GRPO compares at a branching node). Template `TREE` in this module renders it as an indented list
with a small table per branch point.

A group of several trees (`rollout.tree.trees`) has one root per tree, drawn one after the other; an
episode's parent is always in its own tree, so nothing links the trees.

What this is not: a picture of a flat group (`group_tree` returns [] when no episode has a parent) or of
episodes whose parent was not stored (they are drawn as roots).
"""

# ruff: noqa: E501 (HTML lines are kept whole)
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class TreeNode:
    """One episode in its tree: its own turns start at `start`; `leaf_returns` are the returns of the
    episodes under it, itself included."""

    episode: Mapping[str, Any]
    start: int
    branches: list[BranchPoint] = field(default_factory=list)
    leaf_returns: list[float] = field(default_factory=list)

    @property
    def advantage(self) -> float | None:
        """The advantage of the node's first own turn (the one taken from the branch point's state)."""
        turns = self.episode["turns"]
        return turns[self.start]["advantage"] if self.start < len(turns) else None

    @property
    def subtree_mean_return(self) -> float:
        return sum(self.leaf_returns) / len(self.leaf_returns)


@dataclass
class BranchPoint:
    """Where `siblings` (the parent first, then its branches) continued from one forked state: after the
    parent's turn `turn - 1`, in the state `state_key`."""

    turn: int
    state_key: str | None
    siblings: list[TreeNode]


def group_tree(rows: Sequence[Mapping[str, Any]]) -> list[TreeNode]:
    """The group's roots with their branches nested (module docstring); [] for a flat group."""
    if not any(row.get("parent_uid") for row in rows):
        return []
    nodes = {str(row["uid"]): TreeNode(row, int(row.get("branch_turn") or 0)) for row in rows}
    children: dict[str, dict[int, list[TreeNode]]] = {}
    roots = []
    for node in nodes.values():
        parent = node.episode.get("parent_uid")
        if parent in nodes:
            children.setdefault(str(parent), {}).setdefault(node.start, []).append(node)
        else:
            roots.append(node)
    for uid, node in nodes.items():
        for turn, branched in sorted(children.get(uid, {}).items()):
            node.branches.append(BranchPoint(turn, state_before(node.episode, turn), [node, *branched]))
    for root in roots:
        collect_returns(root)
    return roots


def state_before(episode: Mapping[str, Any], turn: int) -> str | None:
    """The state turn `turn` was taken in: the state after the turn before it."""
    turns = episode["turns"]
    return turns[turn - 1]["state_key"] if 0 < turn <= len(turns) else episode.get("initial_state_key")


def collect_returns(node: TreeNode) -> list[float]:
    """Fill `leaf_returns` of the node and every node under it; the node's list."""
    node.leaf_returns = [float(node.episode["reward"])]
    for point in node.branches:
        for sibling in point.siblings[1:]:
            node.leaf_returns += collect_returns(sibling)
    return node.leaf_returns


TREE = """{% macro sibling_cells(point) %}
<tr><th>episode</th>{% for s in point.siblings %}<td><a href="/runs/{{ run.id }}/episodes/{{ s.episode.id }}">{{ s.episode.uid }}</a>{{ " (goes on)" if loop.first else "" }}</td>{% endfor %}</tr>
<tr><th>return</th>{% for s in point.siblings %}<td class="num">{{ "%.3f"|format(s.episode.reward) }}</td>{% endfor %}</tr>
<tr><th>advantage at turn {{ point.turn }}</th>{% for s in point.siblings %}<td class="num">{{ signed(s.episode.turns[point.turn].advantage if point.turn < s.episode.turns|length else none) }}</td>{% endfor %}</tr>
<tr><th>subtree mean return</th>{% for s in point.siblings %}<td class="num">{{ "%.3f"|format(s.subtree_mean_return) }} ({{ s.leaf_returns|length }})</td>{% endfor %}</tr>
{% endmacro %}
{% macro tree_node(node) %}<li class="tree-node"><a href="/runs/{{ run.id }}/episodes/{{ node.episode.id }}">{{ node.episode.uid }}</a>
· turns {{ node.start }}–{{ node.episode.num_turns - 1 }}{% if node.start %} (0–{{ node.start - 1 }} copied){% endif %}
· return {{ "%.3f"|format(node.episode.reward) }} · advantage {{ signed(node.advantage) }}
{% for point in node.branches %}<div class="branch-point"><b>branch point</b> at turn {{ point.turn }}, state <code>{{ point.state_key if point.state_key is not none else "unknown" }}</code>: {{ point.siblings|length }} siblings
<table class="siblings">{{ sibling_cells(point) }}</table>
<ul class="tree">{% for s in point.siblings[1:] %}{{ tree_node(s) }}{% endfor %}</ul></div>{% endfor %}</li>{% endmacro %}
<div class="tree-view"><style>ul.tree { padding-left: 1.4em; } .branch-point { margin: 4px 0 4px 1em; } table.siblings td, table.siblings th { font-size: 12.5px; }</style>
<p class="meta">a tree rollout{% if tree|length > 1 %} of {{ tree|length }} trees in one group (one root each){% endif %}: each episode owns its turns from its branch turn on; siblings continue from one forked state.</p>
<ul class="tree">{% for root in tree %}{{ tree_node(root) }}{% endfor %}</ul></div>
"""
"""The `tree.html` template: included by the step page for each group `group_tree` draws."""
