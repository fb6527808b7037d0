"""Summary of the quantized decode benchmark's rounds (bench/model/run_quant.sh).

    python summarize_quant.py RESULTS.jsonl FILES.jsonl

RESULTS.jsonl: one JSON line per engine run, tagged by run_quant.sh with
"row", "model", "format", "round" and "load1" (the 1-minute load average
when it started); a run that failed has "error" instead of the numbers.
FILES.jsonl: gguf_quant.py describe's line per file, tagged with "model"
and "format".

Prints two markdown tables:
  1. per model and format, what the file holds: tensor types counted, the
     head's type, the MiB of matrices a decode step reads in the file's
     types (weight_bytes) and as oslo holds them (oslo_weight_bytes: a
     quantized head as stored, a float one in f32);
  2. per model, format and row: decode tokens/s best and median over the
     rounds; oslo / llama.cpp (median over median, best over best); the
     median decode time per token; the bandwidth bound, weight_bytes / TP /
     the streaming read bandwidth (benchmark 7's probe in bench_model: a
     1 GiB buffer read by the row's threads, best of 3, measured in each
     oslo process after its decode; a llama.cpp row takes the bandwidth of
     the same round's oslo TP=1 row, same thread count), and the median over
     rounds of decode time / bound, and of decode time / the bound with the
     KV cache a step reads added (oslo rows: bench_model's kv_bytes_step);
     whether the first 8 greedy tokens equal llama.cpp's on the same file
     and prompt (every round).
Rows keep the order of their first appearance. Plain Python, no packages.
"""
import json
import statistics
import sys

LLAMA = "llama.cpp, 2 threads"
OSLO1 = "oslo TP=1, 2 threads"


def load(path):
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                out.append(json.loads(line))
    return out


def main():
    results, files = load(sys.argv[1]), load(sys.argv[2])
    mib = 1024 * 1024
    print("| model | format | file | tensor types | head | matrices read / token (MiB) "
          "| oslo holds them in (MiB) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    bytes_of = {}
    for d in files:
        key = (d["model"], d["format"])
        bytes_of[key] = d["weight_bytes"]
        types = ", ".join(f"{k} {v}" for k, v in d["tensor_types"].items())
        print(f"| {d['model']} | {d['format']} | {d['file']} | {types} | {d['head']} "
              f"{d['head_type']} | {d['weight_bytes'] / mib:.1f} | "
              f"{d['oslo_weight_bytes'] / mib:.1f} |")
    print()

    rows, errors = {}, {}
    by_round = {}
    for r in results:
        key = (r["model"], r["format"], r["row"])
        if "error" in r:
            errors.setdefault(key, r["error"])
            rows.setdefault(key, [])
            continue
        rows.setdefault(key, []).append(r)
        by_round[(r["model"], r["format"], r["row"], r["round"])] = r
    print("| model | format | engine | rounds | decode tok/s best | median | oslo / llama.cpp "
          "median (best) | decode ms median | bound ms | decode / bound median "
          "| decode / bound with KV median | first tokens = llama.cpp |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for (model, fmt, row), rs in rows.items():
        if not rs:
            print(f"| {model} | {fmt} | {row} | 0 | failed: {errors[(model, fmt, row)]} "
                  "| | | | | | | |")
            continue
        d = [r["decode_tok_s"] for r in rs]
        ms = [1e3 / r["decode_tok_s"] for r in rs]
        ref = rows.get((model, fmt, LLAMA)) or []
        ratio = ""
        if ref and row != LLAMA:
            rd = [r["decode_tok_s"] for r in ref]
            ratio = (f"{statistics.median(d) / statistics.median(rd):.2f} "
                     f"({max(d) / max(rd):.2f})")
        over, over_kv, bounds, same = [], [], [], []
        tp = rs[0].get("tp", 1)
        for r in rs:
            bw = r.get("stream_gb_s")
            if row == LLAMA:
                o = by_round.get((model, fmt, OSLO1, r["round"]))
                bw = o["stream_gb_s"] if o else None
            if bw:
                bound = bytes_of[(model, fmt)] / tp / (bw * 1e9) * 1e3
                bounds.append(bound)
                over.append(1e3 / r["decode_tok_s"] / bound)
                # oslo rows: the KV cache a step reads too (bench_model's
                # kv_bytes_step, the 128 timed steps' mean; all ranks').
                if "kv_bytes_step" in r:
                    kv = (bytes_of[(model, fmt)] + r["kv_bytes_step"]) / tp / (bw * 1e9) * 1e3
                    over_kv.append(1e3 / r["decode_tok_s"] / kv)
            lr = by_round.get((model, fmt, LLAMA, r["round"]))
            if lr and row != LLAMA:
                same.append(lr.get("first_tokens") == r.get("first_tokens"))
        bound_s = f"{statistics.median(bounds):.2f}" if bounds else ""
        over_s = f"{statistics.median(over):.2f}" if over else ""
        over_kv_s = f"{statistics.median(over_kv):.2f}" if over_kv else ""
        same_s = "" if row == LLAMA else (f"{sum(same)}/{len(same)}" if same else "")
        print(f"| {model} | {fmt} | {row} | {len(rs)} | {max(d):.2f} | {statistics.median(d):.2f} "
              f"| {ratio} | {statistics.median(ms):.2f} | {bound_s} | {over_s} | {over_kv_s} "
              f"| {same_s} |")
    loads = [r["load1"] for r in results if "load1" in r]
    if loads:
        print(f"\n1-minute load average when the runs started: min {min(loads)}, "
              f"median {statistics.median(loads)}, max {max(loads)}")


if __name__ == "__main__":
    main()
