"""Fetching remote image references into a per-user cache, safely.

Downloads (``http``/``https``) go only to the hosts the user names (``--allow-download
HOST[,HOST...]``; ``*.example.com`` for its subdomains, ``host:port`` for one port), follow a
redirect only to a named host (never ``https`` to ``http``), stop reading past a size cap
(``max_download_bytes``, 64 MiB by default; a larger ``Content-Length`` is refused before the
body is read), and time out on a connect or a read that stalls (``timeout``) and on a whole
transfer that takes longer than ten times that. They go through the proxy the environment
names, as urllib and requests choose it (``proxy_for``: ``HTTPS_PROXY``/``HTTP_PROXY``/
``ALL_PROXY`` unless ``NO_PROXY`` names the host; https through a CONNECT tunnel, an IPv6
target in brackets, the TLS certificate still checked against the image's host); the
allow-list judges the image's host,
never the proxy. S3 reads (``cloud``, botocore) follow the same variables by themselves.

The cache lives in the user's own cache folder (``$NPU_DATA_CACHE/downloads``, else
``$XDG_CACHE_HOME/npu-data/downloads``, else ``~/.cache/npu-data/downloads``), created with
mode 0700 and refused when another user owns it. Each entry is written atomically (a private
temporary file in the same folder, fsync, rename) with its size and SHA-256 recorded beside it
(``<entry>.json``); an entry is used only when it is a regular file of ours whose size and
digest match the record, else it is fetched again. A download's entry is keyed on its URL
without the parameters of a signing (``redact.unsigned_url``), so the same object signed
again is the same entry: used as it is for the URL that filled it, and for another signing
only once the server answers a conditional GET (the recorded ETag / Last-Modified) with 304;
a changed object, or one without either, is downloaded again. The record holds no URL, only
its SHA-256.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import ipaddress
import json
import os
import re
import socket
import ssl
import stat
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO
from urllib.parse import SplitResult, unquote, urljoin, urlsplit

from npu_data.annotations.redact import redact_text, unsigned_url
from npu_data.common.atomic import atomic_file, atomic_write_bytes
from npu_data.common.cache import cache_root
from npu_data.common.cache import private_dir as _private_dir
from npu_data.common.hashing import file_sha256
from npu_data.errors import UserError, UserTypeError, UserValueError

MiB = 1 << 20
DEFAULT_MAX_BYTES = 64 * MiB
DEFAULT_TIMEOUT = 30.0
MAX_REDIRECTS = 5
CHUNK = 1 << 16
REDIRECTS = (301, 302, 303, 307, 308)
_MAX_LINE = 65536


class ImageError(UserError):
    """An image cannot be found, read or decoded; ``reason`` says why (the task is rejected),
    naming the ``option`` that fixes it where one does (``UserError``)."""

    def __init__(self, reason: str, status: int | None = None, *,
                 option: str | tuple[str, ...] = ()) -> None:
        super().__init__(redact_text(reason), option=option)
        self.status = status  # the HTTP status a server refused the download with

    @property
    def reason(self) -> str:
        """Why, options spelled for the audience (the rejection reason written)."""
        return str(self)


# ------------------------------------------------------------------------------ allowed hosts
def parse_hosts(value: Any) -> tuple[str, ...]:
    """The hosts downloads may come from, from ``allow_download`` (``"a,b"``, a list of such
    strings, or nothing). ``True`` is refused: the hosts must be named."""
    if value is None or value is False:
        return ()
    if value is True:
        raise UserValueError("allow_download=True does not say which hosts to download from: "
                             "name them, e.g. allow_download=['images.example.com']")
    items = [value] if isinstance(value, str) else list(value)
    hosts: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise UserTypeError(f"{{allow_download}} {item!r}: not a host name — pass host "
                                "names such as 'images.example.com'", option="allow_download")
        if not item.strip():
            raise UserValueError("{allow_download} needs the hosts to download from, e.g. "
                                 "images.example.com,cdn.example.com (any other host is "
                                 "refused)", option="allow_download")
        for h in item.split(","):
            h = h.strip().lower()
            if not h:
                continue
            if "/" in h or "@" in h or "?" in h or h in ("*", "*.") or " " in h:
                raise UserValueError(f"{{allow_download}} {redact_text(h)}: name a host "
                                     "(images.example.com, host:port or *.example.com), not a "
                                     "URL or every host", option="allow_download")
            hosts.append(h.rstrip("."))
    return tuple(dict.fromkeys(hosts))


def _split_host(entry: str) -> tuple[str, int | None]:
    if entry.startswith("["):  # [::1]:8080
        name, _, rest = entry[1:].partition("]")
        return name, int(rest[1:]) if rest.startswith(":") and rest[1:].isdigit() else None
    if entry.count(":") == 1:
        name, _, port = entry.partition(":")
        if port.isdigit():
            return name, int(port)
    return entry, None


def host_allowed(url: str, hosts: Iterable[str]) -> bool:
    """Whether ``url``'s host (and port) is one of ``hosts``."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower().rstrip(".")
    if not host:
        return False
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return False
    for entry in hosts:
        name, eport = _split_host(entry)
        if eport is not None and eport != port:
            continue
        if name.startswith("*."):
            if host.endswith(name[1:]):
                return True
        elif host == name:
            return True
    return False


