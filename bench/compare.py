#!/usr/bin/python3
"""Runs tensorgrad's benchmark (bench/bench.c) and the PyTorch reference
(../shared/bench/torch_ref.py; bench/torch_llama.py for the llama-* configs,
bench/torch_seq2seq.py for seq2seq)
alternately, several rounds in one session, and prints a markdown table: the
best result per config for tensorgrad at fp32 and at bf16 (bench runs both
matmul precisions), PyTorch at float32 and with its bfloat16 autocast (the
references' --bf16), and the ratio of tensorgrad's best against PyTorch's
best setting, naming which. bench measures the CPU's peaks at start (its
first line: fp32_peak_gflops, dpbf16_peak_gflops, amx_peak_gflops, each on
1 and on all threads) and gives each matmul line its share of the peak it is
bound by (peak_share), which the table shows beside the figure.

    /usr/bin/python3 bench/compare.py [--rounds 3] [--configs gpt-small encoder] [--no-torch-bf16]
                                      [--results [DIR]]

--results also writes the report to DIR/<date>-<cpu>.md (DIR defaults to
bench/results), the dated file that the docs link.

Each side runs at --threads 1 and at --threads 2 in every round; what counts
per config is the best single measurement over all its rounds and thread
counts (the highest GFLOP/s or tok/s, the lowest ms or s), since slower runs
on a shared 2-core machine are noise from elsewhere, not the code's speed.
Peak RSS is the lowest seen for gpt-medium over those runs; bench runs once
per precision, and resets the peak before each config (bench.c).
"""
import argparse, datetime, json, os, pathlib, platform, re, subprocess, sys

CONFIGS = ["matmul", "attn-toy", "encoder", "gpt-small", "gpt-medium", "generate",
           "llama-medium", "llama-generate", "seq2seq"]
LLAMA_CONFIGS = {"llama-medium", "llama-generate"}  # run by bench/torch_llama.py
SEQ2SEQ_CONFIGS = {"seq2seq"}  # run by bench/torch_seq2seq.py
HIGHER_IS_BETTER = {"GFLOP/s", "tok/s"}
DECIMALS = {"GFLOP/s": 1, "tok/s": 1, "ms": 2, "s": 3}


def repo_root():
    return pathlib.Path(__file__).resolve().parent.parent


PEAKS = {}  # "fp32", "dpbf16", "amx" -> [GFLOP/s on 1 thread, on bench's threads]


def note_peaks(info):
    """Keeps the peaks bench measured at start, the highest seen of each."""
    for unit in ("fp32", "dpbf16", "amx"):
        v = info.get(f"{unit}_peak_gflops")
        if isinstance(v, list) and len(v) == 2:
            old = PEAKS.get(unit, [0, 0])
            PEAKS[unit] = [max(a, b) for a, b in zip(old, v)]


