"""Pictures for people, not on the data path: a sample dict drawn with its annotations
(``canvas``: each kind paints its own rows), an augmented batch as a grid (``batch_grid``),
a latents store's sample (``latent_picture``). ``npu-data show`` and ``npu-data demo`` draw
them."""
