"""Verifying what Sluice sends a backend: the standard library and `cryptography` (Python 3.9+).

- verify_signature(secrets, header, raw_body, tolerance_seconds=300, now=None): the
  `Sluice-Signature` header of a webhook request, `t=<unix seconds>,v1=<hex>[,v1=<hex>...]`, each
  v1 the HMAC-SHA256 of "<t>.<raw body>" keyed with a webhook secret (its text exactly as
  `sluice bootstrap` / `sluice webhook-secret rotate` showed it).
- verify_pass(token, jwks, namespace=..., room=..., leeway_seconds=0, now=None): a waiting-room
  pass, an EdDSA (Ed25519) JWT, against the JWK Set of `GET /.well-known/jwks.json`.
- JwksCache(url): that JWK Set fetched, cached a minute, fetched again (at most every ten
  seconds) when a pass names a `kid` it does not list.

Each returns a Verdict, never raises on what a caller sent: `Verdict(ok=True, ...)` or
`Verdict(ok=False, reason=...)`, true or false as a bool. Copy this file as it is (with
`cryptography` installed: requirements.txt beside it); examples/backend/README.md says why each
check is there.

As a command (the tests run it so):
  python3 sluice_verify.py signature <bodyfile> <header> <secret> [<secret>...] [--now S] [--tolerance S]
  python3 sluice_verify.py pass <jwksfile> <token> <namespace id> <room> [--now S] [--leeway S]
prints the verdict as JSON and exits 0 when accepted, 1 when refused, 2 on a usage error.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import sys
import threading
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Optional, Sequence, Union

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: Optional[str] = None
    timestamp: Optional[int] = None
    claims: Optional[dict] = field(default=None)

    def __bool__(self) -> bool:
        return self.ok

    def as_json(self) -> str:
        return json.dumps({k: v for k, v in asdict(self).items() if v is not None})


def _refused(reason: str) -> Verdict:
    return Verdict(ok=False, reason=reason)


_T = re.compile(r"\d{1,12}")
_V1 = re.compile(r"[0-9a-fA-F]{64}")


def verify_signature(
    secrets: Sequence[str],
    header: Optional[str],
    raw_body: Union[bytes, str],
    tolerance_seconds: float = 300,
    now: Optional[float] = None,
) -> Verdict:
    """The `Sluice-Signature` header of a webhook request.

    `raw_body` is the body's bytes as they arrived, read BEFORE any JSON parsing: a parsed and
    re-serialized body is not what was signed. `secrets` is every secret the backend accepts
    (the new and the old one during a rotation); any `v1` made with any of them verifies.
    """
    if isinstance(secrets, str) or not secrets:
        raise TypeError("verify_signature needs a list of at least one secret")
    if not isinstance(header, str) or header == "":
        return _refused("no signature header")
    t = None
    signatures = []
    for part in header.split(","):
        name, _, value = part.partition("=")
        name, value = name.strip(), value.strip()
        if name == "t":
            if t is not None or not _T.fullmatch(value):
                return _refused("malformed header")
            t = value
        elif name == "v1" and _V1.fullmatch(value):
            # Anything else is no HMAC-SHA256 of ours and can match nothing; other schemes (a
            # future v2) are skipped, as the header's format allows.
            signatures.append(bytes.fromhex(value))
    if t is None:
        return _refused("malformed header")
    if not signatures:
        return _refused("no v1 signature")
    current = time.time() if now is None else now
    if abs(current - int(t)) > tolerance_seconds:
        return _refused("timestamp outside tolerance")
    body = raw_body.encode("utf-8") if isinstance(raw_body, str) else bytes(raw_body)
    matched = False
    for secret in secrets:
        expected = hmac.new(secret.encode("utf-8"), t.encode("ascii") + b"." + body, hashlib.sha256).digest()
        for signature in signatures:
            # Constant-time; every pair is compared, so the time says nothing of which matched.
            if hmac.compare_digest(expected, signature):
                matched = True
    return Verdict(ok=True, timestamp=int(t)) if matched else _refused("no signature matches")


_BASE64URL = re.compile(r"[A-Za-z0-9_-]*")


def _b64decode(segment: str) -> bytes:
    return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))


def _decode_json(segment: str) -> Optional[dict]:
    if not _BASE64URL.fullmatch(segment):
        return None
    try:
        value = json.loads(_b64decode(segment))
    except (ValueError, binascii.Error):
        return None
    return value if isinstance(value, dict) else None


def pass_kid(token: Any) -> Optional[str]:
    """The `kid` a pass's header names (unverified: only to pick a key), or None."""
    header = _decode_json(token.split(".")[0]) if isinstance(token, str) else None
    kid = header.get("kid") if header else None
    return kid if isinstance(kid, str) else None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def verify_pass(
    token: Any,
    jwks: dict,
    *,
    namespace: str,
    room: str,
    leeway_seconds: float = 0,
    now: Optional[float] = None,
) -> Verdict:
    """A waiting-room pass.

    `jwks` is the parsed JSON of `GET /.well-known/jwks.json`; `namespace` is the namespace's id
    (`namespace_id` of `sluice bootstrap`'s output, a UUID, not its name) and `room` the room's
    code: a pass of another room or tenant is signed by the same keys. `leeway_seconds` allows
    for clock skew past `exp` (keep it 0 with a synchronised clock). Accepted:
    `Verdict(ok=True, claims=...)` (`claims["sub"]` holds the pass).
    """
    if not isinstance(namespace, str) or not isinstance(room, str):
        raise TypeError("verify_pass needs the namespace id and the room it expects")
    parts = token.split(".") if isinstance(token, str) else []
    if len(parts) != 3 or not all(_BASE64URL.fullmatch(part) for part in parts):
        return _refused("malformed token")
    header = _decode_json(parts[0])
    if header is None:
        return _refused("malformed token")
    # The algorithm is fixed here, never taken from the token: `none` or HS256 are refused.
    if header.get("alg") != "EdDSA":
        return _refused("alg is not EdDSA")
    kid = header.get("kid")
    keys = jwks.get("keys") if isinstance(jwks, dict) else None
    jwk = next(
        (k for k in keys or [] if isinstance(k, dict) and isinstance(kid, str) and k.get("kid") == kid),
        None,
    )
    if jwk is None:
        return _refused("unknown kid")
    if (
        jwk.get("kty") != "OKP"
        or jwk.get("crv") != "Ed25519"
        or jwk.get("alg", "EdDSA") != "EdDSA"
        or "d" in jwk
        or not isinstance(jwk.get("x"), str)
        or not _BASE64URL.fullmatch(jwk["x"])
    ):
        return _refused("key is not an Ed25519 public key")
    try:
        key = Ed25519PublicKey.from_public_bytes(_b64decode(jwk["x"]))
    except (ValueError, binascii.Error):
        return _refused("key is not an Ed25519 public key")
    signature = _b64decode(parts[2])
    try:
        if len(signature) != 64:
            raise InvalidSignature
        key.verify(signature, f"{parts[0]}.{parts[1]}".encode("ascii"))
    except InvalidSignature:
        return _refused("bad signature")
    # Only now are the claims Sluice's.
    claims = _decode_json(parts[1])
    if claims is None:
        return _refused("malformed token")
    current = time.time() if now is None else now
    exp = claims.get("exp")
    if not _is_number(exp):
        return _refused("no exp")
    if current >= exp + leeway_seconds:
        return _refused("expired")
    nbf = claims.get("nbf")
    if _is_number(nbf) and current + leeway_seconds < nbf:
        return _refused("not yet valid")
    if claims.get("namespace") != namespace:
        return _refused("wrong namespace")
    if claims.get("room") != room:
        return _refused("wrong room")
    sub = claims.get("sub")
    if not isinstance(sub, str) or sub == "":
        return _refused("no subject")
    return Verdict(ok=True, claims=claims)


