"""Sensitive fields in Chinese and English text: detection with checksums, and de-identification.

Numbers are found by regular expressions bounded by ``(?<![0-9A-Za-z])`` rather than ``\\b``
(there is no word boundary between a CJK character and a digit) and kept only when their
checksum holds: mainland ID cards (a real date and the MOD 11-2 check character) and bank
cards (Luhn). Chinese person names and places come from jieba's part-of-speech tags (``nr``,
``ns``); a name must start with a common surname (without that filter words like 银行卡 are
tagged as people).

De-identification is deterministic: ``hash`` turns a value into ``<TYPE_xxxxxxxxxx>`` with an
HMAC keyed by a secret salt, so the same ID number becomes the same pseudonym everywhere.
"""

# ruff: noqa: RUF001, RUF002 - Chinese punctuation is what these patterns match
from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from jupyter_starverse.errors import BadInputError, MissingDependencyError

__all__ = [
    "ACTIONS",
    "PII_TYPES",
    "SUGGESTED",
    "Deidentifier",
    "Finding",
    "display_mask",
    "find_pii",
    "id_card_valid",
    "luhn_valid",
]

PII_TYPES = ("id_card", "mobile", "email", "bank_card", "ip", "phone", "person", "place")
ACTIONS = ("mask", "keep_last4", "hash", "placeholder", "truncate_ip", "keep", "drop")
#: The action suggested for each type (what ``clean`` does unless told otherwise).
SUGGESTED: Mapping[str, str] = {
    "id_card": "mask",
    "mobile": "mask",
    "email": "hash",
    "bank_card": "keep_last4",
    "ip": "truncate_ip",
    "phone": "mask",
    "person": "hash",
    "place": "placeholder",
}
WHY: Mapping[str, str] = {
    "mask": "mask the middle digits",
    "keep_last4": "keep only the last 4 digits",
    "hash": "salted hash: the same value becomes the same pseudonym everywhere",
    "placeholder": "replace with a placeholder",
    "truncate_ip": "truncate the IP address to its /24 network",
    "keep": "leave unchanged",
    "drop": "drop the whole document",
}

_B = r"(?<![0-9A-Za-z])"
_E = r"(?![0-9A-Za-z])"
_ID_RE = re.compile(_B + r"([1-9]\d{5})((?:18|19|20)\d{2})(0[1-9]|1[0-2])(0[1-9]|[12]\d|3[01])(\d{3})([0-9Xx])" + _E)
_MOBILE_RE = re.compile(r"(?<![0-9A-Za-z+])(?:\+?86[- ]?)?1[3-9]\d(?:[- ]?\d{4}){2}" + _E)
_EMAIL_RE = re.compile(r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,24}")
_CARD_RE = re.compile(_B + r"\d{4}(?:[ -]?\d{4}){2,3}(?:[ -]?\d{1,3})?" + _E)
_IP_RE = re.compile(
    r"(?<![0-9A-Za-z.])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?![0-9A-Za-z]|\.\d)"
)
_PHONE_RE = re.compile(
    r"(?<![0-9A-Za-z+])(?:\(0\d{2,3}\)\s?|0\d{2,3}-)\d{7,8}(?:-\d{1,5})?"
    + _E  # 010-12345678, (0755)1234567
    + r"|(?<![0-9A-Za-z])\+?1?[ .-]?\(\d{3}\)[ .-]?\d{3}[ .-]\d{4}"
    + _E  # (555) 123-4567
    + r"|(?<![0-9A-Za-z+])\d{3}[.-]\d{3}[.-]\d{4}"
    + _E  # 555-123-4567
)
_CJK_RE = re.compile(r"[\u4e00-\u9fff]")
_ID_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
_ID_CHECK = "10X98765432"
_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)

