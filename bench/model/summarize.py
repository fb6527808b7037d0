"""Summary of benchmark 7's rounds (bench/model/run.sh): reads the JSON lines
the engines printed, one per engine per round, each tagged by run.sh with
"row" (the table row: engine and its thread/process layout), and prints per
dtype and row the best and the median over the rounds of prefill and decode
tokens/s, as a markdown table.

    python summarize.py RESULTS.jsonl

Rows keep the order of their first appearance (run.sh's order in a round).
Plain Python, no packages.
"""
import json
import statistics
import sys


def main():
    rows = {}
    with open(sys.argv[1]) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            rows.setdefault((r["dtype"], r["row"]), []).append(r)
    print("| dtype | engine | rounds | prefill tok/s best | prefill median | decode tok/s best | decode median |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for (dtype, row), rs in rows.items():
        p = [r["prefill_tok_s"] for r in rs]
        d = [r["decode_tok_s"] for r in rs]
        print(f"| {dtype} | {row} | {len(rs)} | {max(p):.1f} | {statistics.median(p):.1f} "
              f"| {max(d):.2f} | {statistics.median(d):.2f} |")


if __name__ == "__main__":
    main()
