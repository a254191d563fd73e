"""Build the compiled delay line engine (cffi, API mode): `_engine.c` + `_engine.h` -> `_cengine*.so` beside this
file. `make setup` runs it (`.venv/bin/python orchestrator/shaping/delayline/build_engine.py`); it rebuilds only
when the .so is missing or older than the C source, the header or this script (`--force` always rebuilds).
Needs gcc and python3-dev (installed by `make setup`); no root."""
from __future__ import annotations

import glob
import os
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCES = [HERE / "_engine.c", HERE / "_engine.h", Path(__file__).resolve()]
MODULE = "_cengine"
CFLAGS = ["-O2", "-std=gnu11", "-ffp-contract=off", "-fno-fast-math", "-Wall", "-Wno-unused-function"]


def target() -> Path:
    return HERE / (MODULE + sysconfig.get_config_var("EXT_SUFFIX"))


def up_to_date() -> bool:
    t = target()
    if not t.exists():
        return False
    mt = t.stat().st_mtime
    return all(s.stat().st_mtime <= mt for s in SOURCES)


def build() -> Path:
    import cffi

    ffi = cffi.FFI()
    ffi.cdef((HERE / "_engine.h").read_text())
    ffi.set_source(MODULE, '#include <stdint.h>\n#include <stddef.h>\n#include "_engine.h"\n',
                   sources=[str(HERE / "_engine.c")], include_dirs=[str(HERE)], libraries=["m"],
                   extra_compile_args=CFLAGS)
    with tempfile.TemporaryDirectory(prefix="dl-engine-") as tmp:
        so = ffi.compile(tmpdir=tmp, verbose=False)
        out = target()
        part = out.with_name(out.name + ".part")
        shutil.copyfile(so, part)
        os.replace(part, out)   # atomic: a running daemon keeps its mapped copy
    for stale in glob.glob(str(HERE / (MODULE + ".*.so"))):
        if Path(stale) != target():
            os.unlink(stale)
    return target()


def main(argv: list[str]) -> int:
    if "--force" not in argv and up_to_date():
        print(f"{target().name} is up to date")
        return 0
    print(f"built {build()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
