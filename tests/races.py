"""Races on the tiny world (`conftest.world`), shared by the engine's and the drafters' tests: the
image/question cases, and one speculative or autoregressive run, read back as a Trace."""

import tiny
import torch

from demo.engine.events import Trace
from demo.engine.sampling import Sampling
from demo.engine.speculative import autoregressive_generate, speculative_generate

GREEDY = Sampling()
MAX_NEW = 24
CASES = list(zip(tiny.images(len(tiny.QUESTIONS)), tiny.QUESTIONS))  # 11 image/question cases


def spd(world, drafter, image, question, gamma, sampling=GREEDY, max_new=MAX_NEW, seed=0, min_confidence=0.0):
    """Speculative decoding with `world`'s drafter named `drafter`."""
    events = speculative_generate(
        world.target,
        world.drafter(drafter),
        world.prompt(image, question, drafter),
        gamma=gamma,
        sampling=sampling,
        max_new_tokens=max_new,
        generator=torch.Generator().manual_seed(seed),
        min_confidence=min_confidence,
    )
    return Trace.of(events)


def ar(world, image, question, sampling=GREEDY, max_new=MAX_NEW, seed=0):
    """The target alone."""
    events = autoregressive_generate(
        world.target,
        world.prompt(image, question),
        sampling=sampling,
        max_new_tokens=max_new,
        generator=torch.Generator().manual_seed(seed),
    )
    return Trace.of(events)


def references(world, cases, max_new=MAX_NEW):
    """The target's own greedy `generate` for every (image, question) case: the token ids it adds."""
    refs = []
    for image, question in cases:
        inputs = world.prompt(image, question).target_inputs
        out = world.target.model.generate(
            **inputs,
            max_new_tokens=max_new,
            do_sample=False,
            eos_token_id=sorted(world.target.stop_ids),
            pad_token_id=world.target.tokenizer.pad_token_id,
        )
        refs.append(out[0, inputs["input_ids"].shape[1] :].tolist())
    return refs


def verified_by(world) -> dict:
    """A drafter's keywords for being verified by `world`'s target: its vocabulary size and stop ids."""
    return dict(target_vocab_size=world.target.vocab_size, stop_ids=world.target.stop_ids)


def request(**fields):
    """A session Request by name: a greedy race of the tiny world's `text-partly` drafter at γ 3
    for 24 new tokens, with `fields` changed."""
    from demo import session

    race = dict(question="Describe the image.", preset="tiny", drafter="text-partly", gamma=3, sampling=GREEDY)
    return session.Request(**(race | dict(max_new_tokens=MAX_NEW) | fields))


def embedded(**fields):
    """`request` of the embedded preset's text-only drafter at γ 4, with `fields` changed."""
    return request(**(dict(preset="embedded", drafter="text-only", gamma=4) | fields))
