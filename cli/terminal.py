"""What the CLI prints of data it did not write itself, made safe for the operator's terminal.

A tenant chooses its task names, targets and error texts; printed raw, an escape sequence in one
of them could recolour, retitle or rewrite the operator's screen (or the lines shown before
it), and a bidi override could make one id read as another. Every printer passes such text
through ``shown``.
"""

from __future__ import annotations

# C0 (with tab and newline: a cell or a field is one line), DEL and C1 as \xNN.
_CONTROLS = {code: f"\\x{code:02x}" for code in (*range(0x20), *range(0x7F, 0xA0))}
# The bidi embeddings, overrides, isolates and marks, which reorder what follows them.
_BIDI = {code: f"\\u{code:04x}" for code in (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F),
                                             *range(0x2066, 0x206A))}
_ESCAPES = str.maketrans({**_CONTROLS, **_BIDI})


def shown(value: object) -> str:
    """``value`` as text with every control character and bidi control escaped (``\\x1b``)."""
    return str(value).translate(_ESCAPES)
