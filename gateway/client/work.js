// Sluice browser client, proof of work: the solver of a waiting room's door (rooms.js asks it).
// No import: a page that only claims (sluice.js) never loads it, and the gateway's worker file
// (`/sdk/v1/sluice-work.js`) runs `serveWork` from here.
//
// Proof of work: a room's door may ask for the solution of a challenge (a nonce such that
// SHA-256 of `challenge + ":" + nonce` begins with `bits` zero bits). WebCrypto's digest is
// asynchronous, one promise per hash, far too slow for 2^bits of them: this is a small
// synchronous SHA-256 specialised for the puzzle. The prefix `challenge + ":"` never changes, so
// its complete 64-byte blocks are compressed once (the midstate) and each nonce costs only the
// compression of the tail's blocks.

/**
 * The solver, self-contained: no reference to anything outside this function, so that its
 * source text (`Function.prototype.toString`) is what a Blob-URL worker runs.
 */
export function workSolverKit() {
  const K = new Int32Array([
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
  ]);
  const INITIAL = new Int32Array([
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
  ]);
  const W = new Int32Array(64);

  /** Compresses the block of 16 big-endian words at `words[offset…]` into `state`, in place. */
  function compress(state, words, offset) {
    for (let i = 0; i < 16; i += 1) W[i] = words[offset + i];
    for (let i = 16; i < 64; i += 1) {
      const a = W[i - 15];
      const b = W[i - 2];
      const s0 = ((a >>> 7) | (a << 25)) ^ ((a >>> 18) | (a << 14)) ^ (a >>> 3);
      const s1 = ((b >>> 17) | (b << 15)) ^ ((b >>> 19) | (b << 13)) ^ (b >>> 10);
      W[i] = (W[i - 16] + s0 + W[i - 7] + s1) | 0;
    }
    let a = state[0]; let b = state[1]; let c = state[2]; let d = state[3];
    let e = state[4]; let f = state[5]; let g = state[6]; let h = state[7];
    for (let i = 0; i < 64; i += 1) {
      const s1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7));
      const t1 = (h + s1 + ((e & f) ^ (~e & g)) + K[i] + W[i]) | 0;
      const s0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10));
      const t2 = (s0 + ((a & b) ^ (a & c) ^ (b & c))) | 0;
      h = g; g = f; f = e; e = (d + t1) | 0; d = c; c = b; b = a; a = (t1 + t2) | 0;
    }
    state[0] = (state[0] + a) | 0; state[1] = (state[1] + b) | 0;
    state[2] = (state[2] + c) | 0; state[3] = (state[3] + d) | 0;
    state[4] = (state[4] + e) | 0; state[5] = (state[5] + f) | 0;
    state[6] = (state[6] + g) | 0; state[7] = (state[7] + h) | 0;
  }

  /** Big-endian words `from…to` (exclusive) of `bytes` into `words`. */
  function toWords(bytes, words, from, to) {
    for (let i = from; i < to; i += 1) {
      const j = i * 4;
      words[i] = (bytes[j] << 24) | (bytes[j + 1] << 16) | (bytes[j + 2] << 8) | bytes[j + 3];
    }
  }

  /**
   * The state after every complete 64-byte block of `prefix`: `{state, rest, length}`, where
   * `rest` is what is left of the prefix (under 64 bytes) and `length` the bytes compressed.
   */
  function midstate(prefix) {
    const state = Int32Array.from(INITIAL);
    const complete = prefix.length - (prefix.length % 64);
    const words = new Int32Array(16);
    for (let at = 0; at < complete; at += 64) {
      toWords(prefix.subarray(at, at + 64), words, 0, 16);
      compress(state, words, 0);
    }
    return { state, rest: prefix.slice(complete), length: complete };
  }

  /** The blocks of the message's end (`rest` then `tail`) with SHA-256's padding, as bytes. */
  function paddedTail(mid, tailLength) {
    const total = mid.rest.length + tailLength;
    const blocks = Math.floor((total + 8) / 64) + 1;
    const bytes = new Uint8Array(blocks * 64);
    bytes.set(mid.rest);
    bytes[total] = 0x80;
    const bits = (mid.length + total) * 8;
    const end = blocks * 64;
    const high = Math.floor(bits / 0x100000000);
    const low = bits >>> 0;
    bytes[end - 8] = high >>> 24; bytes[end - 7] = high >>> 16; bytes[end - 6] = high >>> 8; bytes[end - 5] = high;
    bytes[end - 4] = low >>> 24; bytes[end - 3] = low >>> 16; bytes[end - 2] = low >>> 8; bytes[end - 1] = low;
    return bytes;
  }

  /** SHA-256 of the midstate's message followed by `tail`: the 32-byte digest. */
  function finish(mid, tail) {
    const bytes = paddedTail(mid, tail.length);
    bytes.set(tail, mid.rest.length);
    const words = new Int32Array(bytes.length / 4);
    toWords(bytes, words, 0, words.length);
    const state = Int32Array.from(mid.state);
    for (let offset = 0; offset < words.length; offset += 16) compress(state, words, offset);
    const digest = new Uint8Array(32);
    for (let i = 0; i < 8; i += 1) {
      digest[i * 4] = state[i] >>> 24; digest[i * 4 + 1] = state[i] >>> 16;
      digest[i * 4 + 2] = state[i] >>> 8; digest[i * 4 + 3] = state[i];
    }
    return digest;
  }

  /** SHA-256 of `bytes`. */
  function sha256(bytes) {
    return finish(midstate(bytes), new Uint8Array(0));
  }

  /** Whether the state (as a digest, big-endian) begins with `bits` zero bits. */
  function leadingZeros(state, bits) {
    let i = 0;
    let left = bits;
    for (; left >= 32; left -= 32, i += 1) if (state[i] !== 0) return false;
    return left === 0 || (state[i] >>> (32 - left)) === 0;
  }

  /** The ASCII bytes of a text (a challenge is base64url, so ASCII). */
  function ascii(text) {
    const bytes = new Uint8Array(text.length);
    for (let i = 0; i < text.length; i += 1) bytes[i] = text.charCodeAt(i) & 0xff;
    return bytes;
  }

  /**
   * A search for the nonce of `challenge` at `bits`: `step(n)` tries at most `n` more nonces
   * and answers the solution (decimal text) or null; `hashes` counts the nonces tried.
   *
   * Nonces begin with a few fixed digits (`lead`, e.g. "10000") that complete the prefix's last
   * 64-byte block, when 1 to 8 digits do: the midstate then covers them too, the counted digits
   * start a fresh block and each nonce costs one compression instead of two (a challenge of
   * 122 characters leaves 59 bytes in its last block). The counted digits go up in place from
   * `first`, and only the words they touch are converted again per nonce.
   */
  function createSolver(challenge, bits, first = 0) {
    const open = (64 - ((challenge.length + 1) % 64)) % 64;
    const lead = open >= 1 && open <= 8 ? "1".padEnd(open, "0") : "";
    const mid = midstate(ascii(`${challenge}:${lead}`));
    const digits = Array.from(String(Math.floor(first)), (c) => c.charCodeAt(0));
    const state = new Int32Array(8);
    let bytes; let words; let fromWord; let toWord;
    function layout() {
      bytes = paddedTail(mid, digits.length);
      words = new Int32Array(bytes.length / 4);
      toWords(bytes, words, 0, words.length);
      fromWord = mid.rest.length >> 2;
      toWord = ((mid.rest.length + digits.length - 1) >> 2) + 1;
    }
    layout();
    const solver = {
      hashes: 0,
      step(limit) {
        const at = mid.rest.length;
        for (let n = 0; n < limit; n += 1) {
          for (let i = 0; i < digits.length; i += 1) bytes[at + i] = digits[i];
          toWords(bytes, words, fromWord, toWord);
          state.set(mid.state);
          for (let offset = 0; offset < words.length; offset += 16) compress(state, words, offset);
          solver.hashes += 1;
          const found = leadingZeros(state, bits) ? lead + String.fromCharCode(...digits) : null;
          // The next nonce: decimal increment with carry; one more digit after all nines.
          let i = digits.length - 1;
          while (i >= 0 && digits[i] === 57) { digits[i] = 48; i -= 1; }
          if (i >= 0) digits[i] += 1;
          else { digits.unshift(49); layout(); }
          if (found !== null) return found;
        }
        return null;
      },
    };
    return solver;
  }

  /** Whether `nonce` solves `challenge` at `bits`, checked with the plain hash. */
  function solves(challenge, nonce, bits) {
    if (!/^[0-9]{1,20}$/.test(nonce)) return false;
    const digest = sha256(ascii(`${challenge}:${nonce}`));
    const state = new Int32Array(8);
    for (let i = 0; i < 8; i += 1) {
      state[i] = (digest[i * 4] << 24) | (digest[i * 4 + 1] << 16) | (digest[i * 4 + 2] << 8) | digest[i * 4 + 3];
    }
    return leadingZeros(state, bits);
  }

  return { sha256, midstate, finish, createSolver, solves, ascii };
}

