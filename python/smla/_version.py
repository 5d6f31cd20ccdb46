"""smla's version: the one place it is written (the package's metadata, the
distribution's file names and the extension's cache key read it)."""

__version__ = "0.2.0"
