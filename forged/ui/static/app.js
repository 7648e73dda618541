// The memory browser: plain JavaScript, no framework and no build step (see index.html).
// Every value the daemon sends was pushed by someone else and is hostile: the DOM is built
// with textContent and attributes only, never innerHTML, so a turn holding <script> is text.
"use strict";

// This run's session secret: given once, with the page the printed URL opened, then kept in this
// tab alone (sessionStorage is per origin, port included, and per tab) and sent in a header. No
// cookie: a browser hands a cookie of 127.0.0.1 to every server on 127.0.0.1, whatever its port.
const SESSION = (() => {
  const meta = document.querySelector('meta[name="session"]');
  if (meta.content) sessionStorage.setItem("forged-session", meta.content);
  meta.remove();
  history.replaceState(null, "", "/"); // the spent token leaves the address bar and the history
  return sessionStorage.getItem("forged-session");
})();
const PAGE = 1000; // rows asked for per listing page
const KINDS = ["decision", "correction", "preference", "state", "event", "profile"]; // of facts
const NO_FILTER = { kind: "", since: "", until: "" }; // kind: "", "summary" or one of KINDS
const state = { scope: null, tab: "timeline", history: false, scopes: [], filter: { ...NO_FILTER },
                turns: [], facts: [], summaries: [] };

// el("div", {class: "x", onclick: f}, child, "text", ...): an element; strings become text nodes.
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name === "height") node.style.height = value; // CSSOM: the CSP refuses style attributes
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function toast(message, error) {
  const box = document.getElementById("toast");
  box.textContent = message;
  box.className = error ? "toast error" : "toast";
  box.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { box.hidden = true; }, 4000);
}

async function api(method, path, params, body) {
  const url = new URL("/api" + path, location.origin);
  for (const [k, v] of Object.entries(params || {})) if (v !== null && v !== undefined) url.searchParams.set(k, v);
  const init = { method, headers: { "X-Forged-Session": SESSION }, credentials: "omit" };
  if (body !== undefined) { init.headers["Content-Type"] = "application/json"; init.body = JSON.stringify(body); }
  const response = await fetch(url, init);
  const answer = await response.json().catch(() => ({}));
  if (!response.ok) {
    const message = (answer.error && answer.error.message) || response.statusText;
    toast(message, true);
    throw new Error(message);
  }
  return answer;
}

async function all(path, key, params) {
  const rows = [];
  let after = null;
  do {
    const page = await api("GET", path, { ...params, limit: PAGE, after });
    rows.push(...page[key]);
    after = page.next;
  } while (after);
  return rows;
}

const day = (at) => (at || "").slice(0, 10);
const clock = (at) => (at || "").slice(11, 16);
function longDay(d) {
  const date = new Date(d + "T12:00:00Z");
  return isNaN(date) ? d : date.toLocaleDateString("en-GB", { weekday: "short", day: "numeric", month: "short", year: "numeric", timeZone: "UTC" });
}
const span = (a, b) => (day(a) === day(b) ? day(a) : `${day(a)} – ${day(b)}`);
const speaker = (m) => m.name || m.role;
const badge = (kind) => el("span", { class: `badge kind-${kind}` }, kind);

// The scopes, with their counts; the box above them narrows the list as one types.
async function loadScopes() {
  ({ scopes: state.scopes } = await api("GET", "/v1/scopes"));
  showScopes();
}

const typed = () => document.getElementById("find-scope").value.trim();
const matching = () => state.scopes.filter((s) => s.scope.toLowerCase().includes(typed().toLowerCase()));

function showScopes() {
  const list = document.getElementById("scopes");
  const shown = matching();
  list.replaceChildren();
  if (!state.scopes.length) list.append(el("li", { class: "muted" }, "Nothing remembered yet."));
  else if (!shown.length) list.append(el("li", { class: "muted" }, `No scope holds “${typed()}”.`));
  for (const s of shown) {
    list.append(el("li", {},
      el("button", { type: "button", class: s.scope === state.scope ? "active" : null, "data-scope": s.scope,
                     onclick: () => openScope(s.scope) },
        el("span", { class: "name" }, s.scope),
        el("span", { class: "counts" }, `${s.interactions} turns · ${s.facts} facts · ${s.summaries} summaries`),
        el("span", { class: "counts" }, s.last_at ? `last: ${day(s.last_at)}` : ""))));
  }
}

