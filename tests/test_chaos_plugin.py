"""A plugin cannot crash the runtime with bad answers.

The chaos test plugin (tests/plugins/chaos.c) answers garbage from whichever entries
RAL_CHAOS names. Each case runs a fixed workload on its device in a fresh process (device
records, malloc, copies, a kernel, events, streams, synchronize, empty_cache) next to a
healthy template plugin, and checks: the process survives, every failure is a runtime error
that names the chaos plugin and the entry, or the plugin is marked FAILED with a reason
naming the entry, and the template device still adds correctly afterwards. Under ASan and
UBSan (.ci/sanitizers.sh) the same cases also prove there was no memory error.

A hypothesis test draws combinations of faults; CI runs a bounded sample, -m slow many more.
"""

import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))

from plugins.harness import run_on  # noqa: E402

from plugins import fixtures  # noqa: E402

plugin_cache = fixtures.plugin_cache
chaos_root = fixtures.chaos_root

# The workload. Every runtime call goes through call(), which records the failures.
WORKLOAD = """
import math
failures = []

def call(what, status):
    if status != 0:
        failures.append((what, status, err()))
    return status

recs = plugins()
chaos = next(p for p in recs if p["dir"].endswith("/chaos"))
print("STATUS", chaos["status"], chaos["reason"][:2000])
by_dir = {p["dir"]: i for i, p in enumerate(recs)}
chaos_index = by_dir[chaos["dir"]]
devs = [i for i in range(lib.rt_device_count()) if device(i).plugin == chaos_index]
for d in devs:
    rec = device(d)  # keep the record alive: info points into it
    info = rec.info
    assert len(ffi.string(info.name)) < 128 and info.max_rank <= 16
    assert info.dtype_mask < (1 << lib.RAL_DTYPE_COUNT) and info.flags < 16
    a, out = ffi.new("uint64_t*"), ffi.new("uint64_t*")
    if call("malloc", lib.rt_malloc(d, 16, 0, a)) == 0:
        if call("malloc", lib.rt_malloc(d, 16, 0, out)) == 0:
            call("h2d", lib.rt_copy_h2d(d, 0, a[0], 0, ffi.from_buffer(floats32(1, 2, 3, 4)), 16))
            h = ffi.new("int64_t*")
            if call("lookup", lib.rt_kernel_lookup(d, b"chaos_add", h)) == 0:
                call("launch", launch(d, h[0], [tensor(out[0], 4)], [tensor(a[0], 4), tensor(a[0], 4)]))
            buf = bytearray(16)
            if call("d2h", lib.rt_copy_d2h(d, 0, ffi.from_buffer(buf), out[0], 0, 16, 1)) == 0:
                print("RESULT", unfloats32(bytes(buf)))
            call("free", lib.rt_free(d, out[0]))
        call("free", lib.rt_free(d, a[0]))
    big = ffi.new("uint64_t*")
    if call("malloc", lib.rt_malloc(d, 3 << 20, 0, big)) == 0:
        call("free", lib.rt_free(d, big[0]))
    ev = ffi.new("int32_t[2]")
    if call("event_create", lib.rt_event_create(d, ev)) == 0:
        if call("event_create", lib.rt_event_create(d, ev + 1)) == 0:
            call("event_record", lib.rt_event_record(d, ev[0], 0))
            call("event_record", lib.rt_event_record(d, ev[1], 0))
            call("event_synchronize", lib.rt_event_synchronize(d, ev[1]))
            call("event_query", lib.rt_event_query(d, ev[0]))
            ms = ffi.new("float*")
            if call("event_elapsed_ms", lib.rt_event_elapsed_ms(d, ev[0], ev[1], ms)) == 0:
                assert math.isfinite(ms[0]), ms[0]
            lib.rt_event_destroy(d, ev[1])
        lib.rt_event_destroy(d, ev[0])
    s = ffi.new("int32_t*")
    if call("stream_create", lib.rt_stream_create(d, s)) == 0:
        call("stream_query", lib.rt_stream_query(d, s[0]))
        call("stream_synchronize", lib.rt_stream_synchronize(d, s[0]))
        lib.rt_stream_destroy(d, s[0])
    call("device_synchronize", lib.rt_device_synchronize(d))
    call("empty_cache", lib.rt_empty_cache(d))
for what, status, msg in failures:
    print("FAILURE", what, status, msg[:1500].replace(chr(10), " "))
    assert msg.startswith("RAL_ERROR_"), msg[:200]
    assert status == getattr(lib, msg.split(":")[0], None), (status, msg[:200])

# Another plugin's device keeps working.
tpl = next(i for i in range(lib.rt_device_count()) if plugins()[device(i).plugin]["name"] == "template")
x, y = malloc(tpl, 8), malloc(tpl, 8)
h2d(tpl, x, floats32(1.5, -2))
ok(launch(tpl, kernel(tpl, "template_add_f32"), [tensor(y, 2)], [tensor(x, 2), tensor(x, 2)]))
assert unfloats32(d2h(tpl, y, 8)) == [3.0, -4.0]
print("SURVIVED")
"""

