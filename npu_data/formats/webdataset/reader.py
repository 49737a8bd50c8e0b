"""Reading WebDataset tars: a tar stream -> samples (``<key>.<ext>`` members grouped by key)
-> an import table.

Where a tar comes from is the user's to allow (``TarAccess``): local paths always;
``http(s)://`` and ``s3://`` only from the hosts (buckets) ``allow_download`` names, each tar
at most ``max_download_bytes`` — the checks of image downloads (``annotations.fetch``);
``pipe:<command>`` (webdataset's shell pipes) only with ``allow_pipe=True``, since it runs
the command. Whatever the source, a member (and a sample's members together) may hold at most
``max_member_bytes`` and a tar ``max_unpacked_bytes`` unpacked (``tar_members``: refused
from the headers, before the data is read); a member name appearing twice in a tar is
refused, never silently replaced.
"""

from __future__ import annotations

import os
import re
import subprocess
import tarfile
import tempfile
import threading
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Protocol
from urllib.parse import urlsplit

import orjson

from npu_data.annotations import fetch
from npu_data.annotations.redact import redact_text, split_userinfo, url_credentials
from npu_data.annotations.table import AnnotationTable
from npu_data.errors import UserError
from npu_data.formats.webdataset import tar_members
from npu_data.formats.webdataset.mapping import table_from_json

DEFAULT_MAX_TAR_BYTES = 16 << 30  # per tar read from a URL or a pipe


class WdsSample(NamedTuple):
    """One WebDataset sample: key, image file bytes, parsed ``<key>.json`` (``image_ext``
    inside), and the tar it came from (named in errors)."""

    key: str
    image: bytes
    annotations: dict[str, Any]
    url: str = ""


