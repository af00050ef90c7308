"""``yolo-edge toolchain``: install vendor NPU toolchains in their own pinned environments, and list them.

``yolo-edge toolchain install rknn`` builds Rockchip's rknn-toolkit2 environment once in the user's cache
(``$YOLO_EDGE_TOOLCHAINS``, default ``~/.cache/yolo-edge/toolchains``); the ``rk3588`` profile uses it.
``yolo-edge toolchain list`` says which toolchains are installed and whether their worker starts.
"""

from __future__ import annotations

import argparse
import sys

from yolo_edge.cli.common import print_json, table
from yolo_edge.toolchains import TOOLCHAINS, install_toolchain, toolchain_status


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("toolchain", help="install or list vendor NPU toolchains (rknn)", description=__doc__)
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    inst = actions.add_parser("install", help="build a toolchain's pinned environment (once per version)")
    inst.add_argument("name", choices=sorted(TOOLCHAINS), help="the toolchain")
    inst.add_argument("--python", help="interpreter of the version the toolchain's wheels need (default: found)")
    inst.add_argument("--force", action="store_true", help="rebuild the environment even if it is complete")
    inst.set_defaults(func=install)
    ls = actions.add_parser("list", help="the toolchains, installed or not, and whether they start")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=list_)


def install(args: argparse.Namespace) -> int:
    status = install_toolchain(args.name, python=args.python, force=args.force, say=lambda m: print(m, file=sys.stderr))
    print(f"{status.toolchain.name} {status.toolchain.version}: {'usable' if status.usable else 'NOT usable'}")
    print(f"  {status.detail}")
    return 0 if status.usable else 1


def list_(args: argparse.Namespace) -> int:
    rows = [toolchain_status(tc) for tc in TOOLCHAINS.values()]
    if args.json:
        print_json(
            {
                "toolchains": [
                    {
                        "name": s.toolchain.name,
                        "version": s.toolchain.version,
                        "installed": s.installed,
                        "usable": s.usable,
                        "detail": s.detail,
                        "path": str(s.toolchain.env_dir),
                    }
                    for s in rows
                ]
            }
        )
        return 0
    print(
        table(
            ["toolchain", "version", "installed", "usable", "detail"],
            [
                [
                    s.toolchain.name,
                    s.toolchain.version,
                    "yes" if s.installed else "no",
                    "yes" if s.usable else "no",
                    s.detail,
                ]
                for s in rows
            ],
        )
    )
    return 0
