"""The world's questions and reference answers in Chinese: every task family of `tasks.py`.

Contract: the phrase tables (the prompts `DESCRIBE`, `CAPTION`) and `FORMS`, over which `tasks.qa` writes (question,
answer) as in English, with the same facts and the same layout of each answer, in Chinese: the
place or name first, then the looked-up word; multiple choice's reason, restated checks and
letter. Grounded words are translated (`COLOURS`, `SHAPES`, `SIZES`, `PLACES`, `PLACE_PHRASES`,
`NUMBERS`). No spaces between words, as Chinese is written; the option letters stand after
punctuation (":", "，", "。"), so the byte-level pre-tokenizer always cuts a letter off on its own.
"""

import random
import sys

from demo.world.phrasing import counted, forms, restated, unique
from demo.world.scenes import Obj, Scene

COLOURS = {"red": "红色", "orange": "橙色", "yellow": "黄色", "green": "绿色", "blue": "蓝色", "purple": "紫色"}
SHAPES = {"circle": "圆形", "square": "正方形", "triangle": "三角形", "cross": "十字形"}
SIZES = {"large": "大", "small": "小"}
PLACES = ("左上角", "上方", "右上角", "左侧", "中央", "右侧", "左下角", "下方", "右下角")
PLACE_PHRASES = (
    "在左上角",
    "在上方中间",
    "在右上角",
    "在左侧中间",
    "在正中央",
    "在右侧中间",
    "在左下角",
    "在下方中间",
    "在右下角",
)
NUMBERS = ("零", "一", "两", "三", "四", "五", "六", "七", "八", "九")


def name(o: Obj, size: bool = True) -> str:
    """'一个大的红色圆形' (or '一个红色圆形' without the size)."""
    return f"一个{SIZES[o.size] + '的' if size else ''}{COLOURS[o.colour]}{SHAPES[o.shape]}"


def thing(o: Obj) -> str:
    return f"{COLOURS[o.colour]}{SHAPES[o.shape]}"


# --- (a) detailed description -------------------------------------------------------------

DESCRIBE = (
    "请详细描述这张图片。",
    "你在这张图片里看到了什么？请详细描述。",
    "请详细描述这个场景。",
    "你能描述一下这张图片里的所有东西吗？",
)
INTROS = (
    "这张图片是浅色纯背景上的一幅简单图画。",
    "这张图片在淡色均匀的背景上画着一幅平面的彩色图画。",
    "这是一幅浅色背景上的几何图形简图。",
)


CLOSINGS = (
    "网格上其余的{}个位置都是空的，所以画面显得简单整洁。",
    "除了这些图形，背景是空的，整个画面简单而不杂乱。",
    "图中没有其他东西，看起来干净而简洁。",
)
CLOSING_FIRST, SPACE, STOP, LISTING = True, "", "。", ("、", "和")
TOTALS = ("图中总共只有一个图形。", "图中总共有{}个图形。")
SIZE_SENTENCES = ("这个图形是{}的。", "所有{}个图形都是{}的。")
COLOUR_SENTENCES = ("图中唯一的颜色是{}。", "图中每个图形都是{}。", "图中的颜色有{}。")


def object_sentences(o: Obj) -> tuple[str, ...]:
    """One object, its place first, as in English."""
    return (
        f"{PLACE_PHRASES[o.cell]}有{name(o)}。",
        f"{PLACE_PHRASES[o.cell]}可以看到{name(o)}。",
        f"{PLACES[o.cell]}是{name(o)}。",
    )


def mixed_sizes(large: int, small: int) -> str:
    return f"其中{NUMBERS[large]}个是大的，{NUMBERS[small]}个是小的。"


# --- (b) short caption ----------------------------------------------------------------------

CAPTION = ("请为这张图片写一句简短的说明。", "用一句话描述这张图片。", "给这张图片写一个简短的标题。")
CAPTION_LEADS, CAPTION_LISTING = ("", "一幅简单的图画：", "浅色背景上："), ("；", "；")


