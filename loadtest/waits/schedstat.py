# Samples the CPU time and run-queue wait (/proc/<pid>/task/*/schedstat, every thread) of the
# Sluice, Redis, PostgreSQL and load-generator processes every 0.25 s until the file named by the
# first argument exists; prints each kind's totals over the span (each process's last sample less
# its first) and the machine's CPU pressure (/proc/pressure/cpu, "some") over it.
# Used by loadtest/waits.sh.
import os, re, sys, time, collections
def kind(cmd):
    if 'sluice-loadtest' in cmd: return 'loadtest'
    if re.search(r'/sluice (serve|execute|dev)', cmd): return 'sluice ' + re.search(r'/sluice (\w+)', cmd).group(1)
    if cmd.startswith('redis-server'): return 'redis-server'
    if cmd.startswith('postgres'): return 'postgres'
    return None
last = {}
def psi():
    return int(re.search(r'some .*total=(\d+)', open('/proc/pressure/cpu').read()).group(1))
start_psi, start = psi(), time.time()
first = {}
while not os.path.exists(sys.argv[1]):
    for pid in os.listdir('/proc'):
        if not pid.isdigit(): continue
        try:
            cmd = open(f'/proc/{pid}/cmdline').read().replace('\0', ' ')
            k = kind(cmd)
            if not k: continue
            run = wait = 0
            for tid in os.listdir(f'/proc/{pid}/task'):
                r, w, _ = map(int, open(f'/proc/{pid}/task/{tid}/schedstat').read().split())
                run += r; wait += w
            first.setdefault(pid, (run, wait))
            last[pid] = (k, run, wait)
        except OSError:
            pass
    time.sleep(0.25)
span = time.time() - start
tot = collections.defaultdict(lambda: [0, 0, 0])
for pid, (k, run, wait) in last.items():
    r0, w0 = first[pid]
    tot[k][0] += run - r0; tot[k][1] += wait - w0; tot[k][2] += 1
print(f"span {span:.1f} s, CPU pressure (some) {100 * (psi() - start_psi) / 1e6 / span:.0f} % of the span")
for k, (run, wait, n) in sorted(tot.items()):
    print(f"{k:16} x{n}: cpu {run/1e9:6.1f} s  run-queue wait {wait/1e9:6.1f} s  wait/cpu {wait/max(run,1):.2f}")
