"""Config and device profiles: shipped files load; bad ones are one-line errors naming key and file."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from yolo_edge.backends import create_backend, device_status, resolve_device
from yolo_edge.cli.main import main
from yolo_edge.core.config import configs_dir, load_deploy_config, load_profile, profile_names
from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.core.registry import backends


def test_shipped_profiles_load() -> None:
    names = profile_names()
    assert all(load_profile(name).name == name for name in names)
    assert {load_profile(name).runtime for name in names} == set(backends())  # each registered runtime has one
    sim = load_profile("sim-edge-npu")
    assert (sim.memory_mb, sim.sram_kb, sim.precisions, sim.latency) == (4096, 4096, ("int8", "fp16"), "modelled")
    assert load_deploy_config().checks.performance.max_ratio == 1.5


def _profile_yaml(tmp_path: Path, **changes: object) -> Path:
    data = yaml.safe_load((configs_dir() / "devices" / "sim-edge-npu.yaml").read_text())
    for key, value in changes.items():
        if value is None:
            data.pop(key)
        else:
            data[key] = value
    path = tmp_path / "dev.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


PROFILE_ERRORS = [
    ({"colour": "red"}, "unknown key 'colour'"),
    ({"memory_mb": "lots"}, "memory_mb: expected a number"),
    ({"precisions": "int8"}, "precisions: expected a list"),
    ({"precisions": ["int4"]}, r"precisions\[0\]: must be one of fp32, fp16, bf16, int8, got 'int4'"),
    ({"precisions": []}, "precisions must be a non-empty list"),
    ({"runtime": "tflite"}, f"runtime: must be one of {', '.join(backends())}, got 'tflite'"),
    ({"latency": "guessed"}, "latency: must be one of measured, modelled"),
    ({"kind": 3}, "kind: must be one of real, simulated, cpu, got 3"),
    ({"link": {"gbps": 1}}, "link: missing key 'latency_us'"),
    ({"op_support": {"mode": "some"}}, "op_support.mode must be all, list or query"),
    ({"name": None}, "missing key 'name'"),
    ({"cpu": None}, "modelled profile needs a 'cpu' section"),
    ({"faults": {"error_rate": 0.9, "nan_rate": 0.5}}, "must not exceed 1"),
]


@pytest.mark.parametrize(("changes", "message"), PROFILE_ERRORS, ids=[m for _, m in PROFILE_ERRORS])
def test_profile_validation(tmp_path: Path, changes: dict[str, object], message: str) -> None:
    path = _profile_yaml(tmp_path, **changes)
    with pytest.raises(YoloEdgeError, match=message) as err:
        load_profile(path)
    assert "\n" not in str(err.value)
    if "unknown key" in message or "expected" in message:
        assert str(path) in str(err.value)


def test_unknown_device_lists_valid_names() -> None:
    with pytest.raises(YoloEdgeError, match="unknown device 'npu9000'; valid: auto, cpu, cuda, .*host-lowp"):
        load_profile("npu9000")


def test_deploy_config_rejects_unknown_and_bad_values(tmp_path: Path) -> None:
    data = yaml.safe_load((configs_dir() / "default.yaml").read_text())
    data["checks"]["precision"]["min_cosin"] = 0.9
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(YoloEdgeError, match=r"checks\.precision: unknown key 'min_cosin'"):
        load_deploy_config(bad)
    data = yaml.safe_load((configs_dir() / "default.yaml").read_text())
    data["checks"]["order"] = ["memory", "precision"]
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(YoloEdgeError, match="checks.order must list each"):
        load_deploy_config(bad)
    data = yaml.safe_load((configs_dir() / "default.yaml").read_text())
    data["validate"]["conditions"] = ["night", "fog"]
    data["runtime"]["audit_action"] = "alert"  # a good value beside the bad one
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(YoloEdgeError, match=r"validate\.conditions\[1\]: must be one of dark, night, .*, got 'fog'"):
        load_deploy_config(bad)
    data["validate"]["conditions"], data["runtime"]["audit_failures"] = ["night"], 11
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(YoloEdgeError, match=r"audit_failures \(11\) cannot exceed audit_window \(10\)"):
        load_deploy_config(bad)


def test_device_availability_here() -> None:
    assert device_status(load_profile("cpu"))[0]
    assert device_status(load_profile("host-lowp"))[0]  # OpenVINO's CPU plugin is always present
    ok, why, _ = device_status(load_profile("cuda"))
    if not ok:
        assert "CUDAExecutionProvider is not available" in why
    # the truth per precision: what the simulated NPU's numerics backend really computes here
    sim = load_profile("sim-edge-npu")
    ok, why, usable = device_status(sim)
    computes = create_backend(sim).precisions
    assert ok and "int8" in usable and set(usable) == set(sim.precisions) & set(computes)
    assert ("fp16: not computed" in why) == ("fp16" not in usable)
    assert resolve_device("auto").name in ("tensorrt", "cuda", "intel-npu", "host-lowp")


def test_devices_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    assert "sim-edge-npu" in out and "auto ->" in out


def test_a_config_file_sets_only_what_it_changes(tmp_path: Path) -> None:
    """``validate: {max_drift: 0.02}`` alone is a whole config: the rest is the shipped default's; an unknown key or
    a value out of range in it is still one line naming it in that file. A bundle's own deploy.yaml stays strict."""
    from yolo_edge.core.config import load_stored_config

    default = load_deploy_config()
    mine = tmp_path / "mine.yaml"
    mine.write_text("validate:\n  max_drift: 0.02\n")
    cfg = load_deploy_config(mine)
    assert cfg.validate.max_drift == 0.02 and cfg.validate.sla_ms == default.validate.sla_ms
    assert cfg.calib_images == default.calib_images and cfg.nms == default.nms
    for text, said in (
        ("validate:\n  max_drif: 0.02\n", "unknown key 'max_drif'"),
        ("calib_images: -3\n", "mine.yaml"),
    ):
        mine.write_text(text)
        with pytest.raises(YoloEdgeError, match=said):
            load_deploy_config(mine)
    mine.write_text("validate:\n  max_drift: 0.02\n")
    with pytest.raises(YoloEdgeError, match="missing key"):
        load_stored_config(mine)


def test_deploy_takes_its_drift_limit_on_the_command_line() -> None:
    from yolo_edge.flows.deploy import deploy_settings

    assert deploy_settings(None, None, 0.03).validate.max_drift == 0.03
    for bad in (1.5, float("nan")):
        with pytest.raises(YoloEdgeError, match="--max-drift must be between 0 and 1"):
            deploy_settings(None, None, bad)
