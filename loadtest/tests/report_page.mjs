// Opens the load report page (written by report_page.rs) in Debian's headless Chromium through
// playwright-core, at a desktop and a phone size and in both colour schemes:
//
//   node report_page.mjs <report.html> <output-dir>
//
// Checks that the page fetches nothing, never scrolls sideways, draws every chart with a size,
// keeps chart labels apart and readable, and that dark mode is dark. Screenshots go to
// <output-dir>/loadtest-report.png, -phone.png and -dark.png.
//
// playwright-core comes from gateway/tests/ui/node_modules (`npm ci` there; deploy/test.sh does
// it), so this file needs no package of its own.
//
// Exits 0 when every check passed, 1 with a message naming the failed check otherwise.

import { createRequire } from 'node:module';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const require = createRequire(new URL('../../gateway/tests/ui/package.json', import.meta.url));
const { chromium } = require('playwright-core');

const CHROMIUM = process.env.SLUICE_CHROMIUM || '/usr/bin/chromium';
const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];
// Chart text rendered smaller than this (in CSS px) is too small to read.
const MIN_TEXT_PX = 9;

class CheckFailed extends Error {}
function check(condition, message) {
  if (!condition) throw new CheckFailed(message);
}

const VIEWS = [
  { name: 'desktop', width: 1440, height: 900, scheme: 'light', shot: 'loadtest-report.png' },
  { name: 'phone', width: 390, height: 844, scheme: 'light', shot: 'loadtest-report-phone.png' },
  { name: 'desktop dark', width: 1440, height: 900, scheme: 'dark', shot: 'loadtest-report-dark.png' },
];

// Runs in the page: what the checks need, measured by the browser's layout.
function measure() {
  const boxes = (el) => el.getBoundingClientRect();
  const overlaps = (a, b) => a.left < b.right - 1 && b.left < a.right - 1
    && a.top < b.bottom - 1 && b.top < a.bottom - 1;
  const charts = [...document.querySelectorAll('svg')].map((svg) => {
    const box = boxes(svg);
    const texts = [...svg.querySelectorAll('text')]
      .filter((t) => t.textContent.trim() !== '')
      .map((t) => ({ text: t.textContent, box: boxes(t), size: parseFloat(getComputedStyle(t).fontSize) }));
    const clashes = [];
    for (let i = 0; i < texts.length; i++) {
      for (let j = i + 1; j < texts.length; j++) {
        if (overlaps(texts[i].box, texts[j].box)) clashes.push(`"${texts[i].text}" / "${texts[j].text}"`);
      }
    }
    // Text outside the SVG's own box is clipped.
    const clipped = texts
      .filter((t) => t.box.left < box.left - 1 || t.box.right > box.right + 1
        || t.box.top < box.top - 1 || t.box.bottom > box.bottom + 1)
      .map((t) => t.text);
    const scale = box.width / svg.viewBox.baseVal.width;
    const smallest = Math.min(...texts.map((t) => t.size * scale));
    return {
      label: svg.getAttribute('aria-labelledby'),
      width: box.width,
      height: box.height,
      clashes,
      clipped,
      smallest,
    };
  });
  return {
    scrollWidth: document.documentElement.scrollWidth,
    innerWidth: window.innerWidth,
    background: getComputedStyle(document.body).backgroundColor,
    charts,
  };
}

// Relative luminance of an `rgb(r, g, b)` colour, 0 (black) to 1 (white).
function luminance(rgb) {
  const [r, g, b] = (rgb.match(/\d+(\.\d+)?/g) || ['0', '0', '0']).slice(0, 3).map((c) => {
    const v = Number(c) / 255;
    return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4;
  });
  return 0.2126 * r + 0.7152 * g + 0.0722 * b;
}

async function view(browser, url, outDir, v) {
  const context = await browser.newContext({
    viewport: { width: v.width, height: v.height },
    colorScheme: v.scheme,
    deviceScaleFactor: 1,
  });
  try {
    const page = await context.newPage();
    const problems = [];
    page.on('request', (request) => {
      if (request.url() !== url) problems.push(`fetched ${request.url()}`);
    });
    page.on('pageerror', (error) => problems.push(`error in the page: ${error.message}`));
    page.on('console', (message) => problems.push(`console ${message.type()}: ${message.text()}`));
    await page.goto(url, { waitUntil: 'load' });
    const m = await page.evaluate(measure);
    const where = `${v.name} (${v.width}×${v.height})`;
    check(problems.length === 0, `${where}: ${problems.join('; ')}`);
    check(m.scrollWidth <= m.innerWidth + 1,
      `${where}: the page is ${m.scrollWidth} px wide in a ${m.innerWidth} px viewport`);
    check(m.charts.length > 0, `${where}: no chart on the page`);
    for (const c of m.charts) {
      check(c.width > 0 && c.height > 0, `${where}: chart ${c.label} is ${c.width}×${c.height}`);
      check(c.clashes.length === 0, `${where}: chart ${c.label} has overlapping labels: ${c.clashes.join(', ')}`);
      check(c.clipped.length === 0, `${where}: chart ${c.label} clips ${c.clipped.join(', ')}`);
      check(c.smallest >= MIN_TEXT_PX,
        `${where}: chart ${c.label} has text ${c.smallest.toFixed(1)} px high (below ${MIN_TEXT_PX})`);
    }
    const dark = luminance(m.background) < 0.1;
    check(dark === (v.scheme === 'dark'), `${where}: background ${m.background} in the ${v.scheme} scheme`);
    const shot = join(outDir, v.shot);
    await page.screenshot({ path: shot, fullPage: true });
    console.log(`report_page: ${where}: ${m.charts.length} charts, ${m.scrollWidth} px wide, screenshot ${shot}`);
  } finally {
    await context.close().catch(() => {});
  }
}

async function main() {
  const [file, out] = process.argv.slice(2);
  if (!file || !out) {
    console.error('usage: node report_page.mjs <report.html> <output-dir>');
    process.exit(2);
  }
  const url = pathToFileURL(resolve(file)).href;
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: CHROMIUM_ARGS,
    timeout: 60_000,
  });
  try {
    for (const v of VIEWS) await view(browser, url, resolve(out), v);
    console.log('report_page: PASS');
  } finally {
    await browser.close().catch(() => {});
  }
}

main().then(
  () => process.exit(0),
  (error) => {
    const what = error instanceof CheckFailed ? error.message : (error && error.stack) || String(error);
    console.error(`report_page: FAIL: ${what}`);
    process.exit(1);
  },
);
