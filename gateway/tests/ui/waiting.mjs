// Drives the hosted waiting page (/wait/{namespace}/{command}) and the demo sale in Debian's
// headless Chromium through playwright-core; run by gateway/tests/api/browser.rs.
//
//   node waiting.mjs <base-url> <setup-json> <output-dir> --scenario page|outage|drop
//
// <setup-json>: {"namespace": "<id>", "command": "claim", "offer": "<uuid>",
//                "tokens": {"<subject>": "<subject token>", …}, "return_url": "<url>"?}
//
// Scenarios:
//   page    storage refused: the explicit error, no enqueue (@@storage-refused); a page joins
//           the line (@@waiting), reloads and resumes the same command (@@reloaded), passes an
//           axe-core check (0 serious or critical violations) and is photographed, then leaves
//           the line (@@cancelled); another page waits (@@waiting-to-finish) until the caller
//           runs the executor, ends `Done.` and hands the result to the return URL; the demo
//           sale is photographed.
//   outage  a page waits (@@waiting); the caller kills the gateway and starts it again 5 s
//           later; the page shows that it reconnects, its failed polls back off (each wait
//           longer than the one before), and it finds its place again (@@recovered), then ends
//           once the caller runs the executor.
//   drop    one page per token joins at once (@@all-waiting); the caller runs the executor;
//           every page ends; each page's polls honour the poll_after_ms it was given
//           (@@figures {json}).
//
// Between steps the script prints `@@<event> <detail>` and waits for `continue` on stdin.
// Exits 0 when every check passed, 1 with a message naming the failed check otherwise.

import { join } from 'node:path';
import { checkAccessible, fail, launch, stateOf, step, waitForState } from './harness.mjs';

const STEP_MS = 60_000;
/** The whole drop, from the last page in line to the last page done: fifty executions paced at
 * ten a second take seconds alone, but the suite runs many stacks at once on two cores, and a
 * liveness guard must not fail a drop that is only slow (the scenario as a whole has 240 s). */
const DROP_END_MS = 150_000;

const [base, setupText, outDir, ...rest] = process.argv.slice(2);
const scenario = rest[rest.indexOf('--scenario') + 1] || 'page';
const setup = JSON.parse(setupText);

function pageUrl(subject, key = `intent-${subject}`) {
  const hash = new URLSearchParams({
    token: setup.tokens[subject],
    key,
    input: JSON.stringify({ offer: setup.offer }),
  });
  if (setup.return_url) hash.set('return', setup.return_url);
  return `${base}/wait/${setup.namespace}/${setup.command}#${hash}`;
}

/** A context that records the page's console errors (CSP violations show there). */
async function newPage(browser, options = {}) {
  const context = await browser.newContext(options);
  const page = await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  return { context, page, errors };
}

