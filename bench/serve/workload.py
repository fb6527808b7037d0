"""What the serving benchmark's Python references share with bench_serve:
reading its workload file (one request a line: max_new_tokens, then the
prompt's ids) and its nearest-rank percentile."""
import math


def read_workload(path):
    reqs = []
    with open(path) as f:
        for line in f:
            v = [int(x) for x in line.split()]
            if v:
                reqs.append((v[1:], v[0]))
    return reqs


def percentile(v, p):  # nearest rank, as bench_serve
    v = sorted(v)
    k = math.ceil(p * len(v))
    return v[min(len(v) - 1, max(k - 1, 0))]
