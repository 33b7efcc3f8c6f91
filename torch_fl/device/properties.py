"""torch.ral.get_device_properties: a properties object shaped like torch.cuda's."""

from __future__ import annotations

import os

import torch

from torch_fl.core.dtype_names import names_in_mask
from torch_fl.core.runtime import device_records


def _host_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class RalDeviceProperties:
    """What a ral device's plugin reports, under torch.cuda's attribute names where one fits
    (name, total_memory, multi_processor_count), plus the plugin's own fields."""

    __slots__ = (
        "index",
        "name",
        "vendor",
        "type",
        "driver_version",
        "total_memory",
        "max_alloc_size",
        "multi_processor_count",
        "is_host_mappable",
        "has_dma",
        "max_rank",
        "native_dtypes",
        "plugin",
        "local_index",
    )

    def __init__(self, rec):
        self.index = rec.index
        self.name = rec.name
        self.vendor = rec.vendor
        self.type = rec.type
        self.driver_version = rec.driver_version
        self.total_memory = rec.total_memory
        self.max_alloc_size = rec.max_alloc_size
        # The plugin ABI has no compute-unit field yet: a CPU-type device (the host plugin,
        # PoCL's pthread device) computes on this process's cores; any other reports 1.
        self.multi_processor_count = _host_cores() if rec.type == "cpu" else 1
        self.is_host_mappable = rec.host_mappable
        self.has_dma = rec.has_dma
        self.max_rank = rec.max_rank
        # dtypes the device computes in natively (others run through wider kernels or the CPU tier)
        self.native_dtypes = tuple(getattr(torch, n) for n in names_in_mask(rec.dtype_mask) if hasattr(torch, n))
        self.plugin = rec.plugin
        self.local_index = rec.local_index

    def __repr__(self):
        return (
            f"_RalDeviceProperties(name='{self.name}', vendor='{self.vendor}', type='{self.type}', "
            f"total_memory={self.total_memory // (1 << 20)}MB, multi_processor_count={self.multi_processor_count}, "
            f"host_mappable={self.is_host_mappable})"
        )


def get_device_properties(index: int) -> RalDeviceProperties:
    """The properties of ral device `index`."""
    return RalDeviceProperties(device_records()[index])
