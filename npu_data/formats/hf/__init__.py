"""Hugging Face layouts as import sources: the imagefolder (``metadata.jsonl`` / ``.csv``),
``datasets`` parquet files and ``save_to_disk`` folders."""