@dataclass(frozen=True)
class TarAccess:
    """Where tars may be read from: ``allow_download`` the hosts (``host``, ``host:port``,
    ``*.example.com``; for ``s3://`` the bucket) of http(s)/s3 URLs; ``max_download_bytes``
    per remote or piped tar; ``allow_pipe`` lets ``pipe:`` URLs run their command;
    ``timeout`` for connects and stalled reads (a whole http transfer: ten times it);
    ``storage_options`` for fsspec (s3fs). An http(s) tar is downloaded into an unlinked
    temporary file (``TMPDIR``) that the reader follows; it is gone once the tar is read.
    ``max_member_bytes``: the most one member, and one sample's members together, may hold;
    ``max_unpacked_bytes``: the most one tar's members may hold (a compressed tar unpacked)."""

    allow_download: Any = ()
    max_download_bytes: int = DEFAULT_MAX_TAR_BYTES
    allow_pipe: bool = False
    timeout: float = fetch.DEFAULT_TIMEOUT
    storage_options: dict[str, Any] = field(default_factory=dict)
    max_member_bytes: int = tar_members.DEFAULT_MAX_MEMBER
    max_unpacked_bytes: int = tar_members.DEFAULT_MAX_TOTAL

    def __post_init__(self) -> None:
        object.__setattr__(self, "allow_download", fetch.parse_hosts(self.allow_download))
        for name in ("max_download_bytes", "max_member_bytes", "max_unpacked_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UserError(f"{name} {value!r}: must be a positive number of bytes")
        if not isinstance(self.timeout, (int, float)) or not self.timeout > 0:
            raise UserError(f"timeout {self.timeout!r}: must be a positive number of seconds")


def shown(url: str) -> str:
    """``url`` as errors name it: no user/password, query or fragment (any scheme); a pipe's
    program."""
    if url.startswith("pipe:"):
        words = url[5:].split()
        return f"pipe:{words[0] if words else ''} ..."
    prefix, _, rest = split_userinfo(url)  # the one rule: user info to the last @ before the host
    if not prefix:
        return url
    return redact_text(prefix + re.split(r"[?#]", rest, maxsplit=1)[0])


def _why(exc: BaseException, access: TarAccess | None = None) -> str:
    """``exc`` in one short line, with URLs redacted and credential values blanked."""
    from npu_data.shards.storage import clean

    text = " ".join(str(exc).split())[:300] or type(exc).__name__
    return clean(text, access.storage_options if access is not None else {})


# ------------------------------------------------------------------------------ streams
def open_stream(url: str, access: TarAccess | None = None) -> Stream:
    """A binary stream of a local tar, or of an allowed http(s), s3 or pipe URL."""
    access = access or TarAccess()
    scheme = urlsplit(url).scheme if "://" in url else ""
    if url.startswith("pipe:"):
        return _pipe(url, access)
    if scheme in ("http", "https", "s3"):
        if scheme == "s3" and url_credentials(url):  # before anything echoes it
            raise UserError(f"{shown(url)}: credentials do not belong in the URL — set them in "
                            "the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY), a "
                            "profile (AWS_PROFILE) or storage_options key/secret")
        prefix, _, rest = split_userinfo(url)
        host = urlsplit(prefix + rest).hostname or "?"
        if not access.allow_download:
            raise UserError(f"{shown(url)}: a remote tar — pass allow_download=['{host}'] "
                            f"(CLI: --allow-download {host}) to read tars from {host} (only "
                            "the hosts named are read)")
        if not fetch.host_allowed(url, access.allow_download):
            raise UserError(f"{shown(url)}: host {host} is not one that allow_download names "
                            f"({','.join(access.allow_download)}) — refused; add it if you "
                            "trust it")
        return _Spool(url, access) if scheme != "s3" else _s3(url, access)
    if scheme:
        raise UserError(f"{shown(url)}: tars are read from paths, http(s)://, s3:// or pipe: "
                        "URLs — not this one")
    try:
        return open(url, "rb")
    except OSError as exc:
        raise UserError(f"{shown(url)}: cannot open ({exc.strerror}) — check the path"
                        ) from None


class Stream(Protocol):
    """What a tar is read from: ``read`` and ``close``, usable in ``with``."""

    def read(self, n: int = -1, /) -> bytes: ...

    def close(self) -> None: ...

    def __enter__(self) -> Any: ...

    def __exit__(self, kind: Any, exc: Any, tb: Any, /) -> Any: ...


class _Spool:
    """An http(s) tar downloaded by ``fetch``'s checked getter (allowed hosts and redirects,
    size cap, timeouts) in a thread into an unlinked temporary file, read while it grows."""

    def __init__(self, url: str, access: TarAccess) -> None:
        self._file = tempfile.TemporaryFile(prefix="npu-data-tar-")
        self._fd = self._file.fileno()
        self._size = self._pos = 0
        self._done = self._stop = False
        self._error: BaseException | None = None
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._fill, args=(url, access), daemon=True)
        self._thread.start()

    def _fill(self, url: str, access: TarAccess) -> None:
        try:
            fetch._http_get(url, access.allow_download, self,  # type: ignore[arg-type]
                            access.max_download_bytes, access.timeout)
        except UserError as exc:  # handed to the reader: its reason is already redacted
            self._error = exc
        except BaseException as exc:  # noqa: BLE001 - handed to the reader, one line, clean
            self._error = UserError(f"{shown(url)}: download failed ({type(exc).__name__}: "
                                    f"{_why(exc)})")
        with self._cond:
            self._done = True
            self._cond.notify_all()

    def write(self, data: bytes) -> int:  # the getter's sink
        with self._cond:  # never into a closed (maybe reused) descriptor
            if self._stop:
                raise OSError("the reader stopped")
            n = os.pwrite(self._fd, data, self._size)
            self._size += n
            self._cond.notify_all()
        return n

    def read(self, n: int = -1) -> bytes:
        with self._cond:
            while self._pos >= self._size and not self._done:
                self._cond.wait()
            if self._error is not None and self._pos >= self._size:
                raise self._error
            avail = self._size - self._pos
        want = avail if n is None or n < 0 else min(n, avail)
        data = os.pread(self._fd, want, self._pos)
        self._pos += len(data)
        return data

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._file.close()

    def __enter__(self) -> _Spool:
        return self

    def __exit__(self, kind: object, exc: object, tb: object, /) -> None:
        self.close()


class _Capped:
    """A stream that stops with a UserError past ``cap`` bytes (pipes, s3)."""

    def __init__(self, raw: Any, cap: int, url: str, close: Callable[[], None]) -> None:
        self.raw, self.cap, self.url, self.total, self._close = raw, cap, url, 0, close

    def read(self, n: int = -1) -> bytes:
        data: bytes = self.raw.read(n)
        self.total += len(data)
        if self.total > self.cap:
            raise UserError(f"{shown(self.url)}: larger than the cap of "
                            f"{self.cap / (1 << 20):g} MiB a tar may have — refused (raise "
                            "max_download_bytes if it is genuine)")
        return data

    def close(self) -> None:
        self._close()

    def __enter__(self) -> _Capped:
        return self

    def __exit__(self, kind: object, exc: object, tb: object, /) -> None:
        self.close()


def _pipe(url: str, access: TarAccess) -> Any:
    if not access.allow_pipe:
        raise UserError(f"{shown(url)}: a pipe: URL runs a shell command — refused; pass "
                        "allow_pipe=True if you trust the command")
    proc = subprocess.Popen(url[5:], shell=True, stdout=subprocess.PIPE)  # noqa: S602
    return _Pipe(proc, access.max_download_bytes, url)


