"""Loading the inventory and opening the SSH pool, as every host-touching command does."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.config import HostConfig, Inventory, load_inventory
from orchestrator.config.inventory import DEFAULT_SSH_CONFIG
from orchestrator.errors import ConfigError

if TYPE_CHECKING:
    from orchestrator.transport import ConnectionPool
    from orchestrator.transport.inprocess import EmbeddedHosts


@dataclass(frozen=True)
class SshOptions:
    """How host keys are checked (the command line's --known-hosts, --accept-new-host-keys)."""

    known_hosts: Path | None = None
    accept_new_host_keys: bool = False


def load_hosts(hosts_file: Path, only: list[str] | None) -> tuple[Inventory, list[HostConfig]]:
    if not hosts_file.exists():
        raise ConfigError(
            "inventory file not found",
            file=str(hosts_file),
            hint="create hosts.yaml (see README: 'Describe your hosts') or pass --hosts FILE",
        )
    inventory = load_inventory(hosts_file)
    hosts = inventory.select(only or None)
    return inventory, hosts


def ssh_config_files(inventory: Inventory) -> list[str]:
    """The OpenSSH client config to honour: none when the default ~/.ssh/config does not exist
    (as OpenSSH), an error when a file named in hosts.yaml does not."""
    path = inventory.ssh_config
    if path is None:
        return []
    if path.exists():
        return [str(path)]
    if path == Path(DEFAULT_SSH_CONFIG).expanduser():
        return []
    raise ConfigError(
        f"ssh_config {path} does not exist",
        file=str(inventory.source_path) if inventory.source_path else None,
        path="ssh_config",
        hint="fix the path, or remove `ssh_config:` to use ~/.ssh/config when it exists",
    )


@asynccontextmanager
async def open_pool(inventory: Inventory, ssh: SshOptions) -> AsyncIterator[ConnectionPool]:
    from orchestrator.transport import ConnectionPool  # asyncssh: only when a host is reached

    known_hosts = ssh.known_hosts or inventory.known_hosts
    pool = ConnectionPool(
        known_hosts=Path(known_hosts).expanduser() if known_hosts else None,
        accept_new_host_keys=ssh.accept_new_host_keys,
        ssh_config=ssh_config_files(inventory),
        embedded=simulated_hosts,
    )
    try:
        yield pool
    finally:
        await pool.close()


def simulated_hosts() -> EmbeddedHosts:
    """The servers of ``transport: embedded`` hosts: orch's simulator, the one place the product
    reaches it (``SIM_ENTRY_POINTS``). Imported only when a pool meets such a host, so a
    command on SSH hosts alone never loads it."""
    from orchestrator.sim.embedded import SimulatedHosts

    return SimulatedHosts()
