"use strict";
// The master's dashboard: GET ../api/summary every second.
(() => {
  const {el, set, h, num, usageBar, Series, sparkline, fmtBytes, fmtPct, fmtRate} = Dash;
  const used = new Series(), disk = new Series(), puts = new Series(), gets = new Series(), evictions = new Series();

  function render(s) {
    const c = s.counters;
    set("keys", s.keys);
    set("objects", s.objects);
    set("replicas", s.replicas);
    set("replica-bytes", s.memory.bytes, fmtBytes);
    set("pending-puts", s.pending_puts);
    set("leased", s.leased);
    set("evictions", c.evictions);
    set("evicted-bytes", c.evicted_bytes, fmtBytes);
    set("segments", s.segments);
    set("clients", s.clients);
    set("hard-pinned", s.hard_pinned);
    set("soft-pinned", s.soft_pinned);

    const cap = s.memory.capacity || 0, u = s.memory.used || 0;
    set("memory-util", cap > 0 ? u / cap : 0, fmtPct);
    el("memory-bar").replaceChildren(usageBar(u, cap));
    set("memory-used", u, fmtBytes);
    set("memory-capacity", cap, fmtBytes);
    set("memory-objects", s.memory.objects);
    set("high-watermark", s.config.high_watermark, fmtPct);
    set("disk-objects", s.disk.objects);
    set("disk-bytes", s.disk.bytes, fmtBytes);
    set("disk-gets", c.disk_gets);
    set("disk-segments", s.segment_list.filter((g) => g.disk_tier).length);

    set("puts", c.puts);
    set("put-starts", c.put_starts);
    set("put-revokes", c.put_revokes);
    set("puts-timed-out", c.puts_timed_out);
    set("gets", c.gets);
    set("get-misses", c.get_misses);
    set("get-hit-ratio", c.gets + c.get_misses > 0 ? c.gets / (c.gets + c.get_misses) : 0, fmtPct);
    set("removes", c.removes);
    set("eviction-runs", c.eviction_runs);
    set("evictions-2", c.evictions);
    set("utilisation-first-eviction", s.utilisation_at_first_eviction, fmtPct);
    set("lease-rejections", c.lease_rejections);
    set("clients-dropped", c.clients_dropped);

    const t = s.time_unix_ms;
    used.push(t, u); disk.push(t, s.disk.objects); puts.push(t, c.puts); gets.push(t, c.gets); evictions.push(t, c.evictions);
    sparkline(el("memory-spark"), used.v, "#61a6e0");
    el("memory-spark-max").textContent = "max " + fmtBytes(Math.max(...used.v));
    sparkline(el("disk-spark"), disk.v, "#a98ee0");
    sparkline(el("put-spark"), puts.rates(), "#5fb878");
    sparkline(el("get-spark"), gets.rates(), "#e0b84c");
    sparkline(el("evict-spark"), evictions.rates(), "#e06c6c");
    set("put-rate", puts.lastRate(), fmtRate);
    set("get-rate", gets.lastRate(), fmtRate);

    const rows = s.segment_list.map((g) => h("tr", {"data-testid": "segment-row", "data-name": g.name},
      h("td", {"data-field": "name"}, g.name),
      h("td", {class: "wrap", "data-field": "endpoint"}, g.endpoint),
      h("td", {class: "wrap", "data-field": "client"}, g.client),
      h("td", {}, usageBar(g.used, g.capacity)),
      num("used", g.used, fmtBytes),
      num("capacity", g.capacity, fmtBytes),
      num("objects", g.objects),
      num("disk_objects", g.disk_objects),
      num("disk_bytes", g.disk_bytes, fmtBytes),
      h("td", {"data-field": "state"}, h("span", {class: "pill " + (g.draining ? "bad" : "ok")}, g.draining ? "draining" : "mounted"),
        g.disk_tier ? " " : "", g.disk_tier ? h("span", {class: "pill dim"}, "disk") : "")));
    el("segment-rows").replaceChildren(...(rows.length ? rows : [h("tr", {}, h("td", {class: "empty", colSpan: 10}, "no segment mounted"))]));
  }

  Dash.poll("../api/summary", 1000, render);
})();
