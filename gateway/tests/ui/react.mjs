// Drives the browser module's React hook (`useSluiceCommand`, /sdk/v1/react.js) in Debian's
// headless Chromium through playwright-core, with React 19 in <StrictMode> (its development
// build: StrictMode runs every effect twice and React warns about an uncached getSnapshot);
// run by gateway/tests/api/browser.rs.
//
//   node react.mjs <base-url> <setup-json> <output-dir>
//
// <setup-json>: {"app_origin": "http://127.0.0.1:<free port>", "token": "<subject token>",
//                "offer": "<uuid>", "key": "<intent key>"}
//
// The page is the application's, on `app_origin` (served by this script): an import map
// resolves `react` and `react-dom/client`, and the page imports the module and the hook from
// the gateway as they are served, unbundled. React ships CommonJS only, so esbuild (from npm,
// in memory at the start of the run, ~0.2 s) turns react and react-dom/client into two ES
// modules sharing one React (in a chunk of their own): the only build step, and it touches
// React alone.
//
// Steps (each printed as `@@<event> <detail>`; the caller checks PostgreSQL and answers
// `continue` on stdin):
//   waiting    the component, mounted with autoStart, shows the command accepted with its
//              position (@@waiting {command_id, position}); the caller runs the executor;
//   succeeded  it shows the result (@@succeeded {command_id, result});
//   reloaded   after a reload the hook resumes the stored intent: the same command, no
//              enqueue (@@reloaded {command_id}).
// Checked throughout: StrictMode did run the effects twice, the page sent exactly one enqueue,
// the component rendered a bounded number of times, and the console has no warning and no
// error (React's "The result of getSnapshot should be cached" or "Maximum update depth
// exceeded" among them).
// Exits 0 when every check passed, 1 with a message naming the failed check otherwise.

import { createServer } from 'node:http';
import { createRequire } from 'node:module';
import { basename, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { fail, launch, step } from './harness.mjs';

const STEP_MS = 30_000;
/** Far more than a claim's life needs (each change renders twice under StrictMode); a loop
 * renders thousands of times before React stops it. */
const MAX_RENDERS = 60;

/** What React says of a getSnapshot that returns a new object on every call. */
const LOOP = /getSnapshot should be cached|Maximum update depth/;

const [base, setupText] = process.argv.slice(2);
const setup = JSON.parse(setupText);
const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);

/**
 * React and react-dom/client as ES modules (development builds), in memory: file name → text,
 * `react.js`, `react-dom-client.js` and the chunk they share.
 */
async function buildReact() {
  // Every export of React by name: an ES module cannot re-export a CommonJS module's names
  // without knowing them.
  const names = Object.keys(require('react')).filter((name) => /^[A-Za-z_$][\w$]*$/.test(name));
  const entries = {
    react: `export { ${names.join(', ')} } from 'react';\nexport { default } from 'react';\n`,
    'react-dom-client': "export { createRoot, hydrateRoot } from 'react-dom/client';\n",
  };
  const built = await build({
    entryPoints: Object.fromEntries(Object.keys(entries).map((name) => [name, `entry:${name}`])),
    outdir: '/vendor',
    write: false,
    bundle: true,
    splitting: true,
    format: 'esm',
    define: { 'process.env.NODE_ENV': '"development"' },
    logLevel: 'warning',
    plugins: [{
      name: 'entries',
      setup(on) {
        on.onResolve({ filter: /^entry:/ }, (args) => ({ path: args.path.slice('entry:'.length), namespace: 'entry' }));
        on.onLoad({ filter: /.*/, namespace: 'entry' }, (args) => ({ contents: entries[args.path], resolveDir: here }));
      },
    }],
  });
  const files = new Map(built.outputFiles.map((file) => [basename(file.path), file.text]));
  console.log(`esbuild: React ${require('react/package.json').version} as ES modules: ${[...files.keys()].join(', ')}`);
  return files;
}

