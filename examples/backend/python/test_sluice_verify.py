"""`python -m unittest` here (with the venv of venv.sh): sluice_verify.py on fixed vectors, without
Sluice. The webhook vector is durable/executor/src/webhook/signature.rs's (computed with
openssl); the pass keys are made here. gateway/tests/api/webhooks/backend_snippets.rs runs the
same file on what a real stack sends.
"""

import base64
import hashlib
import hmac
import json
import threading
import unittest
import uuid

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.rsa import generate_private_key
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from sluice_verify import JwksCache, Verdict, pass_kid, verify_pass, verify_signature

# printf '1700000000.{}' | openssl dgst -sha256 -hmac secret
T = 1_700_000_000
V1 = "b8569b78799ff9e3cbff0fc2d63a33a2b57f3282abd07c37ae5e8e7d79a5f163"
HEADER = f"t={T},v1={V1}"


def made(secret: str, body: bytes = b"{}", t: int = T) -> str:
    return hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()


class Signatures(unittest.TestCase):
    def test_a_signature_made_with_the_secret_verifies_within_the_tolerance_either_way(self):
        self.assertEqual(verify_signature(["secret"], HEADER, b"{}", now=T), Verdict(ok=True, timestamp=T))
        self.assertTrue(verify_signature(["secret"], HEADER, "{}", now=T + 300))
        self.assertTrue(verify_signature(["secret"], HEADER, bytearray(b"{}"), now=T - 300))
        self.assertEqual(made("secret"), V1)

    def test_a_body_changed_by_one_byte_another_secret_or_another_t_is_refused(self):
        refusal = Verdict(ok=False, reason="no signature matches")
        self.assertEqual(verify_signature(["secret"], HEADER, b"{ }", now=T), refusal)
        self.assertEqual(verify_signature(["secret"], HEADER, b"[}", now=T), refusal)
        self.assertEqual(verify_signature(["other"], HEADER, b"{}", now=T), refusal)
        self.assertEqual(verify_signature(["secret"], f"t={T + 1},v1={V1}", b"{}", now=T), refusal)
        self.assertFalse(refusal)

    def test_a_timestamp_more_than_the_tolerance_away_is_refused(self):
        stale = Verdict(ok=False, reason="timestamp outside tolerance")
        self.assertEqual(verify_signature(["secret"], HEADER, b"{}", now=T + 301), stale)
        self.assertEqual(verify_signature(["secret"], HEADER, b"{}", now=T - 301), stale)
        self.assertEqual(verify_signature(["secret"], HEADER, b"{}", now=T + 61, tolerance_seconds=60), stale)
        # The default clock is the machine's: a vector from 2023 is long stale.
        self.assertEqual(verify_signature(["secret"], HEADER, b"{}"), stale)

    def test_during_a_rotation_any_v1_made_with_any_known_secret_verifies(self):
        both = f"t={T},v1={made('new')},v1={V1}"
        for secrets in (["new"], ["secret"], ["secret", "new"], ["other", "secret"]):
            self.assertTrue(verify_signature(secrets, both, b"{}", now=T), secrets)
        self.assertEqual(verify_signature(["other"], both, b"{}", now=T).reason, "no signature matches")

    def test_a_header_without_t_or_v1_or_with_two_t_is_refused(self):
        def reason(header):
            return verify_signature(["secret"], header, b"{}", now=T).reason

        self.assertEqual(reason(""), "no signature header")
        self.assertEqual(reason(None), "no signature header")
        self.assertEqual(reason(f"v1={V1}"), "malformed header")
        self.assertEqual(reason(f"t={T},t={T},v1={V1}"), "malformed header")
        self.assertEqual(reason(f"t=-1,v1={V1}"), "malformed header")
        self.assertEqual(reason(f"t={T}"), "no v1 signature")
        self.assertEqual(reason(f"t={T},v1={V1[2:]}"), "no v1 signature")
        with self.assertRaises(TypeError):
            verify_signature([], HEADER, b"{}", now=T)
        with self.assertRaises(TypeError):
            verify_signature("secret", HEADER, b"{}", now=T)


NAMESPACE = "0b9f3c2e-5d7a-4e1b-9c55-3a1f0e6d2b71"
NOW = 1_800_000_000


