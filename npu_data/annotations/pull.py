"""Pull a project's export, labeling config and uploaded images from a Label Studio server.

Everything lands atomically in one folder (temp file + rename), downloads stream to disk
in chunks, and a rerun resumes: complete media files are skipped. The token is read from a
file or ``LABEL_STUDIO_API_KEY`` and never printed.

    DIR/export.json        the JSON export (or snapshot)
    DIR/label_config.xml   the project's labeling config (label ids come from it)
    DIR/media/upload/...   uploaded images (``--ls-data-dir DIR`` resolves ``/data/upload/``)
    DIR/pull.json          what was pulled (server, project, export id; no token)
"""

from __future__ import annotations

import base64
import os
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import orjson

from npu_data.annotations.redact import redact_text, redact_url
from npu_data.common.atomic import atomic_file, atomic_write_bytes
from npu_data.errors import UserError
from npu_data.progress import bar

TOKEN_ENV = "LABEL_STUDIO_API_KEY"
EXPORT_NAME = "export.json"
CONFIG_NAME = "label_config.xml"
UPLOAD_PREFIX = "/data/upload/"
CHUNK = 1 << 20


@dataclass
class PullOptions:
    """What to pull and how (see ``npu-data pull --help``)."""

    url: str
    project: int
    out: Path
    token: str = field(repr=False)
    snapshot: bool = False
    with_predictions: bool = False
    download_resources: bool = False
    workers: int = 8
    timeout: float = 600.0
    poll_interval: float = 0.5
    chunk_size: int = CHUNK


@dataclass
class PullResult:
    """Paths and counts of a finished pull."""

    export_path: Path
    config_path: Path
    media_dir: Path
    num_tasks: int
    export_id: int | None
    downloaded: int = 0
    skipped: int = 0


def read_token(token_file: str | os.PathLike[str] | None) -> str:
    """The API token from ``token_file`` or ``$LABEL_STUDIO_API_KEY`` (never a CLI value)."""
    if token_file:
        path = Path(token_file)
        try:
            token = path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise UserError(f"{path}: cannot read the token file ({exc.strerror}) — "
                            "check {token_file}", option="token_file") from None
        if not token:
            raise UserError(f"{path}: the token file is empty — paste the Label Studio "
                            "access token into it")
        return token
    token = os.environ.get(TOKEN_ENV, "").strip()
    if not token:
        raise UserError(f"no Label Studio token — pass {{token_file}} FILE or set {TOKEN_ENV} "
                        "(Account & Settings > Personal Access Token)", option="token_file")
    return token


def token_kind(token: str) -> str:
    """``"personal access token"`` for a JWT, ``"legacy token"`` otherwise."""
    parts = token.split(".")
    if len(parts) == 3:
        try:
            head = orjson.loads(base64.urlsafe_b64decode(parts[0] + "=" * (-len(parts[0]) % 4)))
            if isinstance(head, dict) and "alg" in head:
                return "personal access token"
        except (ValueError, orjson.JSONDecodeError):
            pass
    return "legacy token"


def _auth_hint(status: int, token: str, what: str) -> str:
    kind = token_kind(token)
    if status == 401:
        if kind == "legacy token":
            fix = ("check the token, and note that servers from 1.23 accept legacy tokens only "
                   "with LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN=true — or use a personal access "
                   "token (sent as Bearer)")
        else:
            fix = ("the JWT refresh token is invalid, revoked or "
                   "from another server — create a new one, or use the legacy token (sent as "
                   "'Token') if the server enables LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN")
        return f"{what}: the server rejected the {kind} (401) — {fix}"
    return (f"{what}: the {kind} has no access (403) — ask the project owner for access or "
            "use a token of a member of the project's organization")


