// The proof-of-work solver: its SHA-256 against node's, with and without a midstate, on the
// lengths where SHA-256's padding changes shape; and its nonces checked by node's SHA-256.

import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";

import {
  createWorkSolver, sha256, sha256Finish, sha256Midstate, solveWork, workSolves, workerSource,
} from "../work.js";

const hex = (bytes) => Buffer.from(bytes).toString("hex");
const nodeSha = (bytes) => createHash("sha256").update(bytes).digest("hex");

/** Lengths around every place the padding changes: 55/56 (one block or two), 64, 119/120, 128. */
const LENGTHS = [
  0, 1, 3, 31, 32, 54, 55, 56, 57, 63, 64, 65, 100, 118, 119, 120, 121, 127, 128, 129,
  183, 184, 191, 192, 200, 255, 256, 1000,
];

test("sha256 equals node's on lengths around the padding boundaries", () => {
  for (const length of LENGTHS) {
    for (let round = 0; round < 4; round += 1) {
      const bytes = new Uint8Array(randomBytes(length));
      assert.equal(hex(sha256(bytes)), nodeSha(bytes), `length ${length}`);
    }
  }
  assert.equal(hex(sha256(new TextEncoder().encode("abc"))),
    "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", "FIPS 180-2 example");
});

test("a midstate then a tail equals node's hash of the whole, for every split", () => {
  for (const prefixLength of [0, 1, 55, 56, 63, 64, 65, 119, 120, 123, 128, 130]) {
    for (const tailLength of [0, 1, 8, 9, 20, 55, 56, 64, 70, 120]) {
      const prefix = new Uint8Array(randomBytes(prefixLength));
      const tail = new Uint8Array(randomBytes(tailLength));
      const mid = sha256Midstate(prefix);
      assert.equal(mid.length % 64, 0);
      assert.equal(mid.length + mid.rest.length, prefixLength);
      const whole = Buffer.concat([prefix, tail]);
      assert.equal(hex(sha256Finish(mid, tail)), nodeSha(whole), `prefix ${prefixLength}, tail ${tailLength}`);
    }
  }
});

/** Leading zero bits of a digest, counted the plain way. */
function zeroBits(digest) {
  let bits = 0;
  for (const byte of digest) {
    if (byte === 0) { bits += 8; continue; }
    return bits + Math.clz32(byte) - 24;
  }
  return bits;
}

test("the solver's nonces satisfy the check for several bit counts and challenge lengths", () => {
  for (const length of [1, 40, 55, 56, 62, 63, 64, 122, 128]) {
    const challenge = randomBytes(length).toString("base64url").slice(0, length);
    for (const bits of [0, 1, 4, 8, 12, 16]) {
      const { nonce, hashes } = solveWork(challenge, bits);
      assert.match(nonce, /^[0-9]{1,20}$/);
      assert.ok(hashes >= 1);
      const digest = createHash("sha256").update(`${challenge}:${nonce}`, "ascii").digest();
      assert.ok(zeroBits(digest) >= bits, `${challenge} at ${bits}: ${nonce} gives ${digest.toString("hex")}`);
      assert.ok(workSolves(challenge, nonce, bits));
    }
  }
});

test("the solver tries every nonce it counts: the first solution is never skipped", () => {
  // A plain search over the same nonces, hashed by node, finds the same first solution.
  const challenge = "c".repeat(122);
  const solver = createWorkSolver(challenge, 10);
  let nonce = null;
  while (nonce === null) nonce = solver.step(100);
  const lead = nonce.slice(0, nonce.length - String(solver.hashes - 1).length);
  for (let n = 0; n < solver.hashes - 1; n += 1) {
    const digest = createHash("sha256").update(`${challenge}:${lead}${n}`, "ascii").digest();
    assert.ok(zeroBits(digest) < 10, `${lead}${n} solved it before ${nonce}`);
  }
  assert.equal(nonce, `${lead}${solver.hashes - 1}`);
});

test("a wrong nonce is refused by the check", () => {
  const challenge = "refused-challenge";
  const { nonce } = solveWork(challenge, 12);
  assert.ok(workSolves(challenge, nonce, 12));
  assert.equal(workSolves(challenge, "abc", 0), false, "not decimal");
  assert.equal(workSolves(challenge, "1".repeat(21), 0), false, "too long");
  let unsolved = 0;
  for (let n = 0; n < 64; n += 1) if (!workSolves(challenge, String(n), 12)) unsolved += 1;
  assert.ok(unsolved > 50, "most nonces do not solve 12 bits");
});

test("the Blob worker's source is self-contained and solves through its message protocol", async () => {
  const messages = [];
  const scope = { postMessage: (m) => messages.push(m), onmessage: null };
  // Evaluated with nothing from this module in scope: what a Blob-URL worker runs.
  new Function("self", workerSource())(scope);
  assert.deepEqual(messages.shift(), { ready: true });
  scope.onmessage({ data: { challenge: "w".repeat(122), bits: 12 } });
  const last = messages.at(-1);
  assert.equal(typeof last.nonce, "string");
  assert.ok(workSolves("w".repeat(122), last.nonce, 12));
});