// Enter in the box opens the scope typed, or the one scope that holds what is typed.
function findScope(e) {
  e.preventDefault();
  const shown = matching();
  const pick = state.scopes.find((s) => s.scope === typed()) || (shown.length === 1 ? shown[0] : null);
  if (pick) openScope(pick.scope);
  else if (shown.length) toast(`${shown.length} scopes hold “${typed()}”: pick one`, true);
  else toast(`No scope holds “${typed()}”`, true);
}

async function openScope(scope) {
  state.scope = scope;
  closeDetail();
  await loadScopes();
  await reload();
}

// What the scope holds, through the filters: a kind shows memory of that kind alone (no turns).
let loads = 0; // the latest load: an answer to an older one, arriving late, is dropped
async function loadMemory() {
  const ticket = ++loads;
  const { scope, filter: { kind, since, until } } = state;
  const history = state.history ? "true" : null;
  const when = { since: since || null, until: until || null };
  const none = Promise.resolve([]);
  const memory = await Promise.all([
    kind ? none : all("/v1/interactions", "interactions", { scope, ...when }),
    kind === "summary" ? none : all("/v1/facts", "facts", { scope, history, kind: kind || null, ...when }),
    kind && kind !== "summary" ? none : all("/v1/summaries", "summaries", { scope, history, ...when }),
  ]);
  if (ticket !== loads) return false;
  [state.turns, state.facts, state.summaries] = memory;
  return true;
}

async function reload() {
  if (await loadMemory()) render();
}

const filtered = () => Boolean(state.filter.kind || state.filter.since || state.filter.until);

function filterBar() {
  const f = state.filter;
  const typing = (date) => /^0/.test(date); // a year half typed (0002, 0020, 0202): wait for it
  const apply = async () => {
    if (typing(since.value) || typing(until.value)) return;
    state.filter = { kind: kind.value, since: since.value, until: until.value };
    await reload();
  };
  const kind = el("select", { id: "filter-kind", onchange: apply }, el("option", { value: "" }, "everything"),
    el("option", { value: "summary", selected: f.kind === "summary" }, "summaries"),
    KINDS.map((k) => el("option", { value: k, selected: f.kind === k }, `${k} facts`)));
  const since = el("input", { type: "date", id: "filter-since", value: f.since, onchange: apply });
  const until = el("input", { type: "date", id: "filter-until", value: f.until, onchange: apply });
  return el("div", { class: "toolbar filters", id: "filters" },
    el("label", {}, "Show ", kind), el("label", {}, "from ", since), el("label", {}, "to ", until),
    filtered() ? el("button", { type: "button", id: "filter-clear", onclick: () => { state.filter = { ...NO_FILTER }; reload(); } }, "clear") : null);
}

// Forgetting a whole scope: everything it holds, once the person confirms.
async function forgetScope() {
  const scope = state.scope;
  if (!window.confirm(`Forget the scope “${scope}”: every turn, summary and fact it holds? This cannot be undone.`)) return;
  const path = encodeURIComponent(scope).replace(/\./g, "%2E"); // `.` and `..` are no path segment
  const { deleted: d } = await api("DELETE", `/v1/scopes/${path}`);
  toast(`Forgot ${scope}: ${d.interactions} turns, ${d.summaries} summaries, ${d.facts} facts`);
  state.scope = null;
  closeDetail();
  document.getElementById("main").replaceChildren(el("p", { class: "muted", id: "pick" }, "Pick a scope to see what forged remembers of it."));
  await loadScopes();
}

