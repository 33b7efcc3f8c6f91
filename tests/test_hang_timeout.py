"""Timeouts at the plugin boundary: a wait that never returns (a stream that never completes,
a synchronize that never returns) fails with torch_fl.DeviceHangError after the hang timeout
(TORCH_FL_DEVICE_TIMEOUT, torch_fl.set_device_timeout) instead of hanging the program; the
device is marked lost and later uses fail clearly, while other devices keep working. Long but
finite work is not cut short. The hangs come from the chaos test plugin (tests/plugins/chaos.c)."""

import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from plugins.harness import REPO, clean_env, run_native, run_on  # noqa: E402

from plugins import fixtures  # noqa: E402

plugin_cache = fixtures.plugin_cache
chaos_root = fixtures.chaos_root


# Device 0 is the chaos plugin's (builtin order: by name), device 1 the template's.
LAUNCH = """
        import time
        a, out = malloc(0, 16), malloc(0, 16)
        h2d(0, a, floats32(1, 2, 3, 4))
        ok(launch(0, kernel(0, "chaos_add"), [tensor(out, 4)], [tensor(a, 4), tensor(a, 4)]))
        t0 = time.monotonic()
"""

OTHER_DEVICE_WORKS = """
        x, y = malloc(1, 8), malloc(1, 8)
        h2d(1, x, floats32(1.5, -2))
        ok(launch(1, kernel(1, "template_add_f32"), [tensor(y, 2)], [tensor(x, 2), tensor(x, 2)]))
        assert unfloats32(d2h(1, y, 8)) == [3.0, -4.0]
"""


def test_stream_that_never_completes_times_out_and_the_device_is_lost(chaos_root):
    run_on(
        chaos_root,
        LAUNCH
        + """
        msg = fails(lib.rt_stream_synchronize(0, 0), "RAL_ERROR_DEVICE_HANG")
        waited = time.monotonic() - t0
        assert 0.4 <= waited < 20, waited
        assert msg.startswith("RAL_ERROR_DEVICE_HANG: [chaos] stream_synchronize(stream 0) on device 0 "
                              "did not return within 0.5 s (TORCH_FL_DEVICE_TIMEOUT); the device is marked lost"), msg
        # Later uses of the device fail at once, naming the hang.
        t1 = time.monotonic()
        for status in (lib.rt_stream_synchronize(0, 0), lib.rt_device_synchronize(0),
                       lib.rt_malloc(0, 16, 0, ffi.new("uint64_t*")), lib.rt_empty_cache(0)):
            msg = fails(status, "RAL_ERROR_DEVICE_LOST")
            assert "device 0 ([chaos] Template device 0) is lost: [chaos] stream_synchronize" in msg, msg
        assert time.monotonic() - t1 < 5
        ok(lib.rt_free(0, a))  # frees stay accepted (the memory is simply never reused)
        assert device(0).present == 0
        """
        + OTHER_DEVICE_WORKS,
        {"RAL_CHAOS": "stream_hang", "TORCH_FL_DEVICE_TIMEOUT": "0.5"},
    )


def test_synchronous_copy_and_device_synchronize_time_out(chaos_root):
    run_on(
        chaos_root,
        LAUNCH
        + """
        buf = bytearray(16)
        msg = fails(lib.rt_copy_d2h(0, 0, ffi.from_buffer(buf), out, 0, 16, 1), "RAL_ERROR_DEVICE_HANG")
        assert "stream_synchronize(stream 0)" in msg, msg
        """
        + OTHER_DEVICE_WORKS,
        {"RAL_CHAOS": "stream_hang", "TORCH_FL_DEVICE_TIMEOUT": "0.3"},
    )
    run_on(
        chaos_root,
        LAUNCH + '        fails(lib.rt_device_synchronize(0), "RAL_ERROR_DEVICE_HANG")\n' + OTHER_DEVICE_WORKS,
        {"RAL_CHAOS": "stream_hang", "TORCH_FL_DEVICE_TIMEOUT": "0.3"},
    )


def test_event_that_never_completes_times_out(chaos_root):
    run_on(
        chaos_root,
        """
        ev = ffi.new("int32_t*")
        ok(lib.rt_event_create(0, ev))
        ok(lib.rt_event_record(0, ev[0], 0))
        msg = fails(lib.rt_event_synchronize(0, ev[0]), "RAL_ERROR_DEVICE_HANG")
        assert "[chaos] event_synchronize(event 1) on device 0 did not return within 0.3 s" in msg, msg
        fails(lib.rt_event_query(0, ev[0]), "RAL_ERROR_DEVICE_LOST")
        """
        + OTHER_DEVICE_WORKS,
        {"RAL_CHAOS": "event_hang", "TORCH_FL_DEVICE_TIMEOUT": "0.3"},
    )


def test_long_but_finite_work_is_not_cut_short(chaos_root):
    run_on(
        chaos_root,
        LAUNCH
        + """
        ok(lib.rt_stream_synchronize(0, 0))
        assert time.monotonic() - t0 >= 1.0
        assert unfloats32(d2h(0, out, 16)) == [2.0, 4.0, 6.0, 8.0]
        assert device(0).present == 1
        """,
        {"RAL_CHAOS": "stream_slow", "RAL_CHAOS_SLOW_S": "1.0", "TORCH_FL_DEVICE_TIMEOUT": "4"},
    )