/**
 * A worker's side of a solve: answers `{ready}` once loaded, then for `{challenge, bits}`
 * reports `{progress: hashes}` about every 100 ms and ends with `{nonce, hashes}`.
 * Self-contained like `workSolverKit` (the Blob-URL worker runs its source text).
 */
export function serveWorkIn(scope, kit) {
  scope.onmessage = (event) => {
    const { challenge, bits } = event.data;
    const solver = kit.createSolver(challenge, bits);
    let reported = Date.now();
    for (;;) {
      const nonce = solver.step(16_384);
      if (nonce !== null) {
        scope.postMessage({ nonce, hashes: solver.hashes });
        return;
      }
      if (Date.now() - reported >= 100) {
        reported = Date.now();
        scope.postMessage({ progress: solver.hashes });
      }
    }
  };
  scope.postMessage({ ready: true });
}

const WORK_KIT = workSolverKit();

/** SHA-256 of `bytes` (a Uint8Array): the 32-byte digest. */
export const sha256 = WORK_KIT.sha256;
/** The midstate of `prefix`'s complete blocks: `{state, rest, length}`; see `sha256Finish`. */
export const sha256Midstate = WORK_KIT.midstate;
/** SHA-256 of the midstate's prefix followed by `tail`. */
export const sha256Finish = WORK_KIT.finish;
/** A stepwise search for a nonce (see `workSolverKit`). */
export const createWorkSolver = WORK_KIT.createSolver;
/** Whether `nonce` solves `challenge` at `bits`. */
export const workSolves = WORK_KIT.solves;

