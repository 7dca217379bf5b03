#!/usr/bin/env python3
"""Labeled PSI, Microsoft APSI 0.12's CLI and ours, on the identical simulated link: each
system's receiver reaches its sender through `blindjoin bench-proxy` (a shaping TCP proxy:
per connection and direction a FIFO pipe of --bandwidth with --latency one way; see
crates/cli/src/shape_proxy.rs). This kernel has no netem, and APSI cannot be shaped in-process.

  python3 scripts/apsi_peer_shaped.py --system both --server-n 1048576 --client-n 1024 \\
      --params 1M-1024-cmp --links none,100mbit/10ms --repeat 2 --json
  python3 scripts/apsi_peer_shaped.py --system apsi --server-n 1048576 --client-n 1 \\
      --label-bytes 32 --params 1M-1-32 --links 100mbit/10ms

Data, presets and checks as ../shared/peers/apsi_cli_bench.py: items are 32 random letters,
labels --label-bytes random letters (0: unlabeled), half the queries (at least one) in the DB,
the receiver's output compared with the plaintext answer. Each system's sender is set up once
(APSI: `sender_cli` from the CSV, kept running; ours: `blindjoin run` with `save_db_only`) and
every (repeat, link) pair then runs one online phase of each system, alternating ours and
APSI's. One JSON line per online run (--json) with the fields of apsi_cli_bench.py plus:
`link` (the proxy's shaping), `online_cpu_s_both` (CPU seconds of the receiver process and of
the sender from the receiver's start: the load average does not move it much), `proxy_*_bytes` (TCP payload bytes each way through the proxy:
the same measure for both systems), `proxy_span_s` (first byte read by the proxy to the last
byte it delivered), `load` (the 1-minute load average before the run). Our `online_s` is the
receiver's report (link up to result); `receiver_wall_s` its whole process. APSI's `online_s` is
its receiver process's wall time (as in apsi_cli_bench.py). `online_loopback_bytes` counts both
hops of the proxy (so about twice the bytes).

--blindjoin: the blindjoin binary (our parties, and the proxy unless --proxy names another);
default target/release/blindjoin if it exists, else target/debug/blindjoin.
"""
import argparse, json, os, random, shutil, signal, string, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SHARED = os.path.join(REPO, "..", "shared")
BIN = os.environ.get("APSI_BIN", os.path.join(SHARED, "peers", "apsi", "bin"))
PRESETS = os.path.join(SHARED, "research", "secretflow_reference", "apsi_parameters")
TIMEOUT = 3600


def lo_bytes():
    with open("/sys/class/net/lo/statistics/tx_bytes") as f:
        return int(f.read())


def load1():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(cond, what, proc=None, limit=TIMEOUT):
    t0 = time.time()
    while not cond():
        if proc is not None and proc.poll() is not None:
            sys.exit("%s: the process exited (%s)" % (what, proc.returncode))
        if time.time() - t0 > limit:
            if proc is not None:
                proc.kill()
            sys.exit("%s: not within %d s" % (what, limit))
        time.sleep(0.02)


