"""Error classes that need no torch import (used by light tools and the manifest loader)."""

from __future__ import annotations


class RalError(RuntimeError):
    """Base class of every error torch_fl raises; carries the status name and message."""

    status_name = "RAL_ERROR"

    def __init__(self, message: str, *, plugin: str | None = None, op: str | None = None):
        super().__init__(message)
        self.plugin = plugin
        self.op = op


class ManifestError(RalError, ValueError):
    """A kernel manifest failed validation; the message names the file, the entry and the field."""

    status_name = "RAL_ERROR_INVALID_MANIFEST"