# Common Chinese surnames (单姓 and 复姓): a jieba ``nr`` word must start with one to count as a name.
_SURNAMES_1 = set(
    "赵钱孙李周吴郑王冯陈褚卫蒋沈韩杨朱秦尤许何吕施张孔曹严华金魏陶姜戚谢邹喻柏水窦章云苏潘葛奚范彭郎"
    "鲁韦昌马苗凤花方俞任袁柳酆鲍史唐费廉岑薛雷贺倪汤滕殷罗毕郝邬安常乐于时傅皮卞齐康伍余元卜顾孟平黄"
    "和穆萧尹姚邵湛汪祁毛禹狄米贝明臧计伏成戴谈宋茅庞熊纪舒屈项祝董梁杜阮蓝闵席季麻强贾路娄危江童颜郭"
    "梅盛林刁钟徐邱骆高夏蔡田樊胡凌霍虞万支柯昝管卢莫经房裘缪干解应宗丁宣邓郁单杭洪包诸左石崔吉钮龚"
    "程嵇邢滑裴陆荣翁荀羊甄曲家封芮羿储靳汲邴糜松井段富巫乌焦巴弓牧隗山谷车侯宓蓬全郗班仰秋仲伊宫宁"
    "仇栾暴甘厉戎祖武符刘景詹束龙叶幸司韶黎蓟薄印宿白怀蒲邰从鄂索咸籍赖卓蔺屠蒙池乔阴胥能苍双闻莘党"
    "翟谭贡劳逄姬申扶堵冉宰郦雍却璩桑桂濮牛寿通边扈燕冀郏浦尚农温别庄晏柴瞿阎充慕连茹习宦艾鱼容向古"
    "易慎戈廖庾终暨居衡步都耿满弘匡国文寇广禄阙东欧殳沃利蔚越夔隆师巩厍聂晁勾敖融冷訾辛阚那简饶空曾"
    "毋沙乜养鞠须丰巢关蒯相查后荆红游竺权逯盖益桓公"
)
_CUE_BEFORE = "联系人|姓名|客户|患者|收件人|申请人|经办人|借款人|请|由|和|与"
_CUE_AFTER = "先生|女士|说|表示|确认|同志|经理|医生|律师|老师"
_SURNAMES_2 = {
    "欧阳",
    "司马",
    "上官",
    "诸葛",
    "东方",
    "皇甫",
    "尉迟",
    "公孙",
    "慕容",
    "长孙",
    "令狐",
    "司徒",
    "夏侯",
    "宇文",
}


@dataclass(frozen=True)
class Finding:
    """One sensitive value: its type and where it is in the text."""

    type: str
    start: int
    end: int
    value: str


def id_card_valid(number: str) -> bool:
    """An 18-character mainland ID: a real birth date and the MOD 11-2 check character."""
    if len(number) != 18 or not number[:17].isdigit():
        return False
    year, month, day = int(number[6:10]), int(number[10:12]), int(number[12:14])
    if not 1 <= month <= 12 or not 1 <= day <= _DAYS[month - 1]:
        return False
    if month == 2 and day == 29 and not (year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)):
        return False
    total = sum(int(c) * w for c, w in zip(number[:17], _ID_WEIGHTS, strict=True))
    return _ID_CHECK[total % 11] == number[17].upper()


def luhn_valid(digits: str) -> bool:
    """The Luhn check of a card number (digits only)."""
    total = 0
    for i, c in enumerate(reversed(digits)):
        d = ord(c) - 48
        if i % 2:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


# Issuer ranges (IIN prefixes) and the lengths each scheme issues: (low, high, digits of prefix, lengths).
_ISSUERS = (
    (4, 4, 1, (13, 16, 19)),  # Visa
    (51, 55, 2, (16,)),  # Mastercard
    (2221, 2720, 4, (16,)),  # Mastercard 2-series
    (34, 34, 2, (15,)),  # American Express
    (37, 37, 2, (15,)),
    (62, 62, 2, (16, 17, 18, 19)),  # UnionPay
    (81, 81, 2, (16, 17, 18, 19)),  # UnionPay (81 series)
    (6011, 6011, 4, (16, 19)),  # Discover
    (644, 649, 3, (16, 19)),
    (65, 65, 2, (16, 19)),
    (3528, 3589, 4, (16, 17, 18, 19)),  # JCB
    (300, 305, 3, (14, 16, 19)),  # Diners Club
    (36, 36, 2, (14, 16, 19)),
    (38, 39, 2, (16, 19)),
    (50, 50, 2, tuple(range(12, 20))),  # Maestro
    (56, 58, 2, tuple(range(12, 20))),
    (60, 60, 2, (16, 19)),  # RuPay and others
)
_CARD_CONTEXT = re.compile(
    r"(卡号|银行卡|信用卡|借记卡|储蓄卡|银联|卡|账号|帐号|账户|帐户|尾号|card|visa|mastercard|amex|account|acct|iban)",
    re.IGNORECASE,
)
_CONTEXT_CHARS = 24


