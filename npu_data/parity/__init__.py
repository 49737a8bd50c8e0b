"""The parity suite behind ``npu-data parity``: every kernel, the pipeline and the DataLoader
against the Pillow oracle (``npu_data.transforms.oracle``).

``runner`` (``run_parity_suite``: the kernels' rows, the pipeline's and the DataLoader's),
``augment_rows`` (pixel augmentations, auto-augment policies, MixUp / CutMix) and
``geometric_rows`` (the warps) measure each sample against the oracle; ``precision`` is the
reduced-precision modes the torch kernels run again under (set for real and emulated);
``kernel_digest`` fingerprints the compiled kernels' outputs, so two builds proven equal
share the suite's proof. :func:`check` runs one transform — a user's too — against its own
CPU reference (``Transform.reference``) the same way; :func:`check_all` adds it in a
pipeline and through the DataLoader (``loader_rows``), the rows ``npu-data parity
--transform MODULE:NAME`` prints for a transform ``load`` finds by that name.
"""

from npu_data.parity.check import check, check_all

__all__ = ["check", "check_all"]
