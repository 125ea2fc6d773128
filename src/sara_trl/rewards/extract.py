r"""Final-answer extraction and LaTeX answer normalization for math verification.

Pure string functions, linear in the input length (every loop is bounded), so they are safe to run in the calling
process on arbitrary model output; only the symbolic comparison (math-verify / sympy) runs in worker processes.

Extraction order (:func:`extract_math_answer`): the last well-formed ``\boxed{...}`` / ``\fbox{...}`` (also the
brace-less ``\boxed 5``), then the last "final answer is X" / "answer: X" / "answer = X" phrase.

Normalization (:func:`normalize_math_answer`) removes the answer-style quirks listed in the shared data README that
math-verify does not handle itself: surrounding ``$``, trailing periods, ``\!`` and ``{,}`` in thousands separators,
``\$``, ``\mbox``/``\textbf`` -> ``\text``, ``\dfrac``/``\tfrac`` -> ``\frac``, degree marks (``^\circ``,
``\text{ degrees}``), ``e``-notation numbers (``4.5e33`` -> ``4.5\times10^{33}``), ``\left``/``\right`` sizing and
choice letters (``\text{(C)}``, ``(C)``, ``\textbf{(C)}`` -> ``C``). Units written as ``\text{...}`` after a number
are removed by math-verify's own unit normalization.
"""

from __future__ import annotations

import re

__all__ = ["last_boxed", "extract_answer_phrase", "extract_math_answer", "normalize_math_answer"]

_BOX_COMMANDS = ("\\boxed", "\\fbox", "\\framebox")
_MAX_BOX_TRIES = 4  # only the last few \boxed occurrences are scanned: keeps extraction linear on adversarial text


def _braced(text: str, start: int) -> tuple[str, int] | None:
    """Content of the brace group opening at ``text[start] == "{"`` and the index after it; None if unbalanced."""
    depth = 0
    i = start
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\":  # skip escaped characters such as \{ \}
            i += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i], i + 1
        i += 1
    return None


def last_boxed(text: str) -> str | None:
    r"""Content of the last well-formed ``\boxed{...}`` (or ``\fbox{...}``, ``\framebox{...}``) in ``text``.

    Also accepts the brace-less form ``\boxed 42`` (content up to the next whitespace or ``$``). An unbalanced box
    (e.g. a truncated completion) is skipped and the previous one tried, up to 4 occurrences.

    Args:
        text: any string.

    Returns:
        The box content, stripped, or ``None`` when there is no well-formed box. An empty box gives ``""``.
    """
    positions = []
    for cmd in _BOX_COMMANDS:
        for m in re.finditer(re.escape(cmd) + r"(?![A-Za-z])", text):
            positions.append((m.start(), m.end()))
    positions.sort(reverse=True)
    for _, end in positions[:_MAX_BOX_TRIES]:
        j = end
        while j < len(text) and text[j] in " \t":
            j += 1
        if j < len(text) and text[j] == "{":
            got = _braced(text, j)
            if got is not None:
                return got[0].strip()
        elif j > end:  # "\boxed 42"
            m = re.match(r"[^\s$]+", text[j:])
            if m:
                return m.group(0).strip()
    return None


_PHRASE = re.compile(r"(?i)(?:final\s+answer|the\s+answer|answer)\s*(?:is\s*:?|:|=)\s*")
_PHRASE_WINDOW = 4000  # only the tail of the completion is searched for answer phrases


def _delimited(s: str) -> str | None:
    """If ``s`` starts with a math delimiter, return the delimited content; else None."""
    for open_, close in (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$")):
        if s.startswith(open_):
            end = s.find(close, len(open_))
            if end == -1:
                return None
            return s[len(open_) : end]
    return None


def extract_answer_phrase(text: str) -> str | None:
    r"""Answer following the last "final answer is", "the answer is", "answer:" or "answer =" in ``text``.

    If the phrase is followed by ``$...$``, ``$$...$$``, ``\(...\)`` or ``\[...\]`` the delimited content is taken;
    otherwise the rest of the line up to a sentence end (a period followed by whitespace or the end), with bold
    markers ``**`` removed. Only the last 4,000 characters are searched.

    Returns:
        The answer string (stripped), or ``None`` when there is no such phrase or nothing follows it.
    """
    tail = text[-_PHRASE_WINDOW:]
    last = None
    for m in _PHRASE.finditer(tail):
        last = m
    if last is None:
        return None
    rest = tail[last.end() :].lstrip().replace("**", "")
    content = _delimited(rest)
    if content is None:
        line = rest.split("\n", 1)[0]
        m = re.search(r"\.(?:\s|$)", line)
        content = line[: m.start()] if m else line
    content = content.strip()
    return content or None


def extract_math_answer(text: str) -> str | None:
    r"""Final answer of a math completion: last ``\boxed{}`` first, then the answer phrases.

    Args:
        text: completion text.

    Returns:
        The raw (not yet normalized) answer string, or ``None`` if the completion states no final answer.
    """
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    return extract_answer_phrase(text)


_CHOICE = re.compile(
    r"^\s*(?:\\text(?:bf)?\s*\{\s*)?\(?\s*(?:\\text(?:bf)?\s*\{\s*)?([A-E])\s*\}?\s*\)?\s*\}?\s*$"
)
_ENOTATION = re.compile(r"^([-+]?\d+(?:\.\d*)?|[-+]?\.\d+)\s*[eE]\s*([-+]?\d+)$")
_SIZING = re.compile(r"\\(?:left|right|big|Big|bigg|Bigg)(?![A-Za-z])")
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|\\circ|\\text\{\s*degrees?\s*\}|\\degree")


def normalize_math_answer(s: str) -> str:
    r"""Normalize a gold or predicted LaTeX answer before it is parsed by math-verify.

    The same function is applied to the gold answer and to the extracted prediction, so any rewrite here is
    symmetric. See the module docstring for the list of rewrites; examples: ``"\$32,\!348"`` -> ``"32,348"``,
    ``"\dfrac{17}{50}"`` -> ``"\frac{17}{50}"``, ``"30^\circ"`` -> ``"30"``, ``"-\frac{5}{3}."`` -> ``"-\frac{5}{3}"``,
    ``"4.5e33"`` -> ``"4.5\times10^{33}"``, ``"\text{(C)}"`` -> ``"C"``.

    Args:
        s: answer string (without ``\boxed{}``).

    Returns:
        The normalized string (possibly empty).
    """
    s = s.strip()
    # surrounding math delimiters
    for open_, close in (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$")):
        if s.startswith(open_) and s.endswith(close) and len(s) >= len(open_) + len(close):
            s = s[len(open_) : len(s) - len(close)].strip()
            break
    s = s.replace("\\$", "").replace("$", "")
    s = s.replace("\\!", "").replace("{,}", ",")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = s.replace("\\mbox", "\\text").replace("\\textbf", "\\text").replace("\\mathrm{~", "\\mathrm{")
    s = _SIZING.sub("", s)
    s = _DEGREES.sub("", s)
    s = s.strip()
    # trailing sentence punctuation (not a decimal point inside a number)
    while s.endswith(".") or s.endswith("\\."):
        s = s[:-2] if s.endswith("\\.") else s[:-1]
        s = s.rstrip()
    m = _CHOICE.match(s)
    if m:
        return m.group(1)
    m = _ENOTATION.match(s)
    if m:
        mant, exp = m.group(1), int(m.group(2))
        return f"{mant}\\times10^{{{exp}}}"
    return s
