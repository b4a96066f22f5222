"""The three hub families (LLaVA, Qwen2.5-VL, Idefics3/SmolVLM) through the preset loading path.

Tiny random-weight models of each architecture are saved as their hub repos are and loaded with
`demo.models.loader.load`, the code path of the real presets (only the directory differs). Greedy
speculative decoding must equal the target's own `generate`, token for token.
"""

import pytest
import tiny
import tiny_families
import torch

from demo.engine.events import Trace
from demo.engine.sampling import Sampling
from demo.engine.speculative import Prompt, Target, autoregressive_generate, speculative_generate
from demo.models import drafter_loaders, loader
from demo.models.families import FAMILIES, MRopeTarget

GREEDY = Sampling()
MAX_NEW = 20
IMAGES = tiny.images(3)
CASES = [
    (IMAGES[0], "Describe the image."),
    (IMAGES[1], "What colour is the circle?"),
    (IMAGES[2].resize((64, 40)), "Where is the star?"),
    (None, "Write a short caption."),
]


class Built(dict):
    """family -> tiny preset, built and registered in PRESETS on first use."""

    def __init__(self, root):
        super().__init__()
        self.root = root

    def __missing__(self, family):
        try:
            preset = tiny_families.build(family, self.root / family)
        except ImportError as error:  # transformers 5.17: Idefics3's image processor needs torchvision
            pytest.skip(f"{family} cannot be built with this transformers: {error}")
        loader.PRESETS[preset.name] = preset
        self[family] = preset
        return preset


@pytest.fixture(scope="module")
def family_presets(tmp_path_factory):
    """One tiny preset per family, registered in PRESETS for the module's tests."""
    presets = Built(tmp_path_factory.mktemp("families"))
    yield presets
    for preset in presets.values():
        del loader.PRESETS[preset.name]
        loader._LOADED.pop(preset.name, None)


@pytest.fixture(params=tiny_families.FAMILIES)
def loaded(request, family_presets):
    return loader.load(family_presets[request.param].name)


def reference(loaded, prompt: Prompt, max_new: int = MAX_NEW) -> list[int]:
    inputs = prompt.target_inputs
    out = loaded.target.model.generate(
        **inputs, max_new_tokens=max_new, do_sample=False, eos_token_id=sorted(loaded.target.stop_ids), pad_token_id=0
    )
    return out[0, inputs["input_ids"].shape[1] :].tolist()


def spd(loaded, prompt: Prompt, gamma: int, target: Target | None = None, max_new: int = MAX_NEW) -> Trace:
    return Trace.of(
        speculative_generate(
            target or loaded.target,
            loaded.drafter("text"),
            prompt,
            gamma=gamma,
            sampling=GREEDY,
            max_new_tokens=max_new,
            generator=torch.Generator().manual_seed(0),
        )
    )


def ar(loaded, prompt: Prompt, target: Target | None = None) -> Trace:
    return Trace.of(
        autoregressive_generate(
            target or loaded.target,
            prompt,
            sampling=GREEDY,
            max_new_tokens=MAX_NEW,
            generator=torch.Generator().manual_seed(0),
        )
    )


def test_greedy_speculative_output_identical_to_generate_for_each_family(loaded):
    accepted = drafted = 0
    for image, question in CASES:
        prompt = loaded.prompt(image, question, "text")
        expected = reference(loaded, prompt)
        assert list(ar(loaded, prompt).summary.token_ids) == expected
        for gamma in (1, 4):
            trace = spd(loaded, prompt, gamma)
            assert list(trace.summary.token_ids) == expected
            accepted += sum(r.n_accepted for r in trace.rounds)
            drafted += sum(len(r.drafted_ids) for r in trace.rounds)
    assert 0 < accepted < drafted  # the drafter partly agrees: both branches of verification ran


def test_family_decides_target_class_and_processor(family_presets):
    kinds = {}
    for family in tiny_families.FAMILIES:
        loaded = loader.load(family_presets[family].name)
        kinds[family] = (type(loaded.target).__name__, type(loaded.processor).__name__)
    assert kinds == {
        "llava": ("Target", "LlavaProcessor"),
        "qwen2_5_vl": ("MRopeTarget", "Qwen2_5_VLImageProcessor"),
        "idefics3": ("Target", "Idefics3Processor"),
    }


