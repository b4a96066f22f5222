"""The world's questions and reference answers in Chinese: every task family of `tasks.py`.

Contract: the phrase tables `PROMPTS` and `FORMS`, over which `tasks.qa` writes (question,
answer) as in English, with the same facts and the same layout of each answer, in Chinese: the
place or name first, then the looked-up word; multiple choice's reason, restated checks and
letter. Grounded words are translated (`COLOURS`, `SHAPES`, `SIZES`, `PLACES`, `PLACE_PHRASES`,
`NUMBERS`). No spaces between words, as Chinese is written; the option letters stand after
punctuation (":", "，", "。"), so the byte-level pre-tokenizer always cuts a letter off on its own.
"""

import random

from demo.world.phrasing import LETTERS, asked, counted, draw_options, forms, nameable, unique
from demo.world.scenes import GRID, Obj, Scene

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


def listing(items: list[str], sep: str = "、", last: str = "和") -> str:
    return items[0] if len(items) == 1 else sep.join(items[:-1]) + last + items[-1]


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


def _object_sentence(o: Obj, rng: random.Random) -> str:
    """One object, its place first, as in English."""
    return rng.choice(
        (
            f"{PLACE_PHRASES[o.cell]}有{name(o)}。",
            f"{PLACE_PHRASES[o.cell]}可以看到{name(o)}。",
            f"{PLACES[o.cell]}是{name(o)}。",
        )
    )


def _sizes(scene: Scene) -> str:
    n = len(scene.objects)
    large = sum(o.size == "large" for o in scene.objects)
    if n == 1:
        return f"这个图形是{SIZES[scene.objects[0].size]}的。"
    if large in (0, n):
        return f"所有{NUMBERS[n]}个图形都是{'大' if large else '小'}的。"
    return f"其中{NUMBERS[large]}个是大的，{NUMBERS[n - large]}个是小的。"


def _colours(scene: Scene) -> str:
    colours = list(dict.fromkeys(COLOURS[o.colour] for o in scene.objects))
    if len(scene.objects) == 1:
        return f"图中唯一的颜色是{colours[0]}。"
    if len(colours) == 1:
        return f"图中每个图形都是{colours[0]}。"
    return f"图中的颜色有{listing(colours)}。"


def _description(scene: Scene, rng: random.Random) -> str:
    n, empty = len(scene.objects), GRID * GRID - len(scene.objects)
    closing = rng.choice(
        (
            f"网格上其余的{NUMBERS[empty]}个位置都是空的，所以画面显得简单整洁。",
            "除了这些图形，背景是空的，整个画面简单而不杂乱。",
            "图中没有其他东西，看起来干净而简洁。",
        )
    )
    total = "图中总共只有一个图形。" if n == 1 else f"图中总共有{NUMBERS[n]}个图形。"
    parts = [rng.choice(INTROS)] + [_object_sentence(o, rng) for o in scene.objects]
    return "".join(parts + [total, _sizes(scene), _colours(scene), closing])


# --- (b) short caption ----------------------------------------------------------------------

CAPTION = ("请为这张图片写一句简短的说明。", "用一句话描述这张图片。", "给这张图片写一个简短的标题。")


def _caption(scene: Scene, rng: random.Random) -> str:
    sized = rng.random() < 0.5
    things = "；".join(f"{PLACES[o.cell]}有{name(o, sized)}" for o in scene.objects)
    return f"{rng.choice(('', '一幅简单的图画：', '浅色背景上：'))}{things}。"


# --- (c) multiple choice with explanation ---------------------------------------------------


def checks(options: list[str], letter: str) -> str:
    """As `tasks_en.checks`: "A. 正方形：圆形不是正方形。B. 圆形：圆形是圆形。" """
    said, out = options[LETTERS.index(letter)], []
    for letter_, text in zip(LETTERS, options):
        out.append(f"{letter_}. {text}：{said}{'是' if text == said else '不是'}{text}。")
        if text == said:
            return "".join(out)
    raise ValueError(f"{letter} is not among {options}")


COUNT_OPTIONS = ("一个", "两个", "三个", "四个")


