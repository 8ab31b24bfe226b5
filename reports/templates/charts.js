/* rushhour report charts: reads the embedded JSON and draws uPlot charts. No network, no eval. */
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("rh-data").textContent);
  var TL = DATA.timeline;
  var ANCHOR = DATA.anchor_epoch_s;
  var DROP = "#D62728";
  var charts = [];

  function alpha(hex, a) {
    var n = parseInt(hex.slice(1), 16);
    return "rgba(" + ((n >> 16) & 255) + "," + ((n >> 8) & 255) + "," + (n & 255) + "," + a + ")";
  }

  function fmtMs(v) {
    if (v == null) return "–";
    if (v < 1000) return v.toFixed(0) + " ms";
    if (v < 10000) return (v / 1000).toFixed(2) + " s";
    if (v < 600000) return (v / 1000).toFixed(1) + " s";
    return (v / 60000).toFixed(1) + " min";
  }

  function axisMs(u, v) { return v.map(function (x) { return x == null ? "" : fmtMs(x); }); }

  function fmtRate(v) { return v == null ? "–" : (v >= 100 ? v.toFixed(0) : v.toFixed(2)) + "/s"; }

  function xs(t) { return ANCHOR == null ? t : t.map(function (v) { return ANCHOR + v; }); }

  function toX(t) { return ANCHOR == null ? t : ANCHOR + t; }

  /* Shade saturation windows and mark phase boundaries under the series. */
  function shading(u) {
    var ctx = u.ctx, top = u.bbox.top, h = u.bbox.height;
    ctx.save();
    /* phases left out of the judgement (warm-up, cool-down, measure: false): grey */
    ctx.fillStyle = "rgba(120,120,120,0.16)";
    (DATA.excluded || []).forEach(function (w) {
      var x0 = u.valToPos(toX(w[0]), "x", true), x1 = u.valToPos(toX(w[1]), "x", true);
      x0 = Math.max(x0, u.bbox.left); x1 = Math.min(x1, u.bbox.left + u.bbox.width);
      if (x1 > x0) ctx.fillRect(x0, top, Math.max(1, x1 - x0), h);
    });
    /* scheduled outages (faults that take every replica down): hatched dark bands, named at the top */
    (DATA.outages || []).forEach(function (o) {
      var x0 = u.valToPos(toX(o.start), "x", true), x1 = u.valToPos(toX(o.end), "x", true);
      x0 = Math.max(x0, u.bbox.left); x1 = Math.min(x1, u.bbox.left + u.bbox.width);
      if (x1 <= x0) return;
      ctx.fillStyle = "rgba(40,40,60,0.14)";
      ctx.fillRect(x0, top, Math.max(1, x1 - x0), h);
      ctx.strokeStyle = "rgba(40,40,60,0.55)";
      ctx.setLineDash([]);
      ctx.strokeRect(x0, top, Math.max(1, x1 - x0), h);
      ctx.fillStyle = "rgba(40,40,60,0.9)";
      ctx.font = Math.round(10 * (window.devicePixelRatio || 1)) + "px sans-serif";
      ctx.fillText((o.route !== "primary" ? o.route + ": " : "") + o.name, x0 + 3, top + 12 * (window.devicePixelRatio || 1));
    });
    ctx.fillStyle = "rgba(214,39,40,0.10)";
    DATA.windows.forEach(function (w) {
      var x0 = u.valToPos(toX(w[0]), "x", true), x1 = u.valToPos(toX(w[1]), "x", true);
      x0 = Math.max(x0, u.bbox.left); x1 = Math.min(x1, u.bbox.left + u.bbox.width);
      if (x1 > x0) ctx.fillRect(x0, top, Math.max(1, x1 - x0), h);
    });
    ctx.strokeStyle = "rgba(0,0,0,0.25)";
    ctx.setLineDash([4, 4]);
    DATA.phases.forEach(function (p) {
      if (p.start == null || p.start <= 0) return;
      var x = u.valToPos(toX(p.start), "x", true);
      if (x <= u.bbox.left || x >= u.bbox.left + u.bbox.width) return;
      ctx.beginPath(); ctx.moveTo(x, top); ctx.lineTo(x, top + h); ctx.stroke();
    });
    ctx.restore();
  }

  function timeScale() {
    return ANCHOR == null ? { time: false } : { time: true };
  }

  function clock(s) {
    if (s == null) return "–";
    var iso = new Date(s * 1e3).toISOString();
    return (DATA.duration_s > 86400 ? iso.slice(5, 10) + " " : "") + iso.slice(11, 19);
  }

  function timeAxis() {
    if (ANCHOR == null) return { label: "seconds from start", values: function (u, v) { return v.map(function (s) { return "+" + s + " s"; }); } };
    return { label: "time (UTC)", space: 90, values: function (u, v) { return v.map(clock); } };
  }

  function base(el, title, yLabel, series, data, extra) {
    var width = Math.max(320, el.clientWidth || 900);
    var opts = {
      title: title,
      width: width,
      height: el.getAttribute("data-height") ? +el.getAttribute("data-height") : 260,
      series: [{ label: ANCHOR == null ? "t" : "time (UTC)", value: function (u, v) { return ANCHOR == null ? (v == null ? "–" : "+" + v + " s") : clock(v); } }].concat(series),
      scales: { x: timeScale(), y: (extra && extra.y) || {} },
      axes: [timeAxis(), { label: yLabel, size: 64, values: (extra && extra.yValues) || undefined }],
      hooks: { drawClear: [shading] },
      cursor: { drag: { x: true, y: false } },
      legend: { live: true },
    };
    var chart = new uPlot(opts, data, el);
    charts.push([chart, el]);
    el.setAttribute("data-rendered", "1");
    return chart;
  }

  function tierLine(name, values, extra) {
    var c = DATA.colours[name];
    var s = { label: name, stroke: c, width: 2, spanGaps: false, points: { show: false } };
    for (var k in extra || {}) s[k] = extra[k];
    return s;
  }

  function offered(el) {
    var series = [], data = [xs(TL.t)];
    DATA.tiers.forEach(function (name) {
      var s = TL.tiers[name];
      if (!s) return;
      series.push(tierLine(name, null, { value: function (u, v) { return fmtRate(v); } }));
      data.push(s.offered);
    });
    base(el, "Offered load per tier (requests/s)", "req/s", series, data);
  }

  function servedDropped(el) {
    var name = el.getAttribute("data-tier"), s = TL.tiers[name];
    if (!s) return;
    var c = DATA.colours[name];
    var fmt = function (u, v) { return fmtRate(v); };
    var series = [
      { label: "served", stroke: c, width: 2, fill: alpha(c, 0.18), value: fmt, points: { show: false } },
      { label: "not served", stroke: DROP, width: 2, dash: [6, 3], fill: alpha(DROP, 0.12), value: fmt, points: { show: false } },
    ];
    var data = [xs(TL.t), s.served, s.not_served];
    /* one thin line per class not served, so unfinished and unclassified requests stay visible */
    (s.by_class || []).forEach(function (k) {
      series.push({ label: k.label, stroke: k.colour, width: 1, value: fmt, points: { show: false } });
      data.push(k.values);
    });
    base(el, name + ": served vs not served (requests/s)", "req/s", series, data);
  }

  function ttftOverTime(el) {
    var series = [], data = [xs(TL.t)];
    DATA.tiers.forEach(function (name) {
      var s = TL.tiers[name];
      if (!s || !s.ttft_p99_ms.some(function (v) { return v != null && v > 0; })) return;
      series.push(tierLine(name, null, { value: function (u, v) { return fmtMs(v); }, spanGaps: false }));
      data.push(s.ttft_p99_ms.map(function (v) { return v != null && v > 0 ? v : null; }));
    });
    if (!series.length) return;
    base(el, "TTFT p99 over time (log scale)", "TTFT p99", series, data, {
      y: { distr: 3 }, yValues: axisMs,
    });
  }

  function server(el) {
    var metric = el.getAttribute("data-metric"), rows = TL.server[metric] || [];
    if (!rows.length) return;
    var series = rows.map(function (r) {
      return { label: r.label, stroke: r.colour, width: 2, spanGaps: true, points: { show: false } };
    });
    base(el, metric + " (server, per band)", "value", series, [xs(TL.t)].concat(rows.map(function (r) { return r.values; })));
  }

  function cdf(el) {
    var xsSet = {}, curves = [];
    DATA.tiers.forEach(function (name) {
      var c = DATA.cdf[name] || {};
      ["from_send", "from_intended"].forEach(function (key) {
        if (!c[key]) return;
        curves.push({ name: name, key: key, pts: c[key] });
        c[key].forEach(function (p) { xsSet[p[0]] = 1; });
      });
    });
    if (!curves.length) return;
    var x = Object.keys(xsSet).map(Number).sort(function (a, b) { return a - b; });
    var index = {};
    x.forEach(function (v, i) { index[v] = i; });
    var data = [x], series = [];
    curves.forEach(function (cv) {
      var ys = new Array(x.length).fill(null);
      cv.pts.forEach(function (p) { var i = index[p[0]]; ys[i] = ys[i] == null ? p[1] : Math.max(ys[i], p[1]); });
      data.push(ys);
      series.push({
        label: cv.name + (cv.key === "from_send" ? " (from send)" : " (from intended send)"),
        stroke: DATA.colours[cv.name], width: cv.key === "from_send" ? 2 : 1.5,
        dash: cv.key === "from_send" ? undefined : [6, 4], spanGaps: true, points: { show: false },
        value: function (u, v) { return v == null ? "–" : (v * 100).toFixed(0) + " %"; },
      });
    });
    var width = Math.max(320, el.clientWidth || 900);
    var chart = new uPlot({
      title: "TTFT distribution per tier (CDF; solid = from send, dashed = from intended send)",
      width: width, height: 300,
      series: [{ label: "TTFT", value: function (u, v) { return fmtMs(v); } }].concat(series),
      scales: { x: { time: false, distr: 3 }, y: { range: [0, 1] } },
      axes: [
        { label: "time to first token (log scale)", values: axisMs },
        { label: "share served", size: 64, values: function (u, v) { return v.map(function (q) { return (q * 100).toFixed(0) + " %"; }); } },
      ],
      cursor: { drag: { x: true, y: false } },
    }, data, el);
    charts.push([chart, el]);
    el.setAttribute("data-rendered", "1");
  }

  var kinds = { offered: offered, "served-dropped": servedDropped, ttft: ttftOverTime, server: server, cdf: cdf };
  document.querySelectorAll("[data-chart]").forEach(function (el) {
    var fn = kinds[el.getAttribute("data-chart")];
    if (fn) fn(el);
  });

  var pending = null;
  window.addEventListener("resize", function () {
    clearTimeout(pending);
    pending = setTimeout(function () {
      charts.forEach(function (pair) {
        var w = Math.max(320, pair[1].clientWidth || 900);
        pair[0].setSize({ width: w, height: pair[0].height });
      });
    }, 150);
  });
})();
