"""Topic patterns of Kafka's regex subscriptions, read by Python's `re` and matched against
whole topic names, refused where matching could take the node too long (it matches them
on its event loop): what RE2/J, Kafka's engine, has no form for either (backreferences,
lookarounds), a repeat of something that itself repeats or branches (the shape of
exponential backtracking), and more than a few unbounded repeats (each one multiplies a
failed match's work by a name's length: four took half a second on a 249-character name).
"""

from __future__ import annotations

import re
import re._constants as sre  # private, but the parsed form is the only exact view of a pattern
import re._parser as sre_parse

PATTERN_CHARS_MAX = 1000
UNBOUNDED_REPEATS_MAX = 3
REPEATS = {sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT}
UNSUPPORTED = {sre.GROUPREF, sre.GROUPREF_EXISTS, sre.ASSERT, sre.ASSERT_NOT}


class PatternRefused(ValueError):
    pass


def compile_pattern(text: str) -> re.Pattern[str]:
    """The compiled pattern, or PatternRefused saying why not."""
    if len(text) > PATTERN_CHARS_MAX:
        raise PatternRefused(f"longer than {PATTERN_CHARS_MAX} characters")
    try:
        parsed = sre_parse.parse(text)
        compiled = re.compile(text)
    except (re.error, RecursionError, OverflowError) as exc:
        raise PatternRefused(str(exc)) from None
    if _unbounded_repeats(parsed, inside_repeat=False) > UNBOUNDED_REPEATS_MAX:
        raise PatternRefused(f"more than {UNBOUNDED_REPEATS_MAX} unbounded repeats")
    return compiled


def _unbounded_repeats(items, inside_repeat: bool) -> int:
    count = 0
    for op, value in items:
        if op in UNSUPPORTED:
            raise PatternRefused("backreferences and lookarounds are not supported")
        if op in REPEATS:
            if inside_repeat:
                raise PatternRefused("a repeat inside a repeat is not supported")
            _, high, inner = value
            count += (high == sre.MAXREPEAT) + _unbounded_repeats(inner, inside_repeat=True)
        elif op == sre.BRANCH:
            if inside_repeat:
                raise PatternRefused("an alternation inside a repeat is not supported")
            count += max(_unbounded_repeats(b, inside_repeat) for b in value[1])
        elif op == sre.SUBPATTERN:
            count += _unbounded_repeats(value[3], inside_repeat)
        elif op == sre.ATOMIC_GROUP:
            count += _unbounded_repeats(value, inside_repeat)
    return count
