"""CPU budgets (orchestrator/cpubudget.py) without root: the quota/period arithmetic worked by hand, the lab's check,
finding the cpu controller in mounts texts (v1 separate, v1 co-mounted, v2 with and without cpu), and create /
attach / stats / remove against a fake kernel on a tmp directory (it makes the control files a mkdir makes, moves a
pid between cgroup.procs files, refuses rmdir of a cgroup with tasks or children, as cgroupfs does)."""
from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from orchestrator import cpubudget as cb
from orchestrator.cpubudget import TOP, Cgroups
from orchestrator.errors import CgroupError, OrchestratorError

V1_SEPARATE = """\
sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0
tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0
cgroup /sys/fs/cgroup/cpuacct cgroup rw,relatime,cpuacct 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0
cgroup /sys/fs/cgroup/systemd cgroup rw,relatime,name=systemd 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
"""
V1_COMOUNTED = """\
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate 0 0
cgroup /sys/fs/cgroup/systemd cgroup rw,nosuid,nodev,noexec,relatime,xattr,name=systemd 0 0
cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,nodev,noexec,relatime,cpu,cpuacct 0 0
cgroup /sys/fs/cgroup/cpuset cgroup rw,nosuid,nodev,noexec,relatime,cpuset 0 0
"""
V2 = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate,memory_recursiveprot 0 0\n"
V1_NO_CPU = "cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0\n"

V1_CPU_FILES = {"cgroup.procs": "", "tasks": "", "cpu.shares": "1024\n", "cpu.cfs_period_us": "100000\n",
                "cpu.cfs_quota_us": "-1\n",
                "cpu.stat": "nr_periods 0\nnr_throttled 0\nthrottled_time 0\nnr_bursts 0\nburst_time 0\n"}
V1_ACCT_FILES = {"cgroup.procs": "", "tasks": "", "cpuacct.usage": "0\n", "cpuacct.stat": "user 0\nsystem 0\n"}
V2_CORE_FILES = {"cgroup.procs": "", "cgroup.controllers": "", "cgroup.subtree_control": ""}
V2_CPU_FILES = {"cpu.weight": "100\n", "cpu.max": "max 100000\n",
                "cpu.stat": "usage_usec 0\nuser_usec 0\nsystem_usec 0\nnr_periods 0\nnr_throttled 0\n"
                            "throttled_usec 0\nnr_bursts 0\nburst_usec 0\n"}


class FakeKernel:
    """cgroupfs on a tmp tree. `hierarchies`: mount directory -> "v1-cpu" | "v1-acct" | "v1-both" | "v2"."""

    def __init__(self, hierarchies: dict[Path, str]):
        self.kinds = hierarchies
        self.writes: list[tuple[Path, str]] = []
        for d, kind in hierarchies.items():
            d.mkdir(parents=True)
            self._populate(d, kind, root=True)
            (d / "cgroup.procs").write_text("4242\n")           # a task in the root cgroup
            if kind == "v2":
                (d / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")

    def _files(self, kind: str, cpu_enabled: bool = True) -> dict[str, str]:
        return {"v1-cpu": V1_CPU_FILES, "v1-acct": V1_ACCT_FILES, "v1-both": {**V1_CPU_FILES, **V1_ACCT_FILES},
                "v2": {**V2_CORE_FILES, **(V2_CPU_FILES if cpu_enabled else {})}}[kind]

    def _populate(self, d: Path, kind: str, root: bool = False) -> None:
        cpu_enabled = kind != "v2" or (not root and "cpu" in (d.parent / "cgroup.subtree_control").read_text())
        for name, text in self._files(kind, cpu_enabled).items():
            (d / name).write_text(text)
        if kind == "v2" and not root:
            enabled = (d.parent / "cgroup.subtree_control").read_text()
            (d / "cgroup.controllers").write_text(enabled)

    def _hierarchy(self, path: Path) -> tuple[Path, str]:
        for d, kind in self.kinds.items():
            if path == d or d in path.parents:
                return d, kind
        raise AssertionError(f"{path} is outside every fake hierarchy")

    def mkdir(self, path: Path) -> None:
        _, kind = self._hierarchy(path)
        os.mkdir(path)
        self._populate(path, kind)

    def rmdir(self, path: Path) -> None:
        if not path.exists():
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(path))
        if any(c.is_dir() for c in path.iterdir()) or (path / "cgroup.procs").read_text().split():
            raise OSError(errno.EBUSY, "Device or resource busy", str(path))
        for c in path.iterdir():
            c.unlink()
        os.rmdir(path)

    def write(self, path: Path, text: str) -> None:
        if not path.is_file():                                  # open(O_WRONLY) without O_CREAT
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(path))
        self.writes.append((path, text))
        root, kind = self._hierarchy(path)
        if path.name == "cgroup.procs":
            pid = int(text)
            for f in root.rglob("cgroup.procs"):                # a task is in exactly one cgroup per hierarchy
                f.write_text("".join(f"{p}\n" for p in f.read_text().split() if int(p) != pid))
            path.write_text(path.read_text() + f"{pid}\n")
        elif path.name == "cgroup.subtree_control":
            assert text.startswith("+")
            if text[1:] not in (path.parent / "cgroup.controllers").read_text().split():
                raise OSError(errno.ENOENT, "No such file or directory", str(path))
            path.write_text(" ".join(sorted({*path.read_text().split(), text[1:]})) + "\n")
        elif path.name == "cpu.cfs_quota_us" and int(text) != -1 and int(text) < cb.MIN_QUOTA_US:
            raise OSError(errno.EINVAL, "Invalid argument", str(path))
        elif path.name == "cpu.cfs_period_us" and not cb.MIN_QUOTA_US <= int(text) <= cb.MAX_PERIOD_US:
            raise OSError(errno.EINVAL, "Invalid argument", str(path))
        else:
            path.write_text(text + "\n")


