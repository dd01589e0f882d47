"""The templates of the viewer's comparison pages and of its credit and sampler panels (Jinja2, autoescaped;
registered with the others by `templates.environment`). The data comes from `analysis.py`.

    compare.html   several runs: overlaid charts, key config columns, config diff
    heldout.html   one held-out evaluation against another, task by task, with the paired counts
    credit.html    the estimator and its effective options (included by the run, step and episode pages)
    anchors.html   a task group's anchor groups side by side (included by the step page)
    sampler.html   the run's task-sampler decisions (included by the run page)
    prompt.html    an episode's first-prompt inputs: instructions, tools, few-shot examples (episode page)

What this is not: a front end. No JavaScript; hover values are SVG `<title>`s.
"""

# ruff: noqa: E501 (HTML lines are kept whole)
from __future__ import annotations

COMPARE = """{% extends "base.html" %}{% block title %}compare runs{% endblock %}
{% block crumbs %} › compare {{ runs|length }} runs{% endblock %}
{% block body %}<h1>Compare {{ runs|length }} runs</h1>
<table id="compare-runs"><tr><th>run</th><th>task</th><th>status</th><th>model</th><th>estimator</th><th>eval temperature</th><th>group size</th></tr>
{% for r in runs %}<tr><td><a href="/runs/{{ r.id }}">{{ r.label }}</a></td><td>{{ r.task }}</td><td>{{ r.status }}</td>
<td>{{ r.model if r.model is not none else "-" }}</td><td>{{ r.estimator if r.estimator is not none else "-" }}</td>
<td class="num">{{ r.eval_temperature if r.eval_temperature is not none else "-" }}</td><td class="num">{{ r.group_size if r.group_size is not none else "-" }}</td></tr>{% endfor %}
</table>
{% if runs|length >= 2 %}<p><a id="heldout-link" href="/heldout?run_a={{ runs[0].id }}&amp;run_b={{ runs[1].id }}">held-out per task: {{ runs[0].label }} (first evaluation) against {{ runs[1].label }} (last evaluation)</a></p>{% endif %}
<h2>Metrics <small>(one chart per metric, a line per run; hover a point for its value)</small></h2>
<div class="charts">{% for chart in charts %}{{ chart }}{% else %}<p>none of these runs logged a metric yet</p>{% endfor %}</div>
<details><summary>each metric's last value</summary>
<table id="last-values"><tr><th>metric</th>{% for r in runs %}<th>{{ r.label }}</th>{% endfor %}</tr>
{% for name, points in last %}<tr><td>{{ name }}</td>{% for p in points %}<td class="num">{% if p is none %}-{% else %}{{ "%.4g"|format(p[1]) }} <span class="zero">(step {{ p[0] }})</span>{% endif %}</td>{% endfor %}</tr>{% endfor %}
</table></details>
<h2>Config diff</h2>
{% if diff %}<table id="config-diff"><tr><th>key</th>{% for r in runs %}<th>{{ r.label }}</th>{% endfor %}</tr>
{% for key, values in diff %}<tr><td><code>{{ key }}</code></td>{% for v in values %}<td>{% if v is sameas missing %}<i>absent</i>{% else %}<code>{{ v }}</code>{% endif %}</td>{% endfor %}</tr>{% endfor %}
</table>{% else %}<p id="config-diff">the saved configs are identical</p>{% endif %}
{% endblock %}
"""

