# stamp.sh: source_stamp DIMS DTYPES ENV: one line naming a build of this tree's sources: the
# request (head dims, dtypes, the added environment) and a hash of every file the module is built
# from (cuda/, backend/, routers/, CMakeLists.txt, setup.py; caches left out). prebuild.sh writes
# it beside a module built here; device_env.sh's build_copy compares it on the device's copy of
# the tree (the same files: the device tool sends the tracked and the untracked, unignored ones).
source_stamp() {
  local hash
  hash=$(find cuda backend routers CMakeLists.txt setup.py -type f ! -path '*/__pycache__/*' ! -name '*.pyc' \
    -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
  printf 'dims=%s dtypes=%s env=%s src=%s\n' "$1" "$2" "$3" "$hash"
}
