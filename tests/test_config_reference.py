"""docs/configuration.md is what scripts/config_reference.py writes from the config dataclasses today."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("trl")

ROOT = Path(__file__).resolve().parents[1]


def test_the_configuration_reference_is_up_to_date():
    spec = importlib.util.spec_from_file_location("config_reference", ROOT / "scripts" / "config_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = module.render()
    assert "`disable_dropout` | `bool` | `True`" in text  # ADRPO's change of a GRPOConfig default is listed
    assert (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8") == text, \
        "docs/configuration.md is out of date: run scripts/config_reference.py"
