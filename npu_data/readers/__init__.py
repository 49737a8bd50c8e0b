"""The readers' room: images read into a batch the way its request asks.

:mod:`~npu_data.readers.read_crop` reads a batch's images through the ``CropPlan`` its
request carries (crop at read, ``DataLoader(read_crop=...)``): JPEGs decoded only in their
boxes, each box resized straight into the batch buffer, the geometry moved through the same
boxes. The transforms draw the plan (``transforms.pipeline.Pipeline.draw``) and run what
follows the read (``Pipeline.finish``); the loaders' assembler calls the reader between the
two (``loaders.assemble``), for a ``ShardDataset`` batch and a stream's alike. A reader
calls the transforms' public kernels (``functional.resized_crop_list``,
``geometry.resized_crop_geometry``), so the bytes are those of cropping after the read.
"""

from __future__ import annotations

from npu_data.readers import read_crop

__all__ = ["read_crop"]
