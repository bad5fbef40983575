#!/bin/sh
# Move an earlier run's output folder DIR to DIR.previous (replacing the one before it), so a
# demo target starts afresh without deleting what the last run (or a `clawrig grade --write`
# there) left: helper-165 lost a run that make demo's `rm -rf` removed unannounced.
set -e
dir=$1
[ -e "$dir" ] || exit 0
rm -rf "$dir.previous"
mv "$dir" "$dir.previous"
echo "make: the earlier $dir is now $dir.previous"