/** Solves `challenge` at `bits` here and now (blocking): `{nonce, hashes}`. */
export function solveWork(challenge, bits) {
  const solver = WORK_KIT.createSolver(challenge, bits);
  for (;;) {
    const nonce = solver.step(65_536);
    if (nonce !== null) return { nonce, hashes: solver.hashes };
  }
}

/** What the gateway's worker file (`/sdk/v1/sluice-work.js`) runs: `serveWork(self)`. */
export function serveWork(scope) {
  serveWorkIn(scope, WORK_KIT);
}

/** The source of a classic worker that solves, for a Blob URL (pages on another origin). */
export function workerSource() {
  return `"use strict";\nconst kit = (${workSolverKit})();\n(${serveWorkIn})(self, kit);\n`;
}

/** How long a worker may take to load before the solve runs elsewhere. */
const WORKER_START_MS = 5_000;
/** How long the main thread solves before it yields to the page, when no worker can run. */
export const MAIN_THREAD_SLICE_MS = 20;

/**
 * Solves off the main thread when it can: the gateway's worker file (a page on the gateway's
 * origin; a page's CSP that forbids `blob:` still allows it), else a Blob-URL worker (a page on
 * another origin may not start a worker from the gateway's URL), else the main thread in
 * slices of MAIN_THREAD_SLICE_MS that yield. `onStart(where)` names the place it runs
 * (`worker-file`, `worker-blob`, `main-thread`); `onProgress(hashes)` reports the count so far.
 * Returns `{promise, cancel}`; the promise resolves `{nonce, hashes, solver}`, or null once
 * cancelled.
 */
