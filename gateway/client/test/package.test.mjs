// The package: its entries and its metadata.
// - A page that only claims (sluice.js) loads neither the rooms' code nor the proof-of-work
//   solver, shown two ways: the static module graph of each entry (its import and export-from
//   statements, and any dynamic import), and the files node actually loads when it imports
//   the entry, recorded by a module-loading hook in a child process.
// - The metadata says what it is: the version of the Rust crates it ships with, the entries an
//   application imports (`exports`, resolved here by the package's own name), every file those
//   entries load in `files`, React an optional peer, no side effect and no dependency.

import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const CLIENT = join(dirname(fileURLToPath(import.meta.url)), "..");
const ROOT = join(CLIENT, "..", "..");
const pkg = JSON.parse(readFileSync(join(CLIENT, "package.json"), "utf8"));

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
  assert.deepEqual(graph("react.js"), ["react.js"], "the hook imports only react, a bare name");
});

test("importing sluice.js loads sluice.js alone; importing rooms.js loads the rooms and the solver", () => {
  assert.deepEqual(loaded("sluice.js"), ["sluice.js"]);
  assert.deepEqual(loaded("rooms.js"), ["rooms.js", "sluice.js", "work.js"],
    "the recorder sees what an entry loads (or the check above would prove nothing)");
  const size = (files) => files.reduce((sum, file) => sum + readFileSync(join(CLIENT, file)).length, 0);
  console.log(`a page that claims loads ${size(loaded("sluice.js"))} bytes; one that joins rooms ${size(loaded("rooms.js"))}`);
});

/** The `version` of a Cargo manifest's `[section]` (a flat TOML reading: enough for these). */
function tomlVersion(path, section) {
  const text = readFileSync(path, "utf8");
  const start = `\n${text}`.indexOf(`\n[${section}]\n`);
  assert.ok(start >= 0, `${path} has [${section}]`);
  const body = text.slice(start + section.length + 3).split(/\n\[/)[0];
  if (/^version\.workspace\s*=\s*true/m.test(body)) return tomlVersion(join(ROOT, "Cargo.toml"), "workspace.package");
  const found = /^version\s*=\s*"([^"]+)"/m.exec(body);
  assert.ok(found, `${path} [${section}] has a version`);
  return found[1];
}

test("the package's version is the gateway crate's", () => {
  const crate = tomlVersion(join(ROOT, "gateway", "Cargo.toml"), "package");
  assert.match(crate, /^\d+\.\d+\.\d+/);
  assert.equal(pkg.version, crate, "gateway/client/package.json and gateway/Cargo.toml ship together");
});

test("exports names the claim, rooms and React entries, each with its types, and main agrees", () => {
  assert.deepEqual(Object.keys(pkg.exports).sort(), [".", "./package.json", "./react", "./rooms"]);
  for (const [name, target] of Object.entries(pkg.exports)) {
    if (name === "./package.json") continue;
    assert.deepEqual(Object.keys(target), ["types", "default"], `${name}: types first, as TypeScript reads them`);
    for (const file of Object.values(target)) assert.ok(existsSync(join(CLIENT, file)), `${name}: ${file}`);
    assert.equal(target.types, target.default.replace(/\.js$/, ".d.ts"), name);
  }
  assert.equal(pkg.main, pkg.exports["."].default);
  assert.equal(pkg.module, pkg.exports["."].default);
  assert.equal(pkg.types, pkg.exports["."].types);
});

test("the package's own name resolves each entry to its file", () => {
  for (const [name, target] of Object.entries(pkg.exports)) {
    if (name === "./package.json") continue;
    const resolved = fileURLToPath(import.meta.resolve(`${pkg.name}${name.slice(1)}`));
    assert.equal(relative(CLIENT, resolved), target.default.slice(2), name);
  }
});

test("files lists every file the entries and their types load, and nothing that is not there", () => {
  const files = new Set(pkg.files);
  for (const file of files) assert.ok(existsSync(join(CLIENT, file)), `files names ${file}, which is not there`);
  for (const target of Object.values(pkg.exports)) {
    if (typeof target === "string") continue;
    for (const entry of Object.values(target)) {
      for (const file of graph(entry)) assert.ok(files.has(file), `${entry} loads ${file}, not in files`);
    }
  }
  assert.ok(files.has("README.md"));
});

test("React is an optional peer, the package has no dependency and no side effect", () => {
  assert.equal(pkg.dependencies, undefined, "no dependency");
  assert.match(pkg.peerDependencies?.react ?? "", /\d/, "react is a peer dependency");
  assert.equal(pkg.peerDependenciesMeta?.react?.optional, true, "and an optional one: sluice.js needs no React");
  assert.equal(pkg.sideEffects, false);
  const hook = readFileSync(join(CLIENT, "react.js"), "utf8");
  assert.deepEqual(specifiers(hook), ["react"], "the hook imports React, never bundles it");
});
