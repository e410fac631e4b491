// Drives the operator dashboard (/ui/) in Debian's headless Chromium through playwright-core.
//
//   node dashboard.mjs <base-url> <credential> <output-dir> [options]
//
// Scenarios (--scenario):
//   live      (default) sign-in and sign-out, a wrong credential shows the API's error, a
//             read-only credential (--readonly CRED) is refused PERMISSION_DENIED on pause;
//             then the operator signs in and the caller starts a load (`@@watching`), the page
//             shows non-zero figures that agree with it (--max-total N enqueues at most),
//             screenshot, then pause and resume the namespace and one command (--command CODE)
//             from the page. Between steps it talks to the caller over stdio: it prints
//             `@@<event> <detail>` and waits for a line `continue` on stdin, so the caller can
//             act and check the gateway's answers meanwhile.
//             With --rooms JSON ({"<room>": {"<field>": "<text shown>", …}, …}, the caller's own
//             count of each room), the Rooms panel must show exactly those texts (fields:
//             waiting, active, admitted_last_minute, abandoned_total, left_total, opening), checked
//             right after the operator signs in, before the load starts.
//   thousand  the queue table with many resources (--resources N listed as waiting, the
//             busiest being --resource KEY): no horizontal overflow at desktop and phone
//             widths, sorted by depth, numbers right-aligned, show more, filter.
//
// Exits 0 when every check passed, 1 with a message naming the failed check otherwise.

import { mkdtemp, mkdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { chromium } from 'playwright-core';

const CHROMIUM = process.env.SLUICE_CHROMIUM || '/usr/bin/chromium';
const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];
const STEP_MS = 30_000;

function usage(message) {
  console.error(`dashboard.mjs: ${message}`);
  console.error('usage: node dashboard.mjs <base-url> <credential> <output-dir> [--scenario live|thousand] '
    + '[--readonly CRED] [--max-total N] [--command CODE] [--rooms JSON] [--resources N] [--resource KEY]');
  process.exit(2);
}

function parseArgs(argv) {
  const positional = [];
  const options = { scenario: 'live', command: 'claim' };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg.startsWith('--')) {
      const value = argv[i + 1];
      if (value === undefined) usage(`${arg} needs a value`);
      options[arg.slice(2).replace(/-([a-z])/g, (_, c) => c.toUpperCase())] = value;
      i++;
    } else positional.push(arg);
  }
  if (positional.length !== 3) usage('expected three arguments');
  const [base, credential, outDir] = positional;
  return { base: base.replace(/\/+$/, ''), credential, outDir: resolve(outDir), ...options };
}

class CheckFailed extends Error {}
function check(condition, message) {
  if (!condition) throw new CheckFailed(message);
}

let currentStep = 'starting';
function step(name) {
  currentStep = name;
  console.log(`dashboard: ${name}`);
}

// Waits until `fn(arg)` is truthy in the page, or fails naming what it waited for.
async function until(page, what, fn, arg, timeout = STEP_MS) {
  try {
    return await (await page.waitForFunction(fn, arg, { timeout, polling: 100 })).jsonValue();
  } catch (error) {
    const seen = await page.evaluate(summary).catch((e) => `(the page could not be read: ${e.message})`);
    throw new CheckFailed(`timed out after ${timeout / 1000} s waiting for ${what}; the page shows: ${seen}`);
  }
}

// What the page shows, in one line, for failure messages.
function summary() {
  const squeeze = (node) => node.innerText.replace(/\s+/g, ' ').trim();
  const text = (sel) => {
    const node = document.querySelector(sel);
    return node ? squeeze(node) : '(none)';
  };
  const banner = document.querySelector('[data-testid=error-banner]');
  const rows = [...document.querySelectorAll('[data-testid=commands] tbody tr')]
    .map((tr) => [...tr.children].map(squeeze).join(' '));
  return [
    `banner: ${banner && !banner.hidden ? text('[data-testid=error-banner]') : '(hidden)'}`,
    `ready: ${text('[data-testid=ready]')}`,
    `intake: ${text('[data-testid=intake-state]')}`,
    `control: ${text('[data-testid=control-result]') || '(empty)'}`,
    `commands: ${rows.join(' | ') || '(none)'}`,
    `outcomes: ${text('[data-testid=outcomes-totals]')}`,
    `resources waiting: ${text('[data-testid=resources-waiting]')}`,
    `queue rows: ${document.querySelectorAll('[data-testid=queues] tbody tr').length}`,
    `pools: ${text('[data-testid=quota-pools]')}`,
    `rooms: ${[...document.querySelectorAll('[data-testid=rooms] tbody tr')].map((tr) => [...tr.children].map(squeeze).join(' ')).join(' | ') || '(none)'}`,
  ].join('; ');
}

