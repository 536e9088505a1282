#include "report/html_report.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/span_reader.hpp"
#include "report/report_output.hpp"

namespace nemo::lens::cli {
namespace {

constexpr std::string_view kHead = R"html(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>lens report</title>
<style>
:root { --fg: #1d2330; --muted: #5b6475; --line: #d9dee7; --bg: #ffffff; --band: #f4f6fa;
        --step: #3b73c4; --slow: #d9482b; }
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 1200px; padding: 24px; color: var(--fg); background: var(--bg);
       font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 28px 0 8px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
p.note, .summary { color: var(--muted); margin: 4px 0; }
table { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
th, td { padding: 3px 8px; border-bottom: 1px solid var(--line); text-align: left; white-space: nowrap; }
th { background: var(--band); cursor: default; user-select: none; }
th.sortable { cursor: pointer; }
td.num, th.num { text-align: right; }
tr.straggler-row td, tr.is-straggler td { color: var(--slow); font-weight: 600; }
svg text { font-size: 11px; fill: var(--muted); }
svg .rank-label { fill: var(--fg); }
.legend { display: flex; flex-wrap: wrap; gap: 6px 18px; margin: 8px 0; }
.legend span.swatch { display: inline-block; width: 12px; height: 12px; margin-right: 5px;
                      vertical-align: -2px; border-radius: 2px; }
#lens-error { color: var(--slow); white-space: pre-wrap; }
.scroll { overflow-x: auto; }
h3.metric-title { font-size: 14px; margin: 14px 0 2px; }
.metric-readout { min-height: 1.45em; font-variant-numeric: tabular-nums; }
.tall { max-height: 440px; overflow-y: auto; }
.heatmap { display: flex; align-items: flex-start; gap: 6px; margin: 6px 0; }
.heatmap-labels { position: relative; width: 80px; flex: none; font-size: 11px; }
.heatmap-flag { position: absolute; right: 0; color: var(--slow); font-weight: 600;
                white-space: nowrap; line-height: 11px; }
canvas.heatmap-canvas { image-rendering: pixelated; border: 1px solid var(--line);
                        box-sizing: content-box; }
.heatmap-modes button { font: inherit; margin-right: 6px; }
.heatmap-modes button.on { font-weight: 600; }
h2.run-title { font-size: 20px; border-bottom: 2px solid var(--fg); }
h3.captured-title { font-size: 14px; margin: 16px 0 4px; }
</style>
</head>
<body>
<h1>lens report</h1>
<div class="summary" id="summary"></div>
<noscript><p>This page draws its charts and tables with JavaScript; the data is in the
<code>lens-data</code> script element (the output of <code>lens report --json</code>).</p></noscript>
<main id="report"></main>
<script type="application/json" id="lens-data">)html";

constexpr std::string_view kTail = R"html(</script>
<script>
(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";
  var PALETTE = ["#3b73c4", "#e69f00", "#2a9d8f", "#c4458a", "#7a5cc4", "#8c6d31", "#56b4e9",
                 "#d55e00", "#009e73", "#999999", "#b8860b", "#4b0082"];

  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function svgEl(tag, attrs, text) {
    var e = document.createElementNS(SVG, tag);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function digits(v, unit) {
    var d = v < 9.9995 ? 3 : v < 99.995 ? 2 : v < 999.95 ? 1 : 0;
    return v.toFixed(d) + unit;
  }
  function fmt(ns) {
    if (ns === null || ns === undefined) return "-";
    if (ns < 999.5) return Math.round(ns) + "ns";
    if (ns < 999950) return digits(ns / 1e3, "us");
    if (ns < 999950000) return digits(ns / 1e6, "ms");
    return digits(ns / 1e9, "s");
  }
  function pct(x) { return x === null || x === undefined ? "-" : (x * 100).toFixed(1) + "%"; }
  function rankLabel(r) { return r === null ? "?" : String(r); }
  // The run being drawn: its container, and the suffix that keeps its ids apart from the
  // other runs' (none for the first).
  var target = null, idSuffix = "";
  function section(title, id) {
    var s = el("section", {id: id + idSuffix});
    s.appendChild(el("h2", {}, title));
    target.appendChild(s);
    return s;
  }

  // A table whose numeric columns sort when their header is clicked.
  function table(columns, rows, rowAttrs, tall) {
    var t = el("table"), head = el("tr"), body = el("tbody");
    columns.forEach(function (c, i) {
      var th = el("th", {"class": (c.num ? "num " : "") + (c.sort ? "sortable" : "")}, c.title);
      if (c.sort) th.addEventListener("click", function () { sortBy(i); });
      head.appendChild(th);
    });
    var thead = el("thead");
    thead.appendChild(head);
    t.appendChild(thead);
    var order = rows.map(function (r, i) { return i; }), descending = {};
    function fill() {
      while (body.firstChild) body.removeChild(body.firstChild);
      order.forEach(function (i) {
        var tr = el("tr", rowAttrs ? rowAttrs(rows[i]) : {});
        columns.forEach(function (c) {
          tr.appendChild(el("td", c.num ? {"class": "num"} : {}, c.text(rows[i])));
        });
        body.appendChild(tr);
      });
    }
    function sortBy(i) {
      var key = columns[i].sort;
      descending[i] = !descending[i];
      order.sort(function (a, b) {
        var x = key(rows[a]), y = key(rows[b]);
        var r = x < y ? -1 : x > y ? 1 : 0;
        return descending[i] ? -r : r;
      });
      fill();
    }
    fill();
    t.appendChild(body);
    var wrap = el("div", {"class": "scroll" + (tall ? " tall" : "")});
    wrap.appendChild(t);
    return wrap;
  }

  function summary(d) {
    var parts = [d.spans + " spans", d.ranks.length + " rank" + (d.ranks.length === 1 ? "" : "s"),
                 d.step.count + " top-level step spans (" + fmt(d.step.total_ns) + ")"];
    if (d.run_ids.length) parts.push("run " + d.run_ids.join(", "));
    return parts.join(" \u00b7 ");
  }
  function inputSummary(d, runs) {
    var parts = [d.files.length + " file" + (d.files.length === 1 ? "" : "s"), d.input.spans + " spans"];
    if (d.input.malformed_lines) parts.push(d.input.malformed_lines + " malformed lines skipped");
    if (runs > 1) parts.push(runs + " runs, one section each");
    return parts.join(" \u00b7 ");
  }

  function isStraggler(rank) {
    return rank.steps.some(function (s) { return s.straggler; });
  }

  // A colour per span group: the step breakdown's groups in its order, then the others.
  function groupColors(d) {
    var colors = {}, n = 0;
    d.groups.filter(function (g) { return g.in_step_self_ns > 0; }).forEach(function (g) {
      colors[g.group] = PALETTE[n++ % PALETTE.length];
    });
    d.groups.forEach(function (g) {
      if (!(g.group in colors)) colors[g.group] = PALETTE[n++ % PALETTE.length];
    });
    return colors;
  }
  // A rank's steps had GPU times (the report's gpu.* attributes).
  function hasGpu(r) {
    return (r.timeline.gpu_busy_ns || []).some(function (v) { return v !== null; });
  }

  // The time axis the step timeline and the metric charts share: nanoseconds from the first
  // step's start (else the first metric point), over every step and every point.
  var LEFT = 70, WIDTH = 1100, PLOT = WIDTH - LEFT - 10;
  function timeAxis(d) {
    var a = {origin: null, lo: 0, hi: 0};
    d.ranks.forEach(function (r) {
      r.timeline.offset_and_duration_ns.forEach(function (p) {
        a.origin = d.timeline_origin_unix_ns;
        a.hi = Math.max(a.hi, p[0] + p[1]);
      });
    });
    (d.metrics || []).forEach(function (m) {
      m.timeseries.forEach(function (ts) {
        ts.points.forEach(function (p) {
          if (!p[0]) return;  // no timeUnixNano: not on a time axis
          if (a.origin === null) a.origin = p[0];
          var off = p[0] - a.origin;
          a.lo = Math.min(a.lo, off);
          a.hi = Math.max(a.hi, off);
        });
      });
    });
    if (a.origin !== null && d.logs) {
      d.logs.records.forEach(function (l) {
        if (!l.time_unix_nano) return;
        var off = l.time_unix_nano - a.origin;
        a.lo = Math.min(a.lo, off);
        a.hi = Math.max(a.hi, off);
      });
    }
    if (a.hi <= a.lo) a.hi = a.lo + 1;
    a.x = function (ns) { return LEFT + (ns - a.lo) / (a.hi - a.lo) * PLOT; };
    a.ns = function (px) { return a.lo + (px - LEFT) / PLOT * (a.hi - a.lo); };
    a.label = function (ns) { return (ns < 0 ? "-" : "+") + fmt(Math.abs(ns)); };
    return a;
  }
  function timeTicks(svg, a, top, bottom) {
    for (var t = 0; t <= 5; t++) {
      var at = a.lo + (a.hi - a.lo) * t / 5, px = a.x(at);
      svg.appendChild(svgEl("line", {x1: px, x2: px, y1: top, y2: bottom, stroke: "#e3e7ee"}));
      svg.appendChild(svgEl("text", {x: px, y: bottom + 14, "text-anchor": t === 0 ? "start" : t === 5 ? "end" : "middle"},
                            a.label(at)));
    }
  }

  // A rank x step heat map per top-level step name, for a job of many ranks: a pixel row per
  // rank, a column per step (or per few steps), coloured by how late the rank arrived at the
  // step's collectives (red: later than the median rank, blue: earlier) or by its step time;
  // the flagged ranks named beside their rows.
  var HEATMAP_RANKS = 32;
  function heatmaps(d, s) {
    var flagged = {};
    d.stragglers.ranks.forEach(function (r) { flagged[rankLabel(r.rank) + "\u0000" + r.name] = r; });
    var out = {maps: 0};
    (d.heatmaps || []).forEach(function (h) {
      var rows = h.ranks.length, cols = rows ? h.step_us[0].length : 0;
      if (!rows || !cols) return;
      var modes = h.late_us ? ["late", "step"] : ["step"];
      var box = el("div", {"class": "heatmap-box"});
      box.appendChild(el("h3", {"class": "metric-title"}, h.name + ": " + rows + " ranks \u00d7 " +
          h.steps + " steps" + (h.steps_per_column > 1 ? " (" + h.steps_per_column + " steps a column, their mean)" : "")));
      var buttons = el("div", {"class": "heatmap-modes"});
      box.appendChild(buttons);
      var wrap = el("div", {"class": "heatmap"});
      var labels = el("div", {"class": "heatmap-labels"});
      var rowH = rows <= 60 ? 8 : rows <= 200 ? 3 : rows <= 600 ? 2 : 1;
      var colW = Math.max(1, Math.min(12, Math.floor(PLOT / cols)));
      var canvas = el("canvas", {"class": "heatmap-canvas", width: String(cols), height: String(rows),
                                 "data-name": h.name, "data-rows": String(rows), "data-columns": String(cols),
                                 style: "width:" + cols * colW + "px;height:" + rows * rowH + "px"});
      labels.style.height = rows * rowH + "px";
      var lastY = -20;
      h.ranks.forEach(function (rank, i) {
        var f = flagged[rankLabel(rank) + "\u0000" + h.name];
        if (!f) return;
        var y = Math.max(i * rowH + rowH / 2 - 5, lastY + 11);
        lastY = y;
        labels.appendChild(el("span", {"class": "heatmap-flag", "data-rank": rankLabel(rank),
                                       "data-row": String(i), style: "top:" + y + "px"},
                              "rank " + rankLabel(rank) + " \u25b6"));
      });
      wrap.appendChild(labels);
      wrap.appendChild(canvas);
      box.appendChild(wrap);
      var legend = el("div", {"class": "note heatmap-legend"}), readout = el("div", {"class": "metric-readout note"});
      box.appendChild(legend);
      box.appendChild(readout);
      function quantile(values, q) {
        if (!values.length) return 0;
        values.sort(function (a, b) { return a - b; });
        return values[Math.min(values.length - 1, Math.floor(q * (values.length - 1)))];
      }
      var mode = modes[0];
      function draw() {
        var cells = mode === "late" ? h.late_us : h.step_us, all = [];
        cells.forEach(function (row) { row.forEach(function (v) { if (v !== null) all.push(v); }); });
        var lo, hi, color;
        if (mode === "late") {
          // Diverging around 0 (the median rank), saturated at the most typical lateness of the
          // latest rank (the largest median of a row), or the 90th percentile of the cells when
          // that is more, so that a rank late in every step stands out of the noise.
          var typical = 0;
          cells.forEach(function (row) {
            var known = row.filter(function (v) { return v !== null; });
            if (known.length) typical = Math.max(typical, Math.abs(quantile(known, 0.5)));
          });
          var m = Math.max(1, typical, quantile(all.map(Math.abs), 0.9));
          color = function (v) {
            var t = Math.max(-1, Math.min(1, v / m));
            return t >= 0 ? [255, Math.round(255 - 200 * t), Math.round(255 - 215 * t)]
                           : [Math.round(255 + 200 * t), Math.round(255 + 130 * t), 255];
          };
          legend.textContent = "Colour: how late the rank arrived at the step's collectives, against " +
              "the median rank (white: on time; red: up to " + fmt(m * 1000) + " later; blue: earlier). " +
              "Hover for a cell's figures.";
        } else {
          lo = quantile(all.slice(), 0.01); hi = quantile(all.slice(), 0.99);
          if (hi <= lo) hi = lo + 1;
          color = function (v) {
            var t = Math.max(0, Math.min(1, (v - lo) / (hi - lo)));
            return [255, Math.round(245 - 200 * t), Math.round(220 - 200 * t)];
          };
          legend.textContent = "Colour: step time, from " + fmt(lo * 1000) + " (light) to " + fmt(hi * 1000) +
              " (dark red). In a synchronous job every rank's step lasts as long as the slowest's: " +
              "lateness tells them apart.";
        }
        var ctx = canvas.getContext("2d"), img = ctx.createImageData(cols, rows);
        cells.forEach(function (row, y) {
          row.forEach(function (v, x) {
            var o = (y * cols + x) * 4, c = v === null ? [238, 240, 244] : color(v);
            img.data[o] = c[0]; img.data[o + 1] = c[1]; img.data[o + 2] = c[2]; img.data[o + 3] = 255;
          });
        });
        ctx.putImageData(img, 0, 0);
        canvas.setAttribute("data-mode", mode);
        // The row drawn reddest (the least blue and green on average): where the eye goes.
        var best = -1, bestHeat = -1;
        for (var y = 0; y < rows; y++) {
          var heat = 0;
          for (var x = 0; x < cols; x++) {
            var o = (y * cols + x) * 4;
            heat += 510 - img.data[o + 1] - img.data[o + 2];
          }
          if (heat > bestHeat) { bestHeat = heat; best = y; }
        }
        canvas.setAttribute("data-hottest-rank", rankLabel(h.ranks[best]));
        Array.prototype.forEach.call(buttons.children, function (b) {
          b.className = b.getAttribute("data-mode") === mode ? "on" : "";
        });
      }
      modes.forEach(function (m) {
        var b = el("button", {type: "button", "data-mode": m}, m === "late" ? "late at the collectives" : "step time");
        b.addEventListener("click", function () { mode = m; draw(); });
        buttons.appendChild(b);
      });
      canvas.addEventListener("mousemove", function (e) {
        var r = canvas.getBoundingClientRect();
        var x = Math.floor((e.clientX - r.left) / r.width * cols), y = Math.floor((e.clientY - r.top) / r.height * rows);
        if (x < 0 || y < 0 || x >= cols || y >= rows) return;
        var first = x * h.steps_per_column + 1, last = Math.min(h.steps, first + h.steps_per_column - 1);
        var late = h.late_us ? h.late_us[y][x] : null, step = h.step_us[y][x];
        readout.textContent = "rank " + rankLabel(h.ranks[y]) + ", step " + (first === last ? first : first + "\u2013" + last) +
            " of " + h.steps + ": step " + (step === null ? "-" : fmt(step * 1000)) +
            (late === null ? "" : ", " + (late >= 0 ? fmt(late * 1000) + " later" : fmt(-late * 1000) + " earlier") +
             " than the median rank at the collectives");
      });
      draw();
      s.appendChild(box);
      // Where the map's pixels are on the page (its content box, in CSS pixels from the page's
      // top left), for tools that read a screenshot.
      var rect = canvas.getBoundingClientRect();
      canvas.setAttribute("data-box", [Math.round(rect.left + window.scrollX + canvas.clientLeft),
                                       Math.round(rect.top + window.scrollY + canvas.clientTop),
                                       canvas.clientWidth, canvas.clientHeight].join(","));
      out.maps += 1;
    });
    return out;
  }

  function timeline(d, axis) {
    var s = section("Step timeline per rank", "timeline");
    if (d.ranks.length > HEATMAP_RANKS && d.heatmaps && d.heatmaps.length) {
      s.firstChild.textContent = "Steps per rank: heat map";
      s.appendChild(el("p", {"class": "note"},
          d.ranks.length + " ranks: one pixel row per rank (in rank order), one column per step. " +
          "Ranks flagged as stragglers are named beside their rows."));
      var hm = heatmaps(d, s);
      return {rows: 0, boxes: 0, heatmaps: hm.maps};
    }
    var shown = 0, total = 0;
    d.ranks.forEach(function (r) {
      shown += r.timeline.shown;
      total += r.timeline.steps;
    });
    if (total === 0) { s.appendChild(el("p", {"class": "note"}, "No spans of group step.")); return; }
    var logs = (d.logs ? d.logs.records : []).filter(function (l) { return l.time_unix_nano; });
    s.appendChild(el("p", {"class": "note"},
        "One row per rank; each bar is a top-level step span" +
        (logs.length ? "; each tick a log record of the rank (grey debug, green info, orange " +
                       "warning, red error; hover for the message" +
                       (d.logs.records.length < d.logs.count ? ", " + d.logs.records.length + " of " +
                        d.logs.count + " records drawn, warnings first" : "") + ")" : "") +
        (shown < total ? " (" + shown + " of " + total + " drawn, evenly thinned)" : "") +
        ". Ranks flagged as stragglers are drawn in red. Time from the first step's start; the " +
        "metric charts below share this axis."));
    var rowH = Math.max(4, Math.min(18, Math.floor(600 / d.ranks.length))), gap = rowH > 8 ? 4 : 1;
    // A rank whose steps had spans beside them (other threads or processes) gets a second, thinner
    // row under its steps: the time they overlapped a step, its exposed parts marked.
    var besideH = Math.max(3, Math.round(rowH * 0.6));
    function hasBeside(r) {
      return (r.timeline.overlapped_ns || []).some(function (list) { return list.length > 0; });
    }
    var anyBeside = d.ranks.some(hasBeside);
    // A rank whose steps had GPU times gets a GPU row right under its steps: the GPU intervals of
    // the steps' leaf GPU-timed spans, coloured by group.
    var gpuH = Math.max(3, Math.round(rowH * 0.8)), colors = groupColors(d), gpuGroups = {};
    var gpuStats = {rows: 0, boxes: 0};
    var left = LEFT, width = WIDTH, plot = PLOT, top = 6;
    var height = top + 24;
    d.ranks.forEach(function (r) {
      height += rowH + gap + (hasBeside(r) ? besideH + gap : 0) + (hasGpu(r) ? gpuH + gap : 0);
    });
    var svg = svgEl("svg", {viewBox: "0 0 " + width + " " + height, width: "100%", role: "img",
                            "aria-label": "step timeline", id: "timeline-svg"});
    var x = axis.x, rowOf = {}, y = top;
    timeTicks(svg, axis, top, height - 20);
    d.ranks.forEach(function (r) {
      var slow = isStraggler(r);
      var g = svgEl("g", {"class": "rank-row", "data-rank": rankLabel(r.rank),
                          "data-straggler": slow ? "true" : "false"});
      if (rowH >= 9) {
        g.appendChild(svgEl("text", {"class": "rank-label", x: left - 8, y: y + rowH - 4, "text-anchor": "end"},
                            "rank " + rankLabel(r.rank)));
      }
      g.appendChild(svgEl("rect", {x: left, y: y, width: plot, height: rowH, fill: "#f4f6fa"}));
      r.timeline.offset_and_duration_ns.forEach(function (p) {
        var w = Math.max(0.5, x(p[0] + p[1]) - x(p[0]));
        var bar = svgEl("rect", {"class": "step-bar", x: x(p[0]), y: y, width: w, height: rowH,
                                 fill: slow ? "#d9482b" : "#3b73c4", "fill-opacity": "0.85"});
        bar.appendChild(svgEl("title", {}, "rank " + rankLabel(r.rank) + ": " + fmt(p[1]) +
                                           " at " + axis.label(p[0])));
        g.appendChild(bar);
      });
      rowOf[rankLabel(r.rank)] = {g: g, y: y};
      svg.appendChild(g);
      y += rowH + gap;
      if (hasGpu(r)) {
        var boxes = 0;
        var gr = svgEl("g", {"class": "gpu-row", "data-rank": rankLabel(r.rank)});
        gr.appendChild(svgEl("rect", {x: left, y: y, width: plot, height: gpuH, fill: "#f9fafc"}));
        r.timeline.gpu_intervals_ns.forEach(function (list) {
          list.forEach(function (p) {
            var color = colors[p[2]] || "#999999";
            gpuGroups[p[2]] = color;
            var bar = svgEl("rect", {"class": "gpu-bar", "data-group": p[2], x: x(p[0]), y: y,
                                     height: gpuH, fill: color, "fill-opacity": "0.8",
                                     width: Math.max(0.5, x(p[0] + p[1]) - x(p[0]))});
            bar.appendChild(svgEl("title", {}, "rank " + rankLabel(r.rank) + " GPU: " + p[2] + " " +
                                               fmt(p[1]) + " at " + axis.label(p[0])));
            gr.appendChild(bar);
            boxes += 1;
          });
        });
        gr.setAttribute("data-boxes", String(boxes));
        gpuStats.rows += 1;
        gpuStats.boxes += boxes;
        svg.appendChild(gr);
        y += gpuH + gap;
      }
      if (!hasBeside(r)) return;
      var b = svgEl("g", {"class": "beside-row", "data-rank": rankLabel(r.rank)});
      b.appendChild(svgEl("rect", {x: left, y: y, width: plot, height: besideH, fill: "#f9fafc"}));
      function draw(list, cls, color, what) {
        list.forEach(function (p) {
          var bar = svgEl("rect", {"class": cls, x: x(p[0]), y: y, height: besideH, fill: color,
                                   width: Math.max(0.5, x(p[0] + p[1]) - x(p[0]))});
          bar.appendChild(svgEl("title", {}, "rank " + rankLabel(r.rank) + ": " + fmt(p[1]) + " " +
                                             what + " at " + axis.label(p[0])));
          b.appendChild(bar);
        });
      }
      r.timeline.overlapped_ns.forEach(function (list) { draw(list, "overlap-bar", "#9aa7bd", "overlapped (hidden)"); });
      r.timeline.exposed_ns.forEach(function (list) { draw(list, "exposed-bar", "#e69f00", "exposed"); });
      svg.appendChild(b);
      y += besideH + gap;
    });
    if (gpuStats.rows > 0) {
      s.appendChild(el("p", {"class": "note"},
          "Under a rank's steps, its GPU row: the GPU intervals (first to last GPU activity) of " +
          "the steps' innermost GPU-timed spans, coloured by group:"));
      var gl = el("div", {"class": "legend", id: "gpu-legend"});
      Object.keys(gpuGroups).sort().forEach(function (name) {
        var item = el("span");
        item.appendChild(el("span", {"class": "swatch", style: "background:" + gpuGroups[name]}));
        item.appendChild(document.createTextNode(name));
        gl.appendChild(item);
      });
      s.appendChild(gl);
    }
    if (anyBeside) {
      s.appendChild(el("p", {"class": "note"},
          "Under a rank's steps, a thinner row: its steps' spans on other threads or processes " +
          "(grey: overlapped with the step, orange: the exposed part, while the step's own thread " +
          "was in a span of their group or in none)."));
    }
    logs.forEach(function (l) {
      var row = rowOf[rankLabel(l.rank)];
      if (!row) return;  // a rank without steps has no row
      var sev = l.severity_number, color = sev >= 17 ? "#d9482b" : sev >= 13 ? "#e69f00" :
                                           sev >= 9 ? "#2a9d8f" : "#8a93a3";
      var at = l.time_unix_nano - axis.origin;
      var mark = svgEl("rect", {"class": "log-marker", "data-severity": String(sev),
                                "data-rank": rankLabel(l.rank), x: axis.x(at) - 1, y: row.y - 2,
                                width: 2, height: rowH + 4, fill: color});
      mark.appendChild(svgEl("title", {}, "rank " + rankLabel(l.rank) + " \u00b7 " +
                                          (l.severity_text || "severity " + sev) + " at " +
                                          axis.label(at) + ": " + l.body));
      row.g.appendChild(mark);
    });
    // The steps the flight recorder captured detail of: a mark over the step, its detail in the
    // "Captured steps" section.
    var marks = 0;
    (d.captured ? d.captured.steps : []).forEach(function (c) {
      var row = rowOf[rankLabel(c.rank)];
      if (!row) return;
      var at = c.start_unix_ns - axis.origin;
      var w = Math.max(3, x(at + c.duration_ns) - x(at));
      var mark = svgEl("rect", {"class": "captured-marker", "data-rank": rankLabel(c.rank), x: x(at),
                                y: row.y - 3, width: w, height: 3, fill: "#7b3fb0"});
      mark.appendChild(svgEl("title", {}, "rank " + rankLabel(c.rank) + ": " + c.name +
                                          (c.iteration !== null ? " iteration " + c.iteration : "") +
                                          " captured (" + c.reasons.join(", ") + "), " +
                                          fmt(c.duration_ns) + "; see Captured steps"));
      row.g.appendChild(mark);
      marks += 1;
    });
    if (marks) {
      s.appendChild(el("p", {"class": "note"},
          "A purple mark over a step: the flight recorder captured its detail (Captured steps, " +
          "below)."));
    }
    s.appendChild(svg);
    return gpuStats;
  }

  // One chart per metric on the timeline's axis: a line per rank and series (sums: the total as
  // of each point; gauges: the value; histograms: each interval's p50, with its p50-p95 band).
  // Past MAX_LINES lines, the median across them with the min-max band, and the lines furthest
  // from the median drawn and named.
  var MAX_LINES = 12, BINS = 120;
  function num(v) {
    if (v === null || v === undefined) return "-";
    var a = Math.abs(v);
    if (a === 0) return "0";
    if (a >= 1e6 || a < 1e-3) return v.toExponential(2);
    if (a >= 1000) return String(Math.round(v));
    return String(Number(v.toPrecision(4)));
  }
  function clip(text, n) { return text.length > n ? text.slice(0, n - 1) + "\u2026" : text; }
  function metricKind(m) {
    if (m.type === "gauge") return "gauge";
    if (m.type === "sum") return m.temporality === "delta" ? "sum (deltas added up)" : "sum";
    return m.type.replace("_", " ") + ": p50 per interval, p50-p95 band";
  }
  function metricCharts(d, axis) {
    var out = {charts: 0, points: 0};
    var metrics = (d.metrics || []).filter(function (m) {
      return m.timeseries.some(function (ts) { return ts.points.length > 0; });
    });
    if (metrics.length === 0) return out;
    var s = section("Metrics over time", "metrics");
    s.appendChild(el("p", {"class": "note"},
        "One chart per metric, on the step timeline's axis. Hover a chart for the values at that " +
        "time. With more than " + MAX_LINES + " lines, the median across them with their min-max " +
        "band, and the three furthest from the median named."));
    var byName = {}, names = [];
    metrics.forEach(function (m) {
      var key = m.name + "\u0000" + m.type;
      if (!byName[key]) { byName[key] = []; names.push(key); }
      byName[key].push(m);
    });
    names.forEach(function (key) {
      var rows = byName[key], m0 = rows[0], dist = m0.type !== "gauge" && m0.type !== "sum";
      var lines = [], runs = {};
      rows.forEach(function (m) { m.timeseries.forEach(function (ts) { runs[ts.run_id] = true; }); });
      var severalRuns = Object.keys(runs).length > 1;
      rows.forEach(function (m) {
        var who = m.rank !== null ? "rank " + m.rank : m.instance_id || "rank ?";
        m.timeseries.forEach(function (ts) {
          var pts = [];
          ts.points.forEach(function (p) {
            var v = dist ? p[3] : p[1];
            // No time, no estimate, or NaN (null in JSON): nothing to draw.
            if (!p[0] || typeof v !== "number") return;
            pts.push({t: p[0] - axis.origin, v: v, hi: dist && typeof p[4] === "number" ? p[4] : v,
                      count: dist ? p[1] : null});
          });
          // A line per rank, series and run; the runs of one rank and series share a colour.
          var key = who + (ts.attributes ? " {" + ts.attributes + "}" : "");
          if (pts.length) lines.push({key: key, label: key + (severalRuns ? " \u00b7 " + (ts.run_id || "no run id") : ""),
                                      rank: m.rank === null ? "?" : String(m.rank), pts: pts});
        });
      });
      if (lines.length === 0) return;
      var lo = Infinity, hi = -Infinity;
      lines.forEach(function (l) {
        l.pts.forEach(function (p) { lo = Math.min(lo, p.v); hi = Math.max(hi, p.hi); });
      });
      if (hi <= lo) { var pad = Math.abs(hi) * 0.1 || 1; lo -= pad; hi += pad; }
      var top = 8, plotH = 96, height = top + plotH + 22;
      var y = function (v) { return top + plotH - (v - lo) / (hi - lo) * plotH; };
      var aggregate = lines.length > MAX_LINES;
      var box = el("div", {"class": "metric"});
      box.appendChild(el("h3", {"class": "metric-title"}, m0.name + (m0.unit ? " [" + m0.unit + "]" : "") +
                                                        " \u00b7 " + metricKind(m0)));
      var svg = svgEl("svg", {viewBox: "0 0 " + WIDTH + " " + height, width: "100%", role: "img",
                              "class": "metric-chart", "data-metric": m0.name,
                              "data-mode": aggregate ? "aggregate" : "lines",
                              "data-lines": String(lines.length), "aria-label": m0.name});
      timeTicks(svg, axis, top, top + plotH);
      [lo, (lo + hi) / 2, hi].forEach(function (v) {
        svg.appendChild(svgEl("text", {x: LEFT - 6, y: y(v) + 4, "text-anchor": "end"}, num(v)));
      });
      var drawn = 0;
      function polyline(pts, attrs, title) {
        var line = svgEl("polyline", attrs);
        line.setAttribute("points", pts.map(function (p) {
          return axis.x(p.t).toFixed(1) + "," + y(p.v).toFixed(1);
        }).join(" "));
        line.setAttribute("data-points", String(pts.length));
        if (title) line.appendChild(svgEl("title", {}, title));
        svg.appendChild(line);
        drawn += pts.length;
        if (pts.length <= 60) {  // a lone point has no line: dots show where the points are
          pts.forEach(function (p) {
            svg.appendChild(svgEl("circle", {cx: axis.x(p.t).toFixed(1), cy: y(p.v).toFixed(1), r: 2,
                                              fill: attrs.stroke, "class": "metric-dot"}));
          });
        }
      }
      function band(pts, color) {
        var upper = pts.map(function (p) { return axis.x(p.t).toFixed(1) + "," + y(p.hi).toFixed(1); });
        var lower = pts.slice().reverse().map(function (p) {
          return axis.x(p.t).toFixed(1) + "," + y(p.v).toFixed(1);
        });
        svg.appendChild(svgEl("polygon", {"class": "metric-band", points: upper.concat(lower).join(" "),
                                          fill: color, "fill-opacity": "0.18", stroke: "none"}));
      }
      var legend = el("div", {"class": "legend"}), readout = el("div", {"class": "metric-readout note"});
      var hover;  // ns -> text
      if (!aggregate) {
        var colors = {}, ncolors = 0;
        lines.forEach(function (l) {
          var last = l.pts[l.pts.length - 1];
          if (!(l.key in colors)) {
            colors[l.key] = PALETTE[ncolors++ % PALETTE.length];
            var item = el("span", {title: l.key});
            item.appendChild(el("span", {"class": "swatch", style: "background:" + colors[l.key]}));
            item.appendChild(document.createTextNode(clip(l.key, 70)));
            legend.appendChild(item);
          }
          var color = colors[l.key];
          if (dist) band(l.pts, color);
          polyline(l.pts, {"class": "metric-line", "data-rank": l.rank, fill: "none", stroke: color,
                           "stroke-width": 1.6}, l.label + ": " + num(last.v) + " at " + axis.label(last.t));
        });
        hover = function (ns) {
          return lines.map(function (l) {
            var best = l.pts[0];
            l.pts.forEach(function (p) { if (Math.abs(p.t - ns) < Math.abs(best.t - ns)) best = p; });
            return l.label + " " + num(best.v) + (dist ? " (p95 " + num(best.hi) + ", " + best.count +
                                                        " values)" : "") + " at " + axis.label(best.t);
          }).join(" \u00b7 ");
        };
      } else {
        // Each line's last value in each bin; per bin the median, min and max across lines.
        var bins = [];
        lines.forEach(function (l) {
          var seen = {};
          l.pts.forEach(function (p) {
            var b = Math.min(BINS - 1, Math.max(0, Math.floor((p.t - axis.lo) / (axis.hi - axis.lo) * BINS)));
            seen[b] = p.v;
          });
          for (var b in seen) (bins[b] = bins[b] || []).push(seen[b]);
        });
        var median = [], spread = [];
        bins.forEach(function (vals, b) {
          if (!vals) return;
          vals.sort(function (p, q) { return p - q; });
          var n = vals.length, mid = n % 2 ? vals[(n - 1) / 2] : (vals[n / 2 - 1] + vals[n / 2]) / 2;
          var t = axis.lo + (b + 0.5) / BINS * (axis.hi - axis.lo);
          median.push({t: t, v: mid});
          spread.push({t: t, v: vals[0], hi: vals[n - 1], n: n});
        });
        band(spread, "#3b73c4");
        polyline(median, {"class": "metric-median", fill: "none", stroke: "#1d2330", "stroke-width": 1.6},
                 "median across " + lines.length + " lines");
        var means = lines.map(function (l) {
          return l.pts.reduce(function (a, p) { return a + p.v; }, 0) / l.pts.length;
        });
        var sorted = means.slice().sort(function (p, q) { return p - q; }), n = sorted.length;
        var mm = n % 2 ? sorted[(n - 1) / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
        // Lines within 1% of the median (or equal to it, when it is 0) are not worth a name.
        var far = function (i) {
          return mm !== 0 ? Math.abs(means[i] - mm) >= 0.01 * Math.abs(mm) : means[i] !== 0;
        };
        var order = lines.map(function (l, i) { return i; }).filter(far).sort(function (i, j) {
          return Math.abs(means[j] - mm) - Math.abs(means[i] - mm);
        }).slice(0, 3);
        var worst = [];
        order.forEach(function (i, k) {
          var l = lines[i], color = ["#d9482b", "#e69f00", "#c4458a"][k];
          var dev = mm !== 0 ? (means[i] - mm) / Math.abs(mm) * 100 : 0;
          var text = l.label + " (mean " + num(means[i]) + (mm !== 0 ? ", " + (dev >= 0 ? "+" : "") +
                                                           dev.toFixed(1) + "%" : "") + ")";
          polyline(l.pts, {"class": "metric-line metric-outlier", "data-rank": l.rank, fill: "none",
                           stroke: color, "stroke-width": 1}, text);
          worst.push(text);
        });
        legend.appendChild(el("span", {"class": "metric-worst"},
            lines.length + " lines: median and min-max band; " +
            (worst.length ? "furthest from the median: " + worst.join(", ")
                          : "every line's mean within 1% of the median of the means")));
        hover = function (ns) {
          var best = spread[0], mid = median[0];
          spread.forEach(function (p, i) {
            if (Math.abs(p.t - ns) < Math.abs(best.t - ns)) { best = p; mid = median[i]; }
          });
          return axis.label(best.t) + ": median " + num(mid.v) + ", min " + num(best.v) + ", max " +
                 num(best.hi) + " over " + best.n + " lines";
        };
      }
      var rule = svgEl("line", {y1: top, y2: top + plotH, stroke: "#5b6475", "stroke-dasharray": "3,3",
                                visibility: "hidden"});
      svg.appendChild(rule);
      svg.addEventListener("mousemove", function (e) {
        var r = svg.getBoundingClientRect();
        var px = (e.clientX - r.left) / r.width * WIDTH;
        if (px < LEFT || px > LEFT + PLOT) return;
        rule.setAttribute("x1", px);
        rule.setAttribute("x2", px);
        rule.setAttribute("visibility", "visible");
        readout.textContent = hover(axis.ns(px));
      });
      svg.setAttribute("data-points", String(drawn));
      box.appendChild(svg);
      box.appendChild(legend);
      box.appendChild(readout);
      s.appendChild(box);
      out.charts += 1;
      out.points += drawn;
    });
    return out;
  }

  function breakdown(d) {
    var s = section("Where the step time goes (on the steps' own threads, by group)", "breakdown");
    var groups = d.groups.filter(function (g) { return g.in_step_self_ns > 0; });
    if (!d.step.total_ns || groups.length === 0) {
      s.appendChild(el("p", {"class": "note"}, "No time inside top-level step spans."));
      return;
    }
    var colors = groupColors(d);
    s.appendChild(el("p", {"class": "note"},
        "Each instant of a top-level step belongs to the innermost span open on the step's own " +
        "thread; per group, as a share of the " + fmt(d.step.total_ns) + " of step time (the " +
        "shares add up to 100 %). Spans on other threads are in the table below."));
    var sum = groups.reduce(function (a, g) { return a + g.self_share; }, 0), scale = Math.max(1, sum);
    var width = 1100, h = 28, xpos = 0;
    var svg = svgEl("svg", {viewBox: "0 0 " + width + " " + h, width: "100%", role: "img",
                            "aria-label": "step breakdown", id: "breakdown-svg"});
    var legend = el("div", {"class": "legend"});
    groups.forEach(function (g, i) {
      var w = g.self_share / scale * width, color = colors[g.group];
      var r = svgEl("rect", {"class": "group-share", "data-group": g.group, x: xpos, y: 0,
                             width: Math.max(w, 0.5), height: h, fill: color});
      r.appendChild(svgEl("title", {}, g.group + ": " + fmt(g.in_step_self_ns) + " (" + pct(g.self_share) + ")"));
      svg.appendChild(r);
      xpos += w;
      var item = el("span");
      item.appendChild(el("span", {"class": "swatch", style: "background:" + color}));
      item.appendChild(document.createTextNode(g.group + " " + pct(g.self_share) + " (" + fmt(g.in_step_self_ns) + ")"));
      legend.appendChild(item);
    });
    s.appendChild(svg);
    s.appendChild(legend);
    var beside = (d.overlap || {names: []}).names;
    if (beside.length === 0) return;
    s.appendChild(el("p", {"class": "note"},
        "Beside the steps, on other threads or processes: the time these spans overlapped the " +
        "steps, and the part of it that was exposed (the step's own thread was in a span of the " +
        "same group, or in none)."));
    s.appendChild(table([
      {title: "group", text: function (n) { return n.group; }},
      {title: "name", text: function (n) { return n.name; }},
      {title: "spans", num: true, text: function (n) { return String(n.spans); }},
      {title: "overlapped", num: true, text: function (n) { return fmt(n.overlapped_ns) + " (" + pct(n.overlapped_share) + ")"; }},
      {title: "exposed", num: true, text: function (n) { return fmt(n.exposed_ns) + " (" + pct(n.exposed_share) + ")"; }}
    ], beside, function () { return {"class": "overlap-row"}; }));
  }

  function measureText(m) {
    return m === "arrival" ? "late at the collectives" : m === "gpu_busy" ? "GPU busy" : "step time";
  }
  // The group a rank spent most above the median rank in (not communication, where the others
  // wait), as text.
  function slowerIn(groups) {
    var g = (groups || []).filter(function (x) {
      return x.group !== "communication" && x.excess_ns_per_step > 0;
    })[0];
    if (!g) return "-";
    return g.group + " +" + fmt(g.excess_ns_per_step) +
        (g.median_ns_per_step ? " (+" + (g.excess_ns_per_step / g.median_ns_per_step * 100).toFixed(1) + "%)" : "");
  }
  function stragglers(d) {
    var s = section("Stragglers", "stragglers");
    s.appendChild(el("p", {"class": "note"}, "Compared within the ranks that run the same spans: a " +
        "rank whose lateness at the collectives, median step time" +
        (d.gpu ? " or median GPU busy per step" : "") + " is more than " + d.stragglers.mads +
        " MADs, as many standard errors of its excess and " + d.stragglers.threshold_pct +
        "% of the median step above the median rank's."));
    if (d.stragglers.ranks.length === 0) {
      s.appendChild(el("p", {"class": "no-stragglers"}, "None."));
      return;
    }
    var columns = [
      {title: "rank", text: function (r) { return rankLabel(r.rank); }},
      {title: "step", text: function (r) { return r.name; }},
      {title: "flagged by", text: function (r) { return r.flagged_by.map(measureText).join(", "); }},
      {title: "late/step", num: true, text: function (r) { return r.matched_steps ? fmt(r.late_ns - r.median_late_ns) : "-"; }},
      {title: "median step", num: true, text: function (r) { return fmt(r.step_p50_ns) + " (ranks " + fmt(r.median_step_ns) + ")"; }},
      {title: "slower in", text: function (r) { return slowerIn(r.groups); }}];
    if (d.gpu) columns.push({title: "GPU slower in", text: function (r) { return slowerIn(r.gpu_groups); }});
    columns = columns.concat([
      {title: "last into", text: function (r) {
        var l = r.last_into[0];
        return l && l.last ? l.name + " " + l.last + " of " + l.of : "-";
      }},
      {title: "others waited/step", num: true, text: function (r) { return r.wait_caused_ns ? fmt(r.wait_caused_per_step_ns) : "-"; }},
      {title: "of their step", num: true, text: function (r) { return r.wait_caused_ns ? pct(r.wait_caused_share) : "-"; }}]);
    s.appendChild(table(columns, d.stragglers.ranks, function (r) {
      return {"class": "straggler-row", "data-rank": rankLabel(r.rank), "data-flagged-by": r.flagged_by.join(" ")};
    }));
  }

  // The steps the flight recorder captured detail of: per step (name and iteration), its ranks
  // (the least time in communication first: the one the others waited for), and their spans
  // drawn on the step's own axis, one lane per depth below the step (captured spans solid,
  // exported ones pale).
  function captured(d) {
    var c = d.captured;
    if (!c) return {steps: 0, boxes: 0};
    var s = section("Captured steps", "captured");
    var reasons = Object.keys(c.by_reason).sort().map(function (k) { return k + " " + c.by_reason[k]; });
    s.appendChild(el("p", {"class": "note"},
        "The flight recorder's detail, exported only for these steps: " + c.spans +
        " captured spans (" + reasons.join(", ") + ")" +
        (c.outside_steps ? ", " + c.outside_steps + " of them in no top-level step" : "") +
        (c.steps.length < c.steps_total ? "; " + c.steps.length + " of " + c.steps_total +
         " captured steps kept, the longest" : "") +
        ". Per step, its ranks with the least time in communication first (the one the others " +
        "waited for); the chart draws " +
        "the spans of the first ranks on the step's own time axis, one lane per depth (solid: " +
        "captured; pale: exported as they ended). Hover a span for its name and duration."));
    var groups = [];
    c.steps.forEach(function (x) {
      var last = groups[groups.length - 1];
      if (last && x.iteration !== null && last.rows[0].iteration === x.iteration &&
          last.rows[0].name === x.name) {
        last.rows.push(x);
      } else {
        groups.push({rows: [x]});
      }
    });
    var colors = groupColors(d), drawnBoxes = 0;
    groups.forEach(function (g) {
      var lead = g.rows[0], why = {};
      g.rows.forEach(function (x) { x.reasons.forEach(function (r) { why[r] = true; }); });
      s.appendChild(el("h3", {"class": "captured-title"}, lead.name +
          (lead.iteration !== null ? " iteration " + lead.iteration : "") + ": " +
          (g.rows.length === 1 ? "rank " + rankLabel(lead.rank) : g.rows.length + " ranks") +
          " (" + Object.keys(why).sort().join(", ") + ")"));
      s.appendChild(table([
        {title: "rank", text: function (x) { return rankLabel(x.rank); }},
        {title: "reason", text: function (x) { return x.reasons.join(", "); }},
        {title: "step", num: true, text: function (x) { return fmt(x.duration_ns); }, sort: function (x) { return x.duration_ns; }},
        {title: "x median", num: true, text: function (x) { return x.median_ns ? (x.duration_ns / x.median_ns).toFixed(1) + "x" : "-"; },
         sort: function (x) { return x.median_ns ? x.duration_ns / x.median_ns : 0; }},
        {title: "spans", num: true, text: function (x) { return String(x.spans); }, sort: function (x) { return x.spans; }},
        {title: "captured", num: true, text: function (x) { return String(x.captured_spans); }, sort: function (x) { return x.captured_spans; }},
        {title: "communication", num: true, text: function (x) { return fmt(x.communication_ns); },
         sort: function (x) { return x.communication_ns; }},
        {title: "most own time", text: function (x) {
          var n = x.names[0];
          return n ? n.name + " (" + n.group + ") " + fmt(n.own_ns) : "-";
        }}
      ], g.rows, function (x) { return {"class": "captured-row", "data-rank": rankLabel(x.rank)}; },
      g.rows.length > 20));
      var drawn = g.rows.filter(function (x) { return x.boxes; });
      if (!drawn.length) return;
      var lo = Infinity, hi = -Infinity, depth = 0;
      drawn.forEach(function (x) {
        lo = Math.min(lo, x.start_unix_ns);
        hi = Math.max(hi, x.start_unix_ns + x.duration_ns);
        x.boxes.forEach(function (b) { depth = Math.max(depth, b[2]); });
      });
      var laneH = 12, laneGap = 1, rankGap = 10, top = 4;
      var rankH = (depth + 1) * (laneH + laneGap);
      var height = top + drawn.length * (rankH + rankGap) + 18;
      var svg = svgEl("svg", {viewBox: "0 0 " + WIDTH + " " + height, width: "100%", role: "img",
                              "class": "captured-svg", "aria-label": "captured step"});
      var span = Math.max(1, hi - lo);
      var cx = function (t) { return LEFT + (t - lo) / span * PLOT; };
      [0, 0.25, 0.5, 0.75, 1].forEach(function (f) {
        var t = lo + f * span;
        svg.appendChild(svgEl("line", {x1: cx(t), x2: cx(t), y1: top, y2: height - 16, stroke: "#e3e7ee"}));
        svg.appendChild(svgEl("text", {x: cx(t), y: height - 4,
                                       "text-anchor": f === 0 ? "start" : f === 1 ? "end" : "middle"},
                              "+" + fmt(t - lo)));
      });
      var y = top;
      drawn.forEach(function (x) {
        var row = svgEl("g", {"class": "captured-rank", "data-rank": rankLabel(x.rank),
                              "data-boxes": String(x.boxes.length)});
        row.appendChild(svgEl("text", {"class": "rank-label", x: LEFT - 8, y: y + laneH - 2,
                                       "text-anchor": "end"}, "rank " + rankLabel(x.rank)));
        x.boxes.forEach(function (b) {
          var name = c.box_names[b[3]], start = x.start_unix_ns + b[0];
          var bx = cx(start), w = Math.max(0.5, cx(start + b[1]) - bx);
          var r = svgEl("rect", {"class": "captured-box", "data-captured": b[4] ? "true" : "false",
                                 "data-group": name[0], "data-name": name[1], x: bx,
                                 y: y + b[2] * (laneH + laneGap), width: w, height: laneH,
                                 fill: colors[name[0]] || "#999999",
                                 "fill-opacity": b[4] ? "0.95" : "0.35"});
          r.appendChild(svgEl("title", {}, "rank " + rankLabel(x.rank) + ": " + name[1] + " (" +
                                           name[0] + ") " + fmt(b[1]) + " at +" + fmt(start - lo) +
                                           (b[4] ? ", captured" : ", exported")));
          row.appendChild(r);
          drawnBoxes += 1;
        });
        if (x.boxes_dropped) {
          row.appendChild(svgEl("text", {x: LEFT + PLOT, y: y + laneH - 2, "text-anchor": "end"},
                                x.boxes_dropped + " shorter spans not drawn"));
        }
        svg.appendChild(row);
        y += rankH + rankGap;
      });
      s.appendChild(svg);
    });
    return {steps: c.steps.length, boxes: drawnBoxes};
  }

  // The collectives matched across ranks: per rank, how often it was last, how late it arrived,
  // its own wait and what it made the others wait.
  function waits(d) {
    var rows = [];
    (d.collectives || []).forEach(function (c) {
      c.ranks.forEach(function (r) { if (r.matched_steps) rows.push({name: c.name, roles: c.roles.length, r: r}); });
    });
    if (!rows.length) return;
    var s = section("Waits at the collectives", "waits");
    s.appendChild(el("p", {"class": "note"},
        "Communication spans matched across ranks by step, name and order. last: collectives it " +
        "arrived last into; late: how much less than the median rank it waited, per step; waited: " +
        "its own wait per step; caused: what each other rank waited for it, per step, and the share " +
        "of their step time. Flagged ranks first, then by lateness; click a header to sort."));
    rows.sort(function (a, b) {
      if (a.r.straggler !== b.r.straggler) return a.r.straggler ? -1 : 1;
      return b.r.late_ns - a.r.late_ns;
    });
    var wrap = table([
      {title: "rank", text: function (x) { return rankLabel(x.r.rank); }, sort: function (x) { return x.r.rank === null ? Infinity : x.r.rank; }},
      {title: "step", text: function (x) { return x.name + (x.roles > 1 ? " (role " + (x.r.role + 1) + ")" : ""); }},
      {title: "steps", num: true, text: function (x) { return String(x.r.matched_steps); }, sort: function (x) { return x.r.matched_steps; }},
      {title: "last", num: true, text: function (x) { return x.r.last_count + "/" + x.r.collectives; }, sort: function (x) { return x.r.last_count; }},
      {title: "late", num: true, text: function (x) { return (x.r.late_ns < 0 ? "-" : "") + fmt(Math.abs(x.r.late_ns)); }, sort: function (x) { return x.r.late_ns; }},
      {title: "waited", num: true, text: function (x) { return fmt(x.r.waited_ns / x.r.matched_steps) + " (" + pct(x.r.waited_share) + ")"; }, sort: function (x) { return x.r.waited_ns; }},
      {title: "caused", num: true, text: function (x) { return fmt(x.r.wait_caused_per_step_ns) + " (" + pct(x.r.wait_caused_share) + ")"; }, sort: function (x) { return x.r.wait_caused_ns; }}
    ], rows, function (x) {
      return {"class": "wait-row" + (x.r.straggler ? " is-straggler" : ""), "data-rank": rankLabel(x.r.rank)};
    });
    if (rows.length > 20) wrap.className += " tall";
    s.appendChild(wrap);
  }

  function gpuSteps(d) {
    if (!d.gpu) return;
    var s = section("GPU time per step", "gpu");
    var rows = [];
    d.ranks.forEach(function (r) {
      (r.gpu_steps || []).forEach(function (st) { rows.push({rank: r.rank, step: st}); });
    });
    if (rows.length === 0) { s.appendChild(el("p", {"class": "note"}, "No top-level step span had GPU times.")); return; }
    s.appendChild(el("p", {"class": "note"},
        "Per rank, over its steps with GPU times: busy, the GPU activity of the step and its " +
        "spans; idle, the rest of the step, to its last GPU activity; exposed communication, " +
        "communication on the GPU while no other GPU work of the step ran."));
    s.appendChild(table([
      {title: "rank", text: function (r) { return rankLabel(r.rank); }, sort: function (r) { return r.rank === null ? Infinity : r.rank; }},
      {title: "step", text: function (r) { return r.step.name; }},
      {title: "steps", num: true, text: function (r) { return String(r.step.count); }, sort: function (r) { return r.step.count; }},
      {title: "busy p50", num: true, text: function (r) { return fmt(r.step.gpu_busy_p50_ns); }, sort: function (r) { return r.step.gpu_busy_p50_ns; }},
      {title: "busy", num: true, text: function (r) { return fmt(r.step.gpu_busy_ns); }, sort: function (r) { return r.step.gpu_busy_ns; }},
      {title: "idle", num: true, text: function (r) { return fmt(r.step.gpu_idle_ns); }, sort: function (r) { return r.step.gpu_idle_ns; }},
      {title: "exposed comm", num: true, text: function (r) { return fmt(r.step.gpu_exposed_comm_ns); }, sort: function (r) { return r.step.gpu_exposed_comm_ns; }}
    ], rows, function (r) {
      return {"class": "gpu-step-row" + (r.step.straggler ? " is-straggler" : ""), "data-rank": rankLabel(r.rank)};
    }, rows.length > 20));
  }

  function rankSteps(d) {
    var s = section("Step time per rank", "ranks");
    var rows = [];
    d.ranks.forEach(function (r) {
      r.steps.forEach(function (st) { rows.push({rank: r.rank, step: st}); });
    });
    if (rows.length === 0) { s.appendChild(el("p", {"class": "note"}, "No spans of group step.")); return; }
    s.appendChild(table([
      {title: "rank", text: function (r) { return rankLabel(r.rank); }, sort: function (r) { return r.rank === null ? Infinity : r.rank; }},
      {title: "step", text: function (r) { return r.step.name; }},
      {title: "count", num: true, text: function (r) { return String(r.step.count); }, sort: function (r) { return r.step.count; }},
      {title: "p50", num: true, text: function (r) { return fmt(r.step.p50_ns); }, sort: function (r) { return r.step.p50_ns; }},
      {title: "p95", num: true, text: function (r) { return fmt(r.step.p95_ns); }, sort: function (r) { return r.step.p95_ns; }},
      {title: "max", num: true, text: function (r) { return fmt(r.step.max_ns); }, sort: function (r) { return r.step.max_ns; }}
    ], rows, function (r) {
      return {"class": "rank-step-row" + (r.step.straggler ? " is-straggler" : ""), "data-rank": rankLabel(r.rank)};
    }, rows.length > 20));
  }

  function names(d) {
    var s = section("Time by span group and name", "names");
    s.appendChild(el("p", {"class": "note"},
        "step%: time inside top-level step spans as a share of the step time; self%: the same " +
        "for self time." + (d.gpu ? " gpu busy: the spans' GPU busy time added up; gpu step%: " +
        "the part within the steps, as a share of the step time; gpu util: busy within their " +
        "GPU intervals." : "") + " Click a numeric header to sort." +
        (d.names.length < d.names_total ? " Showing " + d.names.length + " of " + d.names_total + " rows." : "") +
        (d.captured ? " With the " + d.captured.spans + " spans the flight recorder captured, " +
                      "which only the captured steps have." : "")));
    s.appendChild(table([
      {title: "group", text: function (n) { return n.group; }},
      {title: "name", text: function (n) { return n.name; }},
      {title: "count", num: true, text: function (n) { return String(n.count); }, sort: function (n) { return n.count; }},
      {title: "total", num: true, text: function (n) { return fmt(n.total_ns); }, sort: function (n) { return n.total_ns; }},
      {title: "mean", num: true, text: function (n) { return fmt(n.mean_ns); }, sort: function (n) { return n.mean_ns; }},
      {title: "p50", num: true, text: function (n) { return fmt(n.p50_ns); }, sort: function (n) { return n.p50_ns; }},
      {title: "p95", num: true, text: function (n) { return fmt(n.p95_ns); }, sort: function (n) { return n.p95_ns; }},
      {title: "max", num: true, text: function (n) { return fmt(n.max_ns); }, sort: function (n) { return n.max_ns; }},
      {title: "step%", num: true, text: function (n) { return pct(n.step_share); }, sort: function (n) { return n.step_share || 0; }},
      {title: "self%", num: true, text: function (n) { return pct(n.self_share); }, sort: function (n) { return n.self_share || 0; }}
    ].concat(d.gpu ? [
      {title: "gpu busy", num: true, text: function (n) { return fmt(n.gpu_busy_ns); }, sort: function (n) { return n.gpu_busy_ns || 0; }},
      {title: "gpu step%", num: true, text: function (n) { return n.gpu_busy_ns === null ? "-" : pct(n.gpu_step_share); },
       sort: function (n) { return n.gpu_step_share || 0; }},
      {title: "gpu util", num: true, text: function (n) { return pct(n.gpu_utilization); },
       sort: function (n) { return n.gpu_utilization || 0; }}
    ] : []), d.names, function (n) { return {"class": "name-row", "data-group": n.group}; }));
  }

  function truncatedAndMalformed(d, last) {
    if (d.truncated.count > 0) {
      var s = section("Truncated spans (" + d.truncated.count + ")", "truncated");
      s.appendChild(el("p", {"class": "note"}, "Spans still open at shutdown, ended there."));
      s.appendChild(table([
        {title: "rank", text: function (t) { return rankLabel(t.rank); }},
        {title: "group", text: function (t) { return t.group; }},
        {title: "name", text: function (t) { return t.name; }},
        {title: "duration", num: true, text: function (t) { return fmt(t.duration_ns); }}
      ], d.truncated.spans, function () { return {"class": "truncated-row"}; }));
    }
    if (last && d.malformed.count > 0) {
      var m = section("Malformed lines (" + d.malformed.count + ", skipped)", "malformed");
      m.appendChild(table([
        {title: "file", text: function (l) { return l.file; }},
        {title: "line", num: true, text: function (l) { return String(l.line); }},
        {title: "error", text: function (l) { return l.error; }}
      ], d.malformed.lines, function () { return {"class": "malformed-row"}; }));
    }
  }

  try {
    var data = JSON.parse(document.getElementById("lens-data").textContent);
    var runs = Array.isArray(data) ? data : [data];
    document.getElementById("summary").textContent = inputSummary(runs[0], runs.length);
    var totals = {ranks: 0, stragglers: 0, names: 0, steps: 0, charts: 0, points: 0, gpuRows: 0,
                  gpuBoxes: 0, heatmaps: 0, gpu: false, capturedSteps: 0, capturedBoxes: 0};
    runs.forEach(function (d, i) {
      idSuffix = i === 0 ? "" : "-run" + i;
      target = el("div", {"class": "run", "data-run": d.run_ids.length ? d.run_ids[0] : ""});
      document.getElementById("report").appendChild(target);
      if (runs.length > 1) {
        target.appendChild(el("h2", {"class": "run-title"},
            "Run " + (d.run_ids.length ? d.run_ids[0] : "(no nemo.run.id)")));
      }
      target.appendChild(el("p", {"class": "summary"}, summary(d)));
      var axis = timeAxis(d);
      var gpu = timeline(d, axis) || {rows: 0, boxes: 0};
      var charts = metricCharts(d, axis);
      breakdown(d);
      stragglers(d);
      var caught = captured(d);
      waits(d);
      rankSteps(d);
      gpuSteps(d);
      names(d);
      truncatedAndMalformed(d, i === runs.length - 1);
      totals.ranks += d.ranks.length;
      totals.stragglers += d.stragglers.ranks.length;
      totals.names += d.names.length;
      totals.steps += d.step.count;
      totals.charts += charts.charts;
      totals.points += charts.points;
      totals.gpuRows += gpu.rows;
      totals.gpuBoxes += gpu.boxes;
      totals.heatmaps += gpu.heatmaps || 0;
      totals.gpu = totals.gpu || !!d.gpu;
      totals.capturedSteps += caught.steps;
      totals.capturedBoxes += caught.boxes;
    });
    var rendered = {id: "lens-rendered", hidden: "",
        "data-ranks": String(totals.ranks), "data-stragglers": String(totals.stragglers),
        "data-names": String(totals.names), "data-steps": String(totals.steps),
        "data-charts": String(totals.charts), "data-chart-points": String(totals.points)};
    if (totals.gpu) {
      rendered["data-gpu-rows"] = String(totals.gpuRows);
      rendered["data-gpu-boxes"] = String(totals.gpuBoxes);
    }
    if (totals.heatmaps) rendered["data-heatmaps"] = String(totals.heatmaps);
    if (totals.capturedSteps) {
      rendered["data-captured-steps"] = String(totals.capturedSteps);
      rendered["data-captured-boxes"] = String(totals.capturedBoxes);
    }
    if (runs.length > 1) rendered["data-runs"] = String(runs.length);
    document.body.appendChild(el("div", rendered));
    document.documentElement.setAttribute("data-lens-rendered", "ok");
  } catch (e) {
    document.documentElement.setAttribute("data-lens-rendered", "error");
    document.getElementById("report").appendChild(el("pre", {id: "lens-error"},
        "The report could not be drawn: " + (e && e.stack ? e.stack : e)));
  }
})();
</script>
</body>
</html>
)html";

}  // namespace

std::string html_report(const nlohmann::ordered_json& data) {
  // Inside <script>, "</script" or "<!--" would end or confuse the element: JSON allows "<" only
  // inside strings, where \u003c means the same.
  const std::string json = dump_json(data);
  std::string out(kHead);
  out.reserve(kHead.size() + json.size() + kTail.size() + 64);
  for (char c : json) {
    if (c == '<') {
      out += "\\u003c";
    } else {
      out += c;
    }
  }
  out += kTail;
  return out;
}

void write_text_file(const std::string& path, std::string_view text) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) throw FileError("cannot write '" + path + "': " + std::strerror(errno));
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const int saved = errno;
  if (std::fclose(f) != 0 || !written) {
    throw FileError("cannot write '" + path + "': " + std::strerror(written ? errno : saved));
  }
}

}  // namespace nemo::lens::cli