class Proxy:
    """`blindjoin bench-proxy` from 127.0.0.1:<free port> to `to`, shaped by `link`."""

    def __init__(self, exe, to, link, d):
        self.port = free_port()
        self.out = os.path.join(d, "proxy-%d.jsonl" % self.port)
        cmd = [exe, "bench-proxy", "--listen", "127.0.0.1:%d" % self.port, "--to", to]
        if link != "none":
            bw, lat = link.split("/")
            cmd += ["--bandwidth", bw, "--latency", lat]
        self.f = open(self.out, "w")
        # Its stderr: connections it could not forward (ours retries while its peer is not up).
        self.err = open(self.out + ".err", "w")
        self.p = subprocess.Popen(cmd, stdout=self.f, stderr=self.err)
        wait_for(lambda: "listening" in open(self.out).read(), "bench-proxy", self.p, 30)

    def stop(self):
        self.p.send_signal(signal.SIGINT)
        try:
            self.p.wait(30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.f.close()
        self.err.close()
        for line in open(self.out):
            j = json.loads(line)
            if "total" in j:
                return j["total"]
        return {}


def proxy_fields(t, receiver_connects):
    """The proxy's totals; its client is APSI's receiver but our sender (ours: the receiver
    listens)."""
    up, down = t.get("client_to_server_bytes", 0), t.get("server_to_client_bytes", 0)
    if not receiver_connects:
        up, down = down, up
    return {"proxy_connections": t.get("conn", 0),
            "proxy_receiver_to_sender_bytes": up,
            "proxy_sender_to_receiver_bytes": down,
            "proxy_span_s": round(t.get("last_byte_s", 0) - t.get("first_byte_s", 0), 3)}


def make_data(a, d):
    """The inputs of apsi_cli_bench.py, for APSI (no header) and for ours (a header row)."""
    rnd = random.Random(7)
    word = lambda k: "".join(rnd.choices(string.ascii_letters, k=k))
    items = [word(32) for _ in range(a.server_n)]
    labels = [word(a.label_bytes) for _ in range(a.server_n)] if a.label_bytes else None
    rows = ["%s,%s\n" % (it, labels[i]) if labels else it + "\n" for i, it in enumerate(items)]
    with open(os.path.join(d, "db.csv"), "w") as f:
        f.write("".join(rows))
    with open(os.path.join(d, "db_h.csv"), "w") as f:
        f.write("key,value\n" if labels else "key\n")
        f.write("".join(rows))
    hits = max(1, a.client_n // 2) if a.client_n else 0
    query = rnd.sample(range(a.server_n), hits)
    q = [items[i] for i in query] + [word(31) for _ in range(a.client_n - hits)]
    want = {items[i]: (labels[i] if labels else None) for i in query}
    with open(os.path.join(d, "q.csv"), "w") as f:
        f.write("".join(x + "\n" for x in q))
    with open(os.path.join(d, "q_h.csv"), "w") as f:
        f.write("key\n" + "".join(x + "\n" for x in q))
    return want, labels is not None


def wait_usage(p, limit=TIMEOUT):
    """Waits for `p` (killing it past `limit` s): (exit code, its own rusage)."""
    t0 = time.time()
    while True:
        pid, status, usage = os.wait4(p.pid, os.WNOHANG)
        if pid == p.pid:
            p.returncode = os.waitstatus_to_exitcode(status)
            return p.returncode, usage
        if time.time() - t0 > limit:
            p.kill()
        time.sleep(0.005)


def cpu_s(usage):
    return usage.ru_utime + usage.ru_stime


def proc_cpu_s(pid):
    """CPU seconds so far of a running process (user + system)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid):
    with open("/proc/%d/status" % pid) as f:
        return [int(l.split()[1]) / 1024 for l in f if l.startswith("VmHWM")][0]


class Apsi:
    name = "APSI 0.12 CLI"

    def __init__(self, a, d, params, exe, proxy_exe):
        self.a, self.d, self.exe = a, os.path.join(d, "apsi"), proxy_exe
        os.makedirs(self.d)
        for f in ("db.csv", "q.csv"):
            os.link(os.path.join(d, f), os.path.join(self.d, f))
        self.port = free_port()
        slog = os.path.join(self.d, "s.log")
        t0 = time.time()
        self.sender = subprocess.Popen(
            [os.path.join(BIN, "sender_cli"), "-d", "db.csv", "-p", params, "--port",
             str(self.port), "-t", str(a.threads), "-f", slog, "-s"],
            cwd=self.d, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: os.path.exists(slog) and "listening on port" in open(slog).read(),
                 "sender_cli setup (see %s)" % slog, self.sender)
        self.setup = time.time() - t0

    def online(self, link):
        out = os.path.join(self.d, "out.csv")
        if os.path.exists(out):
            os.remove(out)
        proxy = Proxy(self.exe, "127.0.0.1:%d" % self.port, link, self.d)
        s_cpu0 = proc_cpu_s(self.sender.pid)
        b0, t1 = lo_bytes(), time.time()
        r = subprocess.Popen([os.path.join(BIN, "receiver_cli"), "-q", "q.csv", "-o", "out.csv",
                              "-a", "127.0.0.1", "--port", str(proxy.port), "-t",
                              str(self.a.threads), "-s"],
                             cwd=self.d, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # wait4: this process's own peak RSS and CPU (RUSAGE_CHILDREN would add earlier children).
        _, usage = wait_usage(r)
        online, wire = time.time() - t1, lo_bytes() - b0
        recv_rss = usage.ru_maxrss / 1024
        cpu = proc_cpu_s(self.sender.pid) - s_cpu0 + cpu_s(usage)
        got = {}
        if os.path.exists(out):
            for line in open(out):
                k, _, v = line.rstrip("\n").partition(",")
                got[k] = v
        res = {"setup_s": round(self.setup, 3), "online_s": round(online, 3),
               "online_loopback_bytes": wire, "online_cpu_s_both": round(cpu, 3),
               "sender_peak_rss_mib": round(rss_mib(self.sender.pid), 1),
               "receiver_peak_rss_mib": round(recv_rss, 1)}
        res.update(proxy_fields(proxy.stop(), True))
        return res, r.returncode == 0, got

    def close(self):
        self.sender.kill()
        self.sender.wait()


class Ours:
    name = "blindjoin"

    def __init__(self, a, d, params, exe, proxy_exe):
        self.a, self.d, self.exe = a, os.path.join(d, "ours"), exe
        self.proxy_exe = proxy_exe
        os.makedirs(self.d)
        for f in ("db_h.csv", "q_h.csv"):
            os.link(os.path.join(d, f), os.path.join(self.d, f))
        with open(params) as f, open(os.path.join(self.d, "params.json"), "w") as g:
            g.write(f.read())
        self.write("setup.json", {
            "apsi_sender_config": {"source_file": "db_h.csv", "params_file": "params.json",
                                   "sdb_out_file": "sdb", "save_db_only": True},
            "blindjoin": {"report_path": "setup_report.json"}})
        t0 = time.time()
        self.party("setup.json").wait(TIMEOUT)
        self.setup = time.time() - t0
        if not os.path.exists(os.path.join(self.d, "sdb")):
            sys.exit("our setup wrote no DB file")

    def write(self, name, obj):
        with open(os.path.join(self.d, name), "w") as f:
            json.dump(obj, f)

    def party(self, config, **kw):
        return subprocess.Popen([self.exe, "run", "--quiet", "--threads", str(self.a.threads),
                                 "--config", config], cwd=self.d, stdout=subprocess.DEVNULL,
                                **kw)

    def online(self, link):
        # The receiver ("receiver" sorts first) listens on pr; the sender reaches it through
        # the proxy, which its config names as the receiver's address.
        ps, pr = free_port(), free_port()
        proxy = Proxy(self.proxy_exe, "127.0.0.1:%d" % pr, link, self.d)
        parties = lambda r: {"parties": [{"id": "sender", "host": "127.0.0.1:%d" % ps},
                                         {"id": "receiver", "host": "127.0.0.1:%d" % r}]}
        self.write("online.json", {"apsi_sender_config": {"db_file": "sdb"},
                                   "link_config": parties(proxy.port), "self_link_party": "sender",
                                   "blindjoin": {"report_path": "sender_report.json"}})
        self.write("receiver.json", {
            "apsi_receiver_config": {"query_file": "q_h.csv", "output_file": "result.csv",
                                     "params_file": "params.json"},
            "link_config": parties(pr), "self_link_party": "receiver",
            "blindjoin": {"report_path": "receiver_report.json"}})
        for f in ("result.csv", "sender_report.json", "receiver_report.json"):
            if os.path.exists(os.path.join(self.d, f)):
                os.remove(os.path.join(self.d, f))
        # The sender loads its DB file first (as APSI's sender has its DB in memory before the
        # receiver starts); its connect attempts meanwhile find no receiver behind the proxy.
        t_s = time.time()
        s = self.party("online.json")
        time.sleep(self.a.load_wait)
        s_cpu0 = proc_cpu_s(s.pid)
        b0, t1 = lo_bytes(), time.time()
        r = self.party("receiver.json")
        rc_r, ru_r = wait_usage(r)
        wall, wire = time.time() - t1, lo_bytes() - b0
        rc_s, ru_s = wait_usage(s, 60)
        rep = lambda n: json.load(open(os.path.join(self.d, n)))
        sr, rr = rep("sender_report.json"), rep("receiver_report.json")
        got = {}
        lines = open(os.path.join(self.d, "result.csv")).read().splitlines()[1:]
        for line in lines:
            k, _, v = line.partition(",")
            got[k] = v
        res = {"setup_s": round(self.setup, 3), "online_s": round(rr["online_s"], 3),
               "receiver_wall_s": round(wall, 3), "online_loopback_bytes": wire,
               "online_cpu_s_both": round(cpu_s(ru_r) + cpu_s(ru_s) - s_cpu0, 3),
               "sender_load_s": round(sr["setup_s"], 3),
               "sender_loaded_before_receiver": t_s + sr["setup_s"] < t1,
               "link_bytes_receiver_to_sender": rr["bytes_sent"],
               "link_bytes_sender_to_receiver": rr["bytes_received"],
               "sender_peak_rss_mib": round(sr["peak_rss_bytes"] / 2**20, 1),
               "receiver_peak_rss_mib": round(rr["peak_rss_bytes"] / 2**20, 1)}
        res.update(proxy_fields(proxy.stop(), False))
        return res, rc_r == 0 and rc_s == 0, got

    def close(self):
        pass


def default_exe():
    for p in ("target/release/blindjoin", "target/debug/blindjoin"):
        p = os.path.join(REPO, p)
        if os.path.exists(p):
            return p
    sys.exit("no blindjoin binary: build it, or pass --blindjoin")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--system", choices=["apsi", "blindjoin", "both"], default="both")
    ap.add_argument("--server-n", type=int, default=1 << 16)
    ap.add_argument("--client-n", type=int, default=1)
    ap.add_argument("--label-bytes", type=int, default=0)
    ap.add_argument("--params", default="1M-1-32")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--links", default="none,100mbit/10ms",
                    help="comma-separated: none, or BANDWIDTH/LATENCY as for bench-proxy")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--load-wait", type=float, default=5.0,
                    help="seconds our sender gets to load its DB before our receiver starts")
    ap.add_argument("--blindjoin", default=None)
    ap.add_argument("--proxy", default=None,
                    help="the blindjoin binary that runs bench-proxy (default: --blindjoin)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--keep", action="store_true",
                    help="keep the working directory (inputs, DB files, logs; printed)")
    a = ap.parse_args()
    exe = os.path.abspath(a.blindjoin or default_exe())
    proxy_exe = os.path.abspath(a.proxy or exe)
    params = os.path.abspath(a.params if os.path.exists(a.params)
                             else os.path.join(PRESETS, a.params + ".json"))
    d = tempfile.mkdtemp(prefix="apsi-shaped-")
    want, labeled = make_data(a, d)
    kinds = {"apsi": [Apsi], "blindjoin": [Ours], "both": [Ours, Apsi]}[a.system]
    systems = []
    for k in kinds:
        systems.append(k(a, d, params, exe, proxy_exe))
    ok = True
    try:
        for rep in range(a.repeat):
            for link in a.links.split(","):
                for s in systems:
                    load = load1()
                    res, rc_ok, got = s.online(link)
                    if not labeled:
                        got = {k: None for k in got}
                    correct = rc_ok and got == want
                    ok = ok and correct
                    row = {"system": s.name, "server_n": a.server_n, "client_n": a.client_n,
                           "label_bytes": a.label_bytes, "params": os.path.basename(params),
                           "threads": a.threads, "link": link, "repeat": rep, "load": load}
                    row.update(res)
                    row["correct"] = correct
                    if a.json:
                        print(json.dumps(row), flush=True)
                    else:
                        for k, v in row.items():
                            print("%-32s %s" % (k, v))
                        print(flush=True)
    finally:
        for s in systems:
            s.close()
        if a.keep:
            print("kept " + d, file=sys.stderr)
        else:
            shutil.rmtree(d, ignore_errors=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
