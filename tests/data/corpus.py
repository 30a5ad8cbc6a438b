# ruff: noqa: RUF001 - Chinese punctuation is the point of this corpus
"""Corpora the data tests and the benchmark generate: planted sensitive values and near duplicates.

Every planted value is recorded with its type and whether its checksum is valid, so a test
can measure recall (every valid value found) and precision (no invalid or random number
reported). Near duplicates are copies of an earlier document with a few characters changed.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

_ID_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
_ID_CHECK = "10X98765432"
_EN = (
    "model data train cluster node checkpoint gradient batch token layer weight loss metric river mountain "
    "garden market window paper letter answer question report budget season harbor engine signal planet "
    "orange silver forest island bridge castle doctor lawyer banker patient contract invoice ledger policy "
    "claim account branch office meeting quarter revenue expense audit review summary chapter figure table "
    "network storage memory process thread kernel driver screen keyboard camera battery charger cable"
).split()
_ZH = (
    "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面而方后多定行学法所"
    "民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本去把性好应开它合还因由其些然前外天政四日"
    "那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比或但质气第向道命此变条只没结解问意建月公无系军很情者最立代想"
)
_SENTENCES = (
    "我们的团队在数据中心训练模型，今天的进度很好。",
    "这份合同需要在月底之前完成审核。",
    "请把季度报告发到共享目录，并抄送财务部门。",
    "模型在验证集上的准确率提高了两个百分点。",
    "会议改到下午三点，地点在三楼的会议室。",
    "患者的检查结果已经出来，需要复诊。",
    "本次贷款申请的材料已经齐全，等待审批。",
    "The quarterly audit found no material issues in the ledger.",
    "Please review the attached invoice before the end of the week.",
    "The training job resumed from the last checkpoint after a preemption.",
    "Our support team will reply within two business days.",
    "The contract renewal is scheduled for the next quarter.",
)
_GIVEN = "伟芳娜敏静丽强磊军洋勇艳杰娟涛明超秀霞平刚桂英华玉兰"
_SURNAMES = "王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗"
_PLACES = ("北京市", "上海市", "广州市", "深圳市", "杭州市", "成都市", "南京市", "武汉市")


def id_card(rng: random.Random, *, valid: bool = True) -> str:
    body = f"{rng.choice(['110105', '310104', '440305', '330106'])}{rng.randint(1950, 2005)}"
    body += f"{rng.randint(1, 12):02d}{rng.randint(1, 28):02d}{rng.randint(0, 999):03d}"
    check = _ID_CHECK[sum(int(c) * w for c, w in zip(body, _ID_WEIGHTS, strict=True)) % 11]
    if not valid:
        check = _ID_CHECK[(_ID_CHECK.index(check) + rng.randint(1, 10)) % 11]
    return body + check


def _luhn_digit(digits: str) -> str:
    total = 0
    for i, c in enumerate(reversed(digits)):
        d = int(c)
        if i % 2 == 0:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return str((10 - total % 10) % 10)


def bank_card(rng: random.Random, *, valid: bool = True) -> str:
    body = rng.choice(["622202", "621700", "436742"]) + "".join(str(rng.randint(0, 9)) for _ in range(12))
    check = _luhn_digit(body)
    if not valid:
        check = str((int(check) + rng.randint(1, 9)) % 10)
    number = body + check
    return " ".join(number[i : i + 4] for i in range(0, len(number), 4)) if rng.random() < 0.5 else number


def mobile(rng: random.Random) -> str:
    n = f"1{rng.choice('3456789')}{rng.randint(0, 999_999_999):09d}"
    return ("+86 " + n) if rng.random() < 0.3 else n


def email(rng: random.Random) -> str:
    return (
        f"{rng.choice(['li', 'wang', 'amy', 'bob'])}.{rng.randint(1, 9999)}@{rng.choice(['corp', 'bank', 'mail'])}.com"
    )


def ip(rng: random.Random) -> str:
    return ".".join(str(rng.randint(1, 254)) for _ in range(4))


def phone(rng: random.Random) -> str:
    return f"0{rng.choice(['10', '21', '755', '571'])}-{rng.randint(2_000_0000, 8_999_9999)}"


def person(rng: random.Random) -> str:
    return rng.choice(_SURNAMES) + rng.choice(_GIVEN) + (rng.choice(_GIVEN) if rng.random() < 0.5 else "")


def filler(rng: random.Random, n: int = 40) -> str:
    if rng.random() < 0.5:
        return " ".join(rng.choice(_EN) for _ in range(n // 4)) + "."
    return "".join(rng.choice(_ZH) for _ in range(n // 2)) + "。"


@dataclass
class Planted:
    docs: list[str] = field(default_factory=list)
    pii: list[tuple[int, str, str]] = field(default_factory=list)  # (doc, type, value) with a valid checksum
    decoys: list[tuple[int, str, str]] = field(default_factory=list)  # invalid checksums: must not be found
    near: list[tuple[int, int]] = field(default_factory=list)  # (original, copy)

    def write_jsonl(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            for i, text in enumerate(self.docs):
                f.write(json.dumps({"id": i, "text": text}, ensure_ascii=False) + "\n")
        return path


_TEMPLATES = {
    "id_card": "身份证号{v}，",
    "bank_card": "银行卡号 {v} 。",
    "mobile": "手机{v}，",
    "email": "email {v} ",
    "ip": "from {v} ",
    "phone": "电话{v}。",
    "person": "{v}说",
    "person2": "联系人：{v}，",
    "person3": "请{v}确认。",
}


def pii_corpus(n: int, *, seed: int = 0, per_doc: int = 2, with_names: bool = True) -> Planted:
    """``n`` documents, each with ``per_doc`` planted values (and sometimes an invalid-checksum decoy)."""
    rng = random.Random(seed)
    out = Planted()
    kinds = [k for k in _TEMPLATES if (with_names or k != "person") and k[-1] not in "23"]
    for i in range(n):
        parts = [rng.choice(_SENTENCES)]
        for _ in range(per_doc):
            kind = rng.choice(kinds)
            template = _TEMPLATES[kind]
            if kind == "person":
                template = _TEMPLATES[rng.choice(["person", "person2", "person3"])]
            value = {
                "id_card": lambda: id_card(rng),
                "bank_card": lambda: bank_card(rng),
                "mobile": lambda: mobile(rng),
                "email": lambda: email(rng),
                "ip": lambda: ip(rng),
                "phone": lambda: phone(rng),
                "person": lambda: person(rng),
            }[kind]()
            parts.append(template.format(v=value))
            out.pii.append((i, kind, value))
            parts.append(rng.choice(_SENTENCES))
        if rng.random() < 0.3:
            kind = rng.choice(["id_card", "bank_card"])
            decoy = id_card(rng, valid=False) if kind == "id_card" else bank_card(rng, valid=False)
            parts.append(_TEMPLATES[kind].format(v=decoy))
            out.decoys.append((i, kind, decoy))
        out.docs.append("".join(parts))
    return out


def dup_corpus(n: int, *, seed: int = 0, dup_share: float = 0.2, length: int = 300, edits: int = 3) -> Planted:
    """``n`` distinct random documents plus ``dup_share * n`` copies with ``edits`` characters changed."""
    rng = random.Random(seed)
    out = Planted()
    for _ in range(n):
        out.docs.append(" ".join(filler(rng, 40) for _ in range(max(1, length // 40))))
    for _ in range(int(n * dup_share)):
        src = rng.randrange(n)
        chars = list(out.docs[src])
        for _ in range(edits):
            j = rng.randrange(len(chars))
            chars[j] = rng.choice("abcdefghijklmnopqrstuvwxyz的是在")
        out.near.append((src, len(out.docs)))
        out.docs.append("".join(chars))
    return out
