"""pytest fixtures shared by the native runtime tests: plugins are built once per
session into a cache, and each test copies the ones it needs into its own roots."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from .build import SOURCES, build_template_plugin, build_test_plugin, ensure_runtime


@pytest.fixture(scope="session")
def plugin_cache(tmp_path_factory) -> Path:
    """A directory holding one built copy of every plugin the tests use."""
    ensure_runtime()
    cache = tmp_path_factory.mktemp("plugin_cache")
    build_template_plugin(cache)
    for source in (*SOURCES, "corrupt", "linked_dep"):
        build_test_plugin(source, cache)
    return cache


class Roots:
    """Creates discovery roots filled with copies of cached plugins."""

    def __init__(self, cache: Path, base: Path):
        self.cache = cache
        self.base = base

    def make(self, root: str, *plugins: str, **renamed: str) -> Path:
        """Root `root` holding the cached `plugins` (and `renamed` as new=name=source)."""
        path = self.base / root
        path.mkdir(parents=True, exist_ok=True)
        for name in plugins:
            shutil.copytree(self.cache / name, path / name)
        for name, source in renamed.items():
            build_test_plugin(name, path, source=source)
        return path


@pytest.fixture
def roots(plugin_cache, tmp_path) -> Roots:
    """Factory for per-test discovery roots."""
    return Roots(plugin_cache, tmp_path)


@pytest.fixture(scope="module")
def chaos_root(plugin_cache, tmp_path_factory) -> Path:
    """A discovery root with the chaos plugin (device 0) and the template plugin (device 1)."""
    root = tmp_path_factory.mktemp("chaos_root")
    for name in ("chaos", "template"):
        shutil.copytree(plugin_cache / name, root / name)
    return root
