"""Lazy initialisation and crash containment: `import torch` runs no vendor code, a CPU-only
script is immune to a plugin that crashes, the tools probe plugins in a child process and
report CRASHED, the first device use names the plugin that killed a process, a missing
device names the plugins that failed, and the fork rule (torch.ral.init, is_initialized,
_is_in_bad_fork). Every case runs in a fresh interpreter: initialisation is once per process.
Test plugins come from tests/plugins/crashing.c (built by tests/plugins/build.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import REPO, private_cache_home, run_python
from plugins.build import build_test_plugin

from torch_fl.tools.output import OK, PROBLEM

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]
each_device = pytest.mark.parametrize("dev", DEVICES)
CRASHES = ("crash_ctor", "crash_init", "crash_count")


def _env(tmp_path: Path, root: Path | None = None, **extra) -> dict:
    """A clean environment: only `root` (if any) besides the built-in plugins, a private cache."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_FL_", "RAL_"))}
    # Build caches (device guard, jit kernels) stay shared: rebuilding them per test only costs
    # time. The crash markers (cache/torch_fl/init) are private to the test.
    env["XDG_CACHE_HOME"] = private_cache_home(tmp_path / "cache", share=("guard", "host-jit", "opencl"))
    env["TORCH_FL_SYSTEM_PLUGIN_DIR"] = "/nonexistent/torch_fl/plugins"
    env["TORCH_FL_TEST_PLUGIN_LOG"] = str(tmp_path / "plugin.log")
    if root is not None:
        env["TORCH_FL_PLUGIN_PATH"] = str(root)
    env.update(extra)
    return env


