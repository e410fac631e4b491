// `node --test examples/backend/node/`: verify.mjs on fixed vectors, without Sluice. The webhook
// vector is durable/executor/src/webhook/signature.rs's (computed with openssl); the pass keys are
// made here. gateway/tests/api/webhooks/backend_snippets.rs runs the same file on what a real
// stack sends.

import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { test } from 'node:test';

import { createJwksCache, passKid, verifyPass, verifySignature } from './verify.mjs';

// printf '1700000000.{}' | openssl dgst -sha256 -hmac secret
const T = 1_700_000_000;
const V1 = 'b8569b78799ff9e3cbff0fc2d63a33a2b57f3282abd07c37ae5e8e7d79a5f163';
const HEADER = `t=${T},v1=${V1}`;

test('a signature made with the secret verifies, within the tolerance either way', () => {
  assert.deepEqual(verifySignature(['secret'], HEADER, Buffer.from('{}'), { now: T }), { ok: true, timestamp: T });
  assert.equal(verifySignature(['secret'], HEADER, '{}', { now: T + 300 }).ok, true);
  assert.equal(verifySignature(['secret'], HEADER, '{}', { now: T - 300 }).ok, true);
});

test('a body changed by one byte, another secret or another t is refused', () => {
  const refusal = { ok: false, reason: 'no signature matches' };
  assert.deepEqual(verifySignature(['secret'], HEADER, '{ }', { now: T }), refusal);
  assert.deepEqual(verifySignature(['secret'], HEADER, '[}', { now: T }), refusal);
  assert.deepEqual(verifySignature(['other'], HEADER, '{}', { now: T }), refusal);
  assert.deepEqual(verifySignature(['secret'], `t=${T + 1},v1=${V1}`, '{}', { now: T }), refusal);
});

test('a timestamp more than the tolerance away is refused', () => {
  const stale = { ok: false, reason: 'timestamp outside tolerance' };
  assert.deepEqual(verifySignature(['secret'], HEADER, '{}', { now: T + 301 }), stale);
  assert.deepEqual(verifySignature(['secret'], HEADER, '{}', { now: T - 301 }), stale);
  assert.deepEqual(verifySignature(['secret'], HEADER, '{}', { now: T + 61, toleranceSeconds: 60 }), stale);
  // The default clock is the machine's: a vector from 2023 is long stale.
  assert.deepEqual(verifySignature(['secret'], HEADER, '{}'), stale);
});

test('during a rotation any v1 made with any known secret verifies', () => {
  const made = (secret) => crypto.createHmac('sha256', secret).update(`${T}.{}`).digest('hex');
  const both = `t=${T},v1=${made('new')},v1=${V1}`;
  for (const secrets of [['new'], ['secret'], ['secret', 'new'], ['other', 'secret']]) {
    assert.equal(verifySignature(secrets, both, '{}', { now: T }).ok, true, secrets.join());
  }
  assert.equal(verifySignature(['other'], both, '{}', { now: T }).reason, 'no signature matches');
});

test('a header without t or v1, or with two t, is refused', () => {
  const at = { now: T };
  assert.equal(verifySignature(['secret'], '', '{}', at).reason, 'no signature header');
  assert.equal(verifySignature(['secret'], undefined, '{}', at).reason, 'no signature header');
  assert.equal(verifySignature(['secret'], `v1=${V1}`, '{}', at).reason, 'malformed header');
  assert.equal(verifySignature(['secret'], `t=${T},t=${T},v1=${V1}`, '{}', at).reason, 'malformed header');
  assert.equal(verifySignature(['secret'], `t=-1,v1=${V1}`, '{}', at).reason, 'malformed header');
  assert.equal(verifySignature(['secret'], `t=${T}`, '{}', at).reason, 'no v1 signature');
  assert.equal(verifySignature(['secret'], `t=${T},v1=${V1.slice(2)}`, '{}', at).reason, 'no v1 signature');
  assert.throws(() => verifySignature([], HEADER, '{}', at), TypeError);
});

