"""Label maps from a Label Studio labeling config (XML)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from npu_data.errors import UserError

# Control tags whose children (<Label>/<Choice>) are label values.
_LABEL_CHILDREN = ("Label", "Choice")
_CONTROL_TAGS = {
    "RectangleLabels", "Rectangle", "PolygonLabels", "Polygon", "KeyPointLabels", "KeyPoint",
    "EllipseLabels", "Ellipse", "BrushLabels", "Brush", "Labels", "Choices", "TextArea",
    "Taxonomy", "Rating", "Number", "Relations", "HyperTextLabels", "ParagraphLabels",
    "TimeSeriesLabels", "VideoRectangle", "DateTime", "Pairwise", "Ranker", "MagicWand",
}


def _etree_map(xml_text: str, name: str) -> dict[str, list[str]]:
    try:
        root = ET.fromstring(xml_text)
    except ET.ParseError as e:
        raise UserError(f"{name}: the labeling config is not valid XML ({e}) — copy it from "
                        "the project's Settings > Labeling Interface > Code") from None
    out: dict[str, list[str]] = {}
    for el in root.iter():
        if el.tag in _CONTROL_TAGS and el.get("name") and el.get("toName"):
            values = [c.get("value") or c.get("alias") or "" for c in el.iter()
                      if c is not el and c.tag in _LABEL_CHILDREN]
            out[el.get("name", "")] = [v for v in values if v]
    return out


def _sdk_map(xml_text: str) -> dict[str, list[str]] | None:
    try:
        from label_studio_sdk.label_interface import LabelInterface
    except ImportError:
        return None
    li = LabelInterface(xml_text)
    return {c.name: [str(v) for v in (getattr(c, "labels", None) or [])] for c in li.controls}


def label_map_from_config(xml_text: str, name: str = "labeling config",
                          use_sdk: bool = True) -> dict[str, list[str]]:
    """Control name -> label values in config order (LabelInterface if installed)."""
    parsed = _etree_map(xml_text, name)  # validates the XML and gives a clear error
    if use_sdk:
        try:
            sdk = _sdk_map(xml_text)
        except Exception as e:  # the SDK raises assorted errors on odd configs
            raise UserError(f"{name}: label-studio-sdk cannot read the config ({e}) — "
                            "check it in Label Studio's config editor") from None
        if sdk is not None:
            return sdk
    return parsed
