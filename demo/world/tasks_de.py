"""The world's questions and reference answers in German: every task family of `tasks.py`.

Contract: the phrase tables (the prompts `DESCRIBE`, `CAPTION`) and `FORMS`, over which `tasks.qa` writes (question,
answer) as in English, with the same facts and the same layout of each answer, in German. The
answers keep the English forms that the target learnt (the place or name first, then the looked-up word; multiple
choice's reason, restated checks and letter), so what the target knows carries over and only
the words change. Grounded words are translated (`COLOURS`, `SHAPES`, `SIZES`, `PLACES`,
`PLACE_PHRASES`, `NUMBERS`); adjectives take their endings (nominative and accusative,
masculine or neuter: every shape noun is one of them).
"""

import random
import sys

from demo.world.phrasing import cap, counted, forms, listing, restated, unique
from demo.world.scenes import Obj, Scene

COLOURS = {"red": "rot", "orange": "orange", "yellow": "gelb", "green": "grün", "blue": "blau", "purple": "violett"}
SHAPES = {"circle": "Kreis", "square": "Quadrat", "triangle": "Dreieck", "cross": "Kreuz"}
PLURALS = {"circle": "Kreise", "square": "Quadrate", "triangle": "Dreiecke", "cross": "Kreuze"}
MASCULINE = {"circle"}  # the other shape nouns are neuter
SIZES = {"large": "groß", "small": "klein"}
PLACES = ("oben links", "oben", "oben rechts", "links", "Mitte", "rechts", "unten links", "unten", "unten rechts")
PLACE_PHRASES = (
    "oben links",
    "oben in der Mitte",
    "oben rechts",
    "links in der Mitte",
    "in der Mitte",
    "rechts in der Mitte",
    "unten links",
    "unten in der Mitte",
    "unten rechts",
)
NUMBERS = ("keine", "eins", "zwei", "drei", "vier", "fünf", "sechs", "sieben", "acht", "neun")


def inflect(adjective: str, ending: str) -> str:
    """'rot' + 'er' -> 'roter'; 'orange' + 'er' -> 'oranger' (an adjective ending in e keeps one)."""
    return adjective + (ending[1:] if adjective.endswith("e") and ending else ending)


def endings(adjective: str) -> list[str]:
    """Every form of an adjective the answers use: 'rot', 'rote', 'roter', 'rotes', 'roten'."""
    return [inflect(adjective, e) for e in ("", "e", "er", "es", "en")]


def indefinite(o: Obj, size: bool = True, accusative: bool = False) -> str:
    """'ein großer roter Kreis', 'ein rotes Quadrat'; accusative 'einen roten Kreis'."""
    m = o.shape in MASCULINE
    article, ending = ("einen", "en") if m and accusative else ("ein", "er" if m else "es")
    words = ([inflect(SIZES[o.size], ending)] if size else []) + [inflect(COLOURS[o.colour], ending)]
    return f"{article} {' '.join(words)} {SHAPES[o.shape]}"


def definite(o: Obj, colour: bool = True) -> str:
    """'der rote Kreis', 'das rote Quadrat' (nominative)."""
    article = "der" if o.shape in MASCULINE else "das"
    return f"{article} {inflect(COLOURS[o.colour], 'e') + ' ' if colour else ''}{SHAPES[o.shape]}"


def phrase(o: Obj) -> str:
    return PLACE_PHRASES[o.cell]


# --- (a) detailed description -------------------------------------------------------------

DESCRIBE = (
    "Beschreibe dieses Bild ausführlich.",
    "Was siehst du auf diesem Bild? Beschreibe es ausführlich.",
    "Gib eine ausführliche Beschreibung der Szene.",
    "Kannst du alles beschreiben, was auf diesem Bild ist?",
)
INTROS = (
    "Das Bild ist eine einfache Zeichnung auf einem schlichten, hellen Hintergrund.",
    "Dieses Bild zeigt eine flache, bunte Zeichnung auf einem blassen, gleichmäßigen Hintergrund.",
    "Hier sehen wir eine schlichte Illustration geometrischer Formen auf einem hellen Hintergrund.",
)


CLOSINGS = (
    "Die anderen {} Felder des Rasters sind leer, daher wirkt die Szene einfach und ordentlich.",
    "Abgesehen von diesen Formen ist der Hintergrund leer, und die Szene wirkt schlicht und aufgeräumt.",
    "Sonst ist nichts auf dem Bild, und das gibt ihm ein klares und minimalistisches Aussehen.",
)
CLOSING_FIRST, SPACE, STOP, LISTING = True, " ", ".", (", ", " und ")
TOTALS = ("Insgesamt ist eine einzige Form auf dem Bild.", "Insgesamt sind {} Formen auf dem Bild.")
SIZE_SENTENCES = ("Die Form ist {}.", "Alle {} Formen sind {}.")
COLOUR_SENTENCES = (
    "Die einzige Farbe auf dem Bild ist {}.",
    "Jede Form auf dem Bild ist {}.",
    "Die Farben auf dem Bild sind {}.",
)


def object_sentences(o: Obj) -> tuple[str, ...]:
    """One object, its place first, as in English."""
    return tuple(f"{cap(phrase(o))} {verb} {indefinite(o)}." for verb in ("ist", "befindet sich", "liegt"))


