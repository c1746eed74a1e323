"use strict";
// The proxy's dashboard: GET ../api/summary every second (the proxy reads
// each instance's /metrics for it).
(() => {
  const {el, set, h, num, usageBar, Series, sparkline, histogram, fmtBytes, fmtPct, fmtSecs, fmtGBps, fmtRate} = Dash;
  const reqs = new Series(), pulled = new Series(), inflight = new Series();

  function hist(name, x, color) {
    set(name + "-mean", x.mean, fmtSecs);
    set(name + "-count", x.count);
    histogram(el(name + "-hist"), x.bounds || [], x.counts || [], color, fmtSecs);
  }

  function render(s) {
    const r = s.requests;
    el("protocol").textContent = s.protocol;
    el("prefill-policy").textContent = s.prefill_policy;
    el("decode-policy").textContent = s.decode_policy;
    set("requests", r.total);
    set("requests-ok", r.ok);
    set("requests-errors", r.client_errors + r.server_errors);
    set("requests-4xx", r.client_errors);
    set("requests-5xx", r.server_errors);
    set("in-flight", s.in_flight);
    set("pair-count", s.pairs.length);
    set("healthy", s.instances.filter((i) => i.healthy).length);
    set("instances", s.instances.length);
    set("transfer-gbps", s.transfer.gbps, fmtGBps);
    set("pull-bytes", s.transfer.pull_bytes, fmtBytes);
    set("pulls", s.transfer.pulls);
    set("kv-hit-rate", s.transfer.kv_hit_rate, fmtPct);
    set("no-instance", r.no_instance);
    set("rejected", r.rejected);
    set("disconnects", r.disconnects);

    const t = s.time_unix_ms;
    reqs.push(t, r.total); pulled.push(t, s.transfer.pull_bytes); inflight.push(t, s.in_flight);
    set("request-rate", reqs.lastRate(), fmtRate);
    set("transfer-rate", pulled.lastRate() / 1e9, fmtGBps);
    sparkline(el("request-spark"), reqs.rates(), "#5fb878");
    sparkline(el("transfer-spark"), pulled.rates().map((b) => b / 1e9), "#61a6e0");
    sparkline(el("inflight-spark"), inflight.v, "#e0b84c");
    hist("ttft", s.ttft, "#61a6e0");
    hist("tpot", s.tpot, "#a98ee0");
    hist("first-byte", s.first_byte, "#e0b84c");

    const rows = s.instances.map((i) => {
      const blocks = i.kv_blocks_used + i.kv_blocks_free;
      return h("tr", {"data-testid": "instance-row", "data-role": i.role, "data-url": i.url},
        h("td", {}, h("span", {class: "pill " + i.role}, i.role)),
        h("td", {"data-field": "url"}, i.url),
        h("td", {"data-field": "healthy", "data-value": String(i.healthy)}, h("span", {class: "pill " + (i.healthy ? "ok" : "bad")}, i.healthy ? "healthy" : "down")),
        num("in_flight", i.in_flight),
        num("running", i.running),
        num("waiting", i.waiting),
        h("td", {title: `${i.kv_blocks_used} of ${blocks} blocks used`}, usageBar(i.kv_blocks_used, blocks)),
        num("prefix_hit_rate", i.prefix_hit_rate, fmtPct),
        num("finished", i.finished),
        num(i.role === "decode" ? "pull_bytes" : "push_bytes", i.role === "decode" ? i.pull_bytes : i.push_bytes, fmtBytes),
        h("td", {class: "wrap"}, i.error || i.scrape_error || i.engine_id || ""));
    });
    el("instance-rows").replaceChildren(...(rows.length ? rows : [h("tr", {}, h("td", {class: "empty", colSpan: 11}, "no instance"))]));

    const pairs = s.pairs.map((p) => h("tr", {"data-testid": "pair-row", "data-prefill": p.prefill, "data-decode": p.decode},
      h("td", {class: "wrap"}, p.prefill), h("td", {class: "wrap"}, p.decode), num("in_flight", p.in_flight), num("total", p.total)));
    el("pair-rows").replaceChildren(...(pairs.length ? pairs : [h("tr", {}, h("td", {class: "empty", colSpan: 4}, "no request yet"))]));

    const codes = Object.keys(r.by_code).sort().map((c) => h("tr", {"data-testid": "code-row", "data-code": c},
      h("td", {}, c), num("count", r.by_code[c])));
    el("code-rows").replaceChildren(...(codes.length ? codes : [h("tr", {}, h("td", {class: "empty", colSpan: 2}, "no request yet"))]));
  }

  Dash.poll("../api/summary", 1000, render);
})();