function render() {
  const main = document.getElementById("main");
  const tab = (name, label) => el("button", { type: "button", class: state.tab === name ? "active" : null,
                                              id: `tab-${name}`, onclick: () => { state.tab = name; render(); } }, label);
  const body = state.tab === "search" ? searchView() : timelineView();
  const shown = `${state.turns.length} turns · ${state.facts.filter((f) => !f.superseded_by).length} current facts · ${state.summaries.length} summaries`;
  main.replaceChildren(
    el("div", { class: "scope-head" }, el("h2", { id: "scope-title" }, state.scope),
       el("span", { class: "muted", id: "scope-counts" }, filtered() ? `${shown} shown` : shown),
       el("button", { type: "button", class: "danger", id: "forget-scope", onclick: forgetScope }, "Forget scope…")),
    filterBar(),
    el("div", { class: "tabs" }, tab("timeline", "Timeline"), tab("search", "Search & context")),
    body);
}

// The timeline: a strip with a bar per day, then each day's memory beside what was said.
function byDay() {
  const days = new Map();
  const at = (d) => { if (!days.has(d)) days.set(d, { turns: [], facts: [], summaries: [] }); return days.get(d); };
  for (const t of state.turns) at(day(t.timestamp)).turns.push(t);
  for (const f of state.facts) at(day(f.first_at)).facts.push(f);
  for (const s of state.summaries) at(day(s.first_at)).summaries.push(s);
  return [...days.entries()].sort((a, b) => (a[0] < b[0] ? -1 : 1));
}

function timelineView() {
  const days = byDay();
  const most = Math.max(1, ...days.map(([, d]) => d.turns.length + d.facts.length));
  const strip = el("div", { class: "strip", id: "strip" }, days.map(([d, items]) =>
    el("div", { class: "day", title: `${longDay(d)}: ${items.turns.length} turns, ${items.facts.length} facts`,
                onclick: () => document.getElementById(`day-${d}`).scrollIntoView({ behavior: "smooth" }) },
      el("span", { class: "lbl" }, new Date(d + "T12:00:00Z").toLocaleDateString("en-GB", { day: "numeric", month: "short", timeZone: "UTC" })),
      el("div", { class: "bar-turns", height: `${(56 * items.turns.length) / most}px` }),
      el("div", { class: "bar-facts", height: `${(56 * items.facts.length) / most}px` }))));
  const toolbar = el("div", { class: "toolbar" },
    el("label", {}, el("input", { type: "checkbox", id: "show-history", checked: state.history,
                                  onchange: (e) => { state.history = e.target.checked; reload(); } }),
       " show superseded facts"),
    el("button", { type: "button", id: "add-fact", onclick: addFactForm }, "+ Add a fact"));
  const legend = el("p", { class: "legend" }, el("span", {}, el("i", { class: "sw-turns" }), "turns"),
                    el("span", {}, el("i", { class: "sw-facts" }), "facts"),
                    el("span", {}, `${days.length} days, ${days[0] ? longDay(days[0][0]) : ""} to ${days.length ? longDay(days[days.length - 1][0]) : ""}`));
  if (!days.length) return el("p", { class: "muted", id: "empty" }, filtered() ? "Nothing here matches the filters." : "This scope holds nothing yet.");
  return el("div", { id: "timeline" }, toolbar, strip, legend, days.map(([d, items]) => dayBox(d, items)));
}

function dayBox(d, items) {
  const said = state.filter.kind ? null : el("div", { class: "col" }, el("h3", {}, "Said"), turnList(items.turns));
  return el("section", { class: said ? "daybox" : "daybox memory-only", id: `day-${d}`, "data-day": d },
    el("div", { class: "date" }, el("b", {}, longDay(d)),
       el("span", {}, `${items.turns.length} turns · ${items.facts.length} facts`)),
    el("div", { class: "col" }, el("h3", {}, "Remembered"),
       items.summaries.map(summaryCard), items.facts.map(factCard),
       items.summaries.length + items.facts.length ? null : el("p", { class: "muted" }, "nothing distilled")),
    said);
}

// A day's turns: the first few, and the rest one click away (the memory is what to read first).
const TURNS_SHOWN = 6;
function turnList(turns) {
  const box = el("div", { class: "turns" }, turns.slice(0, TURNS_SHOWN).map((t) => turnRow(t)));
  if (turns.length > TURNS_SHOWN) {
    const more = el("button", { type: "button", class: "more", onclick: () => {
      more.replaceWith(...turns.slice(TURNS_SHOWN).map((t) => turnRow(t)));
    } }, `show all ${turns.length} turns`);
    box.append(more);
  }
  return box;
}

