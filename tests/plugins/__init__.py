"""Deliberately broken RAL plugins and the helpers that build them for tests."""
