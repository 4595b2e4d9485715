"""One self-contained HTML page of episodes (`envgym view`): no network, no CDN, the CSS and script inline.

The page lists every episode with its reward and failure label, filters them by env, task, reward and failure, and
opens one (also from the URL: `report.html#ep=3`) to show the conversation with its tool calls and results, the
guard's verdicts, the calls that broke a rule, the world-state diff against the task's target, the reward
components, the answer checks and the per-call rewards. Every value reaches the page through `textContent`, never as
markup, so a tool result that holds HTML shows as text.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from typing import Any

from envgym.view.explain import COMPONENT_MEANING, Explanation
from envgym.view.records import EpisodeRecord


def episode_data(index: int, record: EpisodeRecord, why: Explanation) -> dict[str, Any]:
    """One episode as the page's script reads it."""
    return {"index": index, "env": record.env, "task_id": record.task_id, "seed": record.seed,
            "attack": record.attack, "reward": record.reward, "success": record.success, "steps": record.steps,
            "components": record.components, "messages": record.messages, "source": record.source,
            **why.to_dict()}


def render_page(episodes: Sequence[tuple[EpisodeRecord, Explanation]], *, title: str) -> str:
    """The page for `episodes` (in the order given)."""
    data = [episode_data(i, r, w) for i, (r, w) in enumerate(episodes)]
    # "<" escaped so that no value can close the script element that carries the data.
    payload = json.dumps({"episodes": data, "meaning": COMPONENT_MEANING}, ensure_ascii=False, default=str)
    payload = payload.replace("<", "\\u003c")
    return (_PAGE.replace("__TITLE__", html.escape(title)).replace("__CSS__", _CSS).replace("__JS__", _JS)
            .replace("__DATA__", payload))


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>__TITLE__</title><style>__CSS__</style></head>
<body>
<header><h1>__TITLE__</h1><span id="count"></span></header>
<main>
<nav>
  <div class="filters">
    <label>env <select id="f-env"><option value="">all</option></select></label>
    <label>task <input id="f-task" type="search" placeholder="task id contains"></label>
    <label>reward <select id="f-reward"><option value="">all</option><option value="pass">passed (1.0)</option>
      <option value="fail">failed (&lt; 1.0)</option></select></label>
    <label>failure <select id="f-failure"><option value="">all</option></select></label>
  </div>
  <ol id="list"></ol>
