"""The front proxy as production runs it: Debian's nginx with deploy/nginx's configuration.

:func:`start_proxy` renders the templates with deploy/nginx/render.sh — the script the
proxy's image runs — for two upstreams of the test's choosing, and starts the nginx binary
on it (``nginx -p <tmp> -c <tmp>/nginx.conf``: free high ports, every file under ``tmp``, no
root needed). Only the main file differs from the image's (deploy/nginx/nginx.conf): where
the pid, logs and temporary files go, and an access log naming the upstream of each request.
:func:`self_signed` makes a certificate for 127.0.0.1, so HTTPS is served as with a mounted
one.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.support.processes import free_port

__all__ = ["Proxy", "missing", "self_signed", "start_proxy"]

ROOT = Path(__file__).resolve().parents[2]
RENDER = ROOT / "deploy" / "nginx" / "render.sh"

MAIN_CONF = """\
daemon off;
worker_processes 2;
{user}pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    log_format upstreams '$request_method $request_uri $status $upstream_addr';
    access_log {tmp}/access.log upstreams;
    client_body_temp_path {tmp}/client_body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    include {tmp}/conf.d/*.conf;
}}
"""


def nginx_binary() -> str | None:
    """Debian's nginx: on the PATH, or in /usr/sbin (not on a user's PATH)."""
    found = shutil.which("nginx")
    return found or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)


def missing() -> str | None:
    """Why the proxy cannot run here (``make system-deps`` installs what it needs), or
    ``None``."""
    if nginx_binary() is None:
        return "no nginx binary (Debian's package: `make system-deps` installs it)"
    if shutil.which("envsubst") is None:
        return "no envsubst (Debian's gettext-base: `make system-deps` installs it)"
    return None


@dataclass
class Proxy:
    """A running nginx: plain HTTP at ``url``, HTTPS at ``tls_url`` (when a certificate
    was given), its access log (method, URI, status, upstream address per line)."""

    proc: subprocess.Popen
    url: str
    tls_url: str
    tmp: Path

    def access_log(self) -> list[str]:
        path = self.tmp / "access.log"
        return path.read_text(encoding="utf-8").splitlines() if path.exists() else []

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()  # nginx: fast shutdown
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


def start_proxy(
    tmp: Path,
    *,
    web: str,
    openenv: str,
    certs: Path | None = None,
    env: dict[str, str] | None = None,
) -> Proxy:
    """nginx in front of ``web`` and ``openenv`` (``host:port``), configured in ``tmp``:
    HTTPS with ``certs`` (a directory with fullchain.pem and privkey.pem), plain HTTP
    redirecting there; without, plain HTTP routing. ``env``: more TAU2_PROXY_* values.
    Returns once both ports accept connections."""
    http_port, tls_port = free_port(), free_port()
    tmp.mkdir(parents=True, exist_ok=True)
    subprocess.run(  # noqa: S603 - the project's own script
        ["sh", str(RENDER), "true"],
        check=True,
        env={
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "TAU2_PROXY_CONF_DIR": str(tmp / "conf.d"),
            "TAU2_PROXY_LISTEN": f"127.0.0.1:{http_port}",
            "TAU2_PROXY_TLS_LISTEN": f"127.0.0.1:{tls_port}",
            "TAU2_PROXY_WEB": web,
            "TAU2_PROXY_OPENENV": openenv,
            "TAU2_PROXY_CERTS": str(certs or tmp / "no-certs"),
            **(env or {}),
        },
    )
    # As root, nginx's workers would run as nobody, who cannot write under tmp.
    user = "user root;\n" if os.geteuid() == 0 else ""
    main = tmp / "nginx.conf"
    main.write_text(MAIN_CONF.format(tmp=tmp, user=user), encoding="utf-8")
    binary = nginx_binary()
    assert binary is not None, missing()
    proc = subprocess.Popen(  # noqa: S603 - Debian's nginx on our configuration
        [binary, "-p", str(tmp), "-c", str(main)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    proxy = Proxy(
        proc=proc,
        url=f"http://127.0.0.1:{http_port}",
        tls_url=f"https://127.0.0.1:{tls_port}" if certs else "",
        tmp=tmp,
    )
    ports = [http_port, tls_port] if certs else [http_port]
    deadline = time.monotonic() + 20
    while not all(_accepts(port) for port in ports):
        if proc.poll() is not None:
            raise RuntimeError(
                f"nginx exited: {proc.stderr.read().decode() if proc.stderr else ''}"
            )
        if time.monotonic() > deadline:
            proxy.stop()
            raise RuntimeError("nginx did not listen within 20 s")
        time.sleep(0.05)
    return proxy


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def self_signed(directory: Path) -> Path:
    """``directory`` with ``fullchain.pem`` and ``privkey.pem``: a certificate for
    127.0.0.1 and localhost, valid for a day, its own authority (point ``SSL_CERT_FILE``
    at ``fullchain.pem`` to trust it)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "fullchain.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / "privkey.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return directory