// --- passes -----------------------------------------------------------------------------------

const NAMESPACE = '0b9f3c2e-5d7a-4e1b-9c55-3a1f0e6d2b71';
const NOW = 1_800_000_000;

function keyPair(kid) {
  const { privateKey, publicKey } = crypto.generateKeyPairSync('ed25519');
  return { kid, privateKey, jwk: { ...publicKey.export({ format: 'jwk' }), kid, alg: 'EdDSA', use: 'sig' } };
}

const b64 = (value) => Buffer.from(JSON.stringify(value)).toString('base64url');

function sign(pair, claims, header = { alg: 'EdDSA', typ: 'JWT', kid: pair.kid }) {
  const input = `${b64(header)}.${b64(claims)}`;
  return `${input}.${crypto.sign(null, Buffer.from(input), pair.privateKey).toString('base64url')}`;
}

const live = keyPair('k-live');
const other = keyPair('k-other');
const jwks = { keys: [live.jwk, other.jwk] };
const claims = { sub: 'alice', room: 'doors', namespace: NAMESPACE, iat: NOW - 10, exp: NOW + 60, jti: 'place-1' };
const expect = { namespace: NAMESPACE, room: 'doors', now: NOW };

test('a pass signed by the key its kid names verifies, until its exp', () => {
  const pass = sign(live, claims);
  assert.equal(passKid(pass), 'k-live');
  assert.deepEqual(verifyPass(pass, jwks, expect), { ok: true, claims });
  assert.equal(verifyPass(sign(other, claims, { alg: 'EdDSA', kid: 'k-other' }), jwks, expect).ok, true);
  assert.equal(verifyPass(pass, jwks, { ...expect, now: NOW + 59.999 }).ok, true);
  assert.deepEqual(verifyPass(pass, jwks, { ...expect, now: NOW + 60 }), { ok: false, reason: 'expired' });
  assert.equal(verifyPass(pass, jwks, { ...expect, now: NOW + 60, leewaySeconds: 1 }).ok, true);
  assert.equal(verifyPass(pass, jwks, { ...expect, now: NOW + 61, leewaySeconds: 1 }).reason, 'expired');
  // The default clock is the machine's: a pass of 2027 is not yet expired, one of 2023 is.
  assert.equal(verifyPass(pass, jwks, { namespace: NAMESPACE, room: 'doors' }).ok, Date.now() / 1000 < NOW + 60);
  const old = sign(live, { ...claims, exp: 1_700_000_000 });
  assert.equal(verifyPass(old, jwks, { namespace: NAMESPACE, room: 'doors' }).reason, 'expired');
});

test('a pass of another room or namespace, or without a subject, is refused', () => {
  assert.equal(verifyPass(sign(live, { ...claims, room: 'hall' }), jwks, expect).reason, 'wrong room');
  assert.equal(verifyPass(sign(live, claims), jwks, { ...expect, room: 'hall' }).reason, 'wrong room');
  const elsewhere = sign(live, { ...claims, namespace: crypto.randomUUID() });
  assert.equal(verifyPass(elsewhere, jwks, expect).reason, 'wrong namespace');
  assert.equal(verifyPass(sign(live, claims), jwks, { ...expect, namespace: 'main' }).reason, 'wrong namespace');
  assert.equal(verifyPass(sign(live, { ...claims, sub: '' }), jwks, expect).reason, 'no subject');
  const { exp: _, ...noExp } = claims;
  assert.equal(verifyPass(sign(live, noExp), jwks, expect).reason, 'no exp');
  assert.equal(verifyPass(sign(live, { ...claims, nbf: NOW + 5 }), jwks, expect).reason, 'not yet valid');
});

