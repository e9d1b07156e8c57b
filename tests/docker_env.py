"""What the docker tests need from the machine: an engine that answers, and the base image.

No image registry is reachable from some machines (CI among them) while Debian's package mirror
is: when ``debian:bookworm-slim`` is neither present nor pullable, it is made from Debian packages
(``debootstrap --variant=minbase``, then ``docker import`` under the same tag). The engine keeps
the result, so this costs minutes once per machine and nothing afterwards.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from remote_bash.sandbox import Engine, find_engine
from remote_bash.sandbox._container import ensure_image

BASE_IMAGE = "debian:bookworm-slim"
HOW_TO_RUN = ("no container engine answers: install Docker (Debian: apt-get install docker.io, then start "
              "dockerd) or Podman, then run: python3 -m pytest -m docker")


def engine_or_reason() -> tuple[Engine | None, str]:
    engine = find_engine()
    return engine, "" if engine is not None else HOW_TO_RUN


def ensure_base_image(engine: Engine, *, mirror: str = "http://deb.debian.org/debian") -> str:
    """``debian:bookworm-slim`` in the engine: present, pulled, or built from Debian packages."""
    if engine.image_exists(BASE_IMAGE):
        return "present"
    pulled = subprocess.run([engine.command, "pull", BASE_IMAGE], capture_output=True, text=True,
                            timeout=120, check=False, stdin=subprocess.DEVNULL)
    if pulled.returncode == 0:
        return "pulled"
    debootstrap = shutil.which("debootstrap") or "/usr/sbin/debootstrap"
    if not Path(debootstrap).exists():
        raise RuntimeError(f"{BASE_IMAGE} cannot be pulled ({pulled.stderr.strip()[-200:]}) and debootstrap "
                           "is not installed to make it: apt-get install debootstrap")
    with tempfile.TemporaryDirectory(prefix="rb-rootfs-") as root:
        made = subprocess.run([debootstrap, "--variant=minbase", "bookworm", root, mirror],
                              capture_output=True, text=True, timeout=1200, check=False,
                              stdin=subprocess.DEVNULL)
        if made.returncode != 0:
            raise RuntimeError(f"debootstrap failed: {made.stdout[-500:]}{made.stderr[-500:]}")
        # debootstrap leaves its package cache behind: the slim image does not carry it.
        shutil.rmtree(Path(root) / "var/cache/apt/archives", ignore_errors=True)
        tar = subprocess.Popen(["tar", "-C", root, "-c", "."], stdout=subprocess.PIPE)
        try:
            imported = subprocess.run([engine.command, "import", "--change", 'CMD ["bash"]', "-", BASE_IMAGE],
                                      stdin=tar.stdout, capture_output=True, text=True, timeout=600, check=False)
        finally:
            assert tar.stdout is not None
            tar.stdout.close()
            tar.wait(60)
        if imported.returncode != 0:
            raise RuntimeError(f"docker import failed: {imported.stderr.strip()}")
    return "debootstrapped"


@pytest.fixture(scope="session")
def sandbox_image() -> str:
    """The sandbox image (the lab's too), built once per machine and kept by its tag."""
    engine, why = engine_or_reason()
    if engine is None:
        pytest.skip(why)
    ensure_base_image(engine)
    return ensure_image(engine)
