"""Tools around the library, not on its data path: generated sample projects and benchmark
images (``sample_data``); the device ops and peak device memory of a call, counted on the
host (``device_costs``)."""
