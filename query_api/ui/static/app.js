// The memory page: sign in with an API key (or the key a --dev-ui server hands over), pick a
// conversation, look at its memories as a graph and on a timeline, click one for everything about
// it, ask a question and read the evidence and the trace, list the tenant's dead letters.

import { Api, ApiError, enc, explain } from "./api.js";
import { GraphView, graphLibraryLoaded } from "./graph.js";
import { renderDeadLetters, renderDetails, renderResult } from "./panels.js";
import { renderList, renderTimeline } from "./timeline.js";
import { VIEW_COLORS, VIEWS, clear, el, speakerColor } from "./util.js";

const $ = (id) => document.getElementById(id);
const KEY = "jevmem.key";
const state = {
  api: null, dev: null, conversation: null, nodes: [], edges: [], decisions: [], byId: new Map(),
  edgesOf: new Map(), decisionsOf: new Map(), timeline: null, selectRow: null, tab: "graph", loadId: 0,
};
const graph = new GraphView($("graph"), select);

function banner(text) {
  $("banner").hidden = !text;
  $("banner").textContent = text || "";
}

function status(text) {
  $("status").textContent = text;
}

function ctx() {
  return { byId: state.byId, edgesOf: state.edgesOf, decisionsOf: state.decisionsOf, onSelect: select };
}

function select(id) {
  const node = state.byId.get(id);
  if (!node) return;
  renderDetails($("detail-body"), node, ctx());
  $("details").scrollTop = 0;
  graph.focus(id);
  state.timeline?.select(id);
  state.selectRow?.(id);
}

// ---- sign in / out -------------------------------------------------------------------------

function showSignIn(message) {
  $("app").hidden = true;
  $("who").hidden = true;
  $("signin").hidden = false;
  $("signin-error").textContent = message || "";
  $("key").focus();
}

async function signIn(key, { remember }) {
  const api = new Api(key);
  let conversations;
  try {
    conversations = await api.get("/v1/conversations");
  } catch (err) {
    if (err instanceof ApiError && err.status === 403) {
      showSignIn("This key lacks the query scope: the page needs a key with query (and admin for dead letters).");
    } else {
      showSignIn(explain(err, "Sign in"));
    }
    sessionStorage.removeItem(KEY);
    return;
  }
  state.api = api;
  if (remember) sessionStorage.setItem(KEY, key);
  $("signin").hidden = true;
  $("app").hidden = false;
  $("who").hidden = false;
  $("identity").textContent = state.dev ? `tenant ${state.dev.tenant_id} (dev mode)` : `key ${key.split("_")[1] || "?"}`;
  fillConversations(conversations);
}

function signOut() {
  sessionStorage.removeItem(KEY);
  state.api = null;
  $("key").value = "";
  $("graph").dataset.nodes = "";
  clear($("result"));
  showSignIn(state.dev ? "Signed out. Reload the page to sign in with the dev key again." : "");
}

