// ral-trace report: sortable tables and a zoomable per-device timeline. No network, no libraries.
"use strict";
(function () {
  const errorBox = document.getElementById("errors");
  function reportError(message) {
    // Errors land in the page (#errors) so a headless browser test can see them in the DOM.
    errorBox.hidden = false;
    const li = document.createElement("li");
    li.textContent = String(message);
    errorBox.querySelector("ul").appendChild(li);
  }
  window.addEventListener("error", (e) => reportError(e.message));
  window.addEventListener("unhandledrejection", (e) => reportError(e.reason));

  function fmtUs(us) {
    if (us < 1000) return us.toFixed(1) + " µs";
    if (us < 1e6) return (us / 1000).toFixed(2) + " ms";
    return (us / 1e6).toFixed(3) + " s";
  }

  function makeSortable(table) {
    const heads = table.tHead.rows[0].cells;
    Array.from(heads).forEach((th, col) => {
      th.title = "click to sort";
      th.addEventListener("click", () => {
        const desc = th.dataset.dir !== "desc";
        Array.from(heads).forEach((h) => delete h.dataset.dir);
        th.dataset.dir = desc ? "desc" : "asc";
        const body = table.tBodies[0];
        const key = (row) => {
          const cell = row.cells[col];
          return cell.dataset.v !== undefined ? parseFloat(cell.dataset.v) : cell.textContent;
        };
        const rows = Array.from(body.rows).sort((a, b) => {
          const ka = key(a), kb = key(b);
          const c = typeof ka === "number" ? ka - kb : String(ka).localeCompare(String(kb));
          return desc ? -c : c;
        });
        rows.forEach((r) => body.appendChild(r));
      });
    });
  }

  function niceStep(range, target) {
    const raw = range / target;
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const m of [1, 2, 5, 10]) if (m * mag >= raw) return m * mag;
    return 10 * mag;
  }

  function Timeline(canvas, tooltip, data) {
    const AXIS = 22, GUTTER = 150, HEADER = 18, ROW = 16, SUB = 5;
    const ctx = canvas.getContext("2d");
    // rows: one per (device, stream); ops sorted by start within each row.
    const rows = [];
    const lanes = data.lanes.map((lane, li) => {
      const streamRow = {};
      lane.streams.forEach((s) => {
        streamRow[s] = rows.length;
        rows.push({ lane: li, stream: s, ops: [], maxDur: 0, maxDepth: 0 });
      });
      return { ...lane, streamRow };
    });
    for (const op of data.ops) {
      const row = rows[lanes[op[0]].streamRow[op[1]]];
      row.ops.push(op);
      row.maxDur = Math.max(row.maxDur, op[3]);
      row.maxDepth = Math.max(row.maxDepth, Math.min(op[7], 3));
    }
    let y = AXIS;
    lanes.forEach((lane, li) => {
      lane.y = y;
      y += HEADER;
      rows.filter((r) => r.lane === li).forEach((r) => {
        r.y = y;
        r.h = ROW + r.maxDepth * SUB;
        y += r.h + 2;
      });
      y += 6;
    });
    const height = y;
    const span = Math.max(data.span, 1);
    let t0 = 0, t1 = span, drag = null;

    function width() { return canvas.clientWidth; }
    function xOf(t) { return GUTTER + ((t - t0) / (t1 - t0)) * (width() - GUTTER); }
    function tOf(x) { return t0 + ((x - GUTTER) / (width() - GUTTER)) * (t1 - t0); }

    function firstVisible(row) {
      // Binary search for the first op that may reach into the window.
      let lo = 0, hi = row.ops.length, from = t0 - row.maxDur;
      while (lo < hi) {
        const mid = (lo + hi) >> 1;
        if (row.ops[mid][2] < from) lo = mid + 1; else hi = mid;
      }
      return lo;
    }

    function draw() {
      const dpr = window.devicePixelRatio || 1;
      const w = width();
      canvas.width = w * dpr;
      canvas.height = height * dpr;
      canvas.style.height = height + "px";
      ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      ctx.clearRect(0, 0, w, height);
      ctx.font = "11px sans-serif";
      ctx.textBaseline = "middle";
      const step = niceStep(t1 - t0, Math.max(2, (w - GUTTER) / 110));
      ctx.fillStyle = "#555";
      ctx.strokeStyle = "#e4e4e4";
      for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) {
        const x = xOf(t);
        ctx.beginPath(); ctx.moveTo(x, AXIS - 4); ctx.lineTo(x, height); ctx.stroke();
        ctx.fillText(fmtUs(t), x + 2, 9);
      }
      lanes.forEach((lane) => {
        ctx.fillStyle = lane.colour;
        ctx.fillRect(0, lane.y, w, HEADER - 2);
        ctx.fillStyle = "#111";
        ctx.fillText(lane.label + "  (" + (lane.vendor || "unknown vendor") + ")", 4, lane.y + HEADER / 2 - 1);
        ctx.fillStyle = "#333";
        for (const ts of lane.syncs) {
          if (ts < t0 || ts > t1) continue;
          const x = xOf(ts);
          ctx.beginPath(); ctx.moveTo(x - 3, lane.y + 1); ctx.lineTo(x + 3, lane.y + 1); ctx.lineTo(x, lane.y + 7); ctx.fill();
        }
      });
      for (const row of rows) {
        ctx.fillStyle = "#666";
        ctx.fillText(row.stream === 0 ? "default stream" : "stream " + row.stream, 8, row.y + ROW / 2);
        ctx.save();
        ctx.beginPath(); ctx.rect(GUTTER, row.y, w - GUTTER, row.h); ctx.clip();
        for (let i = firstVisible(row); i < row.ops.length; i++) {
          const op = row.ops[i];
          if (op[2] > t1) break;
          const x = xOf(op[2]);
          const ow = Math.max(1, (op[3] / (t1 - t0)) * (w - GUTTER));
          const depth = Math.min(op[7], 3);
          const oy = row.y + depth * SUB, oh = row.h - depth * SUB;
          ctx.fillStyle = data.tiers[op[5]].colour;
          ctx.fillRect(x, oy, ow, oh);
          if (ow > 50) {
            ctx.fillStyle = "#fff";
            ctx.fillText(data.names[op[4]].replace("aten::", ""), x + 3, oy + oh / 2, ow - 6);
          }
        }
        ctx.restore();
      }
    }

    function hit(x, y) {
      const row = rows.find((r) => y >= r.y && y < r.y + r.h);
      if (!row || x < GUTTER) return null;
      const t = tOf(x), slop = (3 * (t1 - t0)) / (width() - GUTTER);
      let best = null;
      for (let i = firstVisible(row); i < row.ops.length && row.ops[i][2] <= t + slop; i++) {
        const op = row.ops[i];
        if (op[2] + op[3] + slop >= t && (!best || op[7] >= best[7])) best = op;
      }
      return best;
    }

    canvas.addEventListener("wheel", (e) => {
      e.preventDefault();
      const rect = canvas.getBoundingClientRect();
      const at = tOf(e.clientX - rect.left);
      const f = e.deltaY > 0 ? 1.25 : 0.8;
      const len = Math.min(span, Math.max(0.5, (t1 - t0) * f));
      t0 = Math.max(0, at - (at - t0) * (len / (t1 - t0)));
      t1 = Math.min(span, t0 + len);
      t0 = t1 - len;
      draw();
    }, { passive: false });
    canvas.addEventListener("mousedown", (e) => { drag = { x: e.clientX, t0, t1 }; });
    window.addEventListener("mouseup", () => { drag = null; });
    canvas.addEventListener("dblclick", () => { t0 = 0; t1 = span; draw(); });
    canvas.addEventListener("mousemove", (e) => {
      const rect = canvas.getBoundingClientRect();
      if (drag) {
        const dt = ((e.clientX - drag.x) / (width() - GUTTER)) * (drag.t1 - drag.t0);
        const len = drag.t1 - drag.t0;
        t0 = Math.min(Math.max(0, drag.t0 - dt), span - len);
        t1 = t0 + len;
        draw();
        return;
      }
      const op = hit(e.clientX - rect.left, e.clientY - rect.top);
      if (!op) { tooltip.hidden = true; return; }
      tooltip.hidden = false;
      tooltip.textContent = data.names[op[4]] + "  [" + data.tiers[op[5]].name + "]  " + fmtUs(op[3]) +
        "\nat " + fmtUs(op[2]) + "  " + data.lanes[op[0]].label + (data.shapes[op[6]] ? "\n" + data.shapes[op[6]] : "");
      tooltip.style.left = (e.clientX - rect.left + 12) + "px";
      tooltip.style.top = (e.clientY - rect.top + 12) + "px";
    });
    canvas.addEventListener("mouseleave", () => { tooltip.hidden = true; });
    window.addEventListener("resize", draw);
    draw();
  }

  try {
    document.querySelectorAll("table.sortable").forEach(makeSortable);
    const data = JSON.parse(document.getElementById("trace-data").textContent);
    Timeline(document.getElementById("timeline"), document.getElementById("tooltip"), data);
    document.body.dataset.rendered = "true";
  } catch (err) {
    reportError(err && err.stack ? err.stack : err);
  }
})();
