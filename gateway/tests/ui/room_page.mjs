// Drives the hosted room page (/room/{namespace}/{room}) in Debian's headless Chromium through
// playwright-core; run by gateway/tests/api/rooms/page.rs.
//
//   node room_page.mjs <base-url> <setup-json> <output-dir> --scenario page|crowd
//
// <setup-json>: {"namespace": "<id>", "app_port": <port>, "tokens": {"<subject>": "<token>", …}}
// The protected origin is a server of this script's own on 127.0.0.1:<app_port>: `POST /enter`
// takes the page's form post and reports the pass (@@handed {"subject", "pass", "join_id",
// "room"}); the test verifies it as an origin would.
//
// Scenarios:
//   page   a page joins the pre-queue of `hall` and shows the countdown (@@prequeued); it
//          reloads and keeps its place (@@reloaded); axe-core finds no serious or critical
//          violation and the page is photographed; the caller opens the room (@@opening) and
//          the page, admitted, posts its pass to the return URL (@@handed). A page in `lounge`
//          (no return URL) is admitted and stays, heartbeating (@@lounging), then leaves
//          (@@left). No CSP violation, no request to another origin than the gateway's and the
//          return URL's, no cookie.
//   crowd  one page per token joins `crowd` at once; each is admitted in its turn and posts
//          its pass (@@handed); the script ends once every page handed its pass over.
//
// Between steps the script prints `@@<event> <detail>` and waits for `continue` on stdin.
// Exits 0 when every check passed, 1 with a message naming the failed check otherwise.

import { createServer } from 'node:http';
import { join } from 'node:path';
import { checkAccessible, fail, launch, stateOf, step, waitForState } from './harness.mjs';

const STEP_MS = 60_000;
/** Fifty pages through twenty slots whose passes last ten seconds at first: a few waves of
 * seconds each, slow on a busy two-core machine; the scenario as a whole has 240 s. */
const CROWD_MS = 180_000;

const [base, setupText, outDir, ...rest] = process.argv.slice(2);
const scenario = rest[rest.indexOf('--scenario') + 1] || 'page';
const setup = JSON.parse(setupText);
const appOrigin = `http://127.0.0.1:${setup.app_port}`;

/** The protected origin: each form post's fields, reported in arrival order. */
const handed = [];
let onHanded = () => {};
const origin = createServer((request, response) => {
  if (request.method !== 'POST' || request.url !== '/enter') {
    response.writeHead(404).end();
    return;
  }
  let body = '';
  request.on('data', (chunk) => { body += chunk; });
  request.on('end', () => {
    const fields = Object.fromEntries(new URLSearchParams(body));
    handed.push(fields);
    onHanded(fields);
    response.writeHead(200, { 'content-type': 'text/html' }).end('<!doctype html><title>In</title><p>Welcome in.</p>');
  });
});
await new Promise((resolve) => origin.listen(setup.app_port, '127.0.0.1', resolve));

function roomUrl(room, subject) {
  return `${base}/room/${setup.namespace}/${room}#${new URLSearchParams({ token: setup.tokens[subject] })}`;
}

/** A page that records console errors (CSP violations show there) and every request's origin. */
async function newPage(context) {
  const page = await context.newPage();
  const errors = [];
  const origins = new Set();
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  page.on('request', (r) => origins.add(new URL(r.url()).origin));
  return { page, errors, origins };
}