def b64(value) -> str:
    raw = value if isinstance(value, bytes) else json.dumps(value).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


class KeyPair:
    def __init__(self, kid: str):
        self.kid = kid
        self.private = Ed25519PrivateKey.generate()
        x = self.private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.jwk = {"kty": "OKP", "crv": "Ed25519", "x": b64(x), "kid": kid, "alg": "EdDSA", "use": "sig"}

    def sign(self, claims, header=None) -> str:
        header = header if header is not None else {"alg": "EdDSA", "typ": "JWT", "kid": self.kid}
        signed = f"{b64(header)}.{b64(claims)}"
        return f"{signed}.{b64(self.private.sign(signed.encode()))}"


LIVE = KeyPair("k-live")
OTHER = KeyPair("k-other")
JWKS = {"keys": [LIVE.jwk, OTHER.jwk]}
CLAIMS = {"sub": "alice", "room": "doors", "namespace": NAMESPACE, "iat": NOW - 10, "exp": NOW + 60, "jti": "place-1"}
EXPECT = {"namespace": NAMESPACE, "room": "doors", "now": NOW}


class Passes(unittest.TestCase):
    def test_a_pass_signed_by_the_key_its_kid_names_verifies_until_its_exp(self):
        token = LIVE.sign(CLAIMS)
        self.assertEqual(pass_kid(token), "k-live")
        self.assertEqual(verify_pass(token, JWKS, **EXPECT), Verdict(ok=True, claims=CLAIMS))
        self.assertTrue(verify_pass(OTHER.sign(CLAIMS, {"alg": "EdDSA", "kid": "k-other"}), JWKS, **EXPECT))
        self.assertTrue(verify_pass(token, JWKS, **{**EXPECT, "now": NOW + 59.999}))
        self.assertEqual(verify_pass(token, JWKS, **{**EXPECT, "now": NOW + 60}), Verdict(ok=False, reason="expired"))
        self.assertTrue(verify_pass(token, JWKS, **{**EXPECT, "now": NOW + 60}, leeway_seconds=1))
        self.assertEqual(verify_pass(token, JWKS, **{**EXPECT, "now": NOW + 61}, leeway_seconds=1).reason, "expired")
        old = LIVE.sign({**CLAIMS, "exp": 1_700_000_000})
        self.assertEqual(verify_pass(old, JWKS, namespace=NAMESPACE, room="doors").reason, "expired")

    def test_a_pass_of_another_room_or_namespace_or_without_a_subject_is_refused(self):
        def reason(claims, **expect):
            return verify_pass(LIVE.sign(claims), JWKS, **{**EXPECT, **expect}).reason

        self.assertEqual(reason({**CLAIMS, "room": "hall"}), "wrong room")
        self.assertEqual(reason(CLAIMS, room="hall"), "wrong room")
        self.assertEqual(reason({**CLAIMS, "namespace": str(uuid.uuid4())}), "wrong namespace")
        self.assertEqual(reason(CLAIMS, namespace="main"), "wrong namespace")
        self.assertEqual(reason({**CLAIMS, "sub": ""}), "no subject")
        self.assertEqual(reason({k: v for k, v in CLAIMS.items() if k != "exp"}), "no exp")
        self.assertEqual(reason({**CLAIMS, "exp": True}), "no exp")
        self.assertEqual(reason({**CLAIMS, "nbf": NOW + 5}), "not yet valid")

    def test_a_tampered_pass_an_unknown_kid_another_key_and_alg_games_are_refused(self):
        token = LIVE.sign(CLAIMS)
        header, _, signature = token.split(".")
        forged = f"{header}.{b64({**CLAIMS, 'sub': 'mallory'})}.{signature}"
        self.assertEqual(verify_pass(forged, JWKS, **EXPECT), Verdict(ok=False, reason="bad signature"))
        flipped = token[:-2] + ("B" if token[-2] == "A" else "A") + token[-1]
        self.assertEqual(verify_pass(flipped, JWKS, **EXPECT).reason, "bad signature")
        # Signed by another key under the live key's kid.
        under_live = OTHER.sign(CLAIMS, {"alg": "EdDSA", "kid": "k-live"})
        self.assertEqual(verify_pass(under_live, JWKS, **EXPECT).reason, "bad signature")
        self.assertEqual(verify_pass(token, {"keys": [OTHER.jwk]}, **EXPECT).reason, "unknown kid")
        self.assertEqual(verify_pass(token, {"keys": []}, **EXPECT).reason, "unknown kid")
        self.assertEqual(verify_pass(LIVE.sign(CLAIMS, {"alg": "EdDSA"}), JWKS, **EXPECT).reason, "unknown kid")
        none = f"{b64({'alg': 'none', 'kid': 'k-live'})}.{b64(CLAIMS)}."
        self.assertEqual(verify_pass(none, JWKS, **EXPECT).reason, "alg is not EdDSA")
        hs = f"{b64({'alg': 'HS256', 'kid': 'k-live'})}.{b64(CLAIMS)}.{signature}"
        self.assertEqual(verify_pass(hs, JWKS, **EXPECT).reason, "alg is not EdDSA")
        rsa = generate_private_key(public_exponent=65537, key_size=2048).public_key().public_numbers()
        rsa_jwk = {"kty": "RSA", "kid": "k-live", "e": b64(rsa.e.to_bytes(3, "big")), "n": b64(rsa.n.to_bytes(256, "big"))}
        self.assertEqual(verify_pass(token, {"keys": [rsa_jwk]}, **EXPECT).reason, "key is not an Ed25519 public key")
        private = {**LIVE.jwk, "d": "secret"}
        self.assertEqual(verify_pass(token, {"keys": [private]}, **EXPECT).reason, "key is not an Ed25519 public key")
        short = {**LIVE.jwk, "x": LIVE.jwk["x"][:-4]}
        self.assertEqual(verify_pass(token, {"keys": [short]}, **EXPECT).reason, "key is not an Ed25519 public key")
        for junk in ["", "a.b", "a.b.c.d", f"{header}.%%%.{signature}", None, 42]:
            self.assertEqual(verify_pass(junk, JWKS, **EXPECT).reason, "malformed token", junk)
        with self.assertRaises(TypeError):
            verify_pass(token, JWKS, namespace=None, room="doors")


