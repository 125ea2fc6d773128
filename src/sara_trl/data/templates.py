r"""Prompt templates (paper Sec. 6 setups) and the chat-prompt builder.

Templates use named placeholders that are substituted with :meth:`str.replace`, so literal braces such as
``\boxed{}`` need no escaping:

* math: ``{problem}``;
* Countdown: ``{numbers}`` (e.g. ``[79, 17, 60]``) and ``{target}``;
* arithmetic quickstart: ``{expression}`` (e.g. ``3 + 5``).

Every loader and generator takes ``template=`` and ``system_prompt=`` arguments to override these defaults.
"""

from __future__ import annotations

__all__ = [
    "MATH_TEMPLATE",
    "COUNTDOWN_TEMPLATE",
    "ARITHMETIC_INSTRUCTION",
    "fill_template",
    "chat_prompt",
]

#: Math (MATH, GSM8K, AIME, AMC, Minerva, OlympiadBench): step-by-step reasoning, final answer in ``\boxed{}``.
MATH_TEMPLATE = "{problem}\n\nReason step by step, and put your final answer within \\boxed{}."

#: Countdown (TinyZero-style): think in ``<think>`` tags, answer with one expression in ``<answer>`` tags.
COUNTDOWN_TEMPLATE = (
    "Using the numbers {numbers}, write an equation that equals {target}. You may use +, -, * and /, and every "
    "number must be used exactly once. Think it through inside <think> </think> tags, then give only the final "
    "expression inside <answer> </answer> tags, for example <answer> (1 + 2) / 3 </answer>."
)

#: Arithmetic quickstart task for very small models (see :func:`sara_trl.data.make_arithmetic_dataset`).
ARITHMETIC_INSTRUCTION = "What is {expression}? Answer with only the number."


def fill_template(template: str, **values: object) -> str:
    """Replace each ``{name}`` in ``template`` by ``str(values[name])``.

    Parameters
    ----------
    template : str
        Text with ``{name}`` placeholders.
    **values : object
        The value of each placeholder, by name.

    Returns
    -------
    str
        The filled text.

    Raises
    ------
    ValueError
        A placeholder named in ``values`` does not occur in ``template`` (a template that drops the problem text is
        almost certainly a mistake).
    """
    out = template
    for name, value in values.items():
        key = "{" + name + "}"
        if key not in out:
            raise ValueError(f"template has no {key} placeholder: {template!r}")
        out = out.replace(key, str(value))
    return out


def chat_prompt(user: str, system_prompt: str | None = None) -> list[dict[str, str]]:
    """Conversational prompt in TRL's format.

    Parameters
    ----------
    user : str
        The user message.
    system_prompt : str, optional
        System message, put first; none when None or empty.

    Returns
    -------
    list of dict
        ``[{"role": "system", "content": system_prompt}?, {"role": "user", "content": user}]``.
    """
    msgs = []
    if system_prompt:
        msgs.append({"role": "system", "content": system_prompt})
    msgs.append({"role": "user", "content": user})
    return msgs