class _Server:
    """The SDK client plus the error translation every call goes through."""

    def __init__(self, url: str, token: str, timeout: float) -> None:
        try:
            from label_studio_sdk import LabelStudio
            from label_studio_sdk.core.api_error import ApiError
        except ImportError:
            raise UserError("label-studio-sdk is not installed — pip install "
                            "'npu-data[labelstudio]'") from None
        self.url = url.rstrip("/")
        self.token = token
        self.api_error = ApiError
        try:
            self.client = LabelStudio(base_url=self.url, api_key=token, timeout=timeout)
        except ApiError as exc:
            raise self.error(exc, self.url) from None

    def error(self, exc: BaseException, what: str) -> UserError:
        """A one-line UserError for an SDK or transport failure."""
        import httpx

        if isinstance(exc, self.api_error):
            status = int(exc.status_code or 0)
            if status in (401, 403):
                return UserError(_auth_hint(status, self.token, what))
            body = str(exc.body)[:200].replace("\n", " ")
            return UserError(redact_text(f"{what}: the server answered {status} ({body})"))
        if isinstance(exc, httpx.TransportError):
            return UserError(redact_text(f"{self.url}: cannot reach the Label Studio server "
                                         f"({type(exc).__name__}: {exc}) — check {{url}} and "
                                         "that the server is running"), option="url")
        return UserError(redact_text(f"{what}: {type(exc).__name__}: {exc}"))

    def call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        import httpx

        try:
            return fn(*args, **kwargs)
        except (self.api_error, httpx.HTTPError) as exc:
            if isinstance(exc, self.api_error) and exc.status_code == 404:
                raise UserError(redact_text(f"{what}: not found on {self.url} (404) — check "
                                            "{project} and {url}"),
                                option=("project", "url")) from None
            raise self.error(exc, what) from None

    def headers(self) -> dict[str, str]:
        """Authorization headers (the SDK refreshes a JWT access token when needed)."""
        h = self.call(self.url, self.client._client_wrapper.get_headers)
        return {k: v for k, v in h.items() if k.lower() == "authorization"}


def _stream_to_file(chunks: Iterable[bytes], target: Path, expected: int | None,
                    what: str, desc: str | None) -> int:
    """Write ``chunks`` to ``target`` atomically; refuse a short download."""
    import httpx

    size = 0
    progress = bar(expected, desc=desc, unit="B") if desc else None
    try:
        with atomic_file(target, suffix=".part") as fh:
            try:
                for chunk in chunks:
                    fh.write(chunk)
                    size += len(chunk)
                    if progress is not None:
                        progress.update(len(chunk))
            except httpx.HTTPError as exc:
                raise UserError(f"{what}: download cut off after {size} bytes "
                                f"({type(exc).__name__}) — nothing was kept; run the pull "
                                "again") from None
            if expected is not None and size != expected:
                raise UserError(f"{what}: download cut off after {size} of {expected} bytes "
                                "— nothing was kept; run the pull again")
    finally:
        if progress is not None:
            progress.close()
    return size


def _content_length(headers: dict[str, str]) -> int | None:
    for k, v in headers.items():
        if k.lower() == "content-length" and v.isdigit():
            return int(v)
    return None


def _wait_snapshot(server: _Server, project: int, export_id: int, opts: PullOptions) -> None:
    what = f"project {project} export snapshot {export_id}"
    deadline = time.monotonic() + opts.timeout
    progress = bar(None, desc="export snapshot", unit="poll")
    try:
        while True:
            snap = server.call(what, server.client.projects.exports.get, project, export_id)
            status = str(snap.status or "created")
            progress.set_postfix_str(status)
            progress.update(1)
            if status == "completed":
                return
            if status == "failed":
                raise UserError(f"{what}: the server failed to build the snapshot — see the "
                                "Label Studio server log, then retry (or pull without "
                                "{snapshot})", option="snapshot")
            if time.monotonic() > deadline:
                raise UserError(f"{what}: still '{status}' after {opts.timeout:.0f} s — raise "
                                "{timeout} or retry later", option="timeout")
            time.sleep(opts.poll_interval)
    finally:
        progress.close()


def _download_export(server: _Server, opts: PullOptions, target: Path) -> int | None:
    exports = server.client.projects.exports
    what = f"project {opts.project} export"
    from label_studio_sdk.core.request_options import RequestOptions

    req: RequestOptions = {"chunk_size": opts.chunk_size}
    export_id: int | None = None
    if opts.snapshot or opts.with_predictions:
        kwargs: dict[str, Any] = {"title": "npu-data pull"}
        if opts.with_predictions:
            kwargs["serialization_options"] = {"predictions": {"only_id": False}}
        created = server.call(what, exports.create, opts.project, **kwargs)
        export_id = int(created.id)
        _wait_snapshot(server, opts.project, export_id, opts)
        ctx = exports.with_raw_response.download(opts.project, export_id, export_type="JSON",
                                                 request_options=req)
    else:
        ctx = exports.with_raw_response.download_sync(
            opts.project, export_type="JSON", download_all_tasks=True, request_options=req)
    try:
        with ctx as resp:
            _stream_to_file(resp.data, target, _content_length(resp.headers), what,
                            "export download")
    except UserError:
        raise
    except Exception as exc:
        raise server.error(exc, what) from None
    return export_id


