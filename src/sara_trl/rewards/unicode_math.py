r"""Unicode math symbols rewritten as the LaTeX the verifiers read.

Chat models and scraped datasets write answers such as ``31°``, ``2√3``, ``1½``, ``x²``, ``10⁻³``, ``x₁``, ``3×4``,
``−5``, ``x ≤ 2``, ``2π`` or ``(−∞, 3)``. :func:`unicode_to_latex` turns each into its LaTeX form (``31^\circ``,
``2\sqrt{3}``, ``\frac{3}{2}``, ``x^{2}``, ``10^{-3}``, ``x_{1}``, ``3\times4``, ``-5``, ``x\le 2``, ``2\pi``,
``(-\infty,3)``), so the math verifier treats both spellings alike; it is applied to gold answers and predictions
by :func:`sara_trl.rewards.extract.normalize_math_answer`. :func:`unicode_digits_and_signs` is the smaller rewrite
the numeric and Countdown verifiers use (minus signs, full-width digits, multiplication/division signs, spaces).

Rules (each a plain character rewrite, linear in the input length):

* a vulgar fraction is a fraction; one written right after an integer (``1½``, ``2 ¾``) is a mixed number and
  becomes one improper fraction (``\frac{3}{2}``, ``\frac{11}{4}``); the fraction slash ``⁄`` is ``/``;
* ``√``, ``∛``, ``∜`` take the group that follows: ``(...)`` or ``{...}``, else a decimal number, a LaTeX command
  or one letter (``√2x`` is ``\sqrt{2}x``);
* digits carrying a combining overline or macron (``0.3\u0305``, as typed for a repeating decimal) are one
  ``\overline{...}`` group (``0.\overline{3}``), which :func:`sara_trl.rewards.extract.normalize_math_answer` then reads
  as a repeating decimal;
* a run of superscript characters is one exponent (``x⁻¹²`` -> ``x^{-12}``), a run of subscript characters one
  subscript;
* ``°C``, ``°F``, ``℃``, ``℉`` are temperature units and are dropped (as other units are); a lone ``°`` (or ``º``)
  is a degree mark, ``^\circ``;
* symbols with a LaTeX command (``π``, ``∞``, ``≤``, ``∪``, Greek letters, ...) become that command followed by
  a space, so ``πr`` reads ``\pi r``.
"""

from __future__ import annotations

import re
from fractions import Fraction

__all__ = ["unicode_to_latex", "unicode_digits_and_signs"]

_VULGAR = {
    "½": (1, 2), "⅓": (1, 3), "⅔": (2, 3), "¼": (1, 4), "¾": (3, 4), "⅕": (1, 5), "⅖": (2, 5), "⅗": (3, 5),
    "⅘": (4, 5), "⅙": (1, 6), "⅚": (5, 6), "⅐": (1, 7), "⅛": (1, 8), "⅜": (3, 8), "⅝": (5, 8), "⅞": (7, 8),
    "⅑": (1, 9), "⅒": (1, 10), "↉": (0, 3),
}  # fmt: skip
_SUPER = dict(zip("⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁼⁽⁾ⁿⁱˣʸ", "0123456789+-=()nixy"))
_SUB = dict(zip("₀₁₂₃₄₅₆₇₈₉₊₋₌₍₎ₐₑₒₓₙᵢⱼₖₘₜ", "0123456789+-=()aeoxnijkmt"))
_COMMANDS = {
    "π": "\\pi", "∞": "\\infty", "≤": "\\le", "⩽": "\\le", "≥": "\\ge", "⩾": "\\ge", "≠": "\\neq",
    "≈": "\\approx", "×": "\\times", "·": "\\cdot", "⋅": "\\cdot", "÷": "\\div", "±": "\\pm", "∓": "\\mp",
    "∪": "\\cup", "∩": "\\cap", "∈": "\\in", "∉": "\\notin", "∅": "\\emptyset", "∠": "\\angle", "→": "\\to",
    "⊂": "\\subset", "⊆": "\\subseteq", "∖": "\\setminus", "ℝ": "\\mathbb{R}", "ℤ": "\\mathbb{Z}",
    "ℕ": "\\mathbb{N}", "ℚ": "\\mathbb{Q}", "ℂ": "\\mathbb{C}",
    "α": "\\alpha", "β": "\\beta", "γ": "\\gamma", "δ": "\\delta", "ε": "\\epsilon", "ζ": "\\zeta", "η": "\\eta",
    "θ": "\\theta", "ι": "\\iota", "κ": "\\kappa", "λ": "\\lambda", "μ": "\\mu", "µ": "\\mu", "ν": "\\nu",
    "ξ": "\\xi", "ρ": "\\rho", "σ": "\\sigma", "τ": "\\tau", "υ": "\\upsilon", "φ": "\\phi", "ϕ": "\\phi",
    "χ": "\\chi", "ψ": "\\psi", "ω": "\\omega", "Γ": "\\Gamma", "Δ": "\\Delta", "Θ": "\\Theta", "Λ": "\\Lambda",
    "Ξ": "\\Xi", "Π": "\\Pi", "Σ": "\\Sigma", "Φ": "\\Phi", "Ψ": "\\Psi", "Ω": "\\Omega",
}  # fmt: skip
# characters with a plain ASCII equivalent: minus and hyphen variants, fraction and division slashes, spaces
_PLAIN = {
    "−": "-", "‐": "-", "‑": "-", "﹣": "-", "－": "-", "⁄": "/", "∕": "/", "∗": "*", "\u00a0": " ", "\u2009": " ",
    "\u202f": " ", "\u2007": " ", "\u200b": "", "\u2060": "", "\ufeff": "",
}  # fmt: skip
_FULLWIDTH = {chr(c): chr(c - 0xFEE0) for c in range(0xFF01, 0xFF5F)}  # full-width ASCII forms
_PLAIN_TABLE = str.maketrans({**_FULLWIDTH, **_PLAIN})
_SIMPLE_TABLE = str.maketrans({**_FULLWIDTH, **_PLAIN, "×": "*", "·": "*", "⋅": "*", "÷": "/"})

