"""Backends: real runtimes behind one small interface, and a registry by name.

``create_backend(profile)`` builds the accelerator backend a device profile asks for; ``cpu_backend()``
is the FP32 reference and fallback. Vendor SDKs (OpenVINO, RKNNLite) are imported only when their backend
is used; vendor toolchains (rknn-toolkit2) run in their own environment behind a worker process
(``yolo_edge.toolchains``).
"""

from __future__ import annotations

import importlib

from yolo_edge.backends.base import Backend
from yolo_edge.backends.onnxruntime.backend import CPU_EP, OnnxRuntimeBackend
from yolo_edge.core.config import DeviceProfile
from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.core.registry import spec
from yolo_edge.devices.board import BoardCpu


def runtime_backend(profile: DeviceProfile) -> Backend:
    """The backend of ``profile``'s runtime, built by its registered module's ``backend_for(profile)`` (imported
    when first used: a vendor SDK is loaded only by the profiles that need it; ``yolo_edge.core.registry``)."""
    backend: Backend = importlib.import_module(spec(profile.runtime).module).backend_for(profile)
    return backend


def create_backend(profile: DeviceProfile) -> Backend:
    """The accelerator backend of ``profile``: the runtime itself, or a simulated NPU over it (except where the
    profile's own accelerator is present: a bundle for a simulated profile run on its board)."""
    backend = runtime_backend(profile)
    if profile.kind == "simulated" and not backend.on_accelerator:
        from yolo_edge.backends.simulated import SimulatedNpu

        return SimulatedNpu(profile, backend)
    return backend


def board_model(profile: DeviceProfile, backend: Backend | None = None) -> BoardCpu | None:
    """The board's CPU where ``profile``'s board is simulated on this host: every CPU phase of a frame (its CPU
    units, letterbox, NMS) is then modelled for the board, as its accelerator is. None where latency is measured:
    a real device, or the board itself (its accelerator present: ``yolo-edge bench`` there measures). ``backend``:
    the profile's, where one is open (it says); else its runtime module's ``present(profile)`` tells, starting
    nothing (a module without one has no accelerator of its own to find)."""
    if profile.kind != "simulated" or profile.cpu is None:
        return None
    if backend is not None:
        present = backend.on_accelerator
    else:
        module = importlib.import_module(spec(profile.runtime).module)
        present = bool(getattr(module, "present", lambda _p: False)(profile))
    return None if present else BoardCpu(profile.cpu)


def cpu_backend() -> Backend:
    """onnxruntime on the CPU in FP32: the reference and the fallback."""
    return OnnxRuntimeBackend((CPU_EP,))


AUTO_ORDER = ("tensorrt", "cuda", "intel-npu", "host-lowp")


def device_status(profile: DeviceProfile) -> tuple[bool, str, tuple[str, ...]]:
    """Whether ``profile`` can run on this machine, why (not), and which of its precisions this host computes."""
    try:
        with create_backend(profile) as backend:
            return _status(profile, backend)
    except YoloEdgeError as exc:
        return False, str(exc), ()


def _status(profile: DeviceProfile, backend: Backend) -> tuple[bool, str, tuple[str, ...]]:
    name, precisions, where = backend.name, backend.precisions, backend.describe()
    usable = tuple(p for p in profile.precisions if p in precisions)
    missing = [p for p in profile.precisions if p not in usable]
    lacks = f"; {', '.join(missing)}: not computed by {name} on this host, skipped" if missing else ""
    if not usable:
        return False, f"{name} computes none of {list(profile.precisions)} on this host", ()
    if profile.kind == "simulated":
        return True, f"simulated: numerics on {profile.runtime} {where}, latency modelled{lacks}", usable
    return True, f"{profile.runtime} {where} present, latency measured{lacks}", usable


def open_backend(profile: DeviceProfile) -> Backend:
    """``profile``'s accelerator backend, open (the caller closes it), or a one-line error now, before minutes of
    work, when ``profile`` cannot run on this machine: the one a deploy checks is the one it compiles with (a
    vendor's toolchain worker starts once)."""
    try:
        backend = create_backend(profile)
    except YoloEdgeError as exc:
        raise YoloEdgeError(f"device {profile.name} is not usable here: {exc}") from None
    ok, why, _ = _status(profile, backend)
    if not ok:
        backend.close()
        raise YoloEdgeError(f"device {profile.name} is not usable here: {why}")
    return backend


def resolve_device(name: str) -> DeviceProfile:
    """A profile by name or path; ``auto`` is the best real accelerator present (see AUTO_ORDER)."""
    from yolo_edge.core.config import load_profile

    if name != "auto":
        return load_profile(name)
    for candidate in AUTO_ORDER:
        profile = load_profile(candidate)
        if device_status(profile)[0]:
            return profile
    raise YoloEdgeError(
        f"no accelerator found for --device auto (tried {', '.join(AUTO_ORDER)}); pick one with --device"
    )
