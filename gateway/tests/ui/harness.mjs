// What the browser scripts share: Debian's headless Chromium, the conversation with the Rust
// test that runs them (`@@event detail` lines, each answered `continue` on stdin), a failure
// that names its check, and the accessibility check of a hosted page.

import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { createInterface } from 'node:readline';
import { chromium } from 'playwright-core';

const require = createRequire(import.meta.url);
const CHROMIUM = process.env.SLUICE_CHROMIUM || '/usr/bin/chromium';
const CHROMIUM_ARGS = [
  '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync',
];

/** Debian's Chromium, headless, with nothing of its own talking to the network. */
export function launch() {
  return chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
}

const stdin = createInterface({ input: process.stdin });
const answers = [];
const waiters = [];
stdin.on('line', (line) => {
  if (waiters.length) waiters.shift()(line); else answers.push(line);
});

/** Tells the caller about a step and waits until it says `continue`. */
export async function step(event, detail = '') {
  console.log(`@@${event} ${detail}`);
  const line = answers.length ? answers.shift() : await new Promise((r) => waiters.push(r));
  if (line.trim() !== 'continue') throw new Error(`the caller answered ${line}`);
}

/** Ends the script with the failed check's message (the Rust side prints its `FAILED:` line). */
export function fail(message) {
  console.error(`FAILED: ${message}`);
  process.exit(1);
}

/** axe-core on the page as it is: fails on any serious or critical violation. */
export async function checkAccessible(page, what) {
  const axe = await readFile(require.resolve('axe-core/axe.min.js'), 'utf8');
  await page.evaluate(axe);
  const results = await page.evaluate(() => globalThis.axe.run(document, {
    runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'best-practice'] },
  }));
  const grave = results.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
  console.log(`axe (${what}): ${results.passes.length} rules passed, ${results.violations.length} violations (${grave.length} serious or critical)`);
  if (grave.length) fail(`axe (${what}): ${grave.map((v) => `${v.id} (${v.impact})`).join(', ')}`);
}

/** What a hosted page says in its status line (`#state`). */
export async function stateOf(page) {
  return (await page.textContent('#state'))?.trim();
}

/** Waits until the status line matches `pattern`; fails naming `what` and what it says. */
export async function waitForState(page, pattern, what, timeout = 60_000) {
  try {
    await page.waitForFunction(
      (source) => new RegExp(source).test(document.getElementById('state').textContent),
      pattern.source, { timeout });
  } catch {
    fail(`${what}: the page says "${await stateOf(page)}"`);
  }
}
