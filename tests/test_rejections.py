"""Error analysis on hand-built speculative traces whose every rejection is known."""

import math

import pytest

from demo.engine.events import PrefillEvent, Rejection, RoundEvent, RunSummary, TokenEvent, Trace
from demo.session import rejections
from demo.world.tasks import heldout_examples

pytestmark = pytest.mark.fast  # the fast tier (`pytest -m fast`): pure functions and tiny models, milliseconds each

END = "<|end|>"  # the stop token as the tokenizer decodes it on its own; it adds no answer text
END_ID = 2
STOPS = frozenset({END_ID})


def build(first: str, rounds: list[tuple[list[str], int, str | None]]) -> Trace:
    """A greedy speculative trace. Each round is (drafts, how many the target accepted, the
    target's own token: the resample or the bonus, None when the answer ended in the drafts)."""
    vocab: dict[str, int] = {END: END_ID}

    def tid(text: str) -> int:
        return vocab.setdefault(text, len(vocab) + 10)

    def piece(text: str) -> str:
        return "" if text == END else text

    t = 0.01
    events = [
        PrefillEvent("speculative", 20, 12, 0.01, 0.001, t=t),
        TokenEvent(0, tid(first), first, "target", 0, 0.9, t=t),
    ]
    answer = [first]
    for r, (drafts, k, own) in enumerate(rounds, start=1):
        t += 0.01
        emitted = []
        for d in drafts[:k]:
            emitted.append(dict(text=d, kind="accepted", q=0.8, accept_prob=1.0))
            if d == END:
                break
        else:
            if own is not None:
                rejected = {}
                if k < len(drafts):
                    rejected = dict(
                        rejection=Rejection(id=tid(drafts[k]), text=drafts[k], p=0.1, q=0.7, accept_prob=0.0)
                    )
                emitted.append(dict(text=own, kind="resampled" if k < len(drafts) else "bonus", **rejected))
        for e in emitted:
            text = e.pop("text")
            events.append(TokenEvent(len(answer), tid(text), piece(text), round=r, p=0.9, t=t, **e))
            answer.append(text)
        stop = "eos" if answer[-1] == END else None
        own_id = tid(own) if own is not None else END_ID
        events.append(
            RoundEvent(
                r, tuple(tid(d) for d in drafts), tuple(drafts), k, own_id, len(emitted), stop, 0.001, 0.002, t=t
            )
        )
    events.append(
        RunSummary(
            "speculative",
            tuple(tid(a) for a in answer),
            "".join(map(piece, answer)),
            "eos",
            3,
            "text-only",
            1000,
            100,
            0.011,
            t - 0.011,
            len(rounds),
            t=t,
        )
    )
    return Trace.of(events)


def shapes_trace() -> Trace:
    """ "The red circle is in the top left corner." (12 tokens, the end included):

    R1 drafts " blue" " square" " is": rejects " blue" -> " red"
    R2 drafts " cir" "cus" " is": accepts " cir", rejects "cus" -> "cle" (the drafter meant "circus")
    R3 drafts " is" " in" " the": accepts all -> bonus " top"
    R4 drafts " right" " corner": rejects " right" -> " left"
    R5 drafts " corner" <end>: accepts " corner", rejects the end -> "."
    R6 drafts <end>: accepted, the answer ends
    """
    return build(
        "The",
        [
            ([" blue", " square", " is"], 0, " red"),
            ([" cir", "cus", " is"], 1, "cle"),
            ([" is", " in", " the"], 3, " top"),
            ([" right", " corner"], 0, " left"),
            ([" corner", END], 1, "."),
            ([END], 1, None),
        ],
    )


def yes_trace() -> Trace:
    """ "Yes, Red." R1 drafts "," " Blue": rejects " Blue" -> " Red"; R2 drafts "." <end>: both accepted."""
    return build("Yes", [([",", " Blue"], 1, " Red"), ([".", END], 2, None)])


def choice_trace() -> Trace:
    """ "The answer is B. A small star" (multiple choice, then a caption's article):

    R1 drafts " answer" " is" " A": rejects option " A" -> " B"
    R2 drafts "." " A" " small": accepts all -> bonus " star"
    R3 drafts <end>: accepted
    """
    return build("The", [([" answer", " is", " A"], 2, " B"), ([".", " A", " small"], 3, " star"), ([END], 1, None)])


def observe(trace: Trace, example: int = 0, language: str = "en") -> list:
    """The observations of a hand-built trace, its end token the stop token (`STOPS`)."""
    return rejections.observations(trace, example, STOPS, language)


