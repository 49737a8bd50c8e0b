"""Storage access: a folder URL on any fsspec file system, with its endpoint and the
credentials kept out of every message.

``RemoteFolder(url, storage_options)`` builds the file system lazily (never across a fork,
never pickled), takes an S3-compatible endpoint from the options or the environment
(``NPU_DATA_S3_ENDPOINT``, else ``AWS_ENDPOINT_URL``) and turns every SDK error into a
one-line ``UserError`` naming the URL (user info and signed queries redacted, every
credential value of the options and the environment blanked, ``clean``); an s3 URL with
``user:password@`` is refused. ``shards.download`` fetches shard files through it,
``shards.remote`` keeps them in the node-local cache, ``shards.upload`` and ``shards.lease``
write through it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from collections.abc import Iterator
from typing import Any

from npu_data.annotations.redact import redact_text, redact_url
from npu_data.errors import UserError

ENDPOINT_VARS = ("NPU_DATA_S3_ENDPOINT", "AWS_ENDPOINT_URL")
SECRET_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")


def is_url(path: Any) -> bool:
    """True for ``scheme://...`` strings (s3://, gs://, memory://, file://, ...)."""
    return isinstance(path, str) and re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", path) is not None


def endpoint_options(endpoint: str | None) -> dict[str, Any]:
    """fsspec storage options naming an S3-compatible ``endpoint`` (the CLI's
    ``--storage-endpoint``); empty for None (then the environment's, see ENDPOINT_VARS)."""
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
        user = self.url.partition("://")[2].partition("/")[0].rpartition("@")[0]
        if ":" in user and not self.url.lower().startswith(("http://", "https://")):
            raise UserError(f"{self.shown}: credentials do not belong in the URL — set them in "
                            "the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY), a "
                            "profile (AWS_PROFILE) or storage_options key/secret")
        self._fs: Any = None
        self._fs_pid = 0
        self._rpath = ""

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
                          f"{self._clean(exc)} — check the endpoint, the network and the "
                          "credentials")

    @contextlib.contextmanager
    def _remote(self, what: str) -> Iterator[tuple[Any, str]]:
        fs, rpath = self._filesystem()
        try:
            yield fs, f"{rpath.rstrip('/')}/{what}"
        except UserError:
            raise
        except Exception as exc:
            raise self._error(what, exc) from None
