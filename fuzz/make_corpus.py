#!/usr/bin/env python3
"""Writes the committed seed corpus (fuzz/corpus/<harness>/): valid
safetensors files and edge cases near the loader's checks, texts on either
side of the GPT example's data rules, and edit lists for the GPT example's
harnesses (their format is in fuzz/gpt_fuzz.c and the harnesses). Every
seed runs cleanly; rerun only to change the seeds."""
import json
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "tests", "fixtures")


def st(header, data=b"", pad=True):
    """A safetensors file from a header (dict or raw text) and data bytes."""
    text = header if isinstance(header, (bytes, str)) else json.dumps(header, separators=(",", ":"))
    raw = text.encode() if isinstance(text, str) else text
    if pad:
        raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + data


def f32(*v):
    return struct.pack("<%df" % len(v), *v)


def write(harness, name, blob):
    d = os.path.join(HERE, "corpus", harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as fp:
        fp.write(blob)


def safetensors_corpus():
    for fx in ["torch_written.safetensors", "adamw.safetensors", "mha_self.safetensors"]:
        shutil.copy(os.path.join(FIXTURES, fx), os.path.join(HERE, "corpus", "safetensors", fx))
    # Loads into the harness's fixed parameters (w [3,2] F32, b [2] F64,
    # step [] I64, mask [1,3] BOOL, empty [0,4] F32).
    params = {
        "__metadata__": {"format": "pt"},
        "w": {"dtype": "F32", "shape": [3, 2], "data_offsets": [0, 24]},
        "b": {"dtype": "F64", "shape": [2], "data_offsets": [24, 40]},
        "step": {"dtype": "I64", "shape": [], "data_offsets": [40, 48]},
        "mask": {"dtype": "BOOL", "shape": [1, 3], "data_offsets": [48, 51]},
        "empty": {"dtype": "F32", "shape": [0, 4], "data_offsets": [51, 51]},
    }
    data = f32(1, 2, 3, 4, 5, 6) + struct.pack("<2d", -1.5, 2.5) + struct.pack("<q", 42) + b"\x01\x00\x07"
    write("safetensors", "params.safetensors", st(params, data))
    one = {"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}
    write("safetensors", "empty_file", b"")
    write("safetensors", "short_length", b"\x08\x00\x00\x00")
    write("safetensors", "length_past_end", struct.pack("<Q", 1 << 40) + b"{}")
    write("safetensors", "empty_header", st({}))
    write("safetensors", "malformed_json", st('{"x":{"dtype":"F32",', pad=False))
    write("safetensors", "unknown_dtype", st({"x": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}}, b"\0" * 4))
    write("safetensors", "shape_mismatch", st({"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, f32(1, 2)))
    write("safetensors", "overlap", st({"x": one["x"], "y": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, f32(1, 2)))
    write("safetensors", "duplicate_names", st('{"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
                                               '"x":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}', f32(1, 2, 3, 4)))
    # A repeated key reads as the first value here and the last in Python's
    # json: refused wherever it is in the header.
    write("safetensors", "duplicate_dtype", st('{"x":{"dtype":"F32","dtype":"F64","shape":[2],"data_offsets":[0,8]}}', f32(1, 2)))
    write("safetensors", "duplicate_shape", st('{"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"shape":[1]}}', f32(1, 2)))
    write("safetensors", "duplicate_metadata", st('{"__metadata__":{"format":"pt"},"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
                                                  '"__metadata__":{"format":"np"}}', f32(1, 2)))
    write("safetensors", "duplicate_metadata_key", st('{"__metadata__":{"format":"pt","format":"np"}}'))
    write("safetensors", "huge_shape", st({"x": {"dtype": "F64", "shape": [4611686018427387904, 4], "data_offsets": [0, 8]}}, f32(1, 2)))
    # Found by review, fixed in nn/safetensors.c: an empty tensor whose other
    # dims overflow the strides (UBSan: signed overflow in tg__empty).
    write("safetensors", "zero_dim_huge_shape", st({"x": {"dtype": "F32", "shape": [0, 1 << 62, 1 << 62], "data_offsets": [0, 0]}}))
    write("safetensors", "escapes_and_unicode", st('{"\\u00e9\\ud83d\\ude00\\n":{"dtype":"BOOL","shape":[1],"data_offsets":[0,1]},'
                                                   '"__metadata__":{"k":"v\\"\\\\"}}', b"\x02"))
    write("safetensors", "deep_nesting", st("[" * 70 + "]" * 70))
    write("safetensors", "numbers", st('{"x":{"dtype":"I64","shape":[1e0],"data_offsets":[-0,8.0]}}', b"\0" * 8))


def text_corpus():
    write("text_data", "empty", b"")
    write("text_data", "one_short", b"abcdefgh")          # context + 0: too short
    write("text_data", "exact", b"abcdefghi")             # context + 1: one window
    write("text_data", "nul_inside", b"hello\0world, again")
    write("text_data", "one_symbol", b"a" * 40)
    write("text_data", "newlines", b"\n\n\r\n\t \n\n\n\n\n")
    write("text_data", "utf8", "naïve café — 東京 😀 übung\n".encode())
    write("text_data", "invalid_utf8", b"\xff\xfe\xc3\x28\xe2\x82 text \x80\x80\x80")
    write("text_data", "all_bytes", bytes(range(1, 256)))
    write("text_data", "high_bytes_first", bytes(range(255, 200, -1)))
    write("text_data", "prose", b"First Citizen:\nBefore we proceed any further, hear me speak.\n\n"
                                b"All:\nSpeak, speak.\n\nFirst Citizen:\nYou are all resolved rather to die than to famish?\n")
    write("text_data", "low_ids_only", b"\x01\x02\x03\x01\x02\x03\x01\x02\x03\x01")


# The GPT harnesses' inputs: a first byte (odd: the checkpoint trained on
# text, even: the built-in task; plus 2: the Llama's), then records. A checkpoint edit is its tag
# (0..8 mod 9, below 0x80), two bytes every edit reads (which tensor for the
# edits of any tensor, which generator), then its own bytes; see
# gpt_fuzz_edit. Table indices refer to gpt_fuzz_double / gpt_fuzz_int.
TEXT, TASK, LLAMA_TEXT, LLAMA_TASK = 1, 0, 3, 2
SET_SETTING, SET_CONFIG, SET_VOCAB, NEW_VOCAB, NEW_HISTORY, RNG, NEW_ANY, DROP_ANY, SET_ANY = range(9)
D_ZERO, D_ONE, D_TWO, D_MILLI, D_4096 = 3, 6, 7, 13, 19
I_ONE, I_TWO = 1, 2


def edit(tag, *rest, any_index=0, rng=0):
    return bytes([tag, any_index, rng, *rest])


def gpt_resume_corpus():
    write("gpt_resume", "text_unchanged", bytes([TEXT]))
    write("gpt_resume", "task_unchanged", bytes([TASK]))
    write("gpt_resume", "text_lr", bytes([TEXT]) + edit(SET_SETTING, 2, D_MILLI))
    write("gpt_resume", "text_more_steps", bytes([TEXT]) + edit(SET_SETTING, 0, D_4096))
    write("gpt_resume", "text_eval_every_two", bytes([TEXT]) + edit(SET_SETTING, 4, D_TWO))
    # history [1, 2] of zeros: shorter than the steps run
    write("gpt_resume", "text_short_history", bytes([TEXT]) + edit(NEW_HISTORY, 1, 2, 1, 2, D_ZERO, 0))
    write("gpt_resume", "text_rng_word", bytes([TEXT]) + edit(RNG, 0, 2, I_ONE, rng=1))
    write("gpt_resume", "text_wider_config", bytes([TEXT]) + edit(SET_CONFIG, 4, I_TWO))
    write("gpt_resume", "text_other_vocab", bytes([TEXT]) + edit(SET_VOCAB, 0, I_TWO))
    write("gpt_resume", "text_drop_first", bytes([TEXT]) + edit(DROP_ANY))
    write("gpt_resume", "task_as_text", bytes([TEXT]) + edit(SET_SETTING, 3, D_ONE))
    write("gpt_resume", "llama_text_unchanged", bytes([LLAMA_TEXT]))
    write("gpt_resume", "llama_task_unchanged", bytes([LLAMA_TASK]))
    # llama.config [4] is the kv heads, [7] the rope theta
    write("gpt_resume", "llama_text_kv_heads_off", bytes([LLAMA_TEXT]) + edit(SET_CONFIG, 4, D_TWO))
    write("gpt_resume", "llama_text_theta_zero", bytes([LLAMA_TEXT]) + edit(SET_CONFIG, 7, D_ZERO))


# Sample options: a tag of 0x80 or more, mod 8: prompt (a length byte, then
# its bytes), tokens, temperature (odd byte: a table entry; even: a drawn
# double), top-k, seed, --greedy, an unknown option, raw bytes.
PROMPT, TOKENS, TEMPERATURE, TOP_K, SEED, GREEDY, UNKNOWN = (0x80 + i for i in range(7))


def prompt(text):
    return bytes([PROMPT, len(text)]) + text


def gpt_sample_corpus():
    write("gpt_sample", "text_default", bytes([TEXT]))
    write("gpt_sample", "task_greedy_sum", bytes([TASK, GREEDY]) + prompt(b"123+456="))
    write("gpt_sample", "text_newline_prompt", bytes([TEXT]) + prompt(b"To\n"))
    write("gpt_sample", "text_byte_outside_vocab", bytes([TEXT]) + prompt(b"To \xff"))
    write("gpt_sample", "text_temperature_top_k", bytes([TEXT, TEMPERATURE, 1, 1, TOP_K, 3]))
    write("gpt_sample", "text_unknown_option", bytes([TEXT, UNKNOWN, 0]))
    write("gpt_sample", "text_no_tokens", bytes([TEXT, TOKENS, 0]))
    write("gpt_sample", "text_largest_seed", bytes([TEXT, SEED, 3]))
    write("gpt_sample", "task_top_k_past_vocab", bytes([TASK, TOP_K, 7]))
    write("gpt_sample", "text_other_vocab", bytes([TEXT]) + edit(SET_VOCAB, 0, I_TWO))
    write("gpt_sample", "llama_text_default", bytes([LLAMA_TEXT]))
    write("gpt_sample", "llama_task_greedy_sum", bytes([LLAMA_TASK, GREEDY]) + prompt(b"123+456="))


if __name__ == "__main__":
    safetensors_corpus()
    text_corpus()
    gpt_resume_corpus()
    gpt_sample_corpus()
