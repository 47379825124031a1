"""The checks of chapter 17's exercises: right answers pass, classic wrong ones fail with a hint."""
import pytest

from course_lib.exercises import ExerciseError, ch17

PARTS = {"tool": ("<|calc|>", "<|/calc|>"), "result": ("<|result|>", "<|/result|>")}


def not_done(*args):
    raise NotImplementedError()


def render_text(messages):
    out = ""
    for m in messages:
        content = m["content"]
        if isinstance(content, str):
            body = content
        else:
            body = "".join(p["text"] if p["type"] == "text"
                           else PARTS[p["type"]][0] + p["text"] + PARTS[p["type"]][1]
                           for p in content)
        out += f"<|{m['role']}|>" + body + "<|end|>"
    return out


def render_without_end(messages):
    return render_text(messages).replace("<|end|>", "")


def render_end_only_after_assistant(messages):
    out = ""
    for m in messages:
        one = render_text([m])
        out += one if m["role"] == "assistant" else one.replace("<|end|>", "")
    return out


def render_with_words(messages):
    return "".join(f"{m['role']}: {render_text([m])[len(m['role']) + 4:-7]}\n" for m in messages)


def test_render_correct(capsys):
    ch17.check_render(render_text)
    assert "Correct!" in capsys.readouterr().out


@pytest.mark.parametrize("wrong, message",
                         [(not_done, "Not done yet"), (render_without_end, "no message is closed"),
                                            (render_end_only_after_assistant,
                                             "not closed by <|end|>"),
                                            (render_with_words, "not with words")])
def test_render_wrong(wrong, message):
    with pytest.raises(ExerciseError, match=message):
        ch17.check_render(wrong)


def assistant_mask(tokens):
    mask, role, in_result = [], None, False
    for t in tokens:
        if t in ("<|system|>", "<|user|>", "<|assistant|>"):
            role = t
            mask.append(False)
            continue
        if t == "<|result|>":
            in_result = True
        mask.append(role == "<|assistant|>" and not in_result)
        if t == "<|/result|>":
            in_result = False
    return mask


def mask_everything(tokens):
    return [True] * len(tokens)


def mask_with_role_token(tokens):
    return [m or t == "<|assistant|>" for m, t in zip(assistant_mask(tokens), tokens)]


def mask_without_end(tokens):
    return [m and t != "<|end|>" for m, t in zip(assistant_mask(tokens), tokens)]


def mask_with_results(tokens):
    mask, role = [], None
    for t in tokens:
        if t in ("<|system|>", "<|user|>", "<|assistant|>"):
            role = t
            mask.append(False)
        else:
            mask.append(role == "<|assistant|>")
    return mask


def test_assistant_mask_correct(capsys):
    ch17.check_assistant_mask(assistant_mask)
    assert "Correct!" in capsys.readouterr().out


@pytest.mark.parametrize("wrong, message", [
    (not_done, "Not done yet"), (mask_everything, "every token"),
    (mask_with_role_token, "train on <\\|assistant"), (mask_without_end, "never learn to stop"),
    (mask_with_results, "calculator's result"),
    (lambda tokens: assistant_mask(tokens)[:-1], "values for")])
def test_assistant_mask_wrong(wrong, message):
    with pytest.raises(ExerciseError, match=message):
        ch17.check_assistant_mask(wrong)


def calculate(text):
    """A recursive-descent calculator: sum of terms, term of factors, factor a signed number or
    (sum)."""
    pos = 0

    def peek():
        nonlocal pos
        while pos < len(text) and text[pos] == " ":
            pos += 1
        return text[pos] if pos < len(text) else ""

    def number():
        nonlocal pos
        peek()
        start = pos
        while pos < len(text) and (text[pos].isdigit() or text[pos] == "."):
            pos += 1
        if start == pos:
            raise ValueError("a number is due")
        return float(text[start:pos])

    def factor():
        nonlocal pos
        c = peek()
        if c in "+-" and c:
            pos += 1
            return -factor() if c == "-" else factor()
        if c == "(":
            pos += 1
            value = expression()
            if peek() != ")":
                raise ValueError("unclosed")
            pos += 1
            return value
        return number()

    def level(ops, operand):
        nonlocal pos
        value = operand()
        while peek() in ops and peek():
            op = text[pos]
            pos += 1
            right = operand()
            if op == "/" and right == 0:
                raise ValueError("division by zero")
            value = {"+": value + right, "-": value - right, "*": value * right,
                     "/": value / right if right else 0}[op]
        return value

    def expression():
        return level("+-", lambda: level("*/", factor))

    try:
        value = expression()
        if peek():
            raise ValueError("left over")
    except ValueError as e:
        return f"error: {e}"
    return str(int(value)) if value.is_integer() else str(value)


