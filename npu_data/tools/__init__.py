"""Tools around the library, not on its data path: generated sample projects and benchmark
images (``sample_data``)."""
