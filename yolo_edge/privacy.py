"""Nothing leaves the machine unless the user asks, and the dependencies keep their noise to themselves: their
telemetry is off in yolo-edge's processes, and their log lines that say nothing to a yolo-edge user are not shown.

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

import logging
import os

TELEMETRY_ENV = "YOLO_EDGE_TELEMETRY"  # "1": leave the dependencies' telemetry as they ship it
# loggers whose warnings are about the dependency's own setup, not the user's model: torch's "No CUDA runtime is
# found" on every CPU-only machine when NNCF or ultralytics imports it
QUIET_LOGGERS = ("torch.utils.cpp_extension",)


def no_telemetry() -> None:
    """Make ``openvino_telemetry`` find no consent in this process (before openvino or nncf is imported), and
    quiet :data:`QUIET_LOGGERS` (their errors still show)."""
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    if os.environ.get(TELEMETRY_ENV) == "1":
        return
    try:
        from openvino_telemetry.utils.opt_in_checker import ConsentCheckResult, OptInChecker
    except ImportError:  # a board install without OpenVINO: nothing to turn off
        return

    def declined(self: OptInChecker, enable_opt_in_dialog: bool, disable_in_ci: bool = False) -> ConsentCheckResult:
        return ConsentCheckResult.DECLINED

    OptInChecker.check = declined