// stdin lines from the caller, one at a time.
const input = createInterface({ input: process.stdin });
const lines = input[Symbol.asyncIterator]();
async function handshake(event, detail) {
  console.log(`@@${event} ${detail}`);
  const next = await Promise.race([
    lines.next(),
    new Promise((r) => setTimeout(() => r({ timeout: true }), 120_000)),
  ]);
  check(!next.timeout, `the caller did not answer @@${event} within 120 s`);
  check(!next.done && next.value.trim() === 'continue', `the caller answered @@${event} with ${JSON.stringify(next.value)}`);
}

async function signIn(page, credential) {
  await until(page, 'the sign-in form', () => {
    const form = document.querySelector('[data-testid=signin]');
    return form && !form.hidden;
  });
  await page.fill('[data-testid=credential]', credential);
  await page.click('[data-testid=sign-in]');
  await until(page, 'the dashboard after sign-in', () => !document.querySelector('[data-testid=dashboard]').hidden);
  check(!page.url().includes(credential), 'the credential appears in the page URL');
  const stored = await page.evaluate(() => sessionStorage.getItem('sluice.operator.credential'));
  check(stored === credential, 'the credential is not kept in sessionStorage');
  const persistent = await page.evaluate(() => JSON.stringify(localStorage));
  check(!persistent.includes(credential), 'the credential leaked into localStorage');
}

async function signOut(page) {
  await page.click('[data-testid=sign-out]');
  await until(page, 'the sign-in form after sign-out', () => !document.querySelector('[data-testid=signin]').hidden);
  const stored = await page.evaluate(() => sessionStorage.length);
  check(stored === 0, 'sign-out left something in sessionStorage');
}

async function waitForStatus(page) {
  return until(page, 'a status answer on the page (generation and ready shown)', () => {
    const ready = document.querySelector('[data-testid=ready]');
    const generation = document.querySelector('[data-testid=generation]');
    return ready && ready.textContent !== '—' && generation && generation.textContent !== '—'
      && document.querySelector('[data-testid=intake-state]').dataset.state !== 'unknown';
  });
}

// Checks the headers of the page and its assets.
async function checkHeaders(page, base) {
  for (const path of ['/ui/', '/ui/app.js', '/ui/style.css']) {
    const response = await page.request.get(`${base}${path}`);
    check(response.status() === 200, `GET ${path} answered ${response.status()}`);
    const h = response.headers();
    const csp = h['content-security-policy'] || '';
    check(csp.includes("default-src 'self'") && !csp.includes('unsafe-inline'), `GET ${path}: weak or missing CSP: ${csp}`);
    check(h['x-content-type-options'] === 'nosniff', `GET ${path}: no X-Content-Type-Options: nosniff`);
    check(h['cache-control'] === 'no-cache', `GET ${path}: Cache-Control is ${h['cache-control']}`);
  }
  const missing = await page.request.get(`${base}/ui/nope.js`);
  check(missing.status() === 404, `GET /ui/nope.js answered ${missing.status()}, not 404`);
}

// The Rooms panel shows each room of `expected` with exactly the texts the caller counted.
async function checkRooms(page, expected) {
  step(`the Rooms panel shows ${Object.keys(expected).join(', ')} as the caller counted them`);
  const shown = await until(page, `the Rooms panel to show ${JSON.stringify(expected)}`, (expected) => {
    const seen = {};
    for (const [code, want] of Object.entries(expected)) {
      const row = [...document.querySelectorAll('[data-testid=rooms] tbody tr')].find((tr) => tr.dataset.room === code);
      if (!row) return false;
      const got = {};
      for (const field of Object.keys(want)) {
        const cell = row.querySelector(`[data-field=${field}]`);
        got[field] = cell ? cell.textContent.replace(/\s+/g, ' ').trim() : null;
        if (got[field] !== want[field]) return false;
      }
      seen[code] = got;
    }
    return seen;
  }, expected);
  console.log(`dashboard: rooms ${JSON.stringify(shown)}`);
}

