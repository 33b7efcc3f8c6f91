"""torch.ral.set_sync_debug_mode: warn or raise when the host waits on a ral device implicitly
(`.item()`, `.cpu()`, printing, `nonzero`, an op served by PyTorch's CPU kernel), as
torch.cuda.set_sync_debug_mode does. Explicit waits (torch.ral.synchronize, Stream/Event
.synchronize, torch.accelerator.synchronize) never report. It is a sync observer (sync.py), so
it costs nothing while off."""

from __future__ import annotations

import warnings

from torch_fl.device.sync import SYNC_OBSERVERS

_MODES = {"default": 0, "warn": 1, "error": 2}
_EXPLICIT = frozenset({"torch.ral.synchronize", "Stream.synchronize", "Event.synchronize"})
_mode = 0


def _observe(dev: int, reason: str) -> None:
    if reason in _EXPLICIT or _mode == 0:
        return
    msg = f"called a synchronizing ral operation ({reason} on ral:{dev})"
    if _mode == 2:
        raise RuntimeError(msg)
    warnings.warn(msg, UserWarning, stacklevel=3)


def set_sync_debug_mode(debug_mode: int | str) -> None:
    """0/"default": off; 1/"warn": warn on each implicit sync; 2/"error": raise RuntimeError."""
    global _mode
    if isinstance(debug_mode, str):
        if debug_mode not in _MODES:
            raise RuntimeError("invalid value of debug_mode, expected one of `default`, `warn`, `error`")
        debug_mode = _MODES[debug_mode]
    if debug_mode not in (0, 1, 2):
        raise RuntimeError(f"invalid value of debug_mode {debug_mode}, expected 0, 1 or 2")
    _mode = int(debug_mode)
    if _mode and _observe not in SYNC_OBSERVERS:
        SYNC_OBSERVERS.append(_observe)
    elif not _mode and _observe in SYNC_OBSERVERS:
        SYNC_OBSERVERS.remove(_observe)


def get_sync_debug_mode() -> int:
    """The current sync debug mode (0 off, 1 warn, 2 error)."""
    return _mode
