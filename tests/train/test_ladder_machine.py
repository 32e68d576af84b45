"""Each sitting of a ladder stage records the machine it trained on: the report must not pool two seeds as if
they ran alike when one trained a bfloat16 base on AMX and the other a float32 base elsewhere."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from train.ladder import machine  # noqa: E402


def test_this_machine_is_described_with_its_bf16_units_and_the_base_dtype():
    m = machine.describe("bfloat16")
    assert set(m) == {"cpu", "amx", "avx512_bf16", "cores", "torch", "base_dtype"}
    assert m["cpu"] and m["cores"] >= 1 and m["torch"] == torch.__version__ and m["base_dtype"] == "bfloat16"
    flags = open("/proc/cpuinfo").read()
    assert m["amx"] == (" amx_bf16" in flags) and m["avx512_bf16"] == (" avx512_bf16" in flags)


def test_the_base_dtype_is_that_of_the_frozen_weights():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4).to(torch.bfloat16), torch.nn.Linear(4, 4))
    model[0].requires_grad_(False)  # a LoRA run's base: frozen, here in bfloat16; the adapter trains in float32
    assert machine.base_dtype(model) == "bfloat16"
    assert machine.base_dtype(torch.nn.Linear(2, 2)) == "float32"  # a full fine-tune: every weight trains


def test_a_sitting_is_recorded_once_per_machine_change(tmp_path):
    amd = {"cpu": "AMD EPYC 9R14 96-Core Processor", "amx": False, "base_dtype": "float32"}
    xeon = {"cpu": "Intel(R) Xeon(R) Processor", "amx": True, "base_dtype": "bfloat16"}
    assert machine.read(tmp_path) == []
    for sitting in (amd, amd, xeon, xeon):  # resumed twice on each
        machine.record(tmp_path / "seed0" / "grpo", sitting)
    assert machine.read(tmp_path / "seed0" / "grpo") == [amd, xeon]
    assert json.loads((tmp_path / "seed0" / "grpo" / machine.MACHINE).read_text()) == [amd, xeon]


@pytest.mark.parametrize(("name", "short"), [
    ("Intel(R) Xeon(R) Processor", "Intel Xeon"),
    ("AMD EPYC 9R14 96-Core Processor", "AMD EPYC 9R14 96-Core"),
    ("Intel(R) Core(TM) i7-8650U CPU @ 1.90GHz", "Intel Core i7-8650U"),
])
def test_cpu_names_lose_trademarks_and_filler(name, short):
    assert machine.short_cpu(name) == short


def test_an_evaluation_records_the_cpu_and_comparisons_know_when_two_machines_differ():
    here = machine.evaluating()
    assert set(here) == {"cpu", "amx", "avx512_bf16", "cores"} and here["cpu"] == machine.cpu_name()
    amd = {"cpu": "AMD EPYC 9R14 96-Core Processor", "amx": False, "avx512_bf16": True, "cores": 2}
    xeon = {"cpu": "Intel(R) Xeon(R) Processor", "amx": True, "avx512_bf16": True, "cores": 2}
    assert machine.same_machine(amd, {**amd, "cores": 16}) is True  # cores change speed, not the outputs' kernels
    assert machine.same_machine(amd, xeon) is False and machine.same_machine(amd, None) is None
    assert machine.label(xeon) == "Intel Xeon (AMX)" and machine.label(amd) == "AMD EPYC 9R14 96-Core (no AMX)"
    assert machine.label(None) == "not recorded"
