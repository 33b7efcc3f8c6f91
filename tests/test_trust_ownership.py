"""Trust boundaries on disk: plugin folders, manifests and libraries that someone other than
their owner may write (or that belong to another non-root user) are refused with status
INSECURE before any of their code runs; TORCH_FL_ALLOW_INSECURE_PLUGINS accepts them
explicitly. The host jit's and the OpenCL plugin's on-disk caches are not used when they
are not private; those fall back to a private temporary folder and warn once.

Tests run as root, so they hand files to another uid with os.chown."""

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from plugins.harness import PREAMBLE, REPO, clean_env, run_on  # noqa: E402

from plugins import fixtures  # noqa: E402
from torch_fl._native import builtin_plugin_dir  # noqa: E402

plugin_cache = fixtures.plugin_cache
roots = fixtures.roots

OTHER_UID = 54321  # a uid no account on the machine has
OTHER_GID = 54321

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="handing files to another uid needs root (os.chown)")

CHECK = """
rec = plugin("{name}")
print(rec["status"], rec["reason"])
assert rec["status"] == lib.{status}, rec
assert {reason!r} in rec["reason"], rec["reason"]
assert rec["n_devices"] == {devices}, rec
"""


def _expect(root, name, status, reason, devices, env=None):
    run_on(root, CHECK.format(name=name, status=status, reason=reason, devices=devices), env)


def test_world_writable_plugin_folder_is_refused(roots):
    root = roots.make("env", "template")
    plugin = root / "template"
    plugin.chmod(0o777)
    _expect(root, "template", "RT_PLUGIN_INSECURE", f"world-writable {plugin}", 0)


def test_world_writable_library_is_refused(roots):
    root = roots.make("env", "template")
    lib = root / "template" / "libral_template.so"
    lib.chmod(0o757)
    _expect(root, "template", "RT_PLUGIN_INSECURE", f"world-writable {lib}", 0)


@needs_root
def test_group_writable_manifest_of_a_shared_group_is_refused(roots):
    root = roots.make("env", "template")
    manifest = root / "template" / "manifest.json"
    os.chown(manifest, 0, OTHER_GID)
    manifest.chmod(0o664)
    _expect(root, "template", "RT_PLUGIN_INSECURE", f"group-writable {manifest}", 0)


def test_group_writable_in_the_owners_private_group_loads(roots):
    """A umask-002 install (Debian/Ubuntu user private groups) is not refused: the file's
    group is its owner's own group with no other member."""
    import grp
    import pwd

    me = pwd.getpwuid(os.geteuid())
    group = grp.getgrgid(me.pw_gid)
    if group.gr_name != me.pw_name or any(m != me.pw_name for m in group.gr_mem):
        pytest.skip(f"the user's primary group {group.gr_name!r} is not a private group")
    root = roots.make("env", "template")
    for path in (root / "template", root / "template" / "manifest.json", root / "template" / "libral_template.so"):
        path.chmod(path.stat().st_mode | stat.S_IWGRP)
    _expect(root, "template", "RT_PLUGIN_LOADED", "", 1)


@needs_root
def test_library_owned_by_another_user_is_refused(roots):
    root = roots.make("env", "template")
    lib = root / "template" / "libral_template.so"
    os.chown(lib, OTHER_UID, -1)
    _expect(root, "template", "RT_PLUGIN_INSECURE", f"owned by another user (uid {OTHER_UID}, not 0) {lib}", 0)


@needs_root
def test_plugin_folder_owned_by_another_user_is_refused(roots):
    root = roots.make("env", "template")
    os.chown(root / "template", OTHER_UID, OTHER_GID)
    _expect(root, "template", "RT_PLUGIN_INSECURE", f"owned by another user (uid {OTHER_UID}", 0)


