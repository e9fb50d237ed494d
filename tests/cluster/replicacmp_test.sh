#!/usr/bin/env bash
# replicacmp_test.sh KC_REPLICACMP WORKDIR -- kc_replicacmp against synthetic partition
# directories (docs/testing-cluster.md): identical streams rolled at different offsets, a
# different leader epoch, a changed byte, a lagging replica (with and without --same-end and
# --upto), a torn tail, a corrupt middle segment, differing log start offsets.
set -euo pipefail
TOOL=$1
W=$2
rm -rf "$W"
mkdir -p "$W"
FAILS=0

# mk DIR ROLLS [edits...]: writes 30 batches of 1-5 records (offsets 0..), segments starting at
# the batch indexes in ROLLS (comma separated), then applies edits:
#   epoch:I:E  batch I gets partitionLeaderEpoch E      byte:I     one record byte of batch I flipped
#   drop:N     the last N batches are left out          torn:K     K bytes of a next batch appended
#   junk:S     garbage appended to segment S (not the last)        start:I  batches before I left out
mk() {
  python3 - "$@" <<'PYEOF'
import os, struct, sys, random, zlib
d, rolls = sys.argv[1], [int(x) for x in sys.argv[2].split(',')]
edits = sys.argv[3:]
rnd = random.Random(7)
batches, off = [], 0
for i in range(30):
    n = 1 + i % 5
    recs = bytes(rnd.getrandbits(8) for _ in range(20 * n))
    batches.append([off, n, recs, 3 + i // 10])
    off += n
drop = start = torn = 0
junk = None
flip = set()
for e in edits:
    k, *v = e.split(':')
    if k == 'epoch': batches[int(v[0])][3] = int(v[1])
    elif k == 'byte': flip.add(int(v[0]))
    elif k == 'drop': drop = int(v[0])
    elif k == 'torn': torn = int(v[0])
    elif k == 'junk': junk = int(v[0])
    elif k == 'start': start = int(v[0])
def enc(i, b):
    base, n, recs, epoch = b
    body = struct.pack('>hiqqqhii', 0, n - 1, 1000 + i, 1000 + i, 42, 0, base, n) + recs
    crc = zlib.crc32(body) & 0xffffffff
    if i in flip:  # a flipped byte under an unchanged CRC field
        body = body[:-1] + bytes([body[-1] ^ 1])
    return struct.pack('>qiibI', base, 49 + len(recs), epoch, 2, crc) + body
os.makedirs(d, exist_ok=True)
seg = None
segs = []
keep = list(range(start, 30 - drop))
for i in keep:
    if seg is None or i in rolls:
        seg = open(os.path.join(d, '%020d.log' % batches[i][0]), 'wb')
        segs.append(seg)
    seg.write(enc(i, batches[i]))
if torn and drop:
    seg.write(enc(30 - drop, batches[30 - drop])[:torn])
if junk is not None:
    segs[junk].write(b'\x07' * 80)
for s in segs:
    s.close()
PYEOF
}

# expect RC DESCRIPTION PATTERN ARGS...: run the tool, check its exit code and output
expect() {
  local want=$1 what=$2 pat=$3 rc=0 out
  shift 3
  out=$("$TOOL" "$@" 2>&1) || rc=$?
  if [ "$rc" != "$want" ] || ! grep -q -- "$pat" <<<"$out"; then
    echo "FAIL: $what: exit $rc (want $want), output should match '$pat':" >&2
    echo "$out" >&2
    FAILS=$((FAILS + 1))
  else
    echo "ok: $what"
  fi
}

mk "$W/a" 0,10,20
mk "$W/b" 0,7,15,25
mk "$W/c" 0
expect 0 "same batches, different roll points" "replicacmp: OK: 3 replicas hold the same 30 batches" \
  --same-end "$W/a" "$W/b" "$W/c"

mk "$W/epoch" 0,10 epoch:12:9
expect 1 "different leader epoch" "first difference at offset 33: partitionLeaderEpoch" "$W/a" "$W/epoch"

mk "$W/byte" 0 byte:17
expect 1 "one flipped record byte" "offset 48: bytes (replica 0 vs replica 1)" "$W/a" "$W/byte"

mk "$W/lag" 0,10 drop:4
expect 0 "lagging replica compared up to the smallest log end" "replicacmp: OK: 2 replicas hold the same 26 batches" \
  "$W/a" "$W/lag"
expect 1 "lagging replica with --same-end" "log ends differ" --same-end "$W/a" "$W/lag"
expect 1 "--upto beyond the lagging replica's end" "a replica's log ends early" --upto 85 "$W/a" "$W/lag"

mk "$W/torn" 0,10 drop:1 torn:30
expect 0 "torn tail reported, not compared" "torn tail: 30 bytes" "$W/lag" "$W/torn"

mk "$W/junk" 0,10,20 junk:0
expect 2 "garbage in a middle segment is an error" "not a whole batch" "$W/a" "$W/junk"

mk "$W/late" 10 start:10
expect 0 "different log start offsets: compared from the highest" "same 20 batches" "$W/a" "$W/late"

expect 2 "missing directory" "No such file" "$W/a" "$W/nonexistent"
expect 2 "one replica only is a usage error" "usage" "$W/a"

[ "$FAILS" = 0 ] && echo "replicacmp_test: PASS" && exit 0
echo "replicacmp_test: $FAILS failure(s)" >&2
exit 1
