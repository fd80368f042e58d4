"""``kudu-node``: parse flags, claim the data directory, then run the chosen role on uvloop.

This is the one module that names both roles: it sits above master and tserver only to pick between
them (through ``ROLE_CLASSES``, imported lazily so a tserver never loads master code).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

import uvloop

from kudu_async.common.errors import KuduBadStatus, KuduConfigurationError
from kudu_async.fs.fs_manager import FsManager
from kudu_async.server.config import NodeConfig, load_config
from kudu_async.server.logs import setup_logging
from kudu_async.server.node import Node, tune_malloc

ROLE_CLASSES = {
    "master": "kudu_async.master.master:Master",
    "tserver": "kudu_async.tserver.tablet_server:TabletServer",
}


def role_class(role: str) -> type[Node]:
    module_name, _, cls_name = ROLE_CLASSES[role].partition(":")
    cls: type[Node] = getattr(importlib.import_module(module_name), cls_name)
    return cls


async def _run(config: NodeConfig, fs: FsManager) -> None:
    node = role_class(config.role)(config, fs)
    await node.run_until_signalled()


def main(argv: Sequence[str] | None = None) -> int:
    tune_malloc()
    try:
        config = load_config(argv)
    except KuduConfigurationError as e:
        print(f"kudu-node: {e.message}", file=sys.stderr)
        return 2
    if config.role == "master" and len(config.masters) not in (1, 3, 5):
        print(
            f"kudu-node: --master-addresses lists {len(config.masters)} masters; a master quorum needs 1, 3 or 5 "
            "(an even count tolerates no more failures than the odd count below it)",
            file=sys.stderr,
        )
        return 2
    fs = FsManager(config.data_dir, config.role)
    try:
        meta = fs.open_or_create(lock=True)
    except KuduBadStatus as e:
        print(f"kudu-node: cannot start: {e}", file=sys.stderr)
        return 1
    setup_logging(config.log_level, {"role": config.role, "uuid": meta.uuid}, config.log_file)
    try:
        uvloop.run(_run(config, fs))
    except OSError as e:  # e.g. address already in use
        print(f"kudu-node: cannot start: {e}", file=sys.stderr)
        return 1
    except KuduConfigurationError as e:  # a check that needs the running process (its memory baseline)
        print(f"kudu-node: {e.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