def test_writable_folder_above_the_plugin_is_refused_sticky_is_not(roots):
    """The walk goes up to "/": whoever may rename a folder above the plugin may swap it.
    A sticky world-writable folder (as /tmp) only lets others add their own entries."""
    root = roots.make("env", "template")
    root.chmod(0o777)
    _expect(root, "template", "RT_PLUGIN_INSECURE", f"world-writable {root}", 0)
    root.chmod(0o1777)
    _expect(root, "template", "RT_PLUGIN_LOADED", "", 1)


def test_secure_plugin_loads_with_an_empty_reason(roots):
    root = roots.make("env", "template")
    run_on(root, 'assert plugin("template")["status"] == lib.RT_PLUGIN_LOADED and plugin("template")["reason"] == ""')


@pytest.mark.parametrize("allow", ["1", "{root}", "{root}/template/", "/nowhere:{root}/template"])
def test_administrator_accepts_an_insecure_plugin_explicitly(roots, allow):
    root = roots.make("env", "template")
    plugin = root / "template"
    plugin.chmod(0o777)
    env = {"TORCH_FL_ALLOW_INSECURE_PLUGINS": allow.format(root=root)}
    _expect(
        root,
        "template",
        "RT_PLUGIN_LOADED",
        f"INSECURE, accepted by TORCH_FL_ALLOW_INSECURE_PLUGINS: world-writable {plugin}",
        1,
        env,
    )


def test_allow_list_names_other_folders_only(roots):
    root = roots.make("env", "template")
    (root / "template").chmod(0o777)
    env = {"TORCH_FL_ALLOW_INSECURE_PLUGINS": f"{root}/templat:/elsewhere"}
    _expect(root, "template", "RT_PLUGIN_INSECURE", "world-writable", 0, env)


def test_fixed_permissions_load_on_rescan(roots):
    root = roots.make("env", "template")
    plugin = root / "template"
    plugin.chmod(0o777)
    run_on(
        root,
        f"""
        assert plugin("template")["status"] == lib.RT_PLUGIN_INSECURE
        os.chmod({str(plugin)!r}, 0o755)
        ok(lib.rt_rescan())
        assert plugin("template")["status"] == lib.RT_PLUGIN_LOADED, plugin("template")
        assert lib.rt_device_count() == 1
        """,
    )