function factCard(f) {
  const classes = ["card", "fact", `k-${f.kind}`, f.superseded_by ? "superseded" : ""].join(" ");
  return el("div", { class: classes, "data-fact": f.id, onclick: () => openFact(f.id) },
    badge(f.kind), f.text,
    el("div", { class: "meta" }, el("span", {}, `fact #${f.id}`), el("span", {}, span(f.first_at, f.last_at)),
       f.pinned ? el("span", { class: "tag" }, "pinned") : null,
       f.source === "user" ? el("span", { class: "tag" }, "by user") : null,
       f.superseded_by ? el("span", { class: "tag" }, `superseded by #${f.superseded_by} (${f.superseded_reason})`) : null));
}

function summaryCard(s) {
  const text = el("div", { class: "clamp" }, badge("summary"), s.text);
  return el("div", { class: "card summary", "data-summary": s.id, title: "click to read it all",
                     onclick: () => text.classList.toggle("clamp") }, text,
    el("div", { class: "meta" }, el("span", {}, `summary #${s.id}`), el("span", {}, span(s.first_at, s.last_at)),
       el("button", { type: "button", class: "danger", "data-delete-summary": s.id,
                      onclick: (e) => { e.stopPropagation(); remove("summary", s.id); } }, "delete")));
}

function turnRow(t, highlight) {
  return el("div", { class: highlight ? "turn hl" : "turn", "data-turn": t.seq },
    el("span", { class: "time" }, clock(t.timestamp)),
    el("div", {}, t.messages.map((m) => el("div", { class: "text" }, el("span", { class: "who" }, speaker(m) + ": "), m.text))),
    el("button", { type: "button", class: "danger", title: "delete this turn", "data-delete-turn": t.seq,
                   onclick: () => remove("interaction", t.seq) }, "×"));
}

// A fact with its sources and history, and what can be done with it.
async function openFact(id) {
  const audit = await api("GET", `/v1/facts/${id}`, { scope: state.scope });
  const f = audit.fact;
  // Its turns, asked for by its time span: the filters may have left them out of the timeline.
  const near = await all("/v1/interactions", "interactions", { scope: state.scope, since: f.first_at, until: f.last_at });
  const sources = near.filter((t) => t.seq >= f.first_seq && t.seq <= f.last_seq);
  const panel = document.getElementById("detail");
  panel.hidden = false;
  const history = [
    ...audit.replaced.map((c) => el("div", { class: "card superseded-history" }, badge(c.fact.kind), c.fact.text,
        el("div", { class: "meta" }, `replaced (${c.action}, ${c.reason}) · #${c.fact.id} · ${span(c.fact.first_at, c.fact.last_at)}`))),
    audit.replaced_by ? el("div", { class: "card" }, badge(audit.replaced_by.fact.kind), audit.replaced_by.fact.text,
        el("div", { class: "meta" }, `replaced this (${audit.replaced_by.action}, ${audit.replaced_by.reason}) · #${audit.replaced_by.fact.id}`)) : null,
  ].filter(Boolean);
  panel.replaceChildren(
    el("button", { type: "button", class: "close", onclick: closeDetail }, "close"),
    el("h2", {}, `Fact #${f.id}`),
    el("div", {}, badge(f.kind), f.pinned ? el("span", { class: "tag" }, "pinned") : null, " ",
       f.source === "user" ? el("span", { class: "tag" }, "written by the user") : null),
    el("p", { class: "facttext", id: "fact-text" }, f.text),
    el("div", { class: "meta muted" }, `about ${span(f.first_at, f.last_at)} · stored ${day(f.created_at)} · seen ${f.seen_count}×`),
    el("div", { class: "actions" },
      f.superseded_by ? null : el("button", { type: "button", id: "correct", onclick: () => correctForm(f) }, "Correct"),
      el("button", { type: "button", id: "pin", onclick: () => pin(f) }, f.pinned ? "Unpin" : "Pin"),
      el("button", { type: "button", class: "danger", id: "delete-fact", onclick: () => remove("fact", f.id) }, "Delete")),
    el("div", { id: "correct-box" }),
    el("section", { id: "sources" }, el("h2", {}, f.source === "user" ? "Source: the user" : `Sources (${sources.length} turns)`),
       sources.map((t) => el("div", {}, el("div", { class: "muted small" }, longDay(day(t.timestamp))), turnRow(t, true)))),
    el("section", { id: "history" }, el("h2", {}, "History"),
       history.length ? history : el("p", { class: "muted" }, "never changed")));
}