def card_issuer_valid(digits: str) -> bool:
    """Whether a card number starts with an issuer's prefix and has a length that issuer uses."""
    return any(len(digits) in lens and low <= int(digits[:width]) <= high for low, high, width, lens in _ISSUERS)


def _card_plausible(text: str, start: int, value: str, digits: str) -> bool:
    """A Luhn-valid number is a card when an issuer issues it and it looks like one: grouped in
    fours, or a card word (卡号, card, 账号, ...) in the ``_CONTEXT_CHARS`` characters before it.
    (A random number passes Luhn one time in ten: the checksum alone took order numbers.)"""
    if not card_issuer_valid(digits):
        return False
    if re.fullmatch(r"\d{4}(?:[ -]\d{4})+(?:[ -]\d{1,3})?", value):
        return True
    return _CARD_CONTEXT.search(text, max(0, start - _CONTEXT_CHARS), start) is not None


def _digits(value: str) -> str:
    return "".join(c for c in value if c.isdigit())


def _regex_findings(text: str, types: frozenset[str]) -> list[Finding]:
    found: list[Finding] = []
    if "email" in types and "@" in text:
        found += [Finding("email", m.start(), m.end(), m.group()) for m in _EMAIL_RE.finditer(text)]
    if not any(c.isdigit() for c in text):
        return found
    if "id_card" in types:
        found += [
            Finding("id_card", m.start(), m.end(), m.group()) for m in _ID_RE.finditer(text) if id_card_valid(m.group())
        ]
    if "bank_card" in types:
        for m in _CARD_RE.finditer(text):
            digits = _digits(m.group())
            if (
                13 <= len(digits) <= 19
                and luhn_valid(digits)
                and not (len(digits) == 18 and _ID_RE.fullmatch(digits))
                and _card_plausible(text, m.start(), m.group(), digits)
            ):
                found.append(Finding("bank_card", m.start(), m.end(), m.group()))
    if "mobile" in types:
        found += [Finding("mobile", m.start(), m.end(), m.group()) for m in _MOBILE_RE.finditer(text)]
    if "phone" in types:
        found += [Finding("phone", m.start(), m.end(), m.group()) for m in _PHONE_RE.finditer(text)]
    if "ip" in types and "." in text:
        found += [Finding("ip", m.start(), m.end(), m.group()) for m in _IP_RE.finditer(text)]
    return found


_jieba_ready = False
_NAME_MAX_FREQ = 500


def _posseg() -> object:
    global _jieba_ready
    try:
        import jieba  # type: ignore[import-untyped]
        import jieba.posseg as pseg  # type: ignore[import-untyped]
    except ImportError as e:
        raise MissingDependencyError("jieba", extra="data", purpose="finding Chinese names and places") from e
    if not _jieba_ready:
        jieba.setLogLevel(logging.WARNING)
        jieba.initialize()
        _jieba_ready = True
    return pseg


def _cue_re() -> re.Pattern[str]:
    # lookbehinds need a fixed width: one alternative per cue
    before = "|".join(f"(?<={c})" for c in _CUE_BEFORE.split("|"))
    return re.compile(rf"(?:{before})[:：]?\s?([\u4e00-\u9fff]{{2,3}}?)(?=[，,。；;、\s]|{_CUE_AFTER})")


_CUE_RE = _cue_re()
_AFTER_RE = re.compile(rf"([\u4e00-\u9fff]{{2,3}})(?={_CUE_AFTER})")


def _cue_names(text: str) -> list[tuple[int, int]]:
    """Spans of surname-led words right after a cue (联系人：, 请) or right before one (说, 先生)."""
    out = []
    for m in _CUE_RE.finditer(text):
        if _is_name(m.group(1)):
            out.append((m.start(1), m.end(1)))
    for m in _AFTER_RE.finditer(text):
        word = m.group(1)
        for cut in (0, 1):  # 3 characters before the cue may start with a non-name character
            cand = word[cut:]
            if len(cand) >= 2 and _is_name(cand):
                out.append((m.start(1) + cut, m.end(1)))
                break
    return out


def _is_name(word: str) -> bool:
    if not 2 <= len(word) <= 4 or not all("\u4e00" <= c <= "\u9fff" for c in word):
        return False
    if word[:2] in _SURNAMES_2:
        return len(word) >= 3
    return word[0] in _SURNAMES_1 and len(word) <= 3


