// The side panels: one memory in full, a query's evidence and whole trace, the dead letters.
// ctx = {byId: Map(id -> node), edgesOf: Map(id -> [edge]), decisionsOf: Map(id -> [decision]), onSelect(id)}.

import { VIEW_COLORS, bar, clear, el, nodeLink, p2, p3, when } from "./util.js";

const TYPES = ["episodic", "semantic", "procedural", "preference"];

function meta(pairs) {
  return el("dl", { class: "meta" }, pairs.filter(([, v]) => v !== null && v !== undefined && v !== "")
    .flatMap(([k, v]) => [el("dt", { text: k }), el("dd", {}, v)]));
}

function table(head, rows) {
  return el("table", {}, el("thead", {}, el("tr", {}, head.map((h) => el("th", { text: h })))),
    el("tbody", {}, rows.map((r) => el("tr", {}, r.map((c) => el("td", {}, c))))));
}

function refText(r) {
  return `“${r.text}” → ${r.start}${r.end !== r.start ? ` … ${r.end}` : ""} (${r.granularity})`;
}

/** One memory: text, speaker, times, type scores, entities, grounded dates, edges, decisions. */
export function renderDetails(container, node, ctx) {
  const link = (id) => nodeLink(ctx.byId.get(id), ctx.onSelect, ctx.byId.has(id) ? undefined : id);
  const edges = [...(ctx.edgesOf.get(node.id) || [])].sort((a, b) => b.probability - a.probability);
  const decisions = ctx.decisionsOf.get(node.id) || [];
  clear(container,
    el("div", {}, el("span", { class: "speaker", text: node.speaker || "(no speaker)" }),
      el("span", { class: "when", text: `#${node.seq} · ${node.kind} · ${when(node.observed_at)}` })),
    el("p", { class: "content", id: "detail-content" }, node.content),
    meta([["id", node.id], ["event", node.event_id], ["observed", when(node.observed_at)], ["event date", node.event_time],
      ["role", node.role], ["tokens", (node.tokens || []).length || null]]),
    el("h3", { text: "Type scores" }),
    ...TYPES.map((t) => bar(t, node.types?.[t] ?? 0)),
    (node.entities || []).length ? el("h3", { text: "Entities" }) : null,
    el("div", {}, (node.entities || []).map((e) => el("span", { class: "chip", title: e.id, text: e.name }))),
    el("h3", { text: "Grounded dates" }),
    (node.temporal_refs || []).length
      ? el("ul", {}, node.temporal_refs.map((r) => el("li", { text: refText(r) })))
      : el("p", { class: "hint", text: "No time expressions." }),
    (node.derived_from || []).length ? el("h3", { text: "Derived from" }) : null,
    (node.derived_from || []).length ? el("ul", {}, node.derived_from.map((id) => el("li", {}, link(id)))) : null,
    el("h3", { text: `Edges (${edges.length})` }),
    edges.length ? table(["view", "", "memory", "p"], edges.map((e) => {
      const out = e.source === node.id;
      const arrow = e.direction === "undirected" ? "—" : out ? "→" : "←";
      const dot = el("span", { class: "dot", title: e.view });
      dot.style.background = VIEW_COLORS[e.view] || "#999";
      return [el("span", { class: "nowrap" }, dot, ` ${e.view}`), arrow,
        el("span", {}, link(out ? e.target : e.source), el("div", { class: "scores", text: `${e.label} · by ${e.created_by}` })),
        el("b", { text: p2(e.probability) })];
    })) : el("p", { class: "hint", text: "No edges." }),
    el("h3", { text: `Consolidation decisions (${decisions.length})` }),
    decisions.length ? table(["run", "with", "chosen", "redundant", "contradiction", "obsolete", "link useful", "representation"],
      decisions.map((d) => [String(d.run), link(d.left === node.id ? d.right : d.left),
        d.derived_node_id ? el("span", {}, `${d.chosen} → `, link(d.derived_node_id)) : d.chosen,
        p2(d.redundant), p2(d.contradiction), p2(d.obsolete), p2(d.link_useful),
        Object.entries(d.representation || {}).map(([k, v]) => `${k} ${p2(v)}`).join(", ")]))
      : el("p", { class: "hint", text: "None." }),
  );
}

