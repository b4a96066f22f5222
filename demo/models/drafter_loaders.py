"""The built-in drafter kinds' loaders (`demo.models.drafter_kinds`), each
`function(loaded, name, spec, progress) -> LoadedDrafter`. torch and transformers are imported
when a loader is called, never when the kinds are registered (the page reads them first)."""

from __future__ import annotations

from pathlib import Path


def load_model(auto_class, path: Path, plan, *, drafter: bool):
    """One model from a local directory, placed as the plan (`devices.Plan`) says."""
    from demo.models import devices

    kwargs = devices.load_kwargs(plan, drafter=drafter)
    model = auto_class.from_pretrained(path, local_files_only=True, trust_remote_code=False, **kwargs)
    if "device_map" not in kwargs:
        model.to(plan.device)
    return model.eval()


def model(loaded, name: str, spec, progress):
    """A drafter model of the preset's (`spec`), with its processor when it reads the image."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoProcessor, AutoTokenizer

    from demo.engine.lean import LeanDrafter
    from demo.models import devices, hub
    from demo.models.vocab import check_vocab_compatible

    progress(0.0, f"finding the drafter {spec.path}")
    path = hub.resolve(spec.path)
    params = hub.count_params(path) or spec.params
    free = devices.probe()
    memory = devices.Memory(free.gpus[:1], free.cpu, free.bf16)  # drafters live on the first device
    devices.plan(params, 0, memory, what=f"drafter {spec.name!r}")
    progress(0.2, f"loading the drafter {spec.name} ({params / 1e6:.0f}M parameters)")
    target = loaded.target
    plan = loaded.plan or devices.Plan(loaded.device, target.model.dtype, False, None, 0, 0)
    if loaded.preset.drafter(spec.name).kind.reads == "image":  # it reads the image through a processor of its own
        drafter_model = load_model(AutoModelForImageTextToText, path, plan, drafter=True)
        processor = AutoProcessor.from_pretrained(path, local_files_only=True, trust_remote_code=False)
        tokenizer = processor.tokenizer
        loaded.drafter_processors[spec.name] = processor
    else:
        drafter_model = load_model(AutoModelForCausalLM, path, plan, drafter=True)
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=False)
    progress(0.9, "checking that the drafter's token ids mean what the target's mean")
    check_vocab_compatible(target.tokenizer, tokenizer, spec.name)
    # Embedding rows past the drafter's tokenizer are no token at all (Qwen2.5: 151,936 rows for
    # 151,665 tokens): never drafted, as the image placeholders are not.
    no_token = frozenset(range(len(tokenizer), drafter_model.get_output_embeddings().weight.shape[0]))
    # Lean where the architecture allows (checked against transformers at first use), else
    # the transformers forward; `drafter.path` says which.
    drafter = LeanDrafter(
        drafter_model,
        name=spec.name,
        kind=spec.kind,
        target_vocab_size=target.vocab_size,
        stop_ids=target.stop_ids,
        blocked_ids=loaded.placeholder_ids() | no_token,
    )
    progress(1.0, f"drafter {spec.name} ready")
    return drafter


def _on_target(loaded, name: str) -> dict:
    """What a drafter built on the loaded target takes of it: its name, vocabulary, stops and blocks."""
    t = loaded.target
    return dict(name=name, target_vocab_size=t.vocab_size, stop_ids=t.stop_ids, blocked_ids=loaded.placeholder_ids())


def prompt_lookup(loaded, name: str, spec, progress):
    """Prompt lookup: built on what is loaded already (no model)."""
    from demo.engine.lookup import PromptLookup

    return PromptLookup(**_on_target(loaded, name), device=loaded.device)


def layer_skip(loaded, name: str, spec, progress):
    """The target drafting for itself with the preset's searched layers skipped."""
    from demo.engine import layerskip

    target = loaded.target
    why = layerskip.unsupported(target.model)
    if why:
        raise KeyError(f"drafter {name!r} is not offered for preset {loaded.preset.name!r}: {why}")
    return layerskip.LayerSkipDrafter(target.model, skip=loaded.preset.skip_layers, **_on_target(loaded, name))


def heads(which: str):
    """The loader of the `which` ("feature", "medusa") drafter on the target's hidden states, from
    its checkpoint beside the target's directory (one for another hidden size is refused)."""

    def load(loaded, name: str, spec, progress):
        from demo.engine.feature import FeatureDrafter
        from demo.models.feature_assets import checkpoint, no_checkpoint

        progress(0.2, f"loading the {which} drafter on the target's hidden states")
        path = checkpoint(loaded.preset, which)
        if path is None:
            raise ValueError(no_checkpoint(which)(loaded.preset))
        return FeatureDrafter.load(path, loaded.target, name=name, blocked_ids=loaded.placeholder_ids())

    return load


def staged(loaded, name: str, spec, progress):
    """The preset's drafter model `spec` (its first text-only one), drafting through the lookup stage."""
    from demo.engine.staged import StagedDrafter

    # `Loaded.drafter` holds its lock while it calls this loader: its lock-free inner call, as the
    # loader's own "+tree" does (the public one would wait on itself).
    return StagedDrafter(loaded._drafter(spec.name, progress), name=name)
