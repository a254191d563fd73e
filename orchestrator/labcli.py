"""`orchestrator cli LAB`: Mininet's own CLI (`mininet.cli.CLI`) on a running lab, so what users know from `mn`
works on our namespaces: `h1 ping h39` (node names become addresses), `pingall`, `pingpair`, `h3 tcpdump -ni any`,
`nodes`, `dump`, `link h0 h1 down|up` (our live cut and restore), `py net['h1'].cmd('ip route')`, `sh ...`. On a lab
split over machines each node's shell runs on its machine over SSH (`MachineNode`).

Mininet's CLI drives a `Mininet` object; `LabNet` is that object's interface on a lab we built: its nodes are
`NetnsNode`s (a Mininet node whose shell runs in the lab's namespace), started when first named, and its ping
and link commands are Mininet's own (`Mininet.ping`) or our backend's (`set_link`). Commands that need Mininet's
switches, controllers or Intf objects (iperf, xterm, dpctl, switch, ports) say they are not available.
"""
from __future__ import annotations

from mininet.cli import CLI
from mininet.log import output
from mininet.net import Mininet

from orchestrator.backends.mininet import NetnsNode
from orchestrator.errors import OrchestratorError, SpecError
from orchestrator.plan import NetworkPlan
from orchestrator.state import LabState


class _Addr:
    """What Mininet's CLI and ping ask of a node's default interface: its address."""

    def __init__(self, name: str, address: str):
        self.name, self.address = name, address

    def IP(self) -> str:  # noqa: N802 - Mininet's name
        return self.address

    updateIP = IP  # noqa: N815

    def delete(self) -> None:        # the lab's interfaces are the backend's, never Mininet's to delete
        pass

    def __str__(self) -> str:
        return self.name


class LabNode(NetnsNode):
    def __init__(self, name: str, netns_name: str, address: str):
        super().__init__(name, netns_name)
        self.intfs = {0: _Addr(f"{name}-lo", address)}
        self.ports = {}

    def IP(self, intf=None) -> str:  # noqa: N802
        return self.intfs[0].IP()


class MachineNode(LabNode):
    """A node of a lab split over machines (`up --machines`): its shell runs over SSH in the node's namespace on
    its machine (the backend's `popen`: `orchestrator exec LAB NODE` there), its stderr folded into its stdout there
    so the prompt cannot overtake a command's output, the local pseudo-terminal not echoing (the remote shell has
    none to turn echo off on). Ctrl-C does not reach a command there: give commands an end (`ping -c 3`)."""

    def __init__(self, name: str, address: str, backend, state: LabState):
        self.backend, self.state = backend, state
        super().__init__(name, f"{state.lab}-{name}", address)

    def _popen(self, cmd, **params):
        if self.shell is None and cmd and cmd[0] == "mnexec":
            import termios

            fd = params.get("stdin")
            if isinstance(fd, int):
                attrs = termios.tcgetattr(fd)
                attrs[3] &= ~termios.ECHO
                termios.tcsetattr(fd, termios.TCSANOW, attrs)
            argv = ["sh", "-c", 'exec env PS1="$1" bash --norc --noediting -is "$2" 2>&1', "sh", chr(127),
                    f"mininet:{self.name}"]
            # its own process group, as mnexec makes a local shell's: `terminate` hangs it up with killpg
            return self.backend.popen(self.state, self.name, argv, start_new_session=True, **params)
        return super()._popen(cmd, **params)


class LabNet:
    """The part of `mininet.net.Mininet` its CLI uses, on a lab: nodes by name, members as hosts."""

    def __init__(self, state: LabState, plan: NetworkPlan, backend):
        self.state, self.plan, self.backend = state, plan, backend
        self.nameToNode: dict[str, LabNode] = {}
        self.remote = state.backend == "machines"      # each node on its own machine, over SSH
        self.switches, self.controllers, self.links, self.terms = [], [], [], []
        self._names = [n.name for n in plan.nodes]

    def _node(self, name: str) -> LabNode:
        if name not in self.nameToNode:
            if self.remote:
                if name not in self._names:
                    raise KeyError(name)
                self.nameToNode[name] = MachineNode(name, self.plan.node(name).address, self.backend, self.state)
                return self.nameToNode[name]
            ns = f"{self.state.lab}-{name}"
            if ns not in self.state.namespaces:
                raise KeyError(name)
            self.nameToNode[name] = LabNode(name, ns, self.plan.node(name).address)
        return self.nameToNode[name]

    def __contains__(self, name: str) -> bool:
        return name in self._names

    def __getitem__(self, name: str) -> LabNode:
        return self._node(name)

    def get(self, *names):
        nodes = [self._node(n) for n in names]
        return nodes[0] if len(nodes) == 1 else nodes

    def __iter__(self):
        return iter(self._names)

    def keys(self):
        return list(self._names)

    def values(self):                     # the nodes started so far (the CLI waits on these after Ctrl-C)
        return list(self.nameToNode.values())

    def items(self):
        return list(self.nameToNode.items())

    @property
    def hosts(self) -> list[LabNode]:
        return [self._node(m.name) for m in self.plan.members]

    # Mininet's own ping commands, on our nodes.
    ping = Mininet.ping
    pingAll = Mininet.pingAll  # noqa: N815
    pingPair = Mininet.pingPair  # noqa: N815
    _parsePing = staticmethod(Mininet._parsePing)

    def configLinkStatus(self, src: str, dst: str, status: str) -> None:  # noqa: N802
        """`link h0 h1 down|up`: cut both directions of the tree link, or restore them to the plan."""
        if status not in ("up", "down"):
            output(f"link status must be up or down, not {status!r}\n")
            return
        try:
            link = self.plan.link_of(src, dst)
        except Exception:  # noqa: BLE001 - the plan's lookup error: not linked
            output(f"{src} and {dst} are not linked\n")
            return
        try:
            for direction in ("down", "up"):
                params = None if status == "down" else getattr(link, direction)
                self.backend.set_link(self.state, self.plan, link.id, direction, params)
        except OrchestratorError as exc:
            output(f"*** {exc}\n")
            return
        output(f"link {link.id} ({src} - {dst}) {'cut' if status == 'down' else 'restored to the plan'}\n")

    def stop(self) -> None:
        for node in self.nameToNode.values():
            node.terminate()


class LabCLI(CLI):
    prompt = "orchestrator> "

    def onecmd(self, line):
        try:
            return super().onecmd(line)
        except AttributeError as exc:     # a Mininet command needing switches, controllers or Intf objects
            output(f"*** not available on an orchestrator lab: {line.split()[0] if line.split() else line} "
                   f"({exc})\n")
            return False
        except KeyError as exc:
            output(f"*** no node {exc} in this lab\n")
            return False


def open_cli(state: LabState, backend, script: str | None = None) -> None:
    if not state.namespaces and state.backend != "machines":
        raise SpecError(f"lab {state.lab} ({state.backend}) has no network namespaces on this machine: "
                        "`orchestrator cli` works on mininet, docker and machines labs")
    net = LabNet(state, state.load_plan(), backend)
    try:
        LabCLI(net, script=script)
    finally:
        net.stop()
