"""Train a tiny SDXL-style UNet for a few steps from a Label Studio export: aspect-ratio
buckets, SDXL micro-conditioning, [-1, 1] inputs, captions with dropout — on the CPU.

    python examples/train_sdxl_buckets.py                      # built-in sample data
    python examples/train_sdxl_buckets.py --export export.json --size 512 --steps 100
    python examples/train_sdxl_buckets.py --cached             # from precomputed latents
    python examples/train_sdxl_buckets.py --latents LATENTS    # from `npu-data encode`'s store

Everything is built here from small configs (diffusers' ``UNet2DConditionModel`` with
SDXL's ``text_time`` added conditioning, a small ``AutoencoderKL``, a hashing text encoder):
no weights are downloaded, so the numbers it prints are a smoke test of the data path, not a
model. With a real SDXL checkpoint the batch keys are used the same way:

- ``BucketBatchSampler``: each batch holds one aspect-ratio bucket (kohya's rule at
  ``--size``), the same number of batches on every rank, no sample twice in a batch;
- ``ResizeCrop(None)`` takes the sampler's buckets, resizes each image to cover its batch's
  bucket and crops it (random offsets), exactly as Pillow would; ``RandomHorizontalFlip``
  after it mirrors the resized image before the crop, as diffusers does, so
  ``crop_top_left`` is where the pixels came from; ``Normalize(0.5, 0.5)`` gives [-1, 1];
- ``batch["original_size"]`` (the photo's, before any ``max_side``), ``batch["crop_top_left"]``
  and ``batch["target_size"]`` (int64, (B, 2)) are SDXL's ``add_time_ids``;
- a sample's caption is its first TextArea text, else the first non-empty one of the task
  data's ``caption``, ``text``, ``prompt`` (``caption_field="key"`` names another key); the
  built-in export keeps its captions in ``data.caption`` and has its TextArea results
  (captions and per-region notes) removed, so ``data.caption`` is what is read;
  ``CaptionDropout`` empties 10% of them for classifier-free guidance.

With ``--cached`` the frozen VAE runs once (``npu_data.encode_latents``: centre crops, the
mirrored variant too) and training reads the latents store: ``RandomLatentFlip`` picks each
sample's stored variant and its ``crop_top_left``. Both paths use ``latent_dist.mean *
scaling_factor``, so one step from the cache and one from the same centre-cropped pixels
give the same loss.

With ``--latents DIR`` it trains from a store made by ``npu-data encode`` (any VAE, any
buckets): the sampler takes the store's buckets, the UNet its latent channels and, when the
store holds text embeddings, their sizes — ``prompt_embeds`` and ``pooled_prompt_embeds``
go to the UNet as SDXL's do, dropped to the store's empty prompt by
``LatentCaptionDropout(0.1)``; without them the tiny text encoder reads the stored captions.
A sample with several captions (a kohya caption file's lines, several TextArea texts: one
embedding row each) trains one per epoch, chosen by ``RandomCaption()`` — keyed by (seed,
epoch, sample), as on the pixel path.
"""

from __future__ import annotations

import argparse
import hashlib
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from npu_data.buckets import make_buckets
from npu_data.loaders import BucketBatchSampler, DataLoader, LabelStudioDataset
from npu_data.shards.reader import ShardDataset
from npu_data.transforms import (
    CaptionDropout,
    Compose,
    LatentCaptionDropout,
    Normalize,
    RandomCaption,
    RandomHorizontalFlip,
    RandomLatentFlip,
    ResizeCrop,
)

TEXT_DIM = 32  # the tiny text encoder's width (SDXL: 2048, pooled 1280)
TOKENS = 8


