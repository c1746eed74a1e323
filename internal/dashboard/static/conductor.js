"use strict";
// The conductor's dashboard: GET ../api/summary every second.
(() => {
  const {el, set, h, num, Series, sparkline, fmtRate} = Dash;
  const blocks = new Series(), queries = new Series(), batches = new Series();

  function render(s) {
    const q = s.queries || {};
    const total = Object.values(q).reduce((a, b) => a + b, 0);
    el("seed").textContent = String(s.seed);
    set("blocks", s.blocks);
    el("max-blocks").textContent = s.max_blocks > 0 ? String(s.max_blocks) : "none";
    set("context-count", s.context_count);
    set("publisher-count", s.publishers.length);
    set("queries", total);
    set("query-errors", total - (q["200"] || 0));
    const t = s.time_unix_ms;
    blocks.push(t, s.blocks);
    queries.push(t, total);
    batches.push(t, s.publishers.reduce((a, p) => a + p.batches, 0));
    set("query-rate", queries.lastRate(), fmtRate);
    sparkline(el("blocks-spark"), blocks.v, "#61a6e0");
    sparkline(el("query-spark"), queries.rates(), "#5fb878");
    sparkline(el("batch-spark"), batches.rates(), "#e0b84c");

    const ctxs = s.contexts.map((c) => h("tr", {"data-testid": "context-row", "data-model": c.model_name},
      h("td", {}, c.tenant_id), h("td", {}, c.model_name), h("td", {}, c.lora_name || "–"), h("td", {}, c.additional_salt || "–"),
      num("block_size", c.block_size), num("prefix_count", c.prefix_count),
      num("gpu", (c.blocks || {}).GPU || 0), num("cpu", (c.blocks || {}).CPU || 0), num("disk", (c.blocks || {}).DISK || 0),
      h("td", {class: "wrap"}, Object.keys(c.instances).sort().map((i) => `${i} (${c.instances[i].join(", ")})`).join(" · "))));
    el("context-rows").replaceChildren(...(ctxs.length ? ctxs : [h("tr", {}, h("td", {class: "empty", colSpan: 10}, "no block indexed yet"))]));

    const pubs = s.publishers.map((p) => h("tr", {"data-testid": "publisher-row", "data-key": p.key},
      h("td", {class: "wrap"}, p.key), h("td", {}, h("span", {class: "pill"}, p.type)), h("td", {}, p.modelname + " / " + p.block_size),
      num("blocks", p.blocks), num("stored", p.stored), num("removed", p.removed), num("removed_unknown", p.removed_unknown),
      num("refused", p.refused), num("clears", p.clears), num("batches", p.batches), num("gaps", p.gaps), num("replayed", p.replayed),
      h("td", {class: "wrap"}, p.endpoint)));
    el("publisher-rows").replaceChildren(...(pubs.length ? pubs : [h("tr", {}, h("td", {class: "empty", colSpan: 13}, "no publisher registered"))]));
  }

  Dash.poll("../api/summary", 1000, render);
})();