def test_timeout_api_default_and_bad_values(chaos_root):
    run_on(
        chaos_root,
        """
        assert lib.rt_device_timeout() == 300.0
        fails(lib.rt_set_device_timeout(-1.0), "RAL_ERROR_INVALID_ARGUMENT")
        fails(lib.rt_set_device_timeout(float("nan")), "RAL_ERROR_INVALID_ARGUMENT")
        assert lib.rt_device_timeout() == 300.0
        ok(lib.rt_set_device_timeout(0.25))
        """
        + LAUNCH
        + """
        fails(lib.rt_stream_synchronize(0, 0), "RAL_ERROR_DEVICE_HANG")
        assert time.monotonic() - t0 < 20
        """,
        {"RAL_CHAOS": "stream_hang"},
    )
    bad = run_native(
        """
        msg = fails(lib.rt_init(b"/nonexistent"), "RAL_ERROR_INVALID_ARGUMENT")
        assert "TORCH_FL_DEVICE_TIMEOUT='soon' must be a number of seconds >= 0" in msg, msg
        """,
        {"TORCH_FL_DEVICE_TIMEOUT": "soon"},
    )
    assert bad is not None


def test_zero_timeout_waits_unwatched(chaos_root):
    """TORCH_FL_DEVICE_TIMEOUT=0 waits forever, as before: the slow stream is simply waited for."""
    run_on(
        chaos_root,
        LAUNCH + "        ok(lib.rt_stream_synchronize(0, 0))\n        assert time.monotonic() - t0 >= 0.5\n",
        {"RAL_CHAOS": "stream_slow", "RAL_CHAOS_SLOW_S": "0.5", "TORCH_FL_DEVICE_TIMEOUT": "0"},
    )


TORCH_CODE = """
import time, torch, torch_fl
dev = next(f"ral:{{p.devices[0]}}" for p in torch_fl.plugins() if p.record.name == "chaos")
torch_fl.set_device_timeout({timeout})
assert torch_fl.device_timeout() == {timeout}
x = torch.arange(4.0)
{body}
t0 = time.monotonic()
try:
    {wait}
except torch_fl.DeviceHangError as exc:
    assert isinstance(exc, torch_fl.DeviceLostError)
    assert exc.plugin == "chaos", exc.plugin
    print("HANG", round(time.monotonic() - t0, 1), exc)
else:
    raise SystemExit("no DeviceHangError")
try:
    torch.ones(2, device=dev)
except torch_fl.DeviceLostError as exc:
    assert not isinstance(exc, torch_fl.DeviceHangError)
    print("LOST", exc)
else:
    raise SystemExit("the lost device still took work")
# Other devices keep working, in both styles.
y = (x.to("ral:0") * 2 + 1).cpu()
assert torch.equal(y, x * 2 + 1), y
with torch_fl.ral_mode("ral:0"):
    z = torch.arange(4.0) * 2 + 1
assert torch.equal(z.cpu(), x * 2 + 1), z
print("OTHERS OK")
"""

STYLES = {
    "to": ("y = x.to(dev) + x.to(dev)", "y.cpu()"),
    "ral_mode": (
        "with torch_fl.ral_mode(dev):\n    y = torch.arange(4.0) + torch.arange(4.0)",
        "torch.ral.synchronize(dev)",
    ),
}


@pytest.mark.parametrize("style", sorted(STYLES))
def test_torch_raises_device_hang_error_and_other_devices_work(plugin_cache, tmp_path, style):
    root = tmp_path / "plugins"
    shutil.copytree(plugin_cache / "chaos", root / "chaos")
    body, wait = STYLES[style]
    code = TORCH_CODE.format(timeout=0.5, body=body, wait=wait)
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=clean_env({"PYTHONPATH": str(REPO), "TORCH_FL_PLUGIN_PATH": str(root), "RAL_CHAOS": "stream_hang"}),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    hang = next(line for line in out.stdout.splitlines() if line.startswith("HANG"))
    assert "RAL_ERROR_DEVICE_HANG: [chaos] stream_synchronize(stream 0)" in hang, out.stdout
    assert float(hang.split()[1]) < 20, hang
    assert "is lost: [chaos] stream_synchronize" in out.stdout and "OTHERS OK" in out.stdout, out.stdout


def test_the_hang_costs_no_more_than_the_timeout(chaos_root):
    """The whole process, including the wait that times out, ends in seconds: nothing else
    waits for the thread left inside the plugin (not even interpreter exit)."""
    t0 = time.monotonic()
    run_on(
        chaos_root,
        LAUNCH + '        fails(lib.rt_stream_synchronize(0, 0), "RAL_ERROR_DEVICE_HANG")\n',
        {"RAL_CHAOS": "stream_hang", "TORCH_FL_DEVICE_TIMEOUT": "0.2"},
    )
    assert time.monotonic() - t0 < 60


def test_a_forked_child_gets_its_own_waiter_threads(chaos_root):
    """After fork the parent's idle waiter threads do not exist in the child: a watched wait
    there must start its own instead of timing out in a queue nobody serves."""
    run_on(
        chaos_root,
        LAUNCH
        + """
        ok(lib.rt_stream_synchronize(0, 0))  # a real wait: leaves an idle waiter thread
        pid = os.fork()
        if pid == 0:
            try:
                ok(launch(0, kernel(0, "chaos_add"), [tensor(out, 4)], [tensor(a, 4), tensor(a, 4)]))
                ok(lib.rt_stream_synchronize(0, 0))
                code = 0
            except AssertionError as exc:
                print("CHILD", exc, flush=True)
                code = 1
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.WEXITSTATUS(status) == 0, "the child's wait failed"
        """,
        {"RAL_CHAOS": "stream_slow", "RAL_CHAOS_SLOW_S": "0.3", "TORCH_FL_DEVICE_TIMEOUT": "3"},
    )
