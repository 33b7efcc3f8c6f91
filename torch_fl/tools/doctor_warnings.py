"""`ralctl doctor`: every Python warning raised while it checks, or printed by its smoke-test
child, becomes a finding with what it means and what to do, instead of a bare stderr line.
"""

from __future__ import annotations

import re
import warnings
from contextlib import contextmanager

# (pattern, what it means, what to do). First match wins; the last entry catches the rest.
EXPLANATIONS = (
    (
        r"device-guard shim",
        "the C++ device guard could not be compiled, so only ral:0 can run backward passes",
        "install a C++ compiler (apt-get install g++) and check that torch's headers are present "
        "(torch/include); then `python -c 'import torch_fl'` rebuilds it",
    ),
    (
        r"ignored its kernels",
        "a plugin's manifest is invalid, so none of its kernels are used (ops fall back to other tiers)",
        "`ralctl manifest validate <plugin dir>/manifest.json` names the entry and field to fix",
    ),
    (
        r"torch_fl\.jit: .* on ral:\d+",
        "a generated kernel failed to compile; that op runs in the next tier (slower, still correct)",
        "install or fix the device compiler (CC for the host plugin, the OpenCL driver for OpenCL); "
        "the warning's second line is the compiler's own message",
    ),
    (
        r"imported after autograd had already run a backward",
        "torch_fl was imported after a backward pass, so backward passes now run on the calling thread",
        "import torch_fl before the first backward, or leave TORCH_DEVICE_BACKEND_AUTOLOAD unset",
    ),
    (
        r"bos_token_id|eos_token_id",
        "a transformers model config names special tokens outside its vocabulary",
        "set bos_token_id/eos_token_id to ids inside the vocabulary (or None) in the config",
    ),
    (
        r".*",
        "a warning from torch, a plugin or a library while the doctor ran its checks",
        "read the message; if it names torch_fl, report it with `ralctl doctor --json` attached",
    ),
)


def explain(message: str) -> tuple[str, str]:
    """(meaning, fix) for a warning message."""
    for pattern, meaning, fix in EXPLANATIONS:
        if re.search(pattern, message):
            return meaning, fix
    raise AssertionError("unreachable: the last pattern matches everything")


def warning_lines(stderr: str) -> list[str]:
    """The warning lines a child process printed (Python warnings and torch's C++ warnings)."""
    out = []
    for line in stderr.splitlines():
        if re.search(r"\b\w*Warning\b|^\[W\d|^\[transformers\]", line):
            line = re.sub(r"^\S+\.py:\d+: ", "", line.strip())  # drop the "file.py:31: " prefix
            if line not in out:
                out.append(line)
    return out


@contextmanager
def collected():
    """Record Python warnings instead of printing them; yields the list of messages."""
    messages: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield messages
    for w in caught:
        text = f"{w.category.__name__}: {w.message}"
        if text not in messages:
            messages.append(text)
