r"""Final-answer extraction and LaTeX answer normalization for math verification.

Pure string functions, linear in the input length (every loop is bounded), so they are safe to run in the calling
process on arbitrary model output; only the symbolic comparison (math-verify / sympy) runs in worker processes.

**Which answers a completion states** (:func:`extract_math_answers`). The *answer part* of a completion is the text
after its last ``</think>`` (the whole text when there is none, or when the part after it states no answer: a
reasoning block's trial boxes are exploration, not answers). Its final answers are every outermost well-formed
``\boxed{...}`` / ``\fbox{...}`` (also the brace-less ``\boxed 5``) in it; without a box, the answer after the last
"final answer is X" / "answer: X" / "answer = X" phrase. The verifiers require *every* stated answer to be correct
(see :mod:`sara_trl.rewards.math_verifier`): a completion that boxes ``3`` and ``5`` has hedged, not answered, while
the same value boxed twice is one answer.

Normalization (:func:`normalize_math_answer`) removes the answer-style quirks listed in the shared data README that
math-verify does not handle itself, symmetrically for gold and prediction:

* Unicode math (``31°``, ``√2``, ``½``, ``x²``, ``x₁``, ``×``, ``−``, ``≤``, ``π``, ``∞``, Greek letters, ...) ->
  LaTeX (:func:`sara_trl.rewards.unicode_math.unicode_to_latex`);
* upright constants and operators: ``\mathrm{e}``, ``\text{e}``, ``{\rm e}`` -> ``e`` (likewise ``i`` and
  ``\pi``); ``\operatorname{sin}``, ``\mathrm{log}`` -> ``\sin``, ``\log``; ``\mathrm{lcm}``, ``\text{sgn}`` ->
  ``\operatorname{lcm}``, ``\operatorname{sgn}`` (the form math-verify reads), when an argument follows; other
  upright words, and function names with nothing after them (units such as ``\mathrm{cm}``, ``40\text{ min}``),
  are left to math-verify's unit handling;
* delimiters and money: surrounding ``$``, ``\$``, trailing periods and commas, a leading ``\approx``;
* thousands separators ``10,\!080`` / ``10{,}080`` -> ``10080``; ``\dfrac``/``\tfrac`` -> ``\frac``; brace-less
  ``\frac\pi 2`` -> ``\frac{\pi}{2}``; ``\mbox``/``\textbf`` -> ``\text``; ``\left``/``\right`` sizing and
  ``\phantom{...}`` removed;
* degree marks (``^\circ``, ``\text{ degrees}``); ``e``-notation numbers (``4.5e33`` -> ``4.5\times10^{33}``);
* an answer label in front of the answer (``\text{Answer: G}`` -> ``\text{G}``, ``Final Answer: (G)``,
  ``\text{Answer:} 5``, ``Option G``; :func:`strip_answer_label`): math-verify would read the label's letters as a
  product of symbols;
* choice letters (``\text{(C)}``, ``(C)``, ``\textbf{(C)}`` -> ``C``); a choice label followed by option text
  (``(C) Plane``) is read by :func:`choice_letter`, which the math verifier applies when the gold is a letter, and
  a list of letters (``\text{B, E, G}``, MATH's "enter the letters, separated by commas") by
  :func:`choice_letters`, which it applies when the gold is such a list;
* repeating decimals -> their exact fraction (``0.\overline{36}`` -> ``\frac{4}{11}``, ``0.1\overline{6}``,
  ``0.\dot{3}``, ``0.(3)``; :func:`rewrite_repeating_decimals`), and plain-text mixed numbers -> one fraction
  (``11 5/6`` -> ``\frac{71}{6}``; :func:`rewrite_mixed_numbers`): latex2sympy cannot read the first and misreads
  the second as ``(11+5)/6``;
* a percentage written as a LaTeX fraction or mixed number, or a repeating decimal (``33\frac{1}{3}\%``,
  ``\frac{1}{8}\%``, ``83.\overline{3}\%``) -> one number with ``\%`` (``\frac{100}{3}\%``, ``0.125\%``;
  :func:`rewrite_fraction_percents`): latex2sympy reads ``\%`` only after a number token, so such a gold could
  not be parsed even against itself; a plain ``%`` is written ``\%``;
* a unit written as plain words after a number (``118 dollars``, ``2400 cm^2``, ``0.25\, cm``) is removed, as
  math-verify removes one in ``\text{}``; a word counts as a unit when it has three or more letters or is a common
  two-letter unit (``cm``, ``ft``, ``in``, ...), and is not a connective, ``am``/``pm`` or a function name
  (``3 ab`` and ``12 sin`` stay); a subscript in text (``\lambda_{\text{red}}``) -> ``\lambda_{red}``;
  ``\text {`` -> ``\text{``; a list's last separator ``, and`` -> ``,`` (``6, 8\text{, and }10`` -> ``6,8,10``);
* spaces around operators (math-verify's unit stripping would cut a trailing `` c`` from ``a + b + c``);
* ``\sin^2 t`` -> ``\sin^{2}(t)``; ``np.arcsin`` -> ``\arcsin`` (Minerva);
* subscripts latex2sympy cannot read: ``m_{\max}`` -> ``m_{max}``, ``L_{\odot}`` -> ``L_{sun}``, ``E_{1}`` ->
  ``\mathcal{E}_{1}`` (a bare ``E`` is read as Euler's number);
* a variable in front of an interval (``x \in (0,4]``, ``t(0,4]`` -> ``(0,4]``); a one-letter left side whose
  letter occurs on the right (``N=n`` -> ``n``: math-verify folds case, so the gold would read ``n = n``);
  two forms of one number (``0.56=56\%`` -> ``56\%``);
* one-variable inequalities, unions, chains, ``\neq`` and set-builder sets -> interval notation
  (:func:`sara_trl.rewards.relations.relation_to_interval`), so ``x<3`` and ``(-\infty,3)`` compare equal in
  both directions.

Units written as ``\text{...}`` after a number are removed by math-verify's own unit normalization.

**Prose golds** (:func:`is_prose_answer`): a gold answer that is a sentence rather than a mathematical object
("no such integer exists", ``\text{two lines}``) cannot be graded (math-verify would read the words as products of
one-letter symbols); the math verifier reports it as unparseable (reward ``None``). The rule: after normalization,
two adjacent words of two or more letters each (function names such as ``sin`` or ``log`` excepted), either in the
bare answer or in an answer that is one ``\text{...}``; a ``\text{...}`` that follows a value (a unit such as
``5225 \text{ cubic inches}``, or a connective such as ``2 \text{ or } 3``) is not prose, and a one-word text
answer (``\text{Evelyn}``, ``\text{odd}``) is graded by exact text.
"""

