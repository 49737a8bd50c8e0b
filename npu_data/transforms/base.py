"""The ``Transform`` base class and its plumbing: batch handling, validation, parameter draws.

**The contract** (docs/architecture.md, "Writing a transform"): an author writes at most six
names, and the base derives everything else (``name``, ``repr``, ``t(data)``, :meth:`run`,
:meth:`get_params`, :meth:`draw_keyed`, :attr:`keyed`):

1. ``traits``: a frozenset of :class:`Trait` — what a pipeline may do with the stage
   (``Compose`` fuses crops and flips from them, never from the class).
2. ``make_params(sizes, rng) -> params``: the sampler, vectorised over the batch, in float64
   on the host, from the samples' sizes and uniform numbers (keyed per sample for the
   DataLoader, or a torch generator's). A deterministic transform returns ``{}`` (one
   without it makes its pipeline unkeyed: no crop at read).
3. ``apply(batch, params) -> batch``: the kernel, deterministic, on a checked batch dict.
   The base wraps it (``__init_subclass__``) so that callers may pass a bare uint8 tensor
   ``(B, C, H, W)`` or a batch dict and get the same kind back.
4. ``reference(image, params, index)`` (optional): one sample, HxWx3 uint8, through the CPU
   (Pillow) reference — what ``npu-data parity`` and :func:`npu_data.parity.check` compare
   against. ``Trait.NO_PIXELS`` makes it the identity.
5. ``output_size(sizes, params)`` (optional): each sample's output (height, width) for input
   ``sizes (B, 2)``; ``params`` None before a draw (a transform whose size is drawn raises).
6. ``__init__``: its arguments are recorded as given (the derived ``repr`` shows those
   that differ from their defaults).

A pipeline's parameters are one flat dict, stage ``i``'s keys prefixed ``"i."``:
:func:`stage_params` and :func:`with_stage` are the one home of that naming.

**What a pipeline knows** (:class:`ApplyContext`: a folded flip, pixels already mirrored, a
batch without padding) reaches the few built-in stages that fuse through :func:`context_of`,
set by ``Compose`` around the stage's ``apply`` (:func:`fused`) — never a third argument.
:meth:`Transform.riders` (the one-copy upload of issue 47) is built-in plumbing too, not part
of an author's contract: a stage without it copies its own host tensors.

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
import enum
import functools
import inspect
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from npu_data.batch import Batch
from npu_data.common.compat import is_compiling
from npu_data.errors import UserTypeError, UserValueError
from npu_data.transforms.draws import Draws, GeneratorDraws, Uniforms

Params = dict[str, torch.Tensor]


@dataclass(frozen=True, eq=False)
class ApplyContext:
    """What a pipeline knows about the batch a stage applies to (``compose.fusions``), read by
    the built-in stages that fuse through :func:`context_of`; a stage reads the fields it can
    use and ignores the rest.

    Attributes:
        flip: a later mirror's (B,) mask, for a crop (``Trait.CROP``) to mirror its
            output's pixels while resizing (the mirror stage still moves the
            geometry).
        pixels: False: an earlier crop already mirrored this mirror's pixels; mirror the
            geometry only.
        full: True: every sample fills the whole batch (no padding), told to the stages that
            keep it full (``Trait.SAME_SIZE``: the colour jitter skips the padding);
            None: not known.
    """

    flip: torch.Tensor | None = None
    pixels: bool = True
    full: bool | None = None


DEFAULT = ApplyContext()

_FUSED: ContextVar[tuple[object, ApplyContext] | None] = ContextVar("npu_data_fused",
                                                                    default=None)


@contextlib.contextmanager
def fused(stage: object, ctx: ApplyContext) -> Iterator[None]:
    """Within the block, ``stage`` (that object only: not the stages it holds) reads ``ctx``
    through :func:`context_of` (``compose.run_stages`` sets it around the stage's apply).
    Nothing in a ``torch.compile`` trace (it cannot read a ContextVar): the stages run
    unfused there, to the same values."""
    if is_compiling():
        yield
        return
    token = _FUSED.set((stage, ctx))
    try:
        yield
    finally:
        _FUSED.reset(token)


def context_of(stage: object) -> ApplyContext:
    """What the pipeline running ``stage`` told it (:func:`fused`), else :data:`DEFAULT`."""
    if is_compiling():
        return DEFAULT
    got = _FUSED.get()
    return got[1] if got is not None and got[0] is stage else DEFAULT


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


class Trait(enum.Enum):
    """What a pipeline may do with a stage, declared in its ``traits`` (module doc).

    CROP: a resized crop whose parameters are :class:`CropParams` (per-sample ``boxes``, or
        ``windows``): a reader may apply it while reading (keyed; with the stage's ``size``,
        ``min_visible`` and ``interpolation`` attributes where it has them), a flip written
        before it may run after it, and its resize may mirror (a flip after it folds in).
    FILLS: every sample fills its output after it (no padding).
    HFLIP: a horizontal mirror whose parameters hold a (B,) bool ``flip``; implies
        PER_PIXEL's and SAME_SIZE's promises.
    PER_PIXEL: commutes with a horizontal mirror (each output pixel from the pixels at its
        place: colour, normalisation).
    SAME_SIZE: uint8 in, uint8 out, each sample's size kept: a batch without padding stays
        without padding.
    NO_PIXELS: reads and writes no pixels (captions, box bookkeeping): PER_PIXEL and
        SAME_SIZE, any image dtype, and its CPU reference is the identity.
    LATENTS: also takes a latents store's batches (``latents``, no ``image``); any dtype.
    FLOAT_IN: takes float images too (uint8 only without it).
    """

    CROP = "crop"
    FILLS = "fills"
    HFLIP = "hflip"
    PER_PIXEL = "per_pixel"
    SAME_SIZE = "same_size"
    NO_PIXELS = "no_pixels"
    LATENTS = "latents"
    FLOAT_IN = "float_in"


def mirror_free(t: Transform) -> bool:
    """``t`` commutes with a horizontal mirror (per pixel, no pixels, or a mirror)."""
    return bool(t.traits & {Trait.PER_PIXEL, Trait.NO_PIXELS, Trait.HFLIP})


def keeps_full(t: Transform) -> bool:
    """``t`` keeps uint8 pixels and each sample's size: a full batch stays full."""
    return bool(t.traits & {Trait.SAME_SIZE, Trait.NO_PIXELS, Trait.HFLIP})


def needs_uint8(t: Transform) -> bool:
    """``t`` takes uint8 images only."""
    return not t.traits & {Trait.FLOAT_IN, Trait.NO_PIXELS, Trait.LATENTS}


@dataclass(frozen=True, eq=False, repr=False)
class CropParams(dict[str, torch.Tensor]):
    """A crop's parameters (``Trait.CROP``), typed: what a crop's ``make_params`` returns and
    the one way other modules read them.

    Also a read-only dict of the keys its ``apply`` reads (``boxes``, and ``windows``,
    ``out``, ``crop_top_left`` where set), so it travels wherever parameters do (a
    pipeline's flat dict, ``batch["aug"]``, a worker); a changed copy is
    ``dataclasses.replace(crop, ...)``.

    Attributes:
        boxes: (B, 4) int64 (top, left, height, width) of each sample's source box.
        windows: (B, 4) int64 (top, left, full_height, full_width) for a crop that resizes
            the box whole and keeps a window of it; None for a box crop.
        out: (B, 2) int64 each sample's valid output size (window crops); None otherwise.
        top_left: (B, 2) int64 ``crop_top_left`` (SDXL micro-conditioning); None for
            parameters made by hand.

    Raises:
        UserTypeError: a value that is not a tensor (or None), or a change in place.
    """

    boxes: torch.Tensor
    windows: torch.Tensor | None = None
    out: torch.Tensor | None = None
    top_left: torch.Tensor | None = None

    KEYS: ClassVar[tuple[str, ...]] = ("boxes", "windows", "out", "crop_top_left")

    def __post_init__(self) -> None:
        values = (self.boxes, self.windows, self.out, self.top_left)
        if not isinstance(self.boxes, torch.Tensor) or not all(
                v is None or isinstance(v, torch.Tensor) for v in values):
            raise UserTypeError("CropParams: boxes must be a tensor and windows, out and "
                                "top_left tensors or None — read a params dict with "
                                "CropParams.of(params)")
        dict.update(self, {k: v for k, v in zip(self.KEYS, values, strict=True)
                           if v is not None})

    @classmethod
    def of(cls, params: Mapping[str, torch.Tensor]) -> CropParams:
        """The crop parameters in a crop's own ``params`` (stage keys already taken off).

        Args:
            params: a crop's parameters: a ``CropParams`` (returned as it is) or a dict.

        Returns:
            Them, typed.

        Raises:
            UserValueError: no ``boxes`` among them.
        """
        if isinstance(params, CropParams):
            return params
        boxes = params.get(cls.KEYS[0])
        if boxes is None:
            raise UserValueError("the crop's parameters have no 'boxes' — draw them with the "
                                 "crop's make_params (or draw_keyed)")
        return cls(boxes, params.get("windows"), params.get("out"), params.get("crop_top_left"))

    def as_params(self) -> Params:
        """A plain dict of the same keys (one that may be changed)."""
        return dict(self)

    def __reduce__(self) -> tuple[Any, ...]:  # pickle and copy by the fields, not the items
        return type(self), (self.boxes, self.windows, self.out, self.top_left)

    def _read_only(self, *args: Any, **kwargs: Any) -> Any:
        raise UserTypeError("CropParams is read-only — make a changed copy with "
                            "dataclasses.replace(crop, boxes=...), or change crop.as_params()")

    __setitem__ = __delitem__ = update = setdefault = pop = popitem = clear = _read_only
    __ior__ = _read_only


def flip_mask(params: Mapping[str, torch.Tensor]) -> torch.Tensor | None:
    """A mirror's (``Trait.HFLIP``) (B,) bool mask in its own ``params``, None if absent."""
    flip = params.get("flip")
    return None if flip is None else flip.to(torch.bool)


def _checked_apply(apply: Any) -> Any:
    """``apply`` that takes a bare tensor or a batch dict, checked, and returns the same kind
    (what ``__init_subclass__`` makes of a subclass's ``apply``)."""

    @functools.wraps(apply)
    def checked(self: Transform, data: Any, params: Params) -> Any:
        batch, bare = as_batch(data, self.name, need_uint8=needs_uint8(self),
                               latents=Trait.LATENTS in self.traits)
        return finish(apply(self, batch, params), bare)

    checked.__npu_checked__ = True  # type: ignore[attr-defined]
    return checked


class Transform:
    """Base of the batched random transforms (module doc: the six names an author writes).

    ``t(batch_or_images, generator=None)`` draws parameters with :meth:`get_params` and
    applies them with :meth:`apply`; :meth:`reference` replays one sample's parameters on
    the CPU reference (Pillow semantics); :meth:`draw_keyed` draws the DataLoader's keyed
    parameters with :meth:`make_params`.
    """

    traits: frozenset[Trait] = frozenset()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("apply")
        if callable(own) and not getattr(own, "__npu_checked__", False):
            cls.apply = _checked_apply(own)  # type: ignore[method-assign]
        init = cls.__dict__.get("__init__")
        if callable(init) and not getattr(init, "__npu_recorded__", False):
            cls.__init__ = _recorded_init(init)  # type: ignore[method-assign]
        traits = cls.__dict__.get("traits")
        if traits is not None and not isinstance(traits, property):
            if isinstance(traits, str) or not all(isinstance(t, Trait) for t in traits):
                raise UserTypeError(f"{cls.__name__}: traits must be a set of "
                                    f"npu_data.transforms.Trait members, got {traits!r}")
            cls.traits = frozenset(traits)

    @property
    def name(self) -> str:
        """The class's name (what errors and ``repr`` say)."""
        return type(self).__name__

    def __call__(self, data: Any, generator: torch.Generator | None = None) -> Any:
        return self.run(data, generator)[0]

    def run(self, data: Any, generator: torch.Generator | None = None) -> tuple[Any, Params]:
        """Transform ``data`` and also return the parameters that were drawn."""
        batch, bare = as_batch(data, self.name, need_uint8=needs_uint8(self),
                               latents=Trait.LATENTS in self.traits)
        params = self.get_params(batch, generator)
        return finish(self.apply(batch, params), bare), params

    def get_params(self, data: Any, generator: torch.Generator | None = None) -> Params:
        """Per-sample parameters for ``data`` from ``generator``'s numbers (on the batch's
        device; None: torch's default there): :meth:`make_params` with
        ``draws.GeneratorDraws``, host tensors. A transform without ``make_params`` has
        none."""
        batch, _ = as_batch(data, self.name, need_uint8=needs_uint8(self),
                            latents=Trait.LATENTS in self.traits)
        image = batch["image"] if "image" in batch else batch["latents"]
        check_generator(generator, image.device, self.name)
        if not self.keyed:
            return {}
        sizes = batch["sizes"].to("cpu").numpy().astype(np.int64).reshape(-1, 2)
        return self.make_params(sizes, GeneratorDraws(image.shape[0], generator, image.device))

    def apply(self, data: Any, params: Params) -> Any:
        """Apply already drawn ``params`` (deterministic), host tensors or on the batch's
        device: host ones are copied where needed without waiting for the device. A
        subclass defines it on a checked batch dict; the base lets callers pass a bare
        uint8 tensor too (module doc)."""
        raise NotImplementedError(f"{self.name} defines no apply(batch, params)")

    def reference(self, image: np.ndarray, params: Params, index: int) -> np.ndarray:
        """Sample ``index`` of a batch through the CPU reference, ``image`` HxWx3 uint8
        (``Trait.NO_PIXELS``: the image itself)."""
        if Trait.NO_PIXELS in self.traits:
            return image
        raise NotImplementedError(f"{self.name} has no CPU reference (reference)")

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

    def output_size(self, sizes: np.ndarray, params: Params | None = None) -> np.ndarray:
        """``(B, 2)`` sizes of the samples this transform outputs for inputs of ``sizes``,
        under drawn ``params`` (this stage's own); None: asked before a draw (a transform
        whose output size is drawn raises ``UserValueError`` then). Default: unchanged."""
        return sizes

    def draw_keyed(self, sizes: np.ndarray, keys: np.ndarray, position: int = 0) -> Params:
        """:meth:`make_params` with the draws of ``keys`` (``draws.sample_keys``) at
        ``position``."""
        return self.make_params(np.asarray(sizes, dtype=np.int64).reshape(-1, 2),
                                Draws(keys, position))

    def riders(self, params: Params, ctx: ApplyContext, shape: tuple[int, int, int]
               ) -> dict[str, torch.Tensor]:
        """Built-in plumbing, not an author's: the host tensors this stage's kernels will copy
        to the device for ``params`` on a ``(B, H, W)`` batch, made ahead so they ride with a
        pipeline's first copy (``functional.riding`` and its ``*_riders``; a kernel that
        finds none copies its own). Default: none."""
        return {}

    def __repr__(self) -> str:
        """``Name(arg=value, ...)``: the ``__init__`` arguments as they were given (recorded
        by the base), by name, where they differ from the signature's default."""
        given = self.__dict__.get("_arguments", {})
        parts: list[str] = []
        for p in inspect.signature(type(self).__init__).parameters.values():
            if p.name == "self" or p.name not in given:
                continue
            value = given[p.name]
            if p.kind is p.VAR_KEYWORD:
                parts.extend(f"{k}={v!r}" for k, v in value.items())
            elif p.kind is p.VAR_POSITIONAL:
                parts.extend(repr(v) for v in value)
            elif p.default is p.empty or not _same(value, p.default):
                parts.append(f"{p.name}={value!r}")
        return f"{self.name}({', '.join(parts)})"


def _recorded_init(init: Any) -> Any:
    """``init`` that first records the arguments of the outermost ``__init__`` call (what
    the derived ``repr`` shows)."""
    signature = inspect.signature(init)

    @functools.wraps(init)
    def recorded(self: Transform, *args: Any, **kwargs: Any) -> None:
        if "_arguments" not in self.__dict__:
            try:
                bound = signature.bind(self, *args, **kwargs)
            except TypeError:
                pass  # init raises the error
            else:
                self.__dict__["_arguments"] = dict(list(bound.arguments.items())[1:])
        init(self, *args, **kwargs)

    recorded.__npu_recorded__ = True  # type: ignore[attr-defined]
    return recorded


def _same(value: Any, default: Any) -> bool:
    if value is default:
        return True
    try:
        return bool(value == default)
    except (TypeError, ValueError, RuntimeError):  # arrays, tensors: shown
        return False
