"""Formats other than our shards, one package each with its ``reader`` and ``writer`` (the
layout of MosaicML streaming's ``format/<name>/``): ``webdataset``."""