# Faults that stop the plugin from loading, and what its record then says.
LOAD_FAULTS = {
    "init_status": ("FAILED", "init() failed: RAL_ERROR_UNKNOWN (1234)"),
    "count_negative": ("FAILED", "device_count() returned status 0 with count -5"),
    "count_huge": ("FAILED", f"device_count() returned status 0 with count {1 << 30}"),
    "count_status": ("FAILED", "device_count() returned status -9"),
    "info_status": ("FAILED", "[chaos] device_info(0)"),
    "info_overflow": ("FAILED", "[chaos] device_info(0) wrote past the"),
}
# Faults met while the device works: (the workload step that fails, text its message holds).
RUN_FAULTS = {
    "malloc_null": ("malloc", "[chaos] malloc(512 bytes) on device 0 returned RAL_OK with a NULL pointer"),
    "malloc_misaligned": ("malloc", "[chaos] malloc(512 bytes) on device 0 returned 0x"),
    "malloc_status": (
        "malloc",
        "[chaos] malloc(512 bytes) on device 0 returned a status outside the enum (status 4242",
    ),
    "malloc_same": ("malloc", "[chaos] malloc(512 bytes) on device 0 returned a pointer the pool already holds"),
    "stream_create": ("stream_create", "[chaos] stream_create on device"),
    "sync_status": ("stream_synchronize", "[chaos] stream_synchronize(stream 1) on device 0"),
    "query_garbage": ("stream_query", "[chaos] stream_query("),
    "event_nan": ("event_elapsed_ms", "[chaos] event_elapsed_ms(event 1, event 2)"),
    "kernel_status": ("launch", "[chaos] aten::add.Tensor (kernel chaos_add)"),
    "launch_status": ("launch", "(plugin returned invalid status 12345)"),
    "get_kernel_null": ("lookup", "[chaos] get_kernel('chaos_add')"),
}
# Faults the runtime absorbs: the workload runs through and adds correctly.
SILENT_FAULTS = ("info_garbage", "name_overlong", "last_error_null", "last_error_long", "free_status")
# Drawn by the fuzz test (the hangs have their own test file, test_hang_timeout.py).
FUZZ_FAULTS = sorted([*LOAD_FAULTS, *RUN_FAULTS, *SILENT_FAULTS, "kernel_overrun"])


def run_chaos(root, faults, **env):
    """Run the workload with RAL_CHAOS=faults; (status line, failures, result, stdout)."""
    out = run_on(root, WORKLOAD, {"RAL_CHAOS": ",".join(faults), **env})
    assert out.rstrip().endswith("SURVIVED"), out
    lines = out.splitlines()
    status = next(line for line in lines if line.startswith("STATUS"))
    failures = [line for line in lines if line.startswith("FAILURE")]
    result = [line for line in lines if line.startswith("RESULT")]
    return status, failures, result, out


def test_without_faults_the_chaos_plugin_is_a_working_plugin(chaos_root):
    status, failures, result, out = run_chaos(chaos_root, [])
    assert status.startswith("STATUS 0 ") and not failures, out
    assert result == ["RESULT [2.0, 4.0, 6.0, 8.0]"], out


def test_unknown_fault_name_is_refused(chaos_root):
    status, _, _, out = run_chaos(chaos_root, ["no_such_fault"])
    assert "RAL_CHAOS names an unknown fault" in status, out


@pytest.mark.parametrize("fault", sorted(LOAD_FAULTS))
def test_load_time_garbage_marks_the_plugin_failed(chaos_root, fault):
    from torch_fl._native import lib

    name, reason = LOAD_FAULTS[fault]
    status, failures, result, out = run_chaos(chaos_root, [fault])
    assert status.startswith(f"STATUS {getattr(lib, 'RT_PLUGIN_' + name)} "), out
    assert reason in status, out
    assert not failures and not result  # no device: nothing ran


