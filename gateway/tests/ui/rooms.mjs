// Drives the browser module's waiting-room handle (`client.room(code)`) in Debian's headless
// Chromium through playwright-core, against a room with proof of work at its door; run by
// gateway/tests/api/rooms/browser.rs.
//
//   node rooms.mjs <base-url> <setup-json> <output-dir>
//
// <setup-json>: {"room": "<code>", "bits": <n>, "steep_room": "<code>", "steep_bits": <n>,
//                "app_origin": "http://127.0.0.1:<free port>",
//                "tokens": {"<subject>": "<subject token>", …}} with subjects `same-origin`,
//                `cross-origin` and `no-worker`.
//
// Steps (each printed as `@@<event> <detail>`; the caller checks PostgreSQL and answers
// `continue` on stdin):
//   same-origin    a page on the gateway's origin imports /sdk/v1/rooms.js, starts the room:
//                  the solve runs in the gateway's worker file, the place is admitted
//                  (@@admitted {subject, pass, work}); a heartbeat replaces the pass
//                  (@@heartbeat {pass}); a reload polls the stored place and sends no challenge
//                  and no join (@@reloaded); leaving ends the place (@@left).
//   cross-origin   a page on another origin (served by this script) imports the module from the
//                  gateway: the solve runs in a Blob-URL worker (@@admitted).
//   no-worker      the same with `worker-src 'none'`, in the steeper room: no worker may start,
//                  the solve runs on the main thread in slices, and the page's 10 ms timer keeps
//                  running while it solves (@@admitted).
//   hash-rate      the solver's rate in a Worker in this Chromium, ~1.5 s of hashing
//                  (@@hash-rate {hashes, ms, hashes_per_ms}).
// Exits 0 when every check passed, 1 with a message naming the failed check otherwise.

import { createServer } from 'node:http';
import { fail, launch, step } from './harness.mjs';

const STEP_MS = 60_000;

const [base, setupText] = process.argv.slice(2);
const setup = JSON.parse(setupText);

/** A page that records its errors and the door's requests (challenges and joins). */
async function newPage(browser) {
  const context = await browser.newContext();
  const page = await context.newPage();
  const errors = [];
  const door = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  // A failed load is recorded with its URL below; the browser's own favicon probe is not ours.
  page.on('console', (m) => {
    if (m.type() === 'error' && !/^Failed to load resource/.test(m.text())) errors.push(m.text());
  });
  page.on('response', (r) => {
    if (r.status() >= 400 && !r.url().endsWith('/favicon.ico')) errors.push(`${r.status()} ${r.url()}`);
  });
  page.on('requestfailed', (r) => console.log(`request failed: ${r.url()} ${r.failure()?.errorText}`));
  page.on('console', (m) => { if (m.type() === 'error') console.log(`console: ${m.text()}`); });
  page.on('request', (r) => {
    if (/:challenge$|:join$/.test(r.url())) door.push(r.url().split(':').pop());
  });
  return { context, page, errors, door };
}

/**
 * Imports the module from `moduleUrl` in the page and starts the room for `subject`; the
 * handle is `window.room`, every snapshot's state lands in `window.states`, and
 * `window.ticks` counts a 10 ms interval (a blocked main thread would stop it).
 */
async function startRoom(page, moduleUrl, subject, code = setup.room) {
  await page.evaluate(async ({ moduleUrl, baseUrl, token, code }) => {
    const { createClient } = await import(moduleUrl);
    const client = createClient({ baseUrl, token });
    window.states = [];
    window.ticks = 0;
    window.longestGapMs = 0;
    let last = performance.now();
    setInterval(() => {
      const now = performance.now();
      window.longestGapMs = Math.max(window.longestGapMs, now - last);
      last = now;
      window.ticks += 1;
    }, 10);
    window.room = client.room(code);
    window.room.subscribe((s) => {
      if (window.states.at(-1) === s.state) return;
      // The page's timer ticks while the solve runs: none would tick on a blocked thread.
      if (s.state === 'solving') window.ticksBeforeSolve = window.ticks;
      if (window.states.at(-1) === 'solving') window.ticksWhileSolving = window.ticks - window.ticksBeforeSolve;
      window.states.push(s.state);
    });
    window.room.start();
  }, { moduleUrl, baseUrl: base, token: setup.tokens[subject], code });
}

