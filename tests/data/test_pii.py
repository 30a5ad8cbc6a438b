# ruff: noqa: RUF001 - Chinese punctuation is part of the test texts
"""Sensitive fields: checksums decide, CJK boundaries work, pseudonyms are consistent and salted."""

from __future__ import annotations

import random

import pytest

from jupyter_starverse.data import Deidentifier, find_pii, id_card_valid, luhn_valid
from jupyter_starverse.errors import BadInputError
from tests.data.corpus import bank_card, id_card, pii_corpus


def test_checksums_accept_valid_and_refuse_invalid_numbers() -> None:
    rng = random.Random(3)
    for _ in range(200):
        assert id_card_valid(id_card(rng))
        assert not id_card_valid(id_card(rng, valid=False))
        assert luhn_valid(bank_card(rng).replace(" ", ""))
        assert not luhn_valid(bank_card(rng, valid=False).replace(" ", ""))
    assert not id_card_valid("110105194902301234")  # 30 February


def test_numbers_glued_to_chinese_characters_are_found() -> None:
    # \b would see no boundary between 号 and the digits
    found = find_pii("身份证号11010519491231002X手机13812345678邮箱a.b@example.com")
    assert [(f.type, f.value) for f in found] == [
        ("id_card", "11010519491231002X"),
        ("mobile", "13812345678"),
        ("email", "a.b@example.com"),
    ]


def test_invalid_checksums_and_longer_digit_runs_are_not_reported() -> None:
    assert find_pii("号码11010519491231002Y，订单12345678901234567890。") == []


def test_chinese_names_need_a_surname_and_common_words_are_not_people() -> None:
    found = find_pii("本次贷款申请的材料已经齐全，联系人：王芳，银行卡里有钱。")
    assert [(f.type, f.value) for f in found] == [("person", "王芳")]


def test_planted_corpus_recall_and_precision_meet_the_goals() -> None:
    planted = pii_corpus(300, seed=7)
    found = {(i, f.type, f.value) for i, text in enumerate(planted.docs) for f in find_pii(text) if f.type != "place"}
    truth = set(planted.pii)
    assert len(truth & found) / len(truth) >= 0.98
    assert len(truth & found) / len(found) >= 0.95
    decoys = {(i, v) for i, _, v in planted.decoys}
    assert not {(i, v) for i, _, v in found} & decoys  # no invalid checksum slipped through


def test_clean_masks_hashes_and_keeps_pseudonyms_consistent() -> None:
    deid = Deidentifier({"email": "hash", "person": "hash"}, salt=b"secret-1")
    text = "张伟说：请联系zhang@corp.com，张伟的卡号6222020000000000007，手机13812345678。"
    findings = find_pii(text)
    out, acted = deid.apply(text, findings)
    assert out is not None
    assert "zhang@corp.com" not in out and "13812345678" not in out and "张伟" not in out
    assert "138****5678" in out
    names = [deid.replacement(f) for f in acted if f.type == "person"]
    assert len(names) == 2 and names[0] == names[1]  # the same name, the same pseudonym
    other = Deidentifier({"person": "hash"}, salt=b"secret-2")
    assert other.pseudonym("person", "张伟") != deid.pseudonym("person", "张伟")  # keyed by the salt


def test_hash_without_a_salt_and_unknown_actions_are_refused() -> None:
    with pytest.raises(BadInputError, match="salt"):
        Deidentifier({"person": "hash"})
    with pytest.raises(BadInputError, match="unknown action"):
        Deidentifier({"person": "shred"}, salt=b"x")
    with pytest.raises(BadInputError, match="unknown sensitive type"):
        Deidentifier({"passport": "mask"}, salt=b"x")


def test_drop_action_drops_the_document() -> None:
    deid = Deidentifier({"id_card": "drop"}, salt=b"x")
    assert deid.apply("id 11010519491231002X", find_pii("id 11010519491231002X"))[0] is None


def test_luhn_valid_decoys_are_not_bank_cards_without_an_issuer_and_a_card_context() -> None:
    from tests.data.corpus import _luhn_digit

    def luhn(body: str) -> str:
        return body + _luhn_digit(body)

    visa, unionpay = luhn("411111111111111"), luhn("622202123456789012")
    cards = lambda text: [f.value for f in find_pii(text, ["bank_card"])]  # noqa: E731
    # found: an issuer's number after a card word, or grouped in fours as cards are written
    assert cards(f"银行卡号{unionpay}，请核对") == [unionpay]
    assert cards(f"card number: {visa}") == [visa]
    grouped = " ".join(visa[i : i + 4] for i in range(0, 16, 4))
    assert cards(f"paid with {grouped} yesterday") == [grouped]
    decoys = [
        f"订单号{visa}已发货",  # an issuer's prefix, Luhn-valid, but an order number
        f"tracking {unionpay} shipped",
        f"卡号 {luhn('999912345678901')}",  # a card word, Luhn-valid, but no issuer starts with 99
        f"卡号 {luhn('34000000000000000')}",  # Amex prefix with 18 digits: Amex issues 15
        f"流水号{luhn('123456789012345')}",
    ]
    for text in decoys:
        assert cards(text) == [], text
    rng = random.Random(7)  # random Luhn-valid numbers in running text: none taken for cards
    randoms = [luhn("".join(str(rng.randint(0, 9)) for _ in range(15))) for _ in range(300)]
    assert sum(bool(cards(f"编号{n}的记录")) for n in randoms) == 0
