"""Checks an exported tokenizer.json against the ids hpctrain's own encoder produced.

Usage: hf_tokenizer_check.py TOKENIZER_JSON IDS.jsonl [--transformers]
IDS.jsonl holds one object per line: {"text": STR, "ids": [...]} for UTF-8 text, or
{"text_hex": HEX, "ids": [...]} for bytes that are not valid UTF-8 (which `tokenizers` cannot take).

Checked with tokenizers.Tokenizer.from_file:
  1. with encode_special_tokens = True: encode(text).ids == ids for every UTF-8 line, and
     decode(ids) == text;
  2. with the library's defaults: the same, except lines holding the literal "<pad>"/"<eos>",
     which `tokenizers` turns into the special ids; those lines are counted and must differ only so;
  3. for non-UTF-8 lines: decode(ids) equals the bytes decoded with U+FFFD replacement (the export
     can only be lossy there);
  4. with --transformers: AutoTokenizer.from_pretrained(directory of TOKENIZER_JSON, which must hold
     the exported tokenizer_config.json too) encodes every UTF-8 line to ids (no special tokens added).
Exits 0 when all hold, 1 listing the first mismatches, 2 on usage errors.
"""
import json
import os
import sys

from tokenizers import Tokenizer

SPECIAL_LITERALS = ("<pad>", "<eos>")
MAX_REPORTED = 5


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def describe(kind, text, want, got):
    i = first_difference(want, got)
    return (f"{kind}: text {text[:80]!r}: ids differ at position {i}: "
            f"hpctrain {want[max(0, i - 3):i + 5]} vs tokenizers {got[max(0, i - 3):i + 5]} "
            f"(lengths {len(want)} / {len(got)})")


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def has_special_literal(text):
    return any(s in text for s in SPECIAL_LITERALS)


def check_utf8(tok_path, rows):
    errors, special_lines = [], 0
    exact = Tokenizer.from_file(tok_path)
    exact.encode_special_tokens = True
    default = Tokenizer.from_file(tok_path)
    texts = [r["text"] for r in rows]
    got_exact = exact.encode_batch(texts)
    got_default = default.encode_batch(texts)
    for r, ge, gd in zip(rows, got_exact, got_default):
        text, want = r["text"], r["ids"]
        if ge.ids != want:
            errors.append(describe("encode_special_tokens=True", text, want, ge.ids))
        decoded = exact.decode(want)
        if decoded != text:
            errors.append(f"decode: text {text[:80]!r} came back as {decoded[:80]!r}")
        if has_special_literal(text):
            special_lines += 1
            if gd.ids == want:
                errors.append(f"default mode: {text[:80]!r} holds a special literal yet encoded like hpctrain")
        elif gd.ids != want:
            errors.append(describe("default mode", text, want, gd.ids))
    return errors, special_lines


def check_invalid_utf8(tok_path, rows):
    tok = Tokenizer.from_file(tok_path)
    errors = []
    for r in rows:
        raw = bytes.fromhex(r["text_hex"])
        want = raw.decode("utf-8", errors="replace")
        got = tok.decode(r["ids"])
        if got != want:
            errors.append(f"decode of non-UTF-8 {raw[:40]!r}: got {got[:40]!r}, expected lossy {want[:40]!r}")
    return errors


def check_transformers(tok_path, rows):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(os.path.dirname(os.path.abspath(tok_path)))
    errors = []
    for r in rows:
        got = tok(r["text"], add_special_tokens=False)["input_ids"]
        if got != r["ids"]:
            errors.append(describe("transformers", r["text"], r["ids"], got))
    return errors, type(tok).__name__


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 2 or any(a not in ("--transformers",) for a in sys.argv[1:] if a.startswith("--")):
        print(__doc__, file=sys.stderr)
        return 2
    tok_path, ids_path = args
    rows = read_lines(ids_path)
    utf8 = [r for r in rows if "text" in r]
    invalid = [r for r in rows if "text_hex" in r]
    errors, special_lines = check_utf8(tok_path, utf8)
    errors += check_invalid_utf8(tok_path, invalid)
    summary = (f"{len(utf8)} UTF-8 lines ({sum(len(r['ids']) for r in utf8)} tokens) identical with "
               f"encode_special_tokens=True; {special_lines} of them hold '<pad>'/'<eos>' and differ in default mode "
               f"as documented; {len(invalid)} non-UTF-8 lines decode lossily as documented")
    if "--transformers" in sys.argv:
        t_errors, cls = check_transformers(tok_path, utf8)
        errors += t_errors
        summary += f"; transformers {cls} identical on all UTF-8 lines"
    for e in errors[:MAX_REPORTED]:
        print(f"hf_tokenizer_check: {tok_path}: {e}", file=sys.stderr)
    if errors:
        print(f"hf_tokenizer_check: {tok_path}: {len(errors)} mismatches in {len(rows)} lines", file=sys.stderr)
        return 1
    print(f"hf_tokenizer_check: {tok_path}: {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
