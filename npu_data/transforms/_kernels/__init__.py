"""Batched pixel kernels behind :mod:`npu_data.transforms.functional`."""