_MIXED = re.compile(r"(?<![\d.])(\d+) ?([" + "".join(_VULGAR) + "])")
_VULGAR_RE = re.compile("[" + "".join(_VULGAR) + "]")
_TEMPERATURE = re.compile(r"\s*(?:[°º]\s*[CF](?![A-Za-z])|[℃℉])")
_SUPER_RUN = re.compile("[" + "".join(_SUPER) + "]+")
_SUB_RUN = re.compile("[" + "".join(_SUB) + "]+")
_ROOTS = {"√": "\\sqrt", "∛": "\\sqrt[3]", "∜": "\\sqrt[4]"}
_ROOT_ARG = re.compile(r"\s*(\d+(?:\.\d+)?|\\[A-Za-z]+|[A-Za-z])")
_NON_ASCII = re.compile(r"[^\x00-\x7f]")
_COMBINING_BAR = re.compile("((?:\\d[\u0304\u0305])+)")  # digits each followed by U+0305 (overline) or U+0304


def _frac(num: int, den: int) -> str:
    return "\\frac{" + str(num) + "}{" + str(den) + "}"


def _mixed(m: re.Match) -> str:
    num, den = _VULGAR[m.group(2)]
    value = Fraction(int(m.group(1))) + Fraction(num, den)
    return _frac(value.numerator, value.denominator)


def _group_end(s: str, i: int) -> int | None:
    """Index after the bracket group opening at ``s[i]`` (``(`` or ``{``), or None when it is not closed."""
    open_, close = s[i], ")" if s[i] == "(" else "}"
    depth = 0
    for j in range(i, len(s)):
        if s[j] == open_:
            depth += 1
        elif s[j] == close:
            depth -= 1
            if depth == 0:
                return j + 1
    return None


def _roots(s: str) -> str:
    out = []
    i = 0
    while i < len(s):
        c = s[i]
        if c not in _ROOTS:
            out.append(c)
            i += 1
            continue
        j = i + 1
        while j < len(s) and s[j] == " ":
            j += 1
        end = _group_end(s, j) if j < len(s) and s[j] in "({" else None
        if end is not None:
            out.append(_ROOTS[c] + "{" + s[j + 1 : end - 1] + "}")
            i = end
            continue
        m = _ROOT_ARG.match(s, i + 1)
        if m:
            out.append(_ROOTS[c] + "{" + m.group(1) + "}")
            i = m.end()
        else:  # nothing to take the root of: leave the sign (the answer will not parse)
            out.append(c)
            i += 1
    return "".join(out)


def unicode_digits_and_signs(s: str) -> str:
    """Full-width characters to ASCII, Unicode minus/hyphen signs to ``-``, ``×``/``·`` to ``*``, ``÷``/``⁄`` to ``/``,
    non-breaking and thin spaces to spaces (the rewrite used by the numeric and Countdown verifiers).

    Parameters
    ----------
    s : str
        Any string.

    Returns
    -------
    str
        ``s`` with those characters replaced, one for one.
    """
    return s.translate(_SIMPLE_TABLE)


def unicode_to_latex(s: str) -> str:
    r"""Rewrite the Unicode math in ``s`` as LaTeX (see the module docstring for the rules).

    Parameters
    ----------
    s : str
        An answer string (gold or prediction); pure ASCII is returned unchanged.

    Returns
    -------
    str
        The rewritten string. Examples: ``"31°"`` -> ``"31^\circ"``, ``"1½"`` -> ``"\frac{3}{2}"``,
        ``"2√3"`` -> ``"2\sqrt{3}"``, ``"10⁻³"`` -> ``"10^{-3}"``, ``"x ≤ 2"`` -> ``"x \le  2"``.
    """
    if not _NON_ASCII.search(s):
        return s
    s = s.translate(_PLAIN_TABLE)
    s = _COMBINING_BAR.sub(lambda m: "\\overline{" + m.group(1)[::2] + "}", s)
    s = _MIXED.sub(_mixed, s)
    s = _VULGAR_RE.sub(lambda m: _frac(*_VULGAR[m.group(0)]), s)
    s = _TEMPERATURE.sub("", s)
    s = s.replace("°", "^\\circ ").replace("º", "^\\circ ")
    s = _SUPER_RUN.sub(lambda m: "^{" + "".join(_SUPER[c] for c in m.group(0)) + "}", s)
    s = _SUB_RUN.sub(lambda m: "_{" + "".join(_SUB[c] for c in m.group(0)) + "}", s)
    s = _roots(s)
    return "".join(_COMMANDS[c] + " " if c in _COMMANDS else c for c in s).rstrip()