def _v1_separate(tmp_path: Path) -> tuple[Cgroups, FakeKernel]:
    k = FakeKernel({tmp_path / "sys/fs/cgroup/cpu": "v1-cpu", tmp_path / "sys/fs/cgroup/cpuacct": "v1-acct"})
    return Cgroups(V1_SEPARATE, root=tmp_path, ops=k), k


def _leftovers(tmp_path: Path) -> list[str]:
    return sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_dir() and TOP in p.parts)


# --- quota -----------------------------------------------------------------------------------------------------

def test_quota_hand_worked():
    assert cb.quota(0.1) == (10_000, 100_000)           # 0.1 x 100 000 µs
    assert cb.quota(1.0) == (100_000, 100_000)
    assert cb.quota(1.5, machine_cores=2) == (150_000, 100_000)   # more than one core: quota > period
    assert cb.quota(0.01) == (1_000, 100_000)           # exactly the minimum at the default period
    # 0.005 x 100 000 = 500 µs < 1 000: the period stretches to 1 000 / 0.005 = 200 000 µs for a 1 000 µs quota
    assert cb.quota(0.005) == (1_000, 200_000)
    assert cb.quota(0.002) == (1_000, 500_000)
    assert cb.quota(0.001) == (1_000, 1_000_000)        # the least enforceable: 1 ms per 1 s


def test_quota_refuses_what_the_kernel_cannot_enforce():
    # 0.0005 x 1 000 000 = 500 µs: below 1 000 µs even at the longest period
    with pytest.raises(ValueError, match=r"0\.0005 real cores.*below the kernel's minimum quota of 1000 µs"):
        cb.quota(0.0005)
    with pytest.raises(ValueError, match=r"3 real cores: more than the machine's 2 cores"):
        cb.quota(3.0, machine_cores=2)
    for bad in (0, -0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="not a positive number"):
            cb.quota(bad)


def _no_v2(_mount: str) -> str | None:
    raise AssertionError("v2 looked at although v1 has cpu")


def test_find_hierarchy_v1_separate_and_comounted():
    assert cb.find_hierarchy(V1_SEPARATE, _no_v2) == cb.Hierarchy(1, "/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpuacct")
    h = cb.find_hierarchy(V1_COMOUNTED, _no_v2)
    assert h == cb.Hierarchy(1, "/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpu,cpuacct")
    assert h.mounts == ["/sys/fs/cgroup/cpu,cpuacct"]                      # one directory per unit
    # cpu without cpuacct anywhere: budgets work, usage is unknown
    assert cb.find_hierarchy("cgroup /c cgroup rw,cpu 0 0\n", _no_v2) == cb.Hierarchy(1, "/c", None)


def test_find_hierarchy_v2_with_and_without_cpu():
    assert cb.find_hierarchy(V2, lambda m: "cpuset cpu io memory pids\n") == cb.Hierarchy(2, "/sys/fs/cgroup", None)
    for controllers in ("cpuset io memory pids\n", "", None):
        with pytest.raises(CgroupError) as e:
            cb.find_hierarchy(V2, lambda m, c=controllers: c)
        assert str(e.value) == ("cgroup: no cpu controller mounted (v1 /sys/fs/cgroup/cpu or v2 with the cpu "
                                "controller)")
        assert isinstance(e.value, OrchestratorError)
    with pytest.raises(CgroupError, match="no cpu controller"):           # v1 without cpu, v2 without controllers
        cb.find_hierarchy(V1_NO_CPU + "cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n", lambda m: "")


