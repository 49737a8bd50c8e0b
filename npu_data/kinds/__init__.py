"""Annotation kinds: one module per kind (schema, pixels, reads, collate, geometry) and the
registry (``npu_data.kinds.registry.KINDS``) that everything else iterates."""
