// Sluice operator dashboard: polls GET /v1/status every second and steers POST /v1/control.
// Plain modern JavaScript, no framework, no build step. The credential lives in this tab's
// sessionStorage only and is sent as `Authorization: Bearer …` to this origin, never in a URL.
'use strict';

const STORAGE_KEY = 'sluice.operator.credential';
const POLL_MS = 1000;
const REQUEST_TIMEOUT_MS = 5000;
const PAGE_SIZE = 25;
const WAITING_STATUSES = ['accepted', 'retry_wait'];
const STATUS_COLUMNS = ['accepted', 'executing', 'running', 'retry_wait', 'needs_review'];
const OUTCOMES = ['succeeded', 'rejected', 'failed', 'expired', 'cancelled'];

const $ = (id) => document.getElementById(id);

const state = {
  credential: null,
  session: 0, // bumped on sign-in and sign-out: a stale poll loop stops
  timer: null,
  status: null, // the last `data` of GET /v1/status
  receivedAt: 0, // performance.now() when it arrived
  serverAt: 0, // its generated_at, in ms since the epoch
  shown: PAGE_SIZE,
  pending: new Set(), // control targets with a call in flight ('' = namespace)
  lastControl: null,
  polling: 0, // the session whose poll is in flight
  pollAgain: false,
};

// ---------------------------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') node.className = value;
    else if (key === 'text') node.textContent = value;
    else if (key.startsWith('data-') || key.startsWith('aria-') || key === 'role' || key === 'title' || key === 'type') {
      node.setAttribute(key, value === true ? '' : String(value));
    } else node[key] = value;
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const SVG_NS = 'http://www.w3.org/2000/svg';
function svg(tag, attrs) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
  return node;
}

