"""Which caption each sample of an encode gets: the pixel path's rule (``shards.batch_read``:
the first TextArea text, else the task data's ``caption``, ``text`` or ``prompt``;
``caption_field="key"`` names the data key, TextArea texts then the fallback), said in one
line, and a text-encoder run over a dataset without any caption refused unless it is meant
to be unconditional."""

from __future__ import annotations

from typing import Any

from npu_data.errors import UserValueError
from npu_data.shards.batch_read import FIELDS, check_field

RULE = ("the first TextArea text, else the task data's 'caption', 'text' or 'prompt' "
        "(a non-empty string)")


def caption_record(src: Any, unconditional: bool, text: bool) -> dict[str, Any]:
    """The manifest's ``latents.captions`` of an encode of ``src`` (a ``ShardDataset`` whose
    ``caption_field`` is the run's): ``{"field", "rule", "sources", "unconditional"}``.

    Raises:
        UserValueError: text encoders over a dataset where no sample has a caption, without
            ``unconditional`` (one line naming ``caption_field`` and ``unconditional``).
    """
    if not isinstance(unconditional, bool):
        raise UserValueError(f"{{unconditional}}: must be True or False, got {unconditional!r}",
                             option="unconditional")
    field = check_field(getattr(src, "caption_field", None), "encode_latents")
    rule = (f"the task data's {field!r}, else the first TextArea text" if field else RULE)
    if unconditional:
        return {"field": field, "rule": rule, "unconditional": True,
                "sources": "none: every sample encoded with the empty prompt (unconditional)"}
    cov = src.caption_coverage()
    if text and not cov.any:
        looked = repr(field) if field else ", ".join(map(repr, FIELDS))
        raise UserValueError(
            f"{src.path}: no sample has a caption (no TextArea text, no task data {looked}), "
            "so every text embedding would be the empty prompt's — pass {caption_field} naming "
            "the task data key that holds them, or {unconditional} to train unconditionally",
            option=("caption_field", "unconditional"))
    return {"field": field, "rule": rule, "unconditional": False,
            "sources": cov.line()[len("captions: "):]}
