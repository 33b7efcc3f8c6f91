"""MemoryPool, SecureContext, launches, copies, streams and events (cffi level)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from plugins.harness import run_native, run_on  # noqa: E402

from plugins import fixtures  # noqa: E402

plugin_cache = fixtures.plugin_cache
roots = fixtures.roots


@pytest.fixture
def template_root(roots):
    return roots.make("root", "template")


@pytest.fixture
def faulty_root(roots):
    return roots.make("root", "faulty")


def test_pool_caches_and_counts(template_root):
    run_on(
        template_root,
        """
        a = malloc(0, 1000)
        s = stats(0)
        assert (s.allocated_bytes, s.reserved_bytes, s.num_plugin_mallocs) == (1000, 1024, 1)
        ok(lib.rt_free(0, a))
        s = stats(0)
        assert (s.allocated_bytes, s.reserved_bytes, s.num_cached_blocks) == (0, 1024, 1)
        b = malloc(0, 1000)
        assert b == a
        s = stats(0)
        assert (s.num_cache_hits, s.num_plugin_mallocs, s.num_allocs, s.num_frees) == (1, 1, 2, 1)
        assert (s.num_live_blocks, s.num_cached_blocks, s.peak_allocated_bytes) == (1, 0, 1000)
        c = malloc(0, 1001)  # same 1024-byte class, but `b` is live: a new block
        assert c != b and stats(0).num_plugin_mallocs == 2
        big = malloc(0, 3 << 20)  # above 1 MiB: 2 MiB multiples
        assert stats(0).reserved_bytes == 2048 + (4 << 20)
        for p in (b, c, big):
            ok(lib.rt_free(0, p))
        ok(lib.rt_reset_peak_stats(0))
        assert stats(0).peak_allocated_bytes == 0
        ok(lib.rt_empty_cache(0))
        s = stats(0)
        assert (s.reserved_bytes, s.num_cached_blocks, s.num_plugin_frees) == (0, 0, 3)
        assert s.peak_reserved_bytes == 2048 + (4 << 20)
        """,
    )


def test_zero_byte_allocation_is_a_valid_block(template_root):
    run_on(
        template_root,
        """
        p = malloc(0, 0)
        assert p != 0 and stats(0).reserved_bytes == 512
        ok(lib.rt_check_pointer(0, p, 0, 0))
        fails(lib.rt_check_pointer(0, p, 0, 1), "RAL_ERROR_INVALID_POINTER")
        ok(lib.rt_free(0, p))
        msg = fails(lib.rt_free(0, p), "RAL_ERROR_INVALID_POINTER")  # double free
        assert msg == f"RAL_ERROR_INVALID_POINTER: buffer {p:#x} not mapped to device 0"
        """,
    )


def test_stream_ordered_reuse(faulty_root):
    run_on(
        faulty_root,
        """
        s = ffi.new("int32_t*")
        ok(lib.rt_stream_create(0, s)); a_stream = s[0]
        ok(lib.rt_stream_create(0, s)); b_stream = s[0]
        noop = kernel(0, "faulty_noop_kernel")
        block = malloc(0, 4096, a_stream)
        ok(launch(0, noop, [tensor(block, 1024)], [], stream=a_stream))
        ok(lib.rt_free(0, block))
        assert lib.rt_stream_query(0, a_stream) == lib.RAL_ERROR_NOT_READY
        # Same stream: reuse at once (stream order protects it).
        assert malloc(0, 4096, a_stream) == block
        ok(lib.rt_free(0, block))
        # Another stream while A still has queued work: a fresh block.
        other = malloc(0, 4096, b_stream)
        assert other != block and stats(0).num_plugin_mallocs == 2
        ok(lib.rt_stream_synchronize(0, a_stream))
        # A is idle now: B may take A's block.
        assert malloc(0, 4096, b_stream) == block
        fails(lib.rt_malloc(0, 16, 99, ffi.new("uint64_t*")), "RAL_ERROR_INVALID_ARGUMENT")
        """,
    )


def test_record_stream_delays_reuse(faulty_root):
    run_on(
        faulty_root,
        """
        s = ffi.new("int32_t*")
        streams = []
        for _ in range(7):
            ok(lib.rt_stream_create(0, s)); streams.append(s[0])
        a, b, c = streams[:3]
        noop = kernel(0, "faulty_noop_kernel")
        block = malloc(0, 4096, a)
        ok(lib.rt_record_stream(0, block, b))
        ok(lib.rt_record_stream(0, block, b))  # recording twice is recording once
        ok(launch(0, noop, [tensor(block, 1024)], [], stream=b))  # b busy until synchronized
        ok(lib.rt_free(0, block))
        # Not even the owning stream may reuse it while b has queued work; nor may c.
        fresh = malloc(0, 4096, a)
        assert fresh != block
        assert malloc(0, 4096, c) not in (block, fresh)
        ok(lib.rt_stream_synchronize(0, b))
        assert malloc(0, 4096, a) == block
        ok(lib.rt_free(0, block))
        # More streams than a block records: then every stream must be idle.
        block = malloc(0, 8192, a)
        for sid in streams[1:]:
            ok(lib.rt_record_stream(0, block, sid))
        last = streams[-1]
        ok(launch(0, noop, [tensor(block, 2048)], [], stream=last))
        ok(lib.rt_free(0, block))
        assert malloc(0, 8192, a) != block
        ok(lib.rt_stream_synchronize(0, last))
        assert malloc(0, 8192, a) == block
        fails(lib.rt_record_stream(0, 12345, a), "RAL_ERROR_INVALID_ARGUMENT")
        fails(lib.rt_record_stream(0, block, 99), "RAL_ERROR_INVALID_ARGUMENT")
        """,
    )


@pytest.mark.parametrize(
    "text,expected",
    [("512MB", 512 * 10**6), ("1GiB", 1 << 30), ("1048576", 1048576), ("2 mib", 2 << 20), ("1.5K", 1536), ("0", 0)],
)
def test_memory_limit_env_parsing(template_root, text, expected):
    run_on(
        template_root,
        f"""
        assert stats(0).limit_bytes == {expected}
        out = ffi.new("uint64_t*")
        ok(lib.rt_parse_size({text!r}.encode(), out))
        assert out[0] == {expected}
        """,
        {"TORCH_FL_MEMORY_LIMIT": text},
    )


def test_bad_memory_limit_fails_init(template_root):
    run_native(
        f"""
        msg = fails(lib.rt_init({str(template_root)!r}.encode()), "RAL_ERROR_INVALID_ARGUMENT")
        assert msg.startswith("RAL_ERROR_INVALID_ARGUMENT: TORCH_FL_MEMORY_LIMIT='12 parsecs'")
        fails(lib.rt_parse_size(b"-1", ffi.new("uint64_t*")), "RAL_ERROR_INVALID_ARGUMENT")
        """,
        {"TORCH_FL_MEMORY_LIMIT": "12 parsecs"},
    )


def test_out_of_memory_message_and_recovery(template_root):
    run_on(
        template_root,
        """
        a = malloc(0, 600 * 1024)
        out = ffi.new("uint64_t*")
        msg = fails(lib.rt_malloc(0, 500 * 1024, 0, out), "RAL_ERROR_OUT_OF_MEMORY")
        assert msg == (
            "RAL_ERROR_OUT_OF_MEMORY: device 0 ([template]): requested 512000 bytes "
            "(block 512000); limit 1048576 bytes, allocated 614400 bytes, "
            "reserved 614400 bytes"), msg
        assert stats(0).num_ooms == 1
        ok(lib.rt_free(0, a))
        # The cached block of another class is handed back to make room.
        b = malloc(0, 500 * 1024)
        s = stats(0)
        assert (s.num_plugin_frees, s.reserved_bytes, s.num_cached_blocks) == (1, 512000, 0)
        ok(lib.rt_free(0, b))
        assert malloc(0, 500 * 1024) == b
        ok(lib.rt_set_memory_limit(0, 0))
        malloc(0, 8 << 20)
        """,
        {"TORCH_FL_MEMORY_LIMIT": "1MiB"},
    )


def test_plugin_malloc_failure_is_out_of_memory(template_root):
    run_on(
        template_root,
        """
        msg = fails(lib.rt_malloc(0, 1 << 62, 0, ffi.new("uint64_t*")), "RAL_ERROR_OUT_OF_MEMORY")
        assert "limit none" in msg and "plugin malloc: aligned_alloc(" in msg, msg
        malloc(0, 64)
        """,
    )


def test_secure_context_refuses_unmapped_and_out_of_range(template_root):
    run_on(
        template_root,
        """
        add = kernel(0, "template_add_f32")
        buf = malloc(0, 16)
        good = tensor(buf, 4)
        ok(launch(0, add, [good], [good, good], [[lib.RAL_SCALAR_INT, 1]]))
        assert lib.rt_launch_count(0) == 1
        forged = tensor(0x7F8A12345000, 4)
        msg = fails(launch(0, add, [good], [forged, good]), "RAL_ERROR_INVALID_POINTER")
        assert msg.startswith(
            "RAL_ERROR_INVALID_POINTER: buffer 0x7f8a12345000 not mapped to device 0"), msg
        assert "tensor 1 of aten::add.Tensor" in msg
        msg = fails(lib.rt_check_pointer(0, 0x7F8A12345000, 0, 4), "RAL_ERROR_INVALID_POINTER")
        assert msg == "RAL_ERROR_INVALID_POINTER: buffer 0x7f8a12345000 not mapped to device 0"
        fails(launch(0, add, [tensor(buf, 5)], [good, good]), "RAL_ERROR_INVALID_POINTER")
        fails(launch(0, add, [tensor(buf, 4, offset=4)], [good, good]), "RAL_ERROR_INVALID_POINTER")
        fails(launch(0, add, [tensor(buf, 3, stride=2)], [good, good]), "RAL_ERROR_INVALID_POINTER")
        fails(launch(0, add, [tensor(buf, 4, stride=-1)], [good, good]), "RAL_ERROR_INVALID_ARGUMENT")
        fails(launch(0, add, [tensor(buf, 4, dtype=99)], [good, good]), "RAL_ERROR_INVALID_ARGUMENT")
        ok(launch(0, add, [tensor(buf, 0, offset=16)], [tensor(buf, 0)] * 2))  # empty: extent 0
        assert lib.rt_launch_count(0) == 2  # no refused call reached the plugin
        fails(lib.rt_copy_h2d(0, 0, buf, 8, ffi.new("char[16]"), 16), "RAL_ERROR_INVALID_POINTER")
        fails(lib.rt_copy_d2h(0, 0, ffi.new("char[4]"), buf + 64, 0, 4, 1),
              "RAL_ERROR_INVALID_POINTER")
        fails(lib.rt_memset(0, 0, buf, 12, 0, 8), "RAL_ERROR_INVALID_POINTER")
        """,
    )


def test_malformed_packed_calls_are_refused(roots):
    root = roots.make("root", "template", "faulty")
    run_on(
        root,
        """
        add = kernel(1, "template_add_f32")
        buf = malloc(1, 16)
        for packed in ([1], [1, 2, 0, buf, 0, 8], [0, 0, 1, 77], [0, 0, 0, 5], [0, 0, 1, 5, 1 << 40]):
            p = ffi.new("int64_t[]", packed)
            fails(lib.rt_launch(1, 0, add, p, len(packed), ffi.NULL, ffi.NULL, b"op"),
                  "RAL_ERROR_INVALID_ARGUMENT")
        t = tensor(buf, 4)
        msg = fails(launch(1, 12345, [t], [t, t]), "RAL_ERROR_INVALID_ARGUMENT")
        assert "kernel handle 12345 is not valid" in msg
        noop = kernel(0, "faulty_noop_kernel")
        msg = fails(launch(1, noop, [t], [t, t]), "RAL_ERROR_INVALID_ARGUMENT")
        assert "belongs to plugin [faulty]" in msg, msg
        assert lib.rt_launch_count(1) == 0
        assert kernel(1, "template_add_f32") == add  # same symbol => same handle
        """,
    )


def test_template_kernels_compute(template_root):
    run_on(
        template_root,
        """
        add, mul = kernel(0, "template_add_f32"), kernel(0, "template_mul_f32")
        x, y, out = malloc(0, 16), malloc(0, 16), malloc(0, 16)
        h2d(0, x, floats32(1, 2, 3, 4))
        h2d(0, y, floats32(10, 20, 30, 40))
        ok(launch(0, add, [tensor(out, 4)], [tensor(x, 4), tensor(y, 4)], [[lib.RAL_SCALAR_INT, 2]]))
        assert unfloats32(d2h(0, out, 16)) == [21, 42, 63, 84]
        ok(launch(0, add, [tensor(out, 4)], [tensor(x, 4), tensor(y, 4)],
                  [[lib.RAL_SCALAR_FLOAT, 0]], floats=[0.5]))
        assert unfloats32(d2h(0, out, 16)) == [6, 12, 18, 24]
        ok(launch(0, mul, [tensor(out, 2)], [tensor(x, 2, offset=8), tensor(y, 2)], op="aten::mul.Tensor"))
        assert unfloats32(d2h(0, out, 8)) == [30, 80]
        msg = fails(launch(0, mul, [tensor(out, 2)], [tensor(x, 2, stride=2), tensor(y, 2)],
                           op="aten::mul.Tensor"), "RAL_ERROR_UNSUPPORTED")
        assert msg.startswith("RAL_ERROR_UNSUPPORTED: [template] aten::mul.Tensor (kernel "
                              "template_mul_f32): aten::mul.Tensor (template_mul_f32): tensor 1"), msg
        handle = ffi.new("int64_t*")
        msg = fails(lib.rt_kernel_lookup(0, b"nope", handle), "RAL_ERROR_UNSUPPORTED")
        assert msg == "RAL_ERROR_UNSUPPORTED: [template] get_kernel('nope') for device 0: no kernel named 'nope'"
        fails(lib.rt_kernel_compile(0, b"c", b"", b"", b"k", handle), "RAL_ERROR_UNSUPPORTED")
        host = ffi.new("uint64_t*")
        ok(lib.rt_host_address(0, x, 4, 4, host))
        assert host[0] == x + 4 and ffi.cast("float*", host[0])[0] == 2.0
        """,
    )


def test_synchronous_kernel_error_names_plugin_op_and_message(faulty_root):
    run_on(
        faulty_root,
        """
        bad = kernel(0, "faulty_sync_kernel")
        buf = malloc(0, 16)
        msg = fails(launch(0, bad, [tensor(buf, 4)], []), "RAL_ERROR_KERNEL_FAILED")
        assert msg == ("RAL_ERROR_KERNEL_FAILED: [faulty] aten::add.Tensor "
                       "(kernel faulty_sync_kernel): injected failure"), msg
        ok(lib.rt_stream_synchronize(0, 0))
        """,
    )


def test_asynchronous_kernel_error_surfaces_at_sync(faulty_root):
    run_on(
        faulty_root,
        """
        bad = kernel(0, "faulty_kernel")
        buf = malloc(0, 16)
        ok(launch(0, bad, [tensor(buf, 4)], []))
        msg = fails(lib.rt_stream_synchronize(0, 0), "RAL_ERROR_KERNEL_FAILED")
        assert msg == ("RAL_ERROR_KERNEL_FAILED: [faulty] aten::add.Tensor "
                       "(kernel faulty_kernel): injected failure"), msg
        ok(lib.rt_stream_synchronize(0, 0))
        # An internal drain (empty_cache) keeps the error for the next user sync.
        spare = malloc(0, 64)
        ok(lib.rt_free(0, spare))
        ok(launch(0, bad, [tensor(buf, 4)], [], op="aten::mul.Tensor"))
        ok(lib.rt_empty_cache(0))
        msg = fails(lib.rt_device_synchronize(0), "RAL_ERROR_KERNEL_FAILED")
        assert "aten::mul.Tensor (kernel faulty_kernel): injected failure" in msg, msg
        ok(lib.rt_device_synchronize(0))
        # d2h with sync=1 is a sync point too.
        ok(launch(0, bad, [tensor(buf, 4)], []))
        fails(lib.rt_copy_d2h(0, 0, ffi.new("char[4]"), buf, 0, 4, 1), "RAL_ERROR_KERNEL_FAILED")
        """,
    )


def test_copies_within_and_across_devices(roots):
    root = roots.make("root", "named", "template")
    run_on(
        root,
        """
        # Both plugins read RAL_TEMPLATE_DEVICE_COUNT: named:0,1 then template:0,1.
        assert lib.rt_device_count() == 4
        data = bytes(range(256)) * 4
        a, b = malloc(2, 1024), malloc(2, 1024)
        h2d(2, a, data)
        ok(lib.rt_copy_d2d(2, b, 100, 2, a, 0, 512, 0))
        assert d2h(2, b, 512, offset=100) == data[:512]
        c = malloc(3, 1024)  # same plugin, other device
        ok(lib.rt_copy_d2d(3, c, 0, 2, a, 0, 1024, 0))
        assert d2h(3, c, 1024) == data
        d = malloc(0, 1024)  # other plugin
        ok(lib.rt_copy_d2d(0, d, 24, 3, c, 0, 1000, 0))
        assert d2h(0, d, 1000, offset=24) == data[:1000]
        ok(lib.rt_memset(0, 0, d, 0, 0xAB, 24))
        assert d2h(0, d, 24) == b"\\xab" * 24
        fails(lib.rt_copy_d2d(0, d, 1000, 3, c, 0, 100, 0), "RAL_ERROR_INVALID_POINTER")
        """,
        {"RAL_TEMPLATE_DEVICE_COUNT": "2"},
    )


def test_streams_and_events(template_root):
    run_on(
        template_root,
        """
        import time
        sid, start, end = ffi.new("int32_t*"), ffi.new("int32_t*"), ffi.new("int32_t*")
        ok(lib.rt_stream_create(0, sid))
        assert sid[0] == 1
        ok(lib.rt_event_create(0, start))
        ok(lib.rt_event_create(0, end))
        assert (start[0], end[0]) == (1, 2)
        ok(lib.rt_event_record(0, start[0], sid[0]))
        time.sleep(0.02)
        ok(lib.rt_event_record(0, end[0], sid[0]))
        ok(lib.rt_stream_wait_event(0, 0, end[0]))
        ok(lib.rt_event_synchronize(0, end[0]))
        ok(lib.rt_event_query(0, end[0]))
        ms = ffi.new("float*")
        ok(lib.rt_event_elapsed_ms(0, start[0], end[0], ms))
        assert 15 <= ms[0] < 1000, ms[0]
        ok(lib.rt_stream_query(0, sid[0]))
        ok(lib.rt_device_synchronize(0))
        ok(lib.rt_event_destroy(0, start[0]))
        fails(lib.rt_event_query(0, start[0]), "RAL_ERROR_INVALID_ARGUMENT")
        ok(lib.rt_event_create(0, start))
        assert start[0] == 1  # ids are reused
        ok(lib.rt_stream_destroy(0, sid[0]))
        fails(lib.rt_stream_synchronize(0, sid[0]), "RAL_ERROR_INVALID_ARGUMENT")
        fails(lib.rt_stream_destroy(0, 0), "RAL_ERROR_INVALID_ARGUMENT")
        fails(lib.rt_stream_synchronize(5, 0), "RAL_ERROR_INVALID_ARGUMENT")
        """,
    )


def test_many_args_and_threads(faulty_root):
    run_on(
        faulty_root,
        """
        import threading
        noop = kernel(0, "faulty_noop_kernel")
        buf = malloc(0, 64)
        n = 70  # more than the on-stack descriptor arrays hold
        ok(launch(0, noop, [tensor(buf, 16)] * n, [], [[lib.RAL_SCALAR_INT_LIST, 2, 3, 4]] * n))
        ok(lib.rt_stream_synchronize(0, 0))
        errors = []

        def worker(seed):
            try:
                for i in range(2000):
                    p = malloc(0, 64 * (1 + (seed + i) % 7))
                    ok(launch(0, noop, [tensor(p, 16)], []))
                    ok(lib.rt_free(0, p))
            except AssertionError as exc:
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        s = stats(0)
        assert s.num_allocs == s.num_frees + 1 and s.num_live_blocks == 1
        assert s.allocated_bytes == 64
        """,
    )
