"""Drafted texts in a round (and so in trace.json's rounds[].drafted_texts) are whole characters:
a character the byte-level tokenizer splits over several drafts is written on its last draft, as
the answer's pieces are (`demo.engine.detokenize`), never as U+FFFD."""

import pytest
from races import CASES, spd

from demo.engine.sampling import Sampling

REPLACEMENT = "\ufffd"


@pytest.mark.parametrize("drafter", ["text-partly", "text-partly+tree"])
def test_drafted_texts_hold_whole_characters_where_a_draft_is_part_of_one(world, drafter):
    sampled = Sampling(temperature=1.5, top_p=1.0)  # random drafts: byte tokens of split characters
    image, question = CASES[0]
    rounds = spd(world, drafter, image, question, gamma=5, sampling=sampled, seed=0).rounds
    decode = world.target.tokenizer.decode
    split = [r for r in rounds if any(REPLACEMENT in decode([d]) for d in r.drafted_ids)]
    assert split, "no round drafted part of a character: the test would not see the bug"
    for r in rounds:
        assert len(r.drafted_texts) == len(r.drafted_ids)
        assert all(REPLACEMENT not in text for text in r.drafted_texts), r.drafted_texts
        assert "".join(r.drafted_texts) == decode(list(r.drafted_ids)).replace(REPLACEMENT, "")