def calculate_with_eval(text):
    try:
        return str(eval(text))  # the classic mistake the check must catch
    except Exception as e:
        return f"error: {e}"


def calculate_left_to_right(text):  # no precedence: every operator at one level
    ops = {"+": float.__add__, "-": float.__sub__, "*": float.__mul__, "/": float.__truediv__}
    try:
        tokens = text.replace(" ", "")
        value, op, number = 0.0, "+", ""
        for c in tokens + "+":
            if c.isdigit():
                number += c
            elif c in ops and number:
                value, op, number = ops[op](value, float(number)), c, ""
            else:
                return "error: bad"
        return str(int(value)) if value.is_integer() else str(value)
    except ZeroDivisionError:
        return "error: division by zero"


def calculate_with_filtered_eval(text):
    """eval behind a character filter that rejects ** (the answers are right; the source is not)."""
    if "**" in text or any(c not in "0123456789+-*/(). " for c in text):
        return "error: not arithmetic"
    try:
        value = eval(text)  # noqa: S307 (the classic mistake this test catches)
    except (SyntaxError, ZeroDivisionError) as e:
        return f"error: {e}"
    return str(int(value)) if float(value).is_integer() else str(value)


def calculate_with_builtins_eval(text):
    """Review 17-M2: the filtered eval spelt builtins.eval, which the check let pass."""
    import builtins
    if "**" in text or any(c not in "0123456789+-*/(). " for c in text):
        return "error: not arithmetic"
    try:
        value = builtins.eval(text)
    except (SyntaxError, ZeroDivisionError) as e:
        return f"error: {e}"
    return str(int(value)) if float(value).is_integer() else str(value)


def calculate_with_getattr_eval(text):
    """Review 17-M2: getattr(builtins, "eval"), the same function by another name."""
    import builtins
    if "**" in text or any(c not in "0123456789+-*/(). " for c in text):
        return "error: not arithmetic"
    run = getattr(builtins, "eval")
    try:
        value = run(text)
    except (SyntaxError, ZeroDivisionError) as e:
        return f"error: {e}"
    return str(int(value)) if float(value).is_integer() else str(value)


def calculate_with_imported_eval(text):
    from builtins import eval as run  # noqa: A004
    if "**" in text or any(c not in "0123456789+-*/(). " for c in text):
        return "error: not arithmetic"
    try:
        value = run(text)
    except (SyntaxError, ZeroDivisionError) as e:
        return f"error: {e}"
    return str(int(value)) if float(value).is_integer() else str(value)


def calculate_with_a_compiled_regex(text):
    """A parser that uses re.compile to read spaces: compile, but not Python's: it must pass."""
    import re
    spaces = re.compile(r"\s+")
    return calculate(spaces.sub(" ", text))


def test_calculator_correct(capsys):
    ch17.check_calculator(calculate)
    assert "Correct!" in capsys.readouterr().out
    ch17.check_calculator(calculate_with_a_compiled_regex)
    assert "Correct!" in capsys.readouterr().out


@pytest.mark.parametrize("wrong, message",
                         [(not_done, "Not done yet"), (calculate_with_eval, "eval"),
                                            (calculate_with_filtered_eval, "calls eval"),
                                            (calculate_with_builtins_eval, "calls eval"),
                                            (calculate_with_getattr_eval, "calls eval"),
                                            (calculate_with_imported_eval, "through builtins"),
                                            (calculate_left_to_right, "bind tighter"),
                                            (lambda text: 19, "not a string"),
                          (lambda text: "19", "expected '14'")])
def test_calculator_wrong(wrong, message):
    with pytest.raises(ExerciseError, match=message):
        ch17.check_calculator(wrong)
