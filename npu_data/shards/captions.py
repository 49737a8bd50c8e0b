"""Captions: where a sample's ``caption`` comes from.

Caption sets are kept two ways in Label Studio: as TextArea results (an annotator wrote or
corrected them) and in the task data (``{"data": {"image": ..., "caption": ...}}``, how caption
files are usually imported). A sample's caption is its first TextArea text; without one, the
first of the task data fields ``caption``, ``text``, ``prompt`` that holds a non-empty string.
``caption_field="key"`` names the data field instead, and it comes first (TextArea texts are
the fallback). The task data is stored with every sample (``data_json``), so the rule applies
to datasets imported before it existed too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from npu_data.errors import UserValueError

FIELDS = ("caption", "text", "prompt")


def check_field(field: str | None, who: str) -> str | None:
    """``caption_field`` as given: None or a non-empty string."""
    if field is not None and (not isinstance(field, str) or not field):
        raise UserValueError(f"{who}: caption_field={field!r} must be the task data key that "
                             "holds the caption, e.g. caption_field='caption'")
    return field


def from_data(raw: bytes, field: str | None) -> str:
    """The caption in one sample's task data JSON (``""``: none)."""
    names = (field,) if field else FIELDS
    if not raw or not any(b'"' + n.encode() + b'"' in raw for n in names):
        return ""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return ""
    if not isinstance(data, dict):
        return ""
    for n in names:
        v = data.get(n)
        if isinstance(v, str) and v.strip():
            return v
    return ""


def pick(texts: Sequence[str], raw: bytes, field: str | None) -> str:
    """A sample's caption from its TextArea ``texts`` and task data ``raw`` (module doc)."""
    if field:
        return from_data(raw, field) or (texts[0] if texts else "")
    return texts[0] if texts else from_data(raw, None)


@dataclass
class Coverage:
    """How many samples take their caption from where."""

    textarea: int = 0
    data: dict[str, int] | None = None
    none: int = 0
    stored: int = 0  # a latents store's captions, as encoded

    def line(self) -> str:
        """One line: ``captions: 20 from TextArea results, 5 from task data 'caption', ...``."""
        parts = [f"{self.textarea} from TextArea results"] if self.textarea else []
        parts += [f"{self.stored} stored with the latents"] if self.stored else []
        parts += [f"{n} from task data {k!r}" for k, n in sorted((self.data or {}).items())]
        parts.append(f"{self.none} without")
        return "captions: " + ", ".join(parts)

    @property
    def any(self) -> bool:
        return bool(self.textarea or self.data or self.stored)


def coverage(texts: Sequence[Sequence[str]], raws: Sequence[bytes],
             field: str | None) -> Coverage:
    """Where each sample's caption comes from, counted."""
    out = Coverage(data={})
    assert out.data is not None
    for t, raw in zip(texts, raws, strict=True):
        first = (field,) if field else FIELDS
        src = None
        if not field and t:
            src = "textarea"
        else:
            for n in first:
                if from_data(raw, n):
                    src = n
                    break
            if src is None and t:
                src = "textarea"
        if src == "textarea":
            out.textarea += 1
        elif src is None:
            out.none += 1
        else:
            out.data[src] = out.data.get(src, 0) + 1
    return out
