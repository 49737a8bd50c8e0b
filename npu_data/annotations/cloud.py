"""Cloud storage image references, read through fsspec with the user's own credentials.

What Label Studio writes for images in cloud storage, and how each is read:

- ``s3://bucket/key``, ``gs://bucket/key``, ``azure-blob://container/blob``: through s3fs,
  gcsfs or adlfs (the last two an extra install; their absence is a one-line error naming the
  package). Credentials are the user's own, found the way each SDK finds them (S3:
  ``AWS_ACCESS_KEY_ID``/``AWS_PROFILE``/``~/.aws``; GCS: ``GOOGLE_APPLICATION_CREDENTIALS`` or
  gcloud's; Azure: ``AZURE_STORAGE_CONNECTION_STRING``/``AZURE_STORAGE_ACCOUNT_NAME`` and a
  key or SAS). ``storage_endpoint`` (``--storage-endpoint``) points S3 at an S3-compatible
  store (MinIO, Huawei OBS, ...); ``NPU_DATA_S3_ENDPOINT`` (as for remote datasets) and ``AWS_ENDPOINT_URL(_S3)`` too.
- Label Studio's storage links ``/tasks/<id>/resolve/?fileuri=<base64>`` (also ``/presign/``
  and ``/projects/<id>/resolve/``, relative or behind the server's address): ``fileuri`` is
  the URL-safe base64 of the storage URI (older servers: the URI URL-quoted), read as above.
- Presigned https URLs (AWS SigV2/V4 on ``*.amazonaws.com`` or on the storage endpoint,
  path-style or virtual-hosted; GCS ``storage.googleapis.com``; Azure ``*.blob.core.windows.
  net``): the bucket and key are taken from the URL and read with the user's credentials (a
  presigned URL expires; the export outlives it). Label Studio re-encodes such URLs
  (``%2F`` becomes ``%252F``): a key with ``%25`` is tried decoded twice, then once.

Objects are checked against their size (refused above ``max_download_bytes`` before any byte
is read; a short read is an error), read in parallel by the import (``prefetch``), and cached
per user like downloads (``fetch``), the record also holding the object's ETag: an entry is
used only if its digest matches and the object in the bucket still has that ETag and size.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import importlib
import importlib.util
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from npu_data.annotations import fetch
from npu_data.annotations.fetch import ImageError
from npu_data.annotations.redact import redact_text
from npu_data.errors import UserTypeError, UserValueError

# reference scheme -> (fsspec protocol, package, what it is)
SCHEMES = {"s3": ("s3", "s3fs", "S3"), "s3a": ("s3", "s3fs", "S3"),
           "gs": ("gcs", "gcsfs", "Google Cloud Storage"),
           "gcs": ("gcs", "gcsfs", "Google Cloud Storage"),
           "azure-blob": ("abfs", "adlfs", "Azure Blob Storage"),
           "az": ("abfs", "adlfs", "Azure Blob Storage"),
           "abfs": ("abfs", "adlfs", "Azure Blob Storage")}
PREFIXES = tuple(f"{s}://" for s in SCHEMES)
_PROXY = re.compile(r"/(?:tasks|projects)/\d+/(?:resolve|presign)/?")
_SIGNED = {"x-amz-signature", "x-amz-credential", "signature", "awsaccesskeyid", "accesskeyid",
           "x-goog-signature", "x-goog-credential", "googleaccessid", "sig"}
_AWS_PATH = re.compile(r"s3(?:[.-][a-z0-9-]+)*\.amazonaws\.com(?:\.cn)?")
_AWS_VHOST = re.compile(r"(.+?)\.s3(?:[.-][a-z0-9-]+)*\.amazonaws\.com(?:\.cn)?")
_AZURE = re.compile(r"([a-z0-9]+)\.blob\.core\.windows\.net")


@dataclass(frozen=True)
class CloudObject:
    """An object in a bucket; ``keys``: its key in the order to try (decodings of a URL)."""

    protocol: str  # fsspec protocol: s3, gcs, abfs
    bucket: str
    keys: tuple[str, ...]
    account: str | None = None  # Azure storage account, from a blob URL's host


def endpoint(options: Any) -> str | None:
    """The S3-compatible endpoint: ``storage_endpoint``, else botocore's environment."""
    return (getattr(options, "storage_endpoint", None) or os.environ.get("NPU_DATA_S3_ENDPOINT")
            or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
            or None)


def check_endpoint(url: str | None) -> str | None:
    """``url`` if it is a usable ``storage_endpoint`` (``--storage-endpoint``;
    ``UserValueError`` otherwise)."""
    if not url:
        return None
    if not isinstance(url, str):
        raise UserTypeError(f"{{storage_endpoint}}: {type(url).__name__}, not a URL — pass "
                            "http(s)://host[:port]", option="storage_endpoint")
    parts = urlsplit(url)
    if "@" in url or parts.query or parts.username or parts.password:  # before any echo
        raise UserValueError("{storage_endpoint}: credentials do not belong in the URL — set "
                             "them in the environment (AWS_ACCESS_KEY_ID, "
                             "AWS_SECRET_ACCESS_KEY) or a profile (AWS_PROFILE)",
                             option="storage_endpoint")
    if "://" not in url:
        raise UserValueError(f"{{storage_endpoint={redact_text(url)}}}: no scheme — add it: "
                             f"http://{redact_text(url)} (or https://)",
                             option="storage_endpoint")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UserValueError(f"{{storage_endpoint={redact_text(url)}}}: expected "
                             "http(s)://host[:port] (e.g. https://obs.cn-north-4.myhuaweicloud"
                             ".com)", option="storage_endpoint")
    return url


