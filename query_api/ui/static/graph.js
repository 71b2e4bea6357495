// The memory graph (cytoscape + the fcose layout, both from static/vendor): one node per memory,
// one edge per EdgeEvent, coloured by relation view, width and opacity by probability. Views are
// shown one at a time or together, and edges under a probability threshold are hidden; hiding
// never re-runs the layout (Re-layout does, with the edges shown).

import { VIEW_COLORS, VIEWS, speakerColor, snippet } from "./util.js";

const BIG = 300; // above this many nodes: cheaper edges, no labels, draft layout on a backbone
const BACKBONE = 3;

export function graphLibraryLoaded() {
  return typeof window.cytoscape === "function";
}

export class GraphView {
  /** container: the element to draw in; onSelect(nodeId) when a memory is clicked. */
  constructor(container, onSelect) {
    this.container = container;
    this.onSelect = onSelect;
    this.cy = null;
    this.views = new Set(VIEWS);
    this.minP = 0;
  }

  style(big) {
    return [
      { selector: "node", style: {
        "background-color": "data(color)", width: 14, height: 14, "border-width": 1, "border-color": "#fff",
        label: big ? "" : "data(label)", "font-size": 8, color: "#444", "text-valign": "center", "text-halign": "right",
        "text-margin-x": 3, "min-zoomed-font-size": 7 } },
      { selector: "node[kind = 'derived']", style: { shape: "diamond", width: 18, height: 18 } },
      { selector: "edge", style: {
        width: "mapData(p, 0, 1, 0.5, 4)", opacity: "mapData(p, 0, 1, 0.15, 0.85)", "line-color": "data(color)",
        "curve-style": big ? "haystack" : "bezier", "haystack-radius": 0 } },
      { selector: "edge[dir = 'directed']", style: big ? {} : { "target-arrow-shape": "triangle", "target-arrow-color": "data(color)", "arrow-scale": 0.7 } },
      { selector: "edge.labelled", style: { label: "data(label)", "font-size": 8, "text-rotation": "autorotate",
        "text-background-color": "#fff", "text-background-opacity": 0.8, "text-background-padding": 1, opacity: 1 } },
      { selector: ".hidden", style: { display: "none" } },
      { selector: ".faded", style: { opacity: 0.12 } },
      { selector: "node.evidence", style: { "border-width": 4, "border-color": "#e03131", width: 18, height: 18 } },
      { selector: "node:selected", style: { "border-width": 3, "border-color": "#000", width: 20, height: 20 } },
    ];
  }

  /** Draw a conversation: nodes (MemoryNode JSON) and edges (EdgeEvent JSON). */
  load(nodes, edges) {
    if (this.cy) this.cy.destroy();
    const ids = new Set(nodes.map((n) => n.id));
    const elements = nodes.map((n) => ({ group: "nodes", data: {
      id: n.id, label: `${n.seq}`, color: speakerColor(n.speaker), kind: n.kind, title: snippet(n.content, 120) } }));
    for (const e of edges) {
      if (!ids.has(e.source) || !ids.has(e.target)) continue;
      elements.push({ group: "edges", data: {
        id: `e:${e.id}`, source: e.source, target: e.target, view: e.view, p: e.probability, dir: e.direction,
        color: VIEW_COLORS[e.view] || "#999", label: `${e.view} ${e.probability.toFixed(2)}` } });
    }
    const big = nodes.length > BIG;
    this.cy = window.cytoscape({
      container: this.container, elements, style: this.style(big), minZoom: 0.05, maxZoom: 4,
      hideEdgesOnViewport: big, textureOnViewport: big, pixelRatio: big ? 1 : "auto", selectionType: "single",
      boxSelectionEnabled: false,
    });
    this.cy.on("tap", "node", (evt) => this.onSelect(evt.target.id()));
    this.cy.on("tap", (evt) => { if (evt.target === this.cy) this.unfocus(); });
    this.cy.on("mouseover", "edge", (evt) => evt.target.addClass("labelled"));
    this.cy.on("mouseout", "edge", (evt) => { if (!evt.target.data("keep")) evt.target.removeClass("labelled"); });
    this.applyFilter();
    this.layout();
  }

