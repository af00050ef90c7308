"""Arm Ethos-U through Vela (``yolo-edge toolchain install ethos-u``): the seed's three plans on a microcontroller NPU
(the whole graph refused by Vela's SRAM report, the split proven), Vela's memory report compared with the board's
budget, the tensor map between ONNX and TFLite, and the board's LiteRT delegate (FAKED: no Ethos-U here)."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from yolo_edge.backends import create_backend, runtime_backend
from yolo_edge.backends.base import NpuCompileError, NpuError, NpuOutOfMemory, io_infos
from yolo_edge.backends.ethos_u.backend import EthosUBackend, EthosUBoardBackend, EthosUExecutable
from yolo_edge.backends.ethos_u.spec import TFLITE_IO_SUFFIX, TFLITE_SUFFIX, VELA_SUFFIX
from yolo_edge.core.config import load_profile
from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.model.split import SplitModel
from yolo_edge.plan.checks import cosine
from yolo_edge.plan.placement import PlacementPlan


def _feeds(split: SplitModel, part: str, tensors: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    names = [t.name for t in io_infos(split[part].model)[0]]
    return [{n: t[n] for n in names} for t in tensors]


def test_vela_reports_the_decodes_sram_and_the_board_budget_refuses_it(
    demo_split: SplitModel,
    tensors: list,  # type: ignore[type-arg]
) -> None:
    """The decode's DFL softmax is the SRAM peak: Vela reports it and exits 0 (its default core does not refuse an
    overrun with shared SRAM), so the budget is compared here. The same .tflite fits a board with twice the SRAM,
    and on the U65 with dedicated SRAM Vela keeps within the 384 KiB cache; converting it again for the U65 reads
    the conversion from the cache."""
    u55 = load_profile("ethos-u55")
    decode = demo_split["decode"].model
    with EthosUBackend(u55) as backend:
        data, _ = backend.convert(decode, "w8a8", _feeds(demo_split, "decode", tensors[:4]))
        report, built = backend.vela(data)
        assert report["cpu_ops"] == 0 and report["npu_ops"] > 20 and built[4:8] == b"TFL3"
        assert report["sram_kib"] > u55.sram_kb  # type: ignore[operator]
        refused = backend.refusal(report)
        assert isinstance(refused, NpuOutOfMemory)
        assert f"{report['sram_kib']:.0f} KiB of SRAM used > the board's 2048 KiB" in str(refused)
    with EthosUBackend(replace(u55, sram_kb=4096)) as roomy:
        assert roomy.refusal(report) is None
    with EthosUBackend(load_profile("ethos-u65")) as u65:
        cached, _ = u65.vela(data)
        assert cached["sram_kib"] <= 384 and u65.refusal(cached) is None
        # another profile converts nothing twice: the same graph and calibration come from the user's cache
        asked: list[str] = []
        call = u65._call
        u65._call = lambda op, args, what: asked.append(op) or call(op, args, what)  # type: ignore[method-assign]
        again, io = u65.convert(decode, "w8a8", _feeds(demo_split, "decode", tensors[:4]))
        assert again == data and asked == [] and len(io.outputs) == len(decode.graph.output)


def test_a_unit_runs_as_compiled_from_what_a_bundle_stores(
    demo_split: SplitModel,
    tensors: list,  # type: ignore[type-arg]
) -> None:
    """The neck (three inputs and outputs, channels-last in the .tflite): the tensor map puts each ONNX tensor where
    the .tflite has it, in its axis order; the unit's modelled time is Vela's estimate, through the simulated NPU
    too; reloaded from its stored files it gives the same outputs; a damaged map is one line, not a crash; the
    toolchain worker is the backend's and ends with it."""
    neck, feeds = demo_split["neck"].model, _feeds(demo_split, "neck", tensors)
    profile = load_profile("ethos-u55")
    with create_backend(profile) as backend:
        exe = backend.compile(neck, "int8/w8a8/tflite", feeds[:4])
        inner = exe.inner  # type: ignore[attr-defined]
        assert isinstance(inner, EthosUExecutable)
        assert exe.modelled_s == inner.modelled_s == pytest.approx(inner.vela["inference_s"])
        assert {perm for _, perm in inner.io.inputs} == {(0, 2, 3, 1)}  # onnx2tf's tensors are channels-last
        assert {perm for _, perm in inner.io.outputs} == {(0, 3, 1, 2)}
        out = exe.run(feeds[5])
        assert all(cosine(out[n], tensors[5][n]) >= 0.9 for n in out)
        stored = exe.artifact_files()
        assert set(stored) == {TFLITE_SUFFIX, VELA_SUFFIX, TFLITE_IO_SUFFIX}
        again = backend.compile(neck, "int8/w8a8/tflite", None, stored).run(feeds[5])
        assert all(np.array_equal(again[n], out[n]) for n in out)
        for damage in (b"{", json.dumps({"inputs": [[0, [0, 1, 2, 3]]] * 3, "outputs": []}).encode()):
            with pytest.raises(YoloEdgeError, match=r"tflite\.json"):
                backend.compile(neck, "int8/w8a8/tflite", None, {**stored, TFLITE_IO_SUFFIX: damage})
        worker = backend.numerics.worker  # type: ignore[attr-defined]
        pid = worker.pid
        assert pid is not None
    with pytest.raises(ProcessLookupError):  # the backend's own worker ended with it
        os.kill(pid, 0)


