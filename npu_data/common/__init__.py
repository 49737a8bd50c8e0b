"""The lowest layer: helpers every other part may import and that import no other part
(only ``npu_data.errors``): atomic writes (``atomic``), folder locks (``locks``), cache
folders (``cache``), file hashes (``hashing``), safe names and paths (``paths``), OS errors
as one line (``oserrors``), terminal-safe text (``text``), ragged columns (``ragged``), the
process's place in a distributed job (``dist``), what differs between torch releases
(``compat``) and the C++ build on first use (``compiled``)."""
