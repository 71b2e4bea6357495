// The timeline: one lane per speaker, each memory a dot at its observation time (or at its seq
// when the conversation has no times), and a "grounded dates" lane with the dates its time
// expressions were grounded to, joined to the memory by a faint line. Plain SVG: a conversation
// of 1,000 memories is 1,000 circles.

import { el, snippet, speakerColor, when } from "./util.js";

const NS = "http://www.w3.org/2000/svg";
const DAY = 86400000;
const LANE = 26;
const LEFT = 110;

function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== null && v !== undefined) node.setAttribute(k, String(v));
  node.append(...children);
  return node;
}

function dateMs(d) {
  return Date.parse(`${d}T00:00:00Z`);
}

/**
 * Draw `nodes` (MemoryNode JSON, any order) into `container`; returns {select(id), highlight(ids)}.
 * onSelect(id) is called when a dot is clicked. `superseded` (Map: id -> contents of the memories that
 * superseded it) draws those memories hollow, with what replaced them in their tooltip.
 */
export function renderTimeline(container, nodes, onSelect, superseded = new Map()) {
  const sorted = [...nodes].sort((a, b) => a.seq - b.seq);
  const timed = sorted.some((n) => n.observed_at);
  const at = (n) => (timed ? (n.observed_at ? Date.parse(n.observed_at) : null) : n.seq);
  const refs = [];
  for (const n of sorted) for (const r of n.temporal_refs || []) refs.push({ node: n, ref: r, start: dateMs(r.start), end: dateMs(r.end) + DAY });
  const xs = sorted.map(at).filter((t) => t !== null);
  if (timed) for (const r of refs) xs.push(r.start, r.end);
  const speakers = [...new Set(sorted.map((n) => n.speaker || "—"))];
  const width = Math.max(600, container.clientWidth - 16);
  const height = 30 + (speakers.length + 1) * LANE + 24;
  const root = svg("svg", { width, height, role: "img", "aria-label": "timeline of memories" });
  if (xs.length === 0) {
    container.replaceChildren(el("p", { class: "hint", text: "No memories." }));
    return { select() {}, highlight() {} };
  }
  let lo = Math.min(...xs);
  let hi = Math.max(...xs);
  if (hi === lo) { lo -= timed ? DAY : 1; hi += timed ? DAY : 1; }
  const x = (t) => LEFT + ((t - lo) / (hi - lo)) * (width - LEFT - 16);
  const laneY = (i) => 20 + i * LANE + LANE / 2;

  // lanes and axis
  const lanes = ["grounded dates", ...speakers];
  lanes.forEach((name, i) => {
    root.append(svg("line", { x1: LEFT, x2: width - 8, y1: laneY(i), y2: laneY(i), stroke: "#e3e6eb" }));
    root.append(svg("text", { x: 4, y: laneY(i) + 4, "font-size": 11, fill: i ? speakerColor(name === "—" ? "" : name) : "#667085" },
      snippet(name, 16)));
  });
  const axisY = height - 12;
  for (let i = 0; i <= 6; i++) {
    const t = lo + ((hi - lo) * i) / 6;
    const label = timed ? new Date(t).toISOString().slice(0, 10) : `#${Math.round(t)}`;
    root.append(svg("text", { x: x(t), y: axisY, "font-size": 10, fill: "#667085", "text-anchor": i === 0 ? "start" : i === 6 ? "end" : "middle" }, label));
  }

  // grounded dates: a bar per time expression, a faint line to its memory
  const dots = new Map();
  const laneOf = new Map(speakers.map((s, i) => [s, i + 1]));
  if (timed) {
    for (const { node, ref, start, end } of refs) {
      const t = at(node);
      if (t !== null) root.append(svg("line", { x1: x(t), y1: laneY(laneOf.get(node.speaker || "—")), x2: x((start + end) / 2), y2: laneY(0), stroke: "#13a10e", "stroke-opacity": 0.25 }));
      const rect = svg("rect", { x: x(start), y: laneY(0) - 5, width: Math.max(3, x(end) - x(start)), height: 10, fill: "#13a10e", "fill-opacity": 0.55 },
        svg("title", {}, `“${ref.text}” → ${ref.start}${ref.end !== ref.start ? ` … ${ref.end}` : ""} (${ref.granularity}) — #${node.seq} ${snippet(node.content, 80)}`));
      rect.addEventListener("click", () => onSelect(node.id));
      root.append(rect);
    }
  }
  for (const n of sorted) {
    const t = at(n);
    if (t === null) continue;
    const newer = superseded.get(n.id);
    const tip = `#${n.seq} ${when(n.observed_at)} ${n.speaker || ""}: ${snippet(n.content, 160)}` +
      (newer ? ` — superseded by: ${newer.map((c) => snippet(c, 80)).join(" | ")}` : "");
    const dot = svg("circle", { cx: x(t), cy: laneY(laneOf.get(n.speaker || "—")), r: n.kind === "derived" ? 6 : 4.5,
      fill: newer ? "#ffffff" : speakerColor(n.speaker), stroke: newer ? speakerColor(n.speaker) : null,
      "stroke-width": newer ? 1.5 : null, class: newer ? "superseded" : null, "data-id": n.id }, svg("title", {}, tip));
    dot.addEventListener("click", () => onSelect(n.id));
    dots.set(n.id, dot);
    root.append(dot);
  }
  container.replaceChildren(root, timed ? "" : el("p", { class: "hint", text: "No observation times: memories are placed by their order (seq)." }));

  let selected = null;
  return {
    select(id) {
      if (selected) selected.classList.remove("selected");
      selected = dots.get(id) || null;
      if (selected) selected.classList.add("selected");
    },
    highlight(ids) {
      for (const d of dots.values()) d.classList.remove("evidence");
      for (const id of ids) dots.get(id)?.classList.add("evidence");
    },
  };
}

/** The memories in order, one row each; returns select(id). */
export function renderList(container, nodes, onSelect) {
  const rows = new Map();
  const items = [...nodes].sort((a, b) => a.seq - b.seq).map((n) => {
    const li = el("li", { value: n.seq, onclick: () => onSelect(n.id) },
      el("span", { class: "when", text: when(n.observed_at) }), el("span", { class: "speaker", text: n.speaker || "" }),
      n.kind === "derived" ? el("em", { text: "derived: " }) : null, snippet(n.content, 200));
    rows.set(n.id, li);
    return li;
  });
  container.replaceChildren(...items);
  let selected = null;
  return (id) => {
    selected?.classList.remove("selected");
    selected = rows.get(id) || null;
    selected?.classList.add("selected");
  };
}
