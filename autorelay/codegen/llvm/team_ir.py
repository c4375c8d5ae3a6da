"""The native thread team's machine code (`autorelay.codegen.llvm.team`), as LLVM IR text: the
worker's spin loop, the caller's `team_run`, the call announcement and the program runner, with the
layout of the words they share. The protocol is described in `team`'s docstring."""

from __future__ import annotations

from autorelay.codegen.llvm.parallel import END, LINE, NEXT

SLEEPING, SPINNING = 0, 1
PARKED, PENDING = 1, 2  # the park word: sleep now / a call is starting, do not sleep
# the job header, line 0: fn, argv, threads (workers + 1), extent, grain, park, open, active;
# worker w's status: line w + 1; thread r's home range (the claim block): line threads + r
_FN, _ARGV, _THREADS, _EXTENT, _GRAIN, _PARK, _OPEN, _ACTIVE = range(8)


RECORD = 4  # i64 words of a program record: job thunk, argv, extent, grain


def program_ir() -> str:
    """`i64 @team_program(ptr %team, ptr %records, i64 %start, i64 %n, i64 %alone)`: run records
    start .. n-1 in order (see `Team.run_program`). A record with an extent above 1 runs on the
    team (`team_run`) unless `alone`; any other (a serial segment: extent 0) runs on the caller
    with a claim block of one range. Before a team record other than the first, a worker found
    asleep stops the program there: it returns that record's index, for the caller to wake the
    worker (which needs Python) and go on from it. Returns n once every record has run.

    `i64 @team_announce(ptr %team)` marks a call pending (`PENDING` in the park word, which
    keeps workers from going to sleep until the job opens) and then returns the mask of sleeping
    workers (bit w - 1 for worker w), for the caller to wake. Announcing first closes the lost
    wake-up: a worker that the caller saw spinning cannot then fall asleep before the job opens."""
    return f"""
define i64 @team_announce(ptr %team) {{
entry:
  %pp = getelementptr i64, ptr %team, i64 {_PARK}
  store atomic i64 {PENDING}, ptr %pp seq_cst, align 8
  %tp = getelementptr i64, ptr %team, i64 {_THREADS}
  %tn = load i64, ptr %tp, align 8
  br label %look
look:
  %w = phi i64 [1, %entry], [%w1, %status]
  %mask = phi i64 [0, %entry], [%mask1, %status]
  %scanned = icmp sge i64 %w, %tn
  br i1 %scanned, label %out, label %status
status:
  %sidx = mul i64 %w, {LINE}
  %sp = getelementptr i64, ptr %team, i64 %sidx
  %st = load atomic i64, ptr %sp seq_cst, align 8
  %asleep = icmp eq i64 %st, {SLEEPING}
  %b = sub i64 %w, 1
  %bit = shl i64 1, %b
  %flag = select i1 %asleep, i64 %bit, i64 0
  %mask1 = or i64 %mask, %flag
  %w1 = add i64 %w, 1
  br label %look
out:
  ret i64 %mask
}}

define i64 @team_program(ptr %team, ptr %records, i64 %start, i64 %n, i64 %alone) {{
entry:
  %one = alloca [{LINE} x i64], align 64
  %endone = getelementptr i64, ptr %one, i64 {END}
  %nextone = getelementptr i64, ptr %one, i64 {NEXT}
  %solo = icmp ne i64 %alone, 0
  br label %loop
loop:
  %i = phi i64 [%start, %entry], [%i1, %next]
  %more = icmp slt i64 %i, %n
  br i1 %more, label %record, label %done
record:
  %base = mul i64 %i, {RECORD}
  %jp = getelementptr i64, ptr %records, i64 %base
  %job = load ptr, ptr %jp, align 8
  %ap = getelementptr i64, ptr %jp, i64 1
  %argv = load ptr, ptr %ap, align 8
  %ep = getelementptr i64, ptr %jp, i64 2
  %ext = load i64, ptr %ep, align 8
  %gp = getelementptr i64, ptr %jp, i64 3
  %gr = load i64, ptr %gp, align 8
  %par = icmp sgt i64 %ext, 1
  %shared = select i1 %solo, i1 false, i1 %par
  br i1 %shared, label %check, label %caller
check:
  %first = icmp eq i64 %i, %start
  br i1 %first, label %onteam, label %scan
scan:
  %asleep = call i64 @team_announce(ptr %team)
  %anyone = icmp ne i64 %asleep, 0
  br i1 %anyone, label %stop, label %onteam
stop:
  ret i64 %i
onteam:
  call void @team_run(ptr %team, ptr %job, ptr %argv, i64 %ext, i64 %gr)
  br label %next
caller:
  store i64 0, ptr %nextone, align 8
  store i64 %ext, ptr %endone, align 8
  call void %job(ptr %argv, ptr %one, i64 1, i64 0, i64 %ext, i64 %gr)
  br label %next
next:
  %i1 = add i64 %i, 1
  br label %loop
done:
  ret i64 %n
}}
"""


