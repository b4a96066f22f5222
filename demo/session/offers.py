"""Whether a preset, and a race's lanes, can run here, answered before any work and loading nothing:
availability, memory beside the target, the presets a page offers, and the drafter a question's
language asks for."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from demo.models import presets, zerogpu
from demo.session import failures, languages

log = logging.getLogger(__name__)


def check_available(preset: str) -> None:
    """Refuse (Unavailable, LoadFailed) a preset that is not served here or cannot load."""
    from demo.models import loader, preloading

    preloading.check_served(preset)  # preloaded deployments (a Space) never load in a request
    if loader.is_loaded(preset):
        return
    try:
        available = loader.availability(preset)
    except Exception as error:  # files too damaged even to count their parameters
        raise failures.load_failed(preset, error) from error
    if not available.ok:
        raise loader.Unavailable(available.message)


def check_memory(preset_name: str, drafters: tuple[str, ...]) -> None:
    """Refuse (NotEnoughMemory), before anything loads, a race's lanes (their `drafters`) whose
    drafter models do not fit beside the target of preset `preset_name`. The loader checks one
    drafter at a time, so lanes with two models of their own are checked together here (their
    weights, as `demo.models.devices.plan` counts them; drafters already loaded cost nothing)."""
    from demo.models import devices, hub, loader

    preset = presets.PRESETS[preset_name]
    offers = [preset.drafter(d) for d in drafters]  # each drafter's model of the preset's, if it has one
    specs = {o.spec.name: o.spec for o in offers if o is not None and o.spec is not None}
    if len(specs) < 2:
        return
    loaded = loader.load(preset_name) if loader.is_loaded(preset_name) else None

    def params(ref: str, estimate: int) -> int:  # counted from the files when they are here
        path = hub.local(ref)
        return (hub.count_params(path) if path else 0) or estimate

    target = 0 if loaded else params(preset.target, preset.params)  # a loaded target's memory is taken
    drafters = sum(params(s.path, s.params) for s in specs.values() if not (loaded and s.name in loaded.drafters))
    names = " and ".join(repr(name) for name in specs)
    try:
        devices.plan(target, drafters, devices.probe(), what=f"preset {preset_name!r} with the drafters {names}")
    except devices.NotEnoughMemory as error:
        raise devices.NotEnoughMemory(f"{error}. Race one of these drafters at a time.") from None


def offered(default: str) -> tuple[list[str], dict[str, str]]:
    """The presets a page offers, and the others with the reason each is left out: preloaded (a
    Space, or DEMO_PRELOAD), those that loaded at start-up; lazy, those whose files are here or may
    be downloaded (no torch needed), and always `default`, whose status line says if it can load."""
    if zerogpu.preload_names(presets.DEFAULT_PRESET) is not None:
        from demo.models import preloading  # already imported: the presets were loaded at start-up

        outcome = preloading.preloaded()
        if outcome is not None:
            left = {name: f"it failed to load at start-up: {why}." for name, why in outcome.items() if why}
            left |= {
                name: f"not loaded at start-up here (set {zerogpu.PRELOAD_ENV} to serve it)."
                for name in presets.PRESETS
                if name not in outcome
            }
            return [name for name, why in outcome.items() if why is None and name in presets.PRESETS], left
    from demo.models import hub

    choices, left = [], {}
    for name, preset in presets.PRESETS.items():
        found = hub.availability([preset.target, *(s.path for s in preset.drafters)])
        if found.ok or name == default:
            choices.append(name)
        else:
            left[name] = found.message
    return choices, left


def availability(name: str) -> tuple[bool, str]:
    """Whether preset `name` can load on this machine now, and the sentence that says so."""
    from demo.models import loader  # torch and transformers: imported on first use

    try:
        available = loader.availability(name)
    except Exception as error:  # files too damaged even to count their parameters
        log.warning("cannot check preset %r: %s", name, error)
        return False, f"Its files could not be read ({type(error).__name__}); they may be damaged."
    return available.ok, available.message


SETTLED_WORDS = 3  # a question in no language the world speaks is told so from this many words on


@dataclass(frozen=True)
class LanguageChoice:
    drafter: str  # the drafter the race uses by default
    note: str  # why, for the page; empty for English, the world's first language
    language: str  # `languages.detect`'s answer, to compare the next question with


def for_language(question: str, preset: str, current: str | None, last: str | None) -> LanguageChoice | None:
    """The drafter `question`'s language asks for on `preset` (its specialised drafter, else the
    multilingual one, else `current`: `languages.pick`), or None where nothing is to change: the
    language is `last`, the one already answered (so a drafter picked by hand stays while the
    question is edited), or no language is told yet in a question too short to tell."""
    detected = languages.detect(question)
    if detected.language == last:
        return None
    if detected.language == "unknown" and len(re.findall(r"[^\W\d_]+", question or "")) < SETTLED_WORDS:
        return None  # being typed: "Wh" is no language yet
    names = presets.PRESETS[preset].drafter_names()
    chosen = languages.pick(question, names, current if current in names else names[0])
    return LanguageChoice(chosen.drafter, "" if detected.language == "en" else chosen.reason, detected.language)