def upload_refs(tasks: list[Any]) -> list[str]:
    """Every distinct ``/data/upload/...`` reference in the tasks' ``data``, sorted."""
    refs: set[str] = set()
    for task in tasks:
        data = task.get("data") if isinstance(task, dict) else None
        if not isinstance(data, dict):
            continue
        for value in data.values():
            items = value if isinstance(value, list) else [value]
            for v in items:
                if isinstance(v, str) and v.startswith(UPLOAD_PREFIX):
                    refs.add(v.split("?", 1)[0])
    return sorted(refs)


def media_path(out: Path, ref: str) -> Path:
    """Where the upload ``ref`` is stored under ``out`` (``out/media/upload/...``)."""
    rel = unquote(ref[len("/data/"):])
    parts = Path(rel).parts
    if any(p in ("..", "") for p in parts) or Path(rel).is_absolute():
        raise UserError(f"{ref}: upload path escapes the media folder — refusing to write it")
    return out / "media" / Path(*parts)


def download_resources(server: _Server, refs: list[str], out: Path, workers: int,
                       chunk_size: int = CHUNK) -> tuple[int, int]:
    """Fetch ``refs`` in parallel into ``out/media``; skip files already complete."""
    import httpx

    todo = [(r, media_path(out, r)) for r in refs]
    missing = [(r, p) for r, p in todo if not p.is_file()]
    skipped = len(todo) - len(missing)
    if not missing:
        return 0, skipped
    headers = server.headers()
    progress = bar(len(missing), desc="media", unit="file")

    def fetch(item: tuple[str, Path]) -> None:
        ref, path = item
        url = server.url + quote(ref, safe="/%-._~")
        try:
            with client.stream("GET", url, headers=headers) as resp:
                if resp.status_code in (401, 403):
                    raise UserError(_auth_hint(resp.status_code, server.token, ref))
                if resp.status_code != 200:
                    raise UserError(f"{ref}: the server answered {resp.status_code} — check "
                                    "that the file still exists in the project")
                _stream_to_file(resp.iter_bytes(chunk_size), path,
                                _content_length(dict(resp.headers)), ref, None)
        except httpx.TransportError as exc:
            raise server.error(exc, ref) from None
        progress.update(1)

    try:
        with httpx.Client(timeout=60.0, follow_redirects=True) as client, \
                ThreadPoolExecutor(max(1, workers)) as pool:
            for _ in pool.map(fetch, missing):
                pass
    finally:
        progress.close()
    return len(missing), skipped


def _load_tasks(path: Path, what: str) -> list[Any]:
    try:
        body = path.read_bytes()
        tasks = orjson.loads(body[3:] if body.startswith(b"\xef\xbb\xbf") else body)  # BOM
    except orjson.JSONDecodeError as exc:
        path.unlink(missing_ok=True)
        raise UserError(f"{what}: the downloaded export is not valid JSON ({exc}) — it was "
                        "removed; run the pull again") from None
    if not isinstance(tasks, list):
        raise UserError(f"{path}: expected a JSON list of tasks — pull the JSON export type")
    return tasks


def pull(opts: PullOptions) -> PullResult:
    """Download the export (and optionally media) of ``opts.project`` into ``opts.out``."""
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    server = _Server(opts.url, opts.token, timeout=max(60.0, opts.timeout))
    what = f"project {opts.project}"
    project = server.call(what, server.client.projects.get, opts.project)
    config = project.label_config or ""
    config_path = out / CONFIG_NAME
    atomic_write_bytes(config_path, config.encode("utf-8"))
    export_path = out / EXPORT_NAME
    export_id = _download_export(server, opts, export_path)
    tasks = _load_tasks(export_path, f"{what} export")
    result = PullResult(export_path, config_path, out / "media", len(tasks), export_id)
    if opts.download_resources:
        result.downloaded, result.skipped = download_resources(
            server, upload_refs(tasks), out, opts.workers, opts.chunk_size)
    meta = {"url": redact_url(server.url), "project": opts.project, "title": project.title,
            "export_id": export_id, "num_tasks": len(tasks),
            "with_predictions": opts.with_predictions, "pulled_at": time.time()}
    atomic_write_bytes(out / "pull.json", orjson.dumps(meta, option=orjson.OPT_INDENT_2))
    return result