export function solveOffMainThread(env, challenge, bits, { onStart = () => {}, onProgress = () => {} } = {}) {
  let cancelled = false;
  let abandon = () => {};
  const WorkerImpl = env.Worker;

  function runWorker(where, create) {
    return new Promise((resolve) => {
      let worker;
      try {
        worker = create();
      } catch {
        resolve(undefined);
        return;
      }
      let timer = null;
      const finish = (value) => {
        if (timer !== null) env.clearTimer(timer);
        timer = null;
        abandon = () => {};
        try { worker.terminate(); } catch { /* gone already */ }
        resolve(value);
      };
      abandon = () => finish(null);
      timer = env.setTimer(() => { timer = null; finish(undefined); }, WORKER_START_MS);
      worker.onmessage = ({ data }) => {
        if (data?.ready) {
          if (timer !== null) env.clearTimer(timer);
          timer = null;
          onStart(where);
          worker.postMessage({ challenge, bits });
        } else if (typeof data?.nonce === "string") {
          finish({ nonce: data.nonce, hashes: data.hashes, solver: where });
        } else if (typeof data?.progress === "number") {
          onProgress(data.progress);
        }
      };
      // A worker that cannot load (CSP, no module workers, not served here) or fails: the
      // next way is tried.
      worker.onerror = (event) => {
        event?.preventDefault?.();
        finish(undefined);
      };
    });
  }

  const ways = [];
  if (typeof WorkerImpl === "function") {
    const moduleUrl = new URL(import.meta.url);
    const pageOrigin = env.location?.origin;
    if (pageOrigin && moduleUrl.origin === pageOrigin && /^https?:$/.test(moduleUrl.protocol)) {
      ways.push(["worker-file", () => new WorkerImpl(new URL("./sluice-work.js", moduleUrl), { type: "module" })]);
    }
    if (typeof Blob === "function" && typeof URL.createObjectURL === "function") {
      ways.push(["worker-blob", () => {
        const url = URL.createObjectURL(new Blob([workerSource()], { type: "text/javascript" }));
        try {
          return new WorkerImpl(url);
        } finally {
          // The worker has fetched its script by the time it runs; revoking later is enough.
          env.setTimer(() => URL.revokeObjectURL(url), WORKER_START_MS);
        }
      }]);
    }
  }

  async function onMainThread() {
    onStart("main-thread");
    const solver = WORK_KIT.createSolver(challenge, bits);
    for (;;) {
      const sliceEnd = env.clock() + MAIN_THREAD_SLICE_MS;
      do {
        const nonce = solver.step(1_024);
        if (nonce !== null) return { nonce, hashes: solver.hashes, solver: "main-thread" };
      } while (env.clock() < sliceEnd);
      onProgress(solver.hashes);
      await new Promise((resolve) => env.setTimer(resolve, 0));
      if (cancelled) return null;
    }
  }

  const promise = (async () => {
    for (const [where, create] of ways) {
      if (cancelled) return null;
      const outcome = await runWorker(where, create);
      if (outcome !== undefined) return outcome;
    }
    if (cancelled) return null;
    return onMainThread();
  })();
  return {
    promise,
    cancel() {
      cancelled = true;
      abandon();
    },
  };
}
