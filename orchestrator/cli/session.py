"""Loading the inventory and opening the SSH pool, as every host-touching command does."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.cli.common import SshOptions
from orchestrator.config import HostConfig, Inventory, load_inventory
from orchestrator.errors import ConfigError

if TYPE_CHECKING:
    from orchestrator.transport import ConnectionPool


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


@asynccontextmanager
async def open_pool(inventory: Inventory, ssh: SshOptions) -> AsyncIterator[ConnectionPool]:
    from orchestrator.transport import ConnectionPool  # asyncssh: only when a host is reached

    known_hosts = ssh.known_hosts or getattr(inventory, "known_hosts", None)
    ssh_config = getattr(inventory, "ssh_config", None)
    kwargs = {"known_hosts": Path(known_hosts).expanduser() if known_hosts else None,
              "accept_new_host_keys": ssh.accept_new_host_keys}
    if ssh_config:
        kwargs["ssh_config"] = [str(Path(ssh_config).expanduser())]
    pool = ConnectionPool(**kwargs)
    try:
        yield pool
    finally:
        await pool.close()
