"""kohya sd-scripts' caption folders (``<repeats>_<tokens>/<image>`` + same-stem caption
files) as an import source."""