def brief(obs):
    return [(o.index, o.word, o.category, o.accepted, o.draft_word) for o in obs]


def categorised(text: str, language: str) -> list[tuple[str, str]]:
    """Each word of an answer with its category."""
    return [
        (text[a:b], rejections.category(text[a:b], after=text[b:], language=language))
        for a, b in rejections.words(text)
    ]


@pytest.mark.parametrize(
    "word, after, expected",
    [
        ("red", "", "colour"),
        ("Purple", "", "colour"),
        ("circles", "", "shape"),
        ("crosses", "", "shape"),
        ("large", "", "size"),
        ("three", "", "count"),
        ("single", "", "count"),
        ("corner", "", "position"),
        ("centre", "", "position"),
        ("No", "", "yes/no"),
        ("yes", "", "yes/no"),
        ("the", "", "function"),
        ("in", "", "function"),
        ("image", "", "template"),
        ("shapes", "", "template"),
        ("", "", "punctuation"),
        ("B", ".", "letter"),
        ("A", " says red: no.", "letter"),
        ("A", ".", "letter"),
        ("A", " simple drawing", "function"),
    ],
)
def test_words_are_categorised_by_whether_only_the_image_can_tell_them(word, after, expected):
    assert rejections.category(word, after=after) == expected


def test_the_end_token_is_its_own_category_and_grounded_ones_are_known():
    assert rejections.category("", is_end=True) == "end"
    assert [c for c in rejections.CATEGORIES if rejections.is_grounded(c)] == [
        "colour",
        "shape",
        "size",
        "count",
        "position",
        "yes/no",
    ]


def test_observations_are_the_checked_drafts_with_their_words_and_what_the_drafter_meant():
    obs = observe(shapes_trace(), example=3)
    assert brief(obs) == [
        (1, "red", "colour", False, "blue"),
        (2, "circle", "shape", True, "circle"),
        (3, "circle", "shape", False, "circus"),  # " cir" + "cus": the word the drafter was writing
        (4, "is", "function", True, "is"),
        (5, "in", "function", True, "in"),
        (6, "the", "function", True, "the"),
        # 7 " top" is the bonus: the target's own token, no draft was checked there
        (8, "left", "position", False, "right"),
        (9, "corner", "position", True, "corner"),
        (10, "", "punctuation", False, "(end)"),  # the drafter wanted to stop here
        (11, "", "end", True, "(end)"),
    ]
    assert {o.example for o in obs} == {3}
    assert [o.rel for o in obs][:2] == [1 / 12, 2 / 12]
    assert (obs[0].token, obs[0].draft) == (" red", " blue")


def test_option_letters_are_told_from_the_article_a():
    obs = observe(choice_trace())
    assert brief(obs) == [
        (1, "answer", "template", True, "answer"),
        (2, "is", "function", True, "is"),
        (3, "B", "letter", False, "A"),
        (4, "", "punctuation", True, "."),
        (5, "A", "function", True, "A"),
        (6, "small", "size", True, "small"),
        (8, "", "end", True, "(end)"),
    ]


def test_rejection_rates_by_category_count_drafted_and_rejected_positions():
    obs = observe(shapes_trace())
    assert rejections.by_category(obs) == {
        "colour": {"drafted": 1, "rejected": 1, "rejection_rate": 1.0},
        "shape": {"drafted": 2, "rejected": 1, "rejection_rate": 0.5},
        "position": {"drafted": 2, "rejected": 1, "rejection_rate": 0.5},
        "function": {"drafted": 3, "rejected": 0, "rejection_rate": 0.0},
        "punctuation": {"drafted": 1, "rejected": 1, "rejection_rate": 1.0},
        "end": {"drafted": 1, "rejected": 0, "rejection_rate": 0.0},
    }


def test_grounded_share_sets_rejections_against_drafting():
    obs = observe(shapes_trace())
    assert rejections.grounded_share(obs) == {
        "drafted": 10,
        "rejected": 4,
        "grounded_drafted": 5,
        "grounded_rejected": 3,
        "grounded_share_of_drafted": 0.5,
        "grounded_share_of_rejections": 0.75,
        "grounded_rejection_rate": 0.6,
        "other_rejection_rate": 0.2,
    }