class HashTextEncoder(nn.Module):
    """Words hashed into an embedding table: a stand-in for CLIP that needs no download.
    Returns (B, TOKENS, TEXT_DIM) hidden states and a (B, TEXT_DIM) pooled embedding; an
    empty caption (dropped) gives the embedding of the empty prompt, as in SDXL training."""

    def __init__(self, vocab: int = 4096) -> None:
        super().__init__()
        self.vocab = vocab
        self.embed = nn.Embedding(vocab, TEXT_DIM)

    def ids(self, caption: str) -> list[int]:
        words = caption.lower().replace(",", " ").split()[:TOKENS - 1]
        ids = [1 + int.from_bytes(hashlib.blake2b(w.encode(), digest_size=4).digest(), "little")
               % (self.vocab - 1) for w in words]
        return [0] + ids + [0] * (TOKENS - 1 - len(ids))  # 0: the start / padding token

    def forward(self, captions: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        ids = torch.tensor([self.ids(c) for c in captions])
        hidden = self.embed(ids)
        return hidden, hidden.mean(dim=1)


def build_models(seed: int = 0, channels: int = 4, text_dim: int = TEXT_DIM,
                 pooled_dim: int = TEXT_DIM) -> tuple[nn.Module, nn.Module, HashTextEncoder]:
    """The VAE, the UNet (for ``channels`` latent channels and text embeddings of width
    ``text_dim``, pooled ``pooled_dim``) and the hashing text encoder."""
    from diffusers import AutoencoderKL, UNet2DConditionModel

    torch.manual_seed(seed)
    vae = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4,
                        down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
                        up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"),
                        block_out_channels=(8, 16), layers_per_block=1, norm_num_groups=4)
    time_dim = 8  # SDXL: 256 per id, six ids
    unet = UNet2DConditionModel(
        sample_size=32, in_channels=channels, out_channels=channels, layers_per_block=1,
        block_out_channels=(16, 32), norm_num_groups=4,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        cross_attention_dim=text_dim, attention_head_dim=4,
        addition_embed_type="text_time", addition_time_embed_dim=time_dim,
        projection_class_embeddings_input_dim=pooled_dim + 6 * time_dim)
    vae.requires_grad_(False)
    return vae, unet, HashTextEncoder()


def sample_export(root: Path) -> Path:
    """The built-in sample project (landscape and portrait photos), its captions kept in the
    task data (``data.caption``, as caption sets are usually imported into Label Studio)
    instead of TextArea results; its other TextArea results (per-region notes) removed, as
    the first TextArea text would be a sample's caption otherwise."""
    import json

    from npu_data.tools.sample_data import make_sample_project

    export = make_sample_project(root / "sample", n_images=24, width=200, height=136).export_path
    tasks = json.loads(export.read_text())
    for task in tasks:
        for ann in task.get("annotations", []):
            texts = [r for r in ann["result"] if r.get("type") == "textarea"]  # notes too
            captions = [r for r in texts if r.get("from_name") == "caption"]
            if captions and "caption" not in task["data"]:
                task["data"]["caption"] = captions[0]["value"]["text"][0]
            ann["result"] = [r for r in ann["result"] if r not in texts]
    export.write_text(json.dumps(tasks))
    return export