test('a tampered pass, a pass of an unknown kid or another key, and alg games are refused', () => {
  const pass = sign(live, claims);
  const [header, , signature] = pass.split('.');
  const forged = `${header}.${b64({ ...claims, sub: 'mallory' })}.${signature}`;
  assert.deepEqual(verifyPass(forged, jwks, expect), { ok: false, reason: 'bad signature' });
  const flipped = `${pass.slice(0, -2)}${pass.at(-2) === 'A' ? 'B' : 'A'}${pass.at(-1)}`;
  assert.equal(verifyPass(flipped, jwks, expect).reason, 'bad signature');
  // Signed by another key under the live key's kid.
  assert.equal(verifyPass(sign(other, claims, { alg: 'EdDSA', kid: 'k-live' }), jwks, expect).reason, 'bad signature');
  assert.equal(verifyPass(pass, { keys: [other.jwk] }, expect).reason, 'unknown kid');
  assert.equal(verifyPass(pass, { keys: [] }, expect).reason, 'unknown kid');
  assert.equal(verifyPass(sign(live, claims, { alg: 'EdDSA' }), jwks, expect).reason, 'unknown kid');
  const none = `${b64({ alg: 'none', kid: 'k-live' })}.${b64(claims)}.`;
  assert.equal(verifyPass(none, jwks, expect).reason, 'alg is not EdDSA');
  const hs = `${b64({ alg: 'HS256', kid: 'k-live' })}.${b64(claims)}.${signature}`;
  assert.equal(verifyPass(hs, jwks, expect).reason, 'alg is not EdDSA');
  const rsa = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 }).publicKey.export({ format: 'jwk' });
  assert.equal(verifyPass(pass, { keys: [{ ...rsa, kid: 'k-live' }] }, expect).reason, 'key is not an Ed25519 public key');
  assert.equal(verifyPass(pass, { keys: [{ ...live.jwk, d: 'secret' }] }, expect).reason, 'key is not an Ed25519 public key');
  for (const junk of ['', 'a.b', 'a.b.c.d', `${header}.%%%.${signature}`, null, 42]) {
    assert.equal(verifyPass(junk, jwks, expect).reason, 'malformed token', String(junk));
  }
  assert.throws(() => verifyPass(pass, jwks, { room: 'doors' }), TypeError);
});

test('the JWK Set cache fetches once a minute, and again for an unknown kid at most every ten seconds', async () => {
  let clock = 1000;
  let served = { keys: [live.jwk] };
  let fetches = 0;
  const cache = createJwksCache({
    fetchJwks: async () => {
      fetches += 1;
      if (served instanceof Error) throw served;
      return served;
    },
    now: () => clock,
  });
  assert.deepEqual(await cache.forKid('k-live'), { keys: [live.jwk] });
  assert.equal(fetches, 1);
  // A new kid within ten seconds of the last fetch: no fetch.
  served = { keys: [other.jwk, live.jwk] };
  clock += 9;
  assert.deepEqual(await cache.forKid('k-other'), { keys: [live.jwk] });
  assert.equal(fetches, 1);
  clock += 1;
  assert.deepEqual(await cache.forKid('k-other'), served, 'an unknown kid fetches again');
  assert.equal(fetches, 2);
  clock += 59;
  await cache.forKid('k-live');
  assert.equal(fetches, 2, 'cached for a minute');
  // Made-up kids cost one fetch per ten seconds, however many arrive, concurrent or not.
  clock += 10;
  await Promise.all(Array.from({ length: 20 }, (_, i) => cache.forKid(`made-up-${i}`)));
  await cache.forKid('made-up');
  assert.equal(fetches, 3);
  clock += 1;
  await cache.forKid('k-live');
  assert.equal(fetches, 3, 'a known kid is answered from the cache within the minute');
  // A failed fetch keeps the set it had.
  served = new Error('down');
  clock += 60;
  assert.deepEqual(await cache.forKid('k-live'), { keys: [other.jwk, live.jwk] });
  assert.equal(fetches, 4);
});