def is_cloud(ref: str) -> bool:
    """Whether ``ref`` may name cloud storage (a scheme, a storage link, a signed URL)."""
    return ref.startswith(PREFIXES) or _PROXY.fullmatch(urlsplit(ref).path) is not None or (
        ref.startswith(("http://", "https://")) and bool(_signed_params(ref)))


def is_signed(ref: str) -> bool:
    """Whether ``ref`` is an http(s) URL carrying a signature (a presigned URL)."""
    return ref.startswith(("http://", "https://")) and bool(_signed_params(ref))


def _signed_params(ref: str) -> set[str]:
    return {k.lower() for k in parse_qs(urlsplit(ref).query, keep_blank_values=True)} & _SIGNED


def _keys(raw: str) -> tuple[str, ...]:
    once = unquote(raw)
    twice = unquote(once)
    return (twice, once) if "%25" in raw and twice != once else (once,)


def _split(rest: str) -> tuple[str, str]:
    bucket, _, key = rest.lstrip("/").partition("/")
    return bucket, key


def parse(ref: str, options: Any) -> CloudObject | None:
    """The object ``ref`` names, or None when it is not cloud storage (ImageError for a
    storage link or URI that cannot be read)."""
    if _PROXY.fullmatch(urlsplit(ref).path):
        uri = _proxy_uri(ref)
        if not uri.startswith(PREFIXES):
            raise ImageError(f"{ref}: a Label Studio storage link to {uri}, which is not cloud "
                             "storage — refused")
        return parse(uri, options)
    if ref.startswith(PREFIXES):
        scheme, _, rest = ref.partition("://")
        bucket, key = _split(rest)
        if not bucket or not key:
            raise ImageError(f"{ref}: expected {scheme}://<bucket>/<key>")
        keys = (key,) if unquote(key) == key else (key, unquote(key))
        return CloudObject(SCHEMES[scheme][0], bucket, keys)
    if ref.startswith(("http://", "https://")) and _signed_params(ref):
        return _presigned(ref, endpoint(options))
    return None


def _proxy_uri(ref: str) -> str:
    """The storage URI of a ``/tasks/<id>/resolve/?fileuri=`` link (as the server decodes
    it: URL-safe base64, else URL-quoted)."""
    values = parse_qs(urlsplit(ref).query, keep_blank_values=True).get("fileuri")
    if not values or not values[0]:
        raise ImageError(f"{ref}: a Label Studio storage link without ?fileuri=")
    raw = values[0].replace(" ", "+")  # parse_qs read a '+' of standard base64 as a space
    try:
        b64 = raw.replace("+", "-").replace("/", "_")
        uri = base64.urlsafe_b64decode((b64 + "=" * (-len(b64) % 4)).encode()).decode("utf-8")
        if "://" not in uri:
            raise ValueError(uri)
        return uri
    except (ValueError, UnicodeDecodeError, binascii.Error):
        return unquote(raw)


def _presigned(ref: str, ep: str | None) -> CloudObject | None:
    parts = urlsplit(ref)
    host = (parts.hostname or "").lower()
    port = parts.port or (443 if parts.scheme == "https" else 80)
    if ep:
        e = urlsplit(ep)
        ehost, eport = (e.hostname or "").lower(), e.port or (443 if e.scheme == "https" else 80)
        if port == eport and host == ehost:
            bucket, key = _split(parts.path)
            return CloudObject("s3", unquote(bucket), _keys(key))
        if port == eport and host.endswith("." + ehost):
            return CloudObject("s3", host[:-len(ehost) - 1], _keys(parts.path.lstrip("/")))
    if _AWS_PATH.fullmatch(host):
        bucket, key = _split(parts.path)
        return CloudObject("s3", unquote(bucket), _keys(key))
    m = _AWS_VHOST.fullmatch(host)
    if m:
        return CloudObject("s3", m.group(1), _keys(parts.path.lstrip("/")))
    if host == "storage.googleapis.com":
        bucket, key = _split(parts.path)
        return CloudObject("gcs", unquote(bucket), _keys(key))
    if host.endswith(".storage.googleapis.com"):
        return CloudObject("gcs", host[:-len(".storage.googleapis.com")],
                           _keys(parts.path.lstrip("/")))
    m = _AZURE.fullmatch(host)
    if m:
        container, key = _split(parts.path)
        return CloudObject("abfs", unquote(container), _keys(key), account=m.group(1))
    return None  # a signed URL of some other host: an ordinary download


# ------------------------------------------------------------------------------- filesystems
_FS: dict[tuple[Any, ...], Any] = {}
_FS_LOCK = threading.Lock()