def team_ir(pause: str) -> str:
    status = (f"  %sw = add i64 %w, 1\n  %sidx = mul i64 %sw, {LINE}\n"
              "  %st = getelementptr i64, ptr %team, i64 %sidx\n")
    header = "\n".join(
        f"  %{n}p = getelementptr i64, ptr %team, i64 {i}"
        for n, i in (("fn", _FN), ("argv", _ARGV), ("threads", _THREADS), ("ext", _EXTENT), ("grain", _GRAIN),
                     ("park", _PARK), ("open", _OPEN), ("active", _ACTIVE))
    ) + (  # the claim block (`parallel`) follows the header and status lines
        f"\n  %tn = load i64, ptr %threadsp, align 8\n  %cbase = mul i64 %tn, {LINE}\n"
        "  %claims = getelementptr i64, ptr %team, i64 %cbase"
    )
    return f"""
define void @team_worker(ptr %team, i64 %w, i64 %limit) {{
entry:
{status}{header}
  store atomic i64 {SPINNING}, ptr %st release, align 8
  br label %loop
loop:
  %spins = phi i64 [0, %entry], [0, %run], [%spins, %leave], [%spins1, %idle], [0, %sleep], [0, %resume]
  %last = phi i64 [0, %entry], [%o, %run], [%last, %leave], [%last, %idle], [%last, %sleep], [%last, %resume]
  %o = load atomic i64, ptr %openp acquire, align 8
  %isopen = icmp sgt i64 %o, 0
  %fresh = icmp ne i64 %o, %last
  %new = and i1 %isopen, %fresh
  br i1 %new, label %join, label %check
join:
  %a0 = atomicrmw add ptr %activep, i64 1 seq_cst, align 8
  %o2 = load atomic i64, ptr %openp seq_cst, align 8
  %same = icmp eq i64 %o2, %o
  br i1 %same, label %run, label %leave
run:
  %fn = load ptr, ptr %fnp, align 8
  %argv = load ptr, ptr %argvp, align 8
  %ext = load i64, ptr %extp, align 8
  %gr = load i64, ptr %grainp, align 8
  call void %fn(ptr %argv, ptr %claims, i64 %tn, i64 %sw, i64 %ext, i64 %gr)
  %a1 = atomicrmw sub ptr %activep, i64 1 release, align 8
  br label %loop
leave:
  %a2 = atomicrmw sub ptr %activep, i64 1 release, align 8
  br label %loop
check:
  %pk = load atomic i64, ptr %parkp monotonic, align 8
  %nap = icmp eq i64 %pk, {PARKED}
  br i1 %nap, label %sleep, label %count
count:
  %pending = icmp eq i64 %pk, {PENDING}
  %spins1 = add i64 %spins, 1
  %idling = icmp slt i64 %spins1, %limit
  %more = or i1 %idling, %pending
  br i1 %more, label %idle, label %sleep
idle:
{pause}
  br label %loop
sleep:
  %r = cmpxchg ptr %st, i64 {SPINNING}, i64 {SLEEPING} seq_cst seq_cst, align 8
  %slept = extractvalue {{ i64, i1 }} %r, 1
  br i1 %slept, label %recheck, label %loop
recheck:
  %pk2 = load atomic i64, ptr %parkp seq_cst, align 8
  %called = icmp eq i64 %pk2, {PENDING}
  %o3 = load atomic i64, ptr %openp seq_cst, align 8
  %open3 = icmp sgt i64 %o3, 0
  %fresh3 = icmp ne i64 %o3, %last
  %new3 = and i1 %open3, %fresh3
  %missed = or i1 %called, %new3
  br i1 %missed, label %resume, label %out
resume:
  store atomic i64 {SPINNING}, ptr %st seq_cst, align 8
  br label %loop
out:
  ret void
}}

define void @team_run(ptr %team, ptr %job, ptr %argvv, i64 %extent, i64 %grain) {{
entry:
{header}
  store ptr %job, ptr %fnp, align 8
  store ptr %argvv, ptr %argvp, align 8
  store i64 %extent, ptr %extp, align 8
  store i64 %grain, ptr %grainp, align 8
  br label %init
init:
  %r = phi i64 [0, %entry], [%r1, %init]
  %line = mul i64 %r, {LINE}
  %nextr = getelementptr i64, ptr %claims, i64 %line
  %endr = getelementptr i64, ptr %nextr, i64 {END}
  %lo0 = mul i64 %r, %extent
  %lo = sdiv i64 %lo0, %tn
  %r1 = add i64 %r, 1
  %hi0 = mul i64 %r1, %extent
  %hi = sdiv i64 %hi0, %tn
  store i64 %lo, ptr %nextr, align 8
  store i64 %hi, ptr %endr, align 8
  %filled = icmp sge i64 %r1, %tn
  br i1 %filled, label %go, label %init
go:
  %closed = load i64, ptr %openp, align 8
  %gen = sub i64 1, %closed
  store atomic i64 %gen, ptr %openp seq_cst, align 8
  %settled = cmpxchg ptr %parkp, i64 {PENDING}, i64 0 seq_cst seq_cst, align 8
  call void %job(ptr %argvv, ptr %claims, i64 %tn, i64 0, i64 %extent, i64 %grain)
  %shut = sub i64 0, %gen
  store atomic i64 %shut, ptr %openp seq_cst, align 8
  br label %wait
wait:
  %n = load atomic i64, ptr %activep seq_cst, align 8
  %busy = icmp ne i64 %n, 0
  br i1 %busy, label %relax, label %done
relax:
{pause}
  br label %wait
done:
  ret void
}}
"""
