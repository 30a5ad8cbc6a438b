"""Metrics of one task kind over (expected, predicted) pairs: standard library only.

- classification / extraction: accuracy, precision, recall and F1, macro and micro, and per
  label; the labels are the sorted union of expected and predicted values (what scikit-learn's
  ``f1_score`` uses by default), a label never predicted (or never expected) scores 0.
- question answering: exact match and token F1 after SQuAD's normalisation (lower case, no
  punctuation, no English articles); CJK characters count as one token each (Chinese answers
  carry no spaces).
- generation: ROUGE-L F-measure (longest common subsequence of tokens; the tokens of
  ``rouge-score``'s default tokenizer for Latin text, plus one token per CJK character), and chrF
  through ``sacrebleu`` when it is installed (``pip install 'jupyter_starverse[eval]'``).
- perplexity: exp of the mean negative log-likelihood per token over every text.

Figures are fractions (0..1), except perplexity; tables show them as points (x100).
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "LabelScore",
    "classification_metrics",
    "exact_match",
    "generation_metrics",
    "normalize_answer",
    "qa_metrics",
    "rouge_l",
    "token_f1",
]

_CJK = re.compile(r"([\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff])")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation) | set(
    "\uff0c\u3002\uff01\uff1f\u3001\uff1b\uff1a\u201c\u201d\u2018\u2019\uff08\uff09\u300a\u300b\u3010\u3011"
)  # CJK punctuation


@dataclass(frozen=True)
class LabelScore:
    """Precision, recall and F1 of one label, and how many examples expected it."""

    label: str
    precision: float
    recall: float
    f1: float
    support: int

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "precision": self.precision,
            "recall": self.recall,
            "f1": self.f1,
            "support": self.support,
        }


def _div(a: float, b: float) -> float:
    return a / b if b else 0.0


def _f1(p: float, r: float) -> float:
    return _div(2 * p * r, p + r)


def classification_metrics(
    expected: Sequence[str], predicted: Sequence[str]
) -> tuple[dict[str, float], list[LabelScore]]:
    """Accuracy, macro and micro precision/recall/F1, and the per-label scores."""
    if len(expected) != len(predicted):
        raise ValueError("expected and predicted differ in length")
    labels = sorted(set(expected) | set(predicted))
    tp: Counter[str] = Counter()
    fp: Counter[str] = Counter()
    fn: Counter[str] = Counter()
    for e, p in zip(expected, predicted, strict=True):
        if e == p:
            tp[e] += 1
        else:
            fp[p] += 1
            fn[e] += 1
    per = []
    for label in labels:
        prec = _div(tp[label], tp[label] + fp[label])
        rec = _div(tp[label], tp[label] + fn[label])
        per.append(LabelScore(label, prec, rec, _f1(prec, rec), tp[label] + fn[label]))
    n = len(labels)
    stp, sfp, sfn = sum(tp.values()), sum(fp.values()), sum(fn.values())
    micro_p, micro_r = _div(stp, stp + sfp), _div(stp, stp + sfn)
    metrics = {
        "accuracy": _div(stp, len(expected)),
        "precision_macro": _div(sum(s.precision for s in per), n),
        "recall_macro": _div(sum(s.recall for s in per), n),
        "f1_macro": _div(sum(s.f1 for s in per), n),
        "precision_micro": micro_p,
        "recall_micro": micro_r,
        "f1_micro": _f1(micro_p, micro_r),
    }
    return metrics, per


def normalize_answer(text: str) -> str:
    """SQuAD's normalisation: lower case, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _answer_tokens(text: str) -> list[str]:
    return _CJK.sub(r" \1 ", normalize_answer(text)).split()


def exact_match(expected: str, predicted: str) -> float:
    return float(normalize_answer(expected) == normalize_answer(predicted))


def token_f1(expected: str, predicted: str) -> float:
    """SQuAD token F1 of one answer (1.0 when both are empty)."""
    want, got = _answer_tokens(expected), _answer_tokens(predicted)
    if not want or not got:
        return float(want == got)
    common = sum((Counter(want) & Counter(got)).values())
    if not common:
        return 0.0
    p, r = common / len(got), common / len(want)
    return 2 * p * r / (p + r)


def qa_metrics(expected: Sequence[str], predicted: Sequence[str]) -> dict[str, float]:
    n = len(expected)
    return {
        "exact_match": _div(sum(exact_match(e, p) for e, p in zip(expected, predicted, strict=True)), n),
        "token_f1": _div(sum(token_f1(e, p) for e, p in zip(expected, predicted, strict=True)), n),
    }


def _rouge_tokens(text: str) -> list[str]:
    # rouge-score's default tokenizer: lower case, anything but [a-z0-9] is a separator; plus CJK characters
    text = _CJK.sub(r" \1 ", text.lower())
    return [
        t for t in re.split(r"[^a-z0-9\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+", text) if t
    ]


def _lcs(a: list[str], b: list[str]) -> int:
    if not a or not b:
        return 0
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b, start=1):
            cur.append(prev[j - 1] + 1 if x == y else max(prev[j], cur[j - 1]))
        prev = cur
    return prev[-1]


def rouge_l(expected: str, predicted: str) -> float:
    """ROUGE-L F-measure of one prediction against one reference."""
    ref, hyp = _rouge_tokens(expected), _rouge_tokens(predicted)
    lcs = _lcs(ref, hyp)
    if not lcs:
        return 0.0
    return _f1(lcs / len(hyp), lcs / len(ref))


def generation_metrics(expected: Sequence[str], predicted: Sequence[str]) -> tuple[dict[str, float], list[str]]:
    """ROUGE-L (always) and chrF, BLEU (when sacrebleu is installed); notes on what was skipped."""
    n = len(expected)
    out = {"rouge_l": _div(sum(rouge_l(e, p) for e, p in zip(expected, predicted, strict=True)), n)}
    notes: list[str] = []
    try:
        import sacrebleu
    except ImportError:
        notes.append("chrF and BLEU need sacrebleu: pip install 'jupyter_starverse[eval]'")
        return out, notes
    if n:
        refs = [list(expected)]
        out["chrf"] = float(sacrebleu.corpus_chrf(list(predicted), refs).score) / 100.0
        out["bleu"] = float(sacrebleu.corpus_bleu(list(predicted), refs, tokenize="13a").score) / 100.0
    return out, notes


def perplexity(nll: Sequence[float], tokens: Sequence[int]) -> dict[str, float]:
    total = sum(tokens)
    mean = _div(sum(nll), total)
    return {"perplexity": math.exp(mean) if total else float("nan"), "nll_per_token": mean}
