"""Drive `wrk` (C, epoll; https://github.com/wg/wrk) from the benchmarks: it costs the server a
fraction of the CPU the pure-Python load generator (bench/loadgen.py) does, which matters on a
2-core machine where both share the cores.

wrk is closed loop: each connection sends its next request when the previous answer came, and
latency is measured from send to answer. It has no fixed-rate mode; a lower load is obtained
with fewer connections. Request bodies come from a generated Lua script (a temporary file).
"""

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3, "h": 3600e3}
_TIME = r"([\d.]+)(us|ms|s|m|h)"


def available() -> bool:
    return shutil.which("wrk") is not None


@dataclass
class Result:
    connections: int
    requests: int
    seconds: float
    rps: float
    p50_ms: float
    p99_ms: float
    errors: int  # answers >= 400 plus socket errors (connect/read/write/timeout)
    replayed: int = 0  # usage: times the pre-built bodies ran out and started over
    output: str = ""


def parse(output: str, connections: int) -> Result:
    def one(pattern, default=None):
        match = re.search(pattern, output, re.M)
        if match is None:
            if default is not None:
                return default
            raise RuntimeError(f"unexpected wrk output:\n{output}")
        return match.groups()

    count, value, unit = one(r"(\d+) requests in " + _TIME)
    latency = {p: float(v) * _UNITS[u] for p, v, u in
               re.findall(r"^\s+(50|99)%\s+" + _TIME + r"\s*$", output, re.M)}
    status = int(one(r"Non-2xx or 3xx responses: (\d+)", ("0",))[0])
    sockets = sum(map(int, one(r"Socket errors: connect (\d+), read (\d+), write (\d+), "
                               r"timeout (\d+)", ("0", "0", "0", "0"))))
    return Result(connections=connections, requests=int(count),
                  seconds=float(value) * _UNITS[unit] / 1e3,
                  rps=float(one(r"Requests/sec:\s+([\d.]+)")[0]),
                  p50_ms=latency.get("50", 0.0), p99_ms=latency.get("99", 0.0),
                  errors=status + sockets, replayed=int(one(r"^replayed: (\d+)", ("0",))[0]),
                  output=output)


def run(url: str, *, connections: int, seconds: float, script: str | None = None,
        args: tuple = (), threads: int = 1) -> Result:
    """One wrk run; `script` is Lua source, `args` reach its init(args)."""
    command = ["wrk", f"-t{min(threads, connections)}", f"-c{connections}",
               f"-d{max(1, round(seconds))}s", "--latency", "--timeout", "10s"]
    with tempfile.TemporaryDirectory(prefix="sluice-wrk-") as tmp:
        if script is not None:
            path = Path(tmp) / "script.lua"
            path.write_text(script)
            command += ["-s", str(path)]
        command += [url, "--", *map(str, args)]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"wrk failed ({done.returncode}): {done.stderr}{done.stdout}")
    return parse(done.stdout, connections)


def lua_string(value: str) -> str:
    """A Lua string literal (ASCII printable kept, everything else as a decimal escape)."""
    out = []
    for ch in value:
        if ch in '"\\' or not (32 <= ord(ch) < 127):
            out.extend(f"\\{b}" for b in ch.encode())
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _headers(headers: dict[str, str]) -> str:
    items = {"Content-Type": "application/json", **headers}
    return "{" + ", ".join(f"[{lua_string(k)}] = {lua_string(v)}" for k, v in items.items()) + "}"


def post_counter_script(path: str, headers: dict[str, str], head: str, tail: str) -> str:
    """POSTs of head .. <tag>-<thread>-<n> .. tail: every body distinct (the tag is init's
    first argument, so give each run its own)."""
    return f"""
local path, headers = {lua_string(path)}, {_headers(headers)}
local head, tail = {lua_string(head)}, {lua_string(tail)}
local prefix, n, threads = "", 0, 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end
function init(args)
  prefix = args[1] .. "-" .. tostring(tid) .. "-"
end
function request()
  n = n + 1
  return wrk.format("POST", path, headers, head .. prefix .. n .. tail)
end
"""


def post_file_script(path: str, headers: dict[str, str]) -> str:
    """POSTs whose bodies are the lines of a file, from byte `offset` for `count` lines
    (init's arguments: file, offset, count), starting over (and counting it) when they run
    out. One wrk thread only: two would send the same bodies."""
    return f"""
local path, headers = {lua_string(path)}, {_headers(headers)}
local f, offset, count, n = nil, 0, 0, 0
local all = {{}}
replays = 0
function setup(thread)
  table.insert(all, thread)
end
function init(args)
  f = assert(io.open(args[1], "rb"))
  offset, count = tonumber(args[2]), tonumber(args[3])
  f:seek("set", offset)
end
function request()
  if n == count then
    f:seek("set", offset)
    n = 0
    replays = replays + 1
  end
  n = n + 1
  return wrk.format("POST", path, headers, f:read("*l"))
end
function done(summary, latency, requests)
  local total = 0
  for _, thread in ipairs(all) do total = total + (thread:get("replays") or 0) end
  io.write("replayed: " .. total .. "\\n")
end
"""