# ------------------------------------------------------------------------------------ cache
def default_cache_dir() -> Path:
    """Where downloads are cached for this user."""
    return cache_root("downloads")


def private_dir(path: Path) -> Path:
    """``path`` as a download cache only this user can read (see common.cache.private_dir)."""
    return _private_dir(path, "the download cache")


def _meta_path(entry: Path) -> Path:
    return entry.with_name(entry.name + ".json")


def cached(entry: Path, check: dict[str, Any] | None = None) -> bool:
    """Whether ``entry`` is a verified cache entry: a regular file of ours whose size and
    SHA-256 match its record (and whose record holds ``check``'s values)."""
    try:
        st = os.lstat(entry)
        meta = json.loads(_meta_path(entry).read_bytes())
    except (OSError, ValueError):
        return False
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or not isinstance(meta, dict):
        return False
    if meta.get("size") != st.st_size:
        return False
    if check and any(meta.get(k) != v for k, v in check.items()):
        return False
    try:
        return file_sha256(entry) == meta.get("sha256")
    except OSError:
        return False


def store(entry: Path, fill: Callable[[BinaryIO], None],
          extra: dict[str, Any] | None = None) -> Path:
    """Write a cache entry atomically: ``fill`` writes the body to a private temporary file
    in the cache folder; its size and SHA-256 (and ``extra``) are recorded beside it."""
    with atomic_file(entry, private=True) as raw:
        sink = _HashingWriter(raw)
        fill(sink)  # type: ignore[arg-type]  # an error here leaves the old entry as it was
        _meta_path(entry).unlink(missing_ok=True)  # an entry without its record is never used
    record = {"sha256": sink.sha.hexdigest(), "size": sink.size, **(extra or {})}
    atomic_write_bytes(_meta_path(entry), json.dumps(record, sort_keys=True).encode(),
                       private=True)
    return entry


class _HashingWriter:
    def __init__(self, raw: BinaryIO) -> None:
        self.raw, self.sha, self.size = raw, hashlib.sha256(), 0

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        self.size += len(data)
        return self.raw.write(data)


def entry_name(key: str, path: str) -> str:
    """The cache file name for ``key`` (keeps the source's suffix, for humans)."""
    suffix = PurePosixPath(path).suffix[:10]
    if not re.fullmatch(r"\.[A-Za-z0-9]*", suffix or "."):
        suffix = ""
    return hashlib.sha256(key.encode()).hexdigest() + suffix


# ---------------------------------------------------------------------------------- downloads
def _mib(n: int) -> str:
    return f"{n / MiB:g} MiB"


def download(url: str, hosts: tuple[str, ...], cache: Path, max_bytes: int = DEFAULT_MAX_BYTES,
             timeout: float = DEFAULT_TIMEOUT) -> Path:
    """The cached, verified local copy of ``url`` (fetched when the cache has none)."""
    host = urlsplit(url).hostname or "?"
    if not hosts:
        raise ImageError(f"{url}: a URL — pass {{allow_download}} {host} to fetch images from "
                         f"{host} (downloads come only from the hosts named)",
                         option="allow_download")
    if not host_allowed(url, hosts):
        raise ImageError(f"{url}: host {host} is not one that {{allow_download}} names "
                         f"({','.join(hosts)}) — refused; add it if you trust it",
                         option="allow_download")
    entry = private_dir(cache) / entry_name(unsigned_url(url), urlsplit(url).path)
    seen = hashlib.sha256(url.encode()).hexdigest()  # which URL (signature) it came from
    with _lock(entry):
        meta = _record(entry) if cached(entry) and entry.stat().st_size <= max_bytes else None
        if meta is not None and meta.get("url") == seen:  # the cap holds for a hit too
            return entry
        ask = {}  # another signing of the object: is it still the one we have?
        if meta is not None and isinstance(meta.get("etag"), str):
            ask["If-None-Match"] = meta["etag"]
        if meta is not None and isinstance(meta.get("last_modified"), str):
            ask["If-Modified-Since"] = meta["last_modified"]
        got: dict[str, Any] = {"url": seen}

        def fill(sink: BinaryIO) -> None:
            got.update(_http_get(url, hosts, sink, max_bytes, timeout, ask))

        try:
            return store(entry, fill, got)
        except _NotModified:  # the server says our copy is its current one
            assert meta is not None
            atomic_write_bytes(_meta_path(entry), json.dumps(
                {**meta, "url": seen}, sort_keys=True).encode(), private=True)
            return entry


