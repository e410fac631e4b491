import sys, re, glob, collections
# The acceptance time of a load run and its steps (sluice_intake_phase_duration_seconds:
# reserve, commit, project), summed over the gateway-<i>.metrics files the run saved in its
# directory (the first argument): count, mean and the histogram bucket holding p50 / p90 / p99,
# in ms. Used by loadtest/waits.sh.
buckets = collections.defaultdict(lambda: collections.defaultdict(float))
counts = collections.defaultdict(float); sums = collections.defaultdict(float)
for f in glob.glob(sys.argv[1] + '/gateway-*.metrics'):
    for line in open(f):
        m = re.match(r'(sluice_intake_phase_duration_seconds|sluice_acceptance_duration_seconds|sluice_intake_batch_entries|sluice_group_commit_batch_size)_(bucket|count|sum)\{?(.*?)\}? ([0-9.e+-]+|\+Inf)$', line.strip())
        if not m: continue
        fam, kind, labels, v = m.groups()
        lab = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        key = fam + ('/' + lab['phase'] if 'phase' in lab else '')
        if kind == 'bucket':
            buckets[key][float('inf') if lab['le'] == '+Inf' else float(lab['le'])] += float(v)
        elif kind == 'count': counts[key] += float(v)
        else: sums[key] += float(v)
def q(b, p):
    total = b[float('inf')]
    for le in sorted(b):
        if b[le] >= p * total: return le
for key in sorted(counts):
    b = buckets[key]
    if not counts[key]: continue
    unit = 1000 if 'seconds' in key else 1
    print(f"{key}: n={counts[key]:.0f} mean={sums[key]/counts[key]*unit:.1f} p50<={q(b,.5)*unit:g} p90<={q(b,.9)*unit:g} p99<={q(b,.99)*unit:g}")