/** Waits for the origin to receive a pass from `subject`'s page. */
function handedBy(subject, timeout = STEP_MS) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${subject} handed no pass`)), timeout);
    const check = () => {
      const found = handed.find((f) => subjectOf(f.pass) === subject);
      if (found) {
        clearTimeout(timer);
        resolve(found);
      }
    };
    onHanded = check;
    check();
  });
}

/** The subject a pass names (its payload's `sub`), without verifying it: the caller does. */
function subjectOf(pass) {
  try {
    return JSON.parse(Buffer.from(pass.split('.')[1], 'base64url').toString()).sub;
  } catch {
    return null;
  }
}

function checkClean(what, { errors, origins }) {
  const csp = errors.filter((e) => /Content Security Policy/i.test(e));
  if (csp.length) fail(`${what}: CSP violations: ${csp.join(' | ')}`);
  const foreign = [...origins].filter((o) => o !== new URL(base).origin && o !== appOrigin);
  if (foreign.length) fail(`${what}: requests to ${foreign.join(', ')}`);
}

async function pageScenario(browser) {
  const context = await browser.newContext();
  const seen = await newPage(context);
  const { page } = seen;
  await page.goto(roomUrl('hall', 'hall-user'));
  await waitForState(page, /You are in line/, 'joining the pre-queue');
  await page.waitForSelector('#countdown:not([hidden])', { timeout: STEP_MS });
  if (page.url().includes('token=')) fail('the token stayed in the address bar');
  const counting = await page.textContent('#opens-in');
  if (!/^\d+:\d\d(:\d\d)?$/.test(counting.trim())) fail(`the countdown shows "${counting}"`);
  await step('prequeued');
  await page.reload();
  await waitForState(page, /You are in line/, 'after the reload');
  await page.waitForSelector('#countdown:not([hidden])', { timeout: STEP_MS });
  await step('reloaded');

  await checkAccessible(page, 'the room page, in the pre-queue');
  await page.screenshot({ path: join(outDir, 'room-page.png'), fullPage: true });
  await page.setViewportSize({ width: 375, height: 740 });
  await page.screenshot({ path: join(outDir, 'room-page-phone.png'), fullPage: true });

  // The caller opens the room: admitted, the page posts its pass to the return URL.
  await step('opening');
  const posted = handedBy('hall-user');
  await waitForState(page, /your turn/, 'admitted');
  let fields;
  try {
    fields = await posted;
  } catch (error) {
    fail(`${error.message}: the page says "${await stateOf(page)}"`);
  }
  await page.waitForURL(`${appOrigin}/enter`, { timeout: STEP_MS });
  await step('handed', JSON.stringify({ ...fields, subject: 'hall-user' }));
  checkClean('hall', seen);
  if ((await context.cookies()).length) fail('the page set cookies');

  // A room without a return URL: the page keeps the pass alive while it is open, then leaves.
  const lounge = await newPage(context);
  await lounge.page.goto(roomUrl('lounge', 'lounge-user'));
  await waitForState(lounge.page, /your turn/, 'admitted to the lounge');
  // Two heartbeats' worth past the first pass's end (heartbeat_seconds = 5).
  await lounge.page.waitForTimeout(11_000);
  await waitForState(lounge.page, /your turn/, 'still admitted after two heartbeat periods');
  await step('lounging');
  await lounge.page.click('#leave');
  await waitForState(lounge.page, /You left the line/, 'leaving the lounge');
  await step('left');
  checkClean('lounge', lounge);
  await context.close();
}

async function crowdScenario(browser) {
  const subjects = Object.keys(setup.tokens);
  const context = await browser.newContext();
  const pages = [];
  for (const subject of subjects) {
    const seen = await newPage(context);
    pages.push({ subject, ...seen });
  }
  // Every page joins at once.
  await Promise.all(pages.map(({ page, subject }) => page.goto(roomUrl('crowd', subject))));
  const reported = new Set();
  const deadline = Date.now() + CROWD_MS;
  while (reported.size < subjects.length) {
    if (Date.now() > deadline) {
      const states = await Promise.all(pages.map(async ({ page }) => {
        try { return await stateOf(page); } catch { return page.url(); }
      }));
      fail(`${subjects.length - reported.size} pages handed no pass: ${states.join(' | ')}`);
    }
    for (const fields of handed) {
      const subject = subjectOf(fields.pass);
      if (subject && !reported.has(subject)) {
        reported.add(subject);
        await step('handed', JSON.stringify({ ...fields, subject }));
      }
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  for (const seen of pages) checkClean(seen.subject, seen);
  if ((await context.cookies()).length) fail('the pages set cookies');
  await context.close();
}

const browser = await launch();
try {
  if (scenario === 'crowd') await crowdScenario(browser);
  else await pageScenario(browser);
} catch (error) {
  fail(error?.stack ?? String(error));
} finally {
  await browser.close();
  origin.close();
}
process.exit(0);