_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


def _lock(entry: Path) -> threading.Lock:
    """One fetch of a cache entry at a time in this process (parallel signings of one
    object share the download)."""
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(str(entry), threading.Lock())


def _record(entry: Path) -> dict[str, Any] | None:
    try:
        meta = json.loads(_meta_path(entry).read_bytes())
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


class _NotModified(Exception):
    """The server answered a conditional request with 304: the cached copy is current."""


def proxy_for(url: str) -> tuple[str, int, dict[str, str]] | None:
    """The proxy ``url`` is fetched through, as urllib and requests choose it: ``HTTPS_PROXY``
    / ``HTTP_PROXY`` by the URL's scheme (else ``ALL_PROXY``), unless ``NO_PROXY`` names the
    host (a domain suffix, ``host:port``, an address or network such as ``10.0.0.0/8``, or
    ``*``). Returns (proxy host, port, its ``Proxy-Authorization`` header), or None."""
    parts = urlsplit(url)
    proxies = urllib.request.getproxies_environment()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    host = (parts.hostname or "").lower()
    port = parts.port or (443 if parts.scheme == "https" else 80)
    if not proxy or _bypass(host, port, proxies.get("no", "")):
        return None
    if "://" not in proxy:
        proxy = "http://" + proxy
    p = urlsplit(proxy)
    try:
        pport = p.port or 80
    except ValueError:
        pport = -1
    if p.scheme != "http" or not p.hostname or pport < 0:
        raise ImageError(f"proxy {proxy} ({parts.scheme}_proxy): expected http://host:port — "
                         "only plain http proxies are supported (https targets go through "
                         "them by CONNECT)")
    auth: dict[str, str] = {}
    if p.username is not None:
        cred = f"{unquote(p.username)}:{unquote(p.password or '')}".encode()
        auth["Proxy-Authorization"] = "Basic " + base64.b64encode(cred).decode()
    return p.hostname, pport, auth


def _bypass(host: str, port: int | None, no_proxy: str) -> bool:
    """Whether ``NO_PROXY`` names ``host`` (urllib's and requests' rules: ``*``, a domain and
    its subdomains with or without a leading dot, ``host:port``, an address, a network)."""
    try:
        addr: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(host)
    except ValueError:
        addr = None
    for entry in no_proxy.lower().split(","):
        entry = entry.strip()
        if entry == "*":
            return True
        if not entry:
            continue
        if "/" in entry:
            try:
                if addr is not None and addr in ipaddress.ip_network(entry, strict=False):
                    return True
            except ValueError:
                pass
            continue
        name, eport = _split_host(entry)
        if eport is not None and eport != port:
            continue
        name = name.lstrip(".").rstrip(".")
        if host == name or (addr is None and host.endswith("." + name)):
            return True
    return False


def _connect(parts: SplitResult, timeout: float) -> tuple[http.client.HTTPConnection, str,
                                                          dict[str, str], str]:
    """(connection, request target, extra headers, ' through proxy P' or '') for ``parts``:
    straight to the host, or through the environment's proxy (https by a CONNECT tunnel,
    whose TLS is still checked against the target host)."""
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    host, port = parts.hostname or "", parts.port
    proxy = proxy_for(parts.geturl())
    conn: http.client.HTTPConnection
    if proxy is None:
        if parts.scheme == "https":
            conn = http.client.HTTPSConnection(host, port, timeout=timeout,
                                               context=ssl.create_default_context())
        else:
            conn = http.client.HTTPConnection(host, port, timeout=timeout)
        return conn, path, {}, ""
    phost, pport, auth = proxy
    via = f" through proxy {phost}:{pport}"
    if parts.scheme == "https":
        conn = _Tunnel(phost, pport, (host, port or 443, auth), timeout=timeout,
                       context=ssl.create_default_context())
        return conn, path, {"Host": _netloc(host, port, 443)}, via
    conn = http.client.HTTPConnection(phost, pport, timeout=timeout)
    target = f"http://{_netloc(host, port, 0)}{path}"  # absolute, no user info
    return conn, target, auth, via


def _netloc(host: str, port: int | None, default: int) -> str:
    """``host[:port]`` as a URL or ``Host``/``CONNECT`` line writes it (IPv6 in brackets)."""
    name = f"[{host}]" if ":" in host else host
    return f"{name}:{port}" if port and port != default else name