HELDOUT = """{% extends "base.html" %}{% block title %}held-out per task{% endblock %}
{% block crumbs %} › <a href="/runs/{{ a.run.id }}">{{ a.run.name }}</a> › held-out per task{% endblock %}
{% block body %}<h1>Held-out per task</h1>
<table id="evaluations"><tr><th></th><th>run</th><th>step</th><th>eval temperature</th><th>solved</th><th>other steps</th></tr>
{% for side, e in (("A", a), ("B", b)) %}<tr><td><b>{{ side }}</b></td><td><a href="/runs/{{ e.run.id }}">{{ e.label }}</a></td>
<td class="num">{{ e.step }}</td><td class="num temperature">{{ e.temperature if e.temperature is not none else "not recorded" }}</td>
<td class="num">{{ e.solved[0] }} / {{ e.solved[1] }}</td>
<td>{% for s in e.steps %}{% if s != e.step %}<a href="/heldout?run_a={{ a.run.id }}&amp;step_a={{ s if side == 'A' else a.step }}&amp;run_b={{ b.run.id }}&amp;step_b={{ s if side == 'B' else b.step }}">step {{ s }}</a> {% endif %}{% endfor %}</td></tr>{% endfor %}
</table>
{% if not same_temperature %}<p class="note" id="temperature-warning">The two evaluations sampled at different temperatures ({{ a.temperature }} and {{ b.temperature }}): a change here mixes training with the sampling temperature.</p>{% endif %}
{% if pairs and counts.unpaired == pairs|length %}<p class="note" id="no-shared-tasks">The two evaluations share no scored task (different task suites or splits?): nothing here pairs.</p>{% endif %}
<table id="paired-counts"><tr><th>both solved</th><th>gained (B only)</th><th>lost (A only)</th><th>neither</th><th>unpaired</th></tr>
<tr>{% for c in ("both", "gained", "lost", "neither", "unpaired") %}<td class="num" id="count-{{ c }}">{{ counts[c] }}</td>{% endfor %}</tr></table>
<p class="meta">A task is solved when more than half of its scored episodes succeeded (one episode per task in an evaluation); infrastructure failures are not scored. Unpaired: played or scored on one side only.</p>
<table id="tasks"><tr><th>task</th><th>A</th><th>B</th><th>change</th><th>reward A</th><th>reward B</th></tr>
{% for p in pairs %}<tr class="change-{{ p.change }}"><td>{{ p.task_id }}</td>
{% for o in (p.a, p.b) %}<td>{% if o is none %}<i>not played</i>{% elif not o.scored %}<span class="badge bad">infra</span>{% elif o.solved %}<span class="badge ok">solved</span>{% else %}<span class="badge bad">failed</span>{% endif %}{% if o is not none and o.scored > 1 %} {{ o.successes }}/{{ o.scored }}{% endif %}</td>{% endfor %}
<td class="change">{{ p.change }}</td>
{% for o in (p.a, p.b) %}<td class="num">{{ "%.3f"|format(o.reward) if o is not none and o.scored else "-" }}</td>{% endfor %}</tr>{% endfor %}
</table>
{% endblock %}
"""

CREDIT = """<p class="credit" id="credit">credit: {% if credit.estimator %}<b class="estimator">{{ credit.estimator }}</b>{% for k, v in credit.options.items() %}
· {% if k in credit.given %}<b title="set by this run's credit.options">{{ k }}={{ v }}</b>{% else %}<span title="the estimator's default">{{ k }}={{ v }}</span>{% endif %}{% endfor %}
<span class="zero">(bold: set by the run; the others are the estimator's defaults)</span>{% endif %}
{% if credit.problem %}<span class="badge bad">{{ credit.problem }}</span>{% endif %}</p>
"""

ANCHORS = """{% if anchor_sets %}<details class="anchors"{{ " open" if open_anchors else "" }}><summary>{{ anchor_sets|length }} anchor group(s): turns of this task group taken in the same state{% if credit.estimator and credit.estimator not in ("gigpo", "hgpo", "salt") %} ({{ credit.estimator }} does not use them){% endif %}</summary>
<div class="anchor-sets">{% for key, members in anchor_sets %}<table class="anchor-set"><tr><th colspan="3">state <code>{{ key[:60] }}</code></th></tr>
<tr><th>turn</th><th>{{ "R_t (γ=%s)"|format(credit.gamma) if credit.gamma is not none else "return" }}</th><th>advantage</th></tr>
{% for m in members %}<tr><td><a href="/runs/{{ run.id }}/episodes/{{ m.episode }}#turn-{{ m.turn }}">{{ m.uid }} · {{ m.turn }}</a>{% if m.invalid %} <span class="badge bad">invalid</span>{% endif %}</td>
<td class="num">{{ "%+.3f"|format(m.step_return) if m.step_return is not none else "-" }}</td><td class="num">{{ signed(m.advantage) }}</td></tr>{% endfor %}
</table>{% endfor %}</div></details>{% endif %}
"""

