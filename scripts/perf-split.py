#!/usr/bin/env python3
"""perf-split.py: where a hub process's CPU time went during a benchmark's
calls, from the stacks of `perf record -g` (BenchmarkMCPToolCall with
LMOS_BENCH_MCP_PERF=dir records them).

    perf script -i dir/mcp2026.perf.data | scripts/perf-split.py CALLS HZ

CALLS is how many calls the recording covered, HZ perf's sampling frequency
(-F). Each sample goes to the first part below whose test its stack meets,
and the parts are printed in CPU µs per call."""
import collections
import sys

PARTS = [
    ("GC (background mark, sweep, scavenge, assists)",
     lambda s: any(f.startswith("runtime.gcBgMarkWorker") or f in ("runtime.bgsweep", "runtime.bgscavenge", "runtime.gcAssistAlloc") for f in s)),
    ("hub router (TD parse, input check, publish to the agent, result)",
     lambda s: any("lmos-hub/hub.(*Router)" in f for f in s)),
    ("MQTT broker (the agent's connection)",
     lambda s: any("mochi-mqtt" in f or "lmos-hub/mqtt." in f for f in s)),
    ("SDK JSON decoding (internal/json.Unmarshal: segmentio)",
     lambda s: any("go-sdk/internal/json.Unmarshal" in f for f in s)),
    ("SDK JSON encoding (jsonrpc2: encoding/json)",
     lambda s: any("jsonrpc2.jsonMarshal" in f or "jsonrpc2.EncodeMessage" in f or "marshalToRaw" in f for f in s)),
    ("SDK other (sessions, handlers, streams)",
     lambda s: any("go-sdk" in f for f in s)),
    ("MCP door (mcpdoor, outside the router)",
     lambda s: any("lmos-hub/mcpdoor" in f for f in s)),
    ("HTTP proxy handler (web, outside the router)",
     lambda s: any("web.(*Server).proxy" in f for f in s)),
    ("net/http server",
     lambda s: any(f.startswith("net/http.") for f in s)),
    ("scheduler, netpoll, sysmon, syscalls, other", lambda s: True),
]


def stacks(lines):
    """Yields each sample's frames (function names, leaf first)."""
    cur = []
    for line in lines:
        line = line.rstrip("\n")
        if line[:1] in ("\t", " ") and line.strip():
            parts = line.strip().split(" ", 1)
            if len(parts) == 2:
                cur.append(parts[1].split(" (")[0].split("+0x")[0])
            continue
        if cur:
            yield cur
        cur = []
    if cur:
        yield cur


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    calls, hz = int(sys.argv[1]), float(sys.argv[2])
    count, total = collections.Counter(), 0
    for s in stacks(sys.stdin):
        total += 1
        for name, test in PARTS:
            if test(s):
                count[name] += 1
                break
    per = 1e6 / hz / calls
    print("%6.0f µs/call  all (%d samples)" % (total * per, total))
    for name, _ in PARTS:
        print("%6.0f µs/call  %s" % (count[name] * per, name))


main()