// ---------------------------------------------------------------------------------------------

async function live(page, opts) {
  step('open /ui/ and check the served headers');
  await checkHeaders(page, opts.base);
  const response = await page.goto(`${opts.base}/ui`);
  check(response && response.ok(), `GET /ui answered ${response && response.status()}`);
  check(new URL(page.url()).pathname === '/ui/', `GET /ui did not land on /ui/ but ${page.url()}`);

  step('a wrong credential shows UNAUTHENTICATED in the error banner');
  await signIn(page, 'sk_not_a_real_credential');
  await until(page, 'the error banner with UNAUTHENTICATED', () => {
    const b = document.querySelector('[data-testid=error-banner]');
    return b && !b.hidden && b.textContent.includes('UNAUTHENTICATED') && b.textContent.includes('401');
  });
  await signOut(page);

  if (opts.readonly) {
    step('a credential without control:manage is refused 403 PERMISSION_DENIED on pause');
    await signIn(page, opts.readonly);
    await waitForStatus(page);
    await page.click('[data-testid=pause-namespace]');
    await until(page, 'the control error 403 PERMISSION_DENIED', () => {
      const out = document.querySelector('[data-testid=control-result]');
      return out.dataset.outcome === 'error' && out.textContent.includes('403 PERMISSION_DENIED');
    });
    const state = await page.getAttribute('[data-testid=intake-state]', 'data-state');
    check(state === 'open', `after a refused pause the intake shows ${state}, not open`);
    await signOut(page);
  }

  step('sign in as the operator');
  await signIn(page, opts.credential);
  await waitForStatus(page);
  if (opts.rooms) await checkRooms(page, JSON.parse(opts.rooms));
  await handshake('watching', '0');

  step('wait for figures that agree with the load');
  const maxTotal = Number(opts.maxTotal || Number.MAX_SAFE_INTEGER);
  const figures = await until(page, `non-zero figures of ${opts.command} (waiting, outcomes, in flight, pool) within the load of ${maxTotal}`, ({ command, maxTotal }) => {
    const n = (text) => Number(String(text || '').replace(/[^\d]/g, '')) || 0;
    const row = document.querySelector(`tr[data-command-row="${command}"]`);
    if (!row) return false;
    const accepted = n(row.querySelector('[data-status=accepted]').textContent);
    const outcomes = n(document.querySelector('[data-testid=outcomes-totals]').dataset.total);
    const succeeded = n(document.querySelector('[data-testid=outcome-succeeded]').textContent);
    const waiting = n(document.querySelector('[data-testid=resources-waiting]').textContent);
    const rows = document.querySelectorAll('[data-testid=queues] tbody tr').length;
    const oldest = row.querySelector('[data-testid=oldest-waiting]').textContent;
    const pool = document.querySelector('[data-testid=quota-pools] [data-field=allocated]');
    const allocated = pool ? n(pool.textContent) : 0;
    // Seconds with outcomes in the chart: a few, so the screenshot shows the load moving.
    const bars = [...document.querySelectorAll('[data-testid=outcomes-chart] g')].filter((g) => g.querySelector('rect')).length;
    const ok = accepted > 0 && accepted <= maxTotal && outcomes > 0 && outcomes <= maxTotal
      && succeeded > 0 && allocated > 0 && allocated <= maxTotal && waiting > 0 && rows > 0
      && /\d+ s/.test(oldest) && bars >= 4;
    return ok && { accepted, outcomes, succeeded, waiting, rows, oldest, allocated, bars };
  }, { command: opts.command, maxTotal });
  console.log(`dashboard: page shows ${JSON.stringify(figures)}`);

  step('screenshot');
  const shot = join(opts.outDir, 'dashboard.png');
  await page.screenshot({ path: shot, fullPage: true });
  console.log(`dashboard: screenshot ${shot}`);

  step('pause the namespace from the page');
  await page.fill('[data-testid=reason]', 'drop 10:00: hold intake');
  await page.click('[data-testid=pause-namespace]');
  const paused = await until(page, 'the page to show the namespace paused with a revision', () => {
    const out = document.querySelector('[data-testid=control-result]');
    const rev = out.querySelector('[data-testid=control-revision]');
    const state = document.querySelector('[data-testid=intake-state]').dataset.state;
    const m = rev && /revision (\d+)/.exec(rev.textContent);
    return out.dataset.outcome === 'paused' && state === 'paused' && m && m[1];
  });
  await until(page, 'a status poll confirming the pause', () =>
    document.querySelector('[data-testid=pause-namespace]').dataset.state === 'paused');
  await page.screenshot({ path: join(opts.outDir, 'dashboard-paused.png'), fullPage: true });
  await handshake('paused', paused);

  step('resume the namespace from the page');
  await page.click('[data-testid=pause-namespace]');
  const resumed = await until(page, 'the page to show the namespace open with a revision', () => {
    const out = document.querySelector('[data-testid=control-result]');
    const rev = out.querySelector('[data-testid=control-revision]');
    const m = rev && /revision (\d+)/.exec(rev.textContent);
    return out.dataset.outcome === 'resumed'
      && document.querySelector('[data-testid=intake-state]').dataset.state === 'open' && m && m[1];
  });
  check(BigInt(resumed) > BigInt(paused), `the resume revision ${resumed} is not above the pause revision ${paused}`);
  await handshake('resumed', resumed);

  step(`pause command ${opts.command} from the page`);
  const toggle = `[data-testid=pause-command-${opts.command}]`;
  await page.click(toggle);
  const commandPaused = await until(page, `the page to show ${opts.command} paused`, (command) => {
    const out = document.querySelector('[data-testid=control-result]');
    const rev = out.querySelector('[data-testid=control-revision]');
    const m = rev && /revision (\d+)/.exec(rev.textContent);
    const row = document.querySelector(`tr[data-command-row="${command}"]`);
    return out.dataset.outcome === 'paused' && out.textContent.includes(command) && row
      && row.classList.contains('paused') && m && m[1];
  }, opts.command);
  await handshake('command-paused', commandPaused);

  step(`resume command ${opts.command} from the page`);
  await page.click(toggle);
  const commandResumed = await until(page, `the page to show ${opts.command} open`, (command) => {
    const out = document.querySelector('[data-testid=control-result]');
    const rev = out.querySelector('[data-testid=control-revision]');
    const m = rev && /revision (\d+)/.exec(rev.textContent);
    const row = document.querySelector(`tr[data-command-row="${command}"]`);
    return out.dataset.outcome === 'resumed' && row && !row.classList.contains('paused') && m && m[1];
  }, opts.command);
  await handshake('command-resumed', commandResumed);

  step('sign out clears the credential');
  await signOut(page);
}