class _FakeEthosU:
    """FAKED: LiteRT's Ethos-U delegate, which needs the NPU. It records the library it was loaded from; the fake
    interpreter below runs the unit's plain .tflite on LiteRT's reference kernels instead of the NPU (which Arm states
    computes them bit-exactly)."""

    def __init__(self, library: str) -> None:
        self.library = library


def test_the_board_runs_the_vela_units_through_the_delegate(
    demo_split: SplitModel,
    tensors: list,  # type: ignore[type-arg]
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On the board (the profile's NPU device node exists) the unit's _vela.tflite is loaded with the profile's
    delegate library, no toolchain needed; the outputs are the host's; a failing call is an NpuError (the executor
    re-runs the frame on the CPU); a bundle without the Vela build says how to make one."""
    import ai_edge_litert.interpreter as litert

    head, feeds = demo_split["head"].model, _feeds(demo_split, "head", tensors)
    host = load_profile("ethos-u55")
    with EthosUBackend(host) as backend:
        exe = backend.compile(head, "int8/w8a8/tflite", feeds[:4])
        stored, expected = exe.artifact_files(), exe.run(feeds[5])
    plain, loaded, fail = stored[TFLITE_SUFFIX], [], []
    real = litert.Interpreter

    def interpreter(model_content: bytes, experimental_delegates: list[Any] | None = None, **kw: Any) -> Any:
        (delegate,) = experimental_delegates or [None]
        assert isinstance(delegate, _FakeEthosU) and model_content == stored[VELA_SUFFIX]
        loaded.append(delegate.library)
        lite = real(model_content=plain, experimental_op_resolver_type=litert.OpResolverType.BUILTIN_REF)
        invoke = lite.invoke

        def on_the_npu() -> None:
            if fail:
                raise RuntimeError("ethos-u: inference failed")
            invoke()

        lite.invoke = on_the_npu
        return lite

    monkeypatch.setattr(litert, "load_delegate", _FakeEthosU)
    monkeypatch.setattr(litert, "Interpreter", interpreter)
    (tmp_path / "ethosu0").touch()
    board = replace(host, runtime_options=replace(host.runtime_options, device=str(tmp_path / "ethosu0")))
    with runtime_backend(board) as on_board:
        assert isinstance(on_board, EthosUBoardBackend) and on_board.on_accelerator
        unit = on_board.compile(head, "int8/w8a8/tflite", None, stored)
        got = unit.run(feeds[5])
        assert loaded == ["libethosu_delegate.so"] and all(np.array_equal(got[n], expected[n]) for n in expected)
        fail.append(True)
        with pytest.raises(NpuError, match="inference failed"):
            unit.run(feeds[5])
        with pytest.raises(NpuCompileError, match="toolchain install ethos-u"):
            on_board.compile(head, "int8/w8a8/tflite", None, {TFLITE_SUFFIX: plain})


@pytest.mark.slow
def test_deploy_to_ethos_u55_gives_the_seeds_three_plans(small_deploy) -> None:  # type: ignore[no-untyped-def]
    """`yolo-edge deploy --device ethos-u55` on the demo: the whole graph does not fit the board's SRAM (Vela's
    report) and its single output loses the class scores; the split runs backbone, neck and head on the NPU in
    INT8 and passes; the design card's layout (head FP32 on the Cortex-M) is judged beside it; the bundle stores
    each NPU unit's .tflite, its Vela build and its tensor map."""
    result = small_deploy("ethos-u55")
    assert (result.bundle.parent / "workers_started").read_text() == "1"  # the one backend it checked, compiled with
    report = result.report.to_dict()
    rows = {p["name"]: p for p in report["plans"]}
    split = PlacementPlan.from_dict(report["split_plan"])
    whole = split.whole_graph_npu
    assert "memory" in rows["whole-npu"]["fails"] and "KiB of SRAM used > the board's 2048 KiB" in whole.reason
    # and, had it fit, its precision: judged on what Vela built before refusing it, not compiled again
    precision = whole.checks["precision"]
    assert precision.passed is False and precision.reason.startswith("had it fit"), precision.reason
    assert "fails precision had it fit" in whole.reason and rows["whole-npu"]["status"] == "fails memory, precision"
    assert rows["split"]["status"] == "ok" and rows["split"]["latency"]["kind"] == "modelled (board)"
    assert [split[s].device for s in ("backbone", "neck", "head", "decode")] == ["npu", "npu", "npu", "cpu"]
    assert all(split[s].variant.quantizer == "tflite" for s in ("backbone", "neck", "head"))
    search = report["search"]
    card = search["trials"][search["card_layout"] - 1]
    assert "head=cpu/fp32" in card["placement"] and "head on the accelerator" in search["card_line"]
    units = sorted(p.name for p in (result.bundle / "units").iterdir())
    npu = [n.removesuffix(VELA_SUFFIX) for n in units if n.endswith(VELA_SUFFIX)]
    assert npu and all(f"{n}{s}" in units for n in npu for s in (TFLITE_SUFFIX, TFLITE_IO_SUFFIX))
    assert b"ethos-u" in (result.bundle / "units" / f"{npu[0]}{VELA_SUFFIX}").read_bytes()