class Cache(unittest.TestCase):
    def test_the_jwk_set_is_fetched_once_a_minute_and_for_an_unknown_kid_at_most_every_ten_seconds(self):
        clock = [1000.0]
        served = [{"keys": [LIVE.jwk]}]
        fetches = []

        def fetch():
            fetches.append(clock[0])
            if isinstance(served[0], Exception):
                raise served[0]
            return served[0]

        cache = JwksCache(fetch_jwks=fetch, now=lambda: clock[0])
        self.assertEqual(cache.for_kid("k-live"), {"keys": [LIVE.jwk]})
        self.assertEqual(len(fetches), 1)
        # A new kid within ten seconds of the last fetch: no fetch.
        served[0] = {"keys": [OTHER.jwk, LIVE.jwk]}
        clock[0] += 9
        self.assertEqual(cache.for_kid("k-other"), {"keys": [LIVE.jwk]})
        self.assertEqual(len(fetches), 1)
        clock[0] += 1
        self.assertEqual(cache.for_kid("k-other"), served[0], "an unknown kid fetches again")
        self.assertEqual(len(fetches), 2)
        clock[0] += 59
        cache.for_kid("k-live")
        self.assertEqual(len(fetches), 2, "cached for a minute")
        # Made-up kids cost one fetch per ten seconds, however many arrive, concurrent or not.
        clock[0] += 10
        threads = [threading.Thread(target=cache.for_kid, args=(f"made-up-{i}",)) for i in range(20)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        cache.for_kid("made-up")
        self.assertEqual(len(fetches), 3)
        clock[0] += 1
        cache.for_kid("k-live")
        self.assertEqual(len(fetches), 3, "a known kid is answered from the cache within the minute")
        # A failed fetch keeps the set it had.
        served[0] = OSError("down")
        clock[0] += 60
        self.assertEqual(cache.for_kid("k-live"), {"keys": [OTHER.jwk, LIVE.jwk]})
        self.assertEqual(len(fetches), 4)


if __name__ == "__main__":
    unittest.main()