async function waitForState(page, state, what) {
  try {
    await page.waitForFunction((wanted) => window.room?.state === wanted, state, { timeout: STEP_MS });
  } catch {
    const snapshot = await page.evaluate(() => window.room?.snapshot).catch(() => null);
    fail(`${what}: never ${state}: ${JSON.stringify(snapshot)}`);
  }
}

const snapshotOf = (page) => page.evaluate(() => {
  const s = window.room.snapshot;
  return { ...s, error: s.error ? String(s.error.message) : null };
});

/** Admitted: the work is reported, it ran where `solver` says, at the room's bits. */
async function admittedWith(page, solver, subject, bits = setup.bits) {
  await waitForState(page, 'admitted', `${subject} admitted`);
  const snapshot = await snapshotOf(page);
  const { work } = snapshot;
  console.log(`${subject}: states ${JSON.stringify(await page.evaluate(() => window.states))}, work ${JSON.stringify(work)}`);
  if (!work || work.solver !== solver) fail(`${subject}: the solve ran in ${work?.solver}, not ${solver}`);
  if (work.bits !== bits) fail(`${subject}: solved ${work.bits} bits, the room asks ${bits}`);
  if (!(work.hashes >= 1) || !(work.ms >= 0)) fail(`${subject}: no work reported: ${JSON.stringify(work)}`);
  if (!snapshot.pass || !snapshot.passExpiresAt) fail(`${subject}: admitted without a pass`);
  return snapshot;
}

async function sameOrigin(browser) {
  const { context, page, errors, door } = await newPage(browser);
  // Any page of the gateway's origin: the module and its worker file are same-origin there.
  await page.goto(`${base}/healthz`);
  await startRoom(page, `${base}/sdk/v1/rooms.js`, 'same-origin');
  const admitted = await admittedWith(page, 'worker-file', 'same-origin');
  const states = await page.evaluate(() => window.states);
  if (!states.includes('solving')) fail(`never solving: ${states}`);
  if (door.join(' ') !== 'challenge join') fail(`the door's requests: ${door.join(' ')}`);
  await step('admitted', JSON.stringify({ subject: 'same-origin', room: setup.room, pass: admitted.pass, work: admitted.work }));

  // The room's heartbeat_after_ms is a third of heartbeat_seconds: the pass is signed anew.
  try {
    await page.waitForFunction((old) => window.room.pass && window.room.pass !== old, admitted.pass, { timeout: STEP_MS });
  } catch {
    fail('no heartbeat replaced the pass');
  }
  const renewed = await page.evaluate(() => window.room.pass);
  await step('heartbeat', JSON.stringify({ pass: renewed }));

  door.length = 0;
  await page.reload();
  await startRoom(page, `${base}/sdk/v1/rooms.js`, 'same-origin');
  await waitForState(page, 'admitted', 'admitted after the reload');
  if (door.length) fail(`the reload went through the door again: ${door.join(' ')}`);
  const after = await snapshotOf(page);
  if (after.work?.solver !== 'worker-file') fail(`the stored work was lost: ${JSON.stringify(after.work)}`);
  await step('reloaded', JSON.stringify({ join_id: after.joinId }));

  const left = await page.evaluate(() => window.room.leave().then((s) => s.state));
  if (left !== 'left') fail(`leave() ended ${left}`);
  await step('left');
  if (errors.length) fail(`page errors: ${errors.join(' | ')}`);
  await context.close();
}

/**
 * The application's pages, on `app_origin` (another origin than the gateway's): `/` plain, and
 * `/no-worker` with a CSP that lets no worker start.
 */
