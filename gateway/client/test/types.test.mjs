// The hand-written types say what the module does: each shipped file's `.d.ts` declares every
// value the file exports and nothing it does not, and the options interfaces name every option
// the code destructures (createClient's, command()'s, the hook's). tsc checks that the types
// hold together and that an application's code type-checks (types-check/, deploy/test.sh).

import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const CLIENT = join(dirname(fileURLToPath(import.meta.url)), "..");
const read = (file) => readFileSync(join(CLIENT, file), "utf8");
const pkg = JSON.parse(read("package.json"));

/** The values a `.d.ts` declares for export, its `export * from` followed. */
function declaredValues(file) {
  const text = read(file);
  const names = new Set();
  for (const [, name] of text.matchAll(/^export declare (?:function|const|let|var|class)\s+([A-Za-z_$][\w$]*)/gm)) {
    names.add(name);
  }
  for (const [, from] of text.matchAll(/^export \* from "\.\/([\w-]+)\.js";/gm)) {
    for (const name of declaredValues(`${from}.d.ts`)) names.add(name);
  }
  return names;
}

/** The values a module exports, read from its source (for react.js, whose "react" node lacks). */
function exportedInSource(file) {
  return new Set([...read(file).matchAll(/^export (?:async )?(?:function|const|let|class)\s+([A-Za-z_$][\w$]*)/gm)]
    .map(([, name]) => name));
}

/** The member names of `interface name { … }` in a `.d.ts` (its own, not nested ones' members). */
function members(file, name) {
  const text = read(file).replace(/\/\*[\s\S]*?\*\//g, "").replace(/\/\/.*$/gm, "");
  const start = text.indexOf(`export interface ${name} `);
  assert.ok(start >= 0, `${file} declares ${name}`);
  const names = [];
  let depth = 0;
  for (const line of text.slice(text.indexOf("{", start) + 1).split("\n")) {
    if (depth === 0) {
      const member = /^\s*(?:readonly\s+)?([A-Za-z_$][\w$]*)\??[:(]/.exec(line);
      if (member) names.push(member[1]);
    }
    depth += (line.match(/[{(]/g) ?? []).length - (line.match(/[})]/g) ?? []).length;
    if (depth < 0) break;
  }
  return names.sort();
}

/** The names destructured in `file`'s code right after `marker`: `{ a, b = 1, c: d } =`. */
function destructured(file, marker) {
  const text = read(file).replace(/\/\*[\s\S]*?\*\//g, "").replace(/^\s*\/\/.*$/gm, "");
  const at = text.indexOf(marker);
  assert.ok(at >= 0, `${file} has ${marker}`);
  const open = text.indexOf("{", at + marker.length - 1);
  let depth = 0;
  let end = open;
  for (; end < text.length; end += 1) {
    if ("{[(".includes(text[end])) depth += 1;
    if ("}])".includes(text[end])) depth -= 1;
    if (depth === 0) break;
  }
  const body = text.slice(open + 1, end);
  const names = [];
  let level = 0;
  let part = "";
  for (const c of `${body},`) {
    if ("{[(".includes(c)) level += 1;
    if ("}])".includes(c)) level -= 1;
    if (c === "," && level === 0) {
      const name = /^\s*([A-Za-z_$][\w$]*)/.exec(part)?.[1];
      if (name) names.push(name);
      part = "";
    } else {
      part += c;
    }
  }
  return names.sort();
}

const shipped = pkg.files.filter((file) => file.endsWith(".js"));

test("every shipped module has its types beside it", () => {
  for (const file of shipped) {
    const types = file.replace(/\.js$/, ".d.ts");
    assert.ok(existsSync(join(CLIENT, types)), `${file} has no ${types}`);
    assert.ok(pkg.files.includes(types), `${types} is not in files`);
  }
});

test("each .d.ts declares exactly the values its module exports", async () => {
  for (const file of shipped) {
    const types = file.replace(/\.js$/, ".d.ts");
    const exported = file === "react.js"
      ? exportedInSource(file)
      : new Set(Object.keys(await import(pathToFileURL(join(CLIENT, file)).href)));
    const declared = declaredValues(types);
    const undeclared = [...exported].filter((name) => !declared.has(name)).sort();
    const absent = [...declared].filter((name) => !exported.has(name)).sort();
    assert.deepEqual(undeclared, [], `${file} exports what ${types} does not declare`);
    assert.deepEqual(absent, [], `${types} declares what ${file} does not export`);
  }
});

test("the options interfaces name every option the code destructures", () => {
  assert.deepEqual(members("sluice.d.ts", "ClientOptions"),
    destructured("sluice.js", "export function createClient(options) {\n  const {"));
  assert.deepEqual(members("sluice.d.ts", "CommandOptions"), destructured("sluice.js", "command(code, {"));
  assert.deepEqual(members("react.d.ts", "UseSluiceCommandOptions"),
    destructured("react.js", "export function useSluiceCommand(client, code, {"));
});

test("the readers above read what they are meant to", () => {
  assert.ok(members("sluice.d.ts", "ClientOptions").includes("fetch"));
  assert.ok(destructured("sluice.js", "export function createClient(options) {\n  const {").includes("clock"));
  assert.deepEqual(destructured("react.js", "export function useSluiceCommand(client, code, {"), ["autoStart", "input", "key"]);
});
