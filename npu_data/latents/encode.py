"""``encode_latents``: run the frozen VAE (and text encoders) once over a shard dataset and
store what training needs in a latents store (docs/format.md, "Latents stores").

Each sample is resized to cover its aspect-ratio bucket and centre-cropped
(``transforms.ResizeCrop``: Pillow BILINEAR, torchvision's centre offsets), mapped to
[-1, 1] (``Normalize(0.5, 0.5)``) and encoded: ``latent_dist.mean * scaling_factor`` (or a
draw keyed by (seed, variant, sample), ``latent="sample"``). With
``flip=True`` the mirrored variant follows diffusers' SDXL trainer: the resized image is
mirrored, then cropped at the same centre offset (``crop_top_left_flipped``). Text
embeddings follow SDXL: each encoder's penultimate hidden state, concatenated on the last
dimension; the pooled embedding is the last encoder's projected (or pooled) output.

Output shard ``k`` holds source samples ``[k * shard_size, (k + 1) * shard_size)``, encoded
in bucket batches of that shard alone, so its bytes do not depend on ranks or restarts:
each shard is written into a temporary folder and renamed into place with its completion
record (``resume=True`` keeps complete ones), the manifest last. Ranks (torchrun, or a
``Group``) split the shards as the distributed import does.

``out="s3://bucket/prefix"`` (any fsspec URL) goes through the import's upload
(``shards.upload.UrlTarget``): the URL's lease is taken first, the store is written into the
node's staging folder, then every rank uploads its shards with conditional writes, rank 0 the
empty prompt's files and the manifest last; ``resume=True`` keeps the staged shards and
skips the objects already uploaded whole.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import shutil
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from npu_data import device as dev
from npu_data.buckets import Buckets, BucketSpec, buckets_of
from npu_data.common.atomic import atomic_write_bytes, fsync_dir, npy_bytes
from npu_data.common.hashing import file_sha256
from npu_data.common.oserrors import os_error
from npu_data.errors import UserError, UserTypeError, UserValueError
from npu_data.latents.captions import caption_record
from npu_data.latents.models import (
    Models,
    encode_pixels,
    encode_prompts,
    encoder_record,
    factor_of,
    load_models,
)
from npu_data.latents.weights import check_resume, weights_sha256
from npu_data.progress import bar, foreign_bars_off
from npu_data.shards.batch_read import check_field, sample_captions
from npu_data.shards.distributed_import import Group, import_group, leave
from npu_data.shards.format import (
    ALIGN,
    COMPLETE,
    DATA,
    ENC_LATENTS,
    FORMAT_NAME,
    FORMAT_VERSION,
    INDEX,
    INDEX_DTYPE,
    MANIFEST,
    REJECTED,
    column_file,
    column_schema,
    dumps,
    shard_name,
)
from npu_data.shards.latent_format import (
    CAPTION_ROWS,
    DTYPES,
    GROUP,
    column_spec,
    dtype_name,
    empty_prompt_spec,
    to_numpy,
)
from npu_data.shards.storage import is_url
from npu_data.shards.writer import completed_record as _completed
from npu_data.shards.writer import import_lock
from npu_data.shards.writer import prepare_out as _prepare
from npu_data.shards.writer import write_synced as _write_synced

SAMPLE_TEXT = ("image_ref", "data_json")  # kept from the source (what each latent came from)


def preprocess(batch: dict[str, Any], target: tuple[int, int], mirrored: bool,
               device: torch.device | None = None) -> tuple[torch.Tensor, np.ndarray]:
    """A collated uint8 batch of one bucket -> ([-1, 1] float32 (B, 3, th, tw) on ``device``,
    crop top-left (B, 2)): the centre ``ResizeCrop`` to ``target`` (run on ``device``: the
    batch is copied there first); ``mirrored``: of the mirrored resized image (diffusers:
    flip, then crop at the centre offset)."""
    from npu_data.transforms import CropParams, Normalize, ResizeCrop
    from npu_data.transforms.crop import window_params

    crop = ResizeCrop(target)
    sizes = batch["sizes"].numpy().astype(np.int64)
    params = crop.windows(sizes, None)
    drawn = CropParams.of(params)
    assert drawn.top_left is not None and drawn.windows is not None
    top_left = drawn.top_left.numpy().copy()
    if mirrored:  # the mirror of the crop at the mirrored offset
        full = drawn.windows.numpy()[:, 2:]
        shifted = top_left.copy()
        shifted[:, 1] = full[:, 1] - target[1] - top_left[:, 1]
        params = window_params(sizes, full, shifted, np.asarray([target] * len(sizes)))
    on = {k: batch[k].to(device or "cpu", non_blocking=True) for k in ("image", "sizes")}
    image = crop.apply(on, params)["image"]
    if mirrored:
        image = torch.flip(image, dims=[3])
    x = Normalize(0.5, 0.5).apply({"image": image.contiguous()}, {})["image"]
    return x, top_left


def _source_text(src: Any, gi: int, name: str) -> bytes:
    k, j = src.locate(gi)
    sh = src.shard(k)
    off = sh.col(f"{name}.offsets")
    return bytes(sh.col(f"{name}.bytes")[int(off[j]):int(off[j + 1])])


def _text_column(values: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(values) + 1, np.int64)
    np.cumsum([len(v) for v in values], out=offsets[1:])
    return np.frombuffer(b"".join(values), np.uint8), offsets


class _Encoder:
    """One encode: the source, the models, the record, the output folder."""

    def __init__(self, src: Any, models: Models, record: dict[str, Any], out: Path,
                 shard_size: int, batch_size: int, fingerprint: dict[str, Any]) -> None:
        self.src, self.models, self.record, self.out = src, models, record, out
        self.shard_size, self.batch_size, self.fp = shard_size, batch_size, fingerprint
        # a CPU encode's bytes depend on its thread count: recorded, a resume must match
        self.threads = None if dev.is_accelerator(models.device) else torch.get_num_threads()
        self.sizes, self.task_ids = src.sizes(), src.task_ids()
        self.rule = _rule(record)
        self.unconditional = bool(record["captions"]["unconditional"])

    def keys(self, ids: np.ndarray, variant: int) -> np.ndarray | None:
        """The draw keys of samples ``ids`` (variant 0, or 1 mirrored) when latents are
        sampled (``latent="sample"``), keyed by (seed, variant, sample); None: the mean."""
        if self.record["latent"] != "sample":
            return None
        from npu_data.transforms.draws import sample_keys

        return sample_keys(int(self.record["seed"]), variant, ids)

    def captions(self, gi: int) -> list[str]:
        """Source sample ``gi``'s captions (``batch_read.captions_of``; the first is the pixel
        path's caption), ``[""]`` without one or when unconditional: each gets an embedding
        row."""
        if self.unconditional:
            return [""]
        return sample_captions(self.src, gi) or [""]

    def shard_range(self, k: int) -> tuple[int, int]:
        return k * self.shard_size, min(len(self.src), (k + 1) * self.shard_size)

    def encode_shard(self, k: int, pb: Any) -> dict[str, Any]:
        """Encode and write shard ``k`` atomically; its completion record."""
        from npu_data.loaders import collate_samples

        lo, hi = self.shard_range(k)
        n = hi - lo
        targets = self.rule.targets(self.sizes[lo:hi])
        name_of = self.record["dtype"]
        payloads: list[bytes] = [b""] * n
        top_left = np.zeros((n, 2), np.int64)
        flipped_tl = np.zeros((n, 2), np.int64)
        said = [self.captions(gi) for gi in range(lo, hi)]  # each sample's, >= 1 row
        rows = np.zeros(n + 1, np.int64)
        np.cumsum([len(c) for c in said], out=rows[1:])
        text = self.record.get("text")
        embeds = pooled = None
        if text:
            npd = np.dtype(DTYPES[self.record["dtype"]][0])
            embeds = np.zeros((int(rows[-1]), text["tokens"], text["dim"]), npd)
            pooled = np.zeros((int(rows[-1]), text["pooled"]), npd)
        for target in sorted({(int(t[0]), int(t[1])) for t in targets}):
            members = np.flatnonzero((targets == target).all(axis=1))
            for s in range(0, len(members), self.batch_size):
                local = members[s:s + self.batch_size]
                batch = collate_samples(self.src.__getitems__((local + lo).tolist()))
                x, tl = preprocess(batch, target, False, self.models.device)
                parts = [to_numpy(encode_pixels(self.models.vae, x, self.keys(local + lo, 0)),
                                  name_of)]
                top_left[local] = tl
                if self.record["flip"]:
                    xf, tlf = preprocess(batch, target, True, self.models.device)
                    parts.append(to_numpy(encode_pixels(self.models.vae, xf,
                                                        self.keys(local + lo, 1)), name_of))
                    flipped_tl[local] = tlf
                for t, i in enumerate(local.tolist()):
                    payloads[i] = b"".join(p[t].tobytes() for p in parts)
                if text:  # every caption of the batch's samples: one row each
                    assert embeds is not None and pooled is not None
                    at = np.concatenate([np.arange(rows[i], rows[i + 1]) for i in local])
                    e, p = encode_prompts(self.models, [c for i in local for c in said[i]])
                    embeds[at] = to_numpy(e, name_of)
                    pooled[at] = to_numpy(p, name_of)
                pb.update(len(local))
        arrays = {f"{GROUP}.original_size": self.sizes[lo:hi].astype(np.int64),
                  f"{GROUP}.crop_top_left": top_left, f"{GROUP}.target_size": targets}
        arrays[CAPTION_ROWS] = rows
        arrays[f"{GROUP}.caption.bytes"], arrays[f"{GROUP}.caption.offsets"] = \
            _text_column([c.encode("utf-8") for cs in said for c in cs])
        if self.record["flip"]:
            arrays[f"{GROUP}.crop_top_left_flipped"] = flipped_tl
        if text:
            arrays[f"{GROUP}.prompt_embeds"] = embeds
            arrays[f"{GROUP}.pooled_prompt_embeds"] = pooled
        for name in SAMPLE_TEXT:
            values = [_source_text(self.src, gi, name) for gi in range(lo, hi)]
            arrays[f"{name}.bytes"], arrays[f"{name}.offsets"] = _text_column(values)
        return self._write(k, payloads, targets, self.task_ids[lo:hi], arrays)

    def _write(self, k: int, payloads: list[bytes], targets: np.ndarray, task_ids: np.ndarray,
               arrays: dict[str, np.ndarray]) -> dict[str, Any]:
        lo, hi = self.shard_range(k)
        name = shard_name(k)
        tmp = self.out / f".{name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        index = np.zeros(len(payloads), INDEX_DTYPE)
        pos = 0
        with open(tmp / DATA, "wb") as fh:
            for i, p in enumerate(payloads):
                index[i] = (pos, len(p), targets[i, 0], targets[i, 1], 3, ENC_LATENTS,
                            zlib.crc32(p), task_ids[i])
                fh.write(p + b"\0" * (-len(p) % ALIGN))
                pos += len(p) + (-len(p) % ALIGN)
            fh.flush()
            os.fsync(fh.fileno())
        files = {INDEX: npy_bytes(index)}
        files.update({column_file(c): npy_bytes(a) for c, a in arrays.items()})
        for fname, data in files.items():
            _write_synced(tmp / fname, data)
        listing = {DATA: {"size": pos, "sha256": file_sha256(tmp / DATA)}}
        listing.update({f: {"size": len(d), "sha256": hashlib.sha256(d).hexdigest()}
                        for f, d in files.items()})
        record = {"name": name, "tasks": [lo, hi], "samples": hi - lo, "rejected": [],
                  "files": dict(sorted(listing.items())), "fingerprint": self.fp,
                  "threads": self.threads}
        _write_synced(tmp / COMPLETE, dumps(record))
        fsync_dir(tmp)
        final = self.out / name
        shutil.rmtree(final, ignore_errors=True)
        os.rename(tmp, final)
        fsync_dir(self.out)
        return record


def _empty_prompt_files(models: Models, record: dict[str, Any]) -> dict[str, bytes]:
    if not record.get("text"):
        return {}
    e, p = encode_prompts(models, [""])
    arrays = [to_numpy(e, record["dtype"]), to_numpy(p, record["dtype"])]
    return {f: npy_bytes(a) for f, a in zip(empty_prompt_spec(record), arrays, strict=True)}


def _check_options(batch_size: int, shard_size: int, dtype: Any, flip: Any) -> str:
    for name, v in (("batch_size", batch_size), ("shard_size", shard_size)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise UserValueError(f"{{{name}}}: must be a positive integer, got {v!r}",
                                 option=name)
    if not isinstance(flip, bool):
        raise UserTypeError(f"{{flip}}: must be True or False, got {flip!r}", option="flip")
    try:
        return dtype_name(dtype)
    except ValueError:
        raise UserValueError(f"{{dtype}}: {dtype!r} cannot be stored — use torch.bfloat16, "
                             "torch.float16 or torch.float32", option="dtype") from None


def encode_latents(dataset: Any, out: str | os.PathLike[str], vae: Any, *,
                   buckets: BucketSpec = "sdxl", batch_size: int = 8,
                   device: dev.DeviceLike = "auto", dtype: torch.dtype = torch.bfloat16,
                   flip: bool = True, text_encoders: Sequence[Any] | None = None,
                   tokenizers: Sequence[Any] | None = None, shard_size: int = 1024,
                   resume: bool = False, group: Group | None = None,
                   latent: str = "mean", seed: int = 0,
                   storage_options: dict[str, Any] | None = None,
                   caption_field: str | None = None, unconditional: bool = False,
                   no_upscale: bool = False) -> Any:
    """Encode ``dataset`` once with the frozen ``vae`` (and text encoders) into ``out``.

    Args:
        dataset: A ``ShardDataset`` of images, or its folder.
        out: The latents store's folder (empty, or with ``resume=True`` a killed encode's),
            or a URL such as ``s3://bucket/prefix`` (an empty prefix, or a killed encode's).
        vae: A diffusers ``AutoencoderKL`` or the local folder it was saved to.
        buckets: ``"sdxl"``, ``"kohya"`` (kohya's rule at 1024 px), a ``Buckets``
            (``npu_data.buckets("kohya", 256)``) or a list of ``(height, width)``, each side
            a multiple of the VAE's factor (8 for SD/SDXL).
        batch_size: Samples per VAE call (one bucket per batch).
        device: Where the models run: ``"auto"`` (npu, then cuda, then cpu) or a device.
        dtype: The stored dtype of latents and embeddings (bfloat16, float16 or float32);
            the models run in their own dtype.
        flip: Also store ``latents_flipped`` (for ``RandomLatentFlip``).
        text_encoders: None, or SDXL's two (``CLIPTextModel``,
            ``CLIPTextModelWithProjection``) as models or local folders.
        tokenizers: Their tokenizers (``CLIPTokenizer``), models or local folders.
        shard_size: Source samples per output shard.
        resume: Keep the complete shards of a killed encode with the same settings.
        group: The ranks splitting the shards (default: torchrun's, from ``WORLD_SIZE``).
        latent: ``"mean"`` (the posterior's mean) or ``"sample"`` (one draw per sample and
            variant, keyed by ``seed``, the variant and the sample's index).
        seed: The draws' seed with ``latent="sample"``.
        storage_options: fsspec options of a URL ``out`` (endpoint, credentials; default:
            the environment's, as for reading).
        caption_field: The task data key holding each sample's caption (None: the first
            TextArea text, else the task data's ``caption``, ``text`` or ``prompt``; the
            pixel path's rule, ``shards.batch_read``). Every caption of a sample (all its
            TextArea texts, or each string of a list the field holds) is embedded as one
            row (``latent.caption_rows``); ``RandomCaption`` trains one per epoch.
        unconditional: Encode every sample with the empty prompt (captions ignored); without
            it, text encoders over a dataset where no sample has a caption are refused.
        no_upscale: A photo smaller than its bucket gets one inside it (kohya's
            ``bucket_no_upscale``; sides rounded down to the buckets' step, 64).

    Returns:
        ``ShardDataset(out)`` (of a URL: read through the node-local cache).

    Raises:
        UserError: A bad argument, a model that does not load, a bucket the VAE cannot
            encode, no caption for text encoders, a folder npu-data did not write, or a
            resume with other settings, models or CPU thread count.
    """
    from npu_data.shards.reader import ShardDataset

    name = _check_options(batch_size, shard_size, dtype, flip)
    if latent not in ("mean", "sample"):
        raise UserValueError(f"{{latent}}: {latent!r} — use 'mean' or 'sample'", option="latent")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise UserValueError(f"{{seed}}: must be a non-negative integer, got {seed!r}",
                             option="seed")
    check_field(caption_field, "encode_latents")
    src = dataset if isinstance(dataset, ShardDataset) else ShardDataset(
        dataset, caption_field=caption_field)
    if caption_field is not None and src.caption_field != caption_field:
        src = ShardDataset(src.path, caption_field=caption_field)
    if src.store == "latents":
        raise UserError(f"{src.path}: already a latents store — encode the image dataset it "
                        "was made from")
    rule = buckets_of(buckets, no_upscale=bool(no_upscale), who="encode_latents")
    captions = caption_record(src, unconditional, bool(text_encoders))
    device_ = dev.resolve_device(device)
    settings: dict[str, Any] = {"name": name, "flip": flip, "rule": rule, "captions": captions,
                                "latent": latent, "seed": seed, "shard_size": shard_size,
                                "batch_size": batch_size, "resume": resume}
    joined = group is None
    g = import_group() if group is None else group
    url = str(out) if is_url(out) else None
    target = None
    try:
        if url is not None:  # the URL's lease and checks first: before the models load
            from npu_data.shards.upload import UrlTarget

            target = UrlTarget(url, resume, g, storage_options)
        out_dir = Path(out) if target is None else target.staging
        local = g if target is None else dataclasses.replace(g, shared=False)  # one per node
        with foreign_bars_off():  # no transformers \r bars piling up in a log
            models = load_models(vae, text_encoders, tokenizers, device_)
        try:
            nshards = _encode(src, models, out_dir, local, **settings)
        except OSError as exc:  # a full disk, a read-only folder, permissions: one line
            raise os_error(exc, out_dir, "then rerun with resume=True (--resume)") from None
        if target is not None:
            target.upload(nshards)
    finally:
        if target is not None:
            target.close()  # the URL's lease and the staging folder's lock
        if joined:
            leave(g)
    if url is not None:
        return ShardDataset(url, storage_options=storage_options)
    return ShardDataset(out_dir)


def _rule(record: dict[str, Any]) -> Buckets:
    """The bucket rule of a ``latents`` record: its list, and kohya's no-upscale rule when
    it says so."""
    return Buckets(tuple((int(h), int(w)) for h, w in record["buckets"]),
                   bool(record.get("no_upscale", False)), int(record.get("step", 64)))


def _encode(src: Any, models: Models, out: Path, group: Group, *, name: str, flip: bool,
            rule: Buckets, captions: dict[str, Any], latent: str, seed: int, shard_size: int,
            batch_size: int, resume: bool) -> int:
    """The record and fingerprint of the loaded models, then the encode into folder ``out``;
    the shard count."""
    f = factor_of(models.vae)
    bad = [b for b in rule.sizes if b[0] % f or b[1] % f]
    if bad:
        raise UserValueError(f"{{buckets}}: {list(bad[0])} is not a multiple of the VAE's "
                             f"factor {f} — use buckets whose sides are multiples of {f}",
                             option="buckets")
    if rule.no_upscale and rule.step % f:
        raise UserValueError(f"{{no_upscale}}: the buckets' step {rule.step} is not a multiple "
                             f"of the VAE's factor {f} — use Buckets(step=64)",
                             option="no_upscale")
    record = encoder_record(models, name, flip, rule.sizes, f, latent, seed)
    if rule.no_upscale:  # kept out of the record otherwise: stores made before read the same
        record.update(no_upscale=True, step=rule.step)
    record["captions"] = captions
    record["caption_rows"] = True  # several captions per sample: one row each (CAPTION_ROWS)
    roles = [("vae", models.vae)] + [(f"text_encoder{'' if i == 0 else f'_{i + 1}'}", e)
                                     for i, e in enumerate(models.text_encoders)]
    for role, model in roles:  # bound to the weights, not only the configs
        record["encoders"][role]["weights_sha256"] = weights_sha256(model)
    source_sha = hashlib.sha256((src.path / MANIFEST).read_bytes()).hexdigest()
    fp = {"options": {"shard_size": shard_size, "batch_size": batch_size,
                      "device": models.device.type, "latents": record},
          "source_sha256": source_sha}
    return _run(src, models, record, out, shard_size, batch_size, fp, resume, group)


def _run(src: Any, models: Models, record: dict[str, Any], out: Path, shard_size: int,
         batch_size: int, fp: dict[str, Any], resume: bool, group: Group) -> int:
    """Encode this rank's shards into ``out``, then (rank 0) the manifest; the shard count."""
    with contextlib.ExitStack() as held:
        error = None
        if group.rank == 0:
            try:
                held.enter_context(import_lock(out))
                if resume:  # the same models and CPU threads, before anything is deleted
                    check_resume(out, record["encoders"],
                                 None if dev.is_accelerator(models.device)
                                 else torch.get_num_threads())
                _prepare(out, resume, fp)
            except UserError as exc:
                error = str(exc)
        group.agree(error)
        enc = _Encoder(src, models, record, out, shard_size, batch_size, fp)
        nshards = max(1, -(-len(src) // shard_size))
        mine = [k for k in range(nshards) if group.mine(k)]
        records: dict[int, dict[str, Any]] = {}
        if resume:
            for k in mine:
                rec = _completed(out, k, fp)
                if rec is not None:
                    records[k] = rec
        pb = bar(total=sum(enc.shard_range(k)[1] - enc.shard_range(k)[0] for k in mine),
                 desc="encode" if group.world == 1 else f"encode (rank {group.rank})",
                 unit="sample")
        try:
            pb.update(sum(r["samples"] for r in records.values()))
            for k in mine:
                if k not in records:
                    records[k] = enc.encode_shard(k, pb)
        finally:
            pb.close()
        for part in group.gather(records):
            records.update(part)
        if group.rank == 0:
            _finish(out, src, models, record, fp, [records[k] for k in range(nshards)])
        group.barrier()
    return nshards


def _finish(out: Path, src: Any, models: Models, record: dict[str, Any], fp: dict[str, Any],
            records: list[dict[str, Any]]) -> None:
    """The empty prompt's files and the manifest (rank 0, after every shard)."""
    files = _empty_prompt_files(models, record)
    for fname, data in files.items():
        atomic_write_bytes(out / fname, data)
    full = dict(record, empty_prompt={f: {"size": len(d), "sha256": hashlib.sha256(d).hexdigest()}
                                      for f, d in files.items()})
    columns = {c: s for c, s in column_schema().items() if c.split(".", 1)[0] in SAMPLE_TEXT}
    columns.update({c: {"dtype": dt.str, "shape": list(shape)}
                    for c, (dt, shape) in column_spec(record).items()})
    samples = sum(r["samples"] for r in records)
    manifest = {
        "format": FORMAT_NAME, "version": FORMAT_VERSION, "byteorder": "little",
        "align": ALIGN, "store": "latents",
        "index_dtype": [[n, INDEX_DTYPE[n].str] for n in INDEX_DTYPE.names or ()],
        "columns": dict(sorted(columns.items())), "kinds": [],
        "controls": list(src.controls), "labels": {k: list(v) for k, v in src.labels.items()},
        "counts": {"samples": samples, "tasks": samples, "rows": samples, "rejected": 0,
                   "shards": len(records)},
        "shard_size": fp["options"]["shard_size"],
        "shards": [{"name": r["name"], "samples": r["samples"], "tasks": r["tasks"],
                    "files": r["files"]} for r in records],
        "source_sha256": fp["source_sha256"],
        "table_sha256": src.manifest.get("table_sha256"),
        "options": fp["options"], "latents": full,
    }
    atomic_write_bytes(out / REJECTED, b"")
    atomic_write_bytes(out / MANIFEST, dumps(manifest))