  layout() {
    if (!this.cy || this.cy.nodes().length === 0) return;
    const n = this.cy.nodes().length;
    const shown = n > BIG ? this.cy.nodes().union(this.backbone()) : this.cy.elements().not(".hidden");
    const fcose = typeof window.cytoscapeFcose !== "undefined";
    const opts = fcose
      ? { name: "fcose", quality: n > BIG ? "draft" : "default", randomize: true, animate: false, fit: true, padding: 20,
          nodeRepulsion: 6000, idealEdgeLength: (e) => 40 + 60 * (1 - e.data("p")), edgeElasticity: 0.3, numIter: n > BIG ? 800 : 2500,
          packComponents: true, tile: true }
      : { name: "cose", animate: false, fit: true, padding: 20, numIter: 500 };
    shown.layout(opts).run();
    if (this.cy.zoom() > 2.2) { // a small conversation: do not blow nodes up to fill the pane
      this.cy.zoom(2.2);
      this.cy.center();
    }
  }

  /** The edges a big graph is laid out by: each memory's BACKBONE most probable shown edges. */
  backbone() {
    const keep = new Set();
    this.cy.nodes().forEach((node) => {
      const best = node.connectedEdges().not(".hidden").sort((a, b) => b.data("p") - a.data("p"));
      for (let i = 0; i < Math.min(BACKBONE, best.length); i++) keep.add(best[i].id());
    });
    return this.cy.edges().filter((e) => keep.has(e.id()));
  }

  /** Show only edges of the chosen views at or above the probability threshold. */
  applyFilter() {
    if (!this.cy) return;
    this.cy.batch(() => {
      this.cy.edges().forEach((e) => {
        const on = this.views.has(e.data("view")) && e.data("p") >= this.minP;
        if (on) e.removeClass("hidden"); else e.addClass("hidden");
      });
    });
  }

  setViews(views) {
    this.views = new Set(views);
    this.applyFilter();
  }

  setMinP(p) {
    this.minP = p;
    this.applyFilter();
  }

  counts() {
    if (!this.cy) return { nodes: 0, edges: 0, shown: 0 };
    return { nodes: this.cy.nodes().length, edges: this.cy.edges().length, shown: this.cy.edges().not(".hidden").length };
  }

  /** Select a memory: its edges get probability labels, everything else fades; centred. */
  focus(id) {
    if (!this.cy) return;
    const node = this.cy.getElementById(id);
    if (node.empty()) return;
    this.cy.batch(() => {
      this.cy.elements().removeClass("faded").removeClass("labelled").data("keep", false);
      const near = node.closedNeighborhood();
      const edges = near.edges().not(".hidden");
      this.cy.elements().not(near).addClass("faded");
      if (edges.length <= 16) edges.addClass("labelled").data("keep", true);
      this.cy.elements().unselect();
      node.select();
    });
    const box = this.cy.extent();
    const { x, y } = node.position();
    if (x < box.x1 || x > box.x2 || y < box.y1 || y > box.y2) this.cy.animate({ center: { eles: node }, duration: 200 });
  }

  unfocus() {
    if (!this.cy) return;
    this.cy.batch(() => this.cy.elements().removeClass("faded").removeClass("labelled").data("keep", false).unselect());
  }

  /** Mark the evidence of the last query. */
  highlight(ids) {
    if (!this.cy) return;
    this.cy.batch(() => {
      this.cy.nodes().removeClass("evidence");
      for (const id of ids) this.cy.getElementById(id).addClass("evidence");
    });
  }

  resize() {
    if (this.cy) this.cy.resize();
  }
}