def run(cmd):
    """Runs one benchmark process; returns its JSON lines as dicts."""
    print("  $", " ".join(cmd), file=sys.stderr, flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        print(f"  (exit {p.returncode}) {p.stderr.strip()[-500:]}", file=sys.stderr)
    rows = []
    for line in p.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                print(f"  not JSON: {line}", file=sys.stderr)
                continue
            if row.get("config") == "info":  # what the library picked, not a measurement
                print(f"  {line}", file=sys.stderr)
                note_peaks(row)
            else:
                rows.append(row)
    return rows


def key_of(row):
    """The table row a JSON line belongs to: the config, plus the shape for matmul."""
    if row["config"] == "matmul" and "shape" in row:
        m, n, k = row["shape"]
        return f"matmul {m}³" if m == n == k else f"matmul {m}×{n}×{k}"
    return row["config"]


def better(a, b):
    """True when measurement a beats measurement b (same unit)."""
    if a["unit"] in HIGHER_IS_BETTER:
        return a["value"] > b["value"]
    return a["value"] < b["value"]


def collect(best, rss, rows):
    """best[(key, precision)]: the best line; rss[precision]: gpt-medium's peak RSS."""
    for r in rows:
        k = (key_of(r), r.get("precision", "fp32"))
        if k not in best or better(r, best[k]):
            best[k] = r
        if r["config"] == "gpt-medium":
            rss.setdefault(k[1], []).append(r["peak_rss_mb"])


def fmt(row):
    if not row:
        return "—"
    d = DECIMALS.get(row["unit"], 2)
    text = f"{row['value']:.{d}f} {row['unit']} ({row['threads']} thr)"
    if row.get("peak_share"):
        text += f", {100 * row['peak_share']:.0f}% of peak"
    return text


def speed_ratio(tg, pt):
    """tensorgrad speed / PyTorch speed: > 1 means tensorgrad is faster."""
    if tg["value"] <= 0 or pt["value"] <= 0:
        return float("nan")
    if tg["unit"] in HIGHER_IS_BETTER:
        return tg["value"] / pt["value"]
    return pt["value"] / tg["value"]


def machine_line():
    model = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        torch_version = subprocess.run(["/usr/bin/python3", "-c", "import torch; print(torch.__version__)"],
                                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                       text=True).stdout.strip()
    except OSError:
        torch_version = "?"
    return (f"Measured on {model}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, "
            f"PyTorch {torch_version or '?'}, {datetime.date.today().isoformat()}")


def best_of(rows):
    """The best of the rows that exist, and its precision; (None, None) if none."""
    rows = [r for r in rows if r]
    if not rows:
        return None, None
    b = rows[0]
    for r in rows[1:]:
        if better(r, b):
            b = r
    return b, b.get("precision", "fp32")


def table(tg_best, pt_best, tg_rss, pt_rss, order):
    lines = ["| config | tensorgrad fp32 | tensorgrad bf16 | PyTorch fp32 | PyTorch bf16 autocast "
             "| tensorgrad best / PyTorch best |",
             "|---|---|---|---|---|---|"]
    for k in order:
        tg = [tg_best.get((k, p)) for p in ("fp32", "bf16")]
        pt = [pt_best.get((k, p)) for p in ("fp32", "bf16")]
        (t, tp), (q, qp) = best_of(tg), best_of(pt)
        ratio = f"{speed_ratio(t, q):.2f}× ({tp} vs PyTorch {qp})" if t and q else "—"
        lines.append(f"| {k} | {fmt(tg[0])} | {fmt(tg[1])} | {fmt(pt[0])} | {fmt(pt[1])} "
                     f"| {ratio} |")
    for p in ("fp32", "bf16"):
        if tg_rss.get(p) and pt_rss.get(p):
            a, b = min(tg_rss[p]), min(pt_rss[p])
            lines.append(f"| peak RSS, gpt-medium training, {p} | {a:.1f} MB | | {b:.1f} MB | "
                         f"| {a / b:.2f}× of PyTorch's |")
    return "\n".join(lines)


def main():
    root = repo_root()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", default=str(root / "build" / "bench" / "bench"),
                    help="tensorgrad's benchmark binary (default: build/bench/bench)")
    ap.add_argument("--torch-ref", default=str(root.parent / "shared" / "bench" / "torch_ref.py"),
                    help="PyTorch reference script (default: ../shared/bench/torch_ref.py)")
    ap.add_argument("--configs", nargs="+", default=CONFIGS, choices=CONFIGS, metavar="NAME",
                    help="configs to run (default: all): " + " ".join(CONFIGS))
    ap.add_argument("--torch-llama", default=str(root / "bench" / "torch_llama.py"),
                    help="PyTorch reference of the llama-* configs (default: bench/torch_llama.py)")
    ap.add_argument("--torch-seq2seq", default=str(root / "bench" / "torch_seq2seq.py"),
                    help="PyTorch reference of the seq2seq config (default: bench/torch_seq2seq.py)")
    ap.add_argument("--no-torch-bf16", action="store_true",
                    help="skip PyTorch's bfloat16 autocast setting (its --bf16), run by default")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of both sides (default 3)")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2],
                    help="thread counts tried on each side (default 1 2)")
    ap.add_argument("--raw", metavar="PATH",
                    help="also append every JSON line (with side, round and run fields) here, as it comes")
    ap.add_argument("--from-raw", metavar="PATH",
                    help="run nothing: make the table from a file --raw wrote (even a partial one)")
    ap.add_argument("--results", metavar="DIR", nargs="?", const=str(root / "bench" / "results"),
                    help="also write the report to DIR/<date>-<cpu>.md (DIR: bench/results)")
    a = ap.parse_args()
    if a.from_raw:
        return report_from_raw(a.from_raw, a.results)
    for path, what in ((a.bench, "--bench"), (a.torch_ref, "--torch-ref"),
                       (a.torch_llama, "--torch-llama"), (a.torch_seq2seq, "--torch-seq2seq")):
        if not os.path.exists(path):
            ap.error(f"{what} {path}: no such file")
    if a.rounds < 1:
        ap.error("--rounds must be at least 1")

    raw = open(a.raw, "a") if a.raw else None
    run_id = datetime.datetime.now().isoformat(timespec="seconds")  # one file may gather several runs
    sides = {"tensorgrad": ({}, {}), "pytorch": ({}, {})}
    order = []
    for rnd in range(a.rounds):
        print(f"round {rnd + 1}/{a.rounds}", file=sys.stderr, flush=True)
        for t in a.threads:  # alternate: tensorgrad, then PyTorch, at each thread count
            for side, cmd in runs(a, t):
                rows = run(cmd)
                collect(*sides[side.split("-")[0]], rows)
                for r in rows:
                    if key_of(r) not in order:
                        order.append(key_of(r))
                    if raw:
                        raw.write(json.dumps(dict(r, side=side, round=rnd + 1, run=run_id)) + "\n")
                        raw.flush()
    if raw:
        raw.close()
    publish(machine_line() + f"; best of {a.rounds} rounds × threads {a.threads} per side.",
            sides, order, a.results)