def _label(protocol: str) -> tuple[str, str]:
    for proto, pkg, what in SCHEMES.values():
        if proto == protocol:
            return pkg, what
    raise KeyError(protocol)


def filesystem(obj: CloudObject, options: Any) -> Any:
    """The fsspec filesystem for ``obj`` (one per process, endpoint and account)."""
    ep = endpoint(options) if obj.protocol == "s3" else None
    timeout = float(getattr(options, "timeout", fetch.DEFAULT_TIMEOUT))
    key = (os.getpid(), obj.protocol, ep, obj.account, timeout)
    with _FS_LOCK:
        if key in _FS:
            return _FS[key]
        pkg, what = _label(obj.protocol)
        for need in ("fsspec", pkg):
            if importlib.util.find_spec(need) is None:
                raise ImageError(f"{obj.protocol}://{obj.bucket}/{obj.keys[0]}: reading {what} "
                                 f"needs {need} — pip install {need}")
        fsspec = importlib.import_module("fsspec")
        kw: dict[str, Any] = {"skip_instance_cache": True}
        if obj.protocol == "s3":
            kw["config_kwargs"] = {"connect_timeout": timeout, "read_timeout": timeout,
                                   "retries": {"max_attempts": 3, "mode": "standard"}}
            if ep:
                kw["endpoint_url"] = ep
        elif obj.account:
            kw["account_name"] = obj.account
        try:
            fs = fsspec.filesystem(obj.protocol, **kw)
        except Exception as e:  # noqa: BLE001 - any SDK set-up failure is the user's to fix
            raise ImageError(f"{obj.protocol}://{obj.bucket}: cannot open {what} "
                             f"({type(e).__name__}: {e})") from None
        _FS[key] = fs
        return fs


def _write(data: bytes, sink: Any) -> None:
    sink.write(data)


def _why(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return f"{type(e).__name__}: {text[:300]}"


def read(ref: str, obj: CloudObject, options: Any, cache: Path) -> Path:
    """The cached, verified local copy of ``obj`` (read when the cache has none)."""
    fs = filesystem(obj, options)
    what = _label(obj.protocol)[1]
    max_bytes = int(getattr(options, "max_download_bytes", fetch.DEFAULT_MAX_BYTES))
    s3 = obj.protocol == "s3"
    hint = ("check the credentials (AWS_PROFILE / AWS_ACCESS_KEY_ID, ~/.aws) and "
            "{storage_endpoint}" if s3 else f"check the {what} credentials")
    endpoint_fix = ("storage_endpoint",) if s3 else ()
    for key in obj.keys:
        path = f"{obj.bucket}/{key}"
        try:
            info = fs.info(path)
        except FileNotFoundError:
            continue
        except Exception as e:  # noqa: BLE001 - SDK errors vary; each is one line here
            raise ImageError(f"{ref}: cannot read it from {what} ({_why(e)}) — {hint}",
                             option=endpoint_fix) from None
        if info.get("type") == "directory":
            continue
        size = info.get("size")
        if isinstance(size, int) and size > max_bytes:
            raise ImageError(f"{ref}: {size} bytes is larger than the download cap of "
                             f"{max_bytes / fetch.MiB:g} MiB — refused (raise "
                             "{max_download_bytes} if it is genuine)", option="max_download_bytes")
        etag = str(info.get("ETag") or info.get("etag") or info.get("md5Hash") or "")
        source = {"etag": etag, "source_size": size}
        name = "\0".join((obj.protocol, endpoint(options) or "", obj.account or "", path))
        entry = fetch.private_dir(cache) / fetch.entry_name(name, key)
        if fetch.cached(entry, source):
            return entry
        try:
            data = fs.cat_file(path) if isinstance(size, int) else fs.cat_file(
                path, start=0, end=max_bytes + 1)
        except FileNotFoundError:
            raise ImageError(f"{ref}: gone from {what} while reading it") from None
        except Exception as e:  # noqa: BLE001
            raise ImageError(f"{ref}: cannot read it from {what} ({_why(e)}) — {hint}",
                             option=endpoint_fix) from None
        if len(data) > max_bytes:
            raise ImageError(f"{ref}: larger than the download cap of "
                             f"{max_bytes / fetch.MiB:g} MiB — refused (raise "
                             "{max_download_bytes} if it is genuine)", option="max_download_bytes")
        if isinstance(size, int) and len(data) != size:
            raise ImageError(f"{ref}: read {len(data)} of {size} bytes — truncated")
        md5 = info.get("md5Hash")  # GCS: base64 MD5 of the content (S3 ETags often are not)
        if md5 and base64.b64encode(hashlib.md5(data).digest()).decode() != md5:  # noqa: S324
            raise ImageError(f"{ref}: the bytes read do not match the object's MD5 — corrupt "
                             "transfer, try again")
        return fetch.store(entry, functools.partial(_write, data), source)
    raise ImageError(f"{ref}: no such object in {what} bucket {obj.bucket} — check the key, "
                     f"the bucket{' and {storage_endpoint}' if s3 else ''}", option=endpoint_fix)
