// Small DOM and formatting helpers. Untrusted text (memory content, ids, reasons) only ever goes
// into the page as text nodes: `el` never sets innerHTML.

export const VIEWS = ["semantic", "temporal", "causal", "entity"];
export const VIEW_COLORS = { semantic: "#2f6fde", temporal: "#13a10e", causal: "#d9480f", entity: "#8e44ad" };
const PALETTE = ["#4c78a8", "#e45756", "#54a24b", "#b279a2", "#f58518", "#72b7b2", "#9d755d", "#eeca3b", "#ff9da6", "#2ca02c"];

/** el("div", {class: "x", text: "y", onclick: f}, child, "text", null) -> HTMLElement. */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "text") node.textContent = String(value);
    else if (name === "class") node.className = value;
    else if (name.startsWith("on") && typeof value === "function") node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** The same colour for a speaker everywhere (graph, timeline, lists). */
export function speakerColor(speaker) {
  const s = speaker || "";
  let h = 0;
  for (let i = 0; i < s.length; i++) h = (h * 31 + s.charCodeAt(i)) >>> 0;
  return s ? PALETTE[h % PALETTE.length] : "#888";
}

export const p2 = (p) => (typeof p === "number" ? p.toFixed(2) : "–");
export const p3 = (p) => (typeof p === "number" ? p.toFixed(3) : "–");

/** "2023-05-08 13:56" from an ISO datetime (UTC as sent by the API), "" for none. */
export function when(iso) {
  return iso ? String(iso).replace("T", " ").slice(0, 16) : "";
}

export function snippet(text, n = 90) {
  const s = String(text ?? "").replace(/\s+/g, " ").trim();
  return s.length > n ? `${s.slice(0, n - 1)}…` : s;
}

/** A labelled horizontal bar for a probability in [0, 1]. */
export function bar(label, value, color) {
  const v = Math.max(0, Math.min(1, Number(value) || 0));
  const fill = el("div", { class: "fill" });
  fill.style.width = `${(v * 100).toFixed(1)}%`;
  if (color) fill.style.background = color;
  return el("div", { class: "bar" }, el("span", { text: label }), el("div", { class: "track" }, fill), el("span", { text: p2(value) }));
}

/** A link that selects a memory. */
export function nodeLink(node, onSelect, label) {
  const text = label ?? (node ? `#${node.seq} ${snippet(node.content, 60)}` : "(not in this conversation)");
  return el("a", { class: "node", title: node ? node.content : "", onclick: () => node && onSelect(node.id) }, text);
}

export function clear(node, ...children) {
  node.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined));
  return node;
}
