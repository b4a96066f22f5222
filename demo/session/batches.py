"""The Analysis tab's request: held-out examples of the embedded world decoded greedily with one or
more of a preset's drafters, parsed by name and checked by `validate` as a race's `Request` is."""

from __future__ import annotations

from dataclasses import dataclass

from demo.models import presets
from demo.session import validate
from demo.world.tasks import TASKS

BOTH = "both, side by side"  # the drafter choice that runs each of the preset's drafters in turn
ALL_LANGUAGES = "all"  # the language choice that asks each example in every language the world speaks
VQA = tuple(t for t in TASKS if t.startswith("vqa_"))
TASK_KINDS = {"all": TASKS, "vqa": VQA} | {t: (t,) for t in TASKS}  # choice -> world tasks, cycled
N_RANGE = (1, 32)  # examples in a batch
MAX_COMPARED = 3  # drafters one analysis compares, each on every example


@dataclass(frozen=True)
class AnalysisRequest:
    """A validated analysis: which examples, and which drafters decode each of them."""

    preset: str
    task: str  # a key of TASK_KINDS
    drafters: tuple[str, ...]  # each example is decoded by each of these, in this order
    gamma: int
    n: int
    seed: int
    language: str  # as chosen: a language of the world, or ALL_LANGUAGES
    languages: tuple[str, ...]  # the languages asked, each example in each in turn
    max_new_tokens: int


def spoken() -> tuple[str, ...]:
    """The languages the shipped world speaks (English first)."""
    return presets.world_languages()


def drafter_choices(preset: str) -> list[str]:
    """Every drafter a race on `preset` may name (`Preset.drafter_names`: its model drafters and
    the registered kinds, the target-feature drafters among them), then BOTH where it has more
    than one model drafter."""
    if preset not in presets.PRESETS:
        return []
    names = list(presets.PRESETS[preset].drafter_names())
    return names + [BOTH] if len(presets.PRESETS[preset].drafters) > 1 else names


def parse_analysis(*, preset, task, drafter, gamma=4, n=8, seed=0, language="en") -> AnalysisRequest:
    """The analysis from its settings as sent, by name, decoding at most DEFAULTS' max_new_tokens
    per example. Raises InvalidInput naming the first bad value and what would do."""
    preset = validate.choice("model preset", preset, presets.PRESETS)
    task = validate.choice("task", task, TASK_KINDS)
    languages = spoken()
    choices = [*languages, ALL_LANGUAGES] if len(languages) > 1 else [*languages]
    language = validate.choice("language", language, choices)
    known = drafter_choices(preset)
    drafters = _drafters(preset, drafter, known)
    gamma = validate.integer("gamma (drafts per round)", gamma, *validate.GAMMA_RANGE)
    n = validate.integer("N examples", n, *N_RANGE)
    seed = validate.integer("example set (seed)", seed, *validate.SEED_RANGE)  # null refused, as on /race and /trace
    return AnalysisRequest(
        preset=preset,
        task=task,
        drafters=drafters,
        gamma=gamma,
        n=n,
        seed=seed,
        language=language,
        languages=languages if language == ALL_LANGUAGES else (language,),
        max_new_tokens=DEFAULTS["max_new_tokens"],
    )


# The values a setting takes when it is not sent, spelled once, in the signature; and the new tokens
# an example may take: enough for the world's longest answers (detailed descriptions).
DEFAULTS = parse_analysis.__kwdefaults__ | {"max_new_tokens": 160}


def _drafters(preset: str, drafter, known: list[str]) -> tuple[str, ...]:
    """The drafters asked: one name, BOTH (each of the preset's model drafters), or a list of one to MAX_COMPARED
    distinct names (the page's Compare), in the order given."""
    name = f"drafter for preset {preset!r}"
    if isinstance(drafter, list | tuple):
        names = [n for n in known if n != BOTH]
        if not 1 <= len(drafter) <= MAX_COMPARED or len(set(map(str, drafter))) != len(drafter):
            raise validate.InvalidInput(
                f"Pick one to {MAX_COMPARED} different drafters to compare; got {len(drafter)}"
                f"{' with a repeat' if len(drafter) != len(set(map(str, drafter))) else ''}."
            )
        return tuple(validate.choice(name, d, names) for d in drafter)
    drafter = validate.choice(name, drafter, known)
    return tuple(s.name for s in presets.PRESETS[preset].drafters) if drafter == BOTH else (drafter,)
