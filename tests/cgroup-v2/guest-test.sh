#!/bin/busybox sh
# guest-test.sh - runs as PID 1 of a qemu guest whose kernel has cgroup v2
# only (see run.sh).  Sets up what systemd does for a delegated unit, then
# checks sbx run's v2 paths: refusing a shared cgroup, nesting under
# SBX_CGROUP_PARENT, moving itself into a leaf when alone, the limits
# (memory.max, memory.swap.max, cpu.max, pids.max), OOM and timeout reports,
# init outside the workload's cgroup, and cleanup after SIGKILL; then sbxd's
# (dynamic: it runs on the host's /usr) pause and resume through
# cgroup.freeze, a snapshot, and the clean-up of a deleted paused sandbox.
# Ends with "V2 SUMMARY: N passed, M failed" and powers the guest off.
/bin/busybox --install -s /bin
export PATH=/bin:/sbx
mount -t cgroup2 none /sys/fs/cgroup || echo "no cgroup2"
mount -t tmpfs t /tmp
# what systemd does for a delegated unit: controllers enabled down to it
echo "+memory +cpu +pids" > /sys/fs/cgroup/cgroup.subtree_control
mkdir /sys/fs/cgroup/test && echo "+memory +cpu +pids" > /sys/fs/cgroup/test/cgroup.subtree_control
mkdir /sys/fs/cgroup/test/shell /sys/fs/cgroup/test/sandboxes /sys/fs/cgroup/test/solo
echo $$ > /sys/fs/cgroup/test/shell/cgroup.procs
export SBX_HOME=/var/lib/sbx
H="--ro-bind /sbx/sbx-test-helper:/opt/helper"
pass=0; fail=0
ok() { echo "PASS $1"; pass=$((pass+1)); }
ko() { echo "FAIL $1: $2"; fail=$((fail+1)); }
echo "kernel $(uname -r); cgroup2 only: $(grep -c cgroup2 /proc/mounts) cgroup2 mount, $(grep -wc cgroup /proc/mounts) v1 mounts"

out=$(sbx run -- true 2>&1); rc=$?
[ $rc -eq 125 ] && echo "$out" | grep -q "other processes" && ok shared-cgroup-refused || ko shared-cgroup-refused "rc=$rc $out"

export SBX_CGROUP_PARENT=/test/sandboxes
out=$(sbx run -- sh -c 'cat /proc/self/cgroup; echo hi' 2>&1); rc=$?
[ $rc -eq 0 ] && echo "$out" | grep -q '^0::/$' && ok parent-override-runs || ko parent-override-runs "rc=$rc $out"

out=$(sbx run --memory 32M $H -- /opt/helper memhog 200 2>&1); rc=$?
[ $rc -eq 123 ] && echo "$out" | grep -q "out of memory (limit 32 MiB)" && ok oom-reported || ko oom-reported "rc=$rc $(echo "$out" | tail -2)"

out=$(sbx run --pids 8 $H -- sh -c 'sleep 0.3; exec /opt/helper forkbomb 100' 2>&1); rc=$?
[ $rc -eq 0 ] && echo "$out" | grep -q "forks 7 errno EAGAIN" && ok pids-exact || ko pids-exact "rc=$rc $out"

sbx run --cpus 0.5 --memory 100M -- sleep 2 & p=$!
sleep 1
d=$(ls -d /sys/fs/cgroup/test/sandboxes/sbx-* 2>/dev/null | head -1)
[ "$(cat $d/work/cpu.max 2>/dev/null)" = "50000 100000" ] && ok cpu-max || ko cpu-max "$(cat $d/work/cpu.max 2>&1)"
[ "$(cat $d/work/memory.max 2>/dev/null)" = "104857600" ] && ok memory-max || ko memory-max "$(cat $d/work/memory.max 2>&1)"
[ "$(cat $d/work/memory.swap.max 2>/dev/null)" = "0" ] && ok swap-max || ko swap-max "$(cat $d/work/memory.swap.max 2>&1)"
[ -n "$(cat $d/init/cgroup.procs 2>/dev/null)" ] && ok init-outside-work || ko init-outside-work "init cgroup empty"
[ "$(wc -l < $d/work/cgroup.procs)" = "1" ] && ok work-holds-command || ko work-holds-command "$(cat $d/work/cgroup.procs)"
wait $p; rc=$?
[ $rc -eq 0 ] && ok sleep-exit || ko sleep-exit "rc=$rc"

out=$(sbx run --timeout 1s -- sleep 10 2>&1); rc=$?
[ $rc -eq 124 ] && ok timeout || ko timeout "rc=$rc $out"

