r"""Final-answer extraction and LaTeX answer normalization for math verification.

Pure string functions, linear in the input length (every loop is bounded), so they are safe to run in the calling
process on arbitrary model output; only the symbolic comparison (math-verify / sympy) runs in worker processes.

Extraction order (:func:`extract_math_answer`): the last well-formed ``\boxed{...}`` / ``\fbox{...}`` (also the
brace-less ``\boxed 5``), then the last "final answer is X" / "answer: X" / "answer = X" phrase.

Normalization (:func:`normalize_math_answer`) removes the answer-style quirks listed in the shared data README that
math-verify does not handle itself, symmetrically for gold and prediction:

* delimiters and money: surrounding ``$``, ``\$``, trailing periods and commas, a leading ``\approx``;
* thousands separators ``10,\!080`` / ``10{,}080`` -> ``10080``; ``\dfrac``/``\tfrac`` -> ``\frac``; brace-less
  ``\frac\pi 2`` -> ``\frac{\pi}{2}``; ``\mbox``/``\textbf`` -> ``\text``; ``\left``/``\right`` sizing and
  ``\phantom{...}`` removed;
* degree marks (``^\circ``, ``\text{ degrees}``); ``e``-notation numbers (``4.5e33`` -> ``4.5\times10^{33}``);
* choice letters (``\text{(C)}``, ``(C)``, ``\textbf{(C)}`` -> ``C``);
* spaces around operators (math-verify's unit stripping would cut a trailing `` c`` from ``a + b + c``);
* ``\sin^2 t`` -> ``\sin^{2}(t)``; ``np.arcsin`` -> ``\arcsin`` (Minerva);
* subscripts latex2sympy cannot read: ``m_{\max}`` -> ``m_{max}``, ``L_{\odot}`` -> ``L_{sun}``, ``E_{1}`` ->
  ``\mathcal{E}_{1}`` (a bare ``E`` is read as Euler's number);
* a variable in front of an interval (``x \in (0,4]``, ``t(0,4]`` -> ``(0,4]``); a one-letter left side whose
  letter occurs on the right (``N=n`` -> ``n``: math-verify folds case, so the gold would read ``n = n``);
  two forms of one number (``0.56=56\%`` -> ``56\%``).

Units written as ``\text{...}`` after a number are removed by math-verify's own unit normalization.
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


_CHOICE = re.compile(r"^\s*(?:\\text(?:bf)?\s*\{\s*)?\(?\s*(?:\\text(?:bf)?\s*\{\s*)?([A-E])\s*\}?\s*\)?\s*\}?\s*$")
_ENOTATION = re.compile(r"^([-+]?\d+(?:\.\d*)?|[-+]?\.\d+)\s*[eE]\s*([-+]?\d+)$")
_NP_FUNC = re.compile(r"\bnp\.(arcsin|arccos|arctan|sinh|cosh|tanh|sin|cos|tan|exp|log|sqrt)\b")
_SUB_COMMAND = re.compile(r"_\{\s*\\(max|min)\s*\}")
_SUB_ODOT = re.compile(r"_\{\s*\\odot\s*\}|_\\odot(?![A-Za-z])")
_SUBSCRIPTED_E = re.compile(r"(?<!\\mathcal\{)(?<![A-Za-z\\])E(?=\s*_)")
_VAR_IN = re.compile(r"^[A-Za-z]\s*\\in\s*(.+)$")
_VAR_HALF_OPEN = re.compile(r"^[A-Za-z]\s*(\([^()\[\]]*\]|\[[^()\[\]]*\))$")
_OP_SPACES = re.compile(r"\s*([+\-*/=,<>])\s*")
_TRIG_POWER = re.compile(r"\\(sin|cos|tan|cot|sec|csc)\^\{?(\d)\}?\s*([A-Za-z]|\\[A-Za-z]+)(?![A-Za-z({])")
_ASSIGN = re.compile(r"^([A-Za-z])\s*=\s*(.+)$")
_NUM_LIKE = r"(?:[-+]?\d+(?:\.\d+)?(?:\\?%)?|\\frac\{\d+\}\{\d+\})"
_NUM_CHAIN = re.compile(rf"^{_NUM_LIKE}\s*=\s*({_NUM_LIKE})$")
_PHANTOM = re.compile(r"\\phantom\s*(?:\{[^{}]*\}|[^\s{])")
_BARE_FRAC = re.compile(r"\\frac(?![A-Za-z])\s*(?!\{)(\\[A-Za-z]+|[A-Za-z0-9])\s*(?!\{)(\\[A-Za-z]+|[A-Za-z0-9])")
_SIZING = re.compile(r"\\(?:left|right|big|Big|bigg|Bigg)(?![A-Za-z])")
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|\\circ|\\text\{\s*degrees?\s*\}|\\degree")


def normalize_math_answer(s: str) -> str:
    r"""Normalize a gold or predicted LaTeX answer before it is parsed by math-verify.

    The same function is applied to the gold answer and to the extracted prediction, so any rewrite here is
    symmetric. See the module docstring for the list of rewrites; examples: ``"\$32,\!348"`` -> ``"32348"``,
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
    s = s.replace(",\\!", "").replace("\\!", "").replace("{,}", "")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = s.replace("\\mbox", "\\text").replace("\\textbf", "\\text").replace("\\mathrm{~", "\\mathrm{")
    s = _SIZING.sub("", s)
    s = _DEGREES.sub("", s)
    s = _PHANTOM.sub("", s)
    s = _BARE_FRAC.sub(lambda m: "\\frac{" + m.group(1) + "}{" + m.group(2) + "}", s)
    s = s.strip()
    if s.startswith("\\approx"):  # "\approx 8.24 mph": an approximate value is still the answer
        s = s[len("\\approx") :].strip()
    # trailing sentence punctuation (not a decimal point inside a number)
    while s.endswith((".", ",", "\\.")):
        s = s[:-2] if s.endswith("\\.") else s[:-1]
        s = s.rstrip()
    # spaces around operators: math-verify's unit stripping removes a trailing " c" or " m" after a space
    # ("a + b + c" would become "a +"); no LaTeX command ends in an operator character, so this is safe
    s = _OP_SPACES.sub(lambda m: m.group(1), s)
    # "N=n": math-verify folds case, so this gold would read n = n; drop a one-letter left side whose letter (in
    # either case) appears on the right side
    m = _ASSIGN.match(s)
    if m and re.search(rf"(?<![A-Za-z\\]){m.group(1).lower()}(?![A-Za-z])", m.group(2).lower()):
        s = m.group(2)
    # "0.56=56\%": two forms of one number; keep the last, as math-verify does for a chain of equalities
    m = _NUM_CHAIN.match(s)
    if m:
        s = m.group(1)
    # \sin^2 t -> \sin^{2}(t), which latex2sympy can read
    s = _TRIG_POWER.sub(lambda m: "\\" + m.group(1) + "^{" + m.group(2) + "}(" + m.group(3) + ")", s)
    m = _CHOICE.match(s)
    if m:
        return m.group(1)
    # Python-style functions (Minerva: np.arcsin(10/13)) -> LaTeX
    s = _NP_FUNC.sub(lambda m: "\\" + m.group(1), s)
    # subscripts latex2sympy cannot read: m_{\max}, L_{\odot}
    s = _SUB_COMMAND.sub(lambda m: "_{" + m.group(1) + "}", s)
    s = _SUB_ODOT.sub("_{sun}", s)
    # a subscripted capital E (E_{1}) is read as Euler's number and fails; use a distinct symbol
    s = _SUBSCRIPTED_E.sub(lambda m: "\\mathcal{E}", s)
    # "x \in (0, 4]" and OlympiadBench's "t(0,4]" -> the interval
    m = _VAR_IN.match(s) or _VAR_HALF_OPEN.match(s)
    if m:
        s = m.group(1).strip()
    m = _ENOTATION.match(s)
    if m:
        mant, exp = m.group(1), int(m.group(2))
        return f"{mant}\\times10^{{{exp}}}"
    return s
