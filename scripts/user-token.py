#!/usr/bin/env python3
"""Mint an end user's token (an RS256 JWT) for trying Sluice's end-user access locally.

    scripts/user-token.py KEY.pem --sub alice --groups hr,emea [--issuer I] [--audience A] [--minutes 60]

KEY.pem is an RSA private key (`openssl genpkey -algorithm RSA -out KEY.pem`); the tenant's
identity holds its public half (`openssl pkey -in KEY.pem -pubout`). Standard library and the
`openssl` command only. For trying things out: a real deployment's tokens come from its
identity provider.
"""
import argparse
import base64
import json
import subprocess
import time


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("key", help="RSA private key (PEM)")
    p.add_argument("--sub", required=True)
    p.add_argument("--groups", default="", help="comma-separated")
    p.add_argument("--issuer", default="https://idp.example.com/")
    p.add_argument("--audience", default="sluice")
    p.add_argument("--minutes", type=int, default=60)
    a = p.parse_args()
    now = int(time.time())
    claims = {
        "iss": a.issuer,
        "aud": a.audience,
        "sub": a.sub,
        "groups": [g for g in a.groups.split(",") if g],
        "iat": now,
        "exp": now + 60 * a.minutes,
    }
    header = {"alg": "RS256", "typ": "JWT"}
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}"
    signature = subprocess.run(
        ["openssl", "dgst", "-sha256", "-sign", a.key],
        input=signing_input.encode(),
        capture_output=True,
        check=True,
    ).stdout
    print(f"{signing_input}.{b64(signature)}")


if __name__ == "__main__":
    main()
