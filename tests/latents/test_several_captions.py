"""Several captions per sample (issue 45): ``npu-data encode`` stores one embedding row per
caption (a kohya caption file's lines, a task data field holding a list), ``RandomCaption``
picks one per sample each epoch with a keyed draw — the same under any worker count and after
a mid-epoch resume — ``LatentCaptionDropout`` still drops the chosen one, and a store written
with one row per sample still reads."""

from __future__ import annotations

import contextlib
import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from npu_data import ShardDataset, cli
from npu_data.errors import DataCorruption, UserError
from npu_data.latents import empty_prompt
from npu_data.loaders import BucketBatchSampler, DataLoader
from npu_data.shards.latent_format import CAPTION_ROWS, GROUP
from npu_data.shards.latent_read import caption_rows, latent_shard
from npu_data.transforms import Compose, LatentCaptionDropout, RandomCaption, RandomLatentFlip
from tests.support.latents import (
    DESCRIBED,
    encode_args,
    example_trainer,
    resumed_after_one,
    sdxl_prompt,
)

LINES = [[f"photo {c} of a cat", f"a {c} cat on grass"] for c in "abcd"]  # two per image
LISTED = [["red car"], ["blue car", "a car, blue"], ["green car", "car", "a green one"],
          ["black car", "dark car"]]


def _run(args: list[str], out: Path) -> str:
    with open(out, "w") as fh, contextlib.redirect_stdout(fh):
        assert cli.main(args) == 0
    return out.read_text()


def _photo(path: Path, i: int) -> None:
    h, w = DESCRIBED[i]
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(i)
    Image.fromarray(rng.integers(0, 256, (h, w, 3), np.uint8)).save(path)


@pytest.fixture(scope="session")
def two_lines(models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
              ) -> tuple[Path, Path, str]:
    """A kohya folder whose caption files hold two lines, ``npu-data import``-ed and encoded
    with ``--buckets kohya:256`` and the flipped variant: (the imported shards, the store,
    what encode printed)."""
    root = tmp_path_factory.mktemp("two_lines")
    for i, lines in enumerate(LINES):
        _photo(root / "kohya" / "1_cat" / f"p{i}.png", i)
        (root / "kohya" / "1_cat" / f"p{i}.txt").write_text("\n".join(lines) + "\n\n")
    _run(["import", str(root / "kohya"), "--out", str(root / "shards")], root / "import.out")
    args = [a for a in encode_args(root / "shards", models, root / "store") if a != "--no-flip"]
    said = _run([*args, "--buckets", "kohya:256"], root / "encode.out")
    return root / "shards", root / "store", said


@pytest.fixture(scope="session")
def listed(models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
           ) -> tuple[Path, Path, str]:
    """A Label Studio export whose captions are lists under ``data.description`` (1 to 3 per
    photo), imported and encoded with ``--caption-field description --buckets kohya:256``
    and the flipped variant: (the imported shards, the store, what encode printed)."""
    root = tmp_path_factory.mktemp("listed")
    tasks = []
    for i, captions in enumerate(LISTED):
        _photo(root / f"p{i}.png", i)
        tasks.append({"id": i + 1, "data": {"image": f"p{i}.png", "description": captions},
                      "annotations": []})
    (root / "export.json").write_text(json.dumps(tasks))
    _run(["import", str(root / "export.json"), "--out", str(root / "shards")],
         root / "import.out")
    args = [a for a in encode_args(root / "shards", models, root / "store") if a != "--no-flip"]
    said = _run([*args, "--buckets", "kohya:256", "--caption-field", "description"],
                root / "encode.out")
    return root / "shards", root / "store", said


def _stored(ds: ShardDataset, i: int) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """Every (caption, prompt_embeds, pooled) row of sample ``i``, read from the columns."""
    assert ds.latents is not None
    k, j = ds.locate(i)
    sh = latent_shard(ds, k, ds.latents)
    rows = caption_rows(sh)
    off = sh.col(f"{GROUP}.caption.offsets")
    out = []
    for r in range(int(rows[j]), int(rows[j + 1])):
        text = bytes(sh.col(f"{GROUP}.caption.bytes")[off[r]:off[r + 1]]).decode()
        out.append((text, torch.from_numpy(np.array(sh.col(f"{GROUP}.prompt_embeds")[r])),
                    torch.from_numpy(np.array(sh.col(f"{GROUP}.pooled_prompt_embeds")[r]))))
    return out


