"""torch.compile's device interface for "ral" (torch._dynamo.device_interface): device count,
current device, streams, events and properties, answered by the ral device layer.

Registered the moment a program imports torch._dynamo.device_interface (mode.py asks for it),
so it is in place before any compile asks, and importing torch_fl pays neither for Dynamo
(seconds) nor for initializing plugins: every method reaches the runtime only when called.
"""

from __future__ import annotations

import torch

from torch_fl.device import index, properties, stream_state, streams, sync


def _make_interface():
    from torch._dynamo.device_interface import DeviceInterface, register_interface_for_device

    class RalInterface(DeviceInterface):
        """Dynamo/inductor's view of the ral device type."""

        device = index.device
        Event = torch.Event
        Stream = torch.Stream

        class Worker:
            """Queries inductor's worker processes make (no state of this process needed)."""

            @staticmethod
            def set_device(device: int) -> None:
                index.set_device(device)

            @staticmethod
            def current_device() -> int:
                return index.current_device()

            @staticmethod
            def get_device_properties(device=None):
                return properties.get_device_properties(index.device_index(device))

        @staticmethod
        def current_device() -> int:
            return index.current_device()

        @staticmethod
        def set_device(device) -> None:
            index.set_device(device)

        @staticmethod
        def maybe_exchange_device(device: int) -> int:
            prev = index.current_device()
            if device != prev:
                index.set_device(device)
            return prev

        exchange_device = maybe_exchange_device

        @staticmethod
        def device_count() -> int:
            return torch.ral.device_count()

        @staticmethod
        def is_available() -> bool:
            return torch.ral.is_available()

        @staticmethod
        def stream(stream):
            return streams.StreamContext(stream)

        @staticmethod
        def current_stream():
            return torch.accelerator.current_stream(index.current_device())

        @staticmethod
        def set_stream(stream) -> None:
            torch.accelerator.set_stream(stream)

        @staticmethod
        def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
            torch.accelerator.set_stream(
                torch.Stream(stream_id=stream_id, device_index=device_index, device_type=device_type)
            )

        @staticmethod
        def get_raw_stream(device_idx: int) -> int:
            return stream_state.current(device_idx)

        @staticmethod
        def synchronize(device=None) -> None:
            sync.synchronize_device(index.device_index(device))

        @staticmethod
        def get_compute_capability(device=None) -> str:
            return ""  # no (major, minor) off NVIDIA; inductor only keys caches on it

        @staticmethod
        def is_bf16_supported(including_emulation: bool = False) -> bool:
            return torch.ral.is_bf16_supported(including_emulation)

        @staticmethod
        def memory_allocated(device=None) -> int:
            return torch.ral.memory_allocated(device)

    register_interface_for_device("ral", RalInterface)
    return RalInterface


def register() -> None:
    """Register the ral device interface with Dynamo (imports torch._dynamo.device_interface)."""
    _make_interface()
