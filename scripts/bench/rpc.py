"""RPC benchmark: Ping calls/s at concurrency 1 and 64 (p50/p99), and MB/s for 1 MiB bodies.

The server runs in a separate process (multiprocessing, spawn) and the client in this one, both on
uvloop, over loopback, as two nodes of a cluster would. Every phase is bounded by a call count and a
time limit, so the script ends in well under a minute. One line per figure::

    python scripts/bench/rpc.py [--seconds 5] [--mib-calls 400] [--tls] [--authn off|none|token]

``--tls`` runs the same over TLS (the server with rpc_encryption=required and a self-signed certificate,
the client requiring encryption): the cost of encryption per call and per MiB.
``--authn``: the server's authenticator (security/authn.py) on every call: ``off`` none installed,
``none`` installed and the client gives only a user name (a default cluster), ``token`` the client shows
an authn token (verified once, then answered from the authenticator's cache).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import multiprocessing as mp
import os
import statistics
import sys
import time
from multiprocessing.connection import Connection
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import contextlib

from kudu_async.rpc import CallContext, RpcClient, RpcServer
from kudu_async.security import ca, tls
from kudu_async.security.authn import ServerAuthenticator, kudu_token_header
from kudu_async.security.tokens import TokenSigner, TokenSigningKey, TokenVerifier


def _install_uvloop() -> str:
    try:
        import uvloop
    except ImportError:
        return "asyncio"
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return "uvloop"


async def _serve(pipe: Connection, use_tls: bool, authn: str, key: TokenSigningKey | None) -> None:
    server = RpcServer(node_name="bench-server")
    if use_tls:
        own = ca.self_signed("kudu", ["127.0.0.1"], time.time())
        server.tls = tls.ServerTls("required", tls.server_context(own, None))
    if authn != "off":
        verifier = TokenVerifier([key.verification_key()] if key is not None else [])
        server.authenticator = ServerAuthenticator(mode="optional", token_verifier=verifier)

    async def ping(req: Any, ctx: CallContext) -> Any:
        return req

    async def upload(req: Any, ctx: CallContext) -> int:
        return len(req)

    async def echo(req: Any, ctx: CallContext) -> Any:
        return req

    async def cpu(req: Any, ctx: CallContext) -> list[float]:
        t = os.times()
        return [t.user, t.system]

    # "user": the checked path every Write and Scan takes (ACL lookup, then the body decoded).
    server.register("Generic", "Ping", ping, requires="user")
    server.register("Bench", "Cpu", cpu, requires="user")
    server.register("Bench", "Upload", upload, requires="user")
    server.register("Bench", "Echo", echo, requires="user")
    await server.start("127.0.0.1", 0)
    pipe.send(server.port)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, pipe.recv)  # parent says stop (or dies: EOFError)
    await server.stop(1.0)


def _server_main(pipe: Connection, profile: str, use_tls: bool, authn: str, key: TokenSigningKey | None) -> None:
    _install_uvloop()
    if profile:
        from pyinstrument import Profiler

        prof = Profiler(interval=0.0005)
        prof.start()
    with contextlib.suppress(EOFError):
        asyncio.run(_serve(pipe, use_tls, authn, key))
    if profile:
        prof.stop()
        with open(profile, "w") as f:
            f.write(prof.output_text(unicode=False, color=False))


async def _run_phase(
    client: RpcClient, addr: str, service: str, method: str, body: Any, concurrency: int, max_calls: int, seconds: float
) -> tuple[int, float, list[float]]:
    latencies: list[float] = []
    cpu.clear()
    done = 0
    end = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal done
        while done < max_calls and time.perf_counter() < end:
            done += 1
            t0 = time.perf_counter()
            await client.call(addr, service, method, body, timeout_s=30.0)
            latencies.append(time.perf_counter() - t0)

    c0 = os.times()
    s0 = await client.call(addr, "Bench", "Cpu")
    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    dt = time.perf_counter() - t0
    c1 = os.times()
    s1 = await client.call(addr, "Bench", "Cpu")
    cpu["client_user"], cpu["client_sys"] = c1.user - c0.user, c1.system - c0.system
    cpu["server_user"], cpu["server_sys"] = s1[0] - s0[0], s1[1] - s0[1]
    return len(latencies), dt, latencies


cpu: dict[str, float] = {}


def _cpu_line(n: int, unit: str = "us/call") -> str:
    """CPU per call of each process, user+sys (sys = syscalls: socket reads/writes, epoll)."""
    parts = []
    for side in ("client", "server"):
        user, sys_ = cpu[f"{side}_user"] / n * 1e6, cpu[f"{side}_sys"] / n * 1e6
        parts.append(f"{side}={user + sys_:.0f} {unit} (sys {sys_:.0f})")
    return "cpu " + " ".join(parts)


def _pct(lat: list[float], p: float) -> float:
    s = sorted(lat)
    return s[min(len(s) - 1, int(len(s) * p / 100.0))] * 1000.0


async def _bench(
    port: int, seconds: float, mib_calls: int, only: str, use_tls: bool, authorization: bytes | None
) -> None:
    addr = f"127.0.0.1:{port}"
    policy = tls.ClientTls(tls.POLICY_REQUIRED, tls.client_context(None)) if use_tls else None
    client = RpcClient("bench-client", tls=policy)
    client.set_credentials("bench", authorization)
    await client.call(addr, "Generic", "Ping", {})  # connect
    ping_body = {"seq": 1}
    for conc in (1, 64):
        if only and only != f"ping{conc}":
            continue
        await _run_phase(client, addr, "Generic", "Ping", ping_body, conc, 500, 1.0)  # warm-up
        n, dt, lat = await _run_phase(client, addr, "Generic", "Ping", ping_body, conc, 200_000, seconds)
        print(
            f"ping concurrency={conc:<3d} calls={n:<7d} {n / dt:9.0f} calls/s  "
            f"p50={_pct(lat, 50):.3f} ms  p99={_pct(lat, 99):.3f} ms  mean={statistics.fmean(lat) * 1000:.3f} ms  "
            f"{_cpu_line(n)}",
            flush=True,
        )
    mib = os.urandom(1 << 20)
    for method, factor in (("Upload", 1), ("Echo", 2)):
        if only and only != method.lower():
            continue
        await _run_phase(client, addr, "Bench", method, mib, 4, 20, 1.0)
        n, dt, lat = await _run_phase(client, addr, "Bench", method, mib, 4, mib_calls, seconds)
        what = "upload (client->server)" if factor == 1 else "echo (both directions, payload counted once)"
        print(
            f"1MiB {method.lower():<6s} concurrency=4   calls={n:<5d} {n / dt:9.1f} MB/s  "
            f"p50={_pct(lat, 50):.2f} ms  p99={_pct(lat, 99):.2f} ms  {_cpu_line(n, 'us/MiB')}  [{what}]",
            flush=True,
        )
    await client.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5.0, help="time limit per measured phase (default 5)")
    ap.add_argument("--mib-calls", type=int, default=1000, help="max 1 MiB calls per phase (default 1000)")
    ap.add_argument("--only", default="", help="run one phase: ping1, ping64, upload, echo")
    ap.add_argument("--tls", action="store_true", help="TLS on the connection (default: cleartext h2c)")
    ap.add_argument("--authn", choices=("off", "none", "token"), default="off", help="the server's authenticator")
    ap.add_argument("--profile-client", default="", help="write a pyinstrument text profile of the client here")
    ap.add_argument("--profile-server", default="", help="write a pyinstrument text profile of the server here")
    args = ap.parse_args()
    if (args.profile_client or args.profile_server) and importlib.util.find_spec("pyinstrument") is None:
        raise SystemExit("--profile-client/--profile-server need pyinstrument (pip install pyinstrument)")
    loop_name = _install_uvloop()
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    key: TokenSigningKey | None = None
    authorization: bytes | None = None
    if args.authn == "token":
        signer = TokenSigner(rotation_s=3600.0, max_validity_s=3600.0)
        key = signer.new_key(time.time())
        signer.add(key)
        authorization = kudu_token_header(signer.sign("authn", {"user": "bench"}, time.time(), 3600.0))
    proc = ctx.Process(target=_server_main, args=(child, args.profile_server, args.tls, args.authn, key), daemon=True)
    proc.start()
    try:
        if not parent.poll(30):
            raise SystemExit("server process did not start within 30 s")
        port = parent.recv()
        print(
            f"rpc bench: server pid {proc.pid} on 127.0.0.1:{port}, loop={loop_name}, cores={os.cpu_count()}, "
            f"{'TLS' if args.tls else 'cleartext'}, authn={args.authn}"
        )
        prof = None
        if args.profile_client:
            from pyinstrument import Profiler

            prof = Profiler(interval=0.0005)
            prof.start()
        asyncio.run(_bench(port, args.seconds, args.mib_calls, args.only, args.tls, authorization))
        if prof is not None:
            prof.stop()
            with open(args.profile_client, "w") as f:
                f.write(prof.output_text(unicode=False, color=False))
    finally:
        parent.send("stop")
        proc.join(10)
        if proc.is_alive():
            proc.kill()
            proc.join(5)


if __name__ == "__main__":
    main()
