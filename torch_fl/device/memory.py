"""Device buffers (the payload under a RalTensor) and the memory-statistics API."""

from __future__ import annotations

import threading
import weakref

from torch_fl._native import ffi, lib
from torch_fl.core.runtime import check, ensure_initialized
from torch_fl.device import fork, guard

# Allocation observers (the tracer): callables (event, buffer) with event "alloc" or "free".
# Empty unless a trace is recording, so the per-op cost is one truth test.
ALLOC_OBSERVERS: list = []


class Buffer:
    """One allocation from the runtime's MemoryPool; freed back to the pool when collected.

    Views of a tensor share the Buffer object, so the memory lives as long as any view.
    Once a torch storage is asked of it (`storage_of`), that storage owns the block instead
    and frees it when its last reference (this Buffer's, or a user's) goes.
    """

    # host: (ptr, nbytes, {dtype: CPU tensor over the host mapping}) once a zero-copy view was
    # asked for (tensor/host_copy.py); kept here because a weak-keyed cache cost ~2 us a lookup
    __slots__ = ("device", "ptr", "nbytes", "storage", "host", "__weakref__")

    def __init__(self, device: int, ptr: int, nbytes: int, storage=None):
        self.device = device
        self.ptr = ptr
        self.nbytes = nbytes
        self.storage = storage
        self.host = None

    def __del__(self):
        # Interpreter shutdown may have torn `lib` down already; nothing to free then.
        # In a forked child the memory is the parent's, and the runtime is unusable.
        if fork.in_child:
            return
        try:
            if ALLOC_OBSERVERS:
                for obs in ALLOC_OBSERVERS:
                    obs("free", self)
            if self.storage is None:  # else the storage frees the block with its last reference
                lib.rt_free(self.device, self.ptr)
        except Exception:
            pass

    def reallocate(self, nbytes: int, stream: int) -> None:
        """Replace this buffer's memory with a fresh block of nbytes (contents not kept), in place.

        Every view sharing the Buffer sees the new block, as with `untyped_storage().resize_()`.
        The old block goes back to the pool stream-ordered: it is reused only after work queued
        on it completes.
        """
        if nbytes == self.nbytes:
            return
        self.host = None  # a cached host view maps the old block
        if self.storage is not None:  # the storage owns the block: it frees the old one
            fresh = allocate(self.device, nbytes, stream) if nbytes else Buffer(self.device, 0, 0)
            guard.reset_storage_block(self.storage, fresh.ptr, nbytes, self.device)
            self.ptr, self.nbytes = fresh.ptr, nbytes
            fresh.ptr, fresh.nbytes = 0, 0
            return
        if self.nbytes:
            for obs in ALLOC_OBSERVERS:
                obs("free", self)
            check(lib.rt_free(self.device, self.ptr))
        self.ptr, self.nbytes = 0, 0
        if nbytes:
            fresh = allocate(self.device, nbytes, stream)
            self.ptr, self.nbytes = fresh.ptr, fresh.nbytes
            fresh.ptr, fresh.nbytes = 0, 0  # ownership moved here (freeing 0 bytes is a no-op)

    def __repr__(self):
        return f"Buffer(ral:{self.device}, 0x{self.ptr:x}, {self.nbytes} bytes)"


_PTR, _NBYTES = Buffer.ptr, Buffer.nbytes  # the slots, under StorageBuffer's properties


class StorageBuffer(Buffer):
    """A Buffer whose block a torch storage owns (`storage_of`): its address and size are the
    storage's, read live, so `untyped_storage().resize_(n)` (done in C++, ral_allocator.cpp)
    moves every view of the buffer to the new block, as on CUDA. Only buffers whose storage
    was asked for pay the read."""

    __slots__ = ()

    @property
    def ptr(self) -> int:
        """The storage's current block address."""
        return self.storage.data_ptr()  # 0 once resized to 0 bytes: the runtime refuses it

    @ptr.setter
    def ptr(self, value: int) -> None:
        _PTR.__set__(self, value)

    @property
    def nbytes(self) -> int:
        """The storage's current size in bytes."""
        return self.storage.nbytes()

    @nbytes.setter
    def nbytes(self, value: int) -> None:
        _NBYTES.__set__(self, value)


