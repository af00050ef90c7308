"""``yolo-edge toolchain``: install vendor NPU toolchains in their own pinned environments, and list them.

``yolo-edge toolchain install rknn ethos-u`` builds each named toolchain's environment once in the user's cache
(``$YOLO_EDGE_TOOLCHAINS``, default ``~/.cache/yolo-edge/toolchains``): Rockchip's rknn-toolkit2 for the ``rk3588``
profiles, Arm's Vela with the TFLite converter for the ``ethos-u55`` and ``ethos-u65`` profiles.
``yolo-edge toolchain list`` says which toolchains are installed and whether their worker starts.
"""

from __future__ import annotations

import argparse
import sys

from yolo_edge.cli.common import print_json, table
from yolo_edge.core.registry import toolchains
from yolo_edge.toolchains import install_toolchain, toolchain_status


def add_parser(sub: argparse._SubParsersAction) -> None:
    names = ", ".join(toolchains())
    p = sub.add_parser("toolchain", help=f"install or list vendor NPU toolchains ({names})", description=__doc__)
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    inst = actions.add_parser("install", help="build toolchains' pinned environments (once per version)")
    inst.add_argument("names", nargs="+", choices=sorted(toolchains()), metavar="NAME", help=f"toolchains: {names}")
    inst.add_argument("--python", help="interpreter of the version the toolchain's wheels need (default: found)")
    inst.add_argument("--force", action="store_true", help="rebuild the environment even if it is complete")
    inst.set_defaults(func=install)
    ls = actions.add_parser("list", help="the toolchains, installed or not, and whether they start")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=list_)


def install(args: argparse.Namespace) -> int:
    usable = True
    for name in dict.fromkeys(args.names):
        status = install_toolchain(name, python=args.python, force=args.force, say=lambda m: print(m, file=sys.stderr))
        print(f"{status.toolchain.name} {status.toolchain.version}: {'usable' if status.usable else 'NOT usable'}")
        print(f"  {status.detail}")
        usable = usable and status.usable
    return 0 if usable else 1


def list_(args: argparse.Namespace) -> int:
    rows = [toolchain_status(tc) for tc in toolchains().values()]
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