class _Pipe(_Capped):
    """A ``pipe:`` command's output; a command that fails is an error once its tar is read
    (not when the reader stopped it early)."""

    def __init__(self, proc: subprocess.Popen[bytes], cap: int, url: str) -> None:
        super().__init__(proc.stdout, cap, url, lambda: None)
        self.proc = proc

    def close(self) -> None:
        self.raw.close()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def __exit__(self, kind: object, exc: object, tb: object, /) -> None:
        done = self.proc.poll()  # exited by itself before the reader let go
        if done is None and kind is None:  # the tar was read: the command should be ending
            try:
                done = self.proc.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                done = None
        self.close()
        if kind is None and done not in (None, 0):
            raise UserError(f"{shown(self.url)}: the command exited with status {done} — "
                            "check it")


def _s3(url: str, access: TarAccess) -> Any:
    from npu_data.shards.storage import with_endpoint  # as remote datasets get it

    try:
        import fsspec
        fs, path = fsspec.core.url_to_fs(url, skip_instance_cache=True,
                                         **with_endpoint(url, access.storage_options))
        size = int(fs.size(path))
        if size > access.max_download_bytes:
            raise UserError(f"{shown(url)}: {size} bytes is larger than the cap of "
                            f"{access.max_download_bytes / (1 << 20):g} MiB a tar may have — "
                            "refused (raise max_download_bytes if it is genuine)")
        fh = fs.open(path, "rb")
    except UserError:
        raise
    except ImportError as exc:
        raise UserError(f"{shown(url)}: s3:// tars need s3fs ({exc.name} is not installed) — "
                        "pip install 'npu-data[s3]'") from None
    except FileNotFoundError:
        raise UserError(f"{shown(url)}: cannot open (no such object) — check the bucket, the "
                        "key and the endpoint") from None
    except Exception as exc:  # noqa: BLE001 — fsspec backends raise many kinds
        raise UserError(f"{shown(url)}: cannot open ({type(exc).__name__}: "
                        f"{_why(exc, access)}) — check the URL, the endpoint and your "
                        "credentials") from None
    return _Capped(fh, access.max_download_bytes, url, fh.close)


# ------------------------------------------------------------------------------ samples
# webdataset's rules (tariterators ``base_plus_ext``, ``tar_file_iterator``): the key is the
# member's path up to the first dot of its file name, the extension the rest, lower-cased; a
# name without such a dot, and ``__meta__`` names, are no sample's members
KEY_RULE = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
META_RULE = re.compile(r"__[^/]*__($|/)")
OWN_FIX = "write the tar again (`npu-data export-wds`)"


class TarGroup(NamedTuple):
    """One sample's members: webdataset's ``__key__``, ``{extension: bytes}``, the tar."""

    key: str
    parts: dict[str, bytes]
    url: str


def split_name(name: str) -> tuple[str, str] | None:
    """(key, lower-cased extension) of a member name; None for a name that is no sample's."""
    if META_RULE.match(name) or ("/" not in name and name.startswith("__")
                                 and name.endswith("__")):
        return None
    m = KEY_RULE.match(name)
    return (m.group(1), m.group(2).lower()) if m else None


def iter_tar_groups(url: str, access: TarAccess | None = None, fix: str = OWN_FIX
                    ) -> Generator[TarGroup, None, None]:
    """The samples of one tar in order: its members grouped by key (``split_name``). A member
    name seen twice, a sample whose members are not adjacent, a member or sample over
    ``access.max_member_bytes`` or a tar over ``access.max_unpacked_bytes``: UserError (``fix``
    says what to do about a tar that is damaged)."""
    access = access or TarAccess()
    with open_stream(url, access) as stream:
        key: str | None = None
        parts: dict[str, bytes] = {}
        held = 0
        seen: set[str] = set()
        try:
            for name, data in tar_members.members(stream, access.max_member_bytes,
                                                  access.max_unpacked_bytes):
                if not name.isprintable():  # bytes not UTF-8 decode to surrogates
                    raise UserError(f"{shown(url)}: member name {_raw(name)} is not printable "
                                    f"UTF-8 — refused (webdataset keys are text); rename it "
                                    f"or {fix}")
                split = split_name(name)
                if split is None:
                    continue
                k, ext = split
                if k != key:
                    if key is not None:
                        yield TarGroup(key, parts, url)
                    if k in seen:
                        raise UserError(f"{shown(url)}: sample {k.lstrip('/')} appears twice "
                                        "(its members are not together, or a name is "
                                        f"repeated) — {fix}")
                    seen.add(k)
                    key, parts, held = k, {}, 0
                if ext in parts:
                    raise UserError(f"{shown(url)}: member {name!r} appears twice — refused "
                                    f"(which copy is right?); {fix}")
                held += len(data)
                if held > access.max_member_bytes:
                    raise UserError(f"{shown(url)}: sample {_base(k)} holds more than "
                                    f"{access.max_member_bytes} bytes — refused (raise "
                                    "max_member_bytes if it is genuine)")
                parts[ext] = data
        except UserError:
            raise
        except tar_members.TarLimit as exc:
            raise UserError(f"{shown(url)}: {exc} — refused (a decompression bomb or a "
                            "damaged tar; raise max_member_bytes / max_unpacked_bytes if it is "
                            "genuine)") from None
        except tar_members.NotATar as exc:
            raise UserError(f"{shown(url)}: not a tar file ({_why(exc, access)})") from None
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise UserError(f"{shown(url)}: tar cut off or corrupt ({_why(exc, access)}) — "
                            f"{fix}") from None
        except Exception as exc:  # noqa: BLE001 - a remote stream's error, one clean line
            raise UserError(f"{shown(url)}: cannot read the tar ({type(exc).__name__}: "
                            f"{_why(exc, access)})") from None
        if key is not None:
            yield TarGroup(key, parts, url)


