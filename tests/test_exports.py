"""The public API is exactly what __all__ says."""

from __future__ import annotations

import remote_bash


def test_all_lists_exactly_the_public_names() -> None:
    public = {name for name in vars(remote_bash) if not name.startswith("_")} - {"annotations"}
    modules = {name for name, value in vars(remote_bash).items() if type(value).__name__ == "module"}
    assert set(remote_bash.__all__) == (public - modules) | {"__version__"}
    assert remote_bash.__all__ == sorted(remote_bash.__all__)


def test_the_documented_entry_points_exist() -> None:
    for name in ("Host", "RemoteBashSession", "BashTool", "RemoteBashError", "load_inventory"):
        assert name in remote_bash.__all__