def _fetch_json(url: str) -> dict:
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.load(response)


class JwksCache:
    """The JWK Set at `url` (e.g. `https://sluice.example/.well-known/jwks.json`), cached.

    `cache.for_kid(kid)` answers the cached set while it is younger than `max_age_seconds` and
    lists `kid`, and fetches it again otherwise, but never more often than every
    `min_refetch_seconds` (a flood of passes with made-up kids costs one fetch per interval).
    When a fetch fails, the set it had is answered. Thread-safe; `fetch_jwks` and `now` are for
    tests.
    """

    def __init__(
        self,
        url: str = "",
        max_age_seconds: float = 60,
        min_refetch_seconds: float = 10,
        fetch_jwks: Optional[Callable[[], dict]] = None,
        now: Callable[[], float] = time.time,
    ) -> None:
        self._fetch = fetch_jwks or (lambda: _fetch_json(url))
        self._max_age = max_age_seconds
        self._min_refetch = min_refetch_seconds
        self._now = now
        self._jwks: dict = {"keys": []}
        self._fetched_at = float("-inf")
        self._lock = threading.Lock()

    def _lists(self, kid: Optional[str]) -> bool:
        return any(isinstance(k, dict) and k.get("kid") == kid for k in self._jwks.get("keys", []))

    def for_kid(self, kid: Optional[str]) -> dict:
        # One fetch at a time: concurrent callers wait for it and then read what it got.
        with self._lock:
            age = self._now() - self._fetched_at
            if self._lists(kid) and age < self._max_age:
                return self._jwks
            if age >= self._min_refetch:
                try:
                    fetched = self._fetch()
                    if isinstance(fetched, dict) and isinstance(fetched.get("keys"), list):
                        self._jwks = fetched
                except Exception:  # noqa: BLE001 - keep the set we had; the next interval retries
                    pass
                finally:
                    self._fetched_at = self._now()
            return self._jwks


def main(argv: Sequence[str]) -> int:
    options: dict = {}
    positional = []
    args = iter(argv)
    for arg in args:
        if arg.startswith("--"):
            options[arg[2:]] = float(next(args, "nan"))
        else:
            positional.append(arg)
    mode, path, rest = (positional[0], positional[1], positional[2:]) if len(positional) >= 2 else ("", "", [])
    if mode == "signature" and len(rest) >= 2:
        with open(path, "rb") as body:
            verdict = verify_signature(
                rest[1:],
                rest[0],
                body.read(),
                tolerance_seconds=options.get("tolerance", 300),
                now=options.get("now"),
            )
    elif mode == "pass" and len(rest) == 3:
        with open(path, encoding="utf-8") as keys:
            jwks = json.load(keys)
        verdict = verify_pass(
            rest[0],
            jwks,
            namespace=rest[1],
            room=rest[2],
            leeway_seconds=options.get("leeway", 0),
            now=options.get("now"),
        )
    else:
        print(
            "usage: sluice_verify.py signature <bodyfile> <header> <secret>... [--now S] [--tolerance S]\n"
            "       sluice_verify.py pass <jwksfile> <token> <namespace id> <room> [--now S] [--leeway S]",
            file=sys.stderr,
        )
        return 2
    print(verdict.as_json())
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
