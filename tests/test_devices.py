"""Device, dtype and memory decisions, from injected numbers (no GPU needed)."""

import pytest
import torch

from demo.models import devices
from demo.models.devices import Memory, NotEnoughMemory, plan

GiB = 2**30
LLAVA_7B, VICUNA_68M = 7_063_000_000, 68_000_000


def test_cpu_only_machine_runs_in_float32_when_it_fits():
    p = plan(1_000_000, 100_000, Memory((), 8 * GiB))
    assert (p.device, p.dtype, p.spread, p.max_memory) == (torch.device("cpu"), torch.float32, False, None)
    assert p.need == int(1_100_000 * 4 * devices.OVERHEAD) and p.free == 8 * GiB


def test_cpu_refusal_names_what_is_needed_and_what_is_free():
    with pytest.raises(NotEnoughMemory) as error:
        plan(LLAVA_7B, VICUNA_68M, Memory((), 24 * GiB), what="preset 'llava-1.5-7b'")
    assert str(error.value) == (
        "preset 'llava-1.5-7b' needs about 31.9 GiB of RAM in float32 on CPU, but only 24.0 GiB is available"
    )


def test_gpu_machine_runs_on_the_first_gpu_in_bfloat16():
    p = plan(LLAVA_7B, VICUNA_68M, Memory((80 * GiB,), 8 * GiB))
    assert (p.device, p.dtype, p.spread) == (torch.device("cuda:0"), torch.bfloat16, False)
    assert p.summary == "cuda:0, bfloat16, needs 15.9 GiB of 80.0 GiB free"


def test_gpu_without_bfloat16_runs_in_float16():
    assert plan(LLAVA_7B, VICUNA_68M, Memory((24 * GiB,), 8 * GiB, bf16=False)).dtype == torch.float16


def test_gpu_machine_never_falls_back_to_cpu():
    with pytest.raises(NotEnoughMemory) as error:
        plan(LLAVA_7B, VICUNA_68M, Memory((10 * GiB,), 500 * GiB), what="preset 'llava-1.5-7b'")
    assert str(error.value) == (
        "preset 'llava-1.5-7b' needs about 15.9 GiB of GPU memory in bfloat16, but only 10.0 GiB is free on cuda:0"
    )


def test_target_too_large_for_one_gpu_is_spread_over_several_with_room_for_the_drafter():
    p = plan(LLAVA_7B, VICUNA_68M, Memory((10 * GiB, 10 * GiB), 8 * GiB))
    assert (p.device, p.spread, p.free) == (torch.device("cuda:0"), True, 20 * GiB)
    drafter_bytes = int(VICUNA_68M * 2 * devices.OVERHEAD)
    assert p.max_memory == {0: int((10 * GiB - drafter_bytes) / devices.OVERHEAD), 1: int(10 * GiB / devices.OVERHEAD)}
    assert sum(p.max_memory.values()) * devices.OVERHEAD >= LLAVA_7B * 2  # the weights fit in the budgets
    assert p.summary == "2 GPUs, bfloat16, needs 15.9 GiB of 20.0 GiB free"


def test_refusal_across_gpus_gives_the_total():
    with pytest.raises(NotEnoughMemory, match=r"only 6\.0 GiB is free on cuda:0, and 12\.0 GiB across all 2 GPUs$"):
        plan(LLAVA_7B, VICUNA_68M, Memory((6 * GiB, 6 * GiB), 8 * GiB))


def test_load_kwargs_place_target_and_drafters_as_planned():
    cpu = plan(1000, 100, Memory((), GiB))
    one = plan(1000, 100, Memory((GiB,), GiB))
    spread = plan(LLAVA_7B, VICUNA_68M, Memory((10 * GiB, 10 * GiB), GiB))
    assert devices.load_kwargs(cpu) == {"dtype": torch.float32}
    assert devices.load_kwargs(one) == {"dtype": torch.bfloat16, "device_map": "cuda:0"}
    assert devices.load_kwargs(spread) == {
        "dtype": torch.bfloat16,
        "device_map": "auto",
        "max_memory": spread.max_memory,
    }
    assert devices.load_kwargs(spread, drafter=True) == {"dtype": torch.bfloat16, "device_map": "cuda:0"}


def test_probe_reads_this_machine():
    memory = devices.probe()
    assert memory.gpus == (
        tuple(torch.cuda.mem_get_info(i)[0] for i in range(torch.cuda.device_count()))
        if torch.cuda.is_available()
        else ()
    )
    assert 0 < memory.cpu <= devices.available_ram() * 2


def test_load_refuses_a_preset_that_does_not_fit_before_loading_any_weights(tmp_path, monkeypatch):
    import tiny_families

    from demo.models import drafter_loaders, loader

    preset = tiny_families.build("llava", tmp_path / "llava")
    monkeypatch.setitem(loader.PRESETS, preset.name, preset)
    monkeypatch.setattr(devices, "probe", lambda: Memory((), 1000))
    monkeypatch.setattr(
        drafter_loaders, "load_model", lambda *a, **k: pytest.fail("weights loaded despite the refusal")
    )
    with pytest.raises(
        NotEnoughMemory,
        match=r"^preset 'tiny-llava' needs about 0\.0 GiB of RAM in float32 on CPU, "
        r"but only 0\.0 GiB is available$",
    ):
        loader.load(preset.name)
    assert not loader.is_loaded(preset.name)