function fillConversations(conversations) {
  const select = $("conversation");
  clear(select, conversations.map((c) => el("option", { value: c.conversation_id, text: `${c.conversation_id} (${c.nodes})` })));
  if (!conversations.length) {
    status("This tenant has no conversations yet.");
    if (graphLibraryLoaded()) graph.load([], []);
    $("graph-count").textContent = "0 memories";
    return;
  }
  const wanted = decodeURIComponent(location.hash.replace(/^#c=/, ""));
  select.value = conversations.some((c) => c.conversation_id === wanted) ? wanted : conversations[0].conversation_id;
  loadConversation(select.value);
}

// ---- a conversation ------------------------------------------------------------------------

function index() {
  state.byId = new Map(state.nodes.map((n) => [n.id, n]));
  state.edgesOf = new Map();
  for (const e of state.edges) {
    for (const id of [e.source, e.target]) {
      if (!state.edgesOf.has(id)) state.edgesOf.set(id, []);
      state.edgesOf.get(id).push(e);
    }
  }
  state.decisionsOf = new Map();
  for (const d of state.decisions) {
    for (const id of new Set([d.left, d.right, d.derived_node_id].filter(Boolean))) {
      if (!state.decisionsOf.has(id)) state.decisionsOf.set(id, []);
      state.decisionsOf.get(id).push(d);
    }
  }
}

async function loadConversation(conversation) {
  const loadId = ++state.loadId;
  state.conversation = conversation;
  history.replaceState(null, "", `#c=${enc(conversation)}`);
  status(`loading ${conversation}…`);
  const base = `/v1/conversations/${enc(conversation)}`;
  let nodes, edges, decisions;
  try {
    [nodes, edges, decisions] = await Promise.all([state.api.get(`${base}/nodes`), state.api.get(`${base}/edges`), state.api.get(`${base}/decisions`)]);
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) return showSignIn(explain(err, "Loading the conversation"));
    status("");
    banner(explain(err, "Loading the conversation"));
    return;
  }
  if (loadId !== state.loadId) return; // another conversation was chosen meanwhile
  banner(missingVendorMessage());
  Object.assign(state, { nodes, edges, decisions });
  index();
  clear($("detail-body"), el("p", { class: "hint", text: "Click a memory in the graph, the timeline or the evidence." }));
  clear($("result"));
  const t0 = performance.now();
  if (graphLibraryLoaded()) graph.load(nodes, edges);
  else clear($("graph"), el("p", { class: "error empty", text: missingVendorMessage() || "The graph library did not load." }));
  state.timeline = null;
  if (state.tab === "timeline") drawTimeline();
  updateCount();
  status(`${nodes.length} memories, ${edges.length} edges, ${decisions.length} decisions · drawn in ${Math.round(performance.now() - t0)} ms`);
  if (state.tab === "dead") loadDeadLetters();
}

/** id -> contents of the memories that superseded it (the conversation's `supersedes` edges). */
function supersededMap() {
  const content = new Map(state.nodes.map((n) => [n.id, n.content]));
  const out = new Map();
  for (const e of state.edges) {
    if (e.label !== "supersedes" || !content.has(e.source)) continue;
    out.set(e.target, [...(out.get(e.target) || []), content.get(e.source)]);
  }
  return out;
}

function drawTimeline() {
  state.timeline = renderTimeline($("timeline"), state.nodes, select, supersededMap());
  state.selectRow = renderList($("memory-list"), state.nodes, select);
}

function updateCount() {
  const c = graphLibraryLoaded() ? graph.counts() : { nodes: state.nodes.length, edges: state.edges.length, shown: 0 };
  const speakers = [...new Set(state.nodes.map((n) => n.speaker || ""))].slice(0, 8);
  clear($("graph-count"), `${c.nodes} memories · ${c.shown} of ${c.edges} edges shown `, speakers.map((s) => {
    const dot = el("span", { class: "dot" });
    dot.style.background = speakerColor(s);
    return el("span", { class: "legend" }, dot, ` ${s || "(no speaker)"}`);
  }));
  $("graph").dataset.nodes = String(c.nodes);
}

// ---- graph controls ------------------------------------------------------------------------

function buildViewToggles() {
  const box = $("view-toggles");
  const inputs = VIEWS.map((v) => el("input", { type: "checkbox", value: v, checked: true, onchange: applyViews }));
  clear(box, VIEWS.map((v, i) => {
    const dot = el("span", { class: "dot" });
    dot.style.background = VIEW_COLORS[v];
    const only = el("button", { type: "button", title: `Show only ${v} edges`, onclick: () => {
      inputs.forEach((inp) => { inp.checked = inp.value === v; });
      applyViews();
    } }, "only");
    return el("label", { class: "chip" }, inputs[i], dot, v, only);
  }), el("button", { type: "button", onclick: () => { inputs.forEach((i) => { i.checked = true; }); applyViews(); } }, "all"));
  function applyViews() {
    graph.setViews(inputs.filter((i) => i.checked).map((i) => i.value));
    updateCount();
  }
}

// ---- ask -----------------------------------------------------------------------------------

async function ask(event) {
  event.preventDefault();
  const question = $("question").value.trim();
  if (!question || !state.conversation) return;
  const topK = Math.max(1, Math.min(50, Number($("top-k").value) || 10));
  clear($("result"), el("p", { class: "hint", text: "Asking…" }));
  try {
    const result = await state.api.post("/v1/query", { conversation_id: state.conversation, question, top_k: topK });
    renderResult($("result"), result, ctx());
    const ids = result.evidence.map((e) => e.node_id);
    graph.highlight(ids);
    state.timeline?.highlight(ids);
  } catch (err) {
    clear($("result"), el("p", { class: "error", text: explain(err, "The query") }));
  }
}

// ---- dead letters --------------------------------------------------------------------------

async function loadDeadLetters() {
  try {
    renderDeadLetters($("dead"), await state.api.get("/v1/dead-letters?limit=200"));
  } catch (err) {
    const message = err instanceof ApiError && err.status === 403
      ? "Dead letters need the admin scope, which this key does not have. Sign in with a key made with --scopes query,admin."
      : explain(err, "Loading the dead letters");
    renderDeadLetters($("dead"), [], message);
  }
}

// ---- tabs and start ------------------------------------------------------------------------

function showTab(tab) {
  state.tab = tab;
  for (const b of document.querySelectorAll(".tabs button")) b.classList.toggle("active", b.dataset.tab === tab);
  for (const t of ["graph", "timeline", "dead"]) $(`tab-${t}`).hidden = t !== tab;
  if (tab === "graph") graph.resize();
  if (tab === "timeline" && !state.timeline) drawTimeline();
  if (tab === "dead") loadDeadLetters();
}

let vendorMissing = [];
function missingVendorMessage() {
  if (!vendorMissing.length && graphLibraryLoaded()) return "";
  const files = vendorMissing.length ? vendorMissing.join(", ") : "cytoscape";
  return `The graph library is not built (${files} missing from query_api/ui/static/vendor): run scripts/ui-build (or scripts/setup). The timeline, evidence and trace still work.`;
}

async function start() {
  for (const b of document.querySelectorAll(".tabs button")) b.addEventListener("click", () => showTab(b.dataset.tab));
  $("signin-form").addEventListener("submit", (e) => { e.preventDefault(); signIn($("key").value.trim(), { remember: true }); });
  $("signout").addEventListener("click", signOut);
  $("conversation").addEventListener("change", (e) => loadConversation(e.target.value));
  $("ask-form").addEventListener("submit", ask);
  $("min-p").addEventListener("input", (e) => {
    $("min-p-out").textContent = Number(e.target.value).toFixed(2);
    graph.setMinP(Number(e.target.value));
    updateCount();
  });
  $("relayout").addEventListener("click", () => graph.layout());
  window.addEventListener("resize", () => { graph.resize(); if (state.tab === "timeline") drawTimeline(); });
  buildViewToggles();
  let config = { missing_vendor_files: [], dev: null };
  try {
    config = await (await fetch("config.json", { cache: "no-store" })).json();
  } catch {
    // an old server without config.json: sign in by hand
  }
  vendorMissing = config.missing_vendor_files || [];
  banner(missingVendorMessage());
  state.dev = config.dev;
  const saved = sessionStorage.getItem(KEY);
  if (config.dev) await signIn(config.dev.key, { remember: false });
  else if (saved) await signIn(saved, { remember: true });
  else showSignIn("");
}

start();