def mixed_sizes(large: int, small: int) -> str:
    count = lambda k: "eine" if k == 1 else NUMBERS[k]  # noqa: E731
    verb = lambda k: "ist" if k == 1 else "sind"  # noqa: E731
    return f"{cap(count(large))} davon {verb(large)} groß und {count(small)} {verb(small)} klein."


# --- (b) short caption ----------------------------------------------------------------------

CAPTION = (
    "Schreibe eine kurze Bildunterschrift zu diesem Bild.",
    "Beschreibe dieses Bild in einem Satz.",
    "Gib eine knappe Bildunterschrift für das Bild.",
)
CAPTION_LEADS, CAPTION_LISTING = ("", "Eine einfache Zeichnung: ", "Auf hellem Hintergrund: "), ("; ", "; und ")


def caption_item(o: Obj, sized: bool) -> str:
    return f"{phrase(o)}, {indefinite(o, sized)}"


# --- (c) multiple choice with explanation ---------------------------------------------------


def verdict(kind: str, said: str, text: str) -> str:
    """One option's check (`phrasing.checks`): ": ein Kreis ist kein Quadrat."."""
    if kind == "shape":
        return f": ein {said} ist {'ein' if text == said else 'kein'} {text}."
    return f": {said} ist {'' if text == said else 'nicht '}{text}."


COUNT_OPTIONS, OPTION_SEP = NUMBERS[1:5], ", "
CHOICE = "{}\nOptionen: {}.\nErkläre kurz und nenne dann den Buchstaben der richtigen Option."
CHOICE_ANSWER = "{} {} Die Antwort ist {}."


def choice_words(kind: str, o: Obj, scene: Scene) -> tuple[str, str]:
    """Multiple choice's question and reason (`phrasing.multiple_choice`)."""
    if kind == "count":
        n = len(scene.objects)
        listed = listing([f"{phrase(x)}, {indefinite(x, False)}" for x in scene.objects], "; ", "; und ")
        return "Wie viele Formen sind auf dem Bild?", cap(
            f"{listed}, also {'ist es eins' if n == 1 else 'sind es ' + NUMBERS[n]}."
        )
    pronoun, it = "er" if o.shape in MASCULINE else "es", indefinite(o)
    return {
        "shape": (
            f"Welche Form ist {phrase(o)}?",
            f"Das Objekt {phrase(o)} ist {it}, also ist es ein {SHAPES[o.shape]}.",
        ),
        "colour": (
            f"Welche Farbe hat die Form {phrase(o)}?",
            f"Die Form {phrase(o)} ist {it}, also ist sie {COLOURS[o.colour]}.",
        ),
        "position": (
            f"Wo ist {definite(o)}?",
            f"{cap(definite(o))} ist {phrase(o)}, also ist {pronoun} {PLACES[o.cell]}.",
        ),
    }[kind]


# --- short VQA ------------------------------------------------------------------------------

TAILS = ("", " hier", " auf diesem Bild", " im Bild")  # after the looked-up word (`phrasing.restated`)
IS, AT, THINGS = "ist {}", "ist {}", ("die Form", "das Objekt")
COLOUR_QUESTIONS = ("Welche Farbe hat {}?", "In welcher Farbe ist {}?")
WHERE_QUESTIONS = ("Wo ist {}?", "Wo auf dem Bild ist {}?")
YESNO_QUESTIONS, YES, NO = (
    ("Gibt es {} auf dem Bild?", "Siehst du {}?"),
    ("Ja.", "Ja, es gibt {} {}."),
    ("Nein.", "Nein, es gibt k{}."),
)
COLOUR_FIRST = False


def the_shape(o: Obj) -> str:
    return definite(o, colour=False)


def the_thing_at(noun: str, o: Obj) -> str:
    return f"{noun} {phrase(o)}"


def named(o: Obj) -> str:
    return definite(o)


def asked_thing(o: Obj) -> str:
    return indefinite(o, size=False, accusative=True)


def _vqa_shape(L, scene: Scene, rng: random.Random) -> tuple[str, str]:
    o = rng.choice(scene.objects)
    answer = f"ist ein {SHAPES[o.shape]}"
    if unique(scene, colour=o.colour) and rng.random() < 0.5:
        subject = f"das {inflect(COLOURS[o.colour], 'e')} Objekt"
        question = rng.choice((f"Welche Form hat {subject}?", f"Welche Form ist {COLOURS[o.colour]}?"))
        return question, restated(L, subject, answer, rng)
    question = rng.choice((f"Welche Form ist {phrase(o)}?", f"Welche Form siehst du {phrase(o)}?"))
    return question, restated(L, f"die Form {phrase(o)}", answer, rng)


def _vqa_count(L, scene: Scene, rng: random.Random) -> tuple[str, str]:
    kind, counting, n = counted(scene, rng)
    if kind == "colour":  # the adjective's strong and weak endings: "rote Formen", "der roten Formen"
        strong, weak = (f"{inflect(COLOURS[counting], e)} Formen" for e in ("e", "en"))
    else:
        strong = weak = "Formen" if kind == "all" else PLURALS[counting]
    question = rng.choice((f"Wie viele {strong} gibt es?", f"Wie viele {strong} sind auf dem Bild?"))
    if n == 0:
        return question, restated(L, "es gibt", f"keine {weak}", rng)
    return question, restated(L, f"die Anzahl der {weak}", f"ist {NUMBERS[n]}", rng)


FORMS = forms(sys.modules[__name__])  # each task's form: its `_<task>` above, else `phrasing`'s
