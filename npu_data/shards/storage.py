"""Storage access: a folder URL on any fsspec file system, with its endpoint and the
credentials kept out of every message.

``RemoteFolder(url, storage_options)`` builds the file system lazily (never across a fork,
never pickled), takes an S3-compatible endpoint from the options or the environment
(``NPU_DATA_S3_ENDPOINT``, else ``AWS_ENDPOINT_URL``) and turns every SDK error into a
one-line ``UserError`` naming the URL (user info and signed queries redacted, every
credential value of the options and the environment blanked, ``clean``); a URL with
``user:password@``, or an object store's URL with any user info (a key id), is refused
(``redact.url_credentials``). ``shards.download`` fetches shard files through it,
``shards.remote`` keeps them in the node-local cache, ``shards.upload`` and ``shards.lease``
write through it: ``write`` with a condition (``If-None-Match: *`` to create, ``If-Match`` on
an ETag to replace) where the store has conditional writes (S3 and S3-compatible stores;
``Conflict`` when the store refuses it), plainly elsewhere; ``stamp`` is an object's ETag and
age by the store's clock.
"""

from __future__ import annotations

import contextlib
import email.utils
import hashlib
import logging
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from npu_data.annotations.redact import redact_text, redact_url, url_credentials
from npu_data.errors import UserError

log = logging.getLogger(__name__)
ENDPOINT_VARS = ("NPU_DATA_S3_ENDPOINT", "AWS_ENDPOINT_URL")
SECRET_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")


class Conflict(UserError):
    """A conditional write the store refused: the object ``rel`` is not the version the
    writer saw."""

    rel = ""


@dataclass(frozen=True)
class Stamp:
    """An object's ETag and its age (seconds since its last write, by the store's clock where
    the store says what time it is: S3's ``Date`` header; else this node's)."""

    etag: str
    age: float


def _refused(exc: BaseException) -> bool:
    """Whether ``exc`` is the store refusing a write's condition (HTTP 412)."""
    return _store_says(exc, "PreconditionFailed", 412, FileExistsError)


def _unsupported(exc: BaseException) -> bool:
    """Whether ``exc`` is a store that does not know conditional writes (HTTP 501)."""
    return _store_says(exc, "NotImplemented", 501)


def _store_says(exc: BaseException | None, code: str, status: int,
                local: type[BaseException] | None = None) -> bool:
    """Whether ``exc`` or an exception behind it is a store's answer ``code`` / HTTP
    ``status`` (boto's ``response`` dict), or a ``local`` one (a local store's own)."""
    while exc is not None:
        if local is not None and isinstance(exc, local):
            return True
        err = getattr(exc, "response", None)
        if isinstance(err, dict) and (err.get("Error", {}).get("Code") == code
                                      or err.get("ResponseMetadata", {})
                                      .get("HTTPStatusCode") == status):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def object_tag(info: dict[str, Any]) -> str:
    """An object's ETag from fsspec info, unquoted ("" where the store keeps none)."""
    return str(info.get("ETag") or info.get("etag") or info.get("md5") or "").strip('"')


def _quoted(etag: str) -> str:
    return etag if etag.startswith('"') else f'"{etag}"'


def is_url(path: Any) -> bool:
    """True for ``scheme://...`` strings (s3://, gs://, memory://, file://, ...)."""
    return isinstance(path, str) and re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", path) is not None


def endpoint_options(endpoint: str | None) -> dict[str, Any]:
    """fsspec storage options naming an S3-compatible ``endpoint`` (the CLI's
    ``--storage-endpoint``); empty for None (then the environment's, see ENDPOINT_VARS)."""
    from npu_data.annotations.cloud import check_endpoint

    check_endpoint(endpoint)  # one rule for every command's --storage-endpoint
    return {"client_kwargs": {"endpoint_url": endpoint}} if endpoint else {}


def add_remote_arguments(p: Any) -> None:
    """``--cache-dir`` and ``--storage-endpoint`` of the commands that read a dataset URL."""
    p.add_argument("--cache-dir", default=None,
                   help="node-local cache of a URL's shards (default: the user's npu-data "
                        "cache, remote/)")
    p.add_argument("--storage-endpoint", default=None,
                   help=f"S3-compatible endpoint of the URL (MinIO, Huawei OBS; default: "
                        f"${ENDPOINT_VARS[0]}, else ${ENDPOINT_VARS[1]})")


def option_secrets(options: dict[str, Any]) -> list[str]:
    """The credential values of fsspec storage options (``key``, ``secret``, ``token``, ...,
    top level or in ``client_kwargs``), to blank out of messages."""
    out = [os.environ.get(v, "") for v in SECRET_VARS]
    for key in ("key", "secret", "token", "password", "sas_token", "account_key",
                "connection_string", "aws_access_key_id", "aws_secret_access_key",
                "aws_session_token"):
        for where in (options, options.get("client_kwargs") or {}):
            if isinstance(where, dict) and isinstance(where.get(key), str):
                out.append(where[key])
    return [v for v in out if len(v) >= 4]


