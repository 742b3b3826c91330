/* The pre-tokenizing split of GPT-2 and tiktoken's r50k_base, written out
 * by hand: the pattern 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+|
 * ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ over UTF-8, with Unicode's classes. */
#include "json.h"
#include "tokenizer_internal.h"

int tg__utf8_len(const uint8_t *s, size_t n)
{
    return (int)tg__utf8_seq(s, s + n);
}

static bool in_ranges(const tg__cp_range *r, int count, uint32_t cp)
{
    int lo = 0, hi = count - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < r[mid].lo)
            hi = mid - 1;
        else if (cp > r[mid].hi)
            lo = mid + 1;
        else
            return true;
    }
    return false;
}

/* ASCII's classes, looked up before any table. */
static const uint8_t ascii_class[128] = {
#define S TG__CH_SPACE
#define O TG__CH_OTHER
#define N TG__CH_NUMBER
#define L TG__CH_LETTER
    O, O, O, O, O, O, O, O, O, S, S, S, S, S, O, O, /* \t \n \v \f \r */
    O, O, O, O, O, O, O, O, O, O, O, O, O, O, O, O,
    S, O, O, O, O, O, O, O, O, O, O, O, O, O, O, O,
    N, N, N, N, N, N, N, N, N, N, O, O, O, O, O, O,
    O, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L,
    L, L, L, L, L, L, L, L, L, L, L, O, O, O, O, O,
    O, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L,
    L, L, L, L, L, L, L, L, L, L, L, O, O, O, O, O,
#undef S
#undef O
#undef N
#undef L
};

int tg__char_class(const uint8_t *s, size_t n, int *class_out)
{
    if (s[0] < 0x80) {
        *class_out = ascii_class[s[0]];
        return 1;
    }
    int len = tg__utf8_len(s, n);
    if (len == 0) {  /* as U+FFFD would be: a symbol */
        *class_out = TG__CH_OTHER;
        return 1;
    }
    uint32_t cp = s[0] & (0xFF >> (len + 1));
    for (int i = 1; i < len; i++)
        cp = cp << 6 | (s[i] & 0x3F);
    if (in_ranges(tg__letter, tg__letter_count, cp))
        *class_out = TG__CH_LETTER;
    else if (in_ranges(tg__number, tg__number_count, cp))
        *class_out = TG__CH_NUMBER;
    else if (in_ranges(tg__space, tg__space_count, cp))
        *class_out = TG__CH_SPACE;
    else
        *class_out = TG__CH_OTHER;
    return len;
}

/* The end of the run of characters of one class starting at pos; for OTHER
 * the run is of characters that are neither letter, number nor space. */
static size_t run_of(const uint8_t *s, size_t len, size_t pos, int cls)
{
    while (pos < len) {
        int c, n = tg__char_class(s + pos, len - pos, &c);
        if (c != cls)
            break;
        pos += n;
    }
    return pos;
}

/* 's 't 're 've 'm 'll 'd: lower case only, as GPT-2's pattern has them. */
static size_t contraction(const uint8_t *s, size_t len, size_t pos)
{
    size_t left = len - pos - 1;
    const uint8_t *p = s + pos + 1;
    if (left >= 1 && (p[0] == 's' || p[0] == 't' || p[0] == 'm' || p[0] == 'd'))
        return pos + 2;
    if (left >= 2 && ((p[0] == 'r' && p[1] == 'e') || (p[0] == 'v' && p[1] == 'e') ||
                      (p[0] == 'l' && p[1] == 'l')))
        return pos + 3;
    return 0;
}

/* \s+(?!\S)|\s+ : a run of spaces leaves its last character to the next
 * piece when a non-space follows, unless the run is one character long. */
static size_t space_run(const uint8_t *s, size_t len, size_t pos)
{
    size_t end = pos, last = pos;
    while (end < len) {
        int c, n = tg__char_class(s + end, len - end, &c);
        if (c != TG__CH_SPACE)
            break;
        last = end;
        end += n;
    }
    if (end == len || last == pos)
        return end;
    return last;
}

size_t tg__pretok_gpt2(const uint8_t *s, size_t len, size_t pos)
{
    int c, n = tg__char_class(s + pos, len - pos, &c);
    if (s[pos] == '\'') {
        size_t end = contraction(s, len, pos);
        if (end)
            return end;
    }
    if (s[pos] == ' ' && pos + 1 < len) {
        int c2;
        tg__char_class(s + pos + 1, len - pos - 1, &c2);
        if (c2 != TG__CH_SPACE)
            return run_of(s, len, pos + 1, c2);
    }
    if (c != TG__CH_SPACE)
        return run_of(s, len, pos + n, c);
    return space_run(s, len, pos);
}