@pytest.mark.parametrize("which", ["two_lines", "listed"])
def test_every_caption_has_its_own_row(which: str, request: pytest.FixtureRequest,
                                       models: dict[str, Path]) -> None:
    shards, store, said = request.getfixturevalue(which)
    want = LINES if which == "two_lines" else LISTED
    per = "2 for 4" if which == "two_lines" else "1 for 1, 2 for 2, 3 for 1"
    total = sum(map(len, want))
    assert f"captions: embedded {total} captions over 4 samples (captions per sample: " \
           f"{per}); RandomCaption() picks one" in said
    sdxl = sdxl_prompt(models)
    ds, pixels = ShardDataset(store), ShardDataset(
        shards, caption_field="description" if which == "listed" else None)
    for i in range(len(ds)):
        rows = _stored(ds, i)
        assert [t for t, _, _ in rows] == want[i]
        assert ds[i]["caption"] == want[i][0] == pixels[i]["caption"]  # the pixel path's
        assert torch.equal(ds[i]["prompt_embeds"], rows[0][1])
        for text, embeds, pooled in rows:  # each as encoded alone
            e, p = sdxl(text)
            assert (embeds - e).abs().max().item() <= 1e-5
            assert (pooled - p).abs().max().item() <= 1e-5
    assert cli.main(["verify", str(store)]) == 0


def test_inspect_says_the_captions_per_sample(listed: tuple[Path, Path, str],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["inspect", str(listed[1])]) == 0
    out = capsys.readouterr().out
    assert "captions per sample" in out and "embedded 8 captions over 4 samples (captions " \
                                            "per sample: 1 for 1, 2 for 2, 3 for 1)" in out
    assert "4 from task data 'description', 0 without (--caption-field description)" in out


def _loader(ds: ShardDataset, workers: int = 0, seed: int = 5) -> DataLoader:
    assert ds.latents is not None
    sampler = BucketBatchSampler(ds, 2, ds.latents["buckets"], seed=seed)
    pipeline = Compose([RandomLatentFlip(0.5), RandomCaption(), LatentCaptionDropout(0.25)])
    return DataLoader(ds, batch_sampler=sampler, transform=pipeline, device="cpu", seed=seed,
                      num_workers=workers)


def _epochs(loader: DataLoader, n: int) -> list[dict[str, Any]]:
    out = []
    for epoch in range(n):
        loader.batch_sampler.set_epoch(epoch)  # type: ignore[union-attr]
        out += [dict(b, epoch=epoch) for b in loader]
    return out


def test_random_caption_picks_one_row_per_epoch_keyed(listed: tuple[Path, Path, str]) -> None:
    ds = ShardDataset(listed[1])
    empty = empty_prompt(ds)
    batches = _epochs(_loader(ds), 8)
    chosen: dict[int, set[str]] = {i: set() for i in range(len(ds))}
    drops = 0
    for b in batches:
        for t, i in enumerate(b["index"].tolist()):
            rows = _stored(ds, i)
            u = float(b["aug"]["1.pick"][t])
            text, embeds, pooled = rows[min(int(u * len(rows)), len(rows) - 1)]
            dropped = bool(b["aug"]["2.drop"][t])
            drops += dropped
            assert b["caption"][t] == ("" if dropped else text)
            assert torch.equal(b["prompt_embeds"][t], empty[0] if dropped else embeds)
            assert torch.equal(b["pooled_prompt_embeds"][t], empty[1] if dropped else pooled)
            chosen[i].add(text)
    assert 0 < drops < sum(len(b["caption"]) for b in batches)
    assert chosen == {i: set(c) for i, c in enumerate(LISTED)}  # every caption trained
    for workers in (1, 2):  # the same choice whatever process reads
        again = _epochs(_loader(ds, workers), 8)
        assert [b["caption"] for b in again] == [b["caption"] for b in batches]
        assert all(torch.equal(a["prompt_embeds"], b["prompt_embeds"])
                   for a, b in zip(again, batches, strict=True))


def test_the_choice_is_the_pixel_paths_and_survives_a_resume(
        two_lines: tuple[Path, Path, str]) -> None:
    shards, store, _ = two_lines
    ds = ShardDataset(store)
    whole = list(_loader(ds))
    pixels = ShardDataset(shards)
    for b in whole:  # RandomCaption over the pixels' TextArea texts: the same formula
        for t, i in enumerate(b["index"].tolist()):
            texts = list(pixels[i]["texts.text"])
            u = float(b["aug"]["1.pick"][t])
            assert texts == LINES[i]
            assert b["caption"][t] in ("", texts[min(int(u * len(texts)), len(texts) - 1)])
    rest = resumed_after_one(lambda: _loader(ds))
    assert len(rest) == len(whole) - 1
    for a, b in zip(rest, whole[1:], strict=True):
        assert torch.equal(a["index"], b["index"]) and a["caption"] == b["caption"]
        assert torch.equal(a["prompt_embeds"], b["prompt_embeds"])