sbx run -- sleep 30 & p=$!
sleep 1; kill -9 $p; sleep 2
left=$(ls -d /sys/fs/cgroup/test/sandboxes/sbx-* 2>/dev/null)
[ -z "$left" ] && ok no-cgroups-left-after-sigkill || ko no-cgroups-left-after-sigkill "$left"

unset SBX_CGROUP_PARENT
out=$(sh -c 'echo $$ > /sys/fs/cgroup/test/solo/cgroup.procs; exec sbx run -- sh -c "cat /proc/self/cgroup"' 2>&1); rc=$?
[ $rc -eq 0 ] && [ -d /sys/fs/cgroup/test/solo/sbx-self ] && ok alone-moves-to-leaf || ko alone-moves-to-leaf "rc=$rc $out"
left=$(ls -d /sys/fs/cgroup/test/solo/sbx-[0-9a-f]* 2>/dev/null)
[ -z "$left" ] && ok solo-cleaned || ko solo-cleaned "$left"

# sbxd on pure v2: pause is cgroup.freeze on `work`, snapshots work the same
export SBX_CGROUP_PARENT=/test/sandboxes SBX_INIT=/sbx/sbx-init
ip link set lo up
K=guest-key-0123456789abcdef
SBX_API_KEY=$K /sbx/sbxd --listen 127.0.0.1:7700 --home /tmp/sbxd --pool 0 2>/tmp/sbxd.log & d=$!
for i in $(seq 100); do grep -q event=listening /tmp/sbxd.log && break; sleep 0.2; done
api() { m=$1; p=$2; shift 2; /usr/bin/curl -s -X "$m" -H "Authorization: Bearer $K" -H 'Content-Type: application/json' "$@" "http://127.0.0.1:7700$p"; }
jid() { sed -n 's/^{"id":"\([0-9a-f]*\)".*/\1/p'; }
sid=$(api POST /v1/sandboxes -d '{}' | jid)
if [ -n "$sid" ]; then ok sbxd-create; else ko sbxd-create "$(tail -3 /tmp/sbxd.log)"; fi
api POST /v1/sandboxes/$sid/commands -d '{"cmd":"echo kept > f; while :; do :; done","background":true}' >/dev/null
w=/sys/fs/cgroup/test/sandboxes/sbx-$sid/work
sleep 1
out=$(api POST /v1/sandboxes/$sid/pause)
u1=$(sed -n 's/^usage_usec //p' $w/cpu.stat); sleep 1; u2=$(sed -n 's/^usage_usec //p' $w/cpu.stat)
echo "$out" | grep -q '"state":"paused"' && [ "$(cat $w/cgroup.freeze)" = 1 ] && grep -q '^frozen 1' $w/cgroup.events &&
  [ $((u2 - u1)) -lt 20000 ] && ok sbxd-pause-freezes || ko sbxd-pause-freezes "$out freeze=$(cat $w/cgroup.freeze) cpu=$((u2 - u1))us"
out=$(api POST /v1/sandboxes/$sid/resume)
u1=$(sed -n 's/^usage_usec //p' $w/cpu.stat); sleep 1; u2=$(sed -n 's/^usage_usec //p' $w/cpu.stat)
echo "$out" | grep -q '"state":"running"' && grep -q '^frozen 0' $w/cgroup.events && [ $((u2 - u1)) -gt 200000 ] &&
  ok sbxd-resume-thaws || ko sbxd-resume-thaws "$out cpu=$((u2 - u1))us"
snap=$(api POST /v1/sandboxes/$sid/snapshots | jid)
new=$(api POST /v1/sandboxes -d "{\"snapshot\":\"$snap\"}" | jid)
out=$(api POST /v1/sandboxes/$new/commands -d '{"cmd":"cat f"}')
echo "$out" | grep -q '"stdout":"kept\\n"' && ok sbxd-snapshot || ko sbxd-snapshot "$snap $new $out"
api POST /v1/sandboxes/$sid/pause >/dev/null
api DELETE /v1/sandboxes/$sid; api DELETE /v1/sandboxes/$new
kill $d; wait $d
left=$(ls -d /sys/fs/cgroup/test/sandboxes/sbx-* 2>/dev/null)
[ -z "$left" ] && ok sbxd-paused-delete-cleaned || ko sbxd-paused-delete-cleaned "$left"

echo "V2 SUMMARY: $pass passed, $fail failed"
echo o > /proc/sysrq-trigger
sleep 5
