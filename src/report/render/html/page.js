// oomscope's report page. It only draws: every number, verdict and downsampled series comes
// computed in the JSON that `oomscope html` embedded (#oomscope-data). No library, no network.
(function () {
  'use strict';
  const errors = [];
  window.addEventListener('error', (e) => {
    errors.push(String(e.message));
    document.body.dataset.errors = String(errors.length);
  });
  const started = performance.now();
  const data = JSON.parse(document.getElementById('oomscope-data').textContent);

  const COLORS = {
    torch: '#e4572e', cublas: '#76b041', cudnn: '#2f7f4f', nccl: '#3b7dd8', jax: '#8e5bb5',
    cupy: '#17a398', other: '#8a94a6', untracked: '#c9ced8', free: '#eef1f5',
    parameters: '#3b7dd8', gradients: '#76b041', 'optimizer state': '#8e5bb5', activations: '#e4572e', cache: '#c9ced8',
  };
  const BLOCK_COLORS = ['#3b7dd8', '#f0a33a', '#e9edf3'];  // active_allocated, active_awaiting_free, inactive
  const POOL_COLORS = ['#5e6878', '#8e44ad', '#16a085', '#d35400', '#2c3e50', '#c0392b'];  // PyTorch's pools, the default first
  const MARKER_COLORS = { step: '#9aa3b2', label: '#3b7dd8', failure: '#f08c00', oom: '#c62828' };

  // ---- small helpers
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'class') e.className = v;
      else if (k === 'style') e.style.cssText = v;
      else e.setAttribute(k, v);
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }
  function bytes(b) {
    if (b === null || b === undefined) return '-';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let v = b, u = 0;
    while (Math.abs(v) >= 1024 && u < units.length - 1) { v /= 1024; u++; }
    return u === 0 ? `${v} B` : `${v.toFixed(2)} ${units[u]}`;
  }
  function seconds(ms) { return `${(ms / 1000).toFixed(3)} s`; }
  // A time axis label with as many digits as the tick step needs.
  function tickLabel(ms, step) {
    if (step >= 1000) return `${(ms / 1000).toFixed(Math.max(0, -Math.floor(Math.log10(step / 1000))))} s`;
    if (step >= 1) return `${(ms / 1000).toFixed(Math.min(6, 3 + Math.max(0, -Math.floor(Math.log10(step)))))} s`;
    return `${(ms / 1000).toFixed(Math.min(9, 4 + Math.max(0, -Math.floor(Math.log10(step)))))} s`;
  }
  function color(source) { return COLORS[source] || COLORS.other; }
  const tooltip = document.getElementById('tooltip');
  function showTooltip(x, y, content) {
    tooltip.replaceChildren(...content);
    tooltip.style.display = 'block';
    const w = tooltip.offsetWidth, h = tooltip.offsetHeight;
    tooltip.style.left = `${Math.min(x + 14, window.innerWidth - w - 8)}px`;
    tooltip.style.top = `${y + 16 + h > window.innerHeight ? y - h - 10 : y + 16}px`;
  }
  function hideTooltip() { tooltip.style.display = 'none'; }
  function row(label, value) { return el('div', { class: 'row' }, el('span', {}, label), el('b', {}, value)); }
  // A canvas of the box's width and the given height, at the screen's pixel density.
  function sizedCanvas(canvas, height) {
    const ratio = window.devicePixelRatio || 1;
    const width = canvas.parentElement.clientWidth || 1000;
    canvas.width = Math.round(width * ratio);
    canvas.height = Math.round(height * ratio);
    canvas.style.height = `${height}px`;
    const ctx = canvas.getContext('2d');
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    return { ctx, width, height };
  }
  function niceStep(range, ticks) {
    const raw = range / Math.max(1, ticks);
    const mag = Math.pow(10, Math.floor(Math.log10(raw || 1)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * mag >= raw) return m * mag;
    return 10 * mag;
  }
  function byteStep(max) {
    let step = 1;
    while (max / step > 6) step *= 2;
    return step;
  }

  // ---- headline and devices
  function drawHeadline() {
    const h = data.headline;
    const box = el('div', {});
    box.append(el('h1', {}, el('span', { class: h.alert ? 'alert' : '' }, h.title), h.rest));
    const dl = el('dl', {});
    for (const [label, value] of h.facts) dl.append(el('dt', {}, label), el('dd', {}, value));
    box.append(dl);
    document.getElementById('headline').append(box);
  }

  // A bar of parts [name, bytes] as shares of total, with its legend; hover for the values.
  function stackBar(parts, total) {
    const bar = el('div', { class: 'stackbar' });
    const legend = el('div', { class: 'legend' });
    for (const [name, b] of parts) {
      const share = (100 * b) / total;
      const span = el('span', { style: `width:${share}%;background:${color(name)}` });
      span.addEventListener('mousemove', (e) => showTooltip(e.clientX, e.clientY, [row(name, `${bytes(b)} (${share.toFixed(1)}%)`)]));
      span.addEventListener('mouseleave', hideTooltip);
      bar.append(span);
      legend.append(el('span', {}, el('i', { style: `background:${color(name)}` }), `${name} ${bytes(b)}`));
    }
    return [bar, legend];
  }

  // The framework's reserved memory by role (measured from its objects by the adapter).
  function roleBar(d, fw) {
    const reserved = Math.max(d.byRole.reduce((sum, [, b]) => sum + b, 0), 1);
    const title = el('div', { class: 'name' }, `${fw}'s memory by role${d.byRoleAtStep ? ' (at the last step sample)' : ''}`);
    return [title, ...stackBar(d.byRole, reserved)];
  }

  function drawDevices() {
    const box = document.getElementById('devices');
    if (!data.devices.length) { box.append(el('p', { class: 'empty' }, 'No device memory was allocated.')); return; }
    const fw = data.framework || 'the framework';
    for (const d of data.devices) {
      const card = el('div', { class: 'device' });
      card.append(el('div', { class: 'name' }, `device ${d.device}${d.name ? ` \u2014 ${d.name}` : ''}`));
      const total = d.total || Math.max(d.tracked + (d.untracked || 0), 1);
      const parts = d.bySource.slice();
      if (d.free !== null && d.total) parts.push(['free', d.free]);
      card.append(...stackBar(parts, total));
      if (d.byRole) card.append(...roleBar(d, fw));
      const figures = el('div', { class: 'figures' });
      const add = (label, value) => { if (value !== null && value !== undefined) figures.append(el('div', {}, el('span', {}, label), el('b', {}, bytes(value)))); };
      add('allocated', d.allocated);
      add('reserved', d.reserved);
      add('fragmented (reserved \u2212 allocated)', d.fragmented);
      add('tracked', d.tracked);
      add('peak tracked', d.peak);
      add(data.framework ? `outside ${fw} (untracked)` : 'untracked (the CUDA context, what no hook saw)', d.untracked);
      add('free', d.free);
      add('total', d.total);
      card.append(figures);
      if (d.request !== null && d.largestFree !== null) {
        const fits = d.largestFree >= d.request;
        card.append(el('div', { class: `fits ${fits ? 'yes' : 'no'}` },
          `The failed request of ${bytes(d.request)} against the largest free block inside reserved memory, ${bytes(d.largestFree)}: ${fits ? 'it fits' : 'it does not fit'}.`));
      }
      box.append(card);
    }
  }

  function drawDiagnosis() {
    const box = document.getElementById('diagnosis');
    if (!data.diagnosis.length) { box.append(el('p', { class: 'empty' }, "Nothing found by the playbook's rules.")); return; }
    for (const d of data.diagnosis) {
      box.append(el('div', { class: `finding ${d.severity}` },
        el('div', {}, el('span', { class: 'sev' }, d.severity), el('span', { class: 'code' }, d.code), d.message),
        el('div', { class: 'fix' }, d.suggestion)));
    }
  }

  // ---- memory over time: stacked sources at each bucket's peak, PyTorch's counters, markers
  function drawTimelines() {
    const box = document.getElementById('timelines');
    let series = 0;
    if (!data.overTime.length) box.append(el('p', { class: 'empty' }, 'No device memory in the timeline.'));
    for (const d of data.overTime) {
      series += d.sources.length;
      const chart = timelineChart(d);
      box.append(chart.wrap);
      paintTimeline(chart);
      attachTimeline(chart);
    }
    document.body.dataset.series = String(series);
    document.body.dataset.seriesPerDevice = JSON.stringify(data.overTime.map((d) => d.sources));
  }

  function timelineChart(d) {
    const wrap = el('div', { class: 'chart' });
    wrap.append(el('div', { class: 'title' }, `device ${d.device}`));
    const legend = el('div', { class: 'legend' });
    for (const s of d.sources) legend.append(el('span', {}, el('i', { style: `background:${color(s)}` }), s));
    legend.append(el('span', {}, el('i', { class: 'line', style: 'border-color:#7a1f12' }), 'peak'));
    if (d.reserved.length) legend.append(el('span', {}, el('i', { class: 'line', style: 'border-color:#1d2330' }), `${data.framework || 'framework'} reserved`));
    if (d.allocated.length) legend.append(el('span', {}, el('i', { class: 'dash', style: 'border-color:#1d2330' }), `${data.framework || 'framework'} allocated`));
    for (const kind of ['step', 'label', 'failure', 'oom']) {
      if (d.markers.some((m) => m[1] === kind)) legend.append(el('span', {}, el('i', { class: 'line', style: `border-color:${MARKER_COLORS[kind]}` }), kind === 'failure' ? 'failed allocation' : kind === 'oom' ? 'OOM' : kind));
    }
    wrap.append(legend);
    const canvasBox = el('div', { class: 'canvas-box' });
    const canvas = el('canvas', { 'aria-label': `memory over time on device ${d.device}` });
    canvasBox.append(canvas);
    wrap.append(canvasBox);
    const full = fullView(d), first = initialView(d);
    if (first.from !== full.from) wrap.append(el('p', { class: 'hint' }, `Opens at ${seconds(first.from)}, where the memory first reaches 1% of its peak: double-click the chart for the whole run from ${seconds(full.from)}.`));
    if (d.markersDropped) wrap.append(el('p', { class: 'hint' }, `${d.markersDropped} markers not drawn (evenly thinned).`));
    const chart = { d, canvas, view: initialView(d), drag: null, wrap };
    window.addEventListener('resize', () => paintTimeline(chart));
    return chart;
  }

  // The whole run, but for a long quiet start (model loading): the view opens where the memory
  // first reaches 1% of its peak. Double-click shows everything.
  function fullView(d) { return { from: d.start, to: Math.max(d.end, d.start + 0.001) }; }
  function initialView(d) {
    const full = fullView(d);
    const peak = d.totalMax.reduce((a, v) => Math.max(a, v), 0);
    const first = d.totalMax.findIndex((v) => v >= peak / 100);
    if (first <= 0) return full;
    const from = first > 0 ? d.t[first - 1] : d.start;
    const margin = 0.03 * (full.to - from);
    return from - margin > full.from + 0.1 * (full.to - full.from) ? { from: from - margin, to: full.to } : full;
  }

  const PAD = { left: 74, right: 14, top: 10, bottom: 40 };
  function paintTimeline(chart) {
    const { d, view } = chart;
    const { ctx, width, height } = sizedCanvas(chart.canvas, 280);
    chart.width = width;
    const plotW = width - PAD.left - PAD.right, plotH = height - PAD.top - PAD.bottom;
    let max = 1;
    for (let i = 0; i < d.t.length; i++) if (d.t[i] >= view.from && (i === 0 || d.t[i - 1] <= view.to) && d.totalMax[i] > max) max = d.totalMax[i];
    for (const [t, v] of d.reserved.concat(d.allocated)) if (t >= view.from && t <= view.to && v > max) max = v;
    const step = byteStep(max);
    max = Math.ceil((max * 1.05) / step) * step;
    const x = (t) => PAD.left + ((t - view.from) / (view.to - view.from)) * plotW;
    const y = (v) => PAD.top + plotH - (v / max) * plotH;
    chart.x = x; chart.max = max; chart.plotW = plotW;
    ctx.clearRect(0, 0, width, height);
    ctx.font = '11px system-ui, sans-serif';
    ctx.fillStyle = '#5e6878';
    ctx.strokeStyle = '#e6e9ef';
    ctx.lineWidth = 1;
    for (let v = 0; v <= max; v += step) {
      ctx.beginPath(); ctx.moveTo(PAD.left, y(v) + 0.5); ctx.lineTo(width - PAD.right, y(v) + 0.5); ctx.stroke();
      ctx.textAlign = 'right'; ctx.fillText(bytes(v), PAD.left - 6, y(v) + 4);
    }
    const tStep = niceStep(view.to - view.from, Math.max(2, Math.floor(plotW / 110)));
    ctx.textAlign = 'center';
    for (let t = Math.ceil(view.from / tStep) * tStep; t <= view.to; t += tStep) ctx.fillText(tickLabel(t, tStep), x(t), height - PAD.bottom + 16);
    ctx.fillText('time since the process started', PAD.left + plotW / 2, height - 6);
    // The stacked sources: each bucket's composition at its peak, from the bottom up.
    ctx.save();
    ctx.beginPath(); ctx.rect(PAD.left, PAD.top, plotW, plotH); ctx.clip();
    const base = new Float64Array(d.t.length);
    const first = Math.max(0, lowerBound(d.t, view.from) - 1), last = Math.min(d.t.length - 1, lowerBound(d.t, view.to) + 1);
    for (let s = 0; s < d.sources.length; s++) {
      const values = d.bytes[s];
      ctx.beginPath();
      ctx.moveTo(x(first > 0 ? d.t[first - 1] : view.from), y(base[first]));
      for (let i = first; i <= last; i++) {
        const from = i > 0 ? d.t[i - 1] : d.start;
        ctx.lineTo(x(from), y(base[i] + values[i]));
        ctx.lineTo(x(d.t[i]), y(base[i] + values[i]));
      }
      for (let i = last; i >= first; i--) {
        const from = i > 0 ? d.t[i - 1] : d.start;
        ctx.lineTo(x(d.t[i]), y(base[i]));
        ctx.lineTo(x(from), y(base[i]));
      }
      ctx.closePath();
      ctx.fillStyle = color(d.sources[s]);
      ctx.globalAlpha = 0.85;
      ctx.fill();
      ctx.globalAlpha = 1;
      for (let i = first; i <= last; i++) base[i] += values[i];
    }
    // The highest total within each span: a peak that came and went between two samples.
    ctx.strokeStyle = '#7a1f12'; ctx.lineWidth = 1; ctx.beginPath();
    for (let i = first; i <= last; i++) {
      const from = i > 0 ? d.t[i - 1] : d.start;
      if (i === first) ctx.moveTo(x(from), y(d.totalMax[i])); else ctx.lineTo(x(from), y(d.totalMax[i]));
      ctx.lineTo(x(d.t[i]), y(d.totalMax[i]));
    }
    ctx.stroke();
    // PyTorch's counters at its step samples.
    const line = (points, dash) => {
      if (!points.length) return;
      ctx.setLineDash(dash); ctx.strokeStyle = '#1d2330'; ctx.lineWidth = 1.5; ctx.beginPath();
      points.forEach(([t, v], i) => (i ? ctx.lineTo(x(t), y(v)) : ctx.moveTo(x(t), y(v))));
      ctx.stroke(); ctx.setLineDash([]);
    };
    line(d.reserved, []);
    line(d.allocated, [5, 4]);
    // Markers: short ticks along the bottom, the OOM across the plot.
    for (const [t, kind] of d.markers) {
      if (t < view.from || t > view.to) continue;
      ctx.strokeStyle = MARKER_COLORS[kind]; ctx.lineWidth = kind === 'oom' ? 2 : 1;
      ctx.beginPath();
      ctx.moveTo(x(t) + 0.5, kind === 'oom' ? PAD.top : PAD.top + plotH - (kind === 'step' ? 6 : 14));
      ctx.lineTo(x(t) + 0.5, PAD.top + plotH);
      ctx.stroke();
    }
    ctx.restore();
    ctx.strokeStyle = '#9aa3b2'; ctx.lineWidth = 1;
    ctx.strokeRect(PAD.left + 0.5, PAD.top + 0.5, plotW, plotH);
    if (chart.drag && chart.drag.to !== null) {
      ctx.fillStyle = 'rgba(59,125,216,0.15)';
      const a = Math.min(chart.drag.from, chart.drag.to), b = Math.max(chart.drag.from, chart.drag.to);
      ctx.fillRect(a, PAD.top, b - a, plotH);
    }
  }

  function lowerBound(sorted, value) {
    let lo = 0, hi = sorted.length;
    while (lo < hi) { const mid = (lo + hi) >> 1; if (sorted[mid] < value) lo = mid + 1; else hi = mid; }
    return lo;
  }

  function timeAt(chart, px) { return chart.view.from + ((px - PAD.left) / chart.plotW) * (chart.view.to - chart.view.from); }

  function attachTimeline(chart) {
    const { canvas, d } = chart;
    const local = (e) => e.clientX - canvas.getBoundingClientRect().left;
    canvas.addEventListener('mousedown', (e) => { chart.drag = { from: local(e), to: null }; });
    canvas.addEventListener('mousemove', (e) => {
      const px = local(e);
      if (chart.drag) { chart.drag.to = px; paintTimeline(chart); return; }
      const t = timeAt(chart, px);
      if (t < chart.view.from || t > chart.view.to) { hideTooltip(); return; }
      const i = Math.min(d.t.length - 1, lowerBound(d.t, t));
      const content = [row('time', seconds(t))];
      let total = 0;
      d.sources.forEach((s, k) => { total += d.bytes[k][i]; });
      content.push(row('peak in this span', bytes(d.totalMax[i])));
      content.push(row('at its end', bytes(total)));
      d.sources.forEach((s, k) => { if (d.bytes[k][i]) content.push(row(s, bytes(d.bytes[k][i]))); });
      const sample = (points) => { let best = null; for (const p of points) if (p[0] <= t) best = p; return best; };
      const reserved = sample(d.reserved), allocated = sample(d.allocated);
      if (reserved) content.push(row(`${data.framework || 'framework'} reserved`, bytes(reserved[1])));
      if (allocated) content.push(row(`${data.framework || 'framework'} allocated`, bytes(allocated[1])));
      const near = d.markers.filter((m) => Math.abs(chart.x(m[0]) - px) < 4);
      for (const m of near.slice(-3)) content.push(el('div', { class: 'mono' }, m[2]));
      showTooltip(e.clientX, e.clientY, content);
    });
    const end = () => {
      if (chart.drag && chart.drag.to !== null && Math.abs(chart.drag.to - chart.drag.from) > 4) {
        const a = timeAt(chart, Math.min(chart.drag.from, chart.drag.to)), b = timeAt(chart, Math.max(chart.drag.from, chart.drag.to));
        chart.view = { from: Math.max(d.start, a), to: Math.min(Math.max(d.end, d.start + 0.001), b) };
      }
      chart.drag = null;
      paintTimeline(chart);
    };
    canvas.addEventListener('mouseup', end);
    canvas.addEventListener('mouseleave', () => { hideTooltip(); if (chart.drag) end(); });
    canvas.addEventListener('dblclick', () => {
      const full = fullView(d);
      chart.view = chart.view.from === full.from && chart.view.to === full.to ? initialView(d) : full;
      paintTimeline(chart);
    });
  }

  // ---- the flame graph (an icicle: root on top)
  const flame = { root: null, focus: null, path: [], query: '', boxes: [] };
  const ROW = 19;
  function flameDepth(node) { let depth = 0; for (const c of node.c || []) depth = Math.max(depth, flameDepth(c)); return depth + 1; }
  function matches(node, query) {
    if (!query) return false;
    if (node.n.toLowerCase().includes(query)) return true;
    return (node.d || []).some((s) => s.toLowerCase().includes(query));
  }
  function nodeColor(node, dim) {
    const palette = { root: '#5e6878', device: '#5e6878', python: '#e4a72e', native: '#4f86c6', nostack: '#a0a7b4', smaller: '#c9ced8' };
    const c = palette[node.k] || '#8a94a6';
    return dim ? `${c}55` : c;
  }
  function paintFlame() {
    const canvas = document.getElementById('flame');
    const focus = flame.focus;
    const rows = flame.path.length + flameDepth(focus);
    const { ctx, width } = sizedCanvas(canvas, Math.max(rows * ROW + 4, 60));
    ctx.clearRect(0, 0, width, rows * ROW + 4);
    ctx.font = '11.5px system-ui, sans-serif';
    ctx.textBaseline = 'middle';
    flame.boxes = [];
    const query = flame.query;
    let matched = 0;
    const box = (node, x, y, w, dim) => {
      ctx.fillStyle = nodeColor(node, dim);
      ctx.fillRect(x, y, Math.max(w - 1, 0.5), ROW - 1);
      if (query && matches(node, query)) { ctx.strokeStyle = '#c62828'; ctx.lineWidth = 2; ctx.strokeRect(x + 1, y + 1, Math.max(w - 3, 0.5), ROW - 3); }
      if (w > 40) {
        ctx.fillStyle = node.k === 'python' ? '#1d2330' : '#fff';
        const label = `${node.n}  ${bytes(node.v)}`;
        ctx.save(); ctx.beginPath(); ctx.rect(x, y, w - 2, ROW); ctx.clip();
        ctx.fillText(label, x + 4, y + ROW / 2);
        ctx.restore();
      }
      flame.boxes.push({ node, x, y, w });
    };
    flame.path.forEach((node, depth) => box(node, 0, depth * ROW, width, false));
    const walk = (node, x, w, depth, inMatch) => {
      const hit = matches(node, query);
      if (hit && !inMatch) matched += node.v;
      box(node, x, (flame.path.length + depth) * ROW, w, query && !hit && !inMatch);
      let cx = x;
      for (const c of node.c || []) {
        const cw = node.v ? (w * c.v) / node.v : 0;
        if (cw >= 0.3) walk(c, cx, cw, depth + 1, inMatch || hit);
        cx += cw;
      }
    };
    walk(focus, 0, width, 0, false);
    document.getElementById('flame-info').textContent = query
      ? `${bytes(matched)} in boxes matching \u201c${query}\u201d (${((100 * matched) / Math.max(focus.v, 1)).toFixed(1)}% of the view)`
      : `${bytes(focus.v)} in view`;
  }
  function drawFlame() {
    flame.root = data.flame;
    flame.focus = flame.root;
    document.body.dataset.flameRoot = String(flame.root.v);
    document.body.dataset.flameChildren = String((flame.root.c || []).reduce((a, c) => a + c.v, 0));
    const canvas = document.getElementById('flame');
    if (!flame.root.v) {
      document.getElementById('flame-section').append(el('p', { class: 'empty' }, 'No live device memory at the trigger.'));
    }
    const hit = (e) => {
      const r = canvas.getBoundingClientRect();
      const px = e.clientX - r.left, py = e.clientY - r.top;
      return flame.boxes.find((b) => px >= b.x && px < b.x + b.w && py >= b.y && py < b.y + ROW);
    };
    canvas.addEventListener('mousemove', (e) => {
      const b = hit(e);
      if (!b) { hideTooltip(); return; }
      const share = (100 * b.node.v) / Math.max(flame.root.v, 1);
      const content = [el('div', { class: 'mono' }, b.node.n), row('live bytes', `${bytes(b.node.v)} (${share.toFixed(1)}%)`)];
      for (const line of (b.node.d || []).slice(0, 6)) content.push(el('div', { class: 'mono' }, line));
      showTooltip(e.clientX, e.clientY, content);
    });
    canvas.addEventListener('mouseleave', hideTooltip);
    canvas.addEventListener('click', (e) => {
      const b = hit(e);
      if (!b) return;
      document.getElementById('flame-detail').textContent = [b.node.n, `${bytes(b.node.v)} live`, ...(b.node.d || [])].join('\n');
      const index = flame.path.indexOf(b.node);
      if (index >= 0) { flame.focus = b.node; flame.path = flame.path.slice(0, index); }
      else if (b.node !== flame.focus && b.node.c) {
        const trail = [];
        const find = (n) => { if (n === b.node) return true; for (const c of n.c || []) { trail.push(n); if (find(c)) return true; trail.pop(); } return false; };
        find(flame.focus);
        flame.path = flame.path.concat(trail);
        flame.focus = b.node;
      }
      paintFlame();
    });
    document.getElementById('flame-reset').addEventListener('click', () => { flame.focus = flame.root; flame.path = []; paintFlame(); });
    // With the peak's composition in the report: the same tree at the peak, a toggle away.
    if (data.flamePeak) {
      const atTrigger = document.getElementById('flame-at-trigger'), atPeak = document.getElementById('flame-at-peak');
      const show = (peak) => {
        flame.root = peak ? data.flamePeak : data.flame;
        flame.focus = flame.root;
        flame.path = [];
        atTrigger.setAttribute('aria-pressed', String(!peak));
        atPeak.setAttribute('aria-pressed', String(peak));
        document.getElementById('flame-title').textContent = peak
          ? 'Device memory at the peak, by stack (its largest sites)' : 'Live memory at the trigger, by stack';
        document.body.dataset.flameView = peak ? 'peak' : 'trigger';
        document.body.dataset.flameRoot = String(flame.root.v);
        paintFlame();
      };
      atTrigger.addEventListener('click', () => show(false));
      atPeak.addEventListener('click', () => show(true));
      document.getElementById('flame-when').hidden = false;
      document.body.dataset.flamePeakRoot = String(data.flamePeak.v);
    }
    document.getElementById('flame-search').addEventListener('input', (e) => { flame.query = e.target.value.trim().toLowerCase(); paintFlame(); });
    window.addEventListener('resize', paintFlame);
    paintFlame();
  }

  // ---- segments: one bar per segment, its blocks by state, the request and the largest free block
  function drawSegments() {
    const box = document.getElementById('segments');
    const hint = document.getElementById('segments-hint');
    let bars = 0;
    if (!data.segments.length) {
      hint.textContent = 'No segments in this report (PyTorch\u2019s segments come with an OOM it raised; CUDA VMM mappings otherwise).';
    } else {
      hint.textContent = 'Each bar is a segment, longest first, to one scale; its blocks are coloured by state. The failed request and the largest free block are drawn to the same scale.';
    }
    for (const dev of data.segments) {
      const list = dev.list.slice().sort((a, b) => b[1] - a[1]);
      bars += list.length;
      const wrap = el('div', { class: 'chart' });
      const reserved = list.reduce((a, s) => a + s[1], 0);
      wrap.append(el('div', { class: 'title' }, `device ${dev.device}: ${list.length} segments, ${bytes(reserved)}`));
      const legend = el('div', { class: 'legend' });
      ['allocated', 'awaiting free', 'free (inactive)'].forEach((name, i) => legend.append(el('span', {}, el('i', { style: `background:${BLOCK_COLORS[i]};border:1px solid #c9ced8` }), name)));
      if (dev.request !== null) legend.append(el('span', {}, el('i', { style: 'background:#c62828' }), `failed request ${bytes(dev.request)}`));
      if (dev.largestFree !== null) legend.append(el('span', {}, el('i', { style: 'background:#2f9e44' }), `largest free block ${bytes(dev.largestFree)}`));
      wrap.append(legend);
      // PyTorch's pools (the default pool, MemPools, CUDA graphs' private pools): a strip of the
      // pool's colour before each bar, and the pools' reserved bytes, where there are several.
      const pools = new Map();
      for (const s of list) pools.set(s[4], (pools.get(s[4]) || 0) + s[1]);
      dev.poolColors = new Map();
      if (pools.size > 1) {
        const poolLegend = el('div', { class: 'legend pools' });
        [...pools.keys()].sort((a, b) => (a === 'default pool' ? -1 : b === 'default pool' ? 1 : a < b ? -1 : 1)).forEach((name, i) => {
          const c = POOL_COLORS[i % POOL_COLORS.length];
          dev.poolColors.set(name, c);
          poolLegend.append(el('span', {}, el('i', { style: `background:${c}` }), `${name} ${bytes(pools.get(name))}`));
        });
        wrap.append(poolLegend);
        document.body.dataset.segmentPools = String(pools.size);
      }
      const canvasBox = el('div', { class: 'canvas-box' });
      const canvas = el('canvas', { 'aria-label': `segments of device ${dev.device}` });
      canvasBox.append(canvas);
      wrap.append(canvasBox);
      box.append(wrap);
      paintSegments(canvas, dev, list);
    }
    document.body.dataset.segmentBars = String(bars);
  }

  function paintSegments(canvas, dev, list) {
    const rowH = Math.max(3, Math.min(14, Math.floor(520 / Math.max(list.length, 1))));
    const extra = (dev.request !== null ? 1 : 0) + (dev.largestFree !== null ? 1 : 0);
    const height = list.length * (rowH + 2) + extra * 14 + 8 + (extra ? 8 : 0);
    const { ctx, width } = sizedCanvas(canvas, height);
    const labelW = 90;
    const scaleMax = Math.max(list.length ? list[0][1] : 1, dev.request || 0, 1);
    const w = (b) => Math.max(1, ((width - labelW - 8) * b) / scaleMax);
    ctx.font = '10.5px system-ui, sans-serif';
    ctx.textBaseline = 'middle';
    let y = 4;
    const rows = [];
    const comparison = (label, b, fill) => {
      ctx.fillStyle = fill; ctx.fillRect(labelW, y, w(b), 10);
      ctx.fillStyle = '#1d2330'; ctx.textAlign = 'right'; ctx.fillText(label, labelW - 6, y + 5);
      y += 14;
    };
    if (dev.request !== null) comparison('request', dev.request, '#c62828');
    if (dev.largestFree !== null) comparison('largest free', dev.largestFree, '#2f9e44');
    if (extra) y += 8;
    for (const [address, size, kind, blocks, pool] of list) {
      const x0 = labelW;
      if (dev.poolColors.size) { ctx.fillStyle = dev.poolColors.get(pool); ctx.fillRect(labelW - 8, y, 6, rowH); }
      ctx.fillStyle = '#e9edf3';
      ctx.fillRect(x0, y, w(size), rowH);
      for (const [offset, bsize, state] of blocks) {
        ctx.fillStyle = BLOCK_COLORS[state] || '#e9edf3';
        ctx.fillRect(x0 + w(size) * (offset / size), y, Math.max(0.5, w(size) * (bsize / size)), rowH);
      }
      if (rowH >= 9) { ctx.fillStyle = '#5e6878'; ctx.textAlign = 'right'; ctx.fillText(bytes(size), labelW - (dev.poolColors.size ? 12 : 6), y + rowH / 2); }
      rows.push({ y, address, size, kind, blocks, pool });
      y += rowH + 2;
    }
    canvas.addEventListener('mousemove', (e) => {
      const r = canvas.getBoundingClientRect();
      const py = e.clientY - r.top;
      const s = rows.find((q) => py >= q.y && py < q.y + rowH);
      if (!s) { hideTooltip(); return; }
      const free = s.blocks.filter((b) => b[2] === 2).reduce((a, b) => a + b[1], 0);
      const largest = s.blocks.filter((b) => b[2] === 2).reduce((a, b) => Math.max(a, b[1]), 0);
      showTooltip(e.clientX, e.clientY, [el('div', { class: 'mono' }, `0x${s.address.toString(16)} (${s.kind})`), row('pool', s.pool), row('size', bytes(s.size)),
        row('blocks', String(s.blocks.length)), row('free in it', bytes(free)), row('largest free block', bytes(largest))]);
    });
    canvas.addEventListener('mouseleave', hideTooltip);
  }

  // ---- sites, leaks, the text report
  function drawSites() {
    const table = document.getElementById('sites');
    if (!data.sites.length) { table.replaceWith(el('p', { class: 'empty' }, 'No live allocations.')); return; }
    table.append(el('tr', {}, el('th', {}, '#'), el('th', {}, 'live bytes'), el('th', {}, 'allocations'), el('th', {}, 'device'),
      el('th', {}, 'source'), el('th', {}, 'where (the program\u2019s line, or the first frame)')));
    data.sites.forEach((s, i) => {
      const tr = el('tr', { class: 'site', title: 'Click for the stack' },
        el('td', { class: 'num' }, i + 1), el('td', { class: 'num' }, bytes(s.bytes)), el('td', { class: 'num' }, s.count),
        el('td', { class: 'num' }, `${s.device}${s.kind !== 'device' ? ` (${s.kind})` : ''}`),
        el('td', {}, el('span', { class: 'swatch', style: `background:${color(s.source)}` }), s.source),
        el('td', { class: 'where' }, s.where + (s.borrowed ? '  (main thread)' : '')));
      const frames = el('tr', { class: 'frames', hidden: '' }, el('td', { colspan: '6' }, el('pre', {}, s.frames.join('\n') || '(no stack)')));
      tr.addEventListener('click', () => { frames.hidden = !frames.hidden; });
      table.append(tr, frames);
    });
    if (data.sitesTotal > data.sites.length) table.after(el('p', { class: 'hint' }, `${data.sitesTotal - data.sites.length} more sites in the report.`));
  }

  function drawLeaks() {
    const box = document.getElementById('leaks');
    if (!data.leaks.length) { box.append(el('p', { class: 'empty' }, 'No memory grows across the steps of this report.')); return; }
    for (const l of data.leaks) {
      const card = el('div', { class: 'leak' }, el('div', {}, el('b', {}, l.summary), l.pattern ? ` \u2014 ${l.pattern}` : ''));
      if (l.held_by) card.append(el('div', { class: 'where' }, l.held_by));
      if (l.where) card.append(el('div', { class: 'where' }, `${l.held_by ? 'allocated at' : 'at'} ${l.where}`));
      if (l.text) card.append(el('div', { class: 'src mono' }, l.text));
      if (l.remedy) card.append(el('div', { class: 'fix' }, `\u2192 ${l.remedy}`));
      box.append(card);
    }
  }

  function main() {
    drawHeadline();
    drawDevices();
    drawDiagnosis();
    drawTimelines();
    drawFlame();
    drawSegments();
    drawSites();
    drawLeaks();
    document.getElementById('text').textContent = data.text;
    document.getElementById('footer').textContent = `${data.meta.tool}${data.meta.file ? ` \u2014 ${data.meta.file}` : ''}`;
    // Everything is painted by now (the canvases as they were added).
    document.body.dataset.drawMs = String(Math.round(performance.now() - started));
    document.body.dataset.errors = String(errors.length);
    document.body.dataset.ready = '1';
  }
  main();
})();
