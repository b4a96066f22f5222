"""The request's fields as the endpoints take them, read off `session.parse`, which spells them once:
`signature()` is /trace's parameters, `fields(values)` picks them out of an endpoint's values by
name (tests/test_app.py ties /race's and /trace's names to FIELDS)."""

from __future__ import annotations

import inspect
from collections.abc import Mapping

from demo.session.request import parse

_OWN = ("known",)  # parse's own keywords, which no endpoint takes
_PARAMETERS = inspect.signature(parse).parameters
FIELDS = tuple(name for name in _PARAMETERS if name not in _OWN)


def signature() -> inspect.Signature:
    """An endpoint's signature: the image, then every field of the request in parse's order, each
    taken positionally or by name, with parse's default."""
    positional = inspect.Parameter.POSITIONAL_OR_KEYWORD
    return inspect.Signature(
        [inspect.Parameter("image", positional), *(_PARAMETERS[name].replace(kind=positional) for name in FIELDS)]
    )


def fields(values: Mapping) -> dict:
    """The request's fields among `values` (an endpoint's arguments by name), for `parse(**...)`."""
    return {name: values[name] for name in FIELDS if name in values}
