"""Image references as they may be stored or shown: secrets replaced by ``REDACTED``.

A presigned URL's query carries a signature and the signer's key id (AWS ``X-Amz-Signature``/
``X-Amz-Credential``/``X-Amz-Security-Token``, SigV2 ``Signature``/``AWSAccessKeyId``, Huawei
OBS ``Signature``/``AccessKeyId``, GCS ``X-Goog-Signature``, an Azure SAS ``sig``/``se``/``sv``,
any ``token``/``key``-like parameter), a Label Studio storage link its storage URI
(``/tasks/<id>/resolve/?fileuri=``) and a URL may hold ``user:password@``. ``redact_url`` keeps
the scheme, host and path (which object it was) and replaces the user info and, when any
parameter is secret, every query value; ``redact_text`` does so for every URL in a message and
also hides the values of credential variables of the environment. The shards' ``image_ref`` and
``data_json`` columns, ``rejected.jsonl``, the manifest and every error hold only these forms;
the full URL is used in memory, for the download itself. ``unsigned_url`` drops a signed
URL's signing parameters (signature, key id, token, date, expiry): the download cache's key.
"""

from __future__ import annotations

import os
import re
from typing import Any

import numpy as np
import orjson

from npu_data.common.ragged import offsets_of

REDACTED = "REDACTED"
# parameter names holding a secret: any containing one of these words ...
_SECRET_WORDS = ("sig", "token", "key", "credential", "secret", "passw", "auth", "session",
                 "policy", "accessid", "jwt", "fileuri")
# ... and the short ones of an Azure SAS (and a few others) that contain none of them
_SECRET_NAMES = frozenset(("se", "sv", "sp", "st", "sr", "spr", "srt", "ss", "skoid", "sktid",
                           "skt", "ske", "sks", "skv", "sdd", "pwd", "pass", "code", "hmac"))
# environment variables whose values must never be echoed
SECRET_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
              "AWS_SECURITY_TOKEN", "AZURE_STORAGE_KEY", "AZURE_STORAGE_ACCOUNT_KEY",
              "AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_SAS_TOKEN",
              "AZURE_CLIENT_SECRET", "GOOGLE_OAUTH_ACCESS_TOKEN", "LABEL_STUDIO_API_KEY",
              "OBS_ACCESS_KEY_ID", "OBS_SECRET_ACCESS_KEY", "OBS_SECURITY_TOKEN")
# a URL in a message: ``scheme://`` (the scheme found by walking back from ``://``) or a Label
# Studio path, then its body; a ``name=`` at the start of a word, then its value. Found by
# searches that never look at a character twice: linear in the message, whatever it holds
_URL_START = re.compile(r"://|/(?:tasks|projects)/\d+/")
_URL_BODY = re.compile(r"[^\s'\"<>()\[\]{}]+")
_SCHEME = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+.-")
_LETTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_NAMES = "|".join((*_SECRET_WORDS, "x-amz-[a-z-]+", "x-goog-[a-z-]+"))
_SECRET_NAME = re.compile(r"(?i)" + _NAMES)
_NAME_EQ = re.compile(r"(?<![\w.%-])[\w.-]+=")
_VALUE = re.compile(r"[^&#\s'\"),;>]+")


# the parameters a signer adds to an object's URL (its signature, key id, token, date,
# expiry and the SAS's grant): two signings of one object differ only in these
SIGNING_PARAMS = frozenset((
    "x-amz-signature", "x-amz-credential", "x-amz-security-token", "x-amz-date",
    "x-amz-expires", "x-amz-algorithm", "x-amz-signedheaders", "signature", "awsaccesskeyid",
    "accesskeyid", "expires", "x-obs-security-token", "x-goog-signature", "x-goog-credential",
    "x-goog-date", "x-goog-expires", "x-goog-algorithm", "x-goog-signedheaders",
    "googleaccessid", "sig", "se", "st", "sv", "sp", "spr", "sr", "srt", "ss", "skoid",
    "sktid", "skt", "ske", "sks", "skv", "sdd"))
_SIGNATURES = frozenset(("x-amz-signature", "signature", "x-goog-signature", "sig"))


