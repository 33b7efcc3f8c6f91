"""The torch-flavoured refinements of core errors: what CPU/CUDA users already catch."""

from __future__ import annotations

import torch

from torch_fl.core import errors


class OutOfMemoryError(errors.OutOfMemoryError, torch.OutOfMemoryError):
    """A ral device (or its TORCH_FL_MEMORY_LIMIT) could not satisfy an allocation."""


errors.refine_status_class(OutOfMemoryError)