async function pageScenario(browser) {
  // Storage refused: the page says so and enqueues nothing.
  {
    const { context, page } = await newPage(browser);
    await context.addInitScript(() => {
      Storage.prototype.setItem = () => { throw new DOMException('denied', 'SecurityError'); };
    });
    const enqueues = [];
    page.on('request', (r) => { if (r.url().includes(':enqueue')) enqueues.push(r.url()); });
    await page.goto(pageUrl('storage-user'));
    await waitForState(page, /cannot keep your place/, 'storage refused');
    const problem = await page.textContent('#problem');
    if (!/storage/i.test(problem)) fail(`the refusal does not say why: ${problem}`);
    if (enqueues.length) fail(`a page without storage enqueued: ${enqueues}`);
    await step('storage-refused');
    await context.close();
  }
  // Join, reload, resume.
  const { context, page, errors } = await newPage(browser);
  await page.goto(pageUrl('reload-user'));
  await waitForState(page, /You are in line/, 'joining');
  await page.waitForSelector('#figures:not([hidden])', { timeout: STEP_MS });
  if (page.url().includes('token=')) fail('the token stayed in the address bar');
  await step('waiting');
  await page.reload();
  await waitForState(page, /You are in line/, 'after the reload');
  await page.waitForSelector('#figures:not([hidden])', { timeout: STEP_MS });
  await step('reloaded');
  // Accessibility, with the page in line.
  await checkAccessible(page, 'the waiting page, in line');
  const live = await page.getAttribute('#state', 'aria-live');
  if (live !== 'polite') fail(`the status is not announced (aria-live=${live})`);
  await page.screenshot({ path: join(outDir, 'waiting-page.png'), fullPage: true });
  await page.setViewportSize({ width: 375, height: 740 });
  await page.screenshot({ path: join(outDir, 'waiting-page-phone.png'), fullPage: true });
  // Leave the line.
  await page.click('#leave');
  await waitForState(page, /You left the line/, 'leaving');
  await step('cancelled');
  const csp = errors.filter((e) => /Content Security Policy/i.test(e));
  if (csp.length) fail(`CSP violations: ${csp.join(' | ')}`);
  await context.close();

  // A page that ends and hands its result back.
  const last = await newPage(browser);
  await last.page.goto(pageUrl('done-user'));
  await waitForState(last.page, /You are in line/, 'joining to finish');
  await step('waiting-to-finish');
  try {
    await last.page.waitForURL((url) => url.searchParams.get('status') === 'succeeded', { timeout: STEP_MS });
  } catch {
    fail(`the page did not hand the result back: ${last.page.url()} "${await stateOf(last.page)}"`);
  }
  const url = new URL(last.page.url());
  if (!setup.return_url || !url.href.startsWith(setup.return_url)) fail(`returned to ${url.href}`);
  if (!url.searchParams.get('command_id')) fail('no command_id in the return URL');
  await step('returned', url.searchParams.get('command_id'));
  await last.context.close();

  // The demo sale, photographed.
  const demo = await newPage(browser);
  await demo.page.goto(`${base}/demo/`);
  await demo.page.waitForSelector('#claim', { timeout: STEP_MS });
  await demo.page.screenshot({ path: join(outDir, 'demo-sale.png'), fullPage: true });
  if (demo.errors.length) fail(`demo errors: ${demo.errors.join(' | ')}`);
  await demo.context.close();
}

async function outageScenario(browser) {
  const { context, page } = await newPage(browser);
  const failed = [];
  page.on('requestfailed', (r) => { if (r.url().includes('/v1/tickets/')) failed.push(Date.now()); });
  await page.goto(pageUrl('outage-user'));
  await waitForState(page, /You are in line/, 'joining');
  let sawReconnecting = false;
  const watcher = setInterval(async () => {
    try { if (/Reconnecting/.test(await stateOf(page))) sawReconnecting = true; } catch { /* closing */ }
  }, 50);
  await step('waiting');
  // The caller killed the gateway, waited 5 s and started it again.
  await waitForState(page, /You are in line/, 'after the outage');
  await page.waitForFunction(() => !/Reconnecting/.test(document.getElementById('state').textContent), null, { timeout: STEP_MS });
  clearInterval(watcher);
  if (!sawReconnecting) fail('the page never said it was reconnecting');
  if (failed.length < 2) fail(`only ${failed.length} failed polls during a 5 s outage`);
  const gaps = failed.slice(1).map((t, i) => t - failed[i]);
  console.log(`failed polls during the outage: ${failed.length}, gaps ${gaps.join(' ')} ms`);
  if (gaps.length >= 2 && !(gaps[gaps.length - 1] > gaps[0])) fail(`the polls did not back off: ${gaps.join(' ')}`);
  await step('recovered', String(failed.length));
  await waitForState(page, /Done/, 'the end after the outage');
  await context.close();
}