def test_parse_mounts_decodes_escapes_and_skips_other_filesystems():
    got = cb.parse_mounts("proc /proc proc rw 0 0\ncgroup /a\\040b cgroup rw,cpu 0 0\n")
    assert got == [cb.Mount("/a b", "cgroup", ("rw", "cpu"))]


def test_no_cpu_controller_on_a_tmp_tree(tmp_path):
    (tmp_path / "sys/fs/cgroup").mkdir(parents=True)
    (tmp_path / "sys/fs/cgroup/cgroup.controllers").write_text("memory pids\n")
    with pytest.raises(CgroupError, match="no cpu controller"):
        Cgroups(V2, root=tmp_path)


# --- create / attach / stats / remove on a fake kernel -----------------------------------------------------------

def test_v1_separate_create_attach_stats_remove(tmp_path):
    cg, k = _v1_separate(tmp_path)
    cpu, acct = tmp_path / "sys/fs/cgroup/cpu", tmp_path / "sys/fs/cgroup/cpuacct"
    seen = []

    def record(paths):      # called before anything exists
        seen.extend(paths)
        assert not any(p.exists() for p in paths)

    paths = cg.create("lab1", "h3", 0.005, record=record)
    assert paths == [cpu / "orchestrator/lab1/h3", acct / "orchestrator/lab1/h3"] == cg.unit_paths("lab1", "h3")
    assert seen == cg.plan("lab1", "h3") == [cpu / "orchestrator", cpu / "orchestrator/lab1", paths[0],
                                             acct / "orchestrator", acct / "orchestrator/lab1", paths[1]]
    assert cg.lab_dir("lab1") == cpu / "orchestrator/lab1"
    assert (paths[0] / "cpu.cfs_quota_us").read_text() == "1000\n"
    assert (paths[0] / "cpu.cfs_period_us").read_text() == "200000\n"
    for d in (cpu / "orchestrator", cpu / "orchestrator/lab1"):
        assert (d / "cpu.shares").read_text() == "262144\n"
    assert (paths[0] / "cpu.shares").read_text() == "1024\n"              # units keep the default
    assert not any(p.parent == acct or acct in p.parents for p, _ in k.writes)   # nothing set in cpuacct

    cg.attach(paths, 4242)
    assert (paths[0] / "cgroup.procs").read_text() == "4242\n" == (paths[1] / "cgroup.procs").read_text()
    assert (cpu / "cgroup.procs").read_text() == ""                        # moved out of the root cgroup

    (paths[0] / "cpu.stat").write_text("nr_periods 30\nnr_throttled 29\nthrottled_time 2500000000\n"
                                       "nr_bursts 0\nburst_time 0\n")
    (paths[1] / "cpuacct.usage").write_text("300500000\n")
    assert cg.stats(paths) == {"usage_s": 0.3005, "nr_periods": 30, "nr_throttled": 29, "throttled_s": 2.5}

    cg.remove(seen)                                                        # with the task still inside
    assert _leftovers(tmp_path) == []
    assert (cpu / "cgroup.procs").read_text() == "4242\n" == (acct / "cgroup.procs").read_text()
    cg.remove(seen)                                                        # idempotent
    cg.remove(paths)
    assert _leftovers(tmp_path) == []


def test_v1_comounted_one_directory_per_unit(tmp_path):
    k = FakeKernel({tmp_path / "sys/fs/cgroup/cpu,cpuacct": "v1-both"})
    cg = Cgroups(V1_COMOUNTED, root=tmp_path, ops=k)
    (unit,) = paths = cg.create("lab1", "pack-0", 0.2)
    assert unit == tmp_path / "sys/fs/cgroup/cpu,cpuacct/orchestrator/lab1/pack-0"
    assert (unit / "cpu.cfs_quota_us").read_text() == "20000\n"
    (unit / "cpuacct.usage").write_text("2000000000\n")
    assert cg.stats(paths)["usage_s"] == 2.0
    cg.remove(cg.plan("lab1", "pack-0"))
    assert _leftovers(tmp_path) == []


