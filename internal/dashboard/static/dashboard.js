"use strict";
// Dash: what the dashboard pages share. Numbers are shown in elements
// named by data-testid, each keeping the raw number in data-value (what
// the browser test compares with the JSON); polling; SVG sparklines and
// histograms drawn by hand.
const Dash = (() => {
  const SVGNS = "http://www.w3.org/2000/svg";

  const el = (id) => document.querySelector(`[data-testid="${id}"]`);

  function fmtInt(n) { return String(Math.round(Number(n))); }
  function fmtBytes(n) {
    const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let v = Number(n), i = 0;
    while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    if (i === 0) return Math.round(v) + " B";
    return v.toFixed(v < 10 ? 2 : v < 100 ? 1 : 0) + " " + units[i];
  }
  function fmtPct(r) { return (100 * Number(r)).toFixed(1) + "%"; }
  function fmtSecs(s) {
    s = Number(s);
    if (s === 0) return "0 ms";
    if (s < 1) return (s * 1000).toFixed(s < 0.01 ? 2 : 1) + " ms";
    return s.toFixed(2) + " s";
  }
  // fmtGBps shows a bandwidth given in GB/s, in MB/s below 1 GB/s.
  function fmtGBps(x) {
    x = Number(x);
    if (x < 1) return (x * 1000).toFixed(x < 0.01 ? 2 : 1) + " MB/s";
    return x.toFixed(x < 10 ? 2 : 1) + " GB/s";
  }
  function fmtRate(x) { return Number(x).toFixed(Number(x) < 10 ? 1 : 0) + "/s"; }

  // set shows value, formatted, in the element data-testid=id (or the
  // element itself) and keeps the raw number in its data-value.
  function set(target, value, fmt) {
    const e = typeof target === "string" ? el(target) : target;
    if (!e) return;
    e.dataset.value = String(value);
    e.textContent = (fmt || fmtInt)(value);
  }

  // h builds an element: h("td", {class: "num"}, "text" | node, ...).
  function h(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v;
      else if (k.startsWith("data-")) e.setAttribute(k, v);
      else e[k] = v;
    }
    for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
    return e;
  }

  // num is a cell showing a number: data-field names it in its row.
  function num(field, value, fmt, tag) {
    const e = h(tag || "td", {class: "num", "data-field": field});
    set(e, value, fmt);
    return e;
  }

  function usageBar(used, cap) {
    const r = cap > 0 ? used / cap : 0;
    const fill = h("div", {class: "fill" + (r > 0.9 ? " full" : r > 0.7 ? " warn" : "")});
    fill.style.width = Math.min(100, 100 * r).toFixed(1) + "%";
    return h("div", {class: "bar"}, fill);
  }

  // Series keeps the last n samples of a value (for sparklines) and the
  // rate of a counter between the last two samples.
  class Series {
    constructor(n = 90) { this.n = n; this.t = []; this.v = []; }
    push(t, v) {
      this.t.push(t); this.v.push(Number(v));
      if (this.t.length > this.n) { this.t.shift(); this.v.shift(); }
    }
    rates() {
      const out = [];
      for (let i = 1; i < this.v.length; i++) {
        const dt = (this.t[i] - this.t[i - 1]) / 1000;
        out.push(dt > 0 ? Math.max(0, this.v[i] - this.v[i - 1]) / dt : 0);
      }
      return out;
    }
    lastRate() { const r = this.rates(); return r.length ? r[r.length - 1] : 0; }
  }

  function clear(svg) { while (svg.firstChild) svg.removeChild(svg.firstChild); }
  function svgEl(tag, attrs) {
    const e = document.createElementNS(SVGNS, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    return e;
  }

  // sparkline draws values as a line over a filled area in svg.
  function sparkline(svg, values, color) {
    clear(svg);
    const W = 300, H = 54;
    svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
    svg.setAttribute("preserveAspectRatio", "none");
    if (values.length < 2) {
      svg.append(Object.assign(svgEl("text", {x: W / 2, y: H / 2, "text-anchor": "middle"}), {textContent: "collecting…"}));
      return;
    }
    const max = Math.max(...values, 1e-12);
    const pts = values.map((v, i) => [i * W / (values.length - 1), H - 2 - (H - 4) * v / max]);
    const d = pts.map((p, i) => (i ? "L" : "M") + p[0].toFixed(1) + " " + p[1].toFixed(1)).join(" ");
    svg.append(svgEl("path", {class: "area", d: d + ` L${W} ${H} L0 ${H} Z`, fill: color}));
    svg.append(svgEl("path", {class: "line", d, stroke: color, "vector-effect": "non-scaling-stroke"}));
  }

  // histogram draws the non-cumulative counts of buckets with upper bounds
  // (the last count is above the last bound) as bars, labelled with fmt.
  function histogram(svg, bounds, counts, color, fmt) {
    clear(svg);
    const W = 320, H = 150, B = 18;
    svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
    if (!counts || !counts.length) {
      svg.append(Object.assign(svgEl("text", {x: W / 2, y: H / 2, "text-anchor": "middle"}), {textContent: "no data yet"}));
      return;
    }
    const max = Math.max(...counts, 1);
    const bw = W / counts.length;
    counts.forEach((c, i) => {
      const bh = (H - B - 12) * c / max;
      const r = svgEl("rect", {x: (i * bw + 1).toFixed(1), y: (H - B - bh).toFixed(1), width: Math.max(1, bw - 2).toFixed(1),
        height: bh.toFixed(1), fill: color, rx: 1});
      const title = svgEl("title", {});
      title.textContent = (i < bounds.length ? "≤ " + fmt(bounds[i]) : "> " + fmt(bounds[bounds.length - 1])) + ": " + c;
      r.append(title);
      svg.append(r);
      if (c > 0) {
        const t = svgEl("text", {x: (i * bw + bw / 2).toFixed(1), y: (H - B - bh - 2).toFixed(1), "text-anchor": "middle"});
        t.textContent = String(c);
        svg.append(t);
      }
      if (i % Math.ceil(counts.length / 6) === 0 && i < bounds.length) {
        const t = svgEl("text", {x: (i * bw + bw / 2).toFixed(1), y: H - 4, "text-anchor": "middle"});
        t.textContent = fmt(bounds[i]);
        svg.append(t);
      }
    });
  }

  // poll fetches url every ms milliseconds and renders the JSON. The
  // status element says whether the last fetch worked; body's data-renders
  // counts the renders. window.dashboardRefresh() fetches and renders once
  // more, resolving when done (the browser test uses it).
  function poll(url, ms, render) {
    let renders = 0;
    let current = Promise.resolve();
    let pending = 0;
    const status = el("status");
    async function once() {
      try {
        const r = await fetch(url, {cache: "no-store", signal: AbortSignal.timeout(Math.max(5000, 3 * ms))});
        if (!r.ok) throw new Error(`${url}: HTTP ${r.status}`);
        const data = await r.json();
        render(data);
        renders++;
        document.body.dataset.renders = String(renders);
        status.textContent = "live";
        status.className = "status live";
        el("updated").textContent = "updated " + new Date().toLocaleTimeString();
      } catch (e) {
        status.textContent = "error: " + e.message;
        status.className = "status error";
      }
    }
    function tick() {
      pending++;
      current = current.then(once).finally(() => pending--);
      return current;
    }
    window.dashboardRefresh = tick;
    tick();
    setInterval(() => { if (pending === 0) tick(); }, ms);
  }

  return {el, set, h, num, usageBar, Series, sparkline, histogram, poll,
    fmtInt, fmtBytes, fmtPct, fmtSecs, fmtGBps, fmtRate};
})();