def main(argv: list[str] | None = None) -> list[float]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--export", type=Path, help="Label Studio JSON export (default: sample)")
    ap.add_argument("--images-root", type=Path, help="where the export's images are")
    ap.add_argument("--size", type=int, default=64, help="bucket scale (SDXL: 1024)")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", type=Path, help="sample data and import cache (default: temp)")
    ap.add_argument("--cached", action="store_true",
                    help="encode the latents once (npu_data.encode_latents), train from them")
    ap.add_argument("--latents", type=Path, metavar="DIR",
                    help="train from this latents store (made by `npu-data encode`)")
    args = ap.parse_args(argv)
    torch.manual_seed(args.seed)
    if args.latents is not None:
        return train_from_store(args.latents, args.batch_size, args.steps, args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        work = args.workdir or Path(tmp)
        export = args.export or sample_export(work)
        dataset = LabelStudioDataset(export, images_root=args.images_root,
                                     cache_dir=work / "cache")
        # kohya's bucket rule at --size; multiples of 16 keep the latents even
        buckets = make_buckets(args.size, step=16, min_side=args.size // 2)
        models = build_models(args.seed)
        if args.cached:
            cache = encode_cache(dataset, models[0], buckets, work / "latents")
            sampler = BucketBatchSampler(cache, args.batch_size, buckets, seed=args.seed)
            pipeline = Compose([RandomLatentFlip(), CaptionDropout(0.1)])
            loader = DataLoader(cache, batch_sampler=sampler, transform=pipeline,
                                device="cpu", seed=args.seed)
            return train(loader, sampler, args.steps, models)
        sampler = BucketBatchSampler(dataset, args.batch_size, buckets, seed=args.seed)
        # ResizeCrop(None) takes the sampler's buckets (the DataLoader hands them over)
        pipeline = Compose([ResizeCrop(None, crop="random"),
                            RandomHorizontalFlip(),  # crop_top_left follows (diffusers' rule)
                            CaptionDropout(0.1),
                            Normalize(0.5, 0.5)])  # [-1, 1]; bf16 with dtype=torch.bfloat16
        loader = DataLoader(dataset, batch_sampler=sampler, transform=pipeline, device="cpu",
                            seed=args.seed)
        return train(loader, sampler, args.steps, models)


def train_from_store(path: Path, batch_size: int, steps: int, seed: int) -> list[float]:
    """Train from the latents store at ``path``: its buckets, latent channels and (when it
    holds them) text embeddings decide the sampler and the UNet."""
    store = ShardDataset(path)
    record = store.latents
    if record is None:
        raise SystemExit(f"{path}: not a latents store — make one with `npu-data encode "
                         "SHARDS --vae DIR --out DIR`")
    text = record["text"]
    models = build_models(seed, record["channels"], *((text["dim"], text["pooled"]) if text
                                                      else (TEXT_DIM, TEXT_DIM)))
    sampler = BucketBatchSampler(store, batch_size, store.latents["buckets"], seed=seed)
    stages: list[Any] = [RandomLatentFlip()] if record["flip"] else []
    # one of each sample's stored captions per epoch (kohya's caption lines, several
    # TextArea texts), keyed like every draw; the DataLoader binds the store it reads from
    stages.append(RandomCaption())
    # the store's own empty prompt (npu_data.latents.empty_prompt), taken by the DataLoader
    stages.append(LatentCaptionDropout(0.1) if text else CaptionDropout(0.1))
    loader = DataLoader(store, batch_sampler=sampler, transform=Compose(stages), device="cpu",
                        seed=seed)
    return train(loader, sampler, steps, models)


def encode_cache(dataset: LabelStudioDataset, vae: nn.Module, buckets: Any,
                 out: Path) -> ShardDataset:
    """The latents store of ``dataset`` (encoded once; an interrupted encode resumes)."""
    from npu_data.latents import check_store, encode_latents
    from npu_data.latents.models import config_sha256

    len(dataset)  # imports the export into its shards on first use
    if (out / "manifest.json").is_file():  # made before: refused if not for this run
        cache = ShardDataset(out)
        check_store(cache, buckets=buckets, flip=True, vae_config=config_sha256(vae))
        return cache
    return encode_latents(dataset.path, out, vae, buckets=buckets, batch_size=4,
                          device="cpu", dtype=torch.float32, resume=out.exists())


def batch_latents(batch: dict[str, Any], vae: Any) -> torch.Tensor:
    """The batch's latents: stored ones, or the VAE's on its [-1, 1] images (the same
    ``latent_dist.mean * scaling_factor`` the store holds)."""
    if "latents" in batch:
        return batch["latents"].float()  # (B, 4, bucket_h / f, bucket_w / f)
    with torch.no_grad():  # images (B, 3, bucket_h, bucket_w) in [-1, 1]
        return vae.encode(batch["image"].float()).latent_dist.mean * vae.config.scaling_factor


def step_loss(unet: nn.Module, text: HashTextEncoder, scheduler: Any, latents: torch.Tensor,
              batch: dict[str, Any], generator: torch.Generator | None = None) -> torch.Tensor:
    """The denoising loss of one batch (noise and timesteps from ``generator``)."""
    noise = torch.randn(latents.shape, generator=generator)
    t = torch.randint(0, scheduler.config.num_train_timesteps, (len(latents),),
                      generator=generator)
    noisy = scheduler.add_noise(latents, noise, t)
    if "prompt_embeds" in batch:  # the store's text embeddings (SDXL's two encoders)
        hidden, pooled = batch["prompt_embeds"].float(), batch["pooled_prompt_embeds"].float()
    else:
        hidden, pooled = text(batch["caption"])
    time_ids = torch.cat([batch["original_size"], batch["crop_top_left"],
                          batch["target_size"]], dim=1).float()  # SDXL's add_time_ids
    pred = unet(noisy, t, encoder_hidden_states=hidden,
                added_cond_kwargs={"text_embeds": pooled, "time_ids": time_ids}).sample
    return F.mse_loss(pred, noise)


def train(loader: DataLoader, sampler: BucketBatchSampler, steps: int,
          models: tuple[nn.Module, nn.Module, HashTextEncoder]) -> list[float]:
    from diffusers import DDPMScheduler

    vae, unet, text = models
    scheduler = DDPMScheduler(num_train_timesteps=1000)
    params = list(unet.parameters()) + list(text.parameters())
    opt = torch.optim.AdamW(params, lr=1e-3)
    losses: list[float] = []
    epoch, start = 0, time.perf_counter()
    while len(losses) < steps:
        sampler.set_epoch(epoch)
        for batch in loader:
            latents = batch_latents(batch, vae)
            loss = step_loss(unet, text, scheduler, latents, batch)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            h, w = (int(v) for v in batch["target_size"][0])
            time_ids = torch.cat([batch[k][0] for k in ("original_size", "crop_top_left",
                                                        "target_size")])
            print(f"step {len(losses)}: bucket {h}x{w}, loss {losses[-1]:.4f}, "
                  f"time_ids[0] {time_ids.int().tolist()}, caption[0] "
                  f"{batch['caption'][0][:40]!r}", flush=True)
            if len(losses) == steps:
                break
        epoch += 1
    print(f"{steps} steps in {time.perf_counter() - start:.1f} s")
    return losses


if __name__ == "__main__":
    main()