from __future__ import annotations

import re
from fractions import Fraction

from .relations import relation_to_interval
from .unicode_math import unicode_to_latex

__all__ = [
    "last_boxed",
    "boxed_answers",
    "answer_part",
    "extract_answer_phrase",
    "extract_math_answer",
    "extract_math_answers",
    "normalize_math_answer",
    "is_prose_answer",
    "choice_letter",
    "rewrite_repeating_decimals",
    "rewrite_mixed_numbers",
    "rewrite_fraction_percents",
    "percent_fraction",
    "strip_answer_label",
    "choice_letters",
    "repeating_decimal_value",
]

_BOX_RE = re.compile(r"\\(?:boxed|fbox|framebox)(?![A-Za-z])")


def _matching_braces(text: str) -> dict[int, int]:
    """``{index of "{": index of its matching "}"}`` for every balanced brace (escaped braces skipped); one pass."""
    stack: list[int] = []
    out: dict[int, int] = {}
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            stack.append(i)
        elif c == "}" and stack:
            out[stack.pop()] = i
        i += 1
    return out


def _boxes(text: str) -> list[tuple[int, int, str]]:
    """``(start, end, content)`` of every well-formed box command in ``text``, nested ones included, in order."""
    if "\\" not in text:
        return []
    match: dict[int, int] | None = None
    out = []
    for m in _BOX_RE.finditer(text):
        j = m.end()
        while j < len(text) and text[j] in " \t":
            j += 1
        if j < len(text) and text[j] == "{":
            if match is None:
                match = _matching_braces(text)
            end = match.get(j)
            if end is not None:
                out.append((m.start(), end + 1, text[j + 1 : end].strip()))
        elif j > m.end():  # "\boxed 42"
            b = re.match(r"[^\s$]+", text[j:])
            if b:
                out.append((m.start(), j + b.end(), b.group(0).strip()))
    return out


def last_boxed(text: str) -> str | None:
    r"""Content of the last well-formed ``\boxed{...}`` (or ``\fbox{...}``, ``\framebox{...}``) in ``text``.

    Also accepts the brace-less form ``\boxed 42`` (content up to the next whitespace or ``$``). An unbalanced box
    (e.g. a truncated completion) is skipped and the previous one taken; of nested boxes the innermost is the last.
    Linear in ``len(text)``.

    Parameters
    ----------
    text : str
        Any string.

    Returns
    -------
    str or None
        The box content, stripped, or ``None`` when there is no well-formed box. An empty box gives ``""``.
    """
    boxes = _boxes(text)
    return boxes[-1][2] if boxes else None