def _base(key: str) -> str:
    """A key's file-name part (the sample's name in npu-data's tars)."""
    return key.rpartition("/")[2]


def iter_tar_samples(url: str, access: TarAccess | None = None) -> Iterator[WdsSample]:
    """The samples of one tar npu-data wrote, in order (``iter_tar_groups``; the sample's
    ``key`` is the file-name part of webdataset's key)."""
    for group in iter_tar_groups(url, access):
        yield _sample(url, _base(group.key), group.parts)


def _raw(name: str) -> str:
    """``name`` as its bytes, escaped (``b'k\\xe9.json'``): safe to print."""
    return repr(name.encode("utf-8", "surrogateescape"))


def _sample(url: str, key: str, parts: dict[str, bytes]) -> WdsSample:
    if "json" not in parts:
        raise UserError(f"{shown(url)}: sample {key} has no .json annotations — write it with "
                        "`npu-data export-wds`")
    try:
        ann = orjson.loads(parts["json"])
    except orjson.JSONDecodeError as exc:
        raise UserError(f"{shown(url)}: sample {key}: {key}.json is not JSON ({exc}) — export "
                        "it again") from None
    if not isinstance(ann, dict):
        raise UserError(f"{shown(url)}: sample {key}: {key}.json is not an object — export it "
                        "again with `npu-data export-wds`")
    ext = ann.get("image_ext") or next((e for e in parts if e != "json"), None)
    if ext is None or ext not in parts:
        raise UserError(f"{shown(url)}: sample {key} has no image file")
    ann["image_ext"] = ext
    return WdsSample(key, parts[ext], ann, url)


def read_wds_samples(paths: Iterable[str], access: TarAccess | None = None
                     ) -> Iterator[WdsSample]:
    """Every sample of the tars ``paths`` (paths or allowed URLs), in order."""
    for p in paths:
        yield from iter_tar_samples(str(p), access)


def wds_to_table(paths: Iterable[str], media_dir: str | os.PathLike[str],
                 access: TarAccess | None = None) -> AnnotationTable:
    """Extract the images of ``paths`` into ``media_dir`` and build the table to import.

    ``image_ref`` of each row is the absolute path of its extracted image file, so the
    writer's image resolution reads it back byte for byte.
    """
    from npu_data.common.oserrors import os_error
    from npu_data.common.paths import inside
    from npu_data.formats.tasks import write_media

    media = Path(media_dir).resolve()
    anns: list[dict[str, Any]] = []
    refs: list[str] = []
    where: list[WdsSample] = []
    for n, smp in enumerate(read_wds_samples(paths, access)):
        try:  # the name comes from the tar: one plain component, inside the media folder
            media.mkdir(parents=True, exist_ok=True)
            path = inside(media, f"{n:09d}-{smp.key}.{smp.annotations['image_ext']}",
                          where=f"{shown(smp.url)}: sample {smp.key!r}")
            write_media(path, smp.image)  # kept when the same bytes are there (resume)
        except OSError as exc:
            raise os_error(exc, media, "or pass another --out") from None
        anns.append(smp.annotations)
        refs.append(str(path))
        where.append(smp._replace(image=b""))
    if not anns:
        raise UserError("no WebDataset samples found in the given tars")
    try:
        return table_from_json(anns, refs)
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        from npu_data.formats.webdataset.mapping import sample_columns

        for smp in where:  # name the sample at fault
            try:
                sample_columns(smp.annotations)
            except (KeyError, TypeError, ValueError, IndexError) as bad:
                raise bad_annotations(smp, bad) from None
        raise UserError(f"the tars' annotations do not fit together ({exc}) — export them "
                        "again with `npu-data export-wds`") from None


def bad_annotations(smp: WdsSample, exc: BaseException) -> UserError:
    """The one-line error of a sample whose JSON does not read."""
    what = f"missing {exc}" if isinstance(exc, KeyError) else str(exc)
    return UserError(f"{shown(smp.url)}: sample {smp.key}: annotations unreadable ({what}) — "
                     "export it again with `npu-data export-wds`")