function serveApp() {
  const { port, hostname } = new URL(setup.app_origin);
  const server = createServer((request, response) => {
    const headers = { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' };
    if (request.url === '/no-worker') headers['content-security-policy'] = "worker-src 'none'";
    response.writeHead(request.url === '/' || request.url === '/no-worker' ? 200 : 404, headers);
    response.end('<!doctype html><html lang="en"><title>shop</title><body>shop</body></html>');
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(Number(port), hostname, () => resolve(server));
  });
}

/** A page of the application's origin. */
async function appPage(browser, path = '/') {
  const opened = await newPage(browser);
  await opened.page.goto(`${setup.app_origin}${path}`);
  return opened;
}

async function crossOrigin(browser) {
  const { context, page, errors } = await appPage(browser);
  await startRoom(page, `${base}/sdk/v1/rooms.js`, 'cross-origin');
  const admitted = await admittedWith(page, 'worker-blob', 'cross-origin');
  await step('admitted', JSON.stringify({ subject: 'cross-origin', room: setup.room, pass: admitted.pass, work: admitted.work }));
  if (errors.length) fail(`page errors: ${errors.join(' | ')}`);
  await context.close();
}

async function noWorker(browser) {
  const { context, page } = await appPage(browser, '/no-worker');
  await startRoom(page, `${base}/sdk/v1/rooms.js`, 'no-worker', setup.steep_room);
  const admitted = await admittedWith(page, 'main-thread', 'no-worker', setup.steep_bits);
  const { ticks, longestGapMs } = await page.evaluate(() => ({ ticks: window.ticksWhileSolving, longestGapMs: window.longestGapMs }));
  const { ms, hashes } = admitted.work;
  console.log(`no-worker: ${hashes} hashes in ${ms} ms on the main thread; the page's 10 ms timer ran ${ticks} times meanwhile, longest gap ${Math.round(longestGapMs)} ms`);
  // Slices of 20 ms yield to the page: its timer runs at least once per 100 ms of solving.
  if (!(ticks >= Math.floor(ms / 100))) fail(`the page's timer ran ${ticks} times in ${ms} ms of solving`);
  await step('admitted', JSON.stringify({ subject: 'no-worker', room: setup.steep_room, pass: admitted.pass, work: admitted.work }));
  await context.close();
}

/** The solver's rate in a Worker: a challenge no nonce will solve soon, hashed ~1.5 s. */
async function hashRate(browser) {
  const { context, page } = await appPage(browser);
  const rate = await page.evaluate(async (moduleUrl) => {
    const { workerSource } = await import(moduleUrl);
    const url = URL.createObjectURL(new Blob([workerSource()], { type: 'text/javascript' }));
    const worker = new Worker(url);
    return new Promise((resolve, reject) => {
      let started = null;
      let last = null;
      worker.onerror = (e) => reject(new Error(e.message));
      worker.onmessage = ({ data }) => {
        if (data.ready) {
          started = performance.now();
          worker.postMessage({ challenge: 'r'.repeat(122), bits: 64 });
        } else if (typeof data.progress === 'number') {
          last = { hashes: data.progress, ms: performance.now() - started };
          if (last.ms >= 1500) {
            worker.terminate();
            resolve({ hashes: last.hashes, ms: Math.round(last.ms), hashes_per_ms: Math.round(last.hashes / last.ms) });
          }
        }
      };
    });
  }, `${base}/sdk/v1/rooms.js`);
  if (!(rate.hashes_per_ms > 0)) fail(`no hash rate: ${JSON.stringify(rate)}`);
  await step('hash-rate', JSON.stringify(rate));
  await context.close();
}

const app = await serveApp();
const browser = await launch();
try {
  await sameOrigin(browser);
  await crossOrigin(browser);
  await noWorker(browser);
  await hashRate(browser);
} catch (error) {
  fail(error?.stack ?? String(error));
} finally {
  await browser.close();
  app.close();
}
process.exit(0);