def boxed_answers(text: str) -> list[str]:
    r"""Contents of every outermost well-formed ``\boxed{...}`` / ``\fbox{...}`` / ``\framebox{...}``, in order.

    A box nested in another box is part of the outer one; an unbalanced box (a truncated completion) is skipped;
    the brace-less form ``\boxed 42`` takes the content up to the next whitespace or ``$``. Linear in
    ``len(text)``.

    Parameters
    ----------
    text : str
        Any string.

    Returns
    -------
    list of str
        The stripped box contents (an empty box gives ``""``); ``[]`` when there is no well-formed box.
    """
    out: list[str] = []
    covered = -1  # end of the last outermost box: boxes that start before it are nested in it
    for start, end, content in _boxes(text):
        if start >= covered:
            out.append(content)
            covered = end
    return out


def answer_part(text: str) -> str:
    """The text after the last ``</think>`` of a completion (the whole text when there is none)."""
    end = text.rfind("</think>")
    return text if end < 0 else text[end + len("</think>") :]


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
    markers ``**`` removed.

    Parameters
    ----------
    text : str
        Completion text; only its last 4,000 characters are searched.

    Returns
    -------
    str or None
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


def extract_math_answers(text: str) -> list[str]:
    r"""Every final answer a math completion states (see the module docstring for the rule).

    Parameters
    ----------
    text : str
        Completion text.

    Returns
    -------
    list of str
        The raw (not yet normalized) answers of the answer part, in order: its non-empty box contents (``[""]``
        when it has only empty boxes), else ``[phrase answer]``, else ``[]``. When the part after the last
        ``</think>`` yields nothing, the whole text is searched the same way.
    """
    part = answer_part(text)
    for source in (part, text) if part is not text else (text,):
        boxes = boxed_answers(source)
        if boxes:
            return [b for b in boxes if b] or [""]
        phrase = extract_answer_phrase(source)
        if phrase is not None:
            return [phrase]
    return []


def extract_math_answer(text: str) -> str | None:
    r"""The final answer of a math completion: the last of :func:`extract_math_answers`, or None when there is none.

    Parameters
    ----------
    text : str
        Completion text.

    Returns
    -------
    str or None
        The raw (not yet normalized) answer string, or ``None`` if the completion states no final answer.
    """
    answers = extract_math_answers(text)
    return answers[-1] if answers else None


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
# a subscript in text: \lambda_{\text{red}}, x_\text{max} -> \lambda_{red}, x_{max} (latex2sympy cannot read it)
_TEXT_SUBSCRIPT = re.compile(
    r"_\s*(?:\{\s*\\(?:text|mathrm|textrm)\s*\{([^{}]*)\}\s*\}|\\(?:text|mathrm|textrm)\s*\{([^{}]*)\})"
)
_LIST_AND = re.compile(r"(?<=[\w}]),(?:and\s+|\\text\{\s*(?:,\s*)?and\s*\})|\\text\{\s*,\s*and\s*\}")
_BARE_UNIT = re.compile(
    r"^(-?(?:\d[\d,]*(?:\.\d+)?|\.\d+)(?:\\sqrt\{\d+\})?)(?:\s|\\[,;: ]|~)+"
    r"((?:[A-Za-z]{2,}\.?)(?:\s+[A-Za-z]{2,}\.?)*)(?:\^\{?\d\}?)?$"
)
# words after a number that are not a unit: connectives, times of day, words that change the value (function
# names are excluded too)
_NOT_UNITS = frozenset(
    "and or am pm hundred hundreds thousand thousands million millions billion billions trillion dozen squared "
    "cubed factorial half halves third thirds quarter quarters percent".split()
)
# two-letter words read as units; other two-letter words ("3 ab") may be a product of symbols and are kept
_SHORT_UNITS = frozenset("cm mm km nm ft in yd mi kg mg lb oz ml hr sq".split())


def _unit_word(word: str) -> bool:
    w = word.lower().strip(".")
    if w in _NOT_UNITS or w in _LATEX_FUNCS or w in _OTHER_FUNCS:
        return False
    return len(w) >= 3 or w in _SHORT_UNITS


_PHANTOM = re.compile(r"\\phantom\s*(?:\{[^{}]*\}|[^\s{])")
_BARE_FRAC = re.compile(r"\\frac(?![A-Za-z])\s*(?!\{)(\\[A-Za-z]+|[A-Za-z0-9])\s*(?!\{)(\\[A-Za-z]+|[A-Za-z0-9])")
_SIZING = re.compile(r"\\(?:left|right|big|Big|bigg|Bigg)(?![A-Za-z])")
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|\\circ|\\text\{\s*degrees?\s*\}|\\degree")