def test_text_only_drafter_reads_the_prompt_without_image_tokens(loaded):
    drafter = loaded.drafter("text")
    family = FAMILIES[loaded.preset.family]
    vocab = loaded.target.tokenizer.get_vocab()
    structure = {vocab[n] for n in family.placeholder_tokens if n in vocab}
    prompt = loaded.prompt(*CASES[0], "text")
    target_ids = prompt.target_inputs["input_ids"][0].tolist()
    drafter_ids = prompt.drafter_inputs["input_ids"][0].tolist()
    assert structure & set(target_ids)  # the target's prompt has image structure
    assert drafter_ids == [i for i in target_ids if i not in structure and i < drafter.usable]
    rows = drafter.model.get_output_embeddings().weight.shape[0]
    no_token = set(range(len(loaded.target.tokenizer), rows))  # qwen: 64 padded rows; llava, idefics3: none
    assert len(no_token) == (64 if loaded.preset.family == "qwen2_5_vl" else 0)
    assert drafter.blocked_ids == structure | no_token


def test_vocabularies_relate_as_in_the_real_pairs(family_presets):
    sizes = {}
    for family in tiny_families.FAMILIES:
        loaded = loader.load(family_presets[family].name)
        sizes[family] = (loaded.target.vocab_size - loaded.drafter("text").usable, len(loaded.target.tokenizer))
    assert sizes["llava"][0] == 64  # 32064 vs 32000
    assert sizes["qwen2_5_vl"][0] == 0  # 151936 both
    assert sizes["idefics3"][0] == 64  # 49280 vs 49152


def test_smolvlm_pairing_notes_that_only_the_target_can_stop(family_presets):
    loaded = loader.load(family_presets["idefics3"].name)
    eou = loaded.target.tokenizer.convert_tokens_to_ids("<end_of_utterance>")
    notes = loaded.notes("text")
    assert notes[0] == (
        f"The text drafter cannot propose <end_of_utterance> (id {eou}): it is outside its 400-token vocabulary, "
        "so it never proposes stopping there; the target ends the answer itself, exactly as it would alone."
    )
    assert "<end_of_utterance>" in loader.PRESETS["smolvlm-500m"].note
    assert loader.load(family_presets["qwen2_5_vl"].name).notes("text") == ()


def test_target_ends_the_answer_with_a_stop_token_the_drafter_lacks(family_presets):
    loaded = loader.load(family_presets["idefics3"].name)
    tokenizer, model = loaded.target.tokenizer, loaded.target.model
    eou = tokenizer.convert_tokens_to_ids("<end_of_utterance>")
    prompt = loaded.prompt(*CASES[1], "text")
    free = reference(loaded, prompt)
    head = model.get_output_embeddings().weight
    saved = head[eou].clone()
    try:
        with torch.no_grad():  # <end_of_utterance> now outscores the token the target picks at step 6
            head[eou] = head[free[6]] * 1.05
        expected = reference(loaded, prompt)
        assert eou in expected and expected[-1] == eou
        for gamma in (1, 4):
            trace = spd(loaded, prompt, gamma)
            assert list(trace.summary.token_ids) == expected and trace.summary.stop == "eos"
            assert trace.tokens[-1].kind in ("resampled", "bonus", "target")
            assert all(eou not in r.drafted_ids for r in trace.rounds)
    finally:
        with torch.no_grad():
            head[eou] = saved


def test_qwen_text_only_question_after_an_image_question_matches_generate(family_presets):
    loaded = loader.load(family_presets["qwen2_5_vl"].name)
    with_image = loaded.prompt(*CASES[0], "text")
    text_only = loaded.prompt(None, CASES[0][1], "text")
    expected = reference(loaded, text_only)
    plain = Target(loaded.target.model, loaded.target.tokenizer, name="plain", stop_ids=loaded.target.stop_ids)
    ar(loaded, with_image, plain)  # leaves the image's rope delta on the shared model
    assert list(ar(loaded, text_only, plain).summary.token_ids) != expected  # the bug MRopeTarget avoids
    ar(loaded, with_image)
    assert list(ar(loaded, text_only).summary.token_ids) == expected
    assert list(spd(loaded, text_only, 4).summary.token_ids) == expected


