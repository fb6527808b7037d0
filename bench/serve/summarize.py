"""Summarises bench/serve/run.sh's results (build/bench-serve/results.jsonl)
as markdown: per model and row the rounds, output tokens/s best and median,
time to first token p50 and p99 (medians over the rounds), the load average
(median of the rows' starts); then the engine's median tokens/s over each
other row's median (the issue's goals: >= 3x request by request, >= 1.5x
llama.cpp, >= 2x transformers), the prefix-reuse counts and the KV memory
ratio.

    python summarize.py RESULTS.jsonl
"""
import json
import statistics
import sys

ENGINE = "oslo engine, 2 threads"
GOALS = {"oslo generate request by request, 2 threads": 3.0,
         "llama.cpp continuous batching, 2 threads": 1.5,
         "transformers continuous batching, 2 threads": 2.0}


def main():
    rows, prefix = {}, {}
    for line in open(sys.argv[1]):
        r = json.loads(line)
        if "computed_ratio" in r:
            prefix[r["model"]] = r
        else:
            rows.setdefault(r["model"], {}).setdefault(r["row"], []).append(r)
    med = statistics.median
    print("| model | row | rounds | tok/s best | tok/s median | TTFT p50 ms | TTFT p99 ms | load 1 min |")
    print("| --- | --- | --: | --: | --: | --: | --: | --: |")
    for model, by_row in rows.items():
        for name, rs in by_row.items():
            t = [x["tok_s"] for x in rs]
            print(f"| {model} | {name} | {len(rs)} | {max(t):.1f} | {med(t):.1f} | "
                  f"{med(x['ttft_p50_ms'] for x in rs):.0f} | {med(x['ttft_p99_ms'] for x in rs):.0f} | "
                  f"{med(x['load1'] for x in rs):.2f} |")
    print()
    print("| model | engine median tok/s over | ratio | goal | met |")
    print("| --- | --- | --: | --: | --- |")
    for model, by_row in rows.items():
        if ENGINE not in by_row:
            continue
        e = med(x["tok_s"] for x in by_row[ENGINE])
        for name, goal in GOALS.items():
            if name in by_row:
                ratio = e / med(x["tok_s"] for x in by_row[name])
                print(f"| {model} | {name} | {ratio:.2f} | {goal} | {'yes' if ratio >= goal else 'no'} |")
    print()
    print("| model | prompt tokens | computed with prefix caching | without | ratio (goal <= 0.125) "
          "| KV in use / tokens cached at peak (goal <= 1.1) | mean over steps |")
    print("| --- | --: | --: | --: | --: | --: | --: |")
    for model in sorted(set(prefix) | set(rows)):
        p = prefix.get(model)
        e = rows.get(model, {}).get(ENGINE, [])
        kv = f"{med(x['kv_over_cached_at_peak'] for x in e):.3f} | " \
             f"{med(x['kv_over_cached_mean'] for x in e):.3f}" if e else " | "
        if p:
            print(f"| {model} | {p['prompt_tokens']} | {p['computed_with_caching']} | "
                  f"{p['computed_without']} | {p['computed_ratio']:.4f} | {kv} |")
        else:
            print(f"| {model} | | | | | {kv} |")


if __name__ == "__main__":
    main()