# repeating decimals: 0.\overline{36}, .\overline{3}, 0.1\overline{6}, 0.\bar{3}, 0.\dot{3}, 0.\dot{1}4\dot{2};
# the digits before the point must not follow a word character, a point or "<digit>," (a thousands group), and a
# base subscript after the bar (133.\overline{133}_n, a number in base n) leaves the number alone
_REP_MARK = (
    r"\\(?:overline|bar)\s*(?:\{\s*\d[\d\s]*\}|\d)"
    r"|\\dot\s*(?:\{\s*\d\s*\}|\d)(?:\d*\\dot\s*(?:\{\s*\d\s*\}|\d))?"
)
_REPEATING = re.compile(
    r"(?<![\w.\\])(?<!\d,)(\d*) ?\. ?(\d*) ?(" + _REP_MARK + r")(?! *_)(?: *(?:\\[lc]?dots|\.\.\.))?"
)
# plain text 0.(3), 1.(142857): the whole answer, the block right after the point ("51.2(7)" is a product)
_REPEATING_PAREN = re.compile(r"^([-+]?)(\d*)\.\((\d+)\)$")
# a plain-text mixed number "11 5/6": a whole number at the start or after an opening bracket, a separator or an
# operator; one or more spaces; a fraction of integers; nothing after it that would bind to the fraction
_MIXED_NUMBER = re.compile(
    r"(^|[(\[,;=+\-<>])( *)(\d+)(?: |\\ |~)+(\d+) */ *(\d+)"
    r"(?![\w.(^_/!]|\\(?!text|mbox|mathrm|%|[,;! ]|q?quad)| *[\^!/])"
)


