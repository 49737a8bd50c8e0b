"""The lowest layer: helpers every other part may import and that import no other part
(only ``npu_data.errors``): atomic writes, cache folders, file hashes, the process's place in
a distributed job, and the bucket rule."""
