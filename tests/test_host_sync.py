"""One host synchronisation per speculative round, counted on a CPU.

A GPU waits for the host only where a value on the device is read back. On a CPU nothing waits,
but the reads are the same calls, so this counts them: `host_reads` wraps every way a tensor's
value reaches Python (`item`, `tolist`, `int()`, `float()`, `bool()`, `__index__`, `numpy`,
`__array__`, `cpu()`) and, through a dispatch mode, the operators that read back
through the dispatcher (`_local_scalar_dense`, and `nonzero` / `masked_select`, which boolean
indexing runs). Each read is recorded where it happened
in the project's code. A round must read exactly once, at its one transfer in `speculative.py`.

What it cannot see: `.to(device)` (on a CPU every device is the CPU, so a copy back cannot be
told from a no-op; the engine has none), and synchronisations inside CUDA kernels' host code
that never reach the dispatcher on a CPU. `python -m demo.lab.bench.gpu_check` counts those on a GPU with
`torch.cuda.set_sync_debug_mode`.
"""

import contextlib
import inspect
import sys
from pathlib import Path

import pytest
import torch
from races import CASES, GREEDY
from torch.utils._python_dispatch import TorchDispatchMode

from demo.engine import lean, speculative
from demo.engine.decoding import Target
from demo.engine.drafters import Drafting, DraftState
from demo.engine.layerskip import LayerSkipDrafter, LayerSkipState
from demo.engine.lookup import PromptLookup, PromptLookupState
from demo.engine.sampling import Sampling, sample

DEMO = str(Path(speculative.__file__).resolve().parents[1])  # .../demo
METHODS = ("item", "tolist", "__int__", "__float__", "__bool__", "__index__", "numpy", "__array__", "cpu")
READING_OPS = ("_local_scalar_dense", "nonzero", "masked_select")
SAMPLING = Sampling(greedy=False, temperature=0.8, top_k=20, seed=0)


def _where() -> str:
    """The innermost project frame of the current stack: 'engine/speculative.py:123 <source line>'."""
    frame = sys._getframe(2)
    while frame is not None and not frame.f_code.co_filename.startswith(DEMO):
        frame = frame.f_back
    if frame is None:
        return "outside the project"
    info = inspect.getframeinfo(frame)
    line = (info.code_context or [""])[0].strip()
    return f"{frame.f_code.co_filename[len(DEMO) + 1 :]}:{info.lineno} {line}"


class _ReadingOps(TorchDispatchMode):
    def __init__(self, reads: list):
        super().__init__()
        self.reads = reads

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.__name__.split(".")[0] in READING_OPS:
            self.reads.append(("op " + func.__name__, _where()))
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def host_reads():
    """Record every read of a tensor's value by the host, as (what, where) pairs."""
    reads: list[tuple[str, str]] = []
    originals = {name: getattr(torch.Tensor, name) for name in METHODS}
    inside = [False]  # a read inside another (tolist calling item) is one read

    def counted(name):
        original = originals[name]

        def method(self, *args, **kwargs):
            if inside[0]:
                return original(self, *args, **kwargs)
            reads.append((name, _where()))
            inside[0] = True
            try:
                return original(self, *args, **kwargs)
            finally:
                inside[0] = False

        return method

    for name in METHODS:
        setattr(torch.Tensor, name, counted(name))
    try:
        with _ReadingOps(reads):
            yield reads
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)


def rounds_read(
    world,
    drafter,
    sampling: Sampling,
    *,
    gamma: int = 4,
    rounds: int = 3,
    min_confidence: float = 0.0,
    target: Target | None = None,
):
    """Each round's host reads, for the first `rounds` rounds of a run of `drafter` (a Drafter)
    with the world's target (or `target`)."""
    target = target or world.target
    image, question = CASES[1]
    if drafter.name in world.drafters:
        prompt = world.prompt(image, question, drafter.name)
    else:  # layer-skip and prompt lookup read the target's own prompt
        inputs = world.prompt(image, question).target_inputs
        prompt = speculative.Prompt(inputs, inputs)
    start = speculative.run_start(
        target, drafter, gamma=gamma, sampling=sampling, max_new_tokens=64, min_confidence=min_confidence
    )
    state, drafting, _, _ = speculative._prefill(target, prompt, start, torch.Generator().manual_seed(0), drafter)
    out = []
    for index in range(1, rounds + 1):
        with host_reads() as reads:
            speculative.speculative_round(state, drafting, index)
        out.append(reads)
        if state.stop:
            break
    return out


