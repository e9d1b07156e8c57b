"""The public API is exactly what __all__ says, and every name in it resolves."""

from __future__ import annotations

import subprocess
import sys

import remote_bash


def test_all_lists_exactly_the_public_names() -> None:
    public = {n for n in dir(remote_bash) if not n.startswith("_")} - {"annotations", "TYPE_CHECKING", "Any"}
    modules = {n for n in public if type(getattr(remote_bash, n)).__name__ == "module"}
    assert set(remote_bash.__all__) == (public - modules) | {"__version__"}
    assert len(remote_bash.__all__) == len(set(remote_bash.__all__))
    # The package's own names, sorted, then every error, as errors.__all__ lists them (sorted too).
    errors = remote_bash.errors.__all__
    assert remote_bash.__all__[-len(errors):] == errors == sorted(errors)
    own = remote_bash.__all__[:-len(errors)]
    assert own == sorted(own)
    for name in remote_bash.__all__:
        assert getattr(remote_bash, name) is not None


def test_the_documented_entry_points_exist() -> None:
    for name in ("Host", "RemoteBashSession", "BashTool", "EditTool", "RemoteBashError", "load_inventory"):
        assert name in remote_bash.__all__


def test_importing_the_package_is_light() -> None:
    code = "import sys, remote_bash; print('asyncssh' in sys.modules, 'anthropic' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