def test_v2_enables_cpu_down_the_tree_and_sets_cpu_max(tmp_path):
    root = tmp_path / "sys/fs/cgroup"
    k = FakeKernel({root: "v2"})
    cg = Cgroups(V2, root=tmp_path, ops=k)
    assert cg.version == 2 and cg.roots == [root]
    paths = cg.create("lab1", "h0", 0.1)
    assert paths == [root / "orchestrator/lab1/h0"]
    assert "cpu" in (root / "cgroup.subtree_control").read_text().split()
    for d in (root / "orchestrator", root / "orchestrator/lab1"):
        assert (d / "cpu.weight").read_text() == "10000\n"
        assert "cpu" in (d / "cgroup.subtree_control").read_text().split()
    assert (paths[0] / "cpu.max").read_text() == "10000 100000\n"
    (paths[0] / "cpu.stat").write_text("usage_usec 1500000\nuser_usec 1400000\nsystem_usec 100000\nnr_periods 40\n"
                                       "nr_throttled 12\nthrottled_usec 250000\nnr_bursts 0\nburst_usec 0\n")
    assert cg.stats(paths) == {"usage_s": 1.5, "nr_periods": 40, "nr_throttled": 12, "throttled_s": 0.25}
    cg.attach(paths, 4242)
    cg.remove(cg.plan("lab1", "h0"))
    assert _leftovers(tmp_path) == []
    assert (root / "cgroup.procs").read_text() == "4242\n"


def test_remove_keeps_other_labs_and_survives_a_crash_before_mkdir(tmp_path):
    cg, k = _v1_separate(tmp_path)
    recorded = []
    for unit in ("h0", "h1"):
        cg.create("lab1", unit, 0.1, record=recorded.extend)
    cg.create("other", "h0", 0.1)
    n = len(recorded)
    with pytest.raises(ValueError):
        cg.create("lab1", "h2", 0.0001, record=recorded.extend)           # an impossible quota: refused first
    assert len(recorded) == n                                              # nothing recorded, nothing made
    recorded += cg.plan("lab1", "h2")        # a crash between recording and the first mkdir: recorded, never made
    Cgroups(V1_SEPARATE, root=tmp_path, ops=k).remove(recorded)            # a later process, from the state
    assert _leftovers(tmp_path) == ["sys/fs/cgroup/cpu/orchestrator", "sys/fs/cgroup/cpu/orchestrator/other",
                                    "sys/fs/cgroup/cpu/orchestrator/other/h0", "sys/fs/cgroup/cpuacct/orchestrator",
                                    "sys/fs/cgroup/cpuacct/orchestrator/other",
                                    "sys/fs/cgroup/cpuacct/orchestrator/other/h0"]
    cg.remove(cg.plan("other", "h0"))
    assert _leftovers(tmp_path) == []


def test_remove_reports_a_lab_dir_with_unlisted_units_after_removing_the_rest(tmp_path):
    cg, _ = _v1_separate(tmp_path)
    a = cg.create("lab1", "h0", 0.1)
    cg.create("lab1", "h1", 0.1)
    with pytest.raises(CgroupError, match=r"orchestrator/lab1 not removed: it holds h1"):
        cg.remove(a)
    assert not any(p.exists() for p in a)
    cg.remove(cg.plan("lab1", "h1"))
    assert _leftovers(tmp_path) == []


def test_kernel_refusal_names_the_file(tmp_path):
    class Refusing(FakeKernel):
        def write(self, path, text):
            if path.name == "cpu.shares":
                raise OSError(errno.EACCES, "Permission denied", str(path))
            super().write(path, text)

    k = Refusing({tmp_path / "sys/fs/cgroup/cpu": "v1-cpu", tmp_path / "sys/fs/cgroup/cpuacct": "v1-acct"})
    cg = Cgroups(V1_SEPARATE, root=tmp_path, ops=k)
    with pytest.raises(CgroupError, match=r"writing '262144' to .*/cpu/orchestrator/cpu\.shares: Permission denied"):
        cg.create("lab1", "h0", 0.1)
    cg.remove(cg.plan("lab1", "h0"))
    assert _leftovers(tmp_path) == []


def test_names_and_foreign_paths_are_refused(tmp_path):
    cg, _ = _v1_separate(tmp_path)
    for bad in ("../x", "a/b", "", "cpu.shares", "tasks", ".hidden"):
        with pytest.raises(ValueError, match="not a plain name"):
            cg.create("lab1", bad, 0.1)
        with pytest.raises(ValueError, match="not a plain name"):
            cg.plan(bad, "h0")
    for foreign in (tmp_path / "sys/fs/cgroup/cpu", tmp_path / "sys/fs/cgroup/cpu/system.slice",
                    tmp_path / "sys/fs/cgroup/cpu/orchestrator/lab1/h0/deeper", Path("/etc")):
        with pytest.raises(ValueError, match="not a directory of ours"):
            cg.remove([foreign])
    assert _leftovers(tmp_path) == []