function closeDetail() {
  const panel = document.getElementById("detail");
  panel.hidden = true;
  panel.replaceChildren();
}

function correctForm(f) {
  const text = el("textarea", { id: "correct-text" }, f.text);
  const kind = el("select", { id: "correct-kind" }, ["decision", "correction", "preference", "state", "event", "profile"]
    .map((k) => el("option", { value: k, selected: k === f.kind }, k)));
  const form = el("form", { class: "inline", onsubmit: async (e) => {
    e.preventDefault();
    const audit = await api("POST", `/v1/facts/${f.id}/correct`, { scope: state.scope }, { text: text.value, kind: kind.value });
    toast(`Corrected: fact #${audit.fact.id} replaces #${f.id}`);
    await refresh();
    await openFact(audit.fact.id);
  } }, el("label", {}, "What it should say"), text, kind, el("button", { type: "submit", class: "primary", id: "correct-save" }, "Save correction"));
  document.getElementById("correct-box").replaceChildren(form);
  text.focus();
}

async function pin(f) {
  await api(f.pinned ? "DELETE" : "PUT", `/v1/facts/${f.id}/pin`, { scope: state.scope });
  toast(f.pinned ? "Unpinned" : "Pinned: consolidation will never retire it");
  await refresh();
  await openFact(f.id);
}

async function remove(item, id) {
  const what = item === "interaction" ? "this turn (and the facts resting on it alone)" : `${item} #${id}`;
  if (!window.confirm(`Erase ${what} for good? This cannot be undone.`)) return;
  const erased = await api("DELETE", `/v1/${item === "fact" ? "facts" : item === "summary" ? "summaries" : "interactions"}/${id}`, { scope: state.scope });
  const d = erased.deleted;
  toast(`Erased ${d.interactions} turns, ${d.summaries} summaries, ${d.facts} facts`);
  if (item === "fact") closeDetail();
  await refresh();
}

function addFactForm() {
  const text = el("textarea", { id: "add-text", placeholder: "One self-contained sentence" });
  const kind = el("select", { id: "add-kind" }, ["state", "event", "profile", "preference", "decision", "correction"].map((k) => el("option", { value: k }, k)));
  const at = el("input", { type: "text", id: "add-at", placeholder: "when (2023-05-25T10:00:00Z), empty: now" });
  const panel = document.getElementById("detail");
  panel.hidden = false;
  panel.replaceChildren(el("button", { type: "button", class: "close", onclick: closeDetail }, "close"), el("h2", {}, "Add a fact"),
    el("form", { class: "inline", onsubmit: async (e) => {
      e.preventDefault();
      const audit = await api("POST", "/v1/facts", {}, { text: text.value, kind: kind.value, scope: state.scope, at: at.value || null });
      toast(`Added fact #${audit.fact.id}`);
      await refresh();
      await openFact(audit.fact.id);
    } }, text, kind, at, el("button", { type: "submit", class: "primary" }, "Add")));
}

async function refresh() {
  await loadScopes();
  await reload();
}

