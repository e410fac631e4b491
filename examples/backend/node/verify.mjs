// Verifying what Sluice sends a backend, with nothing but Node's built-in `crypto` (Node 18+):
//
// - verifySignature(secrets, header, rawBody, {toleranceSeconds, now}): the `Sluice-Signature`
//   header of a webhook request, `t=<unix seconds>,v1=<hex>[,v1=<hex>…]`, each v1 the
//   HMAC-SHA256 of "<t>.<raw body>" keyed with a webhook secret (its text exactly as
//   `sluice bootstrap` / `sluice webhook-secret rotate` showed it).
// - verifyPass(token, jwks, {namespace, room, leewaySeconds, now}): a waiting-room pass, an EdDSA
//   (Ed25519) JWT, against the JWK Set of `GET /.well-known/jwks.json`.
// - createJwksCache({url, …}): that JWK Set fetched, cached a minute, fetched again (at most every
//   ten seconds) when a pass names a `kid` it does not list.
//
// Each returns a verdict, never throws on what a caller sent: `{ok: true, …}` or
// `{ok: false, reason}`. Copy this file as it is; examples/backend/README.md says why each check
// is there.
//
// As a command (the tests run it so):
//   node verify.mjs signature <bodyfile> <header> <secret> [<secret>…] [--now S] [--tolerance S]
//   node verify.mjs pass <jwksfile> <token> <namespace id> <room> [--now S] [--leeway S]
// prints the verdict as JSON and exits 0 when accepted, 1 when refused, 2 on a usage error.

import crypto from 'node:crypto';
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

const refused = (reason) => ({ ok: false, reason });
const nowSeconds = () => Date.now() / 1000;

/**
 * The `Sluice-Signature` header of a webhook request. `rawBody` is the body's bytes as they
 * arrived (a Buffer, or a string of them), read BEFORE any JSON parsing: a parsed and
 * re-serialized body is not what was signed. `secrets` is every secret the backend accepts (the
 * new and the old one during a rotation); any `v1` made with any of them verifies.
 */
export function verifySignature(secrets, header, rawBody, { toleranceSeconds = 300, now } = {}) {
  if (!Array.isArray(secrets) || secrets.length === 0) {
    throw new TypeError('verifySignature needs at least one secret');
  }
  if (typeof header !== 'string' || header === '') return refused('no signature header');
  let t = null;
  const signatures = [];
  for (const part of header.split(',')) {
    const at = part.indexOf('=');
    const [name, value] = at < 0 ? [part, ''] : [part.slice(0, at).trim(), part.slice(at + 1).trim()];
    if (name === 't') {
      if (t !== null || !/^\d{1,12}$/.test(value)) return refused('malformed header');
      t = value;
    } else if (name === 'v1') {
      // Not 64 hex digits: no HMAC-SHA256 of ours, so it can match nothing.
      if (/^[0-9a-f]{64}$/i.test(value)) signatures.push(Buffer.from(value, 'hex'));
    }
    // Other schemes (a future v2) are skipped, as the header's format allows.
  }
  if (t === null) return refused('malformed header');
  if (signatures.length === 0) return refused('no v1 signature');
  const current = now ?? nowSeconds();
  if (Math.abs(current - Number(t)) > toleranceSeconds) return refused('timestamp outside tolerance');
  const body = typeof rawBody === 'string' ? Buffer.from(rawBody, 'utf8') : Buffer.from(rawBody);
  let matched = false;
  for (const secret of secrets) {
    const expected = crypto.createHmac('sha256', secret).update(`${t}.`).update(body).digest();
    for (const signature of signatures) {
      // Constant-time; every pair is compared, so the time says nothing of which matched.
      if (crypto.timingSafeEqual(expected, signature)) matched = true;
    }
  }
  return matched ? { ok: true, timestamp: Number(t) } : refused('no signature matches');
}

const BASE64URL = /^[A-Za-z0-9_-]*$/;

function decodeJson(segment) {
  if (!BASE64URL.test(segment)) return null;
  try {
    const value = JSON.parse(Buffer.from(segment, 'base64url').toString('utf8'));
    return value !== null && typeof value === 'object' && !Array.isArray(value) ? value : null;
  } catch {
    return null;
  }
}

/** The `kid` a pass's header names (unverified: only to pick a key), or null. */
export function passKid(token) {
  const header = typeof token === 'string' ? decodeJson(token.split('.')[0]) : null;
  return typeof header?.kid === 'string' ? header.kid : null;
}

/**
 * A waiting-room pass. `jwks` is the parsed JSON of `GET /.well-known/jwks.json`; `namespace` is
 * the namespace's id (`namespace_id` of `sluice bootstrap`'s output, a UUID, not its name) and
 * `room` the room's code: a pass of another room or tenant is signed by the same keys.
 * `leewaySeconds` allows for clock skew past `exp` (keep it 0 with a synchronised clock).
 * Accepted: `{ok: true, claims}` (`claims.sub` holds the pass).
 */
