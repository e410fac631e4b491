// The package's entries: a page that only claims (sluice.js) loads neither the rooms' code nor
// the proof-of-work solver, shown two ways: the static module graph of each entry (its import
// and export-from statements, and any dynamic import), and the files node actually loads when
// it imports the entry, recorded by a module-loading hook in a child process.

import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const CLIENT = join(dirname(fileURLToPath(import.meta.url)), "..");

/** The specifiers a module's source loads: static imports, export-froms and dynamic imports. */
function specifiers(source) {
  const code = source.replace(/\/\*[\s\S]*?\*\//g, "").replace(/^\s*\/\/.*$/gm, "");
  const found = [];
  for (const pattern of [
    /^\s*(?:import|export)\s[^;]*?\bfrom\s*["']([^"']+)["']/gm,
    /^\s*import\s*["']([^"']+)["']/gm,
    /\bimport\s*\(\s*["']([^"']+)["']\s*\)/g,
  ]) {
    for (const match of code.matchAll(pattern)) found.push(match[1]);
  }
  return found;
}

/**
 * Every file of this package `entry` reaches through relative specifiers, itself included; in a
 * type file, `./x.js` names `./x.d.ts`.
 */
function graph(entry) {
  const seen = new Set();
  const visit = (file) => {
    if (seen.has(file)) return;
    seen.add(file);
    for (const spec of specifiers(readFileSync(file, "utf8"))) {
      if (!spec.startsWith(".")) continue;
      visit(join(dirname(file), file.endsWith(".d.ts") ? spec.replace(/\.js$/, ".d.ts") : spec));
    }
  };
  visit(join(CLIENT, entry));
  return [...seen].map((file) => relative(CLIENT, file)).sort();
}

/** The files of this package that node loads when it imports `entry`. */
function loaded(entry) {
  const dir = mkdtempSync(join(tmpdir(), "sluice-entries-"));
  try {
    const log = join(dir, "loaded.txt");
    const hooks = join(dir, "hooks.mjs");
    writeFileSync(hooks, `import { appendFileSync } from "node:fs";
export async function load(url, context, next) {
  appendFileSync(${JSON.stringify(log)}, url + "\\n");
  return next(url, context);
}
`);
    writeFileSync(log, "");
    const register = `import { register } from "node:module"; register(${JSON.stringify(pathToFileURL(hooks).href)});`;
    execFileSync(process.execPath, [
      "--import", `data:text/javascript,${encodeURIComponent(register)}`,
      "--input-type=module", "-e", `await import(${JSON.stringify(pathToFileURL(join(CLIENT, entry)).href)});`,
    ], { stdio: ["ignore", "ignore", "inherit"] });
    return readFileSync(log, "utf8").split("\n")
      .filter((url) => url.startsWith("file:"))
      .map((url) => relative(CLIENT, fileURLToPath(url)))
      .filter((file) => !file.startsWith(".."))
      .sort();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test("the specifiers are read from import, export-from and dynamic import, not from comments", () => {
  assert.deepEqual(specifiers([
    'import { a } from "./a.js";',
    "export * from './b.js';",
    "import {\n  c,\n  d,\n} from \"./c.js\";",
    'import "./side.js";',
    'const lazy = () => import("./lazy.js");',
    '// import { no } from "./comment.js";',
    '/* export * from "./block.js"; */',
  ].join("\n")).sort(), ["./a.js", "./b.js", "./c.js", "./lazy.js", "./side.js"]);
});

test("sluice.js imports nothing: the rooms and the solver are not in its module graph", () => {
  assert.deepEqual(graph("sluice.js"), ["sluice.js"]);
  const source = readFileSync(join(CLIENT, "sluice.js"), "utf8");
  for (const name of ["RoomHandle", "workSolverKit", "solveOffMainThread", "PLACE_STATUSES"]) {
    assert.ok(!source.includes(name), `sluice.js holds ${name}`);
  }
  assert.deepEqual(graph("rooms.js"), ["rooms.js", "sluice.js", "work.js"]);
});

test("importing sluice.js loads sluice.js alone; importing rooms.js loads the rooms and the solver", () => {
  assert.deepEqual(loaded("sluice.js"), ["sluice.js"]);
  assert.deepEqual(loaded("rooms.js"), ["rooms.js", "sluice.js", "work.js"],
    "the recorder sees what an entry loads (or the check above would prove nothing)");
  const size = (files) => files.reduce((sum, file) => sum + readFileSync(join(CLIENT, file)).length, 0);
  console.log(`a page that claims loads ${size(loaded("sluice.js"))} bytes; one that joins rooms ${size(loaded("rooms.js"))}`);
});
