#!/usr/bin/env bash
# Run a command with all its output in a log file, out of the console's way:
#   bash scripts/quietly.sh [--append] [--silent] [--name TEXT] [--show PREFIX] LOGFILE -- COMMAND [ARGS...]
# It says in one line what it is running and where the log is (--silent: not even that), runs COMMAND with its
# stdout and stderr into LOGFILE (emptied first; --append: added to the end), and exits with COMMAND's status. When
# COMMAND fails, one line names it, its exit status and the log, and the log's last lines follow (QUIETLY_TAIL of
# them, 30 unless set), all on stderr. --name TEXT: what the lines call the command (default: the command itself).
# --show PREFIX: the command's lines that start with PREFIX (its progress) are shown on the console too, as they come.
set -uo pipefail
append=false silent=false name= show=
while [ $# -gt 0 ]; do
  case $1 in
    --append) append=true; shift ;;
    --silent) silent=true; shift ;;
    --name) name=${2:?--name needs a text}; shift 2 ;;
    --show) show=${2:?--show needs a prefix}; shift 2 ;;
    *) break ;;
  esac
done
if [ $# -lt 3 ] || [ "$2" != -- ]; then
  echo "usage: bash scripts/quietly.sh [--append] [--silent] [--name TEXT] [--show PREFIX] LOGFILE -- COMMAND [ARGS...]" >&2
  exit 2
fi
log=$1
shift 2
name=${name:-$*}
mkdir -p "$(dirname "$log")"
$append || : >"$log"
$silent || echo "qkviz: $name (its output: $log)"
printf -- '--- %s: %s (%s)\n' "$name" "$*" "$(date '+%Y-%m-%d %H:%M:%S')" >>"$log"
if [ -n "$show" ]; then
  "$@" 2>&1 </dev/null | tee -a "$log" | awk -v prefix="$show" 'index($0, prefix) == 1 { print; fflush() }'
  status=${PIPESTATUS[0]}
else
  "$@" >>"$log" 2>&1 </dev/null
  status=$?
fi
if [ "$status" -ne 0 ]; then
  lines=${QUIETLY_TAIL:-30}
  {
    echo "qkviz: $name failed (exit status $status); the last $lines lines of its log, $log:"
    tail -n "$lines" "$log" | sed 's/^/    /'
  } >&2
fi
exit "$status"
