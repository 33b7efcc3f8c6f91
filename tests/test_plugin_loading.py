"""Plugin discovery, ABI checks, failure classification and hot plug (cffi level)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from plugins.harness import run_native, run_on  # noqa: E402

from plugins import fixtures  # noqa: E402

plugin_cache = fixtures.plugin_cache
roots = fixtures.roots


def test_discovery_order_across_three_roots(roots):
    builtin = roots.make("builtin", zeta="named", cuda="named", alpha="named", host="named")
    env1 = roots.make("env1", beta="named")
    env2 = roots.make("env2", gamma="named")
    system = roots.make("system", omega="named")
    env = {
        "TORCH_FL_PLUGIN_PATH": f"{env1}:{roots.base / 'missing'}:{env2}",
        "TORCH_FL_SYSTEM_PLUGIN_DIR": str(system),
    }
    run_on(
        builtin,
        """
        names = [p["name"] for p in plugins()]
        assert names == ["host", "cuda", "alpha", "zeta", "beta", "gamma", "omega"], names
        assert [p["source"] for p in plugins()] == [0, 0, 0, 0, 1, 1, 2]
        assert all(p["status"] == lib.RT_PLUGIN_LOADED for p in plugins())
        assert lib.rt_device_count() == 7
        assert [device(i).plugin for i in range(7)] == list(range(7))
        ok(lib.rt_init(b"/elsewhere"))  # idempotent
        assert lib.rt_plugin_count() == 7
        """,
        env,
    )


def test_missing_roots_are_fine(tmp_path):
    run_on(
        tmp_path / "nothing",
        """
        assert lib.rt_plugin_count() == 0 and lib.rt_device_count() == 0
        ok(lib.rt_rescan())
        """,
    )


def test_same_name_twice_keeps_the_first(roots):
    first = roots.make("first", "template")
    second = roots.make("second", "template")
    run_on(
        first,
        f"""
        recs = plugins()
        assert [p["status"] for p in recs] == [lib.RT_PLUGIN_LOADED, lib.RT_PLUGIN_SHADOWED]
        assert "already provided by {first}/template" in recs[1]["reason"], recs[1]
        assert lib.rt_device_count() == 1
        """,
        {"TORCH_FL_PLUGIN_PATH": str(second)},
    )


@pytest.mark.parametrize(
    "case,status,abi,reason",
    [
        ("abi2", "RT_PLUGIN_ABI_MISMATCH", (2, 0), "plugin is built for ABI 2.0; this runtime implements ABI 1.0"),
        ("corrupt", "RT_PLUGIN_LOAD_FAILED", (0, 0), "{dir}/libcorrupt.so: invalid ELF header"),
        ("null_entry", "RT_PLUGIN_LOAD_FAILED", (1, 0), "required entry 'event_query' is NULL"),
    ],
)
def test_broken_plugin_is_refused_with_reason(roots, case, status, abi, reason):
    root = roots.make("root", case)
    run_on(
        root,
        f"""
        p = plugin({case!r})
        assert p["status"] == lib.{status}, p
        assert p["reason"] == {reason!r}.format(dir=p["dir"]), p
        assert p["abi"] == {abi}
        assert lib.rt_device_count() == 0
        """,
    )


def test_missing_dependency_library_then_rescan(roots):
    root = roots.make("root", "template", "linked_dep")
    run_native(
        f"""
        import sys
        sys.path.insert(0, "tests")
        from plugins.build import install_fake_dep
        ok(lib.rt_init({str(root)!r}.encode()))
        p = plugin("linked_dep")
        assert p["status"] == lib.RT_PLUGIN_MISSING_DEPS, p
        assert p["reason"].startswith("libfakedep.so: cannot open shared object file"), p
        assert lib.rt_device_count() == 1
        install_fake_dep(__import__("pathlib").Path(p["dir"]))
        ok(lib.rt_rescan())
        assert plugin("linked_dep")["status"] == lib.RT_PLUGIN_LOADED
        assert lib.rt_device_count() == 2
        assert [device(i).plugin for i in range(2)] == [1, 0], [device(i).plugin for i in range(2)]
        """
    )


def test_init_missing_deps_then_rescan_without_restart(roots):
    root = roots.make("root", "needs_deps", "template")
    run_on(
        root,
        """
        p = plugin("needs_deps")
        assert p["status"] == lib.RT_PLUGIN_MISSING_DEPS
        assert p["reason"].startswith("libfakevendor.so.1 not found"), p
        assert lib.rt_device_count() == 1
        dev0 = device(0)  # keep the record alive: .info.name points into it
        template_device = ffi.string(dev0.info.name)
        ok(lib.rt_rescan())
        assert plugin("needs_deps")["status"] == lib.RT_PLUGIN_MISSING_DEPS
        os.environ["RAL_FAKE_DEPS_PRESENT"] = "1"
        ok(lib.rt_rescan())
        assert plugin("needs_deps")["status"] == lib.RT_PLUGIN_LOADED
        assert plugin("needs_deps")["reason"] == ""
        assert lib.rt_device_count() == 2
        dev0 = device(0)
        assert ffi.string(dev0.info.name) == template_device  # old indices never move
        """,
    )


def test_new_plugin_directory_appears_on_rescan(roots, plugin_cache):
    root = roots.make("root", "template")
    run_native(
        f"""
        import shutil
        ok(lib.rt_init({str(root)!r}.encode()))
        assert lib.rt_device_count() == 1
        shutil.copytree({str(plugin_cache / "named")!r}, {str(root / "named")!r})
        ok(lib.rt_rescan())
        assert [p["name"] for p in plugins()] == ["template", "named"]
        assert lib.rt_device_count() == 2
        """
    )


def test_removed_plugin_is_gone_and_its_device_lost(roots):
    root = roots.make("root", "named", "template")
    run_native(
        f"""
        import shutil
        ok(lib.rt_init({str(root)!r}.encode()))
        assert [p["name"] for p in plugins()] == ["named", "template"]
        tdev = 1
        ptr = malloc(tdev, 64)
        add = kernel(tdev, "template_add_f32")
        shutil.move({str(root / "template")!r}, {str(root.parent / "unplugged")!r})
        ok(lib.rt_rescan())
        p = plugin("template")
        assert p["status"] == lib.RT_PLUGIN_GONE
        assert p["reason"] == "plugin directory {root / "template"} was removed", p
        assert device(tdev).present == 0 and device(0).present == 1
        assert lib.rt_device_count() == 2
        expected = "RAL_ERROR_DEVICE_LOST: device 1 ([template] Template device 0) is gone: "
        msg = fails(lib.rt_malloc(tdev, 64, 0, ffi.new("uint64_t*")), "RAL_ERROR_DEVICE_LOST")
        assert msg == expected + p["reason"], msg
        t = tensor(ptr, 16)
        fails(launch(tdev, add, [t], [t, t]), "RAL_ERROR_DEVICE_LOST")
        buf = bytearray(64)
        fails(lib.rt_copy_h2d(tdev, 0, ptr, 0, ffi.from_buffer(buf), 64), "RAL_ERROR_DEVICE_LOST")
        fails(lib.rt_stream_synchronize(tdev, 0), "RAL_ERROR_DEVICE_LOST")
        ok(lib.rt_free(tdev, ptr))  # destructors may still free after an unplug
        malloc(0, 64)  # the other plugin is untouched
        shutil.move({str(root.parent / "unplugged")!r}, {str(root / "template")!r})
        ok(lib.rt_rescan())
        assert plugin("template")["status"] == lib.RT_PLUGIN_LOADED
        assert device(tdev).present == 1 and lib.rt_device_count() == 2
        malloc(tdev, 64)
        """
    )


def test_older_minor_table_is_not_read_past_struct_size(roots):
    root = roots.make("root", "older_minor")
    run_on(
        root,
        """
        p = plugin("older_minor")
        assert p["status"] == lib.RT_PLUGIN_LOADED, p
        assert p["has_compile"] == 0
        handle = ffi.new("int64_t*")
        # Errors would call the poisoned last_error if the runtime read past struct_size.
        msg = fails(lib.rt_kernel_lookup(0, b"nope", handle), "RAL_ERROR_UNSUPPORTED")
        assert msg == "RAL_ERROR_UNSUPPORTED: [older_minor] get_kernel('nope') for device 0", msg
        ptr = malloc(0, 16)
        ok(lib.rt_memset(0, 0, ptr, 0, 7, 16))  # staged: the poisoned memset is not used
        assert d2h(0, ptr, 16) == bytes([7]) * 16
        fails(lib.rt_kernel_compile(0, b"c", b"", b"", b"k", handle), "RAL_ERROR_UNSUPPORTED")
        """,
    )


def test_visible_devices_select_and_reorder(roots):
    root = roots.make("root", "template")
    run_on(
        root,
        """
        assert lib.rt_device_count() == 2
        assert [device(i).local_index for i in range(2)] == [2, 0]
        assert plugin("template")["n_devices"] == 3
        fails(lib.rt_device_get(2, ffi.new("rt_device_record*")), "RAL_ERROR_INVALID_ARGUMENT")
        """,
        {"RAL_TEMPLATE_DEVICE_COUNT": "3", "TORCH_FL_VISIBLE_DEVICES": "2,0"},
    )


def test_bad_visible_devices_fails_init(roots):
    root = roots.make("root", "template")
    run_native(
        f"""
        msg = fails(lib.rt_init({str(root)!r}.encode()), "RAL_ERROR_INVALID_ARGUMENT")
        assert "TORCH_FL_VISIBLE_DEVICES='0,x'" in msg, msg
        """,
        {"TORCH_FL_VISIBLE_DEVICES": "0,x"},
    )