def drafter_named(world, name: str):
    if name == "lean-torch":  # LeanLM's torch step: on a GPU the same code replays as a CUDA graph
        return lean.on_path(world.drafter("text-partly"), "lean-torch")
    if name == "prompt-lookup":
        return PromptLookup(
            name="prompt-lookup",
            target_vocab_size=world.target.vocab_size,
            stop_ids=world.target.stop_ids,
            blocked_ids=world.placeholder_ids(),
            device=world.device,
        )
    if name == "layer-skip":
        return LayerSkipDrafter(
            world.target.model,
            skip=(1,),
            name="layer-skip",
            target_vocab_size=world.target.vocab_size,
            stop_ids=world.target.stop_ids,
            blocked_ids=world.placeholder_ids(),
        )
    return world.drafter(name)


@pytest.mark.parametrize("sampling", [GREEDY, SAMPLING], ids=["greedy", "sampling"])
@pytest.mark.parametrize("name", ["text-partly", "image-partly", "lean-torch", "layer-skip", "prompt-lookup"])
def test_a_round_reads_the_device_once_at_its_transfer(world, name, sampling):
    per_round = rounds_read(world, drafter_named(world, name), sampling)
    assert len(per_round) == 3
    for reads in per_round:
        assert len(reads) == 1, reads
        what, where = reads[0]
        assert what == "tolist" and where.startswith("engine/speculative.py:") and "record.tolist()" in where


@pytest.mark.parametrize("sampling", [GREEDY, SAMPLING], ids=["greedy", "sampling"])
def test_a_round_on_the_lean_target_reads_the_device_once(world, sampling):
    t = world.target
    target = Target(t.model, t.tokenizer, name=t.name, stop_ids=t.stop_ids, lean=True)
    assert target.path == "lean", target.lean.fallback_reason
    for reads in rounds_read(world, drafter_named(world, "lean-torch"), sampling, target=target):
        assert len(reads) == 1 and "record.tolist()" in reads[0][1], reads


def test_adaptive_drafting_reads_once_per_draft_step_so_the_count_can_fail(world):
    """The negative control: a confidence threshold reads q's top probability before each draft
    after the first; the same counter sees every one of those reads."""
    per_round = rounds_read(world, world.drafter("image-always"), GREEDY, gamma=4, min_confidence=1e-9)
    for reads in per_round:
        steps = [where for what, where in reads if "float(q.max())" in where]
        assert len(steps) == 3  # steps 2, 3 and 4 of gamma 4 (a threshold this low never stops it)
        assert len(reads) == 4 and "record.tolist()" in reads[-1][1]


def test_sample_reads_nothing_back_and_draws_what_torch_multinomial_draws():
    """Why `sampling.sample` is not torch.multinomial: on a GPU the latter's validity check reads a
    value back, a synchronisation at every draft; both draw the same ids from the same generator."""
    probs = torch.softmax(torch.randn(3, 1000, generator=torch.Generator().manual_seed(1)), -1)
    probs[:, ::3] = 0
    g1, g2 = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    with host_reads() as reads:
        drawn = sample(probs, g1)
    assert reads == []
    expected = torch.multinomial(probs, 1, generator=g2)[:, 0]
    assert torch.equal(drawn, expected) and torch.equal(g1.get_state(), g2.get_state())
    for seed in range(200):  # and over many draws
        g1, g2 = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        assert torch.equal(sample(probs, g1), torch.multinomial(probs, 1, generator=g2)[:, 0])


def test_every_drafting_state_satisfies_the_drafting_protocol(world):
    image, question = CASES[0]
    states = {
        DraftState: world.drafter("text-partly").start(world.prompt(image, question, "text-partly").drafter_inputs),
        lean.LeanDraftState: drafter_named(world, "lean-torch").start(
            world.prompt(image, question, "text-partly").drafter_inputs
        ),
        LayerSkipState: drafter_named(world, "layer-skip").start(world.prompt(image, question).target_inputs),
        PromptLookupState: drafter_named(world, "prompt-lookup").start(world.prompt(image, question).target_inputs),
    }
    for kind, state in states.items():
        assert type(state) is kind and isinstance(state, Drafting)
        for call in ("propose", "draft", "rollback"):
            want = list(inspect.signature(getattr(Drafting, call)).parameters)[1:]
            assert list(inspect.signature(getattr(state, call)).parameters) == want, (kind, call)
