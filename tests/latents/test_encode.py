"""``encode_latents`` (issue 38): what a latents store holds equals the frozen encoders applied
to the same preprocessed pixels, computed here independently (Pillow resize and mirror,
transformers' own calls); it verifies, refuses what it cannot use, and stores bf16 exactly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from npu_data import ShardDataset
from npu_data.errors import UserError
from npu_data.latents import check_store, empty_prompt, encode_latents
from npu_data.shards.verify import verify_dataset
from tests.support.latents import BUCKETS, encode_kwargs, sdxl_prompt


def _bucket(h: int, w: int) -> tuple[int, int]:
    return min(BUCKETS, key=lambda b: abs(np.log(h / w) - np.log(b[0] / b[1])))


def _reference_crop(image: np.ndarray, target: tuple[int, int], mirrored: bool
                    ) -> tuple[torch.Tensor, tuple[int, int]]:
    """diffusers' SDXL preprocessing with Pillow: resize to cover ``target`` (the side that
    sets the scale exact, the other rounded half up), mirror first when asked, centre crop
    at Python's round((full - target) / 2); [-1, 1] float32 (1, 3, th, tw) and (top, left)."""
    h, w = image.shape[:2]
    th, tw = target
    if th * w >= tw * h:
        size = (max(tw, (2 * w * th + h) // (2 * h)), th)
    else:
        size = (tw, max(th, (2 * h * tw + w) // (2 * w)))
    im = Image.fromarray(image).resize(size, Image.Resampling.BILINEAR)
    if mirrored:
        im = im.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    top, left = round((size[1] - th) / 2), round((size[0] - tw) / 2)
    px = torch.from_numpy(np.asarray(im.crop((left, top, left + tw, top + th))).copy())
    x = (px.permute(2, 0, 1)[None].float() / 255 - 0.5) / 0.5
    return x, (top, left)


def test_latents_equal_the_vae_on_the_same_pixels(store: Path, pixels: Path,
                                                  models: dict[str, Path]) -> None:
    from diffusers import AutoencoderKL

    vae = AutoencoderKL.from_pretrained(models["vae"]).eval()
    src, ds = ShardDataset(pixels), ShardDataset(store)
    assert len(ds) == len(src) == 10
    seen = set()
    for i in range(len(ds)):
        image = src[i]["image"]
        target = _bucket(*image.shape[:2])
        seen.add(target)
        s = ds[i]
        assert s["original_size"].tolist() == list(image.shape[:2])
        assert s["target_size"].tolist() == list(target) == s["sizes"].tolist()
        assert s["latents"].shape == (4, target[0] // 8, target[1] // 8)
        for mirrored, key, tl in ((False, "latents", "crop_top_left"),
                                  (True, "latents_flipped", "crop_top_left_flipped")):
            x, top_left = _reference_crop(image, target, mirrored)
            with torch.no_grad():
                want = vae.encode(x).latent_dist.mean[0] * vae.config.scaling_factor
            assert (s[key] - want).abs().max().item() <= 1e-5, (i, key)
            assert s[tl].tolist() == list(top_left)
        assert not torch.equal(s["latents"], s["latents_flipped"])
    assert len(seen) == 2  # landscape and portrait buckets both encoded


def test_text_embeddings_equal_the_encoders(store: Path, models: dict[str, Path]) -> None:
    sdxl = sdxl_prompt(models)
    ds = ShardDataset(store)
    assert ds.latents is not None and ds.latents["text"] == {"tokens": 12, "dim": 40,
                                                             "pooled": 20}
    for i in (0, 5, 8):  # (the last task is unlabeled: no caption)
        s = ds[i]
        assert s["caption"]
        embeds, pooled = sdxl(s["caption"])
        assert (s["prompt_embeds"] - embeds).abs().max().item() <= 1e-5
        assert (s["pooled_prompt_embeds"] - pooled).abs().max().item() <= 1e-5
    e, p = empty_prompt(ds)
    want_e, want_p = sdxl("")
    assert (e - want_e).abs().max().item() <= 1e-5 and (p - want_p).abs().max().item() <= 1e-5
    assert not torch.allclose(e, ds[0]["prompt_embeds"])


def test_bf16_store_is_the_float32_latents_rounded(store: Path, pixels: Path,
                                                   models: dict[str, Path],
                                                   tmp_path: Path) -> None:
    ds16 = encode_latents(pixels, tmp_path / "bf16", models["vae"],
                          **encode_kwargs(models, dtype=torch.bfloat16, text_encoders=None,
                                          tokenizers=None))
    ds32 = ShardDataset(store)
    for i in (0, 5):
        got = ds16[i]["latents"]
        assert got.dtype == torch.bfloat16
        assert torch.equal(got, ds32[i]["latents"].to(torch.bfloat16))
    assert "prompt_embeds" not in ds16[0]
    assert verify_dataset(tmp_path / "bf16") == []


def test_verify_checks_every_latent_byte(store: Path, tmp_path: Path) -> None:
    import shutil

    assert verify_dataset(store) == []
    copy = tmp_path / "copy"
    shutil.copytree(store, copy)
    data = copy / "shard-00001" / "data.bin"
    raw = bytearray(data.read_bytes())
    raw[100] ^= 0xFF
    data.write_bytes(bytes(raw))
    (copy / "empty_prompt.pooled_prompt_embeds.npy").write_bytes(b"\x93NUMPY broken")
    found = [str(p) for p in verify_dataset(copy)]
    assert any("shard-00001: data.bin sha256 differs" in p for p in found), found
    assert any("crc32 mismatch" in p for p in found), found
    assert any("empty_prompt.pooled_prompt_embeds.npy" in p for p in found), found


def test_mismatches_are_refused_in_one_line(store: Path, pixels: Path,
                                            models: dict[str, Path], tmp_path: Path) -> None:
    ds = ShardDataset(store)
    check_store(ds, buckets=BUCKETS, dtype=torch.float32, flip=True, text=True)
    with pytest.raises(UserError, match=r"encoded for buckets .* the run uses") as exc:
        check_store(ds, buckets=[(64, 64)])
    assert "\n" not in str(exc.value)
    with pytest.raises(UserError, match="stores float32, the run expects torch.bfloat16"):
        check_store(ds, dtype=torch.bfloat16)
    with pytest.raises(UserError, match="another VAE"):
        check_store(ds, vae_config="0" * 64)
    with pytest.raises(UserError, match="written with other options"):  # resume, other dtype
        encode_latents(pixels, store, models["vae"],
                       **encode_kwargs(models, dtype=torch.bfloat16, resume=True))
    assert verify_dataset(store) == []  # the refused resume changed nothing
    with pytest.raises(UserError, match="not a multiple of the VAE's factor 8"):
        encode_latents(pixels, tmp_path / "x", models["vae"],
                       **encode_kwargs(models, buckets=[(60, 60)]))
    with pytest.raises(UserError, match="already a latents store"):
        encode_latents(store, tmp_path / "y", models["vae"], **encode_kwargs(models))
    with pytest.raises(UserError, match="no such VAE folder"):
        encode_latents(pixels, tmp_path / "z", tmp_path / "missing", **encode_kwargs(models))
    with pytest.raises(UserError, match="not a latents store"):
        empty_prompt(ShardDataset(pixels))
    assert not (tmp_path / "x").exists() and not (tmp_path / "z").exists()


def test_the_manifest_records_the_encoders(store: Path, models: dict[str, Path]) -> None:
    from diffusers import AutoencoderKL

    from npu_data.latents.models import config_sha256

    ds = ShardDataset(store)
    assert ds.latents is not None
    record = ds.latents
    assert record["dtype"] == "float32" and record["flip"] is True
    assert record["buckets"] == [list(b) for b in BUCKETS] and record["factor"] == 8
    assert record["latent"] == "mean" and "centre crop" in record["crop"]
    assert set(record["encoders"]) == {"vae", "text_encoder", "tokenizer", "text_encoder_2",
                                       "tokenizer_2"}
    vae = AutoencoderKL.from_pretrained(models["vae"])
    check_store(ds, vae_config=config_sha256(vae))  # the same VAE, loaded again: accepted
    other = AutoencoderKL(**{**vae.config, "scaling_factor": 0.13025})
    with pytest.raises(UserError, match="another VAE"):
        check_store(ds, vae_config=config_sha256(other))


def _copy(store: Path, tmp_path: Path) -> Path:
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(store, out)
    return out


def test_a_damaged_store_is_refused_in_one_line(store: Path, tmp_path: Path) -> None:
    import json

    from npu_data.errors import DataCorruption

    copy = _copy(store, tmp_path)
    manifest = json.loads((copy / "manifest.json").read_text())
    bad = json.loads(json.dumps(manifest))
    bad["latents"]["dtype"] = "int8"
    (copy / "manifest.json").write_text(json.dumps(bad))
    with pytest.raises(DataCorruption, match=r"latents has dtype 'int8'") as exc:
        ShardDataset(copy)
    assert "\n" not in str(exc.value)
    bad = json.loads(json.dumps(manifest))
    bad["latents"]["channels"] = 8  # the payloads no longer have the bytes this says
    (copy / "manifest.json").write_text(json.dumps(bad))
    with pytest.raises(DataCorruption, match="is not a latents payload of its size"):
        ShardDataset(copy)[0]
    manifest["store"] = "raw"  # latents read as images: encoding 4 is refused
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DataCorruption, match="is a latents payload in an image store"):
        ShardDataset(copy)[0]


def test_sampled_latents_are_keyed_draws(store: Path, pixels: Path, models: dict[str, Path],
                                         tmp_path: Path) -> None:
    """``latent="sample"``: mean + std * eps, eps drawn from a generator seeded by (seed,
    variant, sample), whatever the batch: recomputed here sample by sample."""
    from diffusers import AutoencoderKL

    from npu_data.transforms.draws import sample_keys

    ds = encode_latents(pixels, tmp_path / "sampled", models["vae"],
                        **encode_kwargs(models, text_encoders=None, tokenizers=None,
                                        latent="sample", seed=5))
    assert ds.latents is not None and ds.latents["latent"] == "sample"
    assert ds.latents["seed"] == 5
    vae = AutoencoderKL.from_pretrained(models["vae"]).eval()
    src, means = ShardDataset(pixels), ShardDataset(store)
    for i in (0, 5):
        image = src[i]["image"]
        target = _bucket(*image.shape[:2])
        for variant, key in ((0, "latents"), (1, "latents_flipped")):
            x, _ = _reference_crop(image, target, bool(variant))
            with torch.no_grad():
                dist = vae.encode(x).latent_dist
            seed = int(sample_keys(5, variant, [i])[0])
            eps = torch.randn(dist.mean.shape[1:], generator=torch.Generator().manual_seed(seed))
            want = (dist.mean[0] + dist.std[0] * eps) * vae.config.scaling_factor
            assert (ds[i][key] - want).abs().max().item() <= 1e-5, (i, key)
            assert (ds[i][key] - means[i][key]).abs().max().item() > 1e-3
    with pytest.raises(UserError, match="use 'mean' or 'sample'"):
        encode_latents(pixels, tmp_path / "bad", models["vae"],
                       **encode_kwargs(models, latent="mode"))


def test_root_files_are_opened_as_regular_files_sized_before_reading(store: Path,
                                                                     tmp_path: Path) -> None:
    """An ``empty_prompt.*`` that is a FIFO (would hang), a folder, or a huge sparse file is
    one line naming it, and nothing is read before its size is checked."""
    import os
    import resource
    import shutil

    from npu_data.errors import DataCorruption

    copy = tmp_path / "copy"
    shutil.copytree(store, copy)
    target = copy / "empty_prompt.pooled_prompt_embeds.npy"
    for make, expect in ((os.mkfifo, "is a FIFO"), (os.mkdir, "is a folder"),
                         (lambda p: os.truncate(p, 512 << 20), "has 536870912 bytes")):
        if target.is_dir():
            target.rmdir()
        else:
            target.unlink(missing_ok=True)
        if expect.startswith("has"):
            target.touch()
        make(target)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        with pytest.raises(DataCorruption, match=expect) as err:
            empty_prompt(ShardDataset(copy))
        assert str(target) in str(err.value) and "\n" not in str(err.value)
        grew_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        assert grew_kib < 100 << 10  # the 512 MiB were never read


def _vae_with(models: dict[str, Path], tmp_path: Path, **config: object) -> Path:
    import json
    import shutil

    folder = tmp_path / f"vae-{len(list(tmp_path.iterdir()))}"
    shutil.copytree(models["vae"], folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(config)
    (folder / "config.json").write_text(json.dumps(cfg))  # NaN and Infinity as Python writes
    return folder


@pytest.mark.parametrize("config", [{"sample_size": 10**12}, {"latent_channels": "4"},
                                    {"block_out_channels": "8,8"}, {"scaling_factor": "0.1"},
                                    {"scaling_factor": float("nan")},
                                    {"scaling_factor": float("inf")}, {"scaling_factor": 0}])
def test_a_vae_config_out_of_range_is_one_line_before_any_latent(
        models: dict[str, Path], pixels: Path, tmp_path: Path, config: dict[str, object]
) -> None:
    vae = _vae_with(models, tmp_path, **config)
    key = next(iter(config))
    with pytest.raises(UserError, match=f"config {key} must be") as err:
        encode_latents(pixels, tmp_path / "out", vae, **encode_kwargs(models))
    assert "\n" not in str(err.value) and str(vae) in str(err.value)
    assert not (tmp_path / "out").exists()


def test_non_finite_latents_are_never_stored_and_verify_finds_them(
        models: dict[str, Path], pixels: Path, store: Path, tmp_path: Path) -> None:
    import hashlib
    import shutil
    import zlib

    import orjson
    from diffusers import AutoencoderKL

    vae = AutoencoderKL.from_pretrained(models["vae"], local_files_only=True)
    with torch.no_grad():
        next(vae.parameters()).fill_(float("nan"))  # NaN weights: every latent NaN
    with pytest.raises(UserError, match="NaN or infinite in float32 — refused"):
        encode_latents(pixels, tmp_path / "nan", vae, **encode_kwargs(models))
    copy = tmp_path / "copy"  # a store whose bytes, crc32 and manifest agree on a NaN
    shutil.copytree(store, copy)
    shard = copy / "shard-00000"
    index = np.load(shard / "index.npy")
    data = bytearray((shard / "data.bin").read_bytes())
    off = int(index[0]["offset"])
    data[off:off + 4] = np.array([np.nan], "<f4").tobytes()
    index[0]["crc32"] = zlib.crc32(bytes(data[off:off + int(index[0]["length"])]))
    (shard / "data.bin").write_bytes(bytes(data))
    np.save(shard / "index.npy", index)
    manifest = orjson.loads((copy / "manifest.json").read_bytes())
    for sh in manifest["shards"]:
        for fname, meta in sh["files"].items():
            raw = (copy / sh["name"] / fname).read_bytes()
            meta["size"], meta["sha256"] = len(raw), hashlib.sha256(raw).hexdigest()
    (copy / "manifest.json").write_bytes(orjson.dumps(manifest))
    found = [str(p) for p in verify_dataset(copy)]
    assert any("latents hold 1 NaN or infinite values" in p for p in found), found
