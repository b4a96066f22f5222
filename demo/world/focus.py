"""Which grid cell each answer token talks about: the label of the attention-focus loss.

Contract: `focus_of(tok, answer_ids, scene, task)` returns, per answer token, the cell (0-8) of
the object the token's clause is about, or -1. A sentence that names a place is about that
cell; otherwise the objects it names (colour and/or shape) are matched to the scene: several
mentions in one sentence (a caption's list) follow the scene's reading order, and a sentence
whose colours and shapes fit exactly one object is about that object. Counting, summaries and
the multiple-choice option checks are about no single cell.
Training asks one attention head per upper layer to look at that cell's image token while
predicting those tokens, which teaches a from-scratch LM to read the image in a few hundred
steps instead of thousands. Labels come from the scene; the models never see them.
"""

import re

from .scenes import Scene
from .scoring import _PAIR, _SINGULAR, colours_in, position_in, shapes_in


def _sentences(text: str) -> list[tuple[int, int]]:
    """Character spans of the sentences (each ends after its full stop)."""
    return [(m.start(), m.end()) for m in re.finditer(r"[^.]*\.?", text) if m.group().strip()]


def _cells_in_sentence(sentence: str, scene: Scene, used: set[int]) -> list[tuple[int, int]]:
    """(end offset in sentence, cell) per part of the sentence; the part runs up to the offset."""
    if re.match(r"\s*[A-D] says", sentence):
        return []
    cell = position_in(sentence)
    if cell is not None:
        return [(len(sentence), cell)]
    mentions = list(_PAIR.finditer(sentence.lower()))
    if len(mentions) > 1:  # a list of objects, in reading order
        parts = []
        pending = [o for o in scene.objects if o.cell not in used]
        for m in mentions:
            colour, shape = m.group(1), _SINGULAR[m.group(2)]
            match = next((o for o in pending if (o.colour, o.shape) == (colour, shape)), None)
            if match is None:
                return parts
            pending.remove(match)
            used.add(match.cell)
            parts.append((m.end(), match.cell))
        return parts
    colours, shapes = colours_in(sentence), shapes_in(sentence)
    if not colours and not shapes:
        return []
    fits = [o for o in scene.objects
            if (not colours or o.colour in colours) and (not shapes or o.shape in shapes)]
    return [(len(sentence), fits[0].cell)] if len(fits) == 1 else []


def focus_of(tok, answer_ids: list[int], scene: Scene, task: str) -> list[int]:
    if task == "vqa_count":
        return [-1] * len(answer_ids)
    pieces = [tok.decode([i]) for i in answer_ids]
    text = "".join(pieces)
    char_cell = [-1] * len(text)
    used: set[int] = set()
    for number, (start, end) in enumerate(_sentences(text)):
        if task == "multiple_choice" and number > 0:
            break
        begin = start
        for offset, cell in _cells_in_sentence(text[start:end], scene, used):
            for c in range(begin, start + offset):
                char_cell[c] = cell
            begin = start + offset
    out, pos = [], 0
    for piece in pieces:
        # a token is about the cell of its first non-space character
        chars = [char_cell[c] for c in range(pos, pos + len(piece)) if not text[c].isspace()]
        out.append(chars[0] if chars else -1)
        pos += len(piece)
    return out