def _multiple_choice(scene: Scene, rng: random.Random) -> tuple[str, str]:
    o = rng.choice(scene.objects)
    kind = rng.choice(("shape", "colour", "position", "count"))
    if kind == "shape":
        question = f"{PLACES[o.cell]}的图形是什么形状？"
        options, letter = draw_options(SHAPES[o.shape], list(SHAPES.values()), rng)
        reason = f"{PLACES[o.cell]}的物体是{name(o)}，所以它是{SHAPES[o.shape]}。"
    elif kind == "colour":
        question = f"{PLACES[o.cell]}的图形是什么颜色？"
        options, letter = draw_options(COLOURS[o.colour], list(COLOURS.values()), rng)
        reason = f"{PLACES[o.cell]}的图形是{name(o)}，所以它是{COLOURS[o.colour]}。"
    elif kind == "position" and unique(scene, colour=o.colour, shape=o.shape):
        question = f"{thing(o)}在哪里？"
        options, letter = draw_options(PLACES[o.cell], list(PLACES), rng, ordered=True)
        reason = f"{thing(o)}{PLACE_PHRASES[o.cell]}，所以它在{PLACES[o.cell]}。"
    else:
        n = len(scene.objects)
        question = "图中有几个图形？"
        options, letter = list(COUNT_OPTIONS), LETTERS[n - 1]
        listed = "；".join(f"{PLACES[x.cell]}有{name(x, False)}" for x in scene.objects)
        reason = f"{listed}，所以共有{COUNT_OPTIONS[n - 1]}。"
    listed = "，".join(f"{letter_}. {text}" for letter_, text in zip(LETTERS, options))
    question = f"{question}\n选项：{listed}。\n请简要解释，然后给出正确选项的字母。"
    return question, f"{reason}{checks(options, letter)}答案：{letter}。"


# --- short VQA ------------------------------------------------------------------------------

TAILS = ("", "，就在这里", "，在这张图片里", "，在图中")  # after the looked-up word, as in English


def restated(subject: str, rest: str, rng: random.Random) -> str:
    return f"{subject}{rest}{rng.choice(TAILS)}。"


def _vqa_colour(scene: Scene, rng: random.Random) -> tuple[str, str]:
    o = rng.choice(scene.objects)
    if unique(scene, shape=o.shape) and rng.random() < 0.5:
        subject = SHAPES[o.shape]
    else:
        subject = f"{PLACES[o.cell]}的{rng.choice(('图形', '物体'))}"
    question = rng.choice((f"{subject}是什么颜色？", f"{subject}的颜色是什么？"))
    return question, restated(subject, f"是{COLOURS[o.colour]}", rng)


def _vqa_shape(scene: Scene, rng: random.Random) -> tuple[str, str]:
    o = rng.choice(scene.objects)
    if unique(scene, colour=o.colour) and rng.random() < 0.5:
        subject = f"{COLOURS[o.colour]}的{rng.choice(('图形', '物体'))}"
        question = rng.choice((f"{subject}是什么形状？", f"{subject}是哪种形状？"))
    else:
        subject = f"{PLACES[o.cell]}的图形"
        question = rng.choice((f"{PLACES[o.cell]}是什么形状？", f"{PLACES[o.cell]}能看到什么形状？"))
    return question, restated(subject, f"是{SHAPES[o.shape]}", rng)


def _vqa_count(scene: Scene, rng: random.Random) -> tuple[str, str]:
    kind, counting, n = counted(scene, rng)
    what = "图形" if kind == "all" else f"{COLOURS[counting]}的图形" if kind == "colour" else SHAPES[counting]
    question = rng.choice((f"有几个{what}？", f"图中有多少个{what}？"))
    if n == 0:
        return question, restated("图中", f"没有{what}", rng)
    return question, restated(what, f"有{NUMBERS[n]}个", rng)


def _vqa_position(scene: Scene, rng: random.Random) -> tuple[str, str] | None:
    o = nameable(scene, rng)
    if o is None:
        return None
    question = rng.choice((f"{thing(o)}在哪里？", f"{thing(o)}在图中的什么位置？"))
    return question, restated(thing(o), PLACE_PHRASES[o.cell], rng)


def _vqa_yesno(scene: Scene, rng: random.Random) -> tuple[str, str]:
    asked_, hit = asked(scene, rng)
    question = rng.choice((f"图中有{thing(asked_)}吗？", f"你能看到{thing(asked_)}吗？"))
    if hit:
        return question, rng.choice(("有。", f"有，{PLACES[hit.cell]}有一个{thing(asked_)}。"))
    return question, rng.choice(("没有。", f"没有，图中没有{thing(asked_)}。"))


# The phrase tables `tasks.qa` dispatches over (`phrasing.ask`): the tasks whose question is drawn
# from a list of prompts, and each task's form (`_<task>` above, `phrasing.forms`), which writes
# its answer (or question and answer).
PROMPTS = {"description": DESCRIBE, "caption": CAPTION}
FORMS = forms(globals())