def unsigned_url(url: str) -> str:
    """``url`` without the parameters of its signing (``SIGNING_PARAMS``) when it is a signed
    URL (one carrying a signature), else as it is: the same object re-signed gives the same
    text (the download cache's key), another object (path or other parameter) another."""
    base, hash_, fragment = url.partition("#")
    head, q, query = base.partition("?")
    if not q:
        return url
    from urllib.parse import unquote_plus

    pairs = [(unquote_plus(p.partition("=")[0]).strip().lower(), p)
             for p in query.split("&") if p]
    if not any(name in _SIGNATURES for name, _ in pairs):
        return url
    kept = "&".join(p for name, p in pairs if name not in SIGNING_PARAMS)
    return head + (f"?{kept}" if kept else "") + hash_ + fragment


# schemes whose ``container@account`` names a place, not a user (adlfs, Hadoop)
_CONTAINER_AT = frozenset(("abfs", "abfss", "az", "wasb", "wasbs"))


def secret_param(name: str) -> bool:
    """Whether a query parameter called ``name`` carries a secret."""
    n = name.strip().lower()
    return n in _SECRET_NAMES or any(w in n for w in _SECRET_WORDS)


def _query(query: str) -> str:
    """``query`` with every value REDACTED if any parameter is secret, else as it was."""
    pairs = [p.partition("=") for p in query.split("&")]
    from urllib.parse import unquote_plus

    if not any(secret_param(unquote_plus(name)) for name, _, _ in pairs):
        return query
    return "&".join(name + (f"={REDACTED}" if eq else "") for name, eq, _ in pairs)


def split_userinfo(url: str) -> tuple[str, str | None, str]:
    """``url`` as ``(scheme://, user info, the rest from the host on)``: the one rule every
    module reads credentials in a URL by (user info None: no ``@`` before the host).

    The user info ends at the last ``@`` before the host: the last ``@`` of the authority
    (up to the first ``/``, ``?`` or ``#``), so ``key:pw@part@bucket`` is ``key:pw@part``.
    An authority without ``@`` that has a ``:`` not followed by a port (``key:secret/with/
    slashes@bucket``, an S3 secret) holds user info up to the last ``@`` before the first
    ``/`` after its first ``@``. Not a URL (no ``://``): ``("", None, url)``."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return "", None, url
    end = next((i for i, c in enumerate(rest) if c in "/?#"), len(rest))
    at = rest.rfind("@", 0, end)
    if at < 0 and "@" in rest and not rest.startswith("["):
        port = rest[:end].rpartition(":")
        if port[1] and not (port[2].isascii() and port[2].isdigit() and len(port[2]) <= 5):
            first = rest.index("@")
            slash = rest.find("/", first)
            at = rest.rfind("@", 0, slash if slash >= 0 else len(rest))
    if at < 0:
        return scheme + sep, None, rest
    return scheme + sep, rest[:at], rest[at + 1:]


# object stores whose URL's authority is a bucket: any user info there is a credential
_BUCKET_SCHEMES = frozenset(("s3", "s3a", "gs", "gcs", "obs", "oss"))


def url_credentials(url: str) -> bool:
    """Whether ``url`` carries credentials in its user info (``split_userinfo``): a
    ``user:password``, or any user info at all before an object store's bucket (a key id);
    not an http(s) user name nor adlfs' ``container@account``."""
    prefix, user, _ = split_userinfo(url)
    scheme = prefix[:-3].lower()
    if user is None or scheme in ("http", "https") or place_at(scheme, user):
        return False
    return ":" in user or scheme in _BUCKET_SCHEMES


def place_at(scheme: str, user: str) -> bool:
    """Whether user info ``user`` of a ``scheme`` URL names a place, not a user (adlfs'
    ``container@account``)."""
    return scheme.lower() in _CONTAINER_AT and ":" not in user


