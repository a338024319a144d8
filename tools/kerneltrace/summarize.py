"""Where a replay's time goes, kernel by kernel, from kerneltrace.c's CSV.

    python3 summarize.py kerneltrace.csv [--kernels N] [--skip N] [--positions N]

The kernels of one cuGraphLaunch share a correlation id; the replays with
the most common kernel count (--kernels to choose another) are a plan's,
the first --skip of them left out (warm-up). In each replay the kernels are
taken in the order they start. A kernel's "adds" is how far its end lies
past the latest end before it: with programmatic dependent launch the
kernels overlap, so the sum of the adds (plus the first kernel's length) is
the replay's span, and a kernel's adds is what the token would save if it
cost nothing and the rest stayed as they are. "gap" is its start less the
end of the kernel before it (negative: it started before that one ended).
Every figure is the median over the replays.
"""
import argparse
import collections
import csv
import statistics
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--kernels", type=int, default=0, help="kernels of the replays to read (default: the most common count of 20 or more)")
    ap.add_argument("--skip", type=int, default=3, help="replays to leave out at the start")
    ap.add_argument("--positions", type=int, default=0, help="also list the first N kernels of a replay one by one")
    a = ap.parse_args()

    groups = collections.defaultdict(list)
    with open(a.csv, newline="") as f:
        for row in csv.DictReader(f):
            try:
                groups[int(row["correlation"])].append((int(row["start"]), int(row["end"]), row["name"], row["grid_x"], row["grid_y"], row["grid_z"], row["block_x"]))
            except (KeyError, ValueError):
                continue  # a line cut off at exit
    sizes = collections.Counter(len(g) for g in groups.values() if len(g) >= 20)
    if not sizes:
        sys.exit("no launch of 20 kernels or more in %s" % a.csv)
    n = a.kernels or sizes.most_common(1)[0][0]
    # A record flushed before its kernel's timestamps came in has zeros.
    replays = [sorted(g) for _, g in sorted(groups.items()) if len(g) == n and all(0 < k[0] <= k[1] for k in g)]
    replays = replays[a.skip:] if len(replays) > a.skip else replays
    if not replays:
        sys.exit("no replay of %d kernels (counts seen: %s)" % (n, dict(sizes)))
    names = [k[2] for k in replays[0]]
    if any([k[2] for k in r] != names for r in replays):
        print("note: the replays' kernel orders differ; positions are matched by start order", file=sys.stderr)

    spans, adds, durs, gaps = [], [[] for _ in range(n)], [[] for _ in range(n)], [[] for _ in range(n)]
    for r in replays:
        spans.append(max(k[1] for k in r) - r[0][0])
        latest = r[0][0]
        for i, k in enumerate(r):
            adds[i].append(max(0, k[1] - latest))
            durs[i].append(k[1] - k[0])
            gaps[i].append(k[0] - r[i - 1][1] if i else 0)
            latest = max(latest, k[1])
    med = lambda xs: statistics.median(xs) / 1000.0  # µs
    span = med(spans)
    print("%d replays of %d kernels (counts seen: %s); span %.1f µs (median)" % (len(replays), n, dict(sizes.most_common(6)), span))

    by = collections.OrderedDict()
    for i, name in enumerate(names):
        e = by.setdefault(name, [0, 0.0, 0.0, 0.0])
        e[0] += 1
        e[1] += med(adds[i])
        e[2] += med(durs[i])
        e[3] += med(gaps[i])
    total = sum(e[1] for e in by.values())
    print("\n| kernel | launches | adds µs | share | adds µs a launch | runs µs a launch | gap µs a launch |")
    print("|---|---|---|---|---|---|---|")
    for name, e in sorted(by.items(), key=lambda kv: -kv[1][1]):
        print("| `%s` | %d | %.1f | %.1f %% | %.2f | %.2f | %.2f |" % (name[:60], e[0], e[1], 100 * e[1] / max(span, 1e-9), e[1] / e[0], e[2] / e[0], e[3] / e[0]))
    print("| all | %d | %.1f | %.1f %% | | | |" % (n, total, 100 * total / max(span, 1e-9)))

    if a.positions:
        print("\n| # | kernel | grid | block | adds µs | runs µs | gap µs |")
        print("|---|---|---|---|---|---|---|")
        k0 = replays[len(replays) // 2]
        for i in range(min(a.positions, n)):
            k = k0[i]
            print("| %d | `%s` | %s,%s,%s | %s | %.2f | %.2f | %.2f |" % (i, k[2][:50], k[3], k[4], k[5], k[6], med(adds[i]), med(durs[i]), med(gaps[i])))


if __name__ == "__main__":
    main()