SAMPLER = """{% if sampler.draws %}<h2>Task sampler</h2>
<p class="meta">Which tasks each training step played and why (<code>task_draws</code>): groups per reason and step{% if sampler.steps > sampler.per_step|length %}, the last {{ sampler.per_step|length }} of {{ sampler.steps }} steps{% endif %}.</p>
<table id="sampler-steps"><tr><th>step</th>{% for r in sampler.reasons %}<th>{{ r }}</th>{% endfor %}</tr>
{% for step, counts in sampler.per_step.items() %}<tr><td>{{ step }}</td>{% for r in sampler.reasons %}<td class="num">{{ counts[r] }}</td>{% endfor %}</tr>{% endfor %}
</table>
<details><summary>every draw ({{ sampler.draws|length }})</summary>
<table id="sampler-draws"><tr><th>step</th><th>round</th><th>task</th><th>group</th><th>reason</th><th>successes</th><th>failures</th><th>success rate</th><th>alpha</th><th>beta</th><th>score</th></tr>
{% for d in sampler.draws %}<tr><td>{{ d.step }}</td><td>{{ d.round }}</td><td>{{ d.task_id }}</td><td><code>{{ d.group_id }}</code></td><td>{{ d.reason }}</td>
<td class="num">{{ d.successes }}</td><td class="num">{{ d.failures }}</td>{% for v in (d.success_rate, d.alpha, d.beta, d.score) %}<td class="num">{{ "%.3g"|format(v) if v is not none else "-" }}</td>{% endfor %}</tr>{% endfor %}
</table></details>{% endif %}
"""

PROMPT = """<details class="prompt" id="prompt"><summary>first prompt: instructions, {{ prompt.tools|length }} tool(s), {{ prompt.examples|length }} few-shot example(s); turn 0 had {{ e.turns[0].prompt_tokens if e.turns else 0 }} prompt tokens in all</summary>
<div class="msg env"><b>instructions{{ " (agentrl's default; the run set no rollout.instructions)" if prompt.default_instructions else " (rollout.instructions)" }}</b>
{{ prompt.instructions }}</div>
{% for tool in prompt.tools %}<div class="msg call prompt-tool"><b>tool</b>
{{ tool }}</div>{% endfor %}
{% for example in prompt.examples %}<div class="msg env"><b>few-shot example</b>
{{ example }}</div>{% endfor %}
<details><summary>the system message a chat template without native tool support gets</summary><div class="msg env">{{ prompt.system }}</div></details>
<p class="meta">The model's chat template renders these, then the first observation below (<code>agentrl/agent/prompting.py</code>, <code>render_first_prompt</code>); a template with native tool support gets the instructions as its system message and the tools through the template.</p>
</details>
"""

STYLE = """.change-gained td { background: #e3f4e6; } .change-lost td { background: #fbe3e1; }
.anchor-sets { display: flex; flex-wrap: wrap; gap: 10px; } table.anchor-set { margin: .3em 0; font-size: 12.5px; }
.credit, .group-summary { font-size: 12.5px; color: #444; } .credit b.estimator { font-size: 14px; } .no-signal { color: #b36b00; font-weight: 600; }
"""

TEMPLATES = {
    "analysis.css": STYLE,
    "compare.html": COMPARE,
    "heldout.html": HELDOUT,
    "credit.html": CREDIT,
    "anchors.html": ANCHORS,
    "sampler.html": SAMPLER,
    "prompt.html": PROMPT,
}
"""Template name -> source, merged into the viewer's loader."""