async function thousand(page, opts) {
  const expected = Number(opts.resources || 1000);
  await page.goto(`${opts.base}/ui/`);
  step('sign in');
  await signIn(page, opts.credential);
  await waitForStatus(page);

  step(`wait for ${expected} resources waiting`);
  const listed = await until(page, `${expected} resources waiting and a first page of the table`, (expected) => {
    const waiting = Number(document.querySelector('[data-testid=resources-waiting]').textContent.replace(/[^\d]/g, ''));
    const rows = document.querySelectorAll('[data-testid=queues] tbody tr').length;
    const count = document.querySelector('[data-testid=queue-count]');
    return waiting >= expected && rows > 0 && Number(count.dataset.matching);
  }, expected);
  console.log(`dashboard: ${listed} resources listed in the table`);

  const layout = () => page.evaluate(() => {
    const table = document.querySelector('[data-testid=queues]');
    const rect = table.getBoundingClientRect();
    const cells = [...table.querySelectorAll('tbody td.num')];
    return {
      viewport: window.innerWidth,
      scrollWidth: document.documentElement.scrollWidth,
      tableRight: rect.right,
      tableWidth: rect.width,
      rows: table.querySelectorAll('tbody tr').length,
      rightAligned: cells.length > 0 && cells.every((c) => getComputedStyle(c).textAlign === 'right'),
      depths: [...table.querySelectorAll('tbody tr')].map((tr) => Number(tr.children[2].textContent.replace(/[^\d]/g, ''))),
    };
  });
  const fits = (l, label) => {
    check(l.scrollWidth <= l.viewport, `${label}: the page is ${l.scrollWidth} px wide in a ${l.viewport} px viewport`);
    check(l.tableRight <= l.viewport + 0.5, `${label}: the queue table ends at ${l.tableRight} px, past the ${l.viewport} px viewport`);
    check(l.rightAligned, `${label}: numbers in the queue table are not right-aligned`);
    for (let i = 1; i < l.depths.length; i++) {
      check(l.depths[i - 1] >= l.depths[i], `${label}: the queue table is not sorted by depth (${l.depths[i - 1]} before ${l.depths[i]})`);
    }
  };

  step('the first page fits and is sorted by depth');
  let l = await layout();
  fits(l, 'first page');
  check(l.rows <= 25 && l.rows === Math.min(25, listed), `the first page shows ${l.rows} rows of ${listed}`);
  if (opts.resource) {
    const first = await page.getAttribute('[data-testid=queues] tbody tr:first-child', 'data-resource');
    check(first === opts.resource, `the busiest resource ${opts.resource} is not first (got ${first})`);
  }

  if (listed > l.rows) {
    step('show more, then show all');
    await page.click('[data-testid=show-more]');
    await until(page, 'more rows after "show more"', (before) =>
      document.querySelectorAll('[data-testid=queues] tbody tr').length > before, l.rows);
    await page.click('[data-testid=show-all]');
    await until(page, 'every row after "show all"', (n) =>
      document.querySelectorAll('[data-testid=queues] tbody tr').length === n, listed);
    l = await layout();
    fits(l, 'all rows');
  }

  step('the filter narrows the table');
  const target = opts.resource || await page.getAttribute('[data-testid=queues] tbody tr:nth-child(2)', 'data-resource');
  await page.fill('[data-testid=queue-filter]', target);
  await until(page, `exactly the row of ${target}`, (key) => {
    const rows = [...document.querySelectorAll('[data-testid=queues] tbody tr')];
    return rows.length === 1 && rows[0].dataset.resource === key;
  }, target);
  await page.fill('[data-testid=queue-filter]', 'no-such-resource-zz');
  await until(page, 'no row and a "no match" note', () =>
    document.querySelectorAll('[data-testid=queues] tbody tr').length === 0
    && !document.querySelector('#queues-empty').hidden);
  await page.fill('[data-testid=queue-filter]', '');
  await until(page, 'the first page again after clearing the filter', (n) =>
    document.querySelectorAll('[data-testid=queues] tbody tr').length === n, Math.min(25, listed));
  const shot = join(opts.outDir, 'dashboard-1000.png');
  await page.screenshot({ path: shot, fullPage: true });
  console.log(`dashboard: screenshot ${shot}`);

  step('a phone-sized viewport does not overflow');
  await page.setViewportSize({ width: 390, height: 844 });
  l = await layout();
  fits(l, 'phone width');
  await page.screenshot({ path: join(opts.outDir, 'dashboard-phone.png'), fullPage: false });
}