export function verifyPass(token, jwks, { namespace, room, leewaySeconds = 0, now } = {}) {
  if (typeof namespace !== 'string' || typeof room !== 'string') {
    throw new TypeError('verifyPass needs the namespace id and the room it expects');
  }
  const parts = typeof token === 'string' ? token.split('.') : [];
  if (parts.length !== 3) return refused('malformed token');
  const header = decodeJson(parts[0]);
  if (header === null || !parts.every((part) => BASE64URL.test(part))) return refused('malformed token');
  // The algorithm is fixed here, never taken from the token: `none` or HS256 are refused.
  if (header.alg !== 'EdDSA') return refused('alg is not EdDSA');
  const jwk = (jwks?.keys ?? []).find((key) => typeof header.kid === 'string' && key?.kid === header.kid);
  if (jwk === undefined) return refused('unknown kid');
  if (jwk.kty !== 'OKP' || jwk.crv !== 'Ed25519' || (jwk.alg ?? 'EdDSA') !== 'EdDSA' || 'd' in jwk) {
    return refused('key is not an Ed25519 public key');
  }
  let key;
  try {
    key = crypto.createPublicKey({ key: { kty: jwk.kty, crv: jwk.crv, x: jwk.x }, format: 'jwk' });
  } catch {
    return refused('key is not an Ed25519 public key');
  }
  const signature = Buffer.from(parts[2], 'base64url');
  const signed = Buffer.from(`${parts[0]}.${parts[1]}`, 'ascii');
  if (signature.length !== 64 || !crypto.verify(null, signed, key, signature)) {
    return refused('bad signature');
  }
  // Only now are the claims Sluice's.
  const claims = decodeJson(parts[1]);
  if (claims === null) return refused('malformed token');
  const current = now ?? nowSeconds();
  if (typeof claims.exp !== 'number') return refused('no exp');
  if (current >= claims.exp + leewaySeconds) return refused('expired');
  if (typeof claims.nbf === 'number' && current + leewaySeconds < claims.nbf) return refused('not yet valid');
  if (claims.namespace !== namespace) return refused('wrong namespace');
  if (claims.room !== room) return refused('wrong room');
  if (typeof claims.sub !== 'string' || claims.sub === '') return refused('no subject');
  return { ok: true, claims };
}

/**
 * The JWK Set at `url` (e.g. `https://sluice.example/.well-known/jwks.json`), cached:
 * `await cache.forKid(kid)` answers the cached set while it is younger than `maxAgeSeconds` and
 * lists `kid`, and fetches it again otherwise, but never more often than every
 * `minRefetchSeconds` (a flood of passes with made-up kids costs one fetch per interval). When
 * a fetch fails, the set it had is answered. `fetchJwks` and `now` are for tests.
 */
export function createJwksCache({
  url,
  maxAgeSeconds = 60,
  minRefetchSeconds = 10,
  fetchJwks = async () => {
    const response = await fetch(url, { headers: { accept: 'application/json' } });
    if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
    return response.json();
  },
  now = nowSeconds,
} = {}) {
  let jwks = { keys: [] };
  let fetchedAt = -Infinity;
  let inFlight = null;
  const lists = (kid) => (jwks.keys ?? []).some((key) => key?.kid === kid);
  return {
    async forKid(kid) {
      const age = now() - fetchedAt;
      if (lists(kid) && age < maxAgeSeconds) return jwks;
      if (age >= minRefetchSeconds) {
        // One fetch at a time: concurrent callers wait for the same one.
        inFlight ??= (async () => {
          try {
            const fetched = await fetchJwks();
            if (Array.isArray(fetched?.keys)) jwks = fetched;
          } catch {
            // Keep the set we had; the next interval tries again.
          } finally {
            fetchedAt = now();
            inFlight = null;
          }
        })();
        await inFlight;
      }
      return jwks;
    },
  };
}

function main(argv) {
  const options = {};
  const positional = [];
  for (let i = 0; i < argv.length; i++) {
    if (argv[i].startsWith('--')) options[argv[i].slice(2)] = Number(argv[++i]);
    else positional.push(argv[i]);
  }
  const [mode, file, ...rest] = positional;
  let verdict;
  if (mode === 'signature' && rest.length >= 2) {
    const [header, ...secrets] = rest;
    verdict = verifySignature(secrets, header, readFileSync(file), {
      toleranceSeconds: options.tolerance ?? 300,
      now: options.now,
    });
  } else if (mode === 'pass' && rest.length === 3) {
    const [token, namespace, room] = rest;
    verdict = verifyPass(token, JSON.parse(readFileSync(file, 'utf8')), {
      namespace,
      room,
      leewaySeconds: options.leeway ?? 0,
      now: options.now,
    });
  } else {
    process.stderr.write(
      'usage: node verify.mjs signature <bodyfile> <header> <secret>… [--now S] [--tolerance S]\n' +
        '       node verify.mjs pass <jwksfile> <token> <namespace id> <room> [--now S] [--leeway S]\n',
    );
    return 2;
  }
  process.stdout.write(`${JSON.stringify(verdict)}\n`);
  return verdict.ok ? 0 : 1;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  process.exitCode = main(process.argv.slice(2));
}