/** The application's page: the import map, a root and its script. */
function page() {
  const imports = { react: '/vendor/react.js', 'react-dom/client': '/vendor/react-dom-client.js' };
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>shop</title>
<script type="importmap">${JSON.stringify({ imports })}</script>
<script type="module" src="/app.js"></script>
</head>
<body><main id="root"></main></body>
</html>
`;
}

/**
 * The application's script: one claim, rendered by a component through the hook, mounted in
 * <StrictMode>. It records its renders, its effects' runs and the states it showed.
 */
function app() {
  return `
import { StrictMode, createElement as h, useEffect } from 'react';
import { createRoot } from 'react-dom/client';
import { createClient } from ${JSON.stringify(`${base}/sdk/v1/sluice.js`)};
import { useSluiceCommand } from ${JSON.stringify(`${base}/sdk/v1/react.js`)};

const setup = ${JSON.stringify({ token: setup.token, offer: setup.offer, key: setup.key })};
const client = createClient({ baseUrl: ${JSON.stringify(base)}, token: setup.token });
window.renders = 0;
window.mounts = 0;
window.states = [];

function Claim() {
  window.renders += 1;
  const claim = useSluiceCommand(client, 'claim', { key: setup.key, input: { offer: setup.offer }, autoStart: true });
  useEffect(() => { window.mounts += 1; }, []);
  if (window.states.at(-1) !== claim.state) window.states.push(claim.state);
  return h('section', null,
    h('p', { id: 'state' }, claim.state),
    h('p', { id: 'position' }, claim.position === null ? '' : String(claim.position)),
    h('p', { id: 'command' }, claim.commandId ?? ''),
    h('pre', { id: 'result' }, claim.result === null ? '' : JSON.stringify(claim.result)));
}

createRoot(document.getElementById('root')).render(h(StrictMode, null, h(Claim)));
`;
}

/** Serves the page, its script and React's modules on `app_origin`. */
function serveApp(vendor) {
  const { port, hostname } = new URL(setup.app_origin);
  const server = createServer((request, response) => {
    const path = new URL(request.url, setup.app_origin).pathname;
    const send = (status, type, body) => {
      response.writeHead(status, { 'content-type': `${type}; charset=utf-8`, 'cache-control': 'no-store' });
      response.end(body);
    };
    if (path === '/') return send(200, 'text/html', page());
    // The browser asks for it by itself; a 404 would be a console error.
    if (path === '/favicon.ico') return send(204, 'image/x-icon', '');
    if (path === '/app.js') return send(200, 'text/javascript', app());
    const module = vendor.get(/^\/vendor\/([\w.-]+\.js)$/.exec(path)?.[1]);
    if (module !== undefined) return send(200, 'text/javascript', module);
    return send(404, 'text/plain', 'no such page');
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(Number(port), hostname, () => resolve(server));
  });
}

/** Waits until `#id`'s text matches `pattern`; fails naming `what` and what the page shows. */
async function waitForText(page, id, pattern, what) {
  try {
    await page.waitForFunction(
      ({ id, source }) => new RegExp(source).test(document.getElementById(id)?.textContent ?? ''),
      { id, source: pattern.source }, { timeout: STEP_MS });
  } catch {
    const shown = await page.evaluate(() => ({
      state: document.getElementById('state')?.textContent, states: window.states, renders: window.renders,
    })).catch(() => null);
    fail(`${what}: the page shows ${JSON.stringify(shown)}`);
  }
}

const text = (page, id) => page.textContent(`#${id}`);

/** The page's console warnings and errors, its uncaught errors, and what it should not see. */
function watch(page) {
  const problems = [];
  const enqueues = [];
  page.on('console', (m) => {
    if (m.type() !== 'error' && m.type() !== 'warning') return;
    // A snapshot loop ends the run at once, naming React's own words.
    if (LOOP.test(m.text())) fail(`React saw a snapshot loop: console.${m.type()}: ${m.text()}`);
    problems.push(`console.${m.type()}: ${m.text()}`);
  });
  page.on('pageerror', (e) => problems.push(`uncaught: ${e}`));
  page.on('request', (r) => { if (r.url().endsWith(':enqueue')) enqueues.push(r.url()); });
  page.on('response', (r) => {
    if (r.status() >= 400 && !r.url().endsWith('/favicon.ico')) problems.push(`${r.status()} ${r.url()}`);
  });
  return { problems, enqueues };
}

/** Fails on any problem the page logged, and on a render count past MAX_RENDERS. */
async function checkQuiet(page, seen, when) {
  if (seen.problems.length) fail(`${when}: the console says: ${seen.problems.join(' | ')}`);
  const renders = await page.evaluate(() => window.renders);
  if (!(renders <= MAX_RENDERS)) fail(`${when}: ${renders} renders (at most ${MAX_RENDERS})`);
  return renders;
}

const vendor = await buildReact();
const server = await serveApp(vendor);
const browser = await launch();
try {
  const context = await browser.newContext();
  const page = await context.newPage();
  const seen = watch(page);
  await page.goto(`${setup.app_origin}/`);

  await waitForText(page, 'state', /^accepted$/, 'accepted');
  await waitForText(page, 'position', /^\d+$/, 'a position while waiting');
  const mounts = await page.evaluate(() => window.mounts);
  // Development StrictMode mounts, unmounts and mounts again: the check below means something.
  if (mounts !== 2) fail(`StrictMode ran the component's effect ${mounts} times, not twice`);
  if (seen.enqueues.length !== 1) fail(`${seen.enqueues.length} enqueues under StrictMode, not one`);
  const commandId = await text(page, 'command');
  await step('waiting', JSON.stringify({ command_id: commandId, position: Number(await text(page, 'position')) }));

  await waitForText(page, 'state', /^succeeded$/, 'succeeded');
  await waitForText(page, 'result', /\S/, 'the result shown');
  const result = JSON.parse(await text(page, 'result'));
  const states = await page.evaluate(() => window.states);
  const renders = await checkQuiet(page, seen, 'the claim');
  console.log(`states ${JSON.stringify(states)} in ${renders} renders; result ${JSON.stringify(result)}`);
  if (states[0] !== 'idle' || !states.includes('accepted')) fail(`the states shown: ${states}`);
  if (await text(page, 'command') !== commandId) fail('another command id at the end');
  await step('succeeded', JSON.stringify({ command_id: commandId, result }));

  await page.reload();
  await waitForText(page, 'state', /^succeeded$/, 'succeeded after the reload');
  if (await text(page, 'command') !== commandId) fail(`the reload shows command ${await text(page, 'command')}`);
  if (seen.enqueues.length !== 1) fail(`the reload enqueued again: ${seen.enqueues.length} enqueues`);
  await checkQuiet(page, seen, 'after the reload');
  await step('reloaded', JSON.stringify({ command_id: commandId }));
  await context.close();
} catch (error) {
  fail(error?.stack ?? String(error));
} finally {
  await browser.close();
  server.close();
}
process.exit(0);