_tls = threading.local()

# StorageImpl address -> the Buffer over that storage's block (while the Buffer lives; it
# holds the storage, so the address stays unique meanwhile).
_BY_STORAGE: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def storage_of(buf: Buffer):
    """The torch.UntypedStorage (on ral:N) over buf's block, made on first request; from then
    on it owns the block. Raises RuntimeError if the allocator shim could not be built."""
    s = buf.storage
    if s is None:
        s = guard.storage_for_block(buf.ptr, buf.nbytes, buf.device)
        if s is None:
            raise RuntimeError(
                "torch_fl: torch storages of ral memory need the C++ allocator shim, which could "
                "not be built against this torch (see torch_fl/device/guard/README.md)"
            )
        buf.storage = s
        buf.__class__ = StorageBuffer
        _BY_STORAGE[s._cdata] = buf
    return s


def buffer_of(storage) -> Buffer:
    """The Buffer over a ral storage's block (one per storage: tensors set_ to it share it)."""
    buf = _BY_STORAGE.get(storage._cdata)
    if buf is None:
        if not guard.owns_block(storage):
            raise RuntimeError(
                f"torch_fl: this {storage.device} storage holds no block torch_fl allocated (a DLPack "
                "import's memory, or a wrapper tensor's placeholder storage read by C++ code that "
                "bypasses dispatch); set_ a ral tensor to a ral tensor's untyped_storage() instead"
            )
        buf = StorageBuffer(storage.device.index, storage.data_ptr(), storage.nbytes(), storage)
        _BY_STORAGE[storage._cdata] = buf
    return buf


def block_of(storage) -> tuple[Buffer, int]:
    """(the Buffer of the pool block a ral storage's memory lies in, the storage's byte offset
    in it): 0 for a storage owning its block, the slice's start for a storage slice `s[a:b]`.
    Raises RuntimeError for other memory (a DLPack import's)."""
    if storage._cdata not in _BY_STORAGE and not guard.owns_block(storage):
        found = guard.slice_base(storage)
        if found is not None:
            return buffer_of(found[0]), found[1]
    return buffer_of(storage), 0


def record_stream(buf: Buffer, stream: int) -> None:
    """Keep buf's block from reuse, once freed, until `stream` finishes its queued work."""
    check(lib.rt_record_stream(buf.device, buf.ptr, stream))


def allocate(device: int, nbytes: int, stream: int = 0) -> Buffer:
    """Allocate nbytes on a device for use on a stream; raises torch_fl.OutOfMemoryError."""
    if fork.in_child:
        fork.refuse(f"allocating {nbytes} bytes on ral:{device}")
    out = getattr(_tls, "out", None)
    if out is None:  # one result cell per thread: cffi releases the GIL during the call
        out = _tls.out = ffi.new("uint64_t*")
    status = lib.rt_malloc(device, nbytes, stream, out)
    if status:
        check(status)
    buf = Buffer(device, out[0], nbytes)
    if ALLOC_OBSERVERS:
        for obs in ALLOC_OBSERVERS:
            obs("alloc", buf)
    return buf


def memory_stats_dict(device: int) -> dict[str, int]:
    """The MemoryPool counters of a device, with torch.cuda-style key names."""
    ensure_initialized(use=False)
    st = ffi.new("rt_memory_stats*")
    check(lib.rt_memory_stats_get(device, st))
    return {
        "allocated_bytes.all.current": st.allocated_bytes,
        "allocated_bytes.all.peak": st.peak_allocated_bytes,
        "reserved_bytes.all.current": st.reserved_bytes,
        "reserved_bytes.all.peak": st.peak_reserved_bytes,
        "limit_bytes": st.limit_bytes,
        "num_alloc_retries": 0,
        "num_ooms": st.num_ooms,
        "allocation.all.allocated": st.num_allocs,
        "allocation.all.freed": st.num_frees,
        "allocation.all.current": st.num_live_blocks,
        "cache_hits": st.num_cache_hits,
        "cached_blocks": st.num_cached_blocks,
        "plugin_mallocs": st.num_plugin_mallocs,
        "plugin_frees": st.num_plugin_frees,
    }