// Search, and the context block an agent would be given for a question.
function searchView() {
  const q = el("input", { type: "text", id: "query", placeholder: "a question or a few words", value: state.query || "" });
  const { kind, since, until } = state.filter;
  const filters = { scope: state.scope, kind: kind || null, since: since || null, until: until || null };
  const out = el("div", { id: "search-out", class: "results" });
  const run = async (context) => {
    state.query = q.value;
    if (!q.value.trim()) return;
    if (context) {
      const answer = await api("GET", "/v1/context", { q: q.value, ...filters });
      out.replaceChildren(el("p", { class: "muted" }, `${answer.tokens} tokens, ${answer.items.length} items`), el("pre", { class: "block", id: "context-block" }, answer.text));
      return;
    }
    const { results } = await api("GET", "/v1/search", { q: q.value, ...filters, limit: 20 });
    out.replaceChildren(...(results.length ? results.map(resultCard) : [el("p", { class: "muted" }, "Nothing matches.")]));
  };
  return el("div", {},
    el("form", { class: "toolbar", onsubmit: (e) => { e.preventDefault(); run(false); } }, q,
       el("button", { type: "submit", class: "primary", id: "search" }, "Search"),
       el("button", { type: "button", id: "context", onclick: () => run(true) }, "Context block")),
    out);
}

function resultCard(r) {
  const open = r.type === "fact" ? () => openFact(r.id) : null;
  return el("div", { class: `card ${r.type === "fact" ? "fact" : ""} k-${r.kind}`, "data-result": `${r.type}-${r.id}`, onclick: open },
    badge(r.type === "fact" ? r.kind : r.type), r.text,
    el("div", { class: "meta" }, el("span", {}, `${r.type} #${r.id}`), el("span", {}, span(r.first_at, r.last_at)),
       el("span", {}, `score ${r.score.toFixed(3)}`)));
}

// Status: observers, watermarks, backlog, the batch in flight, dead letters.
async function showStatus() {
  const [status, dead] = await Promise.all([api("GET", "/v1/status"), api("GET", "/v1/dead-letters", { all_scopes: "true" })]);
  const main = document.getElementById("main");
  const row = (o) => el("tr", {}, el("td", {}, o.name), el("td", {}, o.state), el("td", {}, o.watermark), el("td", {}, o.backlog),
    el("td", {}, o.batch ? `${o.batch.interactions} turns, ${o.batch.tokens} tokens, for ${o.batch.elapsed_s.toFixed(1)} s` : "—"),
    el("td", {}, o.batches), el("td", {}, o.dead_letters), el("td", {}, o.last_error || ""));
  main.replaceChildren(
    el("div", { class: "scope-head" }, el("h2", {}, "Status"), el("span", { class: "muted" },
       `forged ${status.version} · ${status.store.backend} · ${status.log.count} turns, last seq ${status.log.last_seq}`)),
    el("div", { class: "wide" }, el("table", { id: "observers" }, el("tr", {}, ["observer", "state", "watermark", "backlog", "batch in flight", "batches", "dead letters", "last error"].map((h) => el("th", {}, h))),
       status.observers.map(row))),
    el("h3", {}, `Dead letters (${dead.dead_letters.length})`),
    dead.dead_letters.length ? el("div", { class: "wide" }, el("table", { id: "dead-letters" }, el("tr", {}, ["seq", "scope", "since", "reason"].map((h) => el("th", {}, h))),
      dead.dead_letters.map((d) => el("tr", {}, el("td", {}, d.seq), el("td", {}, d.scope), el("td", {}, d.created_at.slice(0, 19)), el("td", {}, d.reason))))) : el("p", { class: "muted" }, "none"),
    dead.dead_letters.length ? el("button", { type: "button", id: "redistill", onclick: async () => {
      const report = await api("POST", "/v1/dead-letters/redistill");
      toast(`Redistilled ${report.redistilled}, still failing ${report.still_failing}`);
      await showStatus();
    } }, "Redistill all") : ""); // replaceChildren writes a null out as the text "null"
}

if (SESSION) {
  document.getElementById("nav-status").addEventListener("click", () => { state.scope = null; closeDetail(); loadScopes(); showStatus(); });
  document.getElementById("find-scope").addEventListener("input", showScopes);
  document.getElementById("find-form").addEventListener("submit", findScope);
  loadScopes();
} else {
  document.body.replaceChildren(el("p", { id: "no-session" }, "no valid session: open the URL forged ui printed"));
}
