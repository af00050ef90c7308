"""Nothing leaves the machine unless the user asks: the dependencies' telemetry is off in yolo-edge's processes.

``import openvino`` sends an "import" event to Google Analytics, and NNCF sends usage events, through the
``openvino_telemetry`` package, which also writes a client id under ``~/intel``; consent is assumed when its
consent file is absent. yolo-edge deploys users' private models, so in a process that imports it the package
answers "declined" instead (its consent file, and so the user's other programs, untouched). To send them anyway,
set ``YOLO_EDGE_TELEMETRY=1`` (then OpenVINO's own consent rules apply: ``opt_in_out --opt_in`` / ``--opt_out``).
ultralytics checks whether it is online and may send its own events unless ``YOLO_OFFLINE=1`` (README).
``tests/test_bad_input.py`` runs the commands under a socket guard that fails on any DNS lookup or connection
beyond loopback.
"""

from __future__ import annotations

import os

TELEMETRY_ENV = "YOLO_EDGE_TELEMETRY"  # "1": leave the dependencies' telemetry as they ship it


def no_telemetry() -> None:
    """Make ``openvino_telemetry`` find no consent in this process (before openvino or nncf is imported)."""
    if os.environ.get(TELEMETRY_ENV) == "1":
        return
    try:
        from openvino_telemetry.utils.opt_in_checker import ConsentCheckResult, OptInChecker
    except ImportError:  # a board install without OpenVINO: nothing to turn off
        return

    def declined(self: OptInChecker, enable_opt_in_dialog: bool, disable_in_ci: bool = False) -> ConsentCheckResult:
        return ConsentCheckResult.DECLINED

    OptInChecker.check = declined