def _tool(args, env):
    return subprocess.run(
        [sys.executable, "-m", "torch_fl.tools.ralctl", *args],
        env=clean_env({"PYTHONPATH": str(REPO), "COLUMNS": "250", **env}),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_ralctl_and_doctor_show_the_reason(roots):
    root = roots.make("env", "template")
    plugin = root / "template"
    plugin.chmod(0o777)
    env = {"TORCH_FL_PLUGIN_PATH": str(root)}
    status = _tool(["plugin-status", "--json"], env)
    assert status.returncode in (0, 1), status.stderr
    assert "INSECURE" in status.stdout and f"world-writable {plugin}" in status.stdout, status.stdout
    doctor = _tool(["doctor"], env)
    assert f"INSECURE: world-writable {plugin}" in doctor.stdout, doctor.stdout + doctor.stderr


def test_python_error_for_the_missing_device_names_the_refusal(roots):
    root = roots.make("env", "template")
    plugin = root / "template"
    plugin.chmod(0o777)
    code = """
import torch, torch_fl
n = torch.ral.device_count()
try:
    torch.empty(2, device=f"ral:{n}")
except RuntimeError as exc:
    print(exc)
else:
    raise SystemExit("no error")
"""
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=clean_env({"PYTHONPATH": str(REPO), "TORCH_FL_PLUGIN_PATH": str(root)}),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert f"plugin 'template' at {plugin} failed to load: INSECURE" in out.stdout, out.stdout
    assert f"world-writable {plugin}" in out.stdout, out.stdout


# ---- on-disk kernel caches ------------------------------------------------------------

# A kernel that writes `value` into element 0 of its output, per plugin language.
_KERNELS = {
    "host": (
        "c",
        '#include "ral_plugin.h"\n'
        "RAL_PLUGIN_EXPORT ral_status k(const ral_kernel_call* c) {{\n"
        "  *(float*)((char*)c->tensors[0].data + c->tensors[0].byte_offset) = {value}f;\n"
        "  return RAL_OK;\n}}\n",
    ),
    "opencl": (
        "opencl-c",
        "__kernel void k(__global float* d, long off, long n) {{\n"
        "  if (get_global_id(0) < n) d[off + get_global_id(0)] = {value}f;\n}}\n",
    ),
}
_CACHE_SUBDIR = {"host": "host-jit", "opencl": "opencl"}
_RUN_KERNEL = """
ok(lib.rt_init({builtin!r}.encode()))
dev = next(i for i in range(lib.rt_device_count()) if plugins()[device(i).plugin]["name"] == {plugin!r})
for value in {values!r}:
    h = ffi.new("int64_t*")
    src = {source!r}.format(value=value)
    ok(lib.rt_kernel_compile(dev, {lang!r}.encode(), src.encode(), b"", b"k", h))
    p = malloc(dev, 4)
    ok(launch(dev, h[0], [tensor(p, 1)], []))
    ok(lib.rt_stream_synchronize(dev, 0))
    print("VALUE", unfloats32(d2h(dev, p, 4))[0])
"""


def _run_kernels(plugin, cache, *values):
    """Compile and run the kernel with each value in one fresh process; (values read, stderr)."""
    lang, source = _KERNELS[plugin]
    code = _RUN_KERNEL.format(builtin=builtin_plugin_dir(), plugin=plugin, values=values, source=source, lang=lang)
    env = clean_env({"XDG_CACHE_HOME": str(cache), "POCL_CACHE_DIR": str(cache.parent / "pocl")})
    out = subprocess.run(
        [sys.executable, "-c", PREAMBLE + code], env=env, cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    read = [float(line.split()[1]) for line in out.stdout.splitlines() if line.startswith("VALUE")]
    return read, out.stderr


def _needs(plugin):
    from torch_fl.core.runtime import plugin_records

    rec = next((p for p in plugin_records() if p.name == plugin), None)
    if rec is None or rec.status != "LOADED" or not rec.n_devices:
        pytest.skip(f"the {plugin} plugin is not loaded here ({rec.status if rec else 'not built'})")


def _entries(folder):
    return sorted(p for p in folder.iterdir() if p.suffix in (".so", ".bin")) if folder.is_dir() else []


def _plant(plugin, victim: Path, donor: Path) -> None:
    """Write donor's (valid) cache entry under victim's name, as an attacker with write
    access would: the checksums only guard against torn writes."""
    data = bytearray(donor.read_bytes())
    if plugin == "opencl":
        data[24:56] = victim.stem.encode()  # program_cache.c's header: magic, size, checksum, key
    victim.write_bytes(bytes(data))


PLUGINS = ["host", pytest.param("opencl", marks=pytest.mark.slow)]


def _planted_cache(plugin: str, tmp_path):
    """(cache root, victim): the cached kernel of `x * 1.0`, overwritten with the one of `x * 2.0`."""
    _needs(plugin)
    cache = tmp_path / "cache"
    folder = cache / "torch_fl" / _CACHE_SUBDIR[plugin]
    assert _run_kernels(plugin, cache, 1.0)[0] == [1.0]
    (victim,) = _entries(folder)
    assert _run_kernels(plugin, cache, 2.0)[0] == [2.0]
    (donor,) = [p for p in _entries(folder) if p != victim]
    _plant(plugin, victim, donor)
    return cache, victim


@needs_root
@pytest.mark.parametrize("plugin", ["host", "opencl"])
def test_planted_cache_file_of_another_user_is_not_loaded(plugin, tmp_path):
    cache, victim = _planted_cache(plugin, tmp_path)
    os.chown(victim, OTHER_UID, OTHER_GID)
    read, err = _run_kernels(plugin, cache, 1.0, 1.0)
    assert read == [1.0, 1.0], f"the planted kernel ran: {read}"
    assert err.count("is not used") == 1 and f"owned by another user (uid {OTHER_UID}" in err, err
    assert victim.stat().st_uid == OTHER_UID  # left alone, not loaded


@pytest.mark.parametrize("plugin", PLUGINS)
def test_world_writable_cache_file_is_not_loaded(plugin, tmp_path):
    cache, victim = _planted_cache(plugin, tmp_path)
    victim.chmod(0o666)
    read, err = _run_kernels(plugin, cache, 1.0)
    assert read == [1.0], f"the planted kernel ran: {read}"
    assert f"world-writable {victim}" in err, err


@pytest.mark.parametrize("plugin", PLUGINS)
def test_world_writable_cache_folder_is_not_used(plugin, tmp_path):
    _needs(plugin)
    cache = tmp_path / "cache"
    folder = cache / "torch_fl" / _CACHE_SUBDIR[plugin]
    folder.mkdir(parents=True)
    folder.chmod(0o777)
    read, err = _run_kernels(plugin, cache, 3.0, 4.0)
    assert read == [3.0, 4.0]
    assert err.count("is not used") == 1 and f"world-writable {folder}" in err, err
    assert _entries(folder) == [], "a kernel was cached in a folder others may write"


@needs_root
def test_cache_folder_of_another_user_is_not_used(tmp_path):
    _needs("host")
    cache = tmp_path / "cache"
    folder = cache / "torch_fl" / "host-jit"
    folder.mkdir(parents=True)
    os.chown(folder, OTHER_UID, OTHER_GID)
    read, err = _run_kernels("host", cache, 5.0)
    assert read == [5.0]
    assert f"owned by another user (uid {OTHER_UID}, not 0) {folder}" in err, err
    assert _entries(folder) == []


# ---- the C++ device guard's build cache (torch_fl/device/guard) -------------------------


@pytest.fixture
def guard_cache(tmp_path, monkeypatch):
    """The guard module with XDG_CACHE_HOME under tmp_path and no private folder chosen yet."""
    from torch_fl.device import guard

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(guard, "_private_root", None)
    (tmp_path / "cache").mkdir()
    return guard


def _plant_guard(guard, mode=0o755, uid=None):
    """A file under the name the guard library would be loaded from, in the shared cache."""
    shared = guard.cache_dir() / "guard"
    real = guard._shim_path()  # the name the guard looks for, while the cache is still private
    assert real.parent.parent == shared
    real.parent.mkdir(parents=True)
    real.write_bytes(b"not the guard")
    real.chmod(mode)
    if uid is not None:
        os.chown(real, uid, OTHER_GID)
    guard._private_root = None
    return real


def test_guard_cache_is_used_when_private(guard_cache):
    path = guard_cache._shim_path()
    assert path.parent.parent == guard_cache.cache_dir() / "guard"
    assert stat.S_IMODE((guard_cache.cache_dir() / "guard").stat().st_mode) & 0o022 == 0


def test_world_writable_guard_cache_is_not_used(guard_cache, tmp_path):
    (tmp_path / "cache").chmod(0o777)
    with pytest.warns(UserWarning, match=re.escape(f"world-writable {tmp_path / 'cache'}")):
        path = guard_cache._shim_path()
    assert guard_cache._private_root is not None and path.parent.parent == guard_cache._private_root
    assert stat.S_IMODE(guard_cache._private_root.stat().st_mode) == 0o700


def test_planted_guard_library_is_not_loaded(guard_cache):
    planted = _plant_guard(guard_cache, mode=0o777)
    with pytest.warns(UserWarning, match=re.escape(f"world-writable {planted}")):
        assert guard_cache._shim_path() != planted


@needs_root
def test_guard_library_of_another_user_is_not_loaded(guard_cache):
    planted = _plant_guard(guard_cache, uid=OTHER_UID)
    with pytest.warns(UserWarning, match="owned by another user"):
        assert guard_cache._shim_path() != planted