@pytest.mark.parametrize("fault", sorted(RUN_FAULTS))
def test_garbage_at_run_time_is_an_error_naming_plugin_and_entry(chaos_root, fault):
    step, text = RUN_FAULTS[fault]
    status, failures, _, out = run_chaos(chaos_root, [fault])
    assert status.startswith("STATUS 0 "), out
    assert any(f.startswith(f"FAILURE {step} ") and text in f for f in failures), out


@pytest.mark.parametrize("fault", SILENT_FAULTS)
def test_garbage_the_runtime_absorbs(chaos_root, fault):
    status, failures, result, out = run_chaos(chaos_root, [fault])
    assert status.startswith("STATUS 0 ") and result == ["RESULT [2.0, 4.0, 6.0, 8.0]"], out
    if fault == "free_status":
        assert not failures, out  # a free's status has no caller to report to


def test_garbage_descriptor_is_made_sane(chaos_root):
    out = run_on(
        chaos_root,
        """
        d = next(i for i in range(lib.rt_device_count()) if plugins()[device(i).plugin]["name"] == "chaos")
        rec = device(d)  # keep the record alive: info points into it
        info = rec.info
        print(ffi.string(info.name), info.max_rank, hex(info.dtype_mask), hex(info.flags), info.struct_size)
        assert ffi.string(info.name) == b"N" * 127 and ffi.string(info.driver_version) == b"D" * 63
        assert info.max_rank == lib.RAL_MAX_RANK
        assert info.dtype_mask == (1 << lib.RAL_DTYPE_COUNT) - 1 and info.flags == 15
        assert info.struct_size == ffi.sizeof("ral_device_info")
        """,
        {"RAL_CHAOS": "info_garbage"},
    )
    assert out


def test_overlong_names_and_messages_are_cut(chaos_root):
    out = run_on(
        chaos_root,
        """
        rec = next(p for p in plugins() if p["dir"].endswith("/chaos"))
        assert rec["name"] == "L" * 63, rec["name"]
        d = next(i for i in range(lib.rt_device_count()) if device(i).plugin == plugins().index(rec))
        assert lib.rt_stream_synchronize(d, 0) == lib.RAL_ERROR_INTERNAL
        msg = err()
        assert msg.startswith("RAL_ERROR_INTERNAL: [" + "L" * 63 + "] ") and len(msg) < 2048, msg[:100]
        assert msg.endswith("(plugin returned invalid status 31337)"), msg[-100:]
        """,
        {"RAL_CHAOS": "name_overlong,last_error_long,sync_status"},
    )
    assert out is not None


def test_kernel_writing_past_its_output_is_caught_in_checked_mode(chaos_root):
    _, failures, _, out = run_chaos(chaos_root, ["kernel_overrun"], TORCH_FL_CHECKED="1")
    wrote_past = [f for f in failures if "wrote past the end of tensor 0" in f]
    assert wrote_past and wrote_past[0].startswith("FAILURE launch 5 RAL_ERROR_KERNEL_FAILED: [chaos]"), out
    assert "aten::add.Tensor (kernel chaos_add)" in wrote_past[0] and "guard byte +0 changed" in wrote_past[0]


def test_checked_mode_passes_a_correct_kernel(chaos_root):
    status, failures, result, out = run_chaos(chaos_root, [], TORCH_FL_CHECKED="1")
    assert not failures and result == ["RESULT [2.0, 4.0, 6.0, 8.0]"], out


FUZZ_EXAMPLES = int(os.environ.get("TORCH_FL_CHAOS_EXAMPLES", "6"))


def _fuzz(chaos_root, faults):
    status, failures, result, out = run_chaos(chaos_root, sorted(faults))
    if not status.startswith("STATUS 0 "):
        # Not loaded: the reason names the entry that answered garbage.
        assert any(entry in status for entry in ("init()", "device_count()", "device_info(0)")), out
        assert not failures and not result, out
        return
    for f in failures:
        # Every failure names the plugin: its name, or the cut overlong one.
        assert "[chaos]" in f or "[LLLL" in f or "([chaos])" in f, f


@settings(max_examples=FUZZ_EXAMPLES, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(faults=st.sets(st.sampled_from(FUZZ_FAULTS), min_size=1, max_size=4))
def test_fuzz_fault_combinations(chaos_root, faults):
    _fuzz(chaos_root, faults)


@pytest.mark.slow
@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(faults=st.sets(st.sampled_from(FUZZ_FAULTS), min_size=1, max_size=6))
def test_fuzz_fault_combinations_many(chaos_root, faults):
    _fuzz(chaos_root, faults)