def python(code: str, env: dict, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run code in a fresh interpreter with exactly `env` (plus this checkout on the path)."""
    return run_python(code, env=env, timeout=timeout)


@pytest.fixture(scope="module")
def crash_root(tmp_path_factory) -> Path:
    """A root with the witness plugin (logs when its code runs) and the three crashing plugins,
    each also alone in a root of its own (root/<case>/<case>)."""
    root = tmp_path_factory.mktemp("crashing")
    build_test_plugin("witness", root / "witness")
    for case in CRASHES:
        build_test_plugin(case, root / case)
    return root


def _log(tmp_path: Path) -> list[str]:
    path = tmp_path / "plugin.log"
    return path.read_text().split() if path.exists() else []


MAPS = "[l.split()[-1] for l in open('/proc/self/maps') if 'libral_' in l or 'libwitness' in l]"


def test_import_torch_runs_no_vendor_code(tmp_path, crash_root):
    code = f"""
        import json, torch, torch_fl
        torch.manual_seed(0)  # seeds every device, but must not load a plugin for it
        cpu = (torch.randn(3) * 2).sum().item()
        from torch._dynamo.device_interface import get_interface_for_device
        try:
            get_interface_for_device("ral")  # compile's device interface (once it is registered at import)
        except NotImplementedError:
            pass
        before = dict(init=torch.ral.is_initialized(), bad_fork=torch.ral._is_in_bad_fork(), maps={MAPS})
        n = torch.ral.device_count()
        after = dict(init=torch.ral.is_initialized(), maps={MAPS}, n=n)
        torch.ones(1, device="ral")
        used = torch.ral.is_initialized()
        print(json.dumps(dict(before=before, after=after, used=used, cpu=cpu)))
    """
    r = python(code, _env(tmp_path, crash_root / "witness"))
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout.strip().splitlines()[-1])
    torch.manual_seed(0)
    assert doc["cpu"] == pytest.approx((torch.randn(3) * 2).sum().item(), rel=1e-6)
    assert doc["before"] == {"init": False, "bad_fork": False, "maps": []}
    assert doc["after"]["init"] is False  # counting loads the plugins but, as on CUDA, is no use
    assert doc["used"] is True
    assert any(p.endswith("libral_host.so") for p in doc["after"]["maps"])
    assert any(p.endswith("libwitness.so") for p in doc["after"]["maps"])
    assert doc["after"]["n"] >= 3  # host, opencl (when present) and the witness's device
    pid_events = _log(tmp_path)
    assert pid_events[0::2] == ["constructor", "init"]  # vendor code ran once, at device_count()


def test_import_torch_fl_first_runs_no_vendor_code(tmp_path, crash_root):
    r = python(
        f"import torch_fl, torch; torch_fl.ral_mode; print(torch.ral.is_initialized(), {MAPS})",
        _env(tmp_path, crash_root / "witness"),
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split("\n")[-2] == "False []"
    assert _log(tmp_path) == []


def test_explicit_init_and_torch_fl_queries_load_plugins(tmp_path, crash_root):
    code = """
        import torch, torch_fl
        torch.ral.init()
        print(torch.ral.is_initialized(), [p.record.name for p in torch_fl.plugins()][-1])
    """
    r = python(code, _env(tmp_path, crash_root / "witness"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["True", "witness"]
    assert _log(tmp_path)[0::2] == ["constructor", "init"]


@pytest.mark.parametrize("how", ["torch.ral.set_device(1)", "torch.accelerator.set_device_index(1)"])
def test_is_initialized_means_a_device_was_used_as_on_cuda(tmp_path, how):
    # DeviceMesh (FSDP2, tensor parallel) sets each rank's device only while the backend says
    # it is not initialised; counting devices first must leave that so, as on CUDA.
    code = f"""
        import torch
        n = torch.accelerator.device_count()
        counted = torch.ral.is_initialized()
        {how}
        print(n >= 2, counted, torch.ral.is_initialized(), torch.ral.current_device(), torch.ones(1, device="ral").device)
    """
    r = python(code, _env(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split("\n")[-2] == "True False True 1 ral:1"


@pytest.mark.parametrize("case", CRASHES)
def test_cpu_only_script_is_immune_to_a_crashing_plugin(tmp_path, crash_root, case):
    code = """
        import torch
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.randn(8, 4)
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        print(torch.randn(3).sum().item(), model(x).pow(2).mean().item(), torch.ral.is_initialized())
    """
    r = python(code, _env(tmp_path, crash_root / case))
    assert r.returncode == 0, r.stderr[-3000:]
    got = [float(v) for v in r.stdout.split()[:2]]
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 4)
    model(x).pow(2).mean().backward()
    opt.step()
    expected = [torch.randn(3).sum().item(), model(x).pow(2).mean().item()]
    assert got == pytest.approx(expected, rel=1e-6, abs=1e-7)
    assert r.stdout.split()[2] == "False"
    events = _log(tmp_path)
    assert "init" not in events and "constructor" not in events


@pytest.mark.parametrize("case", CRASHES)
def test_first_device_use_names_the_crashing_plugin(tmp_path, crash_root, case):
    plugin_dir = crash_root / case / case
    env = _env(tmp_path, crash_root / case)
    r = python("import torch\ntorch.ones(2, device='ral:0')\nprint('survived')", env)
    assert r.returncode == -11 and "survived" not in r.stdout
    assert f"torch_fl: SIGSEGV in the ral plugin at {plugin_dir} while it loaded" in r.stderr
    assert f"TORCH_FL_PLUGIN_SKIP={plugin_dir}" in r.stderr
    markers = list((tmp_path / "cache" / "torch_fl" / "init").glob("*.marker"))
    assert [m.read_text() for m in markers] == [str(plugin_dir)]
    # The next run names it (once) and can skip it; the marker becomes last-crash.json.
    env["TORCH_FL_PLUGIN_SKIP"] = str(plugin_dir)
    r = python("import torch\nprint((torch.ones(2, device='ral:0') * 2).cpu().tolist())", env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split("\n")[-2] == "[2.0, 2.0]"
    assert f"died while loading the ral plugin at {plugin_dir}" in r.stderr
    assert not list((tmp_path / "cache" / "torch_fl" / "init").glob("*.marker"))
    last = json.loads((tmp_path / "cache" / "torch_fl" / "init" / "last-crash.json").read_text())
    assert last["plugin_dir"] == str(plugin_dir)
    r = python("import torch\ntorch.ral.init()", env)  # told once only
    assert r.returncode == 0 and "died while loading" not in r.stderr


@each_device
def test_skipped_plugin_leaves_every_device_working(tmp_path, crash_root, dev):
    env = _env(tmp_path, crash_root / "crash_init", TORCH_FL_PLUGIN_SKIP=str(crash_root / "crash_init" / "crash_init"))
    r = python(f"import torch\nprint((torch.arange(4.0, device='{dev}') * 3).cpu().tolist())", env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split("\n")[-2] == str((torch.arange(4.0) * 3).tolist())


def test_init_is_once_and_thread_safe(tmp_path, crash_root):
    code = """
        import threading, torch
        counts, errors = [], []
        def use():
            try:
                counts.append(torch.ral.device_count())
            except Exception as exc:
                errors.append(exc)
        threads = [threading.Thread(target=use) for _ in range(8)]
        before = torch.ral.is_initialized()
        for t in threads: t.start()
        for t in threads: t.join()
        print(before, len(set(counts)), len(counts), errors, torch.ral.is_initialized())
    """
    r = python(code, _env(tmp_path, crash_root / "witness"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split("\n")[-2] == "False 1 8 [] False"  # the threads raced to initialise
    assert _log(tmp_path)[0::2] == ["constructor", "init"]  # one init for eight threads


def test_failed_init_raises_the_same_error_again(tmp_path):
    code = """
        import torch
        msgs = []
        for _ in range(2):
            try:
                torch.ral.device_count()
            except Exception as exc:
                msgs.append((type(exc).__name__, str(exc)))
        print(msgs[0] == msgs[1], len(msgs), msgs[0][0], torch.ral.is_initialized(), torch.ones(2).sum().item())
        print(msgs[0][1])
    """
    r = python(code, _env(tmp_path, TORCH_FL_VISIBLE_DEVICES="not-a-number"))
    assert r.returncode == 0, r.stderr[-3000:]
    first, message = r.stdout.strip().splitlines()[-2:]
    assert first.split() == ["True", "2", "InvalidArgumentError", "False", "2.0"]
    assert "TORCH_FL_VISIBLE_DEVICES" in message


@each_device
def test_child_forked_before_init_may_use_ral(tmp_path, dev):
    code = f"""
        import os, torch
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                msg = "%s %s %s" % (torch.ral._is_in_bad_fork(), (torch.arange(3.0, device="{dev}") * 2).cpu().tolist(),
                                     torch.ral.is_initialized())
            except Exception as exc:
                msg = repr(exc)
            os.write(w, msg.encode())
            os._exit(0)
        os.close(w)
        _, status = os.waitpid(pid, 0)
        child = os.read(r, 4096).decode()
        print(child)
        print(status, torch.ral.is_initialized(), (torch.ones(2, device="{dev}") + 1).cpu().tolist())
    """
    r = python(code, _env(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    child, parent = r.stdout.strip().splitlines()[-2:]
    assert child == "False [0.0, 2.0, 4.0] True"
    assert parent == "0 False [2.0, 2.0]"  # the parent had not initialised when it forked


@each_device
def test_child_forked_after_init_gets_a_clear_error(tmp_path, dev):
    code = f"""
        import os, torch
        from torch_fl.device.fork import ForkedChildError
        x = torch.ones(2, device="{dev}")
        n = torch.ral.device_count()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            out = [str(torch.ral._is_in_bad_fork()), str(torch.ral.is_initialized()), str(torch.ral.device_count() == n),
                   str(torch.arange(3.0).sum().item())]
            for what in (lambda: torch.ones(2, device="{dev}"), lambda: x + 1, torch.ral.init,
                         lambda: torch.ral.synchronize("{dev}")):
                try:
                    what()
                    out.append("no error")
                except ForkedChildError as exc:
                    out.append(str(exc).split(".")[0])
            os.write(w, "|".join(out).encode())
            os._exit(0)
        os.close(w)
        os.waitpid(pid, 0)
        print(os.read(r, 8192).decode())
        print(torch.ral._is_in_bad_fork(), (x * 3).cpu().tolist())
    """
    r = python(code, _env(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    child, parent = r.stdout.strip().splitlines()[-2:]
    fields = child.split("|")
    assert fields[:4] == ["True", "False", "True", "3.0"]
    assert len(fields) == 8
    for err in fields[4:]:
        assert err.startswith("Cannot re-initialize ral in forked subprocess"), fields
    assert parent == "False [3.0, 3.0]"


def test_missing_device_names_the_plugins_that_failed(tmp_path):
    root = tmp_path / "root"
    plugin = build_test_plugin("withdep", root, source="linked_dep")
    code = """
        import torch
        n = torch.ral.device_count()
        try:
            torch.ones(2, device=f"ral:{n + 1}")
        except RuntimeError as exc:
            print(exc)
        print((torch.ones(2, device="ral:0") * 2).cpu().tolist())
    """
    r = python(code, _env(tmp_path, root))
    assert r.returncode == 0, r.stderr[-3000:]
    message, still = r.stdout.strip().splitlines()[-2:]
    assert "does not exist: " in message and "ral device(s) are visible (host: 1" in message, message
    if len(DEVICES) == 2:
        assert "opencl: 1" in message
    assert f"plugin 'withdep' at {plugin} failed to load: MISSING_DEPS" in message
    assert "libfakedep.so" in message
    assert still == "[2.0, 2.0]"


# ---- the tools: each plugin is loaded in a child process ------------------------------


def ralctl(tmp_path: Path, env: dict, *args: str) -> tuple[int, str, str]:
    full = dict(env, PYTHONPATH=str(REPO) + os.pathsep + env.get("PYTHONPATH", ""))
    res = subprocess.run(
        [sys.executable, "-m", "torch_fl.tools.ralctl", *args],
        env=full,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    return res.returncode, res.stdout, res.stderr


@pytest.fixture(scope="module")
def mixed_root(tmp_path_factory, crash_root) -> Path:
    """Every crashing plugin beside a working one."""
    import shutil

    root = tmp_path_factory.mktemp("mixed")
    build_test_plugin("good", root, source="named")
    for case in CRASHES:
        shutil.copytree(crash_root / case / case, root / case)
    return root


def test_plugin_status_reports_crashed_plugins(tmp_path, mixed_root):
    code, out, err = ralctl(tmp_path, _env(tmp_path, mixed_root), "plugin-status", "--json")
    assert code == PROBLEM, err[-3000:]
    plugins = {p["name"]: p for p in json.loads(out)["plugins"]}
    assert plugins["good"]["status"] == "LOADED" and plugins["host"]["status"] == "LOADED"
    for case in CRASHES:
        assert plugins[case]["status"] == "CRASHED"
        assert "SIGSEGV" in plugins[case]["reason"] and str(mixed_root / case) in plugins[case]["reason"]
        assert plugins[case]["dir"] == str(mixed_root / case)
    # The table keeps its format; the user's cache gets no marker from the probe's crashes.
    code, out, _ = ralctl(tmp_path, _env(tmp_path, mixed_root), "plugin-status")
    assert code == PROBLEM and out.count("CRASHED") == 3 and "PLUGIN" in out
    assert not list((tmp_path / "cache").rglob("*.marker"))


@each_device
def test_list_devices_survives_crashing_plugins(tmp_path, mixed_root, dev):
    code, out, err = ralctl(tmp_path, _env(tmp_path, mixed_root), "list-devices", "--json")
    assert code == OK, err[-3000:]
    devices = {d["id"]: d for d in json.loads(out)["devices"]}
    assert devices[dev]["status"] == "READY"
    assert [d["plugin"] for d in devices.values()][-1] == "good"


def test_doctor_reports_crashed_plugins_and_past_crashes(tmp_path, crash_root, mixed_root):
    env = _env(tmp_path, mixed_root)
    # A user's process that died while loading crash_init leaves a marker the doctor reports.
    r = python("import torch\ntorch.ral.init()", _env(tmp_path, crash_root / "crash_init"))
    assert r.returncode == -11
    code, out, err = ralctl(tmp_path, env, "doctor", "--json", "--no-smoke")
    assert code == PROBLEM, err[-3000:]
    checks = {c["check"]: c for c in json.loads(out)["checks"]}
    for case in CRASHES:
        finding = checks[f"plugin {case}"]
        assert finding["level"] == "problem" and "CRASHED" in finding["detail"] and "SIGSEGV" in finding["detail"]
        assert f"TORCH_FL_PLUGIN_SKIP={mixed_root / case}" in finding["fix"]
    assert checks["plugin good"]["level"] == "ok"
    past = checks[f"crash while loading {crash_root / 'crash_init' / 'crash_init'}"]
    assert past["level"] == "warning" and "died while loading" in past["detail"]


@pytest.fixture(scope="module")
def broken_package(tmp_path_factory) -> Path:
    """A copy of torch_fl whose native runtime is missing, as after a failed or mismatched build."""
    import shutil

    root = tmp_path_factory.mktemp("broken")
    shutil.copytree(
        REPO / "torch_fl", root / "torch_fl", ignore=shutil.ignore_patterns("_plugins", "_ral*.so", "__pycache__")
    )
    return root


def test_a_torch_fl_that_cannot_load_does_not_break_import_torch(tmp_path, broken_package):
    env = _env(tmp_path, PYTHONPATH=str(broken_package))
    code = "import torch; print(torch.arange(4.0).mul(3).sum().item())"
    r = subprocess.run([sys.executable, "-c", code], env=env, cwd=broken_package, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["18.0"]
    assert "torch_fl could not load, so the 'ral' device is unavailable" in r.stderr
    assert "_ral" in r.stderr  # the warning carries the real cause

    # Asking for torch_fl's API raises the real error; strict mode lets autoload fail loudly.
    r = subprocess.run(
        [sys.executable, "-c", "import torch, torch_fl; torch_fl.ral_mode"],
        env=env,
        cwd=broken_package,
        capture_output=True,
        text=True,
    )
    assert r.returncode != 0 and "_ral" in r.stderr.splitlines()[-1], r.stderr[-3000:]
    strict = dict(env, TORCH_FL_AUTOLOAD_STRICT="1")
    r = subprocess.run([sys.executable, "-c", code], env=strict, cwd=broken_package, capture_output=True, text=True)
    assert r.returncode != 0 and "Failed to load the backend extension: ral" in r.stderr, r.stderr[-3000:]