def clean(text: Any, options: dict[str, Any]) -> str:
    """``text`` as a message may show it: URLs redacted (``redact_text``) and the storage
    options' credential values blanked."""
    text = redact_text(text)
    for secret in option_secrets(options):
        text = text.replace(secret, "***")
    return text


def with_endpoint(url: str, options: dict[str, Any]) -> dict[str, Any]:
    opts = dict(options)
    if not url.lower().startswith(("s3://", "s3a://")):
        return opts
    client = dict(opts.get("client_kwargs") or {})
    if "endpoint_url" not in client and "endpoint_url" not in opts:
        env = next((os.environ[v] for v in ENDPOINT_VARS if os.environ.get(v)), None)
        if env:
            client["endpoint_url"] = env
            opts["client_kwargs"] = client
    return opts


class RemoteFolder:
    """A folder URL on an fsspec file system (endpoint from the options or the environment),
    with errors that name the URL and never the credentials. Pickles without its file system."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None) -> None:
        self.url = url.rstrip("/")
        self.storage_options = with_endpoint(self.url, storage_options or {})
        if url_credentials(self.url):  # before any SDK call could echo them
            raise UserError(f"{self.shown}: credentials do not belong in the URL — set them in "
                            "the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY), a "
                            "profile (AWS_PROFILE) or storage_options key/secret")
        self._fs: Any = None
        self._fs_pid = 0
        self._rpath = ""
        self._plain = False  # the store refused a conditional write as unknown (HTTP 501)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_fs"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    @property
    def shown(self) -> str:
        """The URL as messages name it (user info and a signed query redacted)."""
        return redact_url(self.url)

    def _user(self, message: str, kind: type[UserError] = UserError) -> UserError:
        """A one-line error of ``kind`` whose text is cleaned of every credential."""
        return kind(clean(" ".join(message.split()), self.storage_options))

    def ident(self) -> str:
        """A short key of the URL and the endpoint (the same bucket on two stores differs)."""
        ep = (self.storage_options.get("client_kwargs") or {}).get("endpoint_url", "")
        return hashlib.sha256(f"{self.url}\n{ep}".rstrip("\n").encode()).hexdigest()[:16]

    # --- remote access -------------------------------------------------------------------
    def _filesystem(self) -> tuple[Any, str]:
        if self._fs is None or self._fs_pid != os.getpid():  # never reuse one across a fork
            try:
                import fsspec
            except ImportError:
                raise self._user(f"{self.shown}: remote datasets need fsspec — pip install "
                                 "'npu-data[s3]'") from None
            try:
                self._fs, self._rpath = fsspec.core.url_to_fs(self.url, **self.storage_options)
                self._fs_pid = os.getpid()
            except ImportError as exc:
                raise self._user(f"{self.shown}: no file system for this URL "
                                 f"({self._clean(exc)}) — pip install 'npu-data[s3]' (s3fs) "
                                 "or the fsspec backend of the scheme") from None
            except Exception as exc:  # noqa: BLE001 - a backend's set-up error, one line
                raise self._user(f"{self.shown}: {type(exc).__name__}: {self._clean(exc)} — "
                                 "use an fsspec URL such as s3://bucket/prefix") from None
        return self._fs, self._rpath

    def _clean(self, exc: BaseException) -> str:
        """The exception's first line, with every credential value blanked out."""
        text = clean(str(exc).strip(), self.storage_options)  # before cutting: whole URLs
        return " ".join(text.split())[:300] or type(exc).__name__

    def _endpoint(self) -> str:
        ep = (self.storage_options.get("client_kwargs") or {}).get("endpoint_url") \
            or self.storage_options.get("endpoint_url")
        return f" (endpoint {redact_url(ep)})" if ep else ""

    def _error(self, what: str, exc: BaseException) -> UserError:
        where = f"{self.shown}/{what}"
        if isinstance(exc, FileNotFoundError):
            return self._user(f"{where}: not found{self._endpoint()} — check the bucket and "
                              "prefix (upload the folder written by `npu-data import`, "
                              "manifest.json last) and the endpoint (storage_options "
                              f"client_kwargs endpoint_url or {ENDPOINT_VARS[0]})")
        if isinstance(exc, PermissionError):
            return self._user(f"{where}: access denied{self._endpoint()} — check the "
                              "credentials (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or "
                              "storage_options key/secret) and the bucket policy")
        return self._user(f"{where}: cannot read{self._endpoint()}: {type(exc).__name__}: "
                          f"{self._clean(exc)} — check the endpoint"
                          + ("" if self._endpoint() else " (none given: pass "
                             f"--storage-endpoint URL or set {ENDPOINT_VARS[0]} for MinIO, OBS "
                             "or any S3-compatible store)")
                          + ", the network and the credentials")

    @contextlib.contextmanager
    def _remote(self, what: str) -> Iterator[tuple[Any, str]]:
        fs, rpath = self._filesystem()
        try:
            yield fs, f"{rpath.rstrip('/')}/{what}"
        except UserError:
            raise
        except Exception as exc:
            raise self._error(what, exc) from None

    # --- conditional writes ----------------------------------------------------------------
    def conditional(self) -> bool:
        """Whether writes here carry conditions (an S3 store that has not refused them)."""
        fs, _ = self._filesystem()
        return "s3" in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)) \
            and not self._plain

    def _unconditional(self, exc: BaseException) -> bool:
        """After a failed conditional write: True (once warned) when the store does not know
        conditions, so the write is retried plainly; False to raise."""
        if not _unsupported(exc):
            return False
        if not self._plain:
            log.warning("npu-data: %s does not support conditional writes (If-Match / "
                        "If-None-Match): this import is not fenced against another writer",
                        self.shown)
        self._plain = True
        return True

    def write(self, rels: list[str], sources: list[Path | bytes],
              replace: list[str | None]) -> None:
        """Write objects ``rels`` from local files or bytes: each only if absent (``replace``
        None: ``If-None-Match: *``) or only over the version with that ETag (bytes:
        ``If-Match``; a file, which may go up in parts: deleted with ``If-Match``, then
        created), where the store has conditional writes; plainly elsewhere. ``Conflict``
        (naming the object, or the folder of a batch) when the store refused a condition."""
        fs, _ = self._filesystem()
        base = self._rpath.rstrip("/")
        creates = [k for k, r in enumerate(replace) if r is None]
        rest = [k for k, r in enumerate(replace) if r is not None]
        for k in rest:
            if not isinstance(sources[k], bytes):
                self.delete(rels[k], str(replace[k]))
                creates.append(k)
        batches = ([(sorted(creates), None)] if creates else []) + [
            ([k], replace[k]) for k in rest if isinstance(sources[k], bytes)]
        for batch, etag in batches:
            rel = rels[batch[0]]
            if len({rels[k].rpartition("/")[0] for k in batch}) == 1 and len(batch) > 1:
                rel = rel.rpartition("/")[0] + "/"
            with self._remote(rel):
                try:
                    self._put(fs, [f"{base}/{rels[k]}" for k in batch],
                              [sources[k] for k in batch], etag, self.conditional())
                except Exception as exc:  # noqa: BLE001 - sorted below
                    if _refused(exc):
                        raise self._conflict(rel) from None
                    if not self._unconditional(exc):
                        raise
                    self._put(fs, [f"{base}/{rels[k]}" for k in batch],
                              [sources[k] for k in batch], etag, False)

    def _conflict(self, rel: str) -> Conflict:
        conflict = Conflict(clean(f"{self.shown}/{rel}: changed on the store since this writer "
                                  "looked", self.storage_options))
        conflict.rel = rel
        return conflict

    @staticmethod
    def _put(fs: Any, paths: list[str], sources: list[Path | bytes], etag: str | None,
             conditional: bool) -> None:
        cond: dict[str, Any] = {}
        if conditional:
            cond = {"mode": "create"} if etag is None else {"IfMatch": _quoted(etag)}
        files = [(p, str(s)) for p, s in zip(paths, sources, strict=True)
                 if not isinstance(s, bytes)]
        for p, s in zip(paths, sources, strict=True):
            if isinstance(s, bytes):  # one PUT (a condition holds for the whole object)
                fs.pipe_file(p, s, **cond, **({"chunksize": max(len(s), 1 << 20)}
                                              if cond else {}))
        if files:
            fs.put([f for _, f in files], [p for p, _ in files], **cond)

    def delete(self, rel: str, etag: str) -> None:
        """Delete object ``rel`` only if its ETag is ``etag`` (where the store can)."""
        with self._remote(rel) as (fs, rpath):
            if self.conditional():
                bucket, key, _ = fs.split_path(rpath)
                try:
                    fs.call_s3("delete_object", Bucket=bucket, Key=key, IfMatch=_quoted(etag))
                    fs.invalidate_cache(rpath)
                    return
                except Exception as exc:  # noqa: BLE001 - sorted below
                    if _refused(exc):
                        raise self._conflict(rel) from None
                    if not self._unconditional(exc):
                        raise
            fs.rm_file(rpath)

    def stamp(self, rel: str) -> Stamp | None:
        """Object ``rel``'s ETag and age by the store's clock (None when absent)."""
        with self._remote(rel) as (fs, rpath):
            fs.invalidate_cache(rpath)
            if "s3" in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)):
                bucket, key, _ = fs.split_path(rpath)
                try:
                    head = fs.call_s3("head_object", Bucket=bucket, Key=key)
                except FileNotFoundError:
                    return None
                date = (head.get("ResponseMetadata", {}).get("HTTPHeaders") or {}).get("date")
                now = email.utils.parsedate_to_datetime(date).timestamp() if date \
                    else time.time()
                return Stamp(str(head.get("ETag", "")).strip('"'),
                             now - head["LastModified"].timestamp())
            try:
                info = fs.info(rpath)
            except FileNotFoundError:
                return None
            when = info.get("LastModified") or info.get("mtime") or info.get("created")
            when = when.timestamp() if hasattr(when, "timestamp") else when
            age = time.time() - float(when) if isinstance(when, (int, float)) else 0.0
            return Stamp(object_tag(info), age)
