"""Building the images the Docker backend runs: a base image from debootstrap (`docker import`, for machines
without an image registry) and the node image FROM it (node_image/Dockerfile, `ARG BASE_IMAGE`).

Everything goes through the Docker SDK; debootstrap and tar are argument lists. The node image's Python wheels
are downloaded on the host by the host's own pip (its index, proxy and CA settings) into node_image/wheels/, so
the build itself needs no network.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from orchestrator.backends.base import NullProgress, Progress
from orchestrator.backends.docker import DEFAULT_NODE_IMAGE, LABEL_SOURCE, client, source_digest
from orchestrator.errors import BackendError, OrchestratorError

NODE_DIR = Path(__file__).resolve().parent.parent / "node_image"
DEFAULT_SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
# python3 + venv for the node; ping and ip so that `orchestrator exec LAB NODE -- ping ...` works in a container.
BASE_PACKAGES = ["python3", "python3-venv", "ca-certificates", "iputils-ping", "iproute2"]
NODE_REQUIREMENTS = ["pydantic>=2.6,<3"]


def default_base_tag(suite: str = DEFAULT_SUITE) -> str:
    return f"gossip-testbed/base:{suite}"


@dataclass
class ImageInfo:
    tag: str
    id: str
    size_bytes: int
    built: bool            # False: it existed already and was kept

    def describe(self) -> str:
        return f"{self.tag} ({self.id[7:19]}): {self.size_bytes / 1e6:.0f} MB{'' if self.built else ', cached'}"


def debootstrap_argv(suite: str, rootfs: Path, mirror: str) -> list[str]:
    return ["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", suite, str(rootfs), mirror]


def import_changes() -> list[str]:
    return ['ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', 'CMD ["/bin/bash"]']


def _existing(c, tag: str):
    from docker.errors import ImageNotFound

    try:
        return c.images.get(tag)
    except ImageNotFound:       # any other engine error is not "there is no such image": it propagates
        return None


def _info(image, tag: str, built: bool) -> ImageInfo:
    return ImageInfo(tag, image.id, int(image.attrs.get("Size", 0)), built)


def build_base(tag: str | None = None, suite: str = DEFAULT_SUITE, mirror: str = DEFAULT_MIRROR,
               rebuild: bool = False, progress: Progress | None = None) -> ImageInfo:
    """debootstrap a minimal Debian with python3 and import it as `tag`; kept as it is when it exists."""
    progress = progress or NullProgress()
    tag = tag or default_base_tag(suite)
    c = client()
    old = _existing(c, tag)
    if old is not None and not rebuild:
        return _info(old, tag, built=False)
    if os.geteuid() != 0:
        raise OrchestratorError("building the base image needs root (debootstrap builds a root filesystem)")
    for tool in ("debootstrap", "tar"):
        if shutil.which(tool) is None:
            raise OrchestratorError(f"{tool} is not installed (`make setup`, or apt-get install {tool})")
    work = Path(tempfile.mkdtemp(prefix="gossip-base."))
    rootfs, tarball, log = work / "rootfs", work / "rootfs.tar", work / "debootstrap.log"
    try:
        progress.note(f"debootstrap {suite} from {mirror} (a few minutes; log {log}) ...")
        with open(log, "w") as f:
            r = subprocess.run(debootstrap_argv(suite, rootfs, mirror), stdout=f, stderr=subprocess.STDOUT)
        if r.returncode != 0:
            tail = log.read_text().strip().splitlines()[-3:]
            raise BackendError(f"debootstrap failed (exit {r.returncode}): {' / '.join(tail)}")
        # A container needs no package lists, caches, documentation or man pages.
        subprocess.run(["chroot", str(rootfs), "apt-get", "clean"], check=True, capture_output=True)
        for sub in ("var/lib/apt/lists", "usr/share/doc", "usr/share/man"):
            for p in (rootfs / sub).glob("*"):
                shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
        subprocess.run(["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(tarball), "."], check=True,
                       capture_output=True)
        progress.note(f"docker import as {tag} ...")
        repo, _, version = tag.rpartition(":") if ":" in tag.split("/")[-1] else (tag, "", "latest")
        c.api.import_image(src=str(tarball), repository=repo, tag=version, changes=import_changes())
    finally:
        # --one-file-system: never follow a mount debootstrap may have left behind into the host.
        subprocess.run(["rm", "-rf", "--one-file-system", str(work)], check=False)
    image = _existing(c, tag)
    if image is None:
        raise BackendError(f"docker import did not produce {tag}")
    return _info(image, tag, built=True)


def fetch_wheels(dest: Path, progress: Progress | None = None) -> None:
    """The node's Python dependencies as wheels, downloaded by the host's pip (same Python, same platform)."""
    progress = progress or NullProgress()
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob("*.whl"):
        old.unlink()
    progress.note("pip download " + " ".join(NODE_REQUIREMENTS) + " ...")
    r = subprocess.run([sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--quiet",
                        "--only-binary=:all:", "--dest", str(dest), *NODE_REQUIREMENTS],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise BackendError(f"pip download of the node's dependencies failed: {r.stderr.strip()[-500:]}")


def build_node(tag: str = DEFAULT_NODE_IMAGE, base: str | None = None, progress: Progress | None = None,
               offline_wheels: bool = True) -> ImageInfo:
    """docker build node_image/ FROM `base` (the Dockerfile's default when None)."""
    progress = progress or NullProgress()
    c = client()
    if base is not None and _existing(c, base) is None:
        progress.note(f"base image {base} is not here: the build will try to pull it")
    wheels = NODE_DIR / "wheels"
    if offline_wheels:
        fetch_wheels(wheels, progress)
    progress.note(f"docker build {NODE_DIR} -> {tag}" + (f" (BASE_IMAGE={base})" if base else ""))
    error, last = None, []
    for chunk in c.api.build(path=str(NODE_DIR), tag=tag, buildargs={"BASE_IMAGE": base} if base else {},
                             rm=True, forcerm=True, network_mode="host", decode=True,
                             labels={LABEL_SOURCE: source_digest()}):
        if "error" in chunk:
            error = chunk["error"].strip()
        line = (chunk.get("stream") or "").strip()
        if line:
            last = (last + [line])[-5:]
            if line.startswith("Step "):
                progress.note(line)
    if error:
        raise BackendError(f"docker build of {tag} failed: {error}\n" + "\n".join(last))
    image = _existing(c, tag)
    if image is None:
        raise BackendError(f"docker build did not produce {tag}")
    return _info(image, tag, built=True)


def build_all(base_image: str | None = None, node_tag: str = DEFAULT_NODE_IMAGE, suite: str = DEFAULT_SUITE,
              mirror: str = DEFAULT_MIRROR, rebuild_base: bool = False,
              progress: Progress | None = None) -> list[ImageInfo]:
    """The base (unless `base_image` names another one, e.g. python:3.11-slim-bookworm) and the node image."""
    out = []
    if base_image is None:
        base = build_base(None, suite, mirror, rebuild_base, progress)
        out.append(base)
        base_image = base.tag
    out.append(build_node(node_tag, base_image, progress))
    return out
