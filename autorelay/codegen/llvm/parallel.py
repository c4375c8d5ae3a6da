"""How a parallel segment's loop is shared between threads: each thread owns a contiguous home
range of the loop and claims chunks of it; a thread done with its own range takes chunks from the
others' (work stealing), so a thread on a busy core still just does less of the loop.

Every parallel segment `@S` (`void @S(ptr %buffers..., i64 %begin, i64 %end)`, see `emit`) gets

* a driver `@S_par(ptr %buffers..., ptr %claims, i64 %threads, i64 %tid, i64 %extent, i64 %grain)`
  that thread `tid` of `threads` runs once: it claims `grain` iterations at a time from the home
  ranges in the claim block, its own first, then each other thread's in turn;
* a job thunk `@S_job(ptr %argv, ptr %claims, i64 %threads, i64 %tid, i64 %extent, i64 %grain)`:
  the driver behind one signature for every kernel (buffer addresses from the array `argv`),
  which is what the native thread team (`team.py`) and `run_alone` call. A serial segment gets a
  thunk of the same signature too (`serial_thunk`), so a model's kernel calls can run as one
  native program (`team_program`).

The claim block holds, per thread r, on a cache line of its own, the next
iteration of r's home range and the range's end. The caller fills it before the job opens; claims
are atomic adds on those counters, so a chunk is run by exactly one thread.

Why home ranges rather than one shared counter handing out chunks in arrival order: consecutive
kernels of a model split their (batch, channel block, row) loops alike, so with home ranges thread
r computes the channels in the next kernel whose inputs it has just written, and they are still
in its core's cache. With one counter the chunks fell to whichever thread came first, so about
half of every input crossed between cores. Measured on the 2-core AVX-512 host with the same tuned
builds (each side in its own process, alternated): MobileNet-v2 3.78-3.81 ms a call against
4.36-4.44 with the shared counter, its depthwise layers 1.7-2.4x faster inside the model;
ResNet-18 10.6-11.0 ms against 11.7-12.6. Stealing keeps what the shared counter was for: a core
that another process is using finishes its range late, and the other thread takes the rest of it.
"""

from __future__ import annotations

LINE = 8  # i64 words per cache line: each thread's counter and end on a line of their own
NEXT, END = 0, 1  # the words of a home range's line


def home_range(r: int, threads: int, extent: int) -> tuple[int, int]:
    """Thread r's home range of a loop of `extent` iterations split `threads` ways (as the team's
    native code computes it)."""
    return r * extent // threads, (r + 1) * extent // threads


def driver_name(segment: str) -> str:
    return f"{segment}_par"


def job_name(segment: str) -> str:
    return f"{segment}_job"


# the parameters a job thunk passes on to its driver (written the same in a definition and a call)
_JOB = "ptr %claims, i64 %threads, i64 %tid, i64 %extent, i64 %grain"


def _buffer_loads(nbuffers: int) -> list[str]:
    """The buffer addresses %b0.. loaded from the array %argv."""
    return [line for i in range(nbuffers)
            for line in (f"  %p{i} = getelementptr ptr, ptr %argv, i64 {i}",
                         f"  %b{i} = load ptr, ptr %p{i}, align 8")]


def _buffer_args(nbuffers: int) -> str:
    return ", ".join(f"ptr %b{i}" for i in range(nbuffers))


def job_thunk(segment: str, nbuffers: int) -> str:
    """The segment's job thunk (see the module docstring)."""
    return "\n".join(
        [
            f"define void @{job_name(segment)}(ptr %argv, {_JOB}) #0 {{",
            "entry:",
            *_buffer_loads(nbuffers),
            f"  call void @{driver_name(segment)}({_buffer_args(nbuffers)}, {_JOB})",
            "  ret void",
            "}",
        ]
    )


def serial_thunk(segment: str, nbuffers: int) -> str:
    """A serial segment's job thunk: the same signature as a parallel one's (so a native program
    of kernel calls, `team.py`'s `team_program`, calls every segment alike); it runs the segment
    once, whatever the claim block says."""
    return "\n".join(
        [
            f"define void @{job_name(segment)}(ptr %argv, {_JOB}) #0 {{",
            "entry:",
            *_buffer_loads(nbuffers),
            f"  call void @{segment}({_buffer_args(nbuffers)}, i64 0, i64 0) #1",
            "  ret void",
            "}",
        ]
    )


def parallel_driver(segment: str, nbuffers: int) -> str:
    """The segment's driver (see the module docstring): for k = 0 .. threads-1, the home range of
    thread (tid + k) mod threads, claimed `grain` iterations at a time until it is exhausted. The
    segment is called, not inlined (`#1`), so the O3 pipeline and instruction selection handle its
    body once."""
    params = ", ".join(f"ptr noalias %b{i}" for i in range(nbuffers))
    args = _buffer_args(nbuffers)
    return "\n".join(
        [
            f"define void @{driver_name(segment)}({params}, {_JOB}) #0 {{",
            "entry:",
            "  br label %range",
            "range:",
            "  %k = phi i64 [0, %entry], [%k1, %next]",
            "  %rk = add i64 %tid, %k",
            "  %wrap = icmp sge i64 %rk, %threads",
            "  %rk0 = sub i64 %rk, %threads",
            "  %r = select i1 %wrap, i64 %rk0, i64 %rk",
            f"  %line = mul i64 %r, {LINE}",
            "  %counter = getelementptr i64, ptr %claims, i64 %line",
            f"  %endp = getelementptr i64, ptr %counter, i64 {END}",
            "  %end = load i64, ptr %endp, align 8",
            "  br label %claim",
            "claim:",
            "  %begin = atomicrmw add ptr %counter, i64 %grain monotonic, align 8",
            "  %more = icmp slt i64 %begin, %end",
            "  br i1 %more, label %run, label %next",
            "run:",
            "  %stop = add nsw i64 %begin, %grain",
            "  %short = icmp slt i64 %stop, %end",
            "  %last = select i1 %short, i64 %stop, i64 %end",
            f"  call void @{segment}({args}, i64 %begin, i64 %last) #1",
            "  br label %claim",
            "next:",
            "  %k1 = add i64 %k, 1",
            "  %left = icmp slt i64 %k1, %threads",
            "  br i1 %left, label %range, label %done",
            "done:",
            "  ret void",
            "}",
        ]
    )


__all__ = ["END", "LINE", "NEXT", "driver_name", "home_range", "job_name", "job_thunk", "parallel_driver",
           "serial_thunk"]
