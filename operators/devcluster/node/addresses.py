"""The addresses of one real node, from its slot: a small number claimed per cluster (see `slots`).

Each real node lives in a network namespace of its own, linked to the host by a veth pair; everything that would
clash between two nodes on one machine (bridge, iptables chains, kubelet ports) is inside the namespace. What
the host sees (the veth's name, its link subnet and the routes to the pod and Service ranges) is keyed by slot:

    link      10.201.<slot>.0/24   host end .1 (the API server advertises it), node end .2 (the node's IP)
    pods      10.202.<slot>.0/24   on the node's CNI bridge, gateway .1
    Services  10.<96+slot>.0.0/16  the API server's Service range; slot 0 keeps Kubernetes' usual 10.96.0.0/16
"""

from __future__ import annotations

from dataclasses import dataclass

SLOTS = 64
NODE_NAME = "kai-system-node"


@dataclass(frozen=True)
class NodeAddresses:
    slot: int
    cluster: str

    def __post_init__(self) -> None:
        if not 0 <= self.slot < SLOTS:
            raise ValueError(f"slot {self.slot} out of range 0..{SLOTS - 1}")

    @property
    def netns(self) -> str:
        return f"kai-dev-{self.cluster}"

    @property
    def host_veth(self) -> str:  # interface names are at most 15 characters: keyed by slot, not by name
        return f"kaidev{self.slot}"

    @property
    def node_veth(self) -> str:  # renamed to eth0 once inside the namespace
        return f"kaidev{self.slot}n"

    @property
    def host_ip(self) -> str:
        return f"10.201.{self.slot}.1"

    @property
    def node_ip(self) -> str:
        return f"10.201.{self.slot}.2"

    @property
    def link_cidr(self) -> str:
        return f"10.201.{self.slot}.0/24"

    @property
    def pod_cidr(self) -> str:
        return f"10.202.{self.slot}.0/24"

    @property
    def pod_gateway(self) -> str:
        return f"10.202.{self.slot}.1"

    @property
    def service_cidr(self) -> str:
        return f"10.{96 + self.slot}.0.0/16"

    @property
    def kubernetes_service_ip(self) -> str:  # the API server gives the first address to `kubernetes.default`
        return f"10.{96 + self.slot}.0.1"

    @property
    def cgroup(self) -> str:  # parent of the node's daemons and of its pods (the kubelet's cgroupRoot)
        return f"kai-dev-{self.cluster}"
