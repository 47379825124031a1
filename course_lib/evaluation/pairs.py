"""How a log-likelihood request ``(context, continuation)`` becomes token ids (chapter 16), and
what is scored when a token spans the join of the two texts.

**lm-eval's rule.** lm-evaluation-harness (``TemplateLM._encode_pair``) moves whitespace at the
end of the context to the continuation, encodes the pair as one text, ``whole = encode(context +
continuation)``, and calls its first ``n = len(encode(context))`` tokens the context:
``(encode(context), whole[n:])``. When ``whole[:n] == encode(context)``, a token boundary of the
whole text lies exactly at the join, and the split is right: the model reads the text's own tokens
and the continuation's are those that spell it. Here we give exactly lm-eval's ids.

**When a token spans the join** (``"hello wor" + "ld, sir"`` is ``hello| world|,| sir`` in GPT-2's
BPE), no split of ``whole`` is right, and lm-eval's is wrong two ways. The ids it feeds,
``encode(context) + whole[n:]``, need not spell the text (``hello| wor|,| sir``: "ld" is never
scored); and when ``whole`` has no more than ``n`` tokens (``"hello wor" + "ld"``) its
continuation is empty and it stops on ``assert len(continuation_enc) > 0`` (its issues 1053, 1297,
3336). Its open PR 4055 encodes the continuation alone instead: ``(encode(context),
encode(continuation))`` (``hello| wor| ld``). That spells the text and conditions on all of it, but
the pair of tokens at the join is one the model never read in training, where BPE always merged
them: the mass it gives ``" world"`` after ``"hello"`` is not counted, and ``"ld"`` after ``" wor"``
is unlikely whatever the model knows. The score is lowered by the tokenizer, not by the model, and
in a multiple-choice item it lowers exactly the choices that merge with the context.

**Our rule: move the split back to the last token boundary of the whole text at or before the
join.** The context's ids are ``whole[:k]`` for the largest ``k`` whose text ``decode(whole[:k])``
is a prefix of the context (a character prefix: a cut inside a UTF-8 character is not one), and
the continuation's ids are ``whole[k:]``. These are the text's own tokens, the ones the model
reads in the whole text; they spell ``tail + continuation``, where ``tail`` is the end of the
context that shares a token with the continuation (``" wor"`` above). The score is therefore
``log p(tail + continuation | head)``, ``head`` being the part of the context whose tokens are
complete: the log-probability of the continuation's text given the context, conditioned on the
context's complete tokens, with the characters of the one split token scored as part of it.
Where no token spans the join, ``tail`` is empty and this is lm-eval's number. ``is_greedy``
keeps its meaning (would greedy decoding from ``head`` write these tokens).

What this number is not: ``log p(continuation | context)`` of the text, which would divide by
the model's probability that the text after ``head`` begins with ``tail``, a sum over every
token path that spells it ("token healing"; not done here). So a spanning request also pays for
its tail, and in a multiple-choice item where only some choices merge with the context, those
pay ``log p(tail | head)`` more than the others; it is a cost in text the request really
contains, where lm-eval's ids drop text and PR 4055's pay for a token pair never seen. Under
GPT-2's pre-token pattern a token can span the join only inside a pre-token (letters after
letters, digits after digits, punctuation after punctuation): a continuation that starts with a
space, as lm-eval's multiple choice writes it, never does (nor one that starts with any character
the pattern counts as white space; Python's ``rstrip`` also strips the control characters U+001C to
U+001F, which the pattern does not count, so a context ending in those is the one exception).

One case is left: the whole context lies inside the first token of ``whole`` (``"A" + "nswer"``,
one token ``Answer``), so ``k = 0`` and nothing is left to condition on; the models of this book
have no begin-of-text token. Only then do we take PR 4055's ids, ``(encode(context),
encode(continuation))``, the only ones that condition on the context at all.

A continuation of no text is refused (there is nothing to score: a caller's error), as is a
context that is empty or only whitespace (which moves to the continuation). The rule assumes
that ``decode(ids[:k])`` is the text the first ``k`` tokens cover, as it is for the book's
character and byte-level BPE tokenizers.
"""
from __future__ import annotations


def encode_pair(tokenizer, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """``(context_ids, continuation_ids)``: lm-eval's ``_encode_pair`` where a token boundary lies
    at the join; else the split moved back to the last boundary before it (see the module)."""
    if not continuation:
        raise ValueError("the continuation is empty: there is nothing to score (give at least one "
                         "character, e.g. ' A')")
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces:  # "Answer: " + "A" is scored as "Answer:" + " A", the way the text is tokenized
        continuation, context = context[-n_spaces:] + continuation, context[:-n_spaces]
    if not context:
        raise ValueError("the context is empty or only whitespace (which moves to the "
                         "continuation): a model of the book has no begin-of-text token to "
                         "condition on; give at least one character of context that is not "
                         "whitespace")
    whole = list(tokenizer.encode(context + continuation))
    context_ids = list(tokenizer.encode(context))
    n = len(context_ids)
    if whole[:n] == context_ids:  # a boundary at the join: lm-eval's split, and right
        return context_ids, whole[n:]
    k = complete_context_tokens(tokenizer, whole, context)
    if k == 0:  # the context lies inside the first token: PR 4055's ids (see the module)
        return context_ids, list(tokenizer.encode(continuation))
    return whole[:k], whole[k:]


def complete_context_tokens(tokenizer, whole: list[int], context: str) -> int:
    """The largest ``k < len(whole)`` such that ``decode(whole[:k])`` is a prefix of ``context``,
    for ``whole`` the tokens of a text that starts with ``context`` and is longer. The length of
    ``decode(whole[:k])`` never falls as ``k`` grows (a cut UTF-8 character decodes to one U+FFFD),
    so a bisection finds the last ``k`` whose text is no longer than the context, and a short walk
    back passes the cuts that fall inside a character."""
    lo, hi = 0, len(whole) - 1  # decode(whole[:0]) = "" fits; the answer is in [lo, hi]
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if len(tokenizer.decode(whole[:mid])) <= len(context):
            lo = mid
        else:
            hi = mid - 1
    while lo > 0 and not context.startswith(tokenizer.decode(whole[:lo])):
        lo -= 1
    return lo