async function dropScenario(browser) {
  const subjects = Object.keys(setup.tokens);
  const pages = await Promise.all(subjects.map(async (subject) => {
    const opened = await newPage(browser);
    const polls = [];
    opened.page.on('response', async (response) => {
      if (!response.url().includes('/v1/tickets/')) return;
      // The browser's own clock for when the request started: Playwright delivers events late
      // under load, and a late event for one poll would make the next one look early.
      let at = Date.now();
      try {
        await response.finished();
        at = response.request().timing().startTime;
      } catch { /* the page closed: keep the event's time */ }
      try {
        const body = await response.json();
        polls.push({ at, status: response.status(), advice: body?.data?.poll_after_ms ?? null, state: body?.data?.status });
      } catch { polls.push({ at, status: response.status(), advice: null }); }
    });
    // Every enqueue a page sends, and the request keys they carry: a retry after a 503 or a
    // lost answer resends the same key (the module's promise), a second intent would not.
    const sent = { enqueues: 0, keys: new Set() };
    opened.page.on('request', (request) => {
      if (!request.url().includes(':enqueue')) return;
      sent.enqueues += 1;
      try { sent.keys.add(JSON.parse(request.postData() ?? '{}').request_key); } catch { sent.keys.add('unreadable'); }
    });
    await opened.page.goto(pageUrl(subject), { waitUntil: 'commit', timeout: STEP_MS });
    return { subject, polls, sent, ...opened };
  }));
  await Promise.all(pages.map(({ page }) => waitForState(page, /You are in line/, 'joining the drop')));
  const started = Date.now();
  await step('all-waiting', String(pages.length));
  await Promise.all(pages.map(({ page }) => waitForState(page, /Done|declined|could not|expired/, 'the end of the drop', DROP_END_MS)));
  const ended = Date.now();
  let early = 0;
  let intervals = 0;
  let advisedTotal = 0;
  let waitedTotal = 0;
  let polls = 0;
  for (const { subject, polls: unordered } of pages) {
    // The handlers await the bodies, so they may record out of order.
    const seen = [...unordered].sort((a, b) => a.at - b.at);
    polls += seen.length;
    for (let i = 1; i < seen.length; i += 1) {
      const advised = seen[i - 1].advice;
      if (advised === null) continue;
      intervals += 1;
      advisedTotal += advised;
      waitedTotal += seen[i].at - seen[i - 1].at;
      // The page waits advice × [0.9, 1.1] after the previous answer, so from one request's
      // start to the next there is at least 0.9 × advice; 50 ms of slack for timers under load.
      if (seen[i].at - seen[i - 1].at < advised * 0.9 - 50) {
        early += 1;
        console.log(`${subject}: polled after ${seen[i].at - seen[i - 1].at} ms, advised ${advised}`);
      }
    }
    if (seen.some((p) => p.state && p.advice === null && !['succeeded', 'rejected', 'failed', 'expired', 'cancelled'].includes(p.state))) {
      fail(`${subject}: a waiting status came without advice`);
    }
  }
  const figures = {
    pages: pages.length,
    polls,
    intervals,
    early,
    seconds: Math.round((ended - started) / 100) / 10,
    // Over the same advised intervals as the figure below (polls while a page joined, before
    // every page waited, would otherwise count against the drop's shorter window).
    polls_per_page_per_minute: intervals ? Math.round((60_000 / (waitedTotal / intervals)) * 10) / 10 : null,
    // What the advice allows: one poll per mean advised interval.
    advised_polls_per_minute: intervals ? Math.round((60_000 / (advisedTotal / intervals)) * 10) / 10 : null,
    enqueues: pages.reduce((n, p) => n + p.sent.enqueues, 0),
    intents: pages.reduce((n, p) => n + p.sent.keys.size, 0),
  };
  await step('figures', JSON.stringify(figures));
  if (early) fail(`${early} of ${intervals} polls came earlier than advised`);
  for (const { subject, sent } of pages) {
    if (sent.keys.size !== 1) fail(`${subject} sent ${sent.keys.size} request keys in ${sent.enqueues} enqueues`);
  }
  await Promise.all(pages.map(({ context }) => context.close()));
}

const browser = await launch();
try {
  if (scenario === 'page') await pageScenario(browser);
  else if (scenario === 'outage') await outageScenario(browser);
  else if (scenario === 'drop') await dropScenario(browser);
  else fail(`unknown scenario ${scenario}`);
} catch (error) {
  fail(error?.stack ?? String(error));
} finally {
  await browser.close();
}
process.exit(0);