/** A query's evidence (ranked) and its whole trace. */
export function renderResult(container, result, ctx) {
  const tr = result.trace;
  const scoreOf = new Map(result.evidence.map((e) => [e.node_id, e.score]));
  const evidence = el("ol", { class: "evidence", id: "evidence" }, result.evidence.map((e) => el("li", { onclick: () => ctx.onSelect(e.node_id) },
    el("div", {}, el("span", { class: "speaker", text: e.speaker || "" }), el("span", { class: "when", text: `#${e.seq} ${when(e.observed_at)}` }),
      el("span", { class: "scores", text: `score ${p3(e.score)} · relevance ${p2(e.relevance)} · via ${e.via}` })),
    el("div", {}, e.content),
    (e.temporal_refs || []).length ? el("div", { class: "scores", text: e.temporal_refs.map(refText).join("; ") }) : null)));
  const expanded = (ids) => ids.length ? el("span", {}, ids.flatMap((id, i) => [i ? ", " : "",
    nodeLink(ctx.byId.get(id), ctx.onSelect, ctx.byId.has(id) ? `#${ctx.byId.get(id).seq}` : id.slice(0, 8)),
    scoreOf.has(id) ? ` (${p3(scoreOf.get(id))})` : ""])) : "–";
  clear(container,
    result.answer ? el("p", {}, el("b", { text: "Answer: " }), result.answer) : null,
    el("h3", { text: `Evidence (${result.evidence.length})` }),
    result.evidence.length ? evidence : el("p", { class: "hint", text: "No evidence found." }),
    el("div", { id: "trace" },
      el("h3", { text: "Trace" }),
      el("p", {}, "Stop: ", el("span", { class: "stop", id: "stop-reason", text: tr.stop_reason }),
        ` · depth ${tr.depth} · anchors ${tr.anchors} · visited ${tr.visited} · edges examined ${tr.examined_edges}` +
        ` · controller calls ${tr.controller_calls}`),
      el("h3", { text: "Route" }),
      ...Object.entries(tr.route).sort((a, b) => b[1] - a[1]).map(([k, v]) => bar(k, v, VIEW_COLORS[k])),
      el("p", {}, "Active views: ", tr.active_views.join(", ") || "none", " · budgets: ",
        Object.entries(tr.budgets).map(([k, v]) => `${k} ${v}`).join(", ") || "none"),
      el("h3", { text: `Rounds (${tr.rounds.length})` }),
      tr.rounds.length ? el("ol", { class: "rounds" }, tr.rounds.map((r) => el("li", {},
        el("div", {}, el("b", { text: `round ${r.round}` }), ` · edges examined ${r.examined_edges} · added ${r.added}`,
          r.stop ? el("span", { class: "stop", text: ` · stop: ${r.stop}` }) : null),
        el("div", { class: "scores", text: `assess: ${Object.entries(r.assess).map(([k, v]) => `${k} ${p2(v)}`).join(", ")}` }),
        el("div", {}, "beam expanded (final score): ", expanded(r.expanded)))))
        : el("p", { class: "hint", text: "No expansion rounds." }),
      el("h3", { text: "Timings (ms)" }),
      el("p", {}, Object.entries(tr.timings_ms).map(([k, v]) => `${k} ${v.toFixed(1)}`).join(" · ")),
      el("details", {}, el("summary", { text: "Raw trace (JSON)" }), el("pre", { text: JSON.stringify(tr, null, 2) }))),
  );
}

/** The tenant's dead letters, or why they cannot be shown (403: the key lacks admin). */
export function renderDeadLetters(container, letters, error) {
  if (error) {
    container.replaceChildren(el("p", { class: "error", id: "dead-error", text: error }));
    return;
  }
  if (!letters.length) {
    container.replaceChildren(el("p", { class: "hint", text: "No dead letters for this tenant." }));
    return;
  }
  container.replaceChildren(el("p", { class: "count", text: `${letters.length} dead letter${letters.length === 1 ? "" : "s"} (newest last)` }),
    table(["received", "source", "reason", "original"], letters.map((d) => [when(d.received_at), d.source, d.reason,
      el("pre", { title: d.truncated ? `truncated: ${d.original_bytes} bytes in all` : "" },
        d.truncated ? `${d.original}\n… (${d.original_bytes} bytes in all)` : d.original)])));
}