def _cjk_findings(text: str, types: frozenset[str], hmm: bool = True) -> list[Finding]:
    """Names and places: jieba's segmentation (its HMM joins unknown names), then its tags.

    A word tagged ``nr`` in jieba's dictionary counts when it starts with a surname and is not
    frequent (frequent ones are common words, e.g. 齐全); an unknown word the HMM made counts
    when it starts with a surname. Segmenting and looking tags up is ~3x faster than
    ``jieba.posseg`` with its HMM, and ~25x on long runs of unknown characters.
    """
    if not ({"person", "place"} & types) or not _CJK_RE.search(text):
        return []
    pseg = _posseg()  # first: a missing jieba is an install hint (MissingDependencyError)
    import jieba

    tags = pseg.dt.word_tag_tab  # type: ignore[attr-defined]
    freq = jieba.dt.FREQ
    found: list[Finding] = []
    pos = 0
    for word in jieba.cut(text, HMM=hmm):
        start = text.find(word, pos)
        if start < 0:
            continue
        pos = start + len(word)
        tag = tags.get(word)
        known_name = tag == "nr" and freq.get(word, 0) <= _NAME_MAX_FREQ
        if "person" in types and _is_name(word) and (known_name or (tag is None and not freq.get(word))):
            found.append(Finding("person", start, pos, word))
            continue
        if tag == "ns" and "place" in types and len(word) >= 2:
            found.append(Finding("place", start, pos, word))
    if "person" in types:
        for s, e in _cue_names(text):
            # the cue's span wins over a jieba name that overlaps it
            found = [f for f in found if not (f.type == "person" and f.start < e and s < f.end)]
            if all(f.end <= s or f.start >= e for f in found):
                found.append(Finding("person", s, e, text[s:e]))
    return found


def find_pii(text: str, types: Iterable[str] = PII_TYPES, *, hmm: bool = True) -> list[Finding]:
    """Non-overlapping findings in ``text``, in order; the earlier-listed type wins an overlap.

    ``hmm=False`` finds names from jieba's dictionary and the cue words only: about ten times
    faster on long unknown runs, for masking report snippets.
    """
    wanted = frozenset(types)
    found = _regex_findings(text, wanted)
    order = {t: i for i, t in enumerate(PII_TYPES)}
    found.sort(key=lambda f: (f.start, order[f.type], -(f.end - f.start)))
    kept: list[Finding] = []
    taken: list[tuple[int, int]] = []
    for f in sorted(found, key=lambda f: (order[f.type], f.start)):
        if all(f.end <= s or f.start >= e for s, e in taken):
            kept.append(f)
            taken.append((f.start, f.end))
    for f in _cjk_findings(text, wanted, hmm):
        if all(f.end <= s or f.start >= e for s, e in taken):
            kept.append(f)
    kept.sort(key=lambda f: f.start)
    return kept


def _mask_digits(value: str, head: int, tail: int) -> str:
    positions = [i for i, c in enumerate(value) if c.isdigit() or c in "Xx"]
    hide = set(positions[head : max(head, len(positions) - tail)])
    return "".join("*" if i in hide else c for i, c in enumerate(value))


def _mask(f: Finding) -> str:
    if f.type == "id_card":
        return _mask_digits(f.value, 6, 4)
    if f.type == "mobile":
        digits = _digits(f.value)
        lead = len(digits) - 11  # the +86 prefix is kept
        return _mask_digits(f.value, lead + 3, 4)
    if f.type == "bank_card":
        return _mask_digits(f.value, 0, 4)
    if f.type == "phone":
        return _mask_digits(f.value, len(_digits(f.value)) - 6, 2)
    if f.type == "email":
        local, _, domain = f.value.partition("@")
        return f"{local[:1]}***@{domain}"
    if f.type == "ip":
        return _truncate_ip(f.value)
    return f.value[:1] + "*" * (len(f.value) - 1)


def _truncate_ip(value: str) -> str:
    return value.rsplit(".", 1)[0] + ".*"


def display_mask(f: Finding) -> str:
    """How a value appears in a report: masked, never in the clear."""
    return _mask(f)