// ---------------------------------------------------------------------------------------------

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  await mkdir(opts.outDir, { recursive: true });
  const profile = await mkdtemp(join(tmpdir(), 'sluice-chromium-'));
  let context;
  const problems = [];
  try {
    step(`launch ${CHROMIUM}`);
    context = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      args: CHROMIUM_ARGS,
      viewport: { width: 1440, height: 1000 },
      deviceScaleFactor: 1,
      timeout: 60_000,
    });
    const page = context.pages()[0] || await context.newPage();
    page.setDefaultTimeout(STEP_MS);
    page.on('pageerror', (error) => problems.push(`uncaught error in the page: ${error.message}`));
    page.on('console', (message) => {
      const text = message.text();
      if (/Content Security Policy|Refused to/i.test(text)) problems.push(`CSP violation: ${text}`);
      else if (message.type() === 'error' && !/Failed to load resource/.test(text)) problems.push(`console error: ${text}`);
    });
    if (opts.scenario === 'live') await live(page, opts);
    else if (opts.scenario === 'thousand') await thousand(page, opts);
    else usage(`unknown scenario ${opts.scenario}`);
    check(problems.length === 0, problems.join('; '));
    console.log(`dashboard: PASS (${opts.scenario})`);
  } finally {
    input.close();
    if (context) await context.close().catch(() => {});
    await rm(profile, { recursive: true, force: true }).catch(() => {});
  }
}

main().then(
  () => process.exit(0),
  (error) => {
    const what = error instanceof CheckFailed ? error.message : (error && error.stack) || String(error);
    console.error(`dashboard: FAIL at step "${currentStep}": ${what}`);
    process.exit(1);
  },
);