def redact_url(ref: str) -> str:
    """``ref`` with its user info (``split_userinfo``) and (for a signed URL or a storage
    link) its query values replaced by ``REDACTED``; scheme, host and path kept. Other
    references are returned as they are."""
    if not isinstance(ref, str):
        return ref
    prefix, user, ref = split_userinfo(ref)
    if user is not None:
        prefix += f"{user if place_at(prefix[:-3], user) else REDACTED}@"
    base, hash_, fragment = ref.partition("#")
    head, q, query = base.partition("?")
    head = prefix + head
    if q:
        query = _query(query)
    if hash_ and "=" in fragment:
        fragment = _query(fragment)
    return head + q + query + hash_ + fragment


def redact_text(text: Any) -> str:
    """``text`` (a message) with every URL in it redacted, loose ``name=secret`` pairs
    REDACTED, and the values of the environment's credential variables hidden."""
    text = _pairs(_urls(str(text)))
    for name in SECRET_ENV:
        value = os.environ.get(name)
        if value and len(value) >= 4:
            text = text.replace(value, REDACTED)
    return text


def _urls(text: str) -> str:
    """``text`` with each URL in it through ``redact_url``."""
    out, pos, last = [], 0, 0
    while m := _URL_START.search(text, pos):
        start = m.start()
        if m.group() == "://":  # the scheme: letters, digits, + . - back to the first letter
            while start > last and text[start - 1] in _SCHEME:
                start -= 1
            while start < m.start() and text[start] not in _LETTERS:
                start += 1
        body = None if start == m.start() and m.group() == "://" else \
            _URL_BODY.match(text, m.end())  # read once: the search goes on past it
        if body is None:
            pos = m.start() + 1
            continue
        out += [text[last:start], redact_url(text[start:body.end()])]
        pos = last = body.end()
    return "".join(out) + text[last:]


def _pairs(text: str) -> str:
    """``text`` with the value of each ``name=value`` whose name holds a secret REDACTED."""
    out, pos, last = [], 0, 0
    while m := _NAME_EQ.search(text, pos):
        pos = m.end()
        value = _VALUE.match(text, pos) if _SECRET_NAME.search(m.group()) else None
        if value is not None:  # read once: the search goes on past it
            out += [text[last:pos], REDACTED]
            pos = last = value.end()
    return "".join(out) + text[last:]


def _walk(value: Any) -> Any:
    if isinstance(value, str):  # a URL or a server path; other text is the user's own
        return redact_url(value) if ("://" in value or value.startswith("/")) else value
    if isinstance(value, list):
        return [_walk(v) for v in value]
    if isinstance(value, dict):
        return {k: _walk(v) for k, v in value.items()}
    return value


def redact_json(raw: bytes | str) -> bytes:
    """A task's ``data`` JSON with every URL or server path in it (``scheme://...``,
    ``/tasks/...``) redacted as ``redact_url`` does; other text, and the bytes when nothing
    needed it, unchanged."""
    data = raw.encode() if isinstance(raw, str) else bytes(raw)
    if b"?" not in data and b"@" not in data and b"#" not in data:
        return data
    try:
        parsed = orjson.loads(data)
    except orjson.JSONDecodeError:
        return redact_text(data.decode("utf-8", "replace")).encode()
    clean = _walk(parsed)
    return data if clean == parsed else orjson.dumps(clean)


STORED_TEXT = ("image_ref", "data_json")  # the text columns that hold task references


def redact_columns(columns: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``columns`` (an AnnotationTable's) with ``image_ref`` and ``data_json`` redacted, as
    they are written to disk; the other columns are the same arrays."""
    out = dict(columns)
    for name in STORED_TEXT:
        data, offsets = columns[f"{name}.bytes"], columns[f"{name}.offsets"]
        raw = np.ascontiguousarray(data).tobytes()
        if b"?" not in raw and b"@" not in raw and b"#" not in raw:
            continue
        fix = redact_json if name == "data_json" else (
            lambda b: redact_url(b.decode("utf-8", "surrogatepass")).encode(
                "utf-8", "surrogatepass"))
        pieces = [fix(raw[int(a):int(b)]) for a, b in zip(offsets[:-1], offsets[1:],
                                                           strict=True)]
        out[f"{name}.bytes"] = np.frombuffer(b"".join(pieces), dtype=np.uint8).copy()
        out[f"{name}.offsets"] = offsets_of([len(p) for p in pieces]).astype(
            np.asarray(offsets).dtype, copy=False)
    return out