def test_grounded_share_of_nothing_rejected_is_undefined_not_zero():
    obs = [o for o in observe(shapes_trace()) if o.accepted]
    share = rejections.grounded_share(obs)
    assert share["grounded_share_of_drafted"] == 2 / 6
    assert math.isnan(share["grounded_share_of_rejections"])
    assert math.isnan(rejections.grounded_share([])["grounded_share_of_drafted"])


def test_most_rejected_words_say_what_the_drafter_wrote_instead():
    obs = observe(shapes_trace(), 0) + observe(yes_trace(), 1)
    assert rejections.most_rejected(obs) == [
        # "red" and "Red" are one word; so are the drafter's "blue" and "Blue"
        {
            "word": "red",
            "category": "colour",
            "rejected": 2,
            "drafted": 2,
            "rejection_rate": 1.0,
            "drafter_said": "blue (2)",
        },
        # ties: the higher rate first, then alphabetical
        {
            "word": "left",
            "category": "position",
            "rejected": 1,
            "drafted": 1,
            "rejection_rate": 1.0,
            "drafter_said": "right (1)",
        },
        {
            "word": ".",
            "category": "punctuation",
            "rejected": 1,
            "drafted": 2,
            "rejection_rate": 0.5,
            "drafter_said": "(end) (1)",
        },
        {
            "word": "circle",
            "category": "shape",
            "rejected": 1,
            "drafted": 2,
            "rejection_rate": 0.5,
            "drafter_said": "circus (1)",
        },
    ]
    assert [r["word"] for r in rejections.most_rejected(obs, k=2)] == ["red", "left"]


def test_rejections_along_the_answer_fall_in_relative_position_bins():
    obs = observe(shapes_trace())  # positions 1..11 of 12
    bins = rejections.by_answer_position(obs, bins=4)
    assert [(b["from"], b["to"], b["drafted"], b["rejected"]) for b in bins] == [
        (0.0, 0.25, 2, 1),  # 1 red ✗, 2 cir ✓
        (0.25, 0.5, 3, 1),  # 3 cle ✗, 4 is ✓, 5 in ✓
        (0.5, 0.75, 2, 1),  # 6 the ✓, 8 left ✗
        (0.75, 1.0, 3, 1),  # 9 corner ✓, 10 . ✗, 11 end ✓
    ]
    assert [b["rejection_rate"] for b in bins] == [0.5, 1 / 3, 0.5, 1 / 3]
    assert [b["rejection_rate"] for b in rejections.by_answer_position([], bins=2)] == [None, None]


def test_summary_bundles_every_aggregate_and_rows_flatten_observations():
    obs = observe(yes_trace(), 5)
    summary = rejections.summary(obs, k=1, bins=2)
    assert set(summary) == {"by_category", "grounded", "most_rejected", "by_answer_position"}
    assert len(summary["most_rejected"]) == 1 and len(summary["by_answer_position"]) == 2
    assert rejections.rows(obs)[1] == {
        "example": 5,
        "index": 2,
        "rel": 0.4,
        "token": " Red",
        "word": "Red",
        "category": "colour",
        "accepted": False,
        "draft": " Blue",
        "draft_word": "Blue",
        "image_attention": None,  # no reading attached to these observations
        "image_dependent": None,  # nor an ablation
    }


# --- German and Chinese answers ---------------------------------------------------------------


def test_a_held_out_german_caption_splits_into_whole_words_with_their_categories():
    answer = heldout_examples("caption", 1, seed=0, language="de")[0].answer
    assert answer == "Unten rechts, ein kleines gelbes Kreuz."
    assert categorised(answer, "de") == [
        ("Unten", "position"),
        ("rechts", "position"),
        ("ein", "function"),
        ("kleines", "size"),
        ("gelbes", "colour"),
        ("Kreuz", "shape"),
    ]


def test_a_held_out_chinese_caption_is_cut_into_the_worlds_chinese_words():
    answer = heldout_examples("caption", 1, seed=0, language="zh")[0].answer
    assert answer == "右下角有一个小的黄色十字形。"
    assert categorised(answer, "zh") == [
        ("右下角", "position"),
        ("有", "function"),  # "there is", before another word
        ("一个", "function"),  # "a"
        ("小的", "size"),
        ("黄色", "colour"),
        ("十字形", "shape"),  # one word: not 十 (ten) and 字形
    ]


