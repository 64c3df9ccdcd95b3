# bench/lib.sh - what the service benchmarks share (sourced by api.sh, lifecycle.sh, mcp.sh):
# private sbxd daemons under $work, one key, and their orderly end.
# The caller sets BUILD, work (a fresh directory) and die(); this sets key.

key=bench-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
bwrap_cmd=(bwrap --unshare-all --die-with-parent --ro-bind /usr /usr --symlink usr/lib64 /lib64
  --symlink usr/lib /lib --symlink usr/bin /bin --symlink usr/sbin /sbin --proc /proc --dev /dev --tmpfs /tmp)

# start_sbxd NAME ARGS... -> prints its URL; its pid goes to $work/NAME.pid, its log to NAME.log.
# Started inside $(...), it is not our child: stop it with stop_sbxd.
start_sbxd() {
  local name=$1
  shift
  SBX_API_KEY=$key "$BUILD/sbxd" --listen 127.0.0.1:0 --home "$work/$name" "$@" >/dev/null 2>"$work/$name.log" &
  echo $! >"$work/$name.pid"
  for _ in $(seq 200); do grep -q 'event=listening' "$work/$name.log" 2>/dev/null && break; sleep 0.05; done
  local a
  a=$(sed -n 's/.*event=listening address=\([^ ]*\).*/\1/p' "$work/$name.log")
  [[ -n $a ]] || { cat "$work/$name.log" >&2; die "sbxd did not start"; }
  echo "http://$a"
}

# stop_sbxd NAME: delete its sandboxes through the API (they outlive sbxd by design), then
# SIGTERM it and wait until it is gone.
stop_sbxd() {
  local pid url
  pid=$(cat "$work/$1.pid" 2>/dev/null) || return 0
  url=http://$(sed -n 's/.*event=listening address=\([^ ]*\).*/\1/p' "$work/$1.log")
  kill -0 "$pid" 2>/dev/null || return 0
  for id in $(curl -s -H "Authorization: Bearer $key" "$url/v1/sandboxes" |
    python3 -c 'import json,sys; [print(s["id"]) for s in json.load(sys.stdin).get("sandboxes", [])]' 2>/dev/null); do
    curl -s -X DELETE -H "Authorization: Bearer $key" "$url/v1/sandboxes/$id" >/dev/null || true
  done
  kill "$pid" 2>/dev/null
  while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
}

# stop_all_sbxd: every daemon started here (the EXIT trap's part)
stop_all_sbxd() {
  local f
  for f in "$work"/*.pid; do
    [[ -f $f ]] && stop_sbxd "$(basename "$f" .pid)"
  done
}

# pool_ready URL N: wait until the base template's warm pool holds N sandboxes
pool_ready() {
  for _ in $(seq 1200); do
    curl -s -H "Authorization: Bearer $key" "$1/metrics" | grep -q "^sbx_pool_ready{template=\"base\"} $2\$" && return
    sleep 0.1
  done
  die "the pool of $1 did not fill"
}
