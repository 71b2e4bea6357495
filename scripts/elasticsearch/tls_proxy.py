#!/usr/bin/env python3
"""TLS-terminating, authenticating reverse proxy in front of the plaintext test Elasticsearch node (no x-pack).

Lets tests exercise the client's https, CA bundle, basic auth and API key. Listens on https://127.0.0.1:PORT; a missing
or wrong `Authorization` gets 401, WWW-Authenticate and an Elasticsearch-shaped security_exception; anything else goes
upstream byte for byte (method, raw path and query, headers minus hop-by-hop and Authorization, body) and the status,
headers (X-Elastic-Product too) and body are streamed back. Prints "ready" on stdout once listening; stops on SIGTERM.

    tls_proxy.py --listen-port 19251 --upstream http://127.0.0.1:19250 --tls-dir DIR --password-file PW --api-key-file KEY

TLS: --cert/--key, or --tls-dir (ca.pem, cert.pem, key.pem made there once by openssl; SAN IP:127.0.0.1, DNS:localhost).
Secrets: --password-file (for --user, default elastic), --api-key-file, else $ES_PROXY_PASSWORD / $ES_PROXY_API_KEY. The
API key is the token after "ApiKey " (the client's api_key="..."; api_key=(id, key) sends base64 of "id:key", and a key
file holding "id:key" is accepted too).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import hmac
import json
import os
import signal
import ssl
import subprocess
import sys
from pathlib import Path

from aiohttp import ClientError, ClientSession, ClientTimeout, web
from multidict import CIMultiDict
from yarl import URL

HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "trailers",
              "transfer-encoding", "upgrade"}
REQUEST_DROP = HOP_BY_HOP | {"host", "authorization", "content-length"}
CHALLENGES = ('Basic realm="security", charset="UTF-8"', "ApiKey")


def secret(path: str | None, env: str) -> str | None:
    return Path(path).read_text().strip() if path else os.environ.get(env) or None


def make_tls(d: Path) -> tuple[Path, Path]:
    if not all((d / f).exists() for f in ("ca.pem", "cert.pem", "key.pem")):
        d.mkdir(parents=True, exist_ok=True)
        (d / "server.ext").write_text(
            "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n"
            "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid,issuer\n")
        new_key = ["-newkey", "rsa:2048", "-nodes", "-sha256"]
        for cmd in (
            ["req", "-x509", *new_key, "-days", "3650", "-keyout", d / "ca.key", "-out", d / "ca.pem", "-subj",
             "/CN=jevmem es proxy test CA", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
            ["req", *new_key, "-keyout", d / "key.pem", "-out", d / "server.csr", "-subj", "/CN=localhost"],
            ["x509", "-req", "-sha256", "-days", "825", "-in", d / "server.csr", "-CA", d / "ca.pem", "-CAkey",
             d / "ca.key", "-CAcreateserial", "-extfile", d / "server.ext", "-out", d / "cert.pem"],
        ):
            subprocess.run(["openssl", *map(str, cmd)], check=True, capture_output=True)
        for leftover in ("server.csr", "server.ext", "ca.srl"):
            (d / leftover).unlink(missing_ok=True)
    return d / "cert.pem", d / "key.pem"


class Proxy:
    def __init__(self, upstream: str, user: str, password: str | None, api_key: str | None) -> None:
        self.upstream, self.user, self.password, self.api_key = upstream.rstrip("/"), user, password, api_key
        self.session: ClientSession | None = None

    def authenticated(self, header: str) -> bool:
        scheme, _, token = header.partition(" ")
        token = token.strip()
        try:
            decoded = base64.b64decode(token, validate=True)
        except binascii.Error:
            decoded = b""
        if scheme.lower() == "basic" and self.password is not None:
            return hmac.compare_digest(decoded, f"{self.user}:{self.password}".encode())
        if scheme.lower() == "apikey" and self.api_key is not None:
            key = self.api_key.encode()
            return hmac.compare_digest(token.encode(), key) or hmac.compare_digest(decoded, key)
        return False

    async def handle(self, request: web.Request) -> web.StreamResponse:
        header = request.headers.get("Authorization", "")
        if not self.authenticated(header):
            reason = (f"missing authentication credentials for REST request [{request.path_qs}]" if not header
                      else f"unable to authenticate with provided credentials for REST request [{request.path_qs}]")
            error = {"type": "security_exception", "reason": reason}
            headers = CIMultiDict([*(("WWW-Authenticate", c) for c in CHALLENGES), ("X-Elastic-Product", "Elasticsearch")])
            return web.Response(status=401, text=json.dumps({"error": {"root_cause": [error], **error}, "status": 401}),
                                content_type="application/json", headers=headers)
        assert self.session is not None
        fwd = CIMultiDict((k, v) for k, v in request.headers.items() if k.lower() not in REQUEST_DROP)
        body = await request.read() if request.body_exists else None
        out: web.StreamResponse | None = None
        try:
            # raw_path: the path and query exactly as sent (percent-encoding kept), encoded=True: not re-encoded
            async with self.session.request(request.method, URL(self.upstream + request.raw_path, encoded=True),
                                            headers=fwd, data=body, allow_redirects=False) as up:
                out = web.StreamResponse(status=up.status, reason=up.reason, headers=CIMultiDict(
                    (k, v) for k, v in up.headers.items() if k.lower() not in HOP_BY_HOP))
                await out.prepare(request)
                async for chunk in up.content.iter_chunked(1 << 16):
                    await out.write(chunk)
                await out.write_eof()
                return out
        except ClientError as e:
            if out is not None:  # failed mid-body: the status line is gone, drop the connection
                raise
            error = {"type": "proxy_exception", "reason": f"upstream {self.upstream}: {e!r}"}
            return web.json_response({"error": error, "status": 502}, status=502)


async def serve(args: argparse.Namespace) -> None:
    if args.cert and args.key:
        cert, key = Path(args.cert), Path(args.key)
    elif args.tls_dir:
        cert, key = make_tls(Path(args.tls_dir))
    else:
        sys.exit("tls_proxy: give --cert and --key, or --tls-dir")
    password, api_key = secret(args.password_file, "ES_PROXY_PASSWORD"), secret(args.api_key_file, "ES_PROXY_API_KEY")
    if password is None and api_key is None:
        sys.exit("tls_proxy: give --password-file or --api-key-file (or $ES_PROXY_PASSWORD / $ES_PROXY_API_KEY)")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    proxy = Proxy(args.upstream, args.user, password, api_key)
    # no decompression either way and no added Accept-Encoding / User-Agent: bodies pass through byte for byte
    proxy.session = ClientSession(auto_decompress=False, skip_auto_headers=("Accept-Encoding", "User-Agent"),
                                  timeout=ClientTimeout(total=None, sock_connect=10))
    app = web.Application(client_max_size=1 << 30)
    app.router.add_route("*", "/{tail:.*}", proxy.handle)
    runner = web.AppRunner(app, access_log=None, auto_decompress=False)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", args.listen_port, ssl_context=ctx).start()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    print(f"tls_proxy: https://127.0.0.1:{args.listen_port} -> {args.upstream}", file=sys.stderr)
    print("ready", flush=True)
    await stop.wait()
    await runner.cleanup()
    await proxy.session.close()


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--listen-port", type=int, required=True)
    p.add_argument("--upstream", default="http://127.0.0.1:9200", help="plaintext Elasticsearch URL")
    p.add_argument("--cert", help="server certificate (PEM, chain allowed)")
    p.add_argument("--key", help="its private key (PEM)")
    p.add_argument("--tls-dir", help="make (once) and use ca.pem, cert.pem, key.pem here")
    p.add_argument("--user", default="elastic")
    p.add_argument("--password-file")
    p.add_argument("--api-key-file")
    asyncio.run(serve(p.parse_args()))


if __name__ == "__main__":
    main()