class Deidentifier:
    """Applies one action per type; ``salt`` keys the pseudonyms of the ``hash`` action.

    Parameters
    ----------
    actions
        Type -> action (missing types use :data:`SUGGESTED`).
    salt
        The secret (bytes) behind ``hash``; required when any type is hashed.
    """

    def __init__(self, actions: Mapping[str, str] | None = None, *, salt: bytes | None = None) -> None:
        self.actions = dict(SUGGESTED)
        for kind, action in (actions or {}).items():
            if kind not in PII_TYPES:
                raise BadInputError(
                    f"unknown sensitive type {kind!r}", field="actions", hint=f"types: {', '.join(PII_TYPES)}"
                )
            if action not in ACTIONS:
                raise BadInputError(
                    f"unknown action {action!r} for {kind}", field="actions", hint=f"actions: {', '.join(ACTIONS)}"
                )
            self.actions[kind] = action
        if salt is None and "hash" in self.actions.values():
            hashed = ", ".join(k for k, v in self.actions.items() if v == "hash")
            raise BadInputError(
                f"the hash action ({hashed}) needs a secret salt",
                field="salt",
                hint="pass --salt-env NAME (an environment variable) or --salt-file PATH; "
                "or choose another action, e.g. --action person=placeholder",
            )
        self._salt = salt or b""
        self.types = tuple(t for t in PII_TYPES if self.actions[t] != "keep")

    def pseudonym(self, kind: str, value: str) -> str:
        key = _digits(value) if kind in ("id_card", "mobile", "bank_card", "phone") else value.strip().lower()
        if kind == "id_card":
            key = value.upper()
        digest = hmac.new(self._salt, f"{kind}\0{key}".encode(), hashlib.sha256).hexdigest()[:10]
        return f"<{kind.upper()}_{digest}>"

    def replacement(self, f: Finding) -> str:
        action = self.actions[f.type]
        if action == "mask":
            return _mask(f)
        if action == "keep_last4":
            return _mask_digits(f.value, 0, 4)
        if action == "hash":
            return self.pseudonym(f.type, f.value)
        if action == "truncate_ip":
            return _truncate_ip(f.value) if f.type == "ip" else _mask(f)
        if action == "placeholder":
            return f"<{f.type.upper()}>"
        return f.value

    def apply(self, text: str, findings: list[Finding]) -> tuple[str | None, list[Finding]]:
        """The cleaned text (None when a ``drop`` type occurs) and the findings acted on."""
        acted = [f for f in findings if self.actions[f.type] != "keep"]
        if any(self.actions[f.type] == "drop" for f in acted):
            return None, acted
        out: list[str] = []
        pos = 0
        for f in acted:
            out.append(text[pos : f.start])
            out.append(self.replacement(f))
            pos = f.end
        out.append(text[pos:])
        return "".join(out), acted


def resolve_salt(salt: str | None) -> bytes | None:
    """The secret behind a reference: ``env:VARIABLE`` or ``file:PATH`` (never the secret itself)."""
    if salt is None:
        return None
    kind, _, where = salt.partition(":")
    if kind == "env" and where:
        value = os.environ.get(where)
        if not value:
            raise BadInputError(
                f"the salt variable {where} is not set", field="salt", hint=f"export {where}=<a long random secret>"
            )
        return value.encode()
    if kind == "file" and where:
        path = Path(where).expanduser()
        if not path.is_file():
            raise BadInputError(f"no salt file {where}", field="salt", hint="write a long random secret to that file")
        data = path.read_bytes().strip()
        if not data:
            raise BadInputError(
                f"the salt file {where} is empty", field="salt", hint="write a long random secret to it"
            )
        return data
    raise BadInputError(
        "the salt is given by reference: env:VARIABLE or file:PATH", field="salt", hint="e.g. --salt env:PII_SALT"
    )


def masked_snippet(text: str, findings: list[Finding], focus: Finding, *, width: int = 40) -> str:
    """``text`` around ``focus`` with every finding masked (what a report may show)."""
    start = max(0, focus.start - width)
    end = min(len(text), focus.end + width)
    out: list[str] = []
    pos = start
    for f in findings:
        if f.end <= start or f.start >= end:
            continue
        s, e = max(f.start, start), min(f.end, end)
        out.append(text[pos:s])
        out.append(display_mask(f) if s == f.start and e == f.end else "*" * (e - s))
        pos = e
    out.append(text[pos:end])
    return ("…" if start else "") + "".join(out) + ("…" if end < len(text) else "")
