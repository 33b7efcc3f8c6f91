"""Adapting optional modules once imported (torch_fl/tensor/import_hooks.py): a failing
adaptation never fails the user's import. These hooks run inside any program's `import`
statement once autoload has imported torch_fl, so an exception there would break a module
that works without torch_fl."""

from __future__ import annotations

import sys
import textwrap

from conftest import run_python


def test_a_failing_adaptation_warns_and_the_import_succeeds(tmp_path):
    (tmp_path / "fl_probe_mod.py").write_text("VALUE = 41\n")
    r = run_python(
        textwrap.dedent(
            f"""
            import sys, warnings
            sys.path.insert(0, {str(tmp_path)!r})
            import torch, torch_fl
            from torch_fl.tensor.import_hooks import when_imported
            ran = []
            def broken():
                raise KeyError("attribute this torch lacks")
            when_imported("fl_probe_mod", broken)
            when_imported("fl_probe_mod", lambda: ran.append("second"))
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                import fl_probe_mod
            assert fl_probe_mod.VALUE == 41
            assert ran == ["second"], ran
            msgs = [str(x.message) for x in w if issubclass(x.category, RuntimeWarning)]
            assert len(msgs) == 1 and "fl_probe_mod" in msgs[0] and "KeyError" in msgs[0], msgs
            # the process and the device keep working
            t = torch.arange(4.0, device="ral:0") * 2
            assert t.cpu().tolist() == [0.0, 2.0, 4.0, 6.0]
            print("OK")
            """
        )
    )
    assert r.returncode == 0 and r.stdout.strip().endswith("OK"), r.stderr[-3000:]


def test_an_already_imported_module_adapts_at_once_and_a_failure_warns():
    r = run_python(
        textwrap.dedent(
            """
            import json, warnings
            import torch_fl
            from torch_fl.tensor.import_hooks import when_imported
            ran = []
            when_imported("json", lambda: ran.append(json.dumps(1)))
            assert ran == ["1"], ran
            def broken():
                raise RuntimeError("boom")
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                when_imported("json", broken)
            assert any("json" in str(x.message) and "boom" in str(x.message) for x in w), [str(x.message) for x in w]
            print("OK")
            """
        )
    )
    assert r.returncode == 0 and r.stdout.strip().endswith("OK"), r.stderr[-3000:]


def test_the_finder_leaves_other_finders_in_place():
    # the finder swaps itself out of sys.meta_path while it looks a spec up: afterwards the
    # list must be what it was (importlib iterates over it during that very import)
    import torch_fl.tensor.import_hooks as hooks

    before = list(sys.meta_path)
    hooks.when_imported("fl_never_imported_module_xyz", lambda: None)
    try:
        import importlib.util

        assert importlib.util.find_spec("fl_never_imported_module_xyz") is None
        assert [f for f in sys.meta_path if f is not hooks._FINDER] == [f for f in before if f is not hooks._FINDER]
    finally:
        hooks._PENDING.pop("fl_never_imported_module_xyz", None)
