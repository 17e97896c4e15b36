"""Valid ranges of numeric flags, declared once next to each field (the names below, imported from envs/ranges.py) and checked
by one function before anything is created (`check_ranges`, called by cleanrl_plus/config.py's `validate_args`).

    learning_rate: Positive = 3e-4                            # > 0
    gamma: Fraction = 0.99                                    # in [0, 1]
    hidden_sizes: tuple[AtLeastOne, ...] = (256, 256)         # every entry at least 1
    anchor_decay: Annotated[float, Range(gt=0, le=1)] = 0.5   # anything else: a Range of its own

Every int or float field of an agent's flags (nested settings included) declares one; tests/test_flag_ranges.py
enumerates them, so a flag added without a range fails there. A range that depends on the network (how many layers
a reset may touch) is checked where the network exists, before the run directory is written.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Annotated, Any, Iterator

from envs.errors import UserError
from envs.ranges import Range


def declared_ranges(settings: type, prefix: str = "") -> Iterator[tuple[str, type, Range | None, bool]]:
    """(dotted field name, number type, its Range or None, whether the field is a tuple of them) for every int or
    float field of a settings dataclass and of the dataclasses nested in it; bools are flags, not numbers."""
    hints = typing.get_type_hints(settings, include_extras=True)
    for field in dataclasses.fields(settings):
        hint = hints[field.name]
        if dataclasses.is_dataclass(hint):
            yield from declared_ranges(hint, f"{prefix}{field.name}.")
            continue
        if typing.get_origin(hint) in (typing.Union, types.UnionType):  # `X | None`: None stands for a default
            hint = next(member for member in typing.get_args(hint) if member is not type(None))
        is_tuple = typing.get_origin(hint) is tuple
        for member in typing.get_args(hint) if is_tuple else (hint,):
            if member is Ellipsis:
                continue
            base, metadata = (
                (typing.get_args(member)[0], member.__metadata__) if typing.get_origin(member) is Annotated else (member, ())
            )
            if base in (int, float):
                yield f"{prefix}{field.name}", base, next((m for m in metadata if isinstance(m, Range)), None), is_tuple
                break


def out_of_range(settings: Any) -> tuple[str, Any, Range] | None:
    """(flag, value, range) of the first field of `settings` (a dataclass instance) outside its declared range."""
    for name, _, bounds, is_tuple in declared_ranges(type(settings)):
        value = settings
        for part in name.split("."):
            value = getattr(value, part)
        for number in value if is_tuple else (value,):
            if bounds is not None and number is not None and number not in bounds:
                return "--" + name.replace("_", "-"), value, bounds
    return None


def check_ranges(settings: Any) -> None:
    """One-line UserError naming the flag, its value and its range, for the first number out of its range."""
    found = out_of_range(settings)
    if found is not None:
        flag, value, bounds = found
        if isinstance(value, (tuple, list)):
            raise UserError(f"{flag} entries must be {bounds}, got {' '.join(map(str, value))}")
        raise UserError(f"{flag} must be {bounds}, got {value}")
