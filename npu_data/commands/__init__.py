"""One module per ``npu-data`` sub-command (see npu_data.cli)."""
