"""Nothing leaves the machine unless the user asks, and the dependencies keep their noise to themselves: their
telemetry is off in yolo-edge's processes, and their log lines that say nothing to a yolo-edge user are not shown.

Two kinds of switch, both thrown when ``yolo_edge`` is imported, before any runtime initialises:

- **environment switches** (:data:`TELEMETRY_SWITCHES`), read by native code that no Python guard sees:
  onnxruntime >= 1.29 sends 1DS telemetry from its C++ core on Linux (a DNS lookup of Microsoft's events host when
  its first environment is created; ``disable_telemetry_events()`` does not stop it, ``ORT_DISABLE_TELEMETRY=1``
  does); Ray sends usage statistics. They are set in ``os.environ`` (only where the user has not set them: a
  user's own value is kept), so every process yolo-edge starts, toolchain workers and Ray's workers included,
  inherits them.
- **OpenVINO's consent**: ``import openvino`` sends an "import" event to Google Analytics, and NNCF sends usage
  events, through the ``openvino_telemetry`` package, which also writes a client id under ``~/intel``; consent is
  assumed when its consent file is absent. In a process that imports yolo-edge the package answers "declined"
  instead (:func:`no_telemetry`; its consent file, and so the user's other programs, untouched).

To send them anyway, set ``YOLO_EDGE_TELEMETRY=1``: every dependency then behaves as it ships (OpenVINO's own
consent rules apply: ``opt_in_out --opt_in`` / ``--opt_out``). ultralytics checks whether it is online and may send
its own events unless ``YOLO_OFFLINE=1`` (README). ``tests/test_privacy.py`` runs deploy, run, val, check and the
Python predict under ``strace`` in a network namespace of their own, and fails on any DNS lookup or connection
beyond loopback, from Python or native code.
"""

from __future__ import annotations

import logging
import os

TELEMETRY_ENV = "YOLO_EDGE_TELEMETRY"  # "1": leave the dependencies' telemetry as they ship it
# each dependency's own switch, read by its native code or its worker processes
TELEMETRY_SWITCHES = {
    "ORT_DISABLE_TELEMETRY": "1",  # onnxruntime >= 1.29 (onnxruntime-qnn too): 1DS events from its C++ core
    "RAY_USAGE_STATS_ENABLED": "0",  # Ray: usage statistics of clusters it starts
}
# loggers whose warnings are about the dependency's own setup, not the user's model: torch's "No CUDA runtime is
# found" on every CPU-only machine when NNCF or ultralytics imports it
QUIET_LOGGERS = ("torch.utils.cpp_extension",)


def switch_off_telemetry() -> None:
    """Set each of :data:`TELEMETRY_SWITCHES` the user has not set, unless ``YOLO_EDGE_TELEMETRY=1``. Called when
    ``yolo_edge`` is imported; a runtime already initialised in the process (a session the user's program made
    before importing yolo-edge) has read its switch already."""
    if os.environ.get(TELEMETRY_ENV) == "1":
        return
    for name, value in TELEMETRY_SWITCHES.items():
        os.environ.setdefault(name, value)


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
