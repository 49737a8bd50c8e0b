"""The Pillow oracle: what the device kernels must reproduce, and how far they are from it.

``pillow`` (the CPU versions, one sample each; ``npu_data.transforms.reference``),
``pillow_pixel`` (the pixel augmentations) and ``pillow_geometric`` (the warps) run each op
as torchvision's PIL path does, with the argument checks of ``arguments``; ``replay`` runs a
batch's parameters sample by sample on them (``Transform.reference``); ``measures``
compares two arrays against the budgets (``npu_data.transforms.parity``). The suite that runs
every kernel, the pipeline and the DataLoader against them is ``npu_data.parity``.
"""