def caption_item(o: Obj, sized: bool) -> str:
    return f"{PLACES[o.cell]}有{name(o, sized)}"


# --- (c) multiple choice with explanation ---------------------------------------------------


def verdict(kind: str, said: str, text: str) -> str:
    """One option's check (`phrasing.checks`): "：圆形不是正方形。"."""
    return f"：{said}{'是' if text == said else '不是'}{text}。"


COUNT_OPTIONS = ("一个", "两个", "三个", "四个")
OPTION_SEP, CHOICE, CHOICE_ANSWER = "，", "{}\n选项：{}。\n请简要解释，然后给出正确选项的字母。", "{}{}答案：{}。"


def choice_words(kind: str, o: Obj, scene: Scene) -> tuple[str, str]:
    """Multiple choice's question and reason (`phrasing.multiple_choice`)."""
    place = PLACES[o.cell]
    if kind == "count":
        listed = "；".join(f"{PLACES[x.cell]}有{name(x, False)}" for x in scene.objects)
        return "图中有几个图形？", f"{listed}，所以共有{COUNT_OPTIONS[len(scene.objects) - 1]}。"
    return {
        "shape": (f"{place}的图形是什么形状？", f"{place}的物体是{name(o)}，所以它是{SHAPES[o.shape]}。"),
        "colour": (f"{place}的图形是什么颜色？", f"{place}的图形是{name(o)}，所以它是{COLOURS[o.colour]}。"),
        "position": (f"{thing(o)}在哪里？", f"{thing(o)}{PLACE_PHRASES[o.cell]}，所以它在{place}。"),
    }[kind]


# --- short VQA ------------------------------------------------------------------------------

TAILS = ("", "，就在这里", "，在这张图片里", "，在图中")  # after the looked-up word (`phrasing.restated`)
IS, AT, THINGS = "是{}", "{}", ("图形", "物体")
COLOUR_QUESTIONS = ("{}是什么颜色？", "{}的颜色是什么？")
WHERE_QUESTIONS = ("{}在哪里？", "{}在图中的什么位置？")
YESNO_QUESTIONS, YES, NO = (
    ("图中有{}吗？", "你能看到{}吗？"),
    ("有。", "有，{2}有一个{0}。"),
    ("没有。", "没有，图中没有{}。"),
)
COLOUR_FIRST = False


def the_shape(o: Obj) -> str:
    return SHAPES[o.shape]


def the_thing_at(noun: str, o: Obj) -> str:
    return f"{PLACES[o.cell]}的{noun}"


def asked_thing(o: Obj) -> str:
    return thing(o)


named = asked_thing  # "红色圆形"


def _vqa_shape(L, scene: Scene, rng: random.Random) -> tuple[str, str]:
    o = rng.choice(scene.objects)
    if unique(scene, colour=o.colour) and rng.random() < 0.5:
        subject = f"{COLOURS[o.colour]}的{rng.choice(('图形', '物体'))}"
        question = rng.choice((f"{subject}是什么形状？", f"{subject}是哪种形状？"))
    else:
        subject = f"{PLACES[o.cell]}的图形"
        question = rng.choice((f"{PLACES[o.cell]}是什么形状？", f"{PLACES[o.cell]}能看到什么形状？"))
    return question, restated(L, subject, f"是{SHAPES[o.shape]}", rng)


def _vqa_count(L, scene: Scene, rng: random.Random) -> tuple[str, str]:
    kind, counting, n = counted(scene, rng)
    what = "图形" if kind == "all" else f"{COLOURS[counting]}的图形" if kind == "colour" else SHAPES[counting]
    question = rng.choice((f"有几个{what}？", f"图中有多少个{what}？"))
    if n == 0:
        return question, restated(L, "图中", f"没有{what}", rng)
    return question, restated(L, what, f"有{NUMBERS[n]}个", rng)


FORMS = forms(sys.modules[__name__])  # each task's form: its `_<task>` above, else `phrasing`'s
