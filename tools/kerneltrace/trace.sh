#!/bin/bash
# trace.sh runs a command under kerneltrace.c (built here, once, against
# the CUPTI it finds) and prints summarize.py's tables of its most common
# replay:
#
#	tools/kerneltrace/trace.sh [-o k.csv] [-p N] -- reel bench --synthetic dory-4b --device cuda --tokens 64
#
# -o keeps the CSV (default: a temporary file), -p N lists the first N
# kernels of a replay one by one. CUPTI is looked for under $CUPTI, then
# the CUDA toolkit's folders.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out="" positions=0
while [ $# -gt 0 ]; do
	case "$1" in
	-o) out=$2; shift 2 ;;
	-p) positions=$2; shift 2 ;;
	--) shift; break ;;
	*) echo "trace.sh: unknown flag $1 (want -o FILE, -p N, then -- and the command)" >&2; exit 2 ;;
	esac
done
[ $# -gt 0 ] || { echo "trace.sh: no command after --" >&2; exit 2; }
header=$(find ${CUPTI:-} /usr/local/cuda* -name cupti.h -path '*include*' 2>/dev/null | head -1 || true)
lib=$(find ${CUPTI:-} /usr/local/cuda* -name 'libcupti.so*' 2>/dev/null | head -1 || true)
[ -n "$header" ] && [ -n "$lib" ] || { echo "trace.sh: no CUPTI (cupti.h and libcupti.so) under ${CUPTI:-} /usr/local/cuda*; set CUPTI" >&2; exit 1; }
so=${TMPDIR:-/tmp}/libkerneltrace.so
cuda=$(find /usr/local/cuda* -name cuda.h -path '*include*' 2>/dev/null | head -1 || true)
gcc -O2 -shared -fPIC -I"$(dirname "$header")" ${cuda:+-I"$(dirname "$cuda")"} "$here/kerneltrace.c" -L"$(dirname "$lib")" -lcupti -lpthread -o "$so"
csv=${out:-$(mktemp --suffix .csv)}
LD_LIBRARY_PATH="$(dirname "$lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" CUDA_INJECTION64_PATH="$so" KERNELTRACE_OUT="$csv" "$@"
python3 "$here/summarize.py" "$csv" --positions "$positions"
[ -n "$out" ] || rm -f "$csv"
