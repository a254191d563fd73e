"""An Ansible inventory (INI or YAML) as the hosts backend's hosts: Ansible reads the file, we map its variables
(orchestrator.hosts.inventory). No root, no SSH."""
from __future__ import annotations

import pytest

from orchestrator.errors import SpecError
from orchestrator.hosts.hostsfile import is_hosts_file
from orchestrator.hosts.inventory import host_entries, hosts_from_inventory
from orchestrator.hosts.inventory import load as load_hosts


@pytest.fixture
def key(tmp_path):
    k = tmp_path / "id_test"
    k.write_text("not a real key; only its existence is checked\n")
    return k


INI = """\
# as users keep them
[web]
elsewhere ansible_host=192.0.2.99

[testbed]
node-b ansible_host=192.0.2.11 ansible_port=2222 testbed_address=10.1.0.11 testbed_member=h0
node-a ansible_host=192.0.2.10 testbed_underlay=10.1.0.10 ansible_user=root

[testbed:vars]
ansible_user=gossip
ansible_ssh_private_key_file={key}
testbed_workdir=/srv/gt
"""

YAML = """\
all:
  vars: {{ansible_ssh_private_key_file: {key}}}
  children:
    testbed:
      children:
        rack1:
          hosts:
            node-b: {{ansible_host: 192.0.2.11}}
            node-a: {{ansible_host: 192.0.2.10, ansible_python_interpreter: /opt/py/bin/python3}}
        rack2:
          hosts:
            node-c: {{ansible_host: 192.0.2.12, testbed_interface: eth1}}
"""


def test_an_ini_inventory_gives_the_testbed_groups_hosts_in_order(tmp_path, key):
    f = tmp_path / "inventory.ini"
    f.write_text(INI.format(key=key))
    assert not is_hosts_file(f.read_text())
    hosts = load_hosts(f)
    assert [(h.name, h.ssh_host, h.ssh_port, h.user, h.address, h.member, h.workdir) for h in hosts] == [
        ("node-b", "192.0.2.11", 2222, "gossip", "10.1.0.11", "h0", "/srv/gt"),
        ("node-a", "192.0.2.10", 22, "root", "10.1.0.10", "", "/srv/gt")]     # the host's own var wins
    assert {h.key for h in hosts} == {str(key.resolve())}


def test_an_inventory_is_parsed_once_until_it_changes(tmp_path, key, monkeypatch):
    from orchestrator.hosts import inventory

    calls = []
    real = inventory.ansible_inventory_list
    monkeypatch.setattr(inventory, "ansible_inventory_list", lambda path: calls.append(path) or real(path))
    f = tmp_path / "inventory.ini"
    f.write_text(INI.format(key=key))
    first = load_hosts(f)
    assert load_hosts(f) == first and len(calls) == 1            # ansible-inventory once (~0.4 s a call)
    f.write_text(INI.format(key=key).replace("192.0.2.11", "192.0.2.99"))
    assert [h.ssh_host for h in load_hosts(f)] == ["192.0.2.99", "192.0.2.10"] and len(calls) == 2


def test_a_yaml_inventory_with_nested_children_and_inherited_vars(tmp_path, key):
    f = tmp_path / "inventory.yml"
    f.write_text(YAML.format(key=key))
    hosts = load_hosts(f)
    assert [(h.name, h.address, h.python, h.interface) for h in hosts] == [
        ("node-b", "192.0.2.11", "/usr/bin/python3", None),
        ("node-a", "192.0.2.10", "/opt/py/bin/python3", None),
        ("node-c", "192.0.2.12", "/usr/bin/python3", "eth1")]
    assert {h.user for h in hosts} == {__import__("getpass").getuser()}      # Ansible's default: who runs it


def test_the_hosts_file_is_still_the_hosts_file():
    assert is_hosts_file("defaults: {user: a}\nhosts:\n  - {name: a, ssh: a, address: 10.0.0.1}\n")
    assert is_hosts_file("hosts: [\n")                  # broken YAML, no INI line: its error is located
    assert not is_hosts_file("a1\na2\n")                 # bare INI host names
    assert not is_hosts_file("all:\n  hosts:\n    a1: {}\n")


def test_inventory_errors_name_the_file_and_the_host(tmp_path, key):
    def err(text: str) -> str:
        f = tmp_path / "inv.ini"
        f.write_text(text)
        with pytest.raises(SpecError) as e:
            load_hosts(f)
        assert str(e.value).startswith(f"{f}: ")
        return str(e.value)

    assert "cannot read it as an INI or YAML inventory" in err("[testbed\nm1 ansible_host=\n")
    assert "the group 'testbed' has no hosts" in err("[testbed]\n[other]\nx ansible_host=192.0.2.1\n")
    assert "host m1: no ansible_ssh_private_key_file" in err("[testbed]\nm1 ansible_host=192.0.2.1\n")
    e = err(f"[testbed]\nm1 ansible_host=box.example ansible_ssh_private_key_file={key}\n")
    assert "host m1: no member address: set testbed_address" in e
    e = err(f"[testbed:vars]\nansible_ssh_private_key_file={key}\n[testbed]\n"
            "m1 ansible_host=192.0.2.1\nm2 ansible_host=192.0.2.2 testbed_address=192.0.2.1\n")
    assert "host m2: address '192.0.2.1' appears twice" in e
    assert "host m1: ansible_port" in err(f"[testbed]\nm1 ansible_host=192.0.2.1 ansible_port=99999 "
                                          f"ansible_ssh_private_key_file={key}\n")


def test_the_mapping_itself_by_hand(tmp_path, key):
    """`ansible-inventory --list` JSON (pure): children recursively, each host once, a template refused."""
    doc = {"_meta": {"hostvars": {"a": {"ansible_host": "192.0.2.1", "ansible_ssh_private_key_file": str(key)},
                                  "b": {"ansible_host": "192.0.2.2", "ansible_ssh_private_key_file": str(key)}}},
           "all": {"children": ["ungrouped", "testbed"]}, "testbed": {"children": ["x", "y"]},
           "x": {"hosts": ["b", "a"]}, "y": {"hosts": ["a"]}}
    assert [e["name"] for e in host_entries(doc, "inv")] == ["b", "a"]
    assert [h.ssh_host for h in hosts_from_inventory(doc, "inv", tmp_path, "root")] == ["192.0.2.2", "192.0.2.1"]
    doc["_meta"]["hostvars"]["a"]["ansible_host"] = "{{ lookup('env', 'X') }}"
    with pytest.raises(SpecError, match="host a: ansible_host is a template"):
        host_entries(doc, "inv")
    no_group = {"_meta": {"hostvars": {}}, "all": {"children": ["ungrouped"]}, "ungrouped": {"hosts": []}}
    with pytest.raises(SpecError, match="no hosts"):
        host_entries(no_group, "inv")