def runs(a, t):
    """The processes of one round at t threads: (side, command) pairs."""
    ref = [c for c in a.configs if c not in LLAMA_CONFIGS | SEQ2SEQ_CONFIGS]
    llama = [c for c in a.configs if c in LLAMA_CONFIGS]
    seq2seq = [c for c in a.configs if c in SEQ2SEQ_CONFIGS]
    # one process per precision, as the references run: a process's resident
    # memory does not shrink back between runs, so a second precision in the
    # same process would start from the first one's peak
    out = [("tensorgrad", [a.bench, "--threads", str(t), "--precision", p] + a.configs)
           for p in ("fp32", "bf16")]
    for side, extra in (("pytorch", []), ("pytorch-bf16", ["--bf16"])):
        if extra and a.no_torch_bf16:
            continue
        for script, names in ((a.torch_ref, ref), (a.torch_llama, llama),
                              (a.torch_seq2seq, seq2seq)):
            if names:
                out.append((side, ["/usr/bin/python3", script, "--threads", str(t)] + extra + names))
    return out


def report(sides, order):
    """The joined table and the notes under it, as markdown."""
    (tg_best, tg_rss), (pt_best, pt_rss) = sides["tensorgrad"], sides["pytorch"]
    out = [table(tg_best, pt_best, tg_rss, pt_rss, order), "",
           "ratio = tensorgrad's best setting's speed / PyTorch's best setting's speed (> 1: "
           "tensorgrad is faster), each setting named; for peak RSS, tensorgrad's MB / PyTorch's "
           "(< 1: tensorgrad uses less)."]
    for unit, (one, all_) in PEAKS.items():
        if all_ > 0:
            out.append(f"{unit} peak measured by bench: {one:.0f} GFLOP/s on 1 thread, "
                       f"{all_:.0f} on all")
    return "\n".join(out)


def cpu_slug():
    """The CPU as a file name: vendor and family words, then its widest unit
    (intel-xeon-amx, amd-epyc-7b13-avx2)."""
    model, flags = None, set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, val = line.partition(":")
                if key.strip() == "model name" and model is None:
                    model = val.strip()
                elif key.strip() == "flags" and not flags:
                    flags = set(val.split())
    except OSError:
        pass
    model = model or platform.processor() or "cpu"
    words = re.sub(r"\((r|tm)\)|@.*|\b(processor|cpu|\d+-core)\b", " ", model.lower())
    slug = "-".join(re.findall(r"[a-z0-9]+", words)) or "cpu"
    for unit, flag in (("amx", "amx_bf16"), ("avx512", "avx512f"), ("avx2", "avx2")):
        if flag in flags:
            return f"{slug}-{unit}"
    return slug


def publish(heading, sides, order, results_dir):
    """Prints the report; with --results also writes it to DIR/<date>-<cpu>.md."""
    text = heading + "\n\n" + report(sides, order) + "\n"
    print(text, end="")
    if results_dir:
        path = pathlib.Path(results_dir) / f"{datetime.date.today().isoformat()}-{cpu_slug()}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("# bench/compare.py on " + cpu_slug() + "\n\n" + text)
        print(f"wrote {path}", file=sys.stderr)


def report_from_raw(path, results_dir=None):
    sides = {"tensorgrad": ({}, {}), "pytorch": ({}, {})}
    order, rounds = [], set()
    with open(path) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                if r.get("config") == "info":
                    note_peaks(r)
                    continue
                collect(*sides[r["side"].split("-")[0]], [r])
                rounds.add((r.get("run"), r.get("round")))  # round numbers restart in each run
                if key_of(r) not in order:
                    order.append(key_of(r))
    publish(machine_line() + f"; best over {len(rounds)} round(s) read from {path}.",
            sides, order, results_dir)


if __name__ == "__main__":
    main()