@pytest.mark.parametrize(
    "word, after, language, expected",
    [
        ("rot", "", "de", "colour"),
        ("roten", "", "de", "colour"),
        ("Grüne", "", "de", "colour"),
        ("große", "", "de", "size"),
        ("Kreise", "", "de", "shape"),
        ("Mitte", "", "de", "position"),
        ("zwei", "", "de", "count"),
        ("Nein", ".", "de", "yes/no"),
        ("ist", "", "de", "function"),
        ("Bild", "", "de", "template"),
        ("red", "", "de", "colour"),  # an English word in a German answer: as in English
        ("A", ".", "de", "letter"),
        ("红色", "", "zh", "colour"),
        ("圆形", "", "zh", "shape"),
        ("三角形", "", "zh", "shape"),
        ("大的", "", "zh", "size"),
        ("左上角", "", "zh", "position"),
        ("两", "", "zh", "count"),
        ("有", "。", "zh", "yes/no"),  # the answer to "图中有蓝色正方形吗？"
        ("没有", "。", "zh", "yes/no"),
        ("有", "一个", "zh", "function"),
        ("一个", "，在图中。", "zh", "count"),  # "有一个，": there is one
        ("一个", "蓝色圆形", "zh", "function"),  # "一个蓝色圆形": a blue circle
        ("的", "", "zh", "function"),
        ("答案", "", "zh", "template"),
    ],
)
def test_german_and_chinese_words_take_the_category_of_their_english_gloss(word, after, language, expected):
    assert rejections.category(word, after=after, language=language) == expected


def test_german_observations_keep_umlauts_inside_their_words():
    # "Der große grüne Kreis ist oben.": R1 accepts " große", rejects " blaue" -> " grüne";
    # R2 accepts " Kre" "is" " ist", rejects " unten" -> " oben"; R3 accepts "." and the end
    trace = build(
        "Der",
        [
            ([" große", " blaue"], 1, " grüne"),
            ([" Kre", "is", " ist", " unten"], 3, " oben"),
            ([".", END], 2, None),
        ],
    )
    assert brief(observe(trace, language="de")) == [
        (1, "große", "size", True, "große"),
        (2, "grüne", "colour", False, "blaue"),
        (3, "Kreis", "shape", True, "Kreis"),
        (4, "Kreis", "shape", True, "Kreis"),
        (5, "ist", "function", True, "ist"),
        (6, "oben", "position", False, "unten"),
        (7, "", "punctuation", True, "."),
        (8, "", "end", True, "(end)"),
    ]


def test_chinese_observations_fall_in_the_words_of_the_answer():
    # "图中有一个红色圆形。": R1 accepts 有 一个, rejects 蓝色 -> 红色; R2 accepts 圆 形 。 and the end
    trace = build("图中", [(["有", "一个", "蓝色"], 2, "红色"), (["圆", "形", "。", END], 4, None)])
    assert brief(observe(trace, language="zh")) == [
        (1, "有", "function", True, "有"),
        (2, "一个", "function", True, "一个"),
        (3, "红色", "colour", False, "蓝色"),
        (4, "圆形", "shape", True, "圆形"),  # a token can start mid-word: 圆 then 形
        (5, "圆形", "shape", True, "圆形"),
        (6, "", "punctuation", True, "。"),
        (7, "", "end", True, "(end)"),
    ]


def test_a_mix_in_several_languages_asks_each_example_in_each_language_in_turn():
    mix = rejections.heldout_mix(("caption", "vqa_colour"), 5, seed=0, languages=("en", "de", "zh"))
    assert [(e.task, e.language) for e in mix] == [
        ("caption", "en"),
        ("caption", "de"),
        ("caption", "zh"),
        ("vqa_colour", "en"),
        ("vqa_colour", "de"),
    ]
    assert mix[0].scene == mix[1].scene == mix[2].scene and mix[3].scene == mix[4].scene
    english = rejections.heldout_mix(("caption", "vqa_colour"), 3, seed=0)
    assert [e.question for e in english] == [
        e.question for e in rejections.heldout_mix(("caption", "vqa_colour"), 3, seed=0, languages=("en",))
    ]
    assert {e.language for e in english} == {"en"}


def test_a_rejection_is_about_the_targets_word_there_in_the_answers_own_language():
    trace = shapes_trace()  # "The red circle is in the top left corner." and the end
    assert rejections.at_rejection(trace, 1) == ("red", "colour")
    assert rejections.at_rejection(trace, 10) == ("", "punctuation")
    assert rejections.at_rejection(trace, 11) == ("", "end")  # the empty last token of an answer that ended
    assert [rejections.language_of(t) for t in ("The red circle.", "Der Kreis ist rot.", "圆形是红色。")] == [
        "en",
        "de",
        "zh",
    ]
