"""Baseline files as the gate reads them (no compile): an entry without a severity or a file without
its machine is refused with the command that rewrites it, never judged by raw bounds; the machine
record is untrusted input, bounded field by field, and printed escaped."""

from __future__ import annotations

import copy
import json
import shlex
from pathlib import Path

import pytest

from divfuzz.fuzzer.gate.baseline import load_baseline, rewrite_command
from divfuzz.fuzzer.gate.corpus import known_divergences
from divfuzz.fuzzer.gate.machine import MAX_TEXT, describe_machine, machine_rows
from divfuzz.records.errors import BaselineError

ENTRY = {"status": "diverged", "error_type": None, "digest": None,
         "severity": {"severity": "suspect", "rule": "closer-many-ulps", "output": "v4"},
         "outputs": {"v4": {"kind": "float", "dtype": "float32", "numel": 768, "n_diff": 6, "diff_fraction": 6 / 768,
                            "max_ulp": 1, "nan_inf_mismatch": 0, "triage": "compiled-closer"}}}
MACHINE = {"device_type": "cpu", "vendor": "AuthenticAMD", "model": "AMD EPYC 7B13", "capability": "AVX512",
           "isa_flags": ["avx2", "avx512", "avx512_vnni"], "aten_cpu_capability": None, "threads": 2}


def baseline_data(**changes) -> dict:
    data = {"schema_version": 3, "device_type": "cpu", "torch": "2.13", "arch": "avx2", "config": {},
            "machine": copy.deepcopy(MACHINE), "known_buckets": [],
            "specs": {"pointwise-reduction-float32-bwd": copy.deepcopy(ENTRY), "seed-gelu-tanh-bf16": {
                "status": "ok", "error_type": None, "digest": None, "severity": None, "outputs": {}}}}
    data.update(changes)
    return data


def write(folder: Path, data: dict, name: str = "baseline-cpu-2.13-avx2.json") -> Path:
    path = folder / name
    path.write_text(json.dumps(data))
    return path


def test_a_current_baseline_loads_with_its_machine(tmp_path):
    baseline = load_baseline(write(tmp_path, baseline_data()))
    assert baseline.machine == MACHINE
    assert baseline.to_dict()["machine"] == MACHINE and baseline.to_dict()["schema_version"] == 3


def test_an_entry_without_a_severity_is_refused_with_the_command_that_rewrites_the_file(tmp_path):
    data = baseline_data()
    del data["specs"]["pointwise-reduction-float32-bwd"]["severity"]
    path = write(tmp_path, data)
    with pytest.raises(BaselineError) as e:
        load_baseline(path)
    text = str(e.value)
    assert text.startswith(f"{path}: specs pointwise-reduction-float32-bwd record no severity")
    assert "never by raw bounds" in text
    assert text.endswith(f": ATEN_CPU_CAPABILITY=avx2 divfuzz gate --device cpu --corpus {tmp_path} --update-baseline")
    # `corpus prune` reads only which specs diverge: it still reads such a file.
    assert known_divergences(tmp_path) == {"pointwise-reduction-float32-bwd"}


def test_a_schema_2_baseline_without_its_machine_is_refused_with_the_command(tmp_path):
    data = baseline_data(schema_version=2)
    del data["machine"]
    with pytest.raises(BaselineError, match=r"records no machine .*ATEN_CPU_CAPABILITY=avx2 divfuzz gate --device cpu"):
        load_baseline(write(tmp_path, data))
    data["machine"] = MACHINE  # a schema 2 file that has one is read
    assert load_baseline(write(tmp_path, data)).machine == MACHINE


def test_the_rewrite_command_names_the_file_the_config_and_no_capability_on_a_gpu(tmp_path):
    folder = tmp_path / "my corpus"
    folder.mkdir()
    data = baseline_data(device_type="cuda", torch="2.11", arch="sm_90",
                         machine={"device_type": "cuda", "gpu": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0",
                                  "cuda": "12.8", "threads": 16},
                         config={"backend": "inductor", "dynamic": True, "mode": None,
                                 "inductor": {"emulate_precision_casts": True, "cpp.simdlen": 256}})
    baseline = load_baseline(write(folder, data, "elsewhere.json"))
    command = rewrite_command(baseline, folder)
    assert shlex.split(command) == [
        "divfuzz", "gate", "--device", "cuda", "--corpus", str(folder), "--baseline", str(folder / "elsewhere.json"),
        "--backend", "inductor", "--inductor", "cpp.simdlen=256", "--inductor", "emulate_precision_casts=true",
        "--dynamic", "--update-baseline"]


@pytest.mark.parametrize("edit, field", [
    (lambda m: m.update(model="x" * (MAX_TEXT + 1)), "machine.model"),
    (lambda m: m.update(threads=True), "machine.threads"),
    (lambda m: m.update(threads=0), "machine.threads"),
    (lambda m: m.update(isa_flags="avx2 avx512"), "machine.isa_flags"),
    (lambda m: m.update(isa_flags=[1]), "machine.isa_flags"),
    (lambda m: m.pop("vendor"), "machine.vendor"),
    (lambda m: m.update(device_type="cuda"), "machine.device_type"),
    (lambda m: m.update(rootkit="rm -rf"), "machine"),
])
def test_a_bad_machine_record_is_refused_naming_the_field(tmp_path, edit, field):
    data = baseline_data()
    edit(data["machine"])
    path = write(tmp_path, data)
    with pytest.raises(BaselineError) as e:
        load_baseline(path)
    assert str(e.value).startswith(f"{path}: expected ") and field in str(e.value)


@pytest.mark.parametrize("edit", [lambda d: d.update(arch="avx2; rm -rf ~"), lambda d: d.update(torch="2.13 && x"),
                                  lambda d: d.update(device_type="../cpu")])
def test_key_fields_that_would_reach_a_file_name_or_the_command_are_refused(tmp_path, edit):
    data = baseline_data()
    edit(data)
    with pytest.raises(BaselineError, match="matching"):
        load_baseline(write(tmp_path, data))


def test_machines_are_shown_side_by_side_escaped():
    other = dict(MACHINE, model="AMD EPYC 9R14 \x1b[31mred\x07", isa_flags=["avx2", "avx512", "avx512_bf16"])
    rows = {r["field"]: r for r in machine_rows(MACHINE, other)}
    assert rows["model"] == {"field": "model", "baseline": "AMD EPYC 7B13", "current": "AMD EPYC 9R14 \\x1b[31mred\\x07",
                             "differs": True}
    assert rows["isa_flags"]["current"] == "avx2 avx512 avx512_bf16" and rows["isa_flags"]["differs"]
    assert not rows["vendor"]["differs"] and rows["aten_cpu_capability"]["baseline"] == "-"
    assert [r["baseline"] for r in machine_rows(None, other)] == ["unrecorded"] * len(rows)


def test_this_machine_is_described_with_what_inductor_reads():
    import torch

    m = describe_machine("cpu")
    assert m["capability"] == torch.backends.cpu.get_cpu_capability()
    assert m["threads"] == torch.get_num_threads()
    if m["capability"] in ("AVX2", "AVX512"):
        assert "avx2" in m["isa_flags"] and ("avx512" in m["isa_flags"]) == torch.cpu._is_avx512_supported()
    from divfuzz.fuzzer.gate.machine import check_machine  # the record passes the loader's own check

    assert check_machine(m, "cpu", lambda what, value: AssertionError(what, value)) == m
