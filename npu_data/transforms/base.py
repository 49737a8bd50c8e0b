"""The ``Transform`` base class and its plumbing: batch handling, validation, parameter draws.

The contract, in torchvision v2's terms: a transform defines two things,

- :meth:`Transform.make_params` ``(sizes, rng) -> params``: the sampler, vectorised over the
  batch, in float64 on the host, from the samples' sizes and uniform numbers — the keyed
  draws the DataLoader uses (:meth:`Transform.draw_keyed`) or a torch generator's
  (:meth:`Transform.get_params`, ``t(batch, generator)``; they and the sizes are read back
  from the batch's device once). Deterministic transforms have none.
- ``_apply(batch, params, ctx)``: the transform kernel, deterministic, on a checked batch
  dict; ``ctx`` (:class:`ApplyContext`) is what a pipeline knows about the batch (a folded
  mirror, no padding), the same signature for every transform.

and :meth:`Transform.apply_reference`, one sample through the CPU reference. Everything else
is the base's: ``t(data)``, :meth:`Transform.run` (output and params), :meth:`Transform.apply`
(drawn params, plain host tensors, on any device: a batch replays sample by sample through
``npu_data.transforms.oracle.pillow``). A transform is called on a batch dict (see
docs/architecture.md) or on a bare uint8 tensor ``(B, C, H, W)`` and returns the same kind.

What a pipeline may do with a stage it reads from the stage's declared capabilities
(:class:`Transform`'s ``crops``, ``fills``, ``folds_flip``, ``is_hflip``, ``keeps_full``,
``mirror_free``), never from its class. A pipeline's parameters are one flat dict, stage
``i``'s keys prefixed ``"i."``: :func:`stage_params` and :func:`with_stage` are the one home of
that naming.

**Donated images** (:func:`donating`, :func:`donated`): a batch image its owner no longer
needs, which kernels may overwrite with their result instead of allocating a new batch (no
per-batch allocation, no page faults on fresh memory, one memory pass less for a flip). The
loader donates the batches it collated itself; ``Compose`` donates what one stage allocated
to the stages after it (never the caller's input unless the caller donated it). A kernel that
can work in place asks :func:`donated` (``functional`` does, for it); one that cannot simply
allocates, so donation changes where results are written, never their values.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from npu_data.batch import Batch
from npu_data.common.compat import is_compiling
from npu_data.errors import UserTypeError, UserValueError
from npu_data.transforms.draws import Draws, GeneratorDraws, Uniforms

Params = dict[str, torch.Tensor]


@dataclass(frozen=True, eq=False)
class ApplyContext:
    """What a pipeline knows about the batch a stage applies to (``compose.fusions``); a
    stage reads the fields it can use and ignores the rest.

    Attributes:
        flip: a later mirror's (B,) mask, for a crop that :attr:`Transform.folds_flip` to
            mirror its output's pixels while resizing (the mirror stage still moves the
            geometry).
        pixels: False: an earlier crop already mirrored this mirror's pixels; mirror the
            geometry only.
        full: True: every sample fills the whole batch (no padding), told to the stages that
            keep it full (``Transform.keeps_full``: the colour jitter skips the padding);
            None: not known.
    """

    flip: torch.Tensor | None = None
    pixels: bool = True
    full: bool | None = None


DEFAULT = ApplyContext()


# --- donated images (module doc) ---
_DONATED: ContextVar[torch.Tensor | None] = ContextVar("npu_data_donated", default=None)


@contextlib.contextmanager
def donating(image: torch.Tensor | None) -> Iterator[None]:
    """Within the block, kernels may write their results into ``image`` (None: nothing)."""
    token = _DONATED.set(image)
    try:
        yield
    finally:
        _DONATED.reset(token)


def donated(image: torch.Tensor) -> bool:
    """Whether ``image`` itself was donated (and is contiguous, as in-place kernels need);
    never in a ``torch.compile`` trace (graphs allocate as they like)."""
    if is_compiling():
        return False
    return _DONATED.get() is image and image.is_contiguous()


def fresh(result: torch.Tensor | None, source: torch.Tensor | None) -> bool:
    """Whether ``result`` lives in memory of its own, not in ``source``'s (a stage's output
    that no caller can hold yet)."""
    if is_compiling():
        return False
    if result is None or source is None or result is source:
        return False
    return result.untyped_storage().data_ptr() != source.untyped_storage().data_ptr()


def stage_key(index: int, key: str) -> str:
    """The flat key of stage ``index``'s parameter ``key`` in its pipeline's params."""
    return f"{index}.{key}"


def stage_params(params: Params, index: int) -> Params:
    """Stage ``index``'s own parameters out of its pipeline's flat ``params``."""
    prefix = stage_key(index, "")
    return {k[len(prefix):]: v for k, v in params.items() if k.startswith(prefix)}


def with_stage(index: int, params: Params) -> Params:
    """Stage ``index``'s ``params`` under its pipeline's flat keys."""
    return {stage_key(index, k): v for k, v in params.items()}


def as_batch(data: Any, who: str, *, need_uint8: bool = True,
             latents: bool = False) -> tuple[Batch, bool]:
    """``(batch dict, was_bare_tensor)`` for a batch dict or a bare ``(B, C, H, W)`` tensor;
    ``latents``: a latents store's batch (``latents (B, C, h, w)`` and ``sizes``, no image)
    is taken too."""
    if isinstance(data, torch.Tensor):
        check_image(data, who, need_uint8=need_uint8)
        b, _, h, w = data.shape
        sizes = _host_sizes(h, w, data.device).expand(b, 2).contiguous()
        return {"image": data, "sizes": sizes}, True
    if isinstance(data, Mapping):
        if latents and "image" not in data and isinstance(data.get("latents"), torch.Tensor):
            if not isinstance(data.get("sizes"), torch.Tensor):
                raise UserValueError(f"{who}: the latents batch has no 'sizes' tensor — feed "
                                     "the batches of ShardDataset(latents store) unchanged")
            return dict(data), False
        if "image" not in data:
            raise UserValueError(
                f"{who}: the batch has no 'image' key — pass a batch dict from the DataLoader "
                "or a uint8 tensor (B, C, H, W)" + (" (a latents batch takes only the latent "
                "transforms: RandomLatentFlip, LatentCaptionDropout)" if "latents" in data
                                                    else "")
            )
        batch = dict(data)
        image: torch.Tensor = batch["image"]
        check_image(image, who, need_uint8=need_uint8)
        given: Any = batch.get("sizes")
        if given is None:
            b, _, h, w = image.shape
            batch["sizes"] = _host_sizes(h, w, image.device).expand(b, 2).contiguous()
        elif not isinstance(given, torch.Tensor) or given.shape != (image.shape[0], 2):
            raise UserValueError(
                f"{who}: batch 'sizes' must be a tensor (B, 2) of valid (height, width), got "
                f"{getattr(given, 'shape', type(given).__name__)} — keep the collated 'sizes' key"
            )
        return batch, False
    raise UserTypeError(
        f"{who}: expected a batch dict or a uint8 tensor (B, C, H, W), got {type(data).__name__}"
    )


def _host_sizes(h: int, w: int, device: torch.device) -> torch.Tensor:
    # built on the host and queued: torch.tensor(..., device=) would wait for the device
    return torch.tensor([h, w], dtype=torch.int64).to(device, non_blocking=True)


def check_image(image: Any, who: str, *, need_uint8: bool = True) -> None:
    """Raise UserError unless ``image`` is a ``(B, C, H, W)`` tensor (uint8 when asked)."""
    if not isinstance(image, torch.Tensor) or image.ndim != 4:
        shape = getattr(image, "shape", type(image).__name__)
        error = UserValueError if isinstance(image, torch.Tensor) else UserTypeError
        raise error(
            f"{who}: images must be a tensor (B, C, H, W), got {shape} — batch single images "
            "with image.unsqueeze(0) and HWC arrays with .permute(0, 3, 1, 2)"
        )
    if need_uint8 and image.dtype != torch.uint8:
        raise UserTypeError(
            f"{who}: images must be uint8, got {image.dtype} — apply Normalize last, after "
            "the uint8 augmentations"
        )


def finish(batch: Batch, bare: bool) -> Any:
    """Return the image tensor for bare-tensor calls, the batch dict otherwise."""
    return batch["image"] if bare else batch


def check_generator(generator: torch.Generator | None, device: torch.device, who: str) -> None:
    """Refuse a generator that lives on another device than the batch."""
    if generator is None:
        return
    if not isinstance(generator, torch.Generator):
        raise UserTypeError(f"{who}: generator must be a torch.Generator, got {type(generator)}")
    gdev = torch.device(generator.device)
    if gdev.type != device.type:
        raise UserValueError(
            f"{who}: the generator is on {gdev} but the batch is on {device} — create it with "
            "npu_data.device.manual_seed(seed, device) on the batch's device"
        )


def pair(value: int | Sequence[int], what: str, who: str) -> tuple[int, int]:
    """``size`` as ``(height, width)`` of positive ints."""
    if isinstance(value, bool):
        raise UserTypeError(f"{who}: {what} must be an int or (height, width), got {value!r}")
    if isinstance(value, int | np.integer):
        out = (int(value), int(value))
    elif isinstance(value, Sequence) and len(value) == 2:
        if not all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in value):
            raise UserTypeError(f"{who}: {what} must hold ints, got {value!r}")
        out = (int(value[0]), int(value[1]))
    else:
        raise UserTypeError(f"{who}: {what} must be an int or (height, width), got {value!r}")
    if out[0] <= 0 or out[1] <= 0:
        raise UserValueError(f"{who}: {what} must be positive, got {value!r} — e.g. {what}=224")
    return out


class Transform:
    """Base of the batched random transforms (torchvision-v2 style).

    ``t(batch_or_images, generator=None)`` draws parameters with :meth:`get_params` and
    applies them with :meth:`apply`; :meth:`apply_reference` replays one sample's
    parameters on the CPU reference (Pillow semantics). A random transform defines
    :meth:`make_params`, the one sampler both :meth:`get_params` (a generator) and
    :meth:`draw_keyed` (the keyed draws) run; every transform defines ``_apply(batch,
    params, ctx)`` (module doc).

    The class attributes below declare what a pipeline may do with a stage (``compose``,
    ``compose.executed``, ``compose.mirror_top_left``, ``compose.split`` read them; all False
    here).
    """

    name = "Transform"
    needs_uint8 = True
    takes_latents = False  # applies to a latents store's batches (no image)
    # a resized crop (``transforms.crop``): per-sample boxes or windows that a reader may apply
    # while reading (keyed) and whose window a mirror written before it moves
    # (``compose.executed``)
    crops = False
    fills = False  # every sample fills its output (no padding) after it
    folds_flip = False  # mirrors its output's pixels while resizing (``ApplyContext.flip``)
    is_hflip = False  # a horizontal mirror a crop may fold (``flip`` param, ``ctx.pixels``)
    keeps_full = False  # uint8 pixels and sizes as they came: a full batch stays full
    mirror_free = False  # commutes with a horizontal mirror (per pixel, or no pixels)

    def __call__(self, data: Any, generator: torch.Generator | None = None) -> Any:
        return self.run(data, generator)[0]

    def run(self, data: Any, generator: torch.Generator | None = None) -> tuple[Any, Params]:
        """Transform ``data`` and also return the parameters that were drawn."""
        batch, bare = as_batch(data, self.name, need_uint8=self.needs_uint8,
                               latents=self.takes_latents)
        params = self.get_params(batch, generator)
        return finish(self._apply(batch, params), bare), params

    def get_params(self, data: Any, generator: torch.Generator | None = None) -> Params:
        """Per-sample parameters for ``data`` from ``generator``'s numbers (on the batch's
        device; None: torch's default there): :meth:`make_params` with
        ``draws.GeneratorDraws``, host tensors. A transform without ``make_params`` has
        none."""
        batch, _ = as_batch(data, self.name, need_uint8=self.needs_uint8,
                            latents=self.takes_latents)
        image = batch["image"] if "image" in batch else batch["latents"]
        check_generator(generator, image.device, self.name)
        if not self.keyed:
            return {}
        sizes = batch["sizes"].to("cpu").numpy().astype(np.int64).reshape(-1, 2)
        return self.make_params(sizes, GeneratorDraws(image.shape[0], generator, image.device))

    def apply(self, data: Any, params: Params) -> Any:
        """Apply already drawn ``params`` (deterministic), host tensors or on the batch's
        device: host ones are copied where needed without waiting for the device."""
        batch, bare = as_batch(data, self.name, need_uint8=self.needs_uint8,
                               latents=self.takes_latents)
        return finish(self._apply(batch, params), bare)

    def apply_reference(self, image: np.ndarray, params: Params, index: int) -> np.ndarray:
        """Sample ``index`` of a batch through the CPU reference, ``image`` HxWx3 uint8."""
        raise NotImplementedError

    # --- the parameter sampler (see transforms.draws) ---------------------------------------
    @property
    def keyed(self) -> bool:
        """Whether :meth:`make_params` exists, i.e. parameters can be drawn per sample on the
        host from keyed draws."""
        return type(self).make_params is not Transform.make_params

    def make_params(self, sizes: np.ndarray, rng: Uniforms) -> Params:
        """This transform's parameters for samples of input ``sizes (B, 2)`` int64 (height,
        width), from ``rng``'s uniform numbers (``draws.Draws`` keyed per sample, or
        ``draws.GeneratorDraws``): CPU tensors that :meth:`apply` takes on any device.

        Args:
            sizes: each sample's valid (height, width), as this transform receives it.
            rng: ``uniform(n)`` gives each sample's next ``n`` float64 numbers in [0, 1).

        Returns:
            The parameters, one row per sample.
        """
        raise NotImplementedError(f"{self.name} has no parameter sampler (make_params)")

    def output_sizes(self, sizes: np.ndarray) -> np.ndarray:
        """``(B, 2)`` sizes of the samples this transform outputs for inputs of ``sizes``."""
        return sizes

    def drawn_sizes(self, sizes: np.ndarray, params: Params) -> np.ndarray:
        """``(B, 2)`` output sizes for inputs of ``sizes`` under drawn ``params`` (a transform
        whose output size is drawn reads it there; others: :meth:`output_sizes`)."""
        return self.output_sizes(sizes)

    def draw_keyed(self, sizes: np.ndarray, keys: np.ndarray, position: int = 0) -> Params:
        """:meth:`make_params` with the draws of ``keys`` (``draws.sample_keys``) at
        ``position``."""
        return self.make_params(np.asarray(sizes, dtype=np.int64).reshape(-1, 2),
                                Draws(keys, position))

    def _apply(self, batch: Batch, params: Params, ctx: ApplyContext = DEFAULT) -> Batch:
        """The transform kernel: ``params`` applied to a checked batch dict (module doc)."""
        raise NotImplementedError

    def riders(self, params: Params, ctx: ApplyContext, shape: tuple[int, int, int]
               ) -> dict[str, torch.Tensor]:
        """The host tensors this stage's kernels will copy to the device for ``params`` on a
        ``(B, H, W)`` batch, made ahead so they ride with a pipeline's first copy
        (``functional.riding`` and its ``*_riders``; a kernel that finds none copies its own).
        Default: none."""
        return {}

    def __repr__(self) -> str:
        return f"{self.name}()"