def _fraction_latex(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    return "\\frac{" + str(value.numerator) + "}{" + str(value.denominator) + "}"


def repeating_decimal_value(whole: str, fixed: str, repeating: str) -> Fraction:
    """Exact value of the repeating decimal ``whole.fixed(repeating)(repeating)...``.

    Parameters
    ----------
    whole, fixed, repeating : str
        Digit strings: the integer part (may be empty), the non-repeating digits after the point (may be empty) and
        the repeating block (non-empty). ``("0", "1", "6")`` is ``0.1666... = 1/6``.

    Returns
    -------
    Fraction
        The exact rational value.
    """
    base = Fraction(int(whole or "0"))
    scale = 10 ** len(fixed) * (10 ** len(repeating) - 1)
    return base + Fraction(int(fixed + repeating) - int(fixed or "0"), scale)


def _repeating(m: re.Match) -> str:
    digits = "".join(re.findall(r"\d", re.sub(r"\\[A-Za-z]+", "", m.group(3))))
    return _fraction_latex(repeating_decimal_value(m.group(1), m.group(2), digits))


def rewrite_repeating_decimals(s: str) -> str:
    r"""Replace every repeating decimal in ``s`` by its exact value as a fraction.

    latex2sympy cannot read a repeating decimal: ``0.\overline{36}`` does not parse at all (a gold answer written so
    could never be scored) and ``0.1\overline{6}`` parses as the product ``0.1 \cdot \bar{6}``, so a correct
    ``\frac{1}{6}`` is graded wrong. The exact rational value is what the notation means, so it is substituted on
    both sides before parsing.

    Read forms: a decimal point (with or without digits before and after it) followed by ``\overline{...}``,
    ``\bar{...}`` (braces optional for one digit) or ``\dot{d}`` / ``\dot{d}...\dot{d}`` (the dots mark the first and
    last repeating digit), optionally followed by ``\ldots``; a sign in front stays as it is. A whole answer in plain
    text with the repeating block in parentheses right after the point (``0.(3)``, ``-1.(142857)``) is read the same
    way; ``0.1(6)`` and any such form inside a longer answer are not, since a product such as ``51.2(7)`` looks the
    same. A bar without a decimal point (``\overline{2008}``, digit notation or a
    conjugate) and a bar followed by a base subscript (``133.\overline{133}_n``) are left alone.

    Parameters
    ----------
    s : str
        An answer string (LaTeX, without ``\boxed``).

    Returns
    -------
    str
        ``s`` with each repeating decimal replaced, e.g. ``"0.\overline{36}"`` -> ``"\frac{4}{11}"``,
        ``"-1.\overline{142857}"`` -> ``"-\frac{8}{7}"``, ``"0.\overline{9}"`` -> ``"1"``.
    """
    if "." in s and "\\" in s:
        s = _REPEATING.sub(_repeating, s)
    m = _REPEATING_PAREN.match(s.strip())
    if m:
        sign, whole, rep = m.groups()
        s = ("-" if sign == "-" else "") + _fraction_latex(repeating_decimal_value(whole, "", rep))
    return s


def _mixed_number(m: re.Match) -> str:
    whole, num, den = int(m.group(3)), int(m.group(4)), int(m.group(5))
    if not 0 < num < den:
        return m.group(0)
    return m.group(1) + m.group(2) + _fraction_latex(whole + Fraction(num, den))


def rewrite_mixed_numbers(s: str) -> str:
    r"""Replace every plain-text mixed number (``11 5/6``) in ``s`` by one fraction (``\frac{71}{6}``).

    math-verify reads ``11 5/6`` as ``(11+5)/6 = 8/3``, not the ``71/6`` a person means, so a correct
    ``\frac{71}{6}`` is graded wrong and a wrong ``\frac{8}{3}`` is graded right. A mixed number is: a whole number
    (at the start of the answer, or after an opening bracket, a comma, a semicolon, ``=``, ``<``, ``>``, ``+`` or
    ``-``; not after a colon, as in the time ``16:00 2/3``), one or more spaces (also ``\ `` or ``~``; not the thin
    space ``\,``, which also separates digit groups: ``12\,345/678``), then a *proper* fraction of integers
    (``0 < numerator < denominator``) that is not followed by something that binds to it (a letter or digit, ``.``,
    ``(``, ``^``, ``_``, ``/``, ``!``, or a LaTeX command other than ``\text``/``\mbox``/``\mathrm``, ``\%`` and
    spacing). A sign in front stays as it is (``-2 1/2`` is ``-\frac{5}{2}``). Not rewritten: ``2 \cdot 3/4`` (an
    operator between), ``x 1/2`` (no whole number), ``1, 2/3`` (a list), ``3 7/5`` (improper). LaTeX mixed numbers
    (``2\frac{2}{3}``) are read correctly by latex2sympy and are not touched.

    Parameters
    ----------
    s : str
        An answer string (LaTeX, without ``\boxed``).

    Returns
    -------
    str
        ``s`` with each mixed number replaced, e.g. ``"11 5/6"`` -> ``"\frac{71}{6}"``, ``"(1 1/2, 3)"`` ->
        ``"(\frac{3}{2}, 3)"``.
    """
    if "/" not in s:
        return s
    return _MIXED_NUMBER.sub(_mixed_number, s)


# a percent sign after a LaTeX fraction, a LaTeX mixed number (33\frac{1}{3}\%) or a repeating decimal (which is a
# fraction by then): latex2sympy reads a percent only after a number token, so these golds could not be parsed
_FRACTION_PERCENT = re.compile(
    r"(?<![\w.^_}\\])(?:(\d+)\s*)?\\frac\s*\{\s*(\d+)\s*\}\s*\{\s*(\d+)\s*\}\s*\\%"
)
_WHOLE_FRACTION_PERCENT = re.compile(r"^-?\\frac\{(\d+)\}\{(\d+)\}\\%$")


def _decimal(value: Fraction) -> str | None:
    """The exact decimal form of ``value`` when it has one (denominator ``2^a 5^b``), else None."""
    q, k = value.denominator, 0
    while q % 2 == 0 or q % 5 == 0:
        q //= 2 if q % 2 == 0 else 5
        k += 1
    if q != 1:
        return None
    if k == 0:
        return str(value.numerator)
    digits = str(abs(value.numerator) * 10**k // value.denominator).rjust(k + 1, "0")
    return ("-" if value < 0 else "") + digits[:-k] + "." + digits[-k:]


def _fraction_percent(m: re.Match) -> str:
    whole, num, den = m.group(1), int(m.group(2)), int(m.group(3))
    if den == 0:
        return m.group(0)
    value = int(whole or "0") + Fraction(num, den)
    dec = _decimal(value)
    return (dec if dec is not None else _fraction_latex(value)) + "\\%"


def rewrite_fraction_percents(s: str) -> str:
    r"""Write a percentage given as a LaTeX fraction or mixed number as one number latex2sympy reads as a percent.

    latex2sympy reads ``\%`` only after a number token (``12.5\%`` is ``12.5 \cdot \frac{1}{100}``): a gold
    ``33\frac{1}{3}\%``, ``\frac{1}{8}\%`` or ``83.\overline{3}\%`` (a fraction after
    :func:`rewrite_repeating_decimals`) could not be parsed at all, so its prompt could never train. A fraction of
    integers (with an optional whole part in front: a mixed number) followed by ``\%`` becomes its exact decimal when
    it has one (``12\frac{1}{2}\%`` -> ``12.5\%``), else one reduced fraction (``33\frac{1}{3}\%`` ->
    ``\frac{100}{3}\%``), which the math verifier's worker reads as a percentage (the same object latex2sympy makes
    of ``12.5\%``) when it is the whole answer. A sign in front stays as it is.

    Parameters
    ----------
    s : str
        An answer string (LaTeX, without ``\boxed``).

    Returns
    -------
    str
        ``s`` with each such percentage rewritten.
    """
    if "\\%" not in s or "\\frac" not in s:
        return s
    return _FRACTION_PERCENT.sub(_fraction_percent, s)


def percent_fraction(s: str) -> Fraction | None:
    r"""The percentage of a whole answer ``\frac{p}{q}\%`` (as :func:`rewrite_fraction_percents` writes it), or None."""
    m = _WHOLE_FRACTION_PERCENT.match(s)
    if not m or int(m.group(2)) == 0:
        return None
    value = Fraction(int(m.group(1)), int(m.group(2)))
    return -value if s.startswith("-") else value


# a label in front of the answer: "Answer: G", "\text{Answer: G}", "\text{Final answer:} G", "**Answer:** G",
# "The answer is G", "Option G", "Choice: (G)"; the label is removed, the answer kept
_LABEL = (
    r"(?:(?:the\s+)?(?:final\s+|correct\s+)?answer(?:\s+is\s*:?|\s*:)"
    r"|(?:the\s+)?(?:correct\s+)?(?:option|choice)(?:\s+is\s*:?|\s*:|\s+(?=\(?[A-Z](?![A-Za-z]))))"
)
_LABEL_TEXT_ALONE = re.compile(
    r"(?i)^\\text\s*\{\s*(?:\*\*)?" + _LABEL + r"\s*(?:\*\*)?\s*\}(?:\s|\\ |~|\\,|\\;)*(.+)$"
)
_LABEL_IN_TEXT = re.compile(r"(?i)^\\text\s*\{\s*(?:\*\*)?" + _LABEL + r"\s*(?:\*\*)?\s*([^{}]+)\}$")
_LABEL_BARE = re.compile(r"(?i)^(?:\*\*)?" + _LABEL + r"\s*(?:\*\*)?(?:\s|\\ |~)*(.+)$")


def strip_answer_label(s: str) -> str:
    r"""``s`` without a leading answer label (``Answer:``, ``Final answer:``, ``The answer is``, ``Option``).

    Models box a label with the answer: ``\boxed{\text{Answer: G}}``, ``\boxed{\text{Answer:}\ G}``,
    ``\boxed{Final Answer: (G)}``; math-verify reads the label's letters as a product of symbols and grades the
    answer wrong. The label is removed (``\text{Answer: G}`` -> ``\text{G}``, ``\text{Answer:} 5`` -> ``5``); the
    rest of the answer is kept as written, so a wrong letter after a label stays wrong. ``Option``/``Choice``
    without a colon count only before a choice letter (``Option G``).

    Parameters
    ----------
    s : str
        An answer string (``\textbf``/``\mbox`` already written as ``\text``).

    Returns
    -------
    str
        ``s`` without its label, or ``s`` when it has none (or nothing follows the label).
    """
    s = s.strip()
    if not re.match(r"(?i)(?:\\text\s*\{\s*)?(?:\*\*)?(?:the|final|correct|answer|option|choice)", s):
        return s
    m = _LABEL_TEXT_ALONE.match(s)
    if m and m.group(1).strip():
        return m.group(1).strip()
    m = _LABEL_IN_TEXT.match(s)
    if m and m.group(1).strip():
        return "\\text{" + m.group(1).strip() + "}"
    m = _LABEL_BARE.match(s)
    if m and m.group(1).strip():
        return m.group(1).strip()
    return s


# a list of choice letters, MATH's "enter the letters, separated by commas": "\text{B, E, G}", "B, E, and G",
# "(A), (C)", "\text{A}, \text{C}"
_LIST_ITEM = re.compile(r"^(?:[A-Z]|\(\s*[A-Z]\s*\))$")
_LIST_SEP = re.compile(r"\s*(?:,\s*(?:and\s+)?|;\s*|\s+and\s+|\\text\{\s*and\s*\})\s*")


def choice_letters(s: str) -> frozenset[str] | None:
    r"""The set of choice letters a letter-list answer names (``\text{B, E, G}`` -> ``{B, E, G}``), or None.

    An answer is a letter list when, without ``\text{}``/``\textbf{}``/``\mathrm{}`` wrappers and markdown bold,
    it is capital letters (each bare or in parentheses) separated by commas, semicolons or "and". A single letter
    gives a one-element set. Order does not matter (MATH asks for the letters of the true statements); a repeated
    letter counts once.

    Parameters
    ----------
    s : str
        An answer string (raw or normalized).

    Returns
    -------
    frozenset of str or None
        The letters, or None when ``s`` is not a letter list.
    """
    t = s.strip().strip("$").replace("**", "")
    t = re.sub(r"\\(?:text|textbf|mathrm|mathbf|mbox|textrm)\s*\{([^{}]*)\}", r"\1", t).strip()
    if not t or len(t) > 200:
        return None
    items = [x.strip() for x in _LIST_SEP.split(t)]
    if not items or not all(_LIST_ITEM.match(x) for x in items):
        return None
    return frozenset(x.strip("() ") for x in items)


# a leading choice label: "(E) text", "\text{(E) text}", "\textbf{(E)}\ text", "E: text", "E) text", "E. text",
# "E - text"; the separator is required when the letter is not in parentheses
_CHOICE_WRAP = r"(?:\*\*)?(?:\\(?:text|textbf|mathbf|mathrm|textrm|mbox)\s*\{\s*)?(?:\*\*)?"
_CHOICE_ONLY = re.compile(r"^" + _CHOICE_WRAP + r"\(?\s*" + _CHOICE_WRAP + r"([A-Z])\s*\}?\s*\)?\s*\}?(?:\*\*)?$")
_CHOICE_LEAD = re.compile(
    r"^"
    + _CHOICE_WRAP
    + r"(?:\(\s*([A-Z])\s*\)\s*\}?(?:\*\*)?\s*(?:[:.]|(?=[\s\\~]|$))"
    + r"|([A-Z])\s*\}?(?:\*\*)?(?::|\)|\.(?=\s|$)|\s+[-\u2013\u2014](?=\s)))"
    + r"(.*)$",
    re.DOTALL,
)
# another choice label in the option text means several choices were given (a hedge): "(A) or (B)", "A: 1, B: 2"
_OTHER_LABEL = re.compile(
    r"(?<![A-Za-z\\])\(\s*[A-Z]\s*\)|(?:^|[\s,;])[A-Z](?::|\))|(?:\bor|\band|,)\s*\(?[A-Z]\)?\s*\}?\s*$"
)


def choice_letter(s: str, option_text: bool = False) -> str | None:
    r"""The multiple-choice letter an answer names, or None.

    With ``option_text=False`` only a bare label counts: ``E``, ``(E)``, ``\text{E}``, ``\text{(E)}``,
    ``\textbf{(E)}`` (one capital letter). With ``option_text=True`` a label followed by the option's text counts
    too, as models often repeat the option: ``(E) A polygenic risk score``, ``\text{(C) Plane}``,
    ``\textbf{(B)}\ 3(1+r/10)^x=7``, ``E: text``, ``E) text``, ``E. text``, ``E - text``. A letter that is not in
    parentheses needs one of those separators (``E-1`` and ``C \cdot 2`` are not labels), and an option text that
    names another choice (``(A) or (B)``, ``A: 1, B: 2``) is a hedge, not one letter. The option text itself is
    not checked: the gold answer of a multiple-choice problem is the letter alone.

    Parameters
    ----------
    s : str
        An answer string (raw or normalized).
    option_text : bool, default False
        Whether a label followed by option text is accepted.

    Returns
    -------
    str or None
        The capital letter, or None when ``s`` is not a choice label.
    """
    s = s.strip()
    if len(s) >= 2 and s[0] == "$" and s[-1] == "$":
        s = s.strip("$").strip()
    m = _CHOICE_ONLY.match(s)
    if m:
        return m.group(1)
    if not option_text:
        return None
    m = _CHOICE_LEAD.match(s)
    if not m or _OTHER_LABEL.search(m.group(3)):
        return None
    return m.group(1) or m.group(2)


# upright constants and operators: \mathrm{e}, \operatorname{sin}, {\rm e}, \text{lcm}
_LATEX_FUNCS = frozenset(
    "sin cos tan cot sec csc arcsin arccos arctan sinh cosh tanh coth log ln lg exp max min gcd det deg dim lim sup "
    "inf arg ker".split()
)
_OTHER_FUNCS = frozenset("lcm sgn sign arccot arcsec arccsc tg ctg arctg Re Im rank tr erf".split())
_UPRIGHT = re.compile(
    r"\\(?:mathrm|mathit|mathsf|mathup|textrm|textup|textit|text|operatorname\*?)\s*\{\s*(\\pi|[A-Za-z]+)\s*\}"
    r"|\{\s*\\rm\s+(\\pi|[A-Za-z]+)\s*\}"
)


def _upright(m: re.Match) -> str:
    name = m.group(1) or m.group(2)
    if name in ("e", "i", "\\pi"):
        return name + " " if name == "\\pi" else name
    # a function name must have an argument after it: "40\text{ min}" and "5\mathrm{sec}" are units
    rest = m.string[m.end() :].lstrip()
    if not rest or not (rest[0].isalnum() or rest[0] in "({[\\^_"):
        return m.group(0)
    if name in _LATEX_FUNCS:
        return "\\" + name + " "
    if name in _OTHER_FUNCS:
        return "\\operatorname{" + name + "}"
    return m.group(0)


_TEXT_GROUP = re.compile(r"\\(?:text|mbox|textrm|textit|mathrm)\s*\{([^{}]*)\}")
_WORD = re.compile(r"[A-Za-z]{2,}")


def _two_adjacent_words(s: str) -> bool:
    tokens = [t.strip(",.;:!?()") for t in s.split()]
    words = [bool(_WORD.fullmatch(t)) and t.lower() not in _LATEX_FUNCS | _OTHER_FUNCS for t in tokens]
    return any(a and b for a, b in zip(words, words[1:]))


def is_prose_answer(s: str) -> bool:
    r"""True when a (normalized) answer is a sentence rather than a mathematical object.

    The rule (documented in the module docstring): two adjacent words of two or more letters each, function names
    excepted, either in the bare answer or in an answer that is one ``\text{...}`` group. ``\text{...}`` groups
    next to a value (units, connectives) are not read. Examples: ``"no such integer exists"``,
    ``"\text{two lines}"`` and ``"f(x)=ax+b, where b is an arbitrary integer"`` are prose; ``"\text{Evelyn}"``,
    ``"5225 \text{ cubic inches}"``, ``"2 \text{ or } 3"``, ``"abc"`` and ``"\sin x + \cos x"`` are not.

    Parameters
    ----------
    s : str
        A normalized answer (see :func:`normalize_math_answer`).

    Returns
    -------
    bool
        Whether the answer reads as prose.
    """
    whole = _TEXT_GROUP.fullmatch(s.strip())
    if whole:
        return _two_adjacent_words(whole.group(1))
    bare = re.sub(r"\\[A-Za-z]+", " ", _TEXT_GROUP.sub(" ", s))
    return _two_adjacent_words(bare)


def normalize_math_answer(s: str) -> str:
    r"""Normalize a gold or predicted LaTeX answer before it is parsed by math-verify.

    The same function is applied to the gold answer and to the extracted prediction, so any rewrite here is
    symmetric. See the module docstring for the list of rewrites; examples: ``"\$32,\!348"`` -> ``"32348"``,
    ``"\dfrac{17}{50}"`` -> ``"\frac{17}{50}"``, ``"30^\circ"`` -> ``"30"``, ``"-\frac{5}{3}."`` -> ``"-\frac{5}{3}"``,
    ``"4.5e33"`` -> ``"4.5\times10^{33}"``, ``"\text{(C)}"`` -> ``"C"``.

    Parameters
    ----------
    s : str
        Answer string (without ``\boxed{}``).

    Returns
    -------
    str
        The normalized string (possibly empty).
    """
    s = unicode_to_latex(s.strip())
    # surrounding math delimiters
    for open_, close in (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$")):
        if s.startswith(open_) and s.endswith(close) and len(s) >= len(open_) + len(close):
            s = s[len(open_) : len(s) - len(close)].strip()
            break
    s = s.replace("\\$", "").replace("$", "")
    s = s.replace(",\\!", "").replace("\\!", "").replace("{,}", "")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = re.sub(r"(?<!\\)%", r"\\%", s)  # a plain-text percent sign (12.5%) as LaTeX writes it
    s = s.replace("\\mbox", "\\text").replace("\\textbf", "\\text").replace("\\mathrm{~", "\\mathrm{")
    s = re.sub(r"\\(text|mathrm|textrm|operatorname)\s+\{", r"\\\1{", s)  # "\text { cm}" -> "\text{ cm}"
    s = strip_answer_label(s)
    s = _UPRIGHT.sub(_upright, s)
    s = _SIZING.sub("", s)
    s = _TEXT_SUBSCRIPT.sub(lambda m: "_{" + (m.group(1) if m.group(1) is not None else m.group(2)).strip() + "}", s)
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
    # repeating decimals and plain-text mixed numbers -> exact fractions (latex2sympy misreads both)
    s = rewrite_repeating_decimals(s)
    s = rewrite_mixed_numbers(s)
    s = rewrite_fraction_percents(s)
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
    # "6, 8, and 10" / "6, 8\text{, and }10": a list's last separator (latex2sympy reads "and" as a product)
    s = _LIST_AND.sub(",", s)
    # a unit written as plain words after a number ("118 dollars", "2400 cm^2"): math-verify strips a unit in
    # \text{} but reads bare words as a product of one-letter symbols
    m = _BARE_UNIT.match(s)
    if m and all(_unit_word(w) for w in m.group(2).split()):
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
    return relation_to_interval(s)