class _Tunnel(http.client.HTTPSConnection):
    """An https connection through a proxy's CONNECT tunnel, TLS checked against the target.
    (``set_tunnel`` of Python < 3.12 writes an IPv6 target without its brackets.)"""

    def __init__(self, proxy: str, port: int, target: tuple[str, int, dict[str, str]],
                 timeout: float, context: ssl.SSLContext) -> None:
        super().__init__(proxy, port, timeout=timeout, context=context)
        self.target, self.tls = target, context

    def connect(self) -> None:
        host, port, headers = self.target
        sock = socket.create_connection((self.host, self.port), self.timeout)
        try:
            where = _netloc(host, port, 0)
            lines = [f"CONNECT {where} HTTP/1.1", f"Host: {where}",
                     *(f"{k}: {v}" for k, v in headers.items())]
            sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
            reply = sock.makefile("rb", buffering=0)  # unbuffered: no TLS byte read here
            status = reply.readline(_MAX_LINE).decode("latin-1").split(None, 2)
            while reply.readline(_MAX_LINE) not in (b"\r\n", b"\n", b""):
                pass
            reply.close()
            if len(status) < 2 or status[1] != "200":
                raise OSError(f"Tunnel connection failed: {' '.join(status[1:]).strip()}")
            self.sock = self.tls.wrap_socket(sock, server_hostname=host)
        except BaseException:
            sock.close()
            raise


def _http_get(url: str, hosts: tuple[str, ...], sink: BinaryIO, max_bytes: int,
              timeout: float, ask: dict[str, str] | None = None) -> dict[str, str]:
    """GET ``url`` into ``sink`` (checked: hosts, redirects, cap, timeouts); ``ask``: the
    conditional headers of a cached copy (a 304 raises ``_NotModified``). Returns the
    response's validators (``etag``, ``last_modified``) for the cache record."""
    shown = url
    deadline = time.monotonic() + 10 * timeout
    for _ in range(MAX_REDIRECTS + 1):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ImageError(f"{shown}: not an http(s) URL — refused")
        conn, target, extra, via = _connect(parts, timeout)
        try:
            conn.request("GET", target, headers={"User-Agent": "npu-data",
                                                 "Accept-Encoding": "identity", **extra,
                                                 **(ask or {})})
            resp = conn.getresponse()
            if resp.status == 304 and ask:
                raise _NotModified
            if resp.status in REDIRECTS:
                location = resp.getheader("Location")
                if not location:
                    raise ImageError(f"{shown}: download failed (HTTP {resp.status} without "
                                     "a Location)")
                nxt = urljoin(url, location)
                np_ = urlsplit(nxt)
                if np_.scheme not in ("http", "https") or not host_allowed(nxt, hosts):
                    raise ImageError(f"{shown}: redirects to host {np_.hostname or nxt}, which "
                                     "{allow_download} does not name — refused; add it if "
                                     "you trust it", option="allow_download")
                if parts.scheme == "https" and np_.scheme == "http":
                    raise ImageError(f"{shown}: redirects from https to http — refused")
                url = nxt
                continue
            if resp.status != 200:
                raise ImageError(f"{shown}: download failed (HTTP {resp.status} "
                                 f"{resp.reason}{via})", status=resp.status)
            length = resp.getheader("Content-Length")
            if length and length.strip().isdigit() and int(length) > max_bytes:
                raise ImageError(f"{shown}: {int(length)} bytes is larger than the download "
                                 f"cap of {_mib(max_bytes)} — refused (raise "
                                 "{max_download_bytes} if it is genuine)",
                                 option="max_download_bytes")
            total = 0
            while True:
                if time.monotonic() > deadline:
                    raise ImageError(f"{shown}: download timed out (over {10 * timeout:g} s "
                                     "in all) — raise {timeout} for a slow server",
                                     option="timeout")
                chunk = resp.read1(CHUNK)
                if not chunk:
                    break
                total += len(chunk)
                if total > max_bytes:
                    raise ImageError(f"{shown}: larger than the download cap of "
                                     f"{_mib(max_bytes)} — refused (raise {{max_download_bytes}} "
                                     "if it is genuine)", option="max_download_bytes")
                sink.write(chunk)
            if length and length.strip().isdigit() and total != int(length):
                raise ImageError(f"{shown}: download truncated ({total} of {length} bytes)")
            return {k: v for k, v in (("etag", resp.getheader("ETag")),
                                      ("last_modified", resp.getheader("Last-Modified"))) if v}
        except ImageError:
            raise
        except TimeoutError:
            raise ImageError(f"{shown}: download timed out (no answer within {timeout:g} s"
                             f"{via}) — raise {{timeout}} for a slow server",
                             option="timeout") from None
        except http.client.IncompleteRead as e:
            raise ImageError(f"{shown}: download truncated ({len(e.partial)} bytes "
                             "received)") from None
        except (OSError, http.client.HTTPException, ValueError) as e:
            raise ImageError(f"{shown}: download failed ({e or type(e).__name__}{via})") from None
        finally:
            conn.close()
    raise ImageError(f"{shown}: download failed (more than {MAX_REDIRECTS} redirects)")
