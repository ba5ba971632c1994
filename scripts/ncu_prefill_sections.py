#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Splits an Nsight Compute source page of the sm_90 16-bit prefill kernel (templates/prefill_sm90.cu)
by warp role and code section: `ncu -i REP --page source --csv --print-source sass > SRC.csv`, then

    scripts/ncu_prefill_sections.py SRC.csv [--sites N]

prints, per role (shared entry, consumers, producer) and per section, the warp-state samples, their
main stall reasons and the instructions executed, then the N largest long-scoreboard sites. Roles
and sections come from markers in the SASS: USETMAXREG.TRY_ALLOC / .DEALLOC open the consumers' /
the producer's code; the consumers' main loop is the range of their longest backward branch; in
it the turn is BAR.SYNC .. BAR.ARV, the S wait the WARPGROUP.DEPBAR of gsb0 0x1, the softmax runs to
the P V wait (the next WARPGROUP.DEPBAR); out-of-line retry loops of mbarrier waits (past the last
EXIT) count for the section whose branch jumps to them.
"""
import argparse
import collections
import csv
import re


def load(path):
    rows = list(csv.reader(open(path)))
    head = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    cols = rows[head]
    ix = {c: i for i, c in enumerate(cols)}
    reasons = [c for c in cols if c.startswith("stall_") and "Not Issued" not in c]
    ins = []
    for r in rows[head + 1:]:
        if len(r) < len(cols) or not r[0].startswith("0x"):
            continue
        num = lambda c: float(r[ix[c]] or 0)
        ins.append({
            "addr": int(r[0], 16),
            "text": r[1].strip(),
            "samples": num("Warp Stall Sampling (All Samples)"),
            "exec": num("Instructions Executed"),
            "why": {c[6:]: num(c) for c in reasons},
        })
    base = ins[0]["addr"]
    BASE[0] = base
    for x in ins:
        x["off"] = x["addr"] - base
    return ins


BASE = [0]


def branch_target(text):
    """A branch's target as an offset from the kernel's first instruction."""
    m = re.search(r"\bBRA(?:\.\w+)*\s+(?:!?U?P\d,\s*)?(0x[0-9a-f]+)", text)
    return int(m.group(1), 16) - BASE[0] if m else None


def sections(ins):
    off = [x["off"] for x in ins]
    find = lambda pred, lo=0, hi=None: next(
        (x["off"] for x in ins if x["off"] >= lo and (hi is None or x["off"] < hi) and pred(x["text"])), None)
    c0 = find(lambda t: "USETMAXREG.TRY_ALLOC" in t)
    p0 = find(lambda t: "USETMAXREG.DEALLOC" in t)
    exits = [x["off"] for x in ins if re.search(r"\bEXIT\b", x["text"])]
    stub0 = max(exits) + 16 if exits else off[-1] + 16
    cons = (c0, p0) if c0 < p0 else (c0, stub0)
    prod = (p0, stub0) if c0 < p0 else (p0, c0)
    # consumers' main loop: their longest backward branch
    best = None
    for x in ins:
        if cons[0] <= x["off"] < cons[1]:
            t = branch_target(x["text"])
            if t is not None and t < x["off"] and (best is None or x["off"] - t > best[1] - best[0]):
                best = (t, x["off"] + 16)
    loop = best
    qwait = find(lambda t: "SYNCS.PHASECHK" in t, cons[0], cons[1])
    sec = []
    sec.append(("shared entry", 0, c0 if c0 < p0 else p0))
    s0done = find(lambda t: "WARPGROUP.DEPBAR" in t, qwait, loop[0])
    sec.append(("C setup (+ prefetch code)", cons[0], qwait))
    sec.append(("C block start: Q / K0 waits, S0", qwait, s0done + 16))
    sec.append(("C tile 0 + pre-loop", s0done + 16, loop[0]))
    bs = find(lambda t: "BAR.SYNC" in t, loop[0], loop[1])
    ba = find(lambda t: "BAR.ARV" in t, bs, loop[1])
    sw = find(lambda t: "WARPGROUP.DEPBAR" in t, ba, loop[1])
    pvw = find(lambda t: "WARPGROUP.DEPBAR" in t, sw + 16, loop[1])
    sec.append(("C loop: K/V waits + fence", loop[0], bs))
    sec.append(("C loop: turn (BAR.SYNC..BAR.ARV)", bs, ba + 16))
    sec.append(("C loop: S wait", ba + 16, sw + 16))
    sec.append(("C loop: softmax", sw + 16, pvw))
    sec.append(("C loop: P V wait + tail", pvw, loop[1]))
    epi = find(lambda t: re.search(r"BAR\.SYNC.*0x80", t) is not None, loop[1], cons[1])
    if epi is None:
        epi = loop[1]
    sec.append(("C last P V + normalise", loop[1], epi))
    sec.append(("C epilogue (stage, store)", epi, cons[1]))
    # producer: Q gather = first LDGSTS .. the Q barrier's arrive
    q0 = find(lambda t: "LDGSTS" in t, prod[0], prod[1])
    qa = find(lambda t: "ARRIVES" in t, q0, prod[1])
    sec.append(("P entry", prod[0], q0))
    sec.append(("P Q gather", q0, qa + 16))
    sec.append(("P K/V loop and exit", qa + 16, prod[1]))
    return sec, stub0, cons, prod


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--sites", type=int, default=16)
    a = ap.parse_args()
    ins = load(a.csv)
    sec, stub0, cons, prod = sections(ins)
    owner = {}
    for x in ins:
        for name, lo, hi in sec:
            if lo <= x["off"] < hi:
                owner[x["off"]] = name
    # stubs: attribute to the section of the branch that jumps into each
    stub_owner = {}
    for x in ins:
        t = branch_target(x["text"])
        if t is not None and t >= stub0 and x["off"] < stub0:
            stub_owner.setdefault(t, owner.get(x["off"], "?"))
    cur = "?"
    for x in ins:
        if x["off"] >= stub0:
            cur = stub_owner.get(x["off"], cur)
            owner[x["off"]] = cur + " (retry)" if not cur.endswith("(retry)") else cur
    total = sum(x["samples"] for x in ins)
    agg = collections.OrderedDict()
    for name, _, _ in sec:
        agg[name] = [0, 0, collections.Counter()]
    for x in ins:
        n = owner.get(x["off"], "?").replace(" (retry)", "")
        a_ = agg.setdefault(n, [0, 0, collections.Counter()])
        a_[0] += x["samples"]
        a_[1] += x["exec"]
        a_[2].update(x["why"])
    print("samples %d" % total)
    roles = collections.OrderedDict([("shared", [0, 0, collections.Counter()]), ("consumers", [0, 0, collections.Counter()]), ("producer", [0, 0, collections.Counter()])])
    for n, (s, e, w) in agg.items():
        r = "shared" if n.startswith("shared") else "consumers" if n.startswith("C ") else "producer"
        roles[r][0] += s
        roles[r][1] += e
        roles[r][2].update(w)
    fmt = lambda w: ", ".join("%s %d" % (k, v) for k, v in w.most_common(5) if v > 0)
    print("%-36s %8s %6s %9s  %s" % ("role", "samples", "%", "instr M", "top reasons"))
    for n, (s, e, w) in roles.items():
        print("%-36s %8d %5.1f%% %9.2f  %s" % (n, s, 100 * s / total, e / 1e6, fmt(w)))
    print("%-36s %8s %6s %9s  %s" % ("section", "samples", "%", "instr M", "top reasons"))
    for n, (s, e, w) in agg.items():
        print("%-36s %8d %5.1f%% %9.2f  %s" % (n, s, 100 * s / total, e / 1e6, fmt(w)))
    print("long-scoreboard sites:")
    for x in sorted(ins, key=lambda x: -x["why"].get("long_sb", 0))[:a.sites]:
        print("  %05x %6d  %-34s %s" % (x["off"], x["why"].get("long_sb", 0), owner.get(x["off"], "?")[:34], x["text"][:60]))


if __name__ == "__main__":
    main()
