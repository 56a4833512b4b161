"""The BM25 tokenizer: English, Chinese (jieba), code-like tokens, config round trip."""

from __future__ import annotations

import pickle

import pytest

from data_prep.tokenization import ENGLISH_STOPWORDS, TokenizerConfig, build_tokenizer


def test_english_lowercase_and_stopwords():
    tok = build_tokenizer()
    assert tok("The Capital of France is Paris") == ["capital", "france", "paris"]
    assert "the" in ENGLISH_STOPWORDS and len(ENGLISH_STOPWORDS) == 33


def test_english_without_stopwords_or_lowercase():
    tok = build_tokenizer(TokenizerConfig(stopwords=False, lowercase=False))
    assert tok("The Capital of France") == ["The", "Capital", "of", "France"]


def test_stemming_with_pystemmer():
    tok = build_tokenizer(TokenizerConfig(stem=True))
    assert tok("Running runners ran to the universities") == ["run", "runner", "ran", "universiti"]
    # query and passage forms meet after stemming
    assert set(tok("connected connection")) == {"connect"}


def test_code_tokens_whole_and_parts():
    tok = build_tokenizer()
    # the words of the text in order, then its whole codes (BM25 ignores order)
    assert tok("Error E-204") == ["error", "e", "204", "e-204"]
    assert tok("upgrade to v2.1.") == ["upgrade", "v2", "1", "v2.1"]
    assert tok("ISO_9001 audit") == ["iso", "9001", "audit", "iso_9001"]
    # "a" is a stopword as a word, but the whole code is kept
    assert tok("A/B test") == ["b", "test", "a/b"]
    # a sentence end or a lone hyphen does not make a code
    assert tok("It ended. Then - nothing") == ["ended", "nothing"]


def test_code_tokens_off_keeps_parts_only():
    tok = build_tokenizer(TokenizerConfig(code_tokens=False))
    assert tok("Error E-204 in ISO_9001") == ["error", "e", "204", "iso", "9001"]


def test_codes_are_not_stemmed():
    tok = build_tokenizer(TokenizerConfig(stem=True))
    assert "running-mode" in tok("running-mode")
    assert "run" in tok("running-mode")


def test_chinese_with_jieba_keeps_codes_intact():
    tok = build_tokenizer(TokenizerConfig(language="zh"))
    toks = tok("错误代码E-204表示认证失败，请升级到v2.1版本")
    assert {"错误", "代码", "认证", "失败", "升级", "版本"} <= set(toks)
    assert {"e-204", "e", "204", "v2.1"} <= set(toks)
    assert "，" not in toks and "-" not in toks


def test_chinese_search_mode_adds_subwords():
    search = build_tokenizer(TokenizerConfig(language="zh"))("北京大学")
    accurate = build_tokenizer(TokenizerConfig(language="zh", jieba_mode="accurate"))("北京大学")
    assert accurate == ["北京大学"]
    assert {"北京", "大学", "北京大学"} <= set(search)


def test_config_round_trip_and_validation():
    cfg = TokenizerConfig(language="zh", stem=True)
    assert TokenizerConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.fingerprint() == TokenizerConfig.from_dict(cfg.to_dict()).fingerprint()
    assert cfg.fingerprint() != TokenizerConfig().fingerprint()
    with pytest.raises(ValueError, match="language"):
        TokenizerConfig(language="fr")
    with pytest.raises(ValueError, match="unknown tokenizer setting"):
        TokenizerConfig.from_dict({"language": "en", "colour": "blue"})
    with pytest.raises(ValueError, match="PyStemmer has no stemmer"):
        TokenizerConfig(stem=True, stemmer_language="klingon")


def test_tokenizer_pickles():
    tok = build_tokenizer(TokenizerConfig(stem=True))
    assert pickle.loads(pickle.dumps(tok))("E-204 running") == tok("E-204 running")