</nav>
<section id="detail"><p class="hint">Choose an episode on the left.</p></section>
</main>
<script id="data" type="application/json">__DATA__</script>
<script>__JS__</script>
</body></html>
"""

_CSS = """
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1d2430; background: #f4f6f9; }
header { display: flex; align-items: baseline; gap: 1em; padding: .6em 1.2em; background: #1d2430; color: #fff; }
header h1 { font-size: 1.1em; margin: 0; }
main { display: grid; grid-template-columns: 340px 1fr; height: calc(100vh - 2.6em); }
nav { border-right: 1px solid #d5dae1; overflow-y: auto; background: #fff; }
.filters { display: grid; gap: .35em; padding: .7em; border-bottom: 1px solid #d5dae1; position: sticky; top: 0;
  background: #fff; }
.filters label { display: grid; grid-template-columns: 4.5em 1fr; align-items: center; font-size: .9em; }
#list { list-style: none; margin: 0; padding: 0; }
#list li { padding: .45em .7em; border-bottom: 1px solid #eef0f3; cursor: pointer; }
#list li:hover { background: #eef4ff; }
#list li.open { background: #dce8ff; }
#list .meta { color: #5a6472; font-size: .85em; }
.badge { display: inline-block; padding: 0 .45em; border-radius: 8px; font-size: .8em; margin-left: .3em; }
.pass { background: #d8f5dd; color: #17612a; } .fail { background: #fde0dd; color: #8c1d13; }
.label { background: #fff1cc; color: #7a5300; }
#detail { overflow-y: auto; padding: 1em 1.6em 3em; }
#detail h2 { margin: .2em 0 .4em; font-size: 1.2em; } #detail h3 { margin: 1.4em 0 .4em; font-size: 1em; }
.msg { margin: .35em 0; padding: .45em .7em; border-radius: 6px; background: #fff; border: 1px solid #e1e5ea;
  white-space: pre-wrap; word-break: break-word; }
.msg .role { font-weight: 600; font-size: .8em; text-transform: uppercase; color: #5a6472; display: block; }
.user { border-left: 4px solid #2e9e52; } .assistant { border-left: 4px solid #2f6fd6; }
.tool { border-left: 4px solid #9aa3ad; margin-left: 2em; font-family: ui-monospace, monospace; font-size: .85em; }
.system { border-left: 4px solid #c6ccd4; color: #5a6472; }
.call { font-family: ui-monospace, monospace; font-size: .88em; background: #eef4ff; padding: .25em .5em;
  border-radius: 4px; margin-top: .3em; display: block; }
.error { background: #fff3f1; }
.flag { margin: .2em 0 .2em 2em; padding: .3em .6em; border-radius: 4px; font-size: .88em; }
.held { background: #fff1cc; } .broke { background: #fde0dd; }
table { border-collapse: collapse; background: #fff; }
th, td { border: 1px solid #d5dae1; padding: .25em .6em; text-align: left; vertical-align: top;
  font-family: ui-monospace, monospace; font-size: .85em; }
th { background: #eef0f3; font-family: inherit; }
.ok { color: #17612a; } .bad { color: #8c1d13; font-weight: 600; }
.note { color: #5a6472; font-style: italic; }
.hint { color: #5a6472; }
details summary { cursor: pointer; color: #2f6fd6; }
"""

_JS = r"""
"use strict";
const DATA = JSON.parse(document.getElementById("data").textContent);
const EPISODES = DATA.episodes;
const $ = (id) => document.getElementById(id);
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}
const fmt = (r) => (r === null || r === undefined) ? "ungraded" : Number(r).toFixed(3);
const json = (v) => v === undefined || v === null ? "—" : JSON.stringify(v);
const FOLD = 600;

function fillSelect(id, values) {
  for (const v of [...new Set(values)].sort()) $(id).append(el("option", {value: v}, v));
}
fillSelect("f-env", EPISODES.map((e) => e.env));
fillSelect("f-failure", EPISODES.map((e) => e.failure).filter((f) => f));

function visible(e) {
  const env = $("f-env").value, task = $("f-task").value.trim(), reward = $("f-reward").value,
        failure = $("f-failure").value;
  return (!env || e.env === env) && (!task || e.task_id.includes(task)) &&
         (!reward || (reward === "pass") === e.success) && (!failure || e.failure === failure);
}

function drawList() {
  const list = $("list");
  list.replaceChildren();
  let shown = 0;
  for (const e of EPISODES) {
    if (!visible(e)) continue;
    shown += 1;
    const item = el("li", {"data-index": e.index},
      el("div", {}, `#${e.index} ${e.task_id}`,
         el("span", {class: "badge " + (e.success ? "pass" : "fail")}, fmt(e.reward)),
         ...(e.failure ? [el("span", {class: "badge label"}, e.failure)] : [])),
      el("div", {class: "meta"}, `${e.env} · seed ${e.seed} · ${e.steps} steps` + (e.attack ? ` · attack ${e.attack}` : "")));
    item.addEventListener("click", () => { location.hash = "ep=" + e.index; });
    list.append(item);
  }
  $("count").textContent = `${shown} of ${EPISODES.length} episodes`;
  markOpen();
}

function currentIndex() {
  const m = /ep=(\d+)/.exec(location.hash);
  return m ? Number(m[1]) : null;
}
function markOpen() {
  for (const li of $("list").children) li.classList.toggle("open", Number(li.dataset.index) === currentIndex());
}

function callText(call) {
  const fn = call.function || call;
  let args = fn.arguments;
  if (typeof args !== "string") args = JSON.stringify(args);
  return `${fn.name}(${args})`;
}

function foldable(text, summary) {
  if (text.length <= FOLD && !summary) return document.createTextNode(text);
  const details = el("details", {}, el("summary", {}, summary || `${text.slice(0, 160)}… (${text.length} characters)`));
  details.append(document.createTextNode(text));
  return details;
}

function conversation(e) {
  const box = el("div", {id: "conversation"});
  const broke = {};
  for (const [rule, indices] of Object.entries(e.violations || {}))
    for (const i of indices) (broke[i] = broke[i] || []).push(rule);
  const held = {};
  for (const h of e.guard || []) (held[h.message === null ? -1 : h.message] = held[h.message === null ? -1 : h.message] || []).push(h);
  e.messages.forEach((m, i) => {
    const content = String(m.content || "");
    const role = m.role;
    const node = el("div", {class: `msg ${role}` + (role === "tool" && /^guard:|"error"/.test(content.slice(0, 40)) ? " error" : "")},
      el("span", {class: "role"}, role === "tool" ? `tool result · ${m.name || ""}` : role));
    if (role === "system") node.append(foldable(content, `system prompt (${content.length} characters)`));
    else if (content) node.append(role === "tool" ? foldable(content) : document.createTextNode(content));
    for (const c of m.tool_calls || []) node.append(el("span", {class: "call"}, "→ " + callText(c)));
    box.append(node);
    for (const rule of broke[i] || [])
      box.append(el("div", {class: "flag broke"}, `✗ broke ${rule}: ${DATA.meaning[rule] || ""}`));
    for (const h of held[i] || [])
      box.append(el("div", {class: "flag held"},
        `⚑ guard held ${h.tool} (${h.approved ? "approved" : "denied"}): ${(h.reasons || []).join("; ")}`));
  });
  return box;
}

function table(id, head, rows) {
  const t = el("table", {id});
  t.append(el("tr", {}, ...head.map((h) => el("th", {}, h))));
  for (const r of rows) t.append(el("tr", {}, ...r.map((c) => el("td", {}, c))));
  return t;
}

function open(index) {
  const e = EPISODES[index];
  const d = $("detail");
  d.replaceChildren();
  if (!e) { d.append(el("p", {class: "hint"}, "Choose an episode on the left.")); return; }
  d.append(el("h2", {}, `${e.env} · ${e.task_id}`),
    el("div", {class: "meta"}, `seed ${e.seed} · ${e.steps} steps · reward `,
      el("span", {class: "badge " + (e.success ? "pass" : "fail")}, fmt(e.reward)),
      ...(e.failure ? [el("span", {class: "badge label"}, e.failure)] : []), ` · ${e.source}`));
  d.append(el("h3", {}, "Reward components"));
  d.append(table("components", ["component", "value", "meaning"], Object.entries(e.components).map(([k, v]) =>
    [k, el("span", {class: v >= 1 ? "ok" : "bad"}, (v >= 1 ? "✓ " : "✗ ") + v), v >= 1 ? "" : (DATA.meaning[k] || "")])));
  const answers = (e.answers || []).filter((a) => !a.ok);
  if (answers.length) {
    d.append(el("h3", {}, "Answers"));
    d.append(table("answers", ["type", "expected", "not said", "wrong choices", "other values offered"],
      answers.map((a) => [a.type, json(a.expected), json(a.missing), json(a.wrong_choices), json(a.extra)])));
  }
  d.append(el("h3", {}, "World state against the task's target"));
  if (e.replay_note) d.append(el("p", {class: "note"}, e.replay_note));
  else if (!e.diff.length) d.append(el("p", {class: "ok", id: "diff"}, "The final state equals the target."));
  else d.append(table("diff", ["entity", "key", "field", "", "episode", "target"],
    e.diff.map((c) => [c.entity, c.key, c.field || "", c.kind, json(c.episode), json(c.target)])));
  for (const n of e.notes || []) d.append(el("p", {class: "note"}, n));
  d.append(el("h3", {}, "Conversation"), conversation(e));
  if ((e.tool_call_rewards || []).length) {
    d.append(el("h3", {}, "Per-call rewards"));
    d.append(table("call-rewards", ["turn", "tool", "valid", "needed", "redundant", "error", "reward"],
      e.tool_call_rewards.map((r) => [r.step, r.name, r.valid, r.needed, r.redundant, r.error, r.reward])));
  }
  markOpen();
}

for (const id of ["f-env", "f-task", "f-reward", "f-failure"]) $(id).addEventListener("input", drawList);
window.addEventListener("hashchange", () => open(currentIndex()));
drawList();
if (currentIndex() !== null) open(currentIndex());
"""