// Counts may be decimal strings (beyond 2^53) or numbers; both format with separators.
function toBig(value) {
  if (typeof value === 'bigint') return value;
  if (typeof value === 'number' && Number.isFinite(value)) return BigInt(Math.trunc(value));
  if (typeof value === 'string' && /^-?\d+$/.test(value)) return BigInt(value);
  return 0n;
}
function toNum(value) {
  const n = typeof value === 'number' ? value : Number(value);
  return Number.isFinite(n) ? n : 0;
}
const formatter = new Intl.NumberFormat('en-US');
function fmt(value) {
  if (value === undefined || value === null || value === '') return '—';
  return toBig(value).toLocaleString('en-US');
}
function pct(part, whole) {
  if (!(whole > 0)) return 0;
  return Math.max(0, Math.min(100, (part / whole) * 100));
}
function arr(value) {
  return Array.isArray(value) ? value : [];
}
function parseTime(text) {
  const ms = typeof text === 'string' ? Date.parse(text) : NaN;
  return Number.isFinite(ms) ? ms : null;
}
function clock(ms) {
  const d = new Date(ms);
  const pad = (n, w = 2) => String(n).padStart(w, '0');
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}
function duration(seconds) {
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} m ${String(s % 60).padStart(2, '0')} s`;
  return `${Math.floor(s / 3600)} h ${String(Math.floor((s % 3600) / 60)).padStart(2, '0')} m`;
}
// The server's clock now: its generated_at plus the time since the answer arrived, so ages do
// not depend on the browser's clock.
function serverNow() {
  if (!state.serverAt) return Date.now();
  return state.serverAt + (performance.now() - state.receivedAt);
}

// ---------------------------------------------------------------------------------------------
// API calls
// ---------------------------------------------------------------------------------------------

class ApiFailure extends Error {
  constructor(httpStatus, code, message, extra) {
    super(message);
    this.httpStatus = httpStatus;
    this.code = code;
    this.retryable = extra && extra.retryable;
    this.retryAfterMs = extra && extra.retry_after_ms;
  }
}

async function api(method, path, body) {
  const controller = new AbortController();
  const timeout = setTimeout(() => controller.abort(), REQUEST_TIMEOUT_MS);
  const headers = { Authorization: `Bearer ${state.credential}`, Accept: 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let response;
  try {
    response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: 'no-store',
      credentials: 'omit',
      signal: controller.signal,
    });
  } catch (error) {
    const message = error && error.name === 'AbortError'
      ? `no answer within ${REQUEST_TIMEOUT_MS / 1000} s`
      : 'the gateway could not be reached';
    throw new ApiFailure(0, 'NETWORK', message, { retryable: true });
  } finally {
    clearTimeout(timeout);
  }
  let payload = null;
  try {
    payload = await response.json();
  } catch (_) {
    payload = null;
  }
  if (response.ok && payload && typeof payload === 'object' && payload.data !== undefined) {
    return payload.data;
  }
  const error = payload && payload.error;
  if (error && typeof error === 'object') {
    throw new ApiFailure(response.status, String(error.code || 'ERROR'), String(error.message || ''), error);
  }
  throw new ApiFailure(response.status, `HTTP_${response.status}`, 'the answer was not a Sluice envelope', {});
}

// ---------------------------------------------------------------------------------------------
// Sign-in and the poll loop
// ---------------------------------------------------------------------------------------------

function signIn(credential) {
  state.credential = credential;
  sessionStorage.setItem(STORAGE_KEY, credential);
  state.session += 1;
  state.status = null;
  state.shown = PAGE_SIZE;
  state.lastControl = null;
  showControlResult(null);
  $('signin').hidden = true;
  $('dashboard').hidden = false;
  $('meta').hidden = false;
  $('ident').hidden = false;
  render();
  poll(state.session);
}

function signOut() {
  sessionStorage.removeItem(STORAGE_KEY);
  state.credential = null;
  state.session += 1;
  clearTimeout(state.timer);
  state.status = null;
  state.serverAt = 0;
  state.pending.clear();
  hideBanner();
  showControlResult(null);
  $('credential').value = '';
  $('dashboard').hidden = true;
  $('meta').hidden = true;
  $('ident').hidden = true;
  $('signin').hidden = false;
  $('credential').focus();
}

// One poll at a time per session: a poll asked for while one is in flight (after a control
// call) runs as soon as that one ends.
async function poll(session) {
  if (session !== state.session) return;
  if (state.polling === session) {
    state.pollAgain = true;
    return;
  }
  state.polling = session;
  state.pollAgain = false;
  clearTimeout(state.timer);
  const started = performance.now();
  try {
    const data = await api('GET', '/v1/status');
    if (session !== state.session) return;
    state.status = data && typeof data === 'object' ? data : {};
    state.receivedAt = performance.now();
    state.serverAt = parseTime(state.status.generated_at) || Date.now();
    hideBanner();
    render();
  } catch (error) {
    if (session !== state.session) return;
    showBanner(error, 'Status poll failed');
    renderFreshness();
  } finally {
    if (state.polling === session) state.polling = 0;
  }
  if (session !== state.session) return;
  const wait = state.pollAgain ? 0 : Math.max(100, POLL_MS - (performance.now() - started));
  state.pollAgain = false;
  clearTimeout(state.timer);
  state.timer = setTimeout(() => poll(session), wait);
}

function showBanner(error, context) {
  $('banner').hidden = false;
  $('banner').dataset.code = error.code || 'ERROR';
  $('banner-code').textContent = `${context}: ${error.code || 'ERROR'}${error.httpStatus ? ` (HTTP ${error.httpStatus})` : ''}`;
  $('banner-message').textContent = error.message || '';
  let hint = 'Retrying every second.';
  if (error.code === 'UNAUTHENTICATED') hint = 'Check the credential, or sign out and sign in again.';
  else if (error.code === 'PERMISSION_DENIED') hint = 'This credential lacks status:read.';
  $('banner-hint').textContent = hint;
}
function hideBanner() {
  $('banner').hidden = true;
}

// ---------------------------------------------------------------------------------------------
// Pause and resume
// ---------------------------------------------------------------------------------------------

function reason() {
  const text = $('reason').value.trim();
  return text === '' ? 'dashboard' : text;
}

function isPaused(command) {
  const paused = (state.status && state.status.paused) || {};
  if (command === '') return paused.namespace === true;
  const row = arr(state.status && state.status.commands).find((c) => c && c.command === command);
  if (row && typeof row.paused === 'boolean') return row.paused;
  return arr(paused.commands).includes(command);
}

async function control(command, paused) {
  if (state.pending.has(command)) return;
  const session = state.session;
  const body = { paused, reason: reason() };
  if (command !== '') body.command = command;
  state.pending.add(command);
  renderSwitches();
  try {
    const data = await api('POST', '/v1/control', body);
    if (session !== state.session) return;
    applyControl(command, data && typeof data.paused === 'boolean' ? data.paused : paused);
    state.lastControl = { ok: true, command, paused: data ? data.paused : paused, revision: data ? data.revision : undefined };
  } catch (error) {
    if (session !== state.session) return;
    state.lastControl = { ok: false, command, paused, error };
  } finally {
    state.pending.delete(command);
  }
  showControlResult(state.lastControl);
  render();
  poll(session); // see the effect at once
}

// Reflect an acknowledged control call before the next status answer arrives.
function applyControl(command, paused) {
  if (!state.status) return;
  const flags = (state.status.paused = Object.assign({ namespace: false, commands: [] }, state.status.paused));
  if (command === '') {
    flags.namespace = paused;
    return;
  }
  const list = arr(flags.commands).filter((c) => c !== command);
  if (paused) list.push(command);
  flags.commands = list;
  const row = arr(state.status.commands).find((c) => c && c.command === command);
  if (row) row.paused = paused;
}

function showControlResult(result) {
  const out = $('control-result');
  out.replaceChildren();
  out.className = 'control-result';
  if (!result) return;
  const target = result.command === '' ? 'Namespace' : `Command ${result.command}`;
  if (result.ok) {
    out.classList.add('ok');
    out.dataset.outcome = result.paused ? 'paused' : 'resumed';
    out.append(
      el('span', { class: 'result-main', text: `${target} ${result.paused ? 'paused' : 'resumed'}` }),
      el('span', { class: 'result-rev', 'data-testid': 'control-revision', text: `revision ${result.revision ?? '—'}` }),
    );
  } else {
    const e = result.error;
    out.classList.add('bad');
    out.dataset.outcome = 'error';
    let advice = e.message || '';
    if (e.code === 'PERMISSION_DENIED') advice = 'this credential lacks control:manage';
    else if (e.code === 'UNAVAILABLE') advice = 'the stored value may have changed: repeat the same call';
    else if (e.code === 'NETWORK') advice = `${e.message}: repeat the same call`;
    out.append(
      el('span', { class: 'result-main', 'data-testid': 'control-error', text: `${e.httpStatus ? `${e.httpStatus} ` : ''}${e.code}` }),
      el('span', { class: 'result-rev', text: `${target} not ${result.paused ? 'paused' : 'resumed'}: ${advice}` }),
    );
  }
}

// ---------------------------------------------------------------------------------------------
// Rendering
// ---------------------------------------------------------------------------------------------

function render() {
  const s = state.status || {};
  $('ns-name').textContent = s.namespace_name || (s.namespace ? 'namespace' : '—');
  $('ns-id').textContent = s.namespace || '';
  $('generation').textContent = s.generation === undefined ? '—' : fmt(s.generation);
  const ready = $('ready');
  if (s.ready === undefined) {
    ready.textContent = '—';
    ready.className = 'pill';
  } else {
    ready.textContent = s.ready ? 'Ready' : s.projection_reachable === false ? 'Not ready · Redis unreachable' : 'Not ready';
    ready.className = `pill ${s.ready ? 'good' : 'bad'}`;
  }
  ready.dataset.ready = String(s.ready === true);
  document.title = `${s.namespace_name ? `${s.namespace_name} · ` : ''}Sluice operator`;
  renderFreshness();
  renderSwitches();
  renderCommands(s);
  renderKpis(s);
  renderOutcomes(s);
  renderInFlight(s);
  renderPools(s);
  renderRooms(s);
  renderCache(s);
  renderQueues(s);
}

function renderFreshness() {
  if (!state.status || !state.serverAt) {
    $('updated').textContent = '—';
    $('updated-ago').textContent = '';
    return;
  }
  $('updated').textContent = clock(state.serverAt);
  $('updated').dateTime = new Date(state.serverAt).toISOString();
  const age = (performance.now() - state.receivedAt) / 1000;
  $('updated-ago').textContent = age < 1.5 ? '' : `· ${duration(age)} ago`;
  $('updated').classList.toggle('stale', age >= 3);
}

function setSwitch(button, paused, pending) {
  button.setAttribute('aria-checked', String(!paused));
  button.dataset.state = pending ? 'pending' : paused ? 'paused' : 'open';
  button.disabled = pending || !state.status;
}

function renderSwitches() {
  const paused = isPaused('');
  const pending = state.pending.has('');
  const button = $('pause-namespace');
  setSwitch(button, paused, pending);
  button.title = paused ? 'Resume intake for the whole namespace' : 'Pause intake for the whole namespace';
  button.setAttribute('aria-label', button.title);
  $('pause-namespace').closest('.control').classList.toggle('is-paused', !!state.status && paused);
  const label = $('intake-state');
  label.textContent = !state.status ? '—' : pending ? 'updating…' : paused ? 'paused' : 'open';
  label.className = `state ${!state.status ? '' : paused ? 'paused' : 'open'}`;
  label.dataset.state = !state.status ? 'unknown' : paused ? 'paused' : 'open';
  const pausedCommands = arr(state.status && state.status.paused && state.status.paused.commands);
  $('intake-detail').textContent = paused
    ? 'New enqueues are refused with 503 INTAKE_PAUSED; accepted work keeps draining.'
    : pausedCommands.length
      ? `Open, except paused commands: ${pausedCommands.join(', ')}.`
      : 'Accepting enqueues. Pausing refuses them with 503 INTAKE_PAUSED; accepted work keeps draining.';
  for (const b of document.querySelectorAll('button[data-command]')) {
    const command = b.dataset.command;
    setSwitch(b, isPaused(command), state.pending.has(command));
  }
}

function statusCount(row, status) {
  const entry = arr(row.statuses).find((s) => s && s.status === status);
  return entry ? entry.count : '0';
}

function oldestWaiting(row) {
  let oldest = null;
  for (const entry of arr(row.statuses)) {
    if (!entry || !WAITING_STATUSES.includes(entry.status)) continue;
    if (toBig(entry.count) === 0n) continue;
    const at = parseTime(entry.oldest_accepted_at);
    if (at !== null && (oldest === null || at < oldest)) oldest = at;
  }
  return oldest;
}

function bar(value, limit, opts = {}) {
  const wrap = el('div', { class: `bar ${opts.class || ''}`, role: 'meter', 'aria-valuenow': value, 'aria-valuemin': 0, 'aria-valuemax': limit || undefined });
  const fill = el('span', { class: 'fill' });
  const share = limit > 0 ? pct(value, limit) : 0;
  fill.style.width = `${share}%`;
  if (share >= 90) fill.classList.add('hot');
  else if (share >= 70) fill.classList.add('warm');
  wrap.append(fill);
  return wrap;
}

function renderCommands(s) {
  const body = $('commands-body');
  const rows = arr(s.commands).filter((c) => c && typeof c.command === 'string');
  $('commands-empty').hidden = rows.length > 0 || !state.status;
  let waiting = 0n;
  const fragment = document.createDocumentFragment();
  for (const row of rows) {
    waiting += toBig(row.waiting);
    const paused = isPaused(row.command);
    const name = el('td', { class: 'col-name' },
      el('div', { class: 'cmd' },
        el('span', { class: 'cmd-code', text: row.command }),
        row.handler ? el('span', { class: 'tag', text: row.handler }) : null,
        paused ? el('span', { class: 'tag warn', text: 'paused' }) : null));
    const cells = STATUS_COLUMNS.map((status) => {
      const count = statusCount(row, status);
      return el('td', { class: `num${toBig(count) === 0n ? ' zero' : ''}`, 'data-status': status, text: fmt(count) });
    });
    const oldest = oldestWaiting(row);
    const age = el('td', { class: 'num age', 'data-testid': 'oldest-waiting' });
    if (oldest === null) {
      age.textContent = '—';
      age.classList.add('zero');
    } else {
      age.dataset.since = String(oldest);
      age.textContent = duration((serverNow() - oldest) / 1000);
    }
    const inFlight = toNum(row.in_flight);
    const limit = toNum(row.max_in_flight);
    const flight = el('td', { class: 'col-bar' },
      el('div', { class: 'meter-inline' },
        bar(inFlight, limit),
        el('span', { class: 'num', text: `${fmt(inFlight)} / ${limit > 0 ? fmt(limit) : '∞'}` })));
    const toggle = el('button', {
      type: 'button', class: 'switch', role: 'switch', 'data-command': row.command,
      'data-testid': `pause-command-${row.command}`,
      title: `${paused ? 'Resume' : 'Pause'} intake of ${row.command}`,
      'aria-label': `Intake of ${row.command}`,
    }, el('span', { class: 'switch-track' }, el('span', { class: 'switch-thumb' })));
    setSwitch(toggle, paused, state.pending.has(row.command));
    const tr = el('tr', { 'data-command-row': row.command, class: paused ? 'paused' : '' },
      name, ...cells, age, flight, el('td', { class: 'col-switch' }, toggle));
    fragment.append(tr);
  }
  body.replaceChildren(fragment);
  $('commands-summary').textContent = rows.length
    ? `${rows.length} command${rows.length === 1 ? '' : 's'} · ${fmt(waiting)} waiting`
    : '';
  $('commands-summary').dataset.waiting = waiting.toString();
}

function renderKpis(s) {
  const known = !!state.status;
  const commands = arr(s.commands).filter((c) => c && typeof c.command === 'string');
  let waiting = 0n;
  let oldest = null;
  let oldestCommand = '';
  for (const c of commands) {
    waiting += toBig(c.waiting ?? statusCount(c, 'accepted'));
    const at = oldestWaiting(c);
    if (at !== null && (oldest === null || at < oldest)) {
      oldest = at;
      oldestCommand = c.command;
    }
  }
  $('kpi-waiting').textContent = known ? fmt(waiting) : '—';
  $('kpi-waiting-sub').textContent = known ? `across ${commands.length} command${commands.length === 1 ? '' : 's'}` : '';
  const age = $('kpi-oldest');
  if (oldest === null) {
    delete age.dataset.since;
    age.textContent = known ? '—' : '—';
  } else {
    age.dataset.since = String(oldest);
    age.textContent = duration((serverNow() - oldest) / 1000);
  }
  $('kpi-oldest-sub').textContent = oldest === null ? (known ? 'nothing waiting' : '') : `in ${oldestCommand}`;
  const app = s.in_flight && s.in_flight.application;
  if (app && typeof app === 'object') {
    $('kpi-inflight').textContent = fmt(app.in_flight);
    $('kpi-inflight-sub').textContent = `of ${fmt(app.max_concurrency)} (${formatter.format(Math.round(pct(toNum(app.in_flight), toNum(app.max_concurrency))))}%)`;
  } else {
    $('kpi-inflight').textContent = '—';
    $('kpi-inflight-sub').textContent = '';
  }
  const seconds = arr(s.outcomes).filter((o) => o && typeof o === 'object');
  const last = seconds[seconds.length - 1];
  if (last) {
    const total = OUTCOMES.reduce((a, k) => a + toNum(last[k]), 0);
    $('kpi-rate').textContent = formatter.format(total);
    $('kpi-rate-sub').textContent = total ? `${formatter.format(toNum(last.succeeded))} succeeded` : 'last whole second';
  } else {
    $('kpi-rate').textContent = '—';
    $('kpi-rate-sub').textContent = '';
  }
  const queues = s.queues && typeof s.queues === 'object' ? s.queues : null;
  $('kpi-resources').textContent = queues ? fmt(queues.resources_waiting ?? 0) : '—';
  const busiest = queues ? arr(queues.busiest)[0] : null;
  $('kpi-resources-sub').textContent = busiest ? `deepest ${fmt(busiest.waiting)}` : '';
}

function renderOutcomes(s) {
  const seconds = arr(s.outcomes).filter((o) => o && typeof o === 'object');
  const chart = $('outcomes-chart');
  const totals = Object.fromEntries(OUTCOMES.map((k) => [k, 0]));
  let peak = 0;
  for (const o of seconds) {
    let sum = 0;
    for (const k of OUTCOMES) {
      totals[k] += toNum(o[k]);
      sum += toNum(o[k]);
    }
    peak = Math.max(peak, sum);
  }
  // Drawn at the chart's own pixel width, so text is never stretched.
  const W = Math.max(200, Math.floor(chart.clientWidth || 320)), H = 150, top = 16, bottom = 18, left = 2, right = 2;
  const plotH = H - top - bottom;
  const root = svg('svg', { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: 'img', class: 'bars' });
  const title = svg('title');
  const grand = OUTCOMES.reduce((a, k) => a + totals[k], 0);
  title.textContent = `Outcomes over the last ${seconds.length} seconds: ${grand}`;
  root.append(title);
  root.append(svg('line', { x1: left, x2: W - right, y1: top + plotH + 0.5, y2: top + plotH + 0.5, class: 'axis' }));
  if (peak > 0) {
    root.append(svg('line', { x1: left, x2: W - right, y1: top + 0.5, y2: top + 0.5, class: 'grid-line' }));
  }
  const slots = Math.max(10, seconds.length);
  const slotW = (W - left - right) / slots;
  const barW = Math.max(2, slotW * 0.7);
  seconds.forEach((o, i) => {
    const x = left + (slots - seconds.length + i) * slotW + (slotW - barW) / 2;
    let y = top + plotH;
    const g = svg('g');
    const tip = svg('title');
    tip.textContent = `${o.second || ''}: ${OUTCOMES.map((k) => `${k} ${toNum(o[k])}`).join(', ')}`;
    g.append(tip);
    for (const k of OUTCOMES) {
      const v = toNum(o[k]);
      if (v <= 0 || peak <= 0) continue;
      const h = (v / peak) * plotH;
      y -= h;
      g.append(svg('rect', { x: x.toFixed(2), y: y.toFixed(2), width: barW.toFixed(2), height: Math.max(0.5, h).toFixed(2), class: `o-${k}` }));
    }
    root.append(g);
    if (i === seconds.length - 1 || i === 0) {
      const t = parseTime(o.second);
      if (t !== null) {
        const label = svg('text', { x: (x + barW / 2).toFixed(2), y: H - 4, class: 'tick', 'text-anchor': i === 0 ? 'start' : 'end' });
        label.textContent = clock(t);
        root.append(label);
      }
    }
  });
  const peakLabel = svg('text', { x: W - right, y: top - 4, class: 'tick', 'text-anchor': 'end' });
  peakLabel.textContent = peak > 0 ? `peak ${formatter.format(peak)}/s` : 'no outcomes yet';
  root.append(peakLabel);
  chart.replaceChildren(root);
  $('outcomes-window').textContent = seconds.length ? `last ${seconds.length} s · ${formatter.format(grand / seconds.length)}/s avg` : '';
  const legend = $('outcomes-legend');
  legend.replaceChildren(...OUTCOMES.map((k) => el('li', { 'data-outcome': k, class: totals[k] === 0 ? 'zero' : '' },
    el('span', { class: `swatch o-${k}` }),
    el('span', { class: 'legend-name', text: k }),
    el('b', { class: 'num', 'data-testid': `outcome-${k}`, text: formatter.format(totals[k]) }))));
  legend.dataset.total = String(grand);
}

function meterRow(label, value, limit, opts = {}) {
  return el('div', { class: 'meter-row', 'data-meter': opts.id || label },
    el('span', { class: `meter-label${opts.mono ? ' mono' : ''}`, title: label, text: label }),
    bar(value, limit, opts),
    el('span', { class: 'num meter-value', text: limit > 0 ? `${fmt(value)} / ${fmt(limit)}` : fmt(value) }));
}

function renderInFlight(s) {
  const box = $('inflight');
  const parts = [];
  const flight = (s.in_flight && typeof s.in_flight === 'object') ? s.in_flight : {};
  const app = flight.application;
  if (app && typeof app === 'object') {
    parts.push(el('h3', { text: 'Application' }));
    parts.push(meterRow('all namespaces', toNum(app.in_flight), toNum(app.max_concurrency), { id: 'application' }));
  }
  const commands = arr(s.commands).filter((c) => c && typeof c.command === 'string');
  if (commands.length) {
    parts.push(el('h3', { text: 'Commands' }));
    for (const c of commands) parts.push(meterRow(c.command, toNum(c.in_flight), toNum(c.max_in_flight), { id: `command:${c.command}`, mono: true }));
  }
  const keys = arr(flight.limit_keys).filter((k) => k && typeof k.key === 'string');
  if (keys.length) {
    const sorted = [...keys].sort((a, b) => toNum(b.in_flight) - toNum(a.in_flight));
    parts.push(el('h3', { text: `Limit keys${sorted.length > 12 ? ` (top 12 of ${sorted.length})` : ''}` }));
    for (const k of sorted.slice(0, 12)) {
      parts.push(meterRow(k.key, toNum(k.in_flight), toNum(k.max_in_flight), { id: `key:${k.key}`, mono: true }));
    }
  }
  if (!parts.length) parts.push(el('p', { class: 'empty', text: state.status ? 'No in-flight figures.' : '' }));
  box.replaceChildren(...parts);
}

function renderPools(s) {
  const box = $('pools');
  const pools = arr(s.quota_pools).filter((p) => p && typeof p.code === 'string');
  if (!pools.length) {
    box.replaceChildren(el('p', { class: 'empty', text: state.status ? 'No quota pools.' : '' }));
    return;
  }
  box.replaceChildren(...pools.map((p) => {
    const capacity = toNum(p.capacity);
    const allocated = toNum(p.allocated);
    const reserved = toNum(p.reserved);
    const available = p.available === undefined ? Math.max(0, capacity - allocated - reserved) : toNum(p.available);
    const stack = el('div', { class: 'stack', role: 'meter', 'aria-valuenow': allocated + reserved, 'aria-valuemin': 0, 'aria-valuemax': capacity });
    for (const [cls, v] of [['allocated', allocated], ['reserved', reserved]]) {
      const seg = el('span', { class: `seg ${cls}` });
      seg.style.width = `${pct(v, capacity)}%`;
      stack.append(seg);
    }
    return el('div', { class: 'pool', 'data-pool': p.code },
      el('div', { class: 'pool-head' },
        el('span', { class: 'mono pool-code', text: p.code }),
        el('span', { class: 'muted', text: `${formatter.format(Math.round(pct(allocated + reserved, capacity)))}% used` })),
      stack,
      el('dl', { class: 'pool-figures' },
        el('div', {}, el('dt', { text: 'capacity' }), el('dd', { class: 'num', 'data-field': 'capacity', text: fmt(capacity) })),
        el('div', {}, el('dt', { text: 'allocated' }), el('dd', { class: 'num', 'data-field': 'allocated', text: fmt(allocated) })),
        el('div', {}, el('dt', { text: 'reserved' }), el('dd', { class: 'num', 'data-field': 'reserved', text: fmt(reserved) })),
        el('div', {}, el('dt', { text: 'available' }), el('dd', { class: 'num', 'data-field': 'available', text: fmt(available) }))));
  }));
}

// When a room opens and whether its pre-queue was drawn: `from declaration` without `opens_at`.
function roomOpening(room) {
  const opens = parseTime(room.opens_at);
  if (opens === null) return { text: 'from declaration', state: 'open' };
  const drawn = parseTime(room.drawn_at);
  const at = new Date(opens).toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
  if (drawn !== null) return { text: `${at} · drawn ${clock(drawn)}`, state: 'drawn' };
  return { text: `${at} · ${opens > serverNow() ? 'pre-queue' : 'drawing'}`, state: 'prequeue' };
}

function renderRooms(s) {
  const rooms = arr(s.rooms).filter((r) => r && typeof r.code === 'string');
  $('rooms-empty').hidden = rooms.length > 0 || !state.status;
  let waiting = 0n;
  let active = 0;
  const fragment = document.createDocumentFragment();
  for (const room of rooms) {
    waiting += toBig(room.waiting);
    active += toNum(room.active);
    const name = el('td', { class: 'col-name' },
      el('div', { class: 'cmd' },
        el('span', { class: 'cmd-code', text: room.code }),
        room.declared === false ? el('span', { class: 'tag warn', title: 'left out of the declaration: no more joins, places run their course', text: 'undeclared' }) : null));
    const limit = toNum(room.max_active);
    const holding = toNum(room.holding);
    const passes = el('td', { class: 'col-bar', 'data-field': 'active' },
      el('div', { class: 'meter-inline', title: `${fmt(holding)} slot${holding === 1 ? '' : 's'} held (given-back passes until their exp)` },
        bar(toNum(room.active), limit),
        el('span', { class: 'num', text: `${fmt(room.active)} / ${limit > 0 ? fmt(limit) : '∞'}` })));
    const count = (field, value, title) => el('td', {
      class: `num${toBig(value) === 0n ? ' zero' : ''}`, 'data-field': field, title, text: fmt(value),
    });
    const perMinute = toNum(room.admit_per_minute);
    const opening = roomOpening(room);
    fragment.append(el('tr', { 'data-room': room.code, class: room.declared === false ? 'undeclared' : '' },
      name,
      count('waiting', room.waiting),
      passes,
      count('admitted_last_minute', room.admitted_last_minute,
        `${fmt(room.admitted_total)} admitted in all${perMinute > 0 ? `; at most ${fmt(perMinute)} a minute` : ''}`),
      count('abandoned_total', room.abandoned_total),
      count('left_total', room.left_total),
      el('td', { class: 'mono', 'data-field': 'opening', 'data-state': opening.state, text: opening.text })));
  }
  $('rooms-body').replaceChildren(fragment);
  $('rooms-summary').textContent = rooms.length
    ? `${rooms.length} room${rooms.length === 1 ? '' : 's'} · ${fmt(waiting)} waiting · ${formatter.format(active)} active`
    : '';
}

function renderCache(s) {
  const cache = s.cache && typeof s.cache === 'object' && !Array.isArray(s.cache) ? s.cache : null;
  const entries = cache ? Object.entries(cache).filter(([, v]) => typeof v === 'number' || (typeof v === 'string' && /^\d+$/.test(v))) : [];
  $('cache-card').hidden = entries.length === 0;
  $('cache').replaceChildren(...entries.map(([k, v]) => el('div', {}, el('dt', { text: k.replace(/_/g, ' ') }), el('dd', { class: 'num', text: fmt(v) }))));
}

function renderQueues(s) {
  const queues = s.queues && typeof s.queues === 'object' ? s.queues : {};
  $('resources-waiting').textContent = fmt(queues.resources_waiting ?? 0);
  $('resources-scanned').textContent = fmt(queues.scanned ?? 0);
  const filter = $('queue-filter').value.trim().toLowerCase();
  const all = arr(queues.busiest).filter((r) => r && typeof r === 'object');
  const matching = filter
    ? all.filter((r) => String(r.resource_key ?? '').toLowerCase().includes(filter) || String(r.command ?? '').toLowerCase().includes(filter))
    : all;
  matching.sort((a, b) => toNum(b.waiting) - toNum(a.waiting) || toNum(b.in_flight) - toNum(a.in_flight)
    || String(a.resource_key).localeCompare(String(b.resource_key)));
  const shown = matching.slice(0, state.shown);
  const deepest = matching.length ? Math.max(1, toNum(matching[0].waiting)) : 1;
  const fragment = document.createDocumentFragment();
  for (const r of shown) {
    const fill = el('span', { class: 'depth-bar' });
    fill.style.width = `${pct(toNum(r.waiting), deepest)}%`;
    const depth = el('td', { class: 'num depth' },
      el('div', { class: 'depth-cell' },
        el('span', { class: 'depth-track' }, fill),
        el('span', { class: 'depth-value', text: fmt(r.waiting) })));
    fragment.append(el('tr', { 'data-resource': String(r.resource_key ?? '') },
      el('td', { class: 'mono ellipsis', title: String(r.command ?? ''), text: String(r.command ?? '') }),
      el('td', { class: 'mono ellipsis', title: String(r.resource_key ?? ''), text: String(r.resource_key ?? '') }),
      depth,
      el('td', { class: `num${toNum(r.in_flight) === 0 ? ' zero' : ''}`, text: fmt(r.in_flight) })));
  }
  $('queues-body').replaceChildren(fragment);
  $('queues-empty').hidden = shown.length > 0 || !state.status;
  $('queues-empty').textContent = filter && all.length ? `No resource matches “${filter}”.` : 'No resource is waiting.';
  const count = $('queue-count');
  const waitingTotal = toNum(queues.resources_waiting);
  const partial = waitingTotal > all.length ? ` · the ${formatter.format(all.length)} busiest of ${fmt(queues.resources_waiting)} listed` : '';
  count.textContent = matching.length
    ? `showing ${formatter.format(shown.length)} of ${formatter.format(matching.length)}${filter ? ` matching (${formatter.format(all.length)} listed)` : partial}`
    : '';
  count.dataset.shown = String(shown.length);
  count.dataset.matching = String(matching.length);
  const rest = matching.length - shown.length;
  $('queues-more').hidden = rest <= 0;
  $('show-more').textContent = `Show ${formatter.format(Math.min(PAGE_SIZE * 4, rest))} more`;
  $('show-all').textContent = `Show all ${formatter.format(matching.length)}`;
}

// Ages and "updated … ago" grow between polls.
function tickClock() {
  if (!state.status) return;
  const now = serverNow();
  for (const cell of document.querySelectorAll('[data-since]')) {
    cell.textContent = duration((now - Number(cell.dataset.since)) / 1000);
  }
  renderFreshness();
}

// ---------------------------------------------------------------------------------------------
// Wiring
// ---------------------------------------------------------------------------------------------

function init() {
  $('signin-form').addEventListener('submit', (event) => {
    event.preventDefault();
    const credential = $('credential').value.trim();
    if (credential) signIn(credential);
  });
  $('sign-out').addEventListener('click', signOut);
  $('pause-namespace').addEventListener('click', () => {
    if (state.status) control('', !isPaused(''));
  });
  $('commands-body').addEventListener('click', (event) => {
    const button = event.target.closest('button[data-command]');
    if (button && state.status) control(button.dataset.command, !isPaused(button.dataset.command));
  });
  $('queue-filter').addEventListener('input', () => {
    state.shown = PAGE_SIZE;
    renderQueues(state.status || {});
  });
  $('show-more').addEventListener('click', () => {
    state.shown += PAGE_SIZE * 4;
    renderQueues(state.status || {});
  });
  $('show-all').addEventListener('click', () => {
    state.shown = Number.MAX_SAFE_INTEGER;
    renderQueues(state.status || {});
  });
  setInterval(tickClock, 250);
  window.addEventListener('resize', () => {
    if (state.status) renderOutcomes(state.status);
  });
  const saved = sessionStorage.getItem(STORAGE_KEY);
  if (saved) signIn(saved);
  else {
    $('signin').hidden = false;
    $('credential').focus();
  }
}

init();
