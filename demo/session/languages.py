"""Which language a question is in (`detect`: "en", "de", "zh", "mixed" or "unknown") and which
drafter its race uses by default (`pick`: the language's own drafter, the multilingual one for a
mixed or unknown question, else the preset's default, with the reason as a sentence). Pure Python;
how a language is told: docs/modules.md."""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass

from demo.world.tasks import LANGUAGE_NAMES as NAMES
from demo.world.tasks import LANGUAGES

# The drafter each language's questions get by default, by its name in the embedded preset.
SPECIALISED = {"en": "text-only", "de": "german", "zh": "chinese"}
MULTILINGUAL = "multilingual"
RECOGNISED = 0.4  # of a question's words must be the world's English or German words ...
SHARE = 0.3  # ... and a language counts as present with this share of them

# Words of the questions and common words in each language; those both share ("in", "was",
# "orange", "option") tell nothing and are dropped from both.
_ENGLISH = """the a an is are was were be been what what's which who how many much where when why there
this that these those it its in on at of to for from with by about and or but not no yes do does did
can could would should will may please me my you your i we they them he she tell show give list name
find look looks see seen describe write caption short brief briefly detailed detail everything
anything something thing things all any some every each other more most than only just also here
image picture photo drawing scene colour color colours colors shape shapes object objects options
explain then letter correct option one two three four five sentence number count left right top
bottom centre center middle corner row large small big red orange yellow green blue purple circle
square triangle cross circles squares triangles crosses hello hi thanks""".split()
_GERMAN = """der die das den dem des ist sind war waren sein was welche welcher welches welchen wer wie
viele viel wo wann warum gibt es ein eine einen einem einer auf diesem dieses diese dieser bild
bildes szene form formen farbe farben hat haben siehst sieht sehen du kannst kann bitte mir mich
ich wir sie er beschreibe beschreib schreibe schreib gib zeig zeige nenne nenn erkläre erkläre
kurze kurz knappe ausführlich ausführliche beschreibung alles etwas nichts ding dinge alle jede
jeder andere mehr nur auch hier dort optionen dann buchstaben richtigen option satz und oder aber
nicht kein keine mit im zu für von über bei oben unten links rechts mitte ecke zeile groß große
großer kleine kleiner klein rot orange gelb grün blau violett kreis quadrat dreieck kreuz kreise quadrate
dreiecke kreuze anzahl eins zwei drei vier fünf ja nein bildunterschrift hallo danke""".split()
_GERMAN_LETTERS = set("äöüß")
_KANA = ("HIRAGANA", "KATAKANA")  # with Han characters: Japanese, which the world does not speak


@functools.cache
def _vocabulary() -> dict[str, frozenset[str]]:
    en, de = set(_ENGLISH), set(_GERMAN)
    return {"en": frozenset(en - de), "de": frozenset(de - en)}


@dataclass(frozen=True)
class Detected:
    language: str  # "en", "de", "zh", "mixed" or "unknown"
    found: tuple[str, ...]  # the world's languages found in the question, in `LANGUAGES` order
    other_script: bool  # letters of a script that none of the world's languages writes

    @property
    def name(self) -> str:
        return NAMES.get(self.language, self.language)


def _script(char: str) -> str | None:
    """'han', 'kana', 'latin', 'other' for a letter; None for anything else (digits, punctuation)."""
    if not char.isalpha():
        return None
    if "\u4e00" <= char <= "\u9fff" or "\u3400" <= char <= "\u4dbf":
        return "han"
    name = unicodedata.name(char, "")
    return "latin" if name.startswith("LATIN") else "kana" if name.startswith(_KANA) else "other"


def detect(question: str) -> Detected:
    """The question's language: Chinese by its Han characters (beside kana: Japanese), English and
    German by the world's words and German's letters (docs/modules.md)."""
    text = unicodedata.normalize("NFC", question or "")
    scripts = [_script(c) for c in text]
    han, kana, other = scripts.count("han"), scripts.count("kana"), scripts.count("other")
    words = [w.lower() for w in re.findall(r"[^\W\d_]{2,}", text) if all(_script(c) == "latin" for c in w)]
    vocabulary = _vocabulary()
    hits = {lang: sum(w in vocabulary[lang] for w in words) for lang in ("en", "de")}
    hits["de"] += sum(any(c in _GERMAN_LETTERS for c in w) and w not in vocabulary["de"] for w in words)
    recognised = sum(hits.values())
    found = []
    if words and recognised >= RECOGNISED * len(words):
        found += [lang for lang in ("en", "de") if hits[lang] and hits[lang] >= SHARE * recognised]
    if han and not kana:
        found.append("zh")
    found = tuple(lang for lang in LANGUAGES if lang in found)
    foreign = bool(other or kana)
    if len(found) == 1 and not foreign:
        return Detected(found[0], found, False)
    return Detected("mixed" if found else "unknown", found, foreign)


@dataclass(frozen=True)
class Pick:
    drafter: str  # the name of the drafter the race uses by default
    detected: Detected
    reason: str  # one or two sentences for the page


def _listing(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def pick(question: str, offered: tuple[str, ...], default: str) -> Pick:
    """The default drafter for `question` among the preset's `offered` drafters, and why."""
    d = detect(question)
    if d.language in SPECIALISED:
        name = SPECIALISED[d.language]
        language = NAMES[d.language]
        if name in offered:
            return Pick(name, d, f"The question is in {language}, so the {_drafter_words(d.language)} drafts.")
        if MULTILINGUAL in offered:
            return Pick(
                MULTILINGUAL,
                d,
                f"The question is in {language}, but this preset has no {language} drafter, "
                "so the multilingual drafter drafts.",
            )
        return Pick(
            default,
            d,
            f"The question is in {language}, but this preset has no {language} drafter, so {default} drafts.",
        )
    if d.language == "mixed":
        parts = [NAMES[lang] for lang in d.found] + (["another script"] if d.other_script else [])
        why = f"The question mixes {_listing(parts)}"
    else:
        why = "The question is in none of English, German and Chinese"
    answer = " The target answers it all the same, in whatever it produces."
    if MULTILINGUAL in offered:
        return Pick(MULTILINGUAL, d, f"{why}, so the multilingual drafter drafts: it was trained on all three.{answer}")
    return Pick(default, d, f"{why}, and this preset has no multilingual drafter, so {default} drafts.{answer}")


def _drafter_words(language: str) -> str:
    return "English text-only drafter" if language == "en" else f"{NAMES[language]} drafter"
