#!/bin/bash
# assemble.sh CALLDIR BUNDLE... : slim copies of the bundles (no TVM runtime, wheels, builders: the same in each)
# and one compressed runtime, rt.tar.xz, that the device script unpacks into each.
set -e
call=$1; shift
rm -rf $call; mkdir -p $call
first=$1
for b in "$@"; do
  name=$(basename $b); name=${name#.bundle_}
  mkdir -p $call/$name
  (cd $b && tar cf - --exclude=./tvm_runtime --exclude=./wheels --exclude=./builders .) | tar -C $call/$name -xf -
done
(cd $first && tar cf - tvm_runtime wheels builders) | xz -T2 -6 > $call/rt.tar.xz
du -sh $call $call/*
