"""The gamma sweep: a greedy race replayed at other draft lengths, with drafter forwards only.

In greedy mode the target's token after any prefix of its answer is that answer's next token, so
a finished greedy race already holds every verdict the target would give: a draft is accepted
exactly when it equals the answer's next token. `replay` runs the drafter through the rounds it
would have had at another gamma (the same calls the engine makes: `DraftState.draft`, then
`rollback`), compares its drafts with the answer, and never runs the target.

More, with its measurements: docs/modules.md.
"""

from __future__ import annotations

import torch

from demo.engine import trees
from demo.engine.decoding import Stopwatch
from demo.engine.drafters import Drafter
from demo.engine.metrics import SweepPoint
from demo.engine.sampling import Sampling

GAMMAS = tuple(range(1, 11))  # the draft lengths a sweep tries
GREEDY = Sampling()


@torch.inference_mode()
def answer_features(target, target_inputs: dict, answer: list[int]) -> torch.Tensor:
    """The target's last hidden states over its prompt and behind its answer, as a race hands them
    to a drafter: the prompt's P rows (the prefill's), then one row per answer token but the last,
    so that row P - 1 + j is the state whose logits gave answer[j]: [P + len(answer) - 1, C]. One
    prefill and one forward over the answer, off the race's clock."""
    cache = target.new_cache()
    _, prompt = target.prefill(target_inputs, cache, True)  # [P, C]
    if len(answer) == 1:
        return prompt
    _, rest = target.forward(answer[:-1], cache, True)  # [len(answer) - 1, C]
    return torch.cat([prompt, rest])


@torch.inference_mode()
def replay(
    drafter: Drafter,
    drafter_inputs: dict,
    answer: list[int],
    *,
    gamma: int,
    max_new_tokens: int,
    min_confidence: float = 0.0,
    features: torch.Tensor | None = None,
) -> SweepPoint:
    """The rounds a greedy race whose target wrote `answer` (its token ids, the prefill's first)
    would have had with draft length gamma. A drafter that reads the target's hidden states needs
    `features`, `answer_features` of the same answer."""
    state, pending = drafter.start(drafter_inputs), None
    if drafter.reads_features:  # handed to each `propose` as the race hands them
        if features is None:
            raise ValueError("a drafter that reads the target's hidden states replays with them (answer_features)")
        P = len(features) - len(answer) + 1  # the prompt's rows come first
        pending = features[:P]
    generator = torch.Generator(device=drafter.device)  # greedy drafting draws nothing
    clock = Stopwatch(drafter.device)
    rounds, costs, seconds, n = [], [], [], 1  # the prefill wrote answer[0]
    while n < len(answer):
        # 1. draft, as `speculative_round` (or `tree_round`) does: never more than the budget can take.
        n_draft = min(gamma, max_new_tokens - n - 1)
        if drafter.tree is not None:
            with clock:
                tree = trees.draft_tree(state, answer[:n], n_draft, drafter.tree, GREEDY, generator, pending)
            # 2. the target's verdicts are the answer's own next tokens: walk the tree along them.
            node, n_accepted, rejected = -1, 0, False
            while n + n_accepted < len(answer):
                kids = tree.children.get(node, [])
                match = next((c for c in kids if tree.tokens[c] == answer[n + n_accepted]), None)
                if match is None:
                    rejected = bool(kids)  # at a leaf nothing was rejected
                    break
                node, n_accepted = match, n_accepted + 1
            made = n_accepted + rejected  # the walked path, as the round's drafted_ids
            costs.append((1 + len({p for p in tree.parents if p >= 0}) if tree.tokens else 0, 1 + len(tree.tokens)))
        else:
            with clock:
                drafts, _ = state.draft(answer[:n], n_draft, GREEDY, generator, min_confidence, pending)
            # 2. the target's verdicts are the answer's own next tokens.
            n_accepted = 0
            while (
                n_accepted < len(drafts)
                and n + n_accepted < len(answer)
                and drafts[n_accepted] == answer[n + n_accepted]
            ):
                n_accepted += 1
            made = len(drafts)
        # 3. roll back (a tree's drafting already left the drafter at the answer), and 4. emit
        #    the accepted drafts and the target's token, cut at the end.
        state.rollback(n + n_accepted)
        if drafter.reads_features:  # the verify forward's rows: the answer's last token, then the accepted drafts
            pending = features[P - 1 + n : P + n + n_accepted]
        emitted = min(n_accepted + 1, len(answer) - n)
        rounds.append((made, n_accepted, emitted))
        seconds.append(clock.last)
        n += emitted
    return SweepPoint(gamma=gamma, rounds=tuple(rounds), tree_costs=tuple(costs), draft_seconds=tuple(seconds))