def _single_row_copy(store: Path, dest: Path) -> Path:
    """``store`` as written before several captions were stored: no ``caption_rows`` column,
    record or listing (its samples hold one caption each)."""
    shutil.copytree(store, dest)
    manifest = json.loads((dest / "manifest.json").read_text())
    fname = f"ann.{CAPTION_ROWS}.npy"
    for record in (manifest["latents"], manifest["options"]["latents"]):
        del record["caption_rows"]
    del manifest["columns"][CAPTION_ROWS]
    for shard in manifest["shards"]:
        del shard["files"][fname]
        (dest / shard["name"] / fname).unlink()
    (dest / "manifest.json").write_text(json.dumps(manifest))
    return dest


def test_a_single_row_store_reads_unchanged(kohya: tuple[Path, str], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    new = ShardDataset(kohya[0])
    old = ShardDataset(_single_row_copy(kohya[0], tmp_path / "old"))
    assert old.latents is not None and "caption_rows" not in old.latents
    for i in range(len(new)):
        a, b = new[i], old[i]
        assert a["caption"] == b["caption"]
        assert torch.equal(a["prompt_embeds"], b["prompt_embeds"])
        assert torch.equal(a["latents"], b["latents"])
    assert cli.main(["verify", str(tmp_path / "old")]) == 0
    assert cli.main(["inspect", str(tmp_path / "old")]) == 0
    assert "embedded 4 captions over 4 samples (captions per sample: 1 for 4)" in \
        capsys.readouterr().out
    sampler = BucketBatchSampler(old, 2, old.latents["buckets"], shuffle=False)
    loader = DataLoader(old, batch_sampler=sampler, transform=RandomCaption(), device="cpu")
    for b in loader:  # one caption each: the first, untouched
        assert b["caption"] == [old[i]["caption"] for i in b["index"].tolist()]


def test_damaged_caption_rows_are_one_line(two_lines: tuple[Path, Path, str],
                                           tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    copy = tmp_path / "store"
    shutil.copytree(two_lines[1], copy)
    path = copy / "shard-00000" / f"ann.{CAPTION_ROWS}.npy"
    rows = np.load(path)
    rows[1] = rows[2] = 0  # samples 0 and 1 without a row: still 5 offsets, 0 .. 8
    np.save(path, rows)
    with pytest.raises(DataCorruption, match="give sample 0 no caption row") as exc:
        ShardDataset(copy)[0]
    assert "\n" not in str(exc.value)
    assert cli.main(["verify", str(copy)]) == 1
    said = capsys.readouterr().err
    assert "caption_rows" in said and "give sample 0 no caption row" in said


def test_random_caption_on_a_latents_batch_outside_a_loader(
        two_lines: tuple[Path, Path, str]) -> None:
    ds = ShardDataset(two_lines[1])
    assert ds.latents is not None
    sampler = BucketBatchSampler(ds, 2, ds.latents["buckets"], shuffle=False)
    batch = next(iter(DataLoader(ds, batch_sampler=sampler, device="cpu")))
    with pytest.raises(UserError, match="no latents store to read its captions") as exc:
        RandomCaption()(batch)
    assert "\n" not in str(exc.value)
    out = RandomCaption(dataset=ds)(batch)  # given the store: reads its rows
    assert all(c in LINES[i] for c, i in zip(out["caption"], batch["index"].tolist(),
                                             strict=True))
    with pytest.raises(UserError, match="not their controls or choices"):
        RandomCaption("choices.label", dataset=ds)(batch)


def test_import_encode_train_with_two_captions_per_image(
        listed: tuple[Path, Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    """The judged path: import -> ``npu-data encode`` (kohya buckets at 256 px, captions
    from a custom field, several per image) -> ``examples/train_sdxl_buckets.py --latents``."""
    losses = example_trainer().main(["--latents", str(listed[1]), "--steps", "6", "--batch-size", "1"])
    assert len(losses) == 6 and all(math.isfinite(v) and v > 0 for v in losses)
    said = capsys.readouterr().out
    trained = {c for cs in LISTED for c in cs if f"caption[0] {c!r}" in said}
    assert trained and not trained <= {cs[0] for cs in LISTED}  # not only the first ones
