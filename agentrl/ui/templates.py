"""The viewer's HTML templates (Jinja2, autoescaped: every value is HTML-escaped unless it is a `Markup`
built by `svg.py`). Kept as strings in this module so they ship with the package without data-file rules.

What this is not: a front end. There is no JavaScript; every page is rendered on the server.
"""

# ruff: noqa: E501 (HTML lines are kept whole)
from __future__ import annotations

from jinja2 import DictLoader, Environment, select_autoescape

from agentrl.ui.analysis_templates import TEMPLATES as ANALYSIS_TEMPLATES
from agentrl.ui.paging import PAGING
from agentrl.ui.search import SEARCH, SEARCH_FORM
from agentrl.ui.tokens import TOKENS, TOKENS_CSS
from agentrl.ui.tree import TREE

BASE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{% block title %}agentrl{% endblock %} · agentrl viewer</title>
{% if refresh_s %}<meta http-equiv="refresh" content="{{ refresh_s }}">{% endif %}
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.2em auto; max-width: 1000px; color: #222; padding: 0 1em; }
a { color: #0b5cad; } table { border-collapse: collapse; margin: .5em 0 1em; }
th, td { padding: 3px 9px; border-bottom: 1px solid #e4e4e4; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.pos { color: #177a2b; font-weight: 600; } .neg { color: #b3261e; font-weight: 600; } .zero { color: #777; }
.badge { display: inline-block; padding: 0 6px; border-radius: 8px; font-size: 12px; background: #eee; }
.badge.bad { background: #fbe3e1; color: #b3261e; } .badge.ok { background: #e3f4e6; color: #177a2b; }
.note { background: #fff8e1; border-left: 4px solid #f0b400; padding: 6px 10px; margin: .8em 0; }
.msg { border-radius: 8px; padding: 8px 12px; margin: 6px 0; white-space: pre-wrap; font-family: ui-monospace, monospace; font-size: 13px; }
.assistant { background: #eef4ff; margin-right: 3em; } .call { background: #f6f0ff; margin-right: 3em; }
.call.bad { background: #fbe3e1; } .env { background: #f3f3f3; margin-left: 3em; }
.turn { border: 1px solid #ddd; border-radius: 10px; padding: 8px 12px; margin: 12px 0; }
.turn.invalid { border-color: #e6a39d; } .meta { font-size: 12.5px; color: #444; }
.meta code { background: #f4f4f4; padding: 0 4px; border-radius: 4px; }
nav.crumbs { margin-bottom: .6em; } .filters a { margin-right: .8em; } .filters a.on { font-weight: 700; color: #222; }
h2 { margin-top: 1.2em; } .charts { display: flex; flex-wrap: wrap; gap: 12px; }
.pager { font-size: 13px; color: #444; } a.sort { color: #222; text-decoration: none; } .refresh { font-size: 12.5px; color: #777; }
form.search { font-size: 13px; margin: .6em 0; } td.snippet code { white-space: pre-wrap; font-size: 12.5px; }
{% include "analysis.css" %}
{% include "tokens.css" %}
</style></head>
<body><nav class="crumbs"><a href="/">runs</a>{% block crumbs %}{% endblock %}</nav>
{% block body %}{% endblock %}
</body></html>
"""

RUNS = """{% extends "base.html" %}{% from "paging.html" import page_links, sort_header %}{% block title %}runs{% endblock %}
{% block body %}<h1>Runs</h1>
<p class="meta">store: <code>{{ store_url }}</code></p>
{% if eval_temperatures|length > 1 %}<p class="note" id="temperature-note">These runs evaluated held-out tasks at different temperatures ({{ eval_temperatures|join(", ") }}): compare best held-out success only between runs of one temperature.</p>{% endif %}
<form action="/compare" method="get">
<table id="runs"><tr><th></th>{{ sort_header(sorter, "name", "name") }}<th>id</th>{{ sort_header(sorter, "task", "task") }}{{ sort_header(sorter, "status", "status") }}<th>model</th><th>estimator</th><th>group size</th>{{ sort_header(sorter, "steps", "steps") }}
{{ sort_header(sorter, "best", "best held-out success") }}<th>eval T</th>{{ sort_header(sorter, "created", "created") }}</tr>
{% for row in runs %}<tr>
<td><input type="checkbox" name="run" value="{{ row.id }}" aria-label="compare {{ row.name }}"></td>
<td><a href="/runs/{{ row.id }}">{{ row.name }}</a></td><td><code>{{ row.id[:12] }}</code></td><td>{{ row.task }}</td>
<td>{{ row.status }}</td><td>{{ row.model if row.model is not none else "-" }}</td><td>{{ row.estimator if row.estimator is not none else "-" }}</td>
<td class="num">{{ row.group_size if row.group_size is not none else "-" }}</td><td class="num">{{ row.steps if row.steps is not none else "-" }}</td>
<td class="num">{{ "%.3f"|format(row.best) if row.best is not none else "-" }}</td><td class="num">{{ row.eval_temperature if row.eval_temperature is not none else "-" }}</td><td>{{ row.created }}</td></tr>
{% else %}<tr><td colspan="12">no runs in this store yet</td></tr>{% endfor %}
</table>{{ page_links(pager) }}
{% if refresh_s %}<p class="refresh">a run on this page is still going: this page reloads every {{ refresh_s }} s</p>{% endif %}
<button type="submit" id="compare-runs">compare the ticked runs</button></form>{% endblock %}
"""

RUN = """{% extends "base.html" %}{% from "paging.html" import page_links, sort_header %}{% block title %}{{ run.name }}{% endblock %}
{% block crumbs %} › {{ run.name }}{% endblock %}
{% block body %}<h1>{{ run.name }}</h1>
<p class="meta">id <code>{{ run.id }}</code> · task {{ run.task }} · status <b>{{ run.status }}</b>
· created {{ run.created_at.strftime("%Y-%m-%d %H:%M:%S") }}{% if run.finished_at %} · finished {{ run.finished_at.strftime("%Y-%m-%d %H:%M:%S") }}{% endif %}</p>
{% if refresh_s %}<p class="refresh" id="refresh-note">this run has no end time yet: the page reloads every {{ refresh_s }} s</p>{% endif %}
{% with task = "", q = "" %}{% include "search_form.html" %}{% endwith %}
{% include "credit.html" %}
{% if steps|selectattr("split", "equalto", "eval")|list %}<p><a id="heldout-link" href="/heldout?run_a={{ run.id }}">held-out per task: first evaluation against last</a>
<span class="meta">(eval temperature {{ eval_temperature if eval_temperature is not none else "not recorded" }})</span></p>{% endif %}
<h2>Metrics charted <small>(every logged metric; hover a point for its value)</small></h2>
<div class="charts">{% for chart in charts %}{{ chart }}{% else %}<p>no metrics recorded yet</p>{% endfor %}</div>
<h2>Steps</h2>
<table id="steps"><tr>{{ sort_header(sorter, "step", "step") }}{{ sort_header(sorter, "split", "split") }}{{ sort_header(sorter, "episodes", "episodes") }}{{ sort_header(sorter, "mean_reward", "mean reward") }}{{ sort_header(sorter, "success_rate", "success") }}
{{ sort_header(sorter, "infra_failures", "infra failures") }}{{ sort_header(sorter, "invalid_turns", "invalid turns") }}</tr>
{% for s in steps %}<tr><td><a href="/runs/{{ run.id }}/steps/{{ s.step }}?split={{ s.split }}">step {{ s.step }}</a></td>
<td>{{ s.split }}</td><td class="num">{{ s.episodes }}</td><td class="num">{{ "%.3f"|format(s.mean_reward) }}</td>
<td class="num">{{ "%.3f"|format(s.success_rate) }}</td>
<td class="num">{% if s.infra_failures %}<span class="badge bad">{{ s.infra_failures }}</span>{% else %}0{% endif %}</td>
<td class="num">{{ s.invalid_turns }}</td></tr>
{% else %}<tr><td colspan="7">no episodes recorded yet</td></tr>{% endfor %}
</table>{{ page_links(pager) }}
<h2>Metrics</h2>
<table><tr><th>metric</th><th>steps</th><th>first</th><th>last</th><th>min</th><th>max</th></tr>
{% for m in metrics %}<tr><td>{{ m.name }}</td><td class="num">{{ m.count }}</td>{% for v in (m.first, m.last, m.low, m.high) %}
<td class="num">{{ "%.4g"|format(v) if v is not none else "-" }}</td>{% endfor %}</tr>{% endfor %}
</table>
{% include "sampler.html" %}
<details><summary>config</summary><pre>{{ config }}</pre></details>
{% endblock %}
"""

STEP = """{% extends "base.html" %}{% from "paging.html" import page_links, sort_header %}{% block title %}{{ run.name }} step {{ step }}{% endblock %}
{% block crumbs %} › <a href="/runs/{{ run.id }}">{{ run.name }}</a> › step {{ step }} ({{ split }}){% endblock %}
{% block body %}<h1>Step {{ step }} <small>({{ split }})</small></h1>
<p class="filters">show:{% for f, label in filters %}
<a href="?split={{ split }}&amp;show={{ f }}" class="{{ 'on' if f == show else '' }}">{{ label }} ({{ counts[f] }})</a>{% endfor %}</p>
{% if eval_rows is not none %}<p class="meta">{{ shown }} of {{ total }} episodes: held-out evaluation, one episode per row (no advantages: evaluation does not train).</p>
{{ page_links(pager) }}
<table id="eval-episodes"><tr>{{ sort_header(sorter, "id", "episode") }}{{ sort_header(sorter, "task", "task") }}{{ sort_header(sorter, "outcome", "outcome") }}{{ sort_header(sorter, "reward", "reward") }}{{ sort_header(sorter, "turns", "turns") }}<th>stop reason</th>{{ sort_header(sorter, "invalid", "invalid turns") }}</tr>
{% for e in eval_rows %}<tr><td><a href="/runs/{{ run.id }}/episodes/{{ e.id }}">{{ e.uid }}</a></td><td>{{ e.task_id }}</td>
<td>{% if e.success %}<span class="badge ok">success</span>{% else %}<span class="badge bad">failed</span>{% endif %}</td>
<td class="num">{{ "%.3f"|format(e.reward) }}</td><td class="num">{{ e.num_turns }}</td>
<td>{% if e.stop_reason == "infra_error" %}<span class="badge bad" title="{{ e.error or '' }}">infra_error</span>{% else %}{{ e.stop_reason }}{% endif %}</td>
<td class="num">{{ e.invalid_turns }}</td></tr>
{% else %}<tr><td colspan="7">no episodes match this filter.</td></tr>{% endfor %}
</table>{% else %}
<p class="meta">{{ shown }} of {{ total }} episodes, grouped by task group (the episodes GRPO compares).</p>
<p class="pager">order groups by: {% for key, label in (("order", "recording order"), ("task", "task id"), ("reward", "mean reward")) %}<a class="sort" href="{{ sorter.url(key) }}">{{ label }}{{ sorter.arrow(key) }}</a>{{ " · " if not loop.last }}{% endfor %}</p>
{{ page_links(pager) }}
{% include "credit.html" %}
{% for group_id, rows in groups.items() %}
<h2 class="group">task group <code>{{ group_id }}</code> <small>task {{ rows[0].task_id }}</small></h2>
{% with g = summaries[group_id] %}<p class="group-summary">returns as used: n={{ g.n }} · mean {{ "%+.3f"|format(g.mean) }} · std (N−1) {{ "%.3f"|format(g.std) }}{% if g.no_signal %} · <span class="no-signal">no signal: all returns equal</span>{% endif %}</p>{% endwith %}
{% if trees[group_id] %}{% with tree = trees[group_id] %}{% include "tree.html" %}{% endwith %}{% endif %}
<table class="episodes"><tr><th>episode</th><th>reward</th><th title="the episode return the estimator used: rewards minus the invalid-turn penalty">return as used</th><th>success</th><th>stop reason</th><th>turns</th>
<th>invalid turns</th><th>advantage (turn 0)</th></tr>
{% for e in rows %}<tr><td><a href="/runs/{{ run.id }}/episodes/{{ e.id }}">{{ e.uid }}</a></td>
<td class="num">{{ "%.3f"|format(e.reward) }}</td>
<td class="num return-used">{{ "%+.3f"|format(returns[e.id].used) if returns[e.id] is not none else "-" }}</td>
<td>{% if e.success %}<span class="badge ok">success</span>{% else %}<span class="badge bad">failed</span>{% endif %}</td>
<td>{% if e.stop_reason == "infra_error" %}<span class="badge bad" title="{{ e.error or '' }}">infra_error</span>{% else %}{{ e.stop_reason }}{% endif %}</td>
<td class="num">{{ e.num_turns }}</td><td class="num">{{ e.invalid }}</td>
<td class="num">{{ signed(e.turns[0].advantage if e.turns else none) }}</td></tr>{% endfor %}
</table>
{% with anchor_sets = anchor_sets[group_id] %}{% include "anchors.html" %}{% endwith %}
{% else %}<p>no episodes match this filter.</p>{% endfor %}
{% if groups %}{{ page_links(pager) }}{% endif %}{% endif %}
{% endblock %}
"""

EPISODE = """{% extends "base.html" %}{% from "paging.html" import page_links %}{% block title %}episode {{ e.uid }}{% endblock %}
{% block crumbs %} › <a href="/runs/{{ run.id }}">{{ run.name }}</a>
› <a href="/runs/{{ run.id }}/steps/{{ e.step }}?split={{ e.split }}">step {{ e.step }} ({{ e.split }})</a> › {{ e.uid }}{% endblock %}
{% block body %}<h1>Episode {{ e.uid }}</h1>
<p class="meta">env {{ e.env_id }} · task {{ e.task_id }} · group <code>{{ e.group_id }}</code> · seed {{ e.seed }}
· reward <b>{{ "%.3f"|format(e.reward) }}</b> ·
{% if e.success %}<span class="badge ok">success</span>{% else %}<span class="badge bad">failed</span>{% endif %}
· stop reason <b>{{ e.stop_reason }}</b> · {{ e.num_turns }} turns</p>
{% include "credit.html" %}
{% if used is not none %}<p class="meta" id="return-used">return as the estimator used it: <b>{{ "%+.3f"|format(used.used) }}</b>
(raw reward {{ "%.3f"|format(used.raw) }}{% if used.penalty %} − invalid-turn penalty {{ "%.3f"|format(used.penalty) }}{% endif %})</p>{% endif %}
{% if e.error %}<p class="note" id="infra-error">infrastructure failure: {{ e.error }}</p>{% endif %}
{% if e.attempts and e.attempts > 1 %}<p class="note">played {{ e.attempts }} times: earlier plays ended in an infrastructure failure and were re-run</p>{% endif %}
{% if prompt %}{% include "prompt.html" %}{% endif %}
{% if e.first_observation is not none %}<div class="msg env" id="first-observation"><b>environment (reset)</b>
{{ e.first_observation }}</div>{% else %}<p class="note">The first observation is not in this store (written before it was kept).</p>{% endif %}
<p class="note">{% if not prompt %}The first prompt's tools and few-shot examples are not in this store (written before they were kept, or a harness's episode); turn 0 had {{ e.turns[0].prompt_tokens if e.turns else 0 }}
prompt tokens in all. {% endif %}Tool calls below are re-parsed from the assistant text with agentrl's parser.</p>
{% if pager.pages > 1 %}{{ page_links(pager) }}{% endif %}
{% for t in e.turns %}
<div class="turn{{ ' invalid' if t.invalid else '' }}" id="turn-{{ t.index }}">
<div class="meta">turn {{ t.index }}
{% if t.tool_name %}· tool call <span class="badge">{{ t.tool_name }}</span>{% endif %}
{% if t.invalid %}· <span class="badge bad">invalid action</span>{% endif %}
· reward <span class="{{ sign(t.reward) }}">{{ "%+.3f"|format(t.reward) }}</span>
{% if used is not none %}· as used <span class="used-reward {{ sign(used.turn_rewards[t.index]) }}">{{ "%+.3f"|format(used.turn_rewards[t.index]) }}</span>
{% if used.turn_returns %}· R_t (γ={{ credit.gamma }}) {{ "%+.3f"|format(used.turn_returns[t.index]) }}{% endif %}{% endif %}
· advantage {{ signed(t.advantage) }}
· tokens {{ t.prompt_tokens }} in / {{ t.completion_tokens }} out
{% with f = finishes[t.index] %}· finish <span class="finish{{ '' if f.stored else ' inferred' }}" title="{{ "the engine's finish reason" if f.stored else "inferred from the token count, the text and the run's sampling config (stored before finish reasons were kept)" }}">{{ f.reason }}{{ "" if f.stored else " (inferred)" }}</span>{% endwith %}</div>
{% if contexts[t.index] %}<div class="meta prompt-view">{{ contexts[t.index] }}</div>{% endif %}
<div class="msg assistant"><b>assistant</b>
{{ t.text }}</div>
{% include "tokens.html" %}
{% for name, arguments in calls[t.index].calls %}<div class="msg call"><b>tool call · {{ name }}</b>
{{ arguments }}</div>{% endfor %}
{% if calls[t.index].error %}<div class="msg call bad"><b>parse error</b> {{ calls[t.index].error }}</div>{% endif %}
<div class="msg env"><b>environment</b>
{{ t.observation }}</div>
{% if t.info %}<div class="meta exec-log">env info (exec log): {% for k, v in t.info.items() if k not in ("state_key", "task_id") %}{{ "· " if not loop.first else "" }}{{ k }}=<code>{{ v }}</code> {% endfor %}</div>{% endif %}
<div class="meta">state after: <code>{{ t.state_key if t.state_key is not none else "none (env reports no state key)" }}</code><br>
anchor (state before): {% if anchors[t.index].key is none %}<i>unknown: this turn has no anchor group</i>
{% else %}<code>{{ anchors[t.index].key }}</code> · anchor group of <b class="anchor-size">{{ anchors[t.index].members|length }}</b>
turn(s) in this task group{% for m in anchors[t.index].others %}{{ "," if not loop.first else ":" }}
<a href="/runs/{{ run.id }}/episodes/{{ m.episode }}#turn-{{ m.turn }}">episode {{ m.episode }} turn {{ m.turn }}</a>{% endfor %}{% endif %}</div>
</div>
{% endfor %}
{% if pager.pages > 1 %}{{ page_links(pager) }}{% endif %}
{% endblock %}
"""

ERROR = """{% extends "base.html" %}{% block title %}not found{% endblock %}
{% block body %}<h1>Not found</h1><p>{{ message }}</p>{% endblock %}
"""


def environment() -> Environment:
    loader = DictLoader(
        {
            "base.html": BASE,
            "runs.html": RUNS,
            "run.html": RUN,
            "step.html": STEP,
            "episode.html": EPISODE,
            "error.html": ERROR,
            "tree.html": TREE,
            "paging.html": PAGING,
            "search.html": SEARCH,
            "search_form.html": SEARCH_FORM,
            "tokens.html": TOKENS,
            "tokens.css": TOKENS_CSS,
            **ANALYSIS_TEMPLATES,
        }
    )
    return Environment(loader=loader, autoescape=select_autoescape(default=True, default_for_string=True))