def test_qwen_interleaved_requests_with_different_images_each_match_generate(family_presets):
    loaded = loader.load(family_presets["qwen2_5_vl"].name)
    assert isinstance(loaded.target, MRopeTarget)
    prompts = [loaded.prompt(image, question, "text") for image, question in CASES[:3]]
    expected = [reference(loaded, p) for p in prompts]
    runs = [
        iter(
            speculative_generate(
                loaded.target,
                loaded.drafter("text"),
                p,
                gamma=3,
                sampling=GREEDY,
                max_new_tokens=MAX_NEW,
                generator=torch.Generator().manual_seed(0),
            )
        )
        for p in prompts
    ]
    traces = [Trace() for _ in runs]
    live = set(range(len(runs)))
    while live:  # one event from each run in turn: every forward follows another request's forward
        for i in sorted(live):
            event = next(runs[i], None)
            if event is None:
                live.discard(i)
            else:
                traces[i].add(event)
    assert [list(t.summary.token_ids) for t in traces] == expected


def test_preset_image_kwargs_reach_the_processor(family_presets):
    counts = {}
    for family in ("qwen2_5_vl", "idefics3"):
        loaded = loader.load(family_presets[family].name)
        image_token = loaded.processor.image_token
        ids = loaded.prompt(IMAGES[0], "Describe the image.").target_inputs["input_ids"][0]
        counts[family] = int((ids == loaded.target.tokenizer.convert_tokens_to_ids(image_token)).sum())
    assert counts == {"qwen2_5_vl": 16, "idefics3": 20}  # 64 and 68 with the processors' own sizes


def test_switching_drafter_does_not_reload_the_target(family_presets, monkeypatch):
    base = family_presets["llava"]
    spec = base.drafters[0]
    preset = loader.Preset(
        "tiny-two-drafters",
        base.target,
        (loader.DrafterSpec("a", spec.kind, spec.path), loader.DrafterSpec("b", spec.kind, spec.path)),
    )
    calls = []
    load_model = drafter_loaders.load_model

    def counting(auto_class, path, plan, *, drafter):
        calls.append("drafter" if drafter else "target")
        return load_model(auto_class, path, plan, drafter=drafter)

    monkeypatch.setattr(drafter_loaders, "load_model", counting)
    monkeypatch.setitem(loader.PRESETS, preset.name, preset)
    try:
        loaded = loader.load(preset.name)
        for name in ("a", "b", "a", "b"):
            assert loader.load(preset.name) is loaded
            loaded.drafter(name)
        assert calls == ["target", "drafter", "drafter"]
        # One shared drafter per name; each run's state (cache, bookkeeping) is made by start().
        assert loaded.drafter("a") is loaded.drafter("a")
        assert loaded.drafter("a") is not loaded.drafter("b")
    finally:
        loader._LOADED.pop(preset.name, None)


def test_load_reports_progress_from_zero_to_one(family_presets):
    preset = family_presets["llava"]
    loader._LOADED.pop(preset.name, None)
    stages = []
    loaded = loader.load(preset.name, progress=lambda fraction, message: stages.append((fraction, message)))
    fractions = [f for f, _ in stages]
    assert fractions[0] == 0.0 and fractions[-1] == 1.0 and fractions == sorted(fractions)
    assert all(message for _, message in stages) and len(stages) >= 4
    assert loader.is_loaded(preset.name) and loader.load(preset.name) is loaded
    drafter_stages = []
    loaded.drafters.clear()
    loaded.drafter("text", progress=lambda fraction, message: drafter_stages.append(fraction))
    assert drafter_stages[0] == 0.0 and drafter_stages[-1] == 1.0


def test_hub_presets_are_hub_ids_of_known_families():
    hub_presets = [p for p in loader.PRESETS.values() if not p.name.startswith("tiny") and p.name != "embedded"]
    assert {p.name: (p.family, p.target) for p in hub_presets} == {
        "llava-1.5-7b": ("llava", "llava-hf/llava-1.5-7b-hf"),
        "qwen2.5-vl-3b": ("qwen2_5_vl", "Qwen/Qwen2.5-VL-3B-Instruct"),
        "smolvlm-500m": ("idefics3", "HuggingFaceTB/SmolVLM-500M-Instruct"),
    }
    assert {p.name: [d.path for d in p.drafters] for p in hub_presets} == {
        "llava-1.5-7b": ["double7/vicuna-68m"],
        "qwen2.5-vl-3b": ["Qwen/Qwen2.5-0.5B-Instruct"],
        "smolvlm-500m": ["HuggingFaceTB/SmolLM2-135M-Instruct"],
    }
    assert all(p.params > 0 and all(d.params > 0 for d in p.drafters) for p in hub_presets)
