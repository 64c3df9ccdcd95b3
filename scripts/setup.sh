#!/usr/bin/env bash
# One command for a fresh machine: install what sbx needs (Debian packages),
# build it, run a first sandbox, and start the service (sbxd) on its embedded
# defaults -- 127.0.0.1:7700, state in /var/lib/sbx -- with a new API key.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
scripts/build.sh build
echo "sbx: a first one-shot sandbox: python3 inside, no network, 1 GiB memory, 512 MiB disk"
./build/sbx run -- python3 -c 'import os, socket; print(f"hello from {socket.gethostname()}: uid {os.getuid()}, cwd {os.getcwd()}")'

home=${SBX_HOME:-/var/lib/sbx}
url=http://127.0.0.1:7700
if curl -sf "$url/v1/health" >/dev/null 2>&1; then
  echo "sbx: sbxd is already running at $url"
else
  mkdir -p "$home"
  nohup ./build/sbxd --home "$home" >>"$home/sbxd.log" 2>&1 </dev/null &
  echo $! >"$home/sbxd.pid"
  echo "sbx: started sbxd (pid $!) at $url, state in $home, log in $home/sbxd.log"
  for _ in $(seq 100); do curl -sf "$url/v1/health" >/dev/null 2>&1 && break; sleep 0.05; done
fi
key=$(./build/sbxd keys create --name "setup-$(date +%s)" --home "$home" 2>/dev/null)
export SBX_URL=$url SBX_API_KEY=$key
id=$(./build/sbx create)
echo "sbx: sandbox $id: running a command in it through the API"
./build/sbx exec "$id" -- sh -c 'echo "hello from $(hostname), $(nproc) vCPU"; id'
./build/sbx kill "$id"
cat <<MSG

sbxd runs at $url.  Your API key (shown once):

  export SBX_URL=$url SBX_API_KEY=$key
  ./build/sbx create                    # prints a sandbox id
  ./build/sbx exec ID -- python3 -c 'print(6*7)'
  ./build/sbx shell ID                  # an interactive terminal in it

Stop sbxd with: kill \$(cat $home/sbxd.pid)   (its sandboxes keep running; a new sbxd re-attaches)
MSG
