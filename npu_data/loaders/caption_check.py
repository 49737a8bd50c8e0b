"""A pipeline that uses captions, over a dataset that has none, is refused when the loader is
built — not trained unconditionally without a word; otherwise where they come from is said
once (``shards.batch_read``)."""

from __future__ import annotations

from typing import Any

from npu_data.errors import UserValueError
from npu_data.loaders.bucket_sampler import stages_of
from npu_data.loaders.epochs import warn_once
from npu_data.shards.batch_read import FIELDS


def check_captions(dataset: Any, transform: Any) -> None:
    """Raise when ``transform`` works on captions and no sample of ``dataset`` has one; say
    the captions' sources once otherwise.

    Raises:
        UserError: no caption anywhere (one line naming ``caption_field``).
    """
    if not any(getattr(t, "reads_captions", False) for t in stages_of(transform)):
        return
    count = getattr(dataset, "caption_coverage", None)
    if not callable(count):
        return
    where = getattr(dataset, "path", type(dataset).__name__)
    cov = count()
    field = getattr(dataset, "caption_field", None)
    if not cov.any:
        looked = repr(field) if field else ", ".join(map(repr, FIELDS))
        raise UserValueError(
            f"{where}: no sample has a caption (no TextArea text, no task data {looked}) but "
            "the transform uses captions — pass caption_field='<the task data key that holds "
            "them>' to the dataset")
    if cov.none:  # said only when some sample trains without a caption
        warn_once(f"{where}: {cov.line()}")


def bind_empty_prompt(dataset: Any, transform: Any) -> None:
    """Give every stage of ``transform`` that takes them (``take_empty``: LatentCaptionDropout
    built without ``empty``) the empty prompt of latents store ``dataset``
    (``npu_data.latents.empty_prompt``), read once, and those that take the store
    (``take_store``: RandomCaption built without one; it reads the chosen captions' rows);
    refuse, before any batch is read, one over a dataset that is not a latents store.

    Raises:
        UserError: ``dataset`` is not a latents store, or holds no text embeddings.
    """
    stages = stages_of(transform)
    if getattr(dataset, "latents", None) is not None:  # its captions are read from the store
        for t in stages:
            take = getattr(t, "take_store", None)
            if callable(take):
                take(dataset)
    read: list[Any] = []

    def load() -> Any:  # read once, for every stage that takes it
        if not read:
            from npu_data.shards.latent_read import empty_prompt

            read.append(empty_prompt(dataset))  # one line: an image store, or no text
        return read[0]

    for t in stages:
        take = getattr(t, "take_empty", None)
        if callable(take):
            take(load)
