"""torch_fl.distributed adapts heavy torch modules (FSDP2, functional collectives) only when a
program imports them: importing torch_fl must not pay for them."""

from __future__ import annotations

from conftest import run_python


def test_import_does_not_load_fsdp_and_patches_it_when_imported():
    res = run_python(
        """
        import sys
        import torch_fl
        assert "torch.distributed.fsdp._fully_shard._fsdp_param_group" not in sys.modules
        from torch.distributed.fsdp import fully_shard  # noqa: F401
        from torch.distributed.fsdp._fully_shard import _fsdp_param, _fsdp_param_group
        assert getattr(_fsdp_param.free_storage, "_torch_fl", False)
        assert _fsdp_param_group.alloc_storage is _fsdp_param.alloc_storage
        import inspect
        assert "def alloc_all_gather_outputs" in inspect.getsource(_fsdp_param)  # loader intact
        print("OK")
        """,
        timeout=120,
    )
    assert res.returncode == 0 and "OK" in res.stdout, res.stderr[-3000:]
